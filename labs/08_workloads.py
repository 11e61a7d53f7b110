#!/usr/bin/env python3
"""Lab 08 — workloads that shape the network: StatefulSet names, DaemonSet pods, a Job's end.

Three controllers kube-controller-manager runs decide which pods a Service reaches and
by which names:

* a StatefulSet `db` (3 replicas, OrderedReady) behind the headless Service `db`: its
  pods are `db-0`, `db-1`, `db-2`, created one at a time in that order, and each
  resolves by its own name (`db-1.db.default.svc.cluster.local`); the SRV records of
  the Service name all three;
* a DaemonSet `agent`: one pod per node; a node that joins gets its pod, and its
  Service `agent` reaches it;
* a Job `report` (`sleep 30`) whose pod the Service `report` selects: while it runs it
  is an endpoint and a connection to the Service reaches it; once its command ends the
  pod is Succeeded, leaves the endpoints, and the same connection is refused.

Run with ``--real`` to ask the same questions of real network namespaces (needs root):
the DNS pods run real DNS servers and the connections go through the kernel's rules.
The control plane is the lab's own in both runs, on an emulated clock: the Job's
`sleep 30` ends when the lab moves that clock on, not after 30 real seconds.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Checks, backend, parse_real_flag

from app import dnsqueries
from control.clock import FakeClock
from control.events import timeline
from control.session import Session
from netmodel.manifests import load_text
from netmodel.objects import Node, NodeAddress, NodeStatus, ObjectMeta, Pod

D = "cluster.local"
CLIENT = "pod/default/client"
RUN_SECONDS = 30

MANIFEST = f"""
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: lab08}}
spec: {{nodes: 2}}
---
apiVersion: v1
kind: Service
metadata: {{name: db}}
spec:
  clusterIP: None
  selector: {{app: db}}
  ports: [{{name: pg, port: 5432}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db}}
