#!/usr/bin/env python3
"""Lab 02 — per-connection load balancing behind a Service, and session affinity.

A 3-replica Deployment `web` behind two Services: `web` (sessionAffinity None) and
`web-sticky` (sessionAffinity ClientIP). A client pod opens 1,000 TCP connections to
each. kube-proxy's iptables rules pick an endpoint per connection with
`-m statistic --mode random` (probabilities 1/3, 1/2, 1): the shares come out near a
third each (a chi-square test says whether they are consistent with equal shares).
With ClientIP affinity, `-m recent` pins the client to the first pod it reached.

Run with ``--real`` to do the same on real network namespaces (needs root).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Checks, backend, parse_real_flag, save_shares
from scipy.stats import chisquare

from control.session import Session
from netmodel.manifests import load_text

N = 1000

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: lab02}
spec: {nodes: 3}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: nginx, ports: [{name: http, containerPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: web-sticky}
spec:
  selector: {app: web}
  sessionAffinity: ClientIP
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeName: node-1
  containers: [{name: c, image: curl}]
"""


def shares(outcomes: list, title: str) -> Counter[str]:  # type: ignore[type-arg]
    counts = Counter(o.pod or o.verdict for o in outcomes)
    print(f"\n{title}")
    for pod, n in sorted(counts.items()):
        print(f"  {pod:<40} {n:>5}  {n / len(outcomes):6.1%}  {'#' * (n * 60 // len(outcomes))}")
    return counts


def main() -> None:
    real = parse_real_flag(__doc__ or "")
    c = Checks("lab 02" + (" (real)" if real else ""))
    session = Session.ephemeral(load_text(MANIFEST, source="lab02"))
    ip = {
        s: session.store.get("Service", f"default/{s}").spec.cluster_ip  # type: ignore[attr-defined]
        for s in ("web", "web-sticky")
    }
    web_pods = {p.key for p in session.store.list("Pod") if p.labels.get("app") == "web"}
    with backend(session, real=real, seed=2) as be:
        plain = be.connect("pod/default/client", ip["web"], 80, "tcp", N)
        sticky = be.connect("pod/default/client", ip["web-sticky"], 80, "tcp", N)
    counts = shares(plain, f"{N} connections to svc/web ({ip['web']}:80)")
    stat = chisquare(list(counts.values()))
    print(f"  chi-square vs equal shares: {stat.statistic:.2f} (dof 2), p = {stat.pvalue:.3f}")
    save_shares(counts, "02_service_load_balancing", f"{N} connections to svc/web")
    c.check(all(o.verdict == "delivered" for o in plain), f"all {N} connections answered")
    c.check(set(counts) == web_pods, "every web pod got connections, and only web pods")
    c.check(stat.pvalue > 0.001, "shares consistent with 1/3 each (chi-square p > 0.001)")
    c.check(
        all(
            o.source_seen == session.store.get("Pod", "default/client").status.pod_ip  # type: ignore[attr-defined]
            for o in plain
        ),
        "the pods see the client's own IP (no masquerade inside the cluster)",
    )
    sticky_counts = shares(
        sticky, f"{N} connections to svc/web-sticky ({ip['web-sticky']}:80, ClientIP affinity)"
    )
    c.check(
        len(sticky_counts) == 1 and next(iter(sticky_counts)) in web_pods,
        "ClientIP affinity pins every connection of the client to one pod",
    )
    c.finish()


if __name__ == "__main__":
    main()
