#!/usr/bin/env python3
"""Lab 07 — cluster DNS: names resolved through the Services dataplane itself.

The cluster runs kubeadm's DNS, as every svclab Cluster does unless it says `dns: false`
(the manifest below asks for nothing): two `coredns` pods behind the
`kube-system/kube-dns` Service at 10.96.0.10, the tenth address of the service CIDR. Every pod's resolv.conf
names that address, so a pod's first Service packet is its DNS question: UDP to
10.96.0.10:53, DNATed by kube-proxy to a DNS pod.

* `web` (a ClusterIP Service) resolves to its ClusterIP through the search list, and a
  connection by name reaches a web pod;
* `db` (headless, two pods with hostname/subdomain) resolves to the pods' own IPs, each
  pod also by name (`db-0.db.default.svc.cluster.local`), and its SRV records name them;
* `search` (an ExternalName) is a CNAME to `example.com`, which the cluster's upstream
  (the Cluster's static `dnsUpstream`) answers;
* `example.com` from a pod costs 4 questions: with `ndots:5` a name with fewer than 5
  dots goes through the 3 search domains first (3 NXDOMAIN), `example.com.` costs one;
* scaled to 0 replicas, kube-dns has no endpoints: kube-proxy REJECTs the question and
  the lookup fails at once with "connection refused".

Run with ``--real`` to do the same on real network namespaces (needs root): real DNS
server processes in the DNS pods, glibc (`getaddrinfo`) in the client pod.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Checks, backend, parse_real_flag

from app import dnsqueries
from control.apiserver.clusterdns import DEPLOYMENT_KEY
from control.session import Session
from dataplane.dns.dig import render
from netmodel.manifests import load_text
from netmodel.objects import Deployment

D = "cluster.local"
CLIENT = "pod/default/client"

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: lab07}
spec:
  nodes: 2
  dnsUpstream: {example.com: [203.0.113.80]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: pg, port: 5432}]
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, labels: {app: db}}
spec:
  hostname: db-0
  subdomain: db
  containers: [{name: pg, image: postgres, ports: [{containerPort: 5432}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: db-1, labels: {app: db}}
spec:
  hostname: db-1
  subdomain: db
  containers: [{name: pg, image: postgres, ports: [{containerPort: 5432}]}]
---
apiVersion: v1
kind: Service
metadata: {name: search}
spec:
  type: ExternalName
  externalName: example.com
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  containers: [{name: c, image: busybox}]
"""


def show(o: dnsqueries.DnsOutcome) -> None:
    print(
        render(
            qname=o.qname,
            qtype=o.qtype,
            server="10.96.0.10",
            proto=o.proto,
            response=o.response,
            error=o.error,
            source=CLIENT,
            answered_by=f"pod/{o.server_pod}" if o.server_pod else None,
        )
    )


def queries_asked(be: object, real: bool, before: int) -> int:
    """Questions the DNS servers answered since ``before`` (kernel: their log)."""
    from dataplane.linux.dnspods import DnsServers

    return len(DnsServers(be.cluster.cluster_id).queries()) - before  # type: ignore[attr-defined]