spec:
  serviceName: db
  replicas: 3
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      containers: [{{name: pg, image: postgres, ports: [{{containerPort: 5432}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: agent}}
spec:
  selector: {{app: agent}}
  ports: [{{port: 9100}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
  template:
    metadata: {{labels: {{app: agent}}}}
    spec:
      containers: [{{name: agent, image: node-exporter, ports: [{{containerPort: 9100}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: report}}
spec:
  selector: {{app: report}}
  ports: [{{port: 80, targetPort: 8080}}]
---
apiVersion: batch/v1
kind: Job
metadata: {{name: report}}
spec:
  template:
    metadata: {{labels: {{app: report}}}}
    spec:
      restartPolicy: Never
      containers:
      - name: report
        image: busybox
        command: [sh, -c, "sleep {RUN_SECONDS}"]
        ports: [{{containerPort: 8080}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  containers: [{{name: c, image: busybox}}]
"""


def pods(session: Session, app: str) -> list[Pod]:
    return sorted(
        (p for p in session.store.list("Pod") if isinstance(p, Pod) and p.labels.get("app") == app),
        key=lambda p: p.name,
    )


def slice_ips(session: Session, service: str) -> set[str]:
    """The ready endpoints of ``service``'s EndpointSlices."""
    out: set[str] = set()
    for s in session.store.list("EndpointSlice"):
        if s.labels.get("kubernetes.io/service-name") != service:
            continue
        for e in s.endpoints:  # type: ignore[attr-defined]
            if e.conditions.ready is not False:
                out.update(e.addresses)
    return out


def main() -> None:
    real = parse_real_flag(__doc__ or "")
    c = Checks("lab 08" + (" (real)" if real else ""))
    clock = FakeClock()
    session = Session.ephemeral(load_text(MANIFEST, source="lab08"), clock=clock)
    session.converge()

    print("1. a StatefulSet: ordinal names, one at a time, each resolvable")
    db = pods(session, "db")
    ips = {p.name: p.status.pod_ip for p in db}
    print(f"   pods: {', '.join(f'{n} {ip}' for n, ip in ips.items())}")
    c.check(sorted(ips) == ["db-0", "db-1", "db-2"], "pods db-0, db-1, db-2")
    steps = [
        (e.reason, e.involved_object.name)
        for e in timeline(session.store)
        if e.involved_object.kind == "Pod" and (e.involved_object.name or "").startswith("db-")
    ]
    order = [n for r, n in steps if r == "Created"]
    ran_before_next = all(
        steps.index(("Started", f"db-{i}")) < steps.index(("Created", f"db-{i + 1}"))
        for i in range(2)
    )
    print(f"   created in the order {order}")
    c.check(
        order == ["db-0", "db-1", "db-2"] and ran_before_next,
        "created in order, each once the one before it was running (OrderedReady)",
    )
    with backend(session, real=real) as be:
        one = dnsqueries.dig(be, CLIENT, f"db-1.db.default.svc.{D}")
        print(f"   db-1.db.default.svc.{D} -> {list(one.addresses)}")
        c.check(list(one.addresses) == [ips["db-1"]], "db-1.db.default.svc resolves to pod db-1")
        srv = dnsqueries.dig(be, CLIENT, f"_pg._tcp.db.default.svc.{D}", "SRV")
        targets = sorted(r.rsplit(" ", 1)[1] for r in srv.answer)
        print(f"   SRV _pg._tcp.db: {targets}")
        c.check(
            targets == [f"db-{i}.db.default.svc.{D}." for i in range(3)],
            "SRV _pg._tcp.db names db-0, db-1 and db-2",
        )

    print("2. a DaemonSet: one pod per node, and a node that joins gets its own")
    per_node = {p.spec.node_name or "": p.name for p in pods(session, "agent")}
    print(f"   {per_node}")
    c.check(sorted(per_node) == ["node-1", "node-2"], "one agent pod on each of the 2 nodes")
    session.plane.apiserver.create(
        Node(
            metadata=ObjectMeta(name="node-3"),
            status=NodeStatus(addresses=[NodeAddress(type="InternalIP", address="172.18.0.40")]),
        )
    )
    session.converge()
    nodes = {p.spec.node_name or "": p for p in pods(session, "agent")}
    print(f"   after node-3 joined: {sorted(nodes)}")
    c.check(sorted(nodes) == ["node-1", "node-2", "node-3"], "node-3 got its agent pod")
    new_ip = nodes["node-3"].status.pod_ip or ""
    c.check(new_ip in slice_ips(session, "agent"), f"and it is an endpoint of `agent` ({new_ip})")

    print(f"3. a Job: its pod is an endpoint while `sleep {RUN_SECONDS}` runs, then leaves")
    (job_pod,) = pods(session, "report")
    job_ip = job_pod.status.pod_ip or ""
    c.check(job_pod.status.phase == "Running", f"{job_pod.name} is Running ({job_ip})")
    c.check(slice_ips(session, "report") == {job_ip}, "it is the one endpoint of `report`")
    svc_ip = session.store.get("Service", "default/report").spec.cluster_ip  # type: ignore[attr-defined]
    with backend(session, real=real) as be:
        (conn,) = be.connect(CLIENT, svc_ip, 80, "tcp", 1)
        print(f"   {svc_ip}:80 -> {conn.verdict} ({conn.pod})")
        c.check(
            conn.verdict == "delivered" and conn.pod == f"default/{job_pod.name}",
            "a connection to `report`:80 reaches the Job's pod",
        )
    clock.advance(RUN_SECONDS + 1)
    session.converge()
    (job_pod,) = pods(session, "report")
    print(f"   after {RUN_SECONDS} s: {job_pod.name} {job_pod.status.phase}")
    c.check(job_pod.status.phase == "Succeeded", f"{job_pod.name} Succeeded")
    c.check(slice_ips(session, "report") == set(), "`report` has no endpoints left")
    job = session.store.get("Job", "default/report")
    conds = {
        x["type"]: x["status"] for x in (job.to_dict().get("status") or {}).get("conditions", [])
    }
    c.check(conds.get("Complete") == "True", "the Job is Complete")
    with backend(session, real=real) as be:
        (conn,) = be.connect(CLIENT, svc_ip, 80, "tcp", 1)
        print(f"   {svc_ip}:80 -> {conn.verdict}")
        c.check(conn.verdict != "delivered", f"the same connection is refused now ({conn.verdict})")
    c.finish()


if __name__ == "__main__":
    main()
