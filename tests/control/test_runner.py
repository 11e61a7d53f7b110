"""The deterministic runner end to end: one cluster from manifests to endpoints."""

from __future__ import annotations

import gc
import ipaddress
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from control.clock import FakeClock
from control.events import timeline
from control.runner import ControlPlane, ConvergenceError
from control.store.base import Store, WatchEvent
from control.store.memory import MemoryStore
from control.store.sqlite import SqliteStore
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import EndpointSlice, KubeObject, Node, Pod

WEB = """
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
      - name: web
        image: nginx
        ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
"""


def _objs(text: str) -> list[KubeObject]:
    return [object_from_dict(d) for d in yaml.safe_load_all(text) if d]


def _plane(
    store: Store | None = None, *, seed: int = 0, nodes: int = 3, dns: bool = True
) -> ControlPlane:
    plane = ControlPlane(
        store or MemoryStore(), ClusterSpec(nodes=nodes, dns=dns), seed=seed, clock=FakeClock()
    )
    plane.start()
    return plane


def _check_web(plane: ControlPlane) -> None:
    # the web pods (kube-system also runs cluster DNS's two coredns pods)
    pods = [p for p in plane.store.list("Pod") if isinstance(p, Pod) and p.namespace == "default"]
    assert len(pods) == 3
    assert all(p.status.phase == "Running" and p.is_ready for p in pods)
    assert len({p.spec.node_name for p in pods}) == 3
    for p in pods:
        node = plane.store.get("Node", p.spec.node_name or "")
        assert isinstance(node, Node)
        assert ipaddress.ip_address(p.status.pod_ip or "") in ipaddress.ip_network(
            node.spec.pod_cidr or ""
        )
    (sl,) = [
        s
        for s in plane.store.list("EndpointSlice")
        if isinstance(s, EndpointSlice) and s.service_name == "web"
    ]
    assert sorted(a for ep in sl.endpoints for a in ep.addresses) == sorted(
        p.status.pod_ip or "" for p in pods
    )
    assert [p.port for p in sl.ports] == [8080]
    assert all(ep.conditions.ready for ep in sl.endpoints)


def test_three_nodes_deployment_and_service_converge() -> None:
    plane = _plane()
    plane.apply(_objs(WEB))
    assert plane.run_until_idle() > 0
    _check_web(plane)
    assert plane.run_until_idle() == 0  # a fixed point


def test_a_run_makes_no_reference_cycles() -> None:
    """run_until_idle freezes what is alive at its end (gc.freeze) instead of letting the
    cyclic GC rescan it: sound only because a run leaves no cyclic garbage, which only
    that GC could free. Checked on a rollout, a scale-down and a deletion (with the GC
    paused, so that nothing is collected behind the test's back)."""
    plane = _plane()
    plane.pause_gc = False
    was = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        plane.apply(_objs(WEB))
        plane.run_until_idle()
        plane.apply(_objs(WEB.replace("replicas: 3", "replicas: 1")))
        plane.run_until_idle()
        plane.delete("Service", "default/web")
        plane.run_until_idle()
        assert gc.collect() == 0
    finally:
        if was:
            gc.enable()


def test_every_pod_step_leaves_an_event() -> None:
    plane = _plane()
    plane.apply(_objs(WEB))
    plane.run_until_idle()
    for p in plane.store.list("Pod"):
        reasons = [
            (e.source_component, e.reason)
            for e in timeline(plane.store)
            if e.involved_object.kind == "Pod" and e.involved_object.name == p.name
        ]
        assert reasons == [
            ("replicaset-controller", "Created"),
            ("default-scheduler", "Updated"),
            ("default-scheduler", "Scheduled"),
            ("kubelet", "SandboxCreated"),
            ("kubelet", "Started"),
        ]


def test_start_is_idempotent() -> None:
    plane = _plane()
    rev = plane.store.revision
    plane.start()
    assert plane.store.revision == rev
    again = ControlPlane(plane.store, ClusterSpec(nodes=3), clock=FakeClock())
    again.start()  # bootstrap over an existing store writes nothing new
    assert plane.store.revision == rev


def test_same_seed_same_history() -> None:
    def history(seed: int) -> list[tuple[str, str, str, str]]:
        plane = _plane(seed=seed)
        plane.apply(_objs(WEB))
        plane.run_until_idle()
        return [
            (e.source_component, e.reason, e.involved_object.name or "", e.message)
            for e in timeline(plane.store)
        ]

    assert history(4) == history(4)
    assert history(4) != history(5)


def test_a_restarted_control_plane_writes_nothing_for_a_converged_store() -> None:
    store = MemoryStore()
    plane = _plane(store)
    plane.apply(_objs(WEB))
    plane.run_until_idle()
    rev = store.revision
    restarted = ControlPlane(store, ClusterSpec(nodes=3), clock=FakeClock())
    restarted.run_until_idle()
    assert store.revision == rev
    _check_web(restarted)