def main() -> None:
    real = parse_real_flag(__doc__ or "")
    c = Checks("lab 07" + (" (real)" if real else ""))
    session = Session.ephemeral(load_text(MANIFEST, source="lab07"))
    session.converge()
    pods = {p.name: p.status.pod_ip for p in session.store.list("Pod")}  # type: ignore[attr-defined]
    web_ip = session.store.get("Service", "default/web").spec.cluster_ip  # type: ignore[attr-defined]
    with backend(session, real=real) as be:
        print("1. a ClusterIP Service by its short name, as the pod's libc resolves it")
        web = dnsqueries.resolve(be, CLIENT, "web")
        print(f"   web -> {web.status} {list(web.addresses)}")
        c.check(web.addresses == (web_ip,), f"`web` resolves to its ClusterIP {web_ip}")
        (conn,) = be.connect(CLIENT, web.addresses[0], 80, "tcp", 1)
        c.check(
            conn.verdict == "delivered" and (conn.pod or "").startswith("default/web-"),
            f"a connection to `web`:80 reaches a web pod ({conn.pod})",
        )
        a = dnsqueries.dig(be, CLIENT, f"web.default.svc.{D}")
        show(a)
        c.check(
            a.status == "NOERROR"
            and "aa" in a.flags
            and a.answer == (f"web.default.svc.{D}. 30 IN A {web_ip}",),
            "A web.default.svc.cluster.local: the ClusterIP, TTL 30, authoritative",
        )
        c.check(
            (a.server_pod or "").startswith("kube-system/coredns-"),
            f"the question was DNATed to a DNS pod ({a.server_pod})",
        )

        print("2. a headless Service: the ready pods' own addresses")
        h = dnsqueries.dig(be, CLIENT, f"db.default.svc.{D}")
        show(h)
        c.check(
            sorted(h.addresses) == sorted([pods["db-0"], pods["db-1"]]),
            "A db.default.svc.cluster.local: both db pods' IPs",
        )
        h0 = dnsqueries.dig(be, CLIENT, f"db-0.db.default.svc.{D}")
        c.check(h0.addresses == [pods["db-0"]], "db-0.db.default.svc.cluster.local: pod db-0")

        print("3. SRV: one record per pod, targets by hostname")
        srv = dnsqueries.dig(be, CLIENT, f"_pg._tcp.db.default.svc.{D}", "SRV")
        show(srv)
        targets = sorted(r.rsplit(" ", 1)[1] for r in srv.answer)
        c.check(
            targets == [f"db-0.db.default.svc.{D}.", f"db-1.db.default.svc.{D}."]
            and all(" SRV 0 50 5432 " in r for r in srv.answer),
            "SRV _pg._tcp.db: 0 50 5432 db-0.db… and db-1.db…, their A records in ADDITIONAL",
        )

        print("4. an ExternalName Service: a CNAME")
        ext = dnsqueries.dig(be, CLIENT, f"search.default.svc.{D}")
        show(ext)
        c.check(
            f"search.default.svc.{D}. 30 IN CNAME example.com." in ext.answer
            and "203.0.113.80" in ext.addresses,
            "search.default.svc.cluster.local: CNAME example.com., then its A record",
        )

        print("5. what ndots:5 costs for an external name")
        before = queries_asked(be, real, 0) if real else 0
        out = dnsqueries.resolve(be, CLIENT, "example.com")
        n = queries_asked(be, real, before) if real else out.queries
        before = queries_asked(be, real, 0) if real else 0
        out_abs = dnsqueries.resolve(be, CLIENT, "example.com.")
        n_abs = queries_asked(be, real, before) if real else out_abs.queries
        print(f"   example.com  -> {list(out.addresses)} in {n} questions")
        print(f"   example.com. -> {list(out_abs.addresses)} in {n_abs} question")
        c.check(
            out.addresses == ("203.0.113.80",) and n == 4,
            f"`example.com` takes 4 questions (3 search domains, then as is): {n}",
        )
        c.check(n_abs == 1, f"`example.com.` (absolute) takes 1: {n_abs}")

    print("6. kube-dns without endpoints: coredns scaled to 0")
    dep = session.store.get("Deployment", DEPLOYMENT_KEY)
    assert isinstance(dep, Deployment)
    session.plane.apiserver.update(dep.evolve(spec=dep.spec.evolve(replicas=0)))
    session.converge()
    with backend(session, real=real) as be:
        gone = dnsqueries.dig(be, CLIENT, f"web.default.svc.{D}")
        show(gone)
        c.check(
            gone.status == "no-answer" and gone.error == "connection refused",
            f"the question is refused ({gone.error}): no DNS pod behind kube-dns",
        )
        lookup = dnsqueries.resolve(be, CLIENT, "web")
        c.check(lookup.status == "error", f"`web` no longer resolves ({lookup.status})")
        if not real:
            from dataplane.emulator.resolver import query

            q = query(be.cluster, CLIENT, "10.96.0.10", f"web.default.svc.{D}")  # type: ignore[union-attr]
            t = q.traces[0]
            rejected = [
                h for h in t.hops if h.kind == "rule" and h.verdict and "REJECT" in h.verdict
            ]
            print(t.render_text())
            for h in rejected:
                print(f"   rejected by node/{h.netns.removeprefix('node/')}: {h.rule}")
            c.check(
                t.verdict == "REJECT"
                and any("has no endpoints" in (h.rule or "") for h in rejected),
                "the trace shows kube-proxy's REJECT: kube-dns has no endpoints",
            )
    c.finish()


if __name__ == "__main__":
    main()
