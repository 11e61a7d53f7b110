#!/usr/bin/env python3
"""Lab 01 — ping across nodes, over a VXLAN overlay and over host-gw routes.

Two nodes, one pod on each. The pod on node-1 pings the pod on node-2. With the VXLAN
overlay (flannel.1, VNI 1, UDP 8472) the packet is encapsulated between the nodes;
with host-gw it is routed to the peer node's address. Either way the pod sees the
other pod's own IP (no NAT) and the reply arrives with TTL 62: two routed hops, one
per node. The trace of one echo request is printed for each overlay.

Run with ``--real`` to do the same on real network namespaces (needs root).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Checks, backend, parse_real_flag, save_trace

from app import emulation
from control.session import Session
from netmodel.manifests import load_text

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: lab01}}
spec: {{nodes: 2, overlay: {overlay}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: a, labels: {{app: ping}}}}
spec:
  nodeName: node-1
  containers: [{{name: c, image: busybox}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: b, labels: {{app: ping}}}}
spec:
  nodeName: node-2
  containers: [{{name: c, image: busybox}}]
"""


def run(overlay: str, real: bool, c: Checks) -> None:
    session = Session.ephemeral(load_text(MANIFEST.format(overlay=overlay), source="lab01"))
    b_ip = session.store.get("Pod", "default/b").status.pod_ip  # type: ignore[attr-defined]
    print(f"\n=== overlay {overlay}: pod/default/a (node-1) -> pod/default/b (node-2, {b_ip})")
    if not real:
        trace = emulation.emulator(session).trace("pod/default/a", b_ip, "icmp")
        print(trace.render_text())
        steps = {h.kind for h in trace.hops}
        if overlay == "vxlan":
            c.check("vxlan" in steps, "vxlan: the request is encapsulated between the nodes")
        else:
            c.check("vxlan" not in steps, "host-gw: no encapsulation, routed via the peer node")
    save_trace(session, f"01_ping_across_nodes_{overlay}", "pod/default/a", b_ip, "icmp")
    with backend(session, real=real) as be:
        results = be.ping("pod/default/a", b_ip, 3)
    for i, r in enumerate(results, 1):
        print(
            f"64 bytes from {r.reply_from}: icmp_seq={i} ttl={r.ttl}" if r.ok else f"seq={i} lost"
        )
    c.check(all(r.ok for r in results), f"{overlay}: 3/3 echo replies")
    c.check(
        all(r.reply_from == b_ip for r in results), f"{overlay}: reply from b's own pod IP (no NAT)"
    )
    c.check(all(r.ttl == 62 for r in results), f"{overlay}: TTL 62 on arrival (two routed hops)")


def main() -> None:
    real = parse_real_flag(__doc__ or "")
    c = Checks("lab 01" + (" (real)" if real else ""))
    for overlay in ("vxlan", "host-gw"):
        run(overlay, real, c)
    c.finish()


if __name__ == "__main__":
    main()
