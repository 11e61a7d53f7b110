#!/usr/bin/env python3
"""Lab 00 — the control plane: from manifests to scheduled pods with addresses.

A 3-node cluster, a Deployment `web` with 3 replicas and a Service `web` (80 -> 8080).
Prints where each pod landed, the Service's ClusterIP and EndpointSlice, and the
timeline of every control-plane step; then checks the result and exits non-zero if
anything is wrong. With ``--pictures DIR`` it also draws the timeline as a sequence
diagram into DIR. It runs the control plane only, so it has no ``--real`` mode.
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import EXAMPLES, Checks, parse_without_real, save_timeline

from app.cli.printers import table
from control.events import timeline
from control.session import Session
from netmodel.objects import EndpointSlice, Node, Pod, Service


def main() -> None:
    parse_without_real(__doc__ or "", "lab 00 runs the control plane only: no --real mode")
    session = Session.from_files([EXAMPLES / "web.yaml"])
    store, now = session.store, session.clock.now()

    nodes = [n for n in store.list("Node") if isinstance(n, Node)]
    pods = [p for p in store.list("Pod", "default") if isinstance(p, Pod)]
    svc = store.get("Service", "default/web")
    assert isinstance(svc, Service)
    slices = [
        s
        for s in store.list("EndpointSlice", "default")
        if isinstance(s, EndpointSlice) and s.service_name == "web"
    ]

    print("== nodes")
    print(table("Node", nodes, now=now, wide=True, all_namespaces=False))
    print("\n== pods")
    print(table("Pod", pods, now=now, wide=True, all_namespaces=False))
    print("\n== service")
    print(table("Service", [svc], now=now, wide=True, all_namespaces=False))
    print("\n== endpointslices")
    print(table("EndpointSlice", slices, now=now, wide=False, all_namespaces=False))
    print("\n== timeline")
    print(table("Event", timeline(store), now=now, wide=False, all_namespaces=False))
    save_timeline(session, "00_control_plane")

    print("\n== checks")
    c = Checks("lab 00")
    cidr = {n.name: ipaddress.ip_network(n.spec.pod_cidr or "0.0.0.0/32") for n in nodes}
    c.check(len(nodes) == 3, "3 nodes, each with a podCIDR")
    c.check(len(pods) == 3 and all(p.status.phase == "Running" for p in pods), "3 pods Running")
    c.check(
        len({p.spec.node_name for p in pods}) == 3, "the pods are spread over 3 different nodes"
    )
    c.check(
        all(
            p.status.pod_ip
            and p.spec.node_name
            and ipaddress.ip_address(p.status.pod_ip) in cidr[p.spec.node_name]
            for p in pods
        ),
        "every pod IP lies inside its node's podCIDR",
    )
    c.check(
        ipaddress.ip_address(svc.spec.cluster_ip or "0.0.0.0")
        in ipaddress.ip_network("10.96.0.0/12"),
        f"Service web has ClusterIP {svc.spec.cluster_ip} inside 10.96.0.0/12",
    )
    ep_ips = sorted(
        a for s in slices for e in s.endpoints for a in e.addresses if e.conditions.ready
    )
    c.check(
        ep_ips == sorted(p.status.pod_ip or "" for p in pods),
        "EndpointSlice lists the 3 pod IPs, ready",
    )
    c.check(
        all(p.port == 8080 for s in slices for p in s.ports),
        "EndpointSlice port is 8080 (targetPort)",
    )
    reasons = {e.reason for e in timeline(store)}
    c.check({"Scheduled", "Created"} <= reasons, "the timeline has apiserver and scheduler steps")
    c.finish()


if __name__ == "__main__":
    main()
