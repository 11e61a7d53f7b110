#!/usr/bin/env python3
"""Lab 03 — an external client through a NodePort: who sees which source address?

One `web` pod runs on node-2. Two NodePort Services select it: `web-cluster`
(externalTrafficPolicy Cluster) and `web-local` (externalTrafficPolicy Local). An
external client, 203.0.113.5, connects to each NodePort on both nodes.

* Cluster: every node forwards, and masquerades (KUBE-MARK-MASQ in KUBE-EXT-…): the pod
  sees a node's address, never the client's.
* Local: only a node with a local endpoint answers and the client's address is kept;
  node-1 has none and drops the connection ("has no local endpoints").

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

CLIENT = "203.0.113.5"

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: lab03}
spec: {nodes: 2}
---
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  nodeName: node-2
  containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web-cluster}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, nodePort: 30080}]
---
apiVersion: v1
kind: Service
metadata: {name: web-local}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, nodePort: 30081}]
"""


def main() -> None:
    real = parse_real_flag(__doc__ or "")
    c = Checks("lab 03" + (" (real)" if real else ""))
    session = Session.ephemeral(load_text(MANIFEST, source="lab03"))
    node_ip = {n.name: n.internal_ips[0] for n in session.store.list("Node")}  # type: ignore[attr-defined]
    src = f"ext/{CLIENT}"
    results = {}
    with backend(session, real=real, external_clients=[CLIENT]) as be:
        for svc, port in (("web-cluster", 30080), ("web-local", 30081)):
            for node in ("node-1", "node-2"):
                (o,) = be.connect(src, node_ip[node], port, "tcp", 1)
                results[svc, node] = o
                seen = o.source_seen or "-"
                print(
                    f"{CLIENT} -> {node} ({node_ip[node]}):{port} [{svc}]: {o.verdict:<10} pod={o.pod or '-'} source seen={seen}"
                )
    if not real:
        trace = emulation.emulator(session, external_clients=[CLIENT]).trace(
            src, node_ip["node-1"], "tcp", 30080
        )
        print("\ntrace of the first packet, eTP Cluster via node-1:")
        print(trace.render_text())
    save_trace(session, "03_nodeport_source_ip", src, node_ip["node-1"], "tcp", 30080, [CLIENT])
    for node in ("node-1", "node-2"):
        o = results["web-cluster", node]
        c.check(
            o.verdict == "delivered" and o.pod == "default/web",
            f"Cluster: {node} forwards to the pod",
        )
        c.check(
            o.source_seen not in (None, CLIENT),
            f"Cluster: via {node} the pod sees a node address ({o.source_seen}), not the client",
        )
    o = results["web-local", "node-2"]
    c.check(
        o.verdict == "delivered" and o.source_seen == CLIENT,
        "Local: node-2 (local endpoint) keeps the client's address",
    )
    o = results["web-local", "node-1"]
    c.check(
        o.verdict != "delivered",
        f"Local: node-1 (no local endpoint) drops the connection ({o.verdict})",
    )
    c.finish()


if __name__ == "__main__":
    main()