def test_compaction_makes_the_runner_relist() -> None:
    plane = _plane()
    plane.run_until_idle()
    plane.apply(_objs(WEB))
    plane.store.compact(plane.store.revision)  # the runner's next watch is too old
    plane.run_until_idle()
    _check_web(plane)


def test_sqlite_store_backs_the_same_behaviour(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state.db")
    try:
        plane = _plane(store)
        plane.apply(_objs(WEB))
        plane.run_until_idle()
        _check_web(plane)
    finally:
        store.close()


class _Recording:
    """An agent that sees Services and labels each one once."""

    name = "recording-agent"
    kinds = frozenset({"Service"})

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.seen: list[tuple[str, str]] = []
        self.todo: list[str] = []

    def handle(self, events: Sequence[WatchEvent]) -> None:
        for ev in events:
            self.seen.append((ev.type, ev.object.key))
            if ev.type != "DELETED" and "seen" not in ev.object.labels:
                self.todo.append(ev.object.key)

    def sync(self) -> int:
        todo, self.todo = self.todo, []
        for key in todo:
            svc = self.plane.store.get("Service", key)
            self.plane.apiserver.update(
                svc.with_meta(labels={**svc.labels, "seen": "yes"}), component=self.name
            )
        return len(todo)


def test_added_agent_gets_a_listing_then_events_and_its_writes_converge() -> None:
    plane = _plane(dns=False)  # the step count below predates kube-system/kube-dns
    plane.run_until_idle()
    agent = _Recording(plane)
    plane.add_agent(agent)
    assert ("ADDED", "default/kubernetes") in agent.seen  # initial listing
    plane.apply(_objs(WEB))
    plane.run_until_idle()
    assert ("ADDED", "default/web") in agent.seen
    assert plane.store.get("Service", "default/web").labels["seen"] == "yes"
    assert plane.timing.steps["recording-agent"] == 2


class _Restless:
    name = "restless"
    kinds = frozenset({"Node"})

    def handle(self, events: Sequence[WatchEvent]) -> None:
        pass

    def sync(self) -> int:
        return 1


def test_a_loop_that_never_settles_is_reported() -> None:
    plane = _plane()
    plane.add_agent(_Restless())
    with pytest.raises(ConvergenceError, match="not idle"):
        plane.run_until_idle(max_steps=50)


_DIGEST = """
import hashlib, sys, yaml
from control.clock import FakeClock
from control.events import timeline
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
docs = [object_from_dict(d) for d in yaml.safe_load_all(sys.stdin.read()) if d]
plane = ControlPlane(MemoryStore(), ClusterSpec(nodes=7), seed=2, clock=FakeClock())
plane.start()
plane.apply(docs)
plane.run_until_idle()
h = hashlib.sha256()
for e in timeline(plane.store):
    h.update(f"{e.revision}|{e.reason}|{e.involved_object.name}|{e.message}".encode())
for kind in ("Pod", "EndpointSlice", "ReplicaSet"):
    for o in plane.store.list(kind):
        h.update(repr(o.to_dict()).encode())
print(h.hexdigest())
"""


def test_history_does_not_depend_on_python_hash_seeds() -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    text = WEB.replace("replicas: 3", "replicas: 11")
    out = []
    for hash_seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(root)}
        res = subprocess.run(
            [sys.executable, "-c", _DIGEST],
            input=text,
            capture_output=True,
            text=True,
            env=env,
            check=True,
            cwd=root,
        )
        out.append(res.stdout.strip())
    assert out[0] == out[1] and len(out[0]) == 64


def test_a_component_gets_its_kinds_events_in_store_order() -> None:
    """The dispatch hands each component the events of its kinds only, in the order
    the store wrote them, whichever kinds come between (runner._of_kinds)."""
    from control.runner import _of_kinds

    def ev(kind: str, name: str, rev: int) -> WatchEvent:
        obj = object_from_dict({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}})
        return WatchEvent("ADDED", obj, rev)

    kinds = ["Pod", "Node", "Pod", "ConfigMap", "Node", "Pod", "Secret", "Node"]
    events = [ev(k, f"o{i}", i + 1) for i, k in enumerate(kinds)]
    at: dict[str, list[int]] = {}
    for i, e in enumerate(events):
        at.setdefault(e.object.kind, []).append(i)
    for want in ({"Pod"}, {"Pod", "Node"}, {"Node", "Secret", "Service"}, {"Service"}, set()):
        got = _of_kinds(events, at, frozenset(want))
        assert got == [e for e in events if e.object.kind in want], want
