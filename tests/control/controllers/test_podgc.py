"""The pod garbage collector: pods bound to a Node that does not exist are deleted (at
once when the node was deleted, after the quarantine when it never registered), with
Events, and everything downstream (EndpointSlices, kube-proxy rules) follows."""

from __future__ import annotations

from cp_helpers import deployment, make_plane, objs, pods, service, slices

from control.clock import FakeClock
from control.controllers.podgc import QUARANTINE_SECONDS
from control.events import timeline
from control.runner import ControlPlane
from control.session import Session
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.manifests import load_text
from netmodel.objects import Pod


def _clock(plane: ControlPlane) -> FakeClock:
    assert isinstance(plane.clock, FakeClock)
    return plane.clock


def _bare_pod(name: str, node: str) -> Pod:
    p = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "bare"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
        }
    )
    assert isinstance(p, Pod)
    return p


def _events(plane: ControlPlane, reason: str) -> list[tuple[str, str, str]]:
    return [
        (e.source_component, e.involved_object.name, e.message)
        for e in timeline(plane.store)
        if e.reason == reason
    ]


def _endpoint_nodes(plane: ControlPlane, svc: str) -> dict[str, str | None]:
    return {
        addr: ep.node_name
        for sl in slices(plane, svc)
        for ep in sl.endpoints
        for addr in ep.addresses
    }


def test_deleting_a_node_deletes_its_pods_and_the_slices_drop_them() -> None:
    plane = make_plane(3)
    plane.apply([deployment("web", 6), service("web", {"app": "web"})])
    plane.run_until_idle()
    doomed = {p.name: p.status.pod_ip for p in pods(plane, "web-") if p.spec.node_name == "node-2"}
    assert doomed and set(_endpoint_nodes(plane, "web").values()) == {
        "node-1",
        "node-2",
        "node-3",
    }

    plane.delete("Node", "node-2")
    plane.run_until_idle()

    left = pods(plane, "web-")
    assert not {p.name for p in left} & set(doomed)
    assert all(p.spec.node_name in ("node-1", "node-3") for p in left)
    assert len(left) == 6 and all(p.status.phase == "Running" for p in left)  # replaced
    eps = _endpoint_nodes(plane, "web")
    assert len(eps) == 6 and not set(eps) & set(doomed.values())
    assert set(eps.values()) == {"node-1", "node-3"}
    gc = _events(plane, "DeletionByPodGC")
    assert sorted(name for _, name, _ in gc) == sorted(doomed)
    assert {(c, m) for c, _, m in gc} == {
        ("pod-garbage-collector", "PodGC: node node-2 no longer exists")
    }
    deleted = {n for c, n, _ in _events(plane, "Deleted") if c == "pod-garbage-collector"}
    assert deleted == set(doomed)
    rev = plane.store.revision
    assert plane.run_until_idle() == 0 and plane.store.revision == rev  # nothing left to do


def test_pods_marked_for_deletion_on_a_deleted_node_are_removed_too() -> None:
    plane = make_plane(2)
    plane.apply([_bare_pod("a", "node-2"), _bare_pod("b", "node-2")])
    plane.run_until_idle()
    marked = plane.delete("Pod", "default/a")  # the kubelet would finish it ...
    assert isinstance(marked, Pod) and marked.is_terminating
    plane.delete("Node", "node-2")  # ... but its node goes first
    plane.run_until_idle()
    assert pods(plane) == []
    assert sorted(n for _, n, _ in _events(plane, "DeletionByPodGC")) == ["a", "b"]


def test_a_pod_bound_to_a_node_that_never_registers_goes_after_the_quarantine() -> None:
    plane = make_plane(2)
    plane.apply([_bare_pod("early", "node-9")])
    plane.run_until_idle()
    assert [p.name for p in pods(plane)] == ["early"]  # the node may still register
    assert list(plane.pod_gc.quarantined) == ["default/early"]

    _clock(plane).advance(QUARANTINE_SECONDS - 1)
    steps = plane.timing.steps.get("pod-garbage-collector", 0)
    plane.run_until_idle()  # (the kubelets renew their Leases meanwhile)
    assert plane.timing.steps.get("pod-garbage-collector", 0) == steps
    assert [p.name for p in pods(plane)] == ["early"]

    _clock(plane).advance(1)
    assert plane.run_until_idle() > 0
    assert pods(plane) == [] and plane.pod_gc.quarantined == {}
    assert _events(plane, "DeletionByPodGC") == [
        (
            "pod-garbage-collector",
            "early",
            "PodGC: node node-9 does not exist (40s after the pod was created)",
        )
    ]


def test_a_node_that_registers_within_the_quarantine_keeps_its_pods() -> None:
    plane = make_plane(1)
    plane.apply([_bare_pod("early", "node-9")])
    plane.run_until_idle()
    _clock(plane).advance(QUARANTINE_SECONDS / 2)
    plane.apply(objs("{apiVersion: v1, kind: Node, metadata: {name: node-9}}"))
    plane.run_until_idle()
    assert plane.pod_gc.quarantined == {}
    _clock(plane).advance(10 * QUARANTINE_SECONDS)
    plane.run_until_idle()
    (p,) = pods(plane)
    assert p.spec.node_name == "node-9" and p.status.phase == "Running"
    assert _events(plane, "DeletionByPodGC") == []


def test_a_restarted_control_plane_collects_pods_of_a_node_deleted_meanwhile() -> None:
    store, clock = MemoryStore(), FakeClock()
    cluster = ClusterSpec.model_validate({"nodes": 2, "dns": False})  # only a's and b's pods
    plane = ControlPlane(store, cluster, clock=clock)
    plane.start()
    plane.apply([_bare_pod("a", "node-2"), _bare_pod("b", "node-1")])
    plane.run_until_idle()
    plane.apiserver.delete("Node", "node-2")  # nobody runs after this write ...
    clock.advance(QUARANTINE_SECONDS)

    again = ControlPlane(store, cluster, clock=clock)  # ... until a restart
    again.run_until_idle()
    assert [p.name for p in pods(again)] == ["b"]
    assert [n for _, n, _ in _events(again, "DeletionByPodGC")] == ["a"]


def test_kube_proxy_rules_drop_the_endpoints_of_a_deleted_node() -> None:
    text = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 3, dns: false}   # one pod on node-2 (no coredns pod beside it)
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
      affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution:
        [{labelSelector: {matchLabels: {app: web}}, topologyKey: kubernetes.io/hostname}]}}
      containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
"""
    s = Session.ephemeral(load_text(text, source="podgc.yaml"))
    (gone,) = [
        p.status.pod_ip
        for p in s.store.list("Pod")
        if isinstance(p, Pod) and p.spec.node_name == "node-2"
    ]
    assert gone and all(gone in st.save_text for st in s.rules.nodes.values())
    s.plane.delete("Node", "node-2")
    s.converge()
    for name in ("node-1", "node-3"):
        assert gone not in s.rules.nodes[name].save_text
    # one pod per node: the replacement has nowhere to go
    placed = [p.spec.node_name for p in s.store.list("Pod") if isinstance(p, Pod)]
    assert sorted(placed, key=str) == sorted([None, "node-1", "node-3"], key=str)
