"""A change to a persistent cluster whose store is converged starts the control plane
from the converged revision (no listing into every component, no first resync of every
key: :meth:`control.runner.ControlPlane.start`) and leaves the store exactly as the
full start does: the same objects, the same Events, at the same revisions. When the
store is not at its converged revision (another process wrote after the last run to
idle), or loses the record of what was overwritten mid-run, the control plane starts
as it always did."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from control.clock import FakeClock
from control.noderules import converged_revision
from control.session import Session
from control.store.sqlite import SqliteStore
from netmodel.manifests import load_text
from netmodel.objects import Deployment

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: lab}
spec: {serviceCIDR: 10.96.0.0/12, podCIDR: 10.244.0.0/16, nodes: 4}
"""


def deployment(name: str, replicas: int) -> str:
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}, tier: t-{name}, app.kubernetes.io/part-of: lab}}}}
    spec:
      containers:
      - name: c
        image: x
        ports: [{{name: http, containerPort: 8080}}]
"""


def service(name: str, app: str, port: int = 80) -> str:
    return f"""\
apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  selector: {{app: {app}}}
  ports: [{{name: http, port: {port}, targetPort: http}}]
"""


#: a pod no node fits: a full start retries it (a FailedScheduling Event each time), so
#: the converged start starts the scheduler at once too (Scheduler.has_start_work)
STUCK = """\
apiVersion: v1
kind: Pod
metadata: {name: stuck}
spec:
  nodeSelector: {nowhere: "true"}
  containers: [{name: c, image: x}]
"""

BASE = "---\n".join(
    [
        CLUSTER,
        deployment("web", 3),
        deployment("db", 2),
        service("web", "web"),
        service("db", "db", 5432),
        STUCK,
    ]
)


def session(state: Path, *, fast: bool) -> Session:
    """A session as the CLI's apply and delete make it, on a clock that repeats."""
    s = Session.open(state, must_exist=False)
    s.proxies_from_store = True
    s.converged_start = fast
    s.clock = FakeClock()
    return s


def dump(state: Path) -> dict[tuple[str, str], str]:
    """Every stored object (Events included) as its stored JSON, and the revision."""
    db = sqlite3.connect(state / "state.db")
    try:
        out = {(k, key): data for k, key, data in db.execute("SELECT kind, key, data FROM objects")}
        rev = db.execute("SELECT value FROM meta WHERE name = 'revision'").fetchone()[0]
    finally:
        db.close()
    out[("meta", "revision")] = str(rev)
    return out


def apply(text: str) -> Callable[[Session], None]:
    def run(s: Session) -> None:
        s.apply(load_text(text, source="change.yaml"))

    return run


def delete(kind: str, key: str) -> Callable[[Session], None]:
    def run(s: Session) -> None:  # as `svclab delete` does it
        s.start_quietly()
        s.plane.apiserver.delete(kind, key)
        s.converge()

    return run


CHANGES: list[tuple[str, Callable[[Session], None]]] = [
    ("a new Service selecting existing pods", apply(service("web2", "web", 81))),
    (
        "a Service selecting by a second label",
        apply(service("tier", "web").replace("app: web", "tier: t-web")),
    ),
    ("nothing changed", apply(service("web2", "web", 81))),
    (
        "a Service selecting by a dotted label key and a second label",
        apply(
            service("lab-db", "db").replace("app: db", "app.kubernetes.io/part-of: lab, app: db")
        ),
    ),
    ("a Service with an empty selector", apply(service("all", "x").replace("{app: x}", "{}"))),
    ("a Deployment scaled up", apply(deployment("web", 6))),
    ("a Deployment scaled down", apply(deployment("db", 1))),
    (
        "a rollout (new pod template)",
        apply(deployment("db", 2).replace("tier: t-db", "tier: t-db2")),
    ),
    ("a deleted Service", delete("Service", "default/db")),
    (
        "a new Deployment and its Service",
        apply(deployment("cache", 2) + "---\n" + service("cache", "cache")),
    ),
    ("a deleted Deployment", delete("Deployment", "default/web")),
]


def make_converged(tmp_path: Path, base: str = BASE) -> Path:
    state = tmp_path / "base"
    s = session(state, fast=True)
    try:
        s.apply(load_text(base, source="base.yaml"))
    finally:
        s.close()
    assert converged_revision(state) == int(dump(state)[("meta", "revision")])
    return state


@pytest.fixture
def converged(tmp_path: Path) -> Path:
    return make_converged(tmp_path)


@pytest.mark.parametrize("stuck", [True, False], ids=["stuck-pod", "all-pods-running"])
def test_each_change_leaves_the_store_as_a_full_start_does(stuck: bool, tmp_path: Path) -> None:
    """With a pod to retry, the scheduler starts at once and lists the pods; without
    one, a change that touches no pod never lists them (the EndpointSlice controller
    reads a Service's pods by its selector, the garbage collector defers its index)."""
    converged = make_converged(tmp_path, BASE if stuck else BASE.replace("---\n" + STUCK, ""))
    fast, full = tmp_path / "fast", tmp_path / "full"
    shutil.copytree(converged, fast)
    shutil.copytree(converged, full)
    for what, change in CHANGES:
        before = dump(fast)
        for state, is_fast in ((fast, True), (full, False)):
            s = session(state, fast=is_fast)
            try:
                change(s)
                assert s.plane.started_from_converged is is_fast, what
            finally:
                s.close()
        got, want = dump(fast), dump(full)
        assert got.keys() == want.keys(), what
        assert {k: v for k, v in got.items() if v != want[k]} == {}, what
        assert converged_revision(fast) == converged_revision(full), what
        if what == "nothing changed":  # (but the stuck pod's retry, an Event)
            changed = {k for k in got.keys() | before.keys() if got.get(k) != before.get(k)}
            assert {k[0] for k in changed} == ({"Event", "meta"} if stuck else set())
        else:
            assert got != before, what  # (each change does change something)


def test_a_store_written_after_convergence_starts_in_full(converged: Path, tmp_path: Path) -> None:
    """Another process wrote after the last run to idle: the converged record is stale,
    so the next change lists every component, and its result is the full start's."""
    fast, full = tmp_path / "fast", tmp_path / "full"
    for state in (fast, full):
        shutil.copytree(converged, state)
        with SqliteStore(state / "state.db") as other:  # e.g. a kubectl-less edit
            dep = other.get("Deployment", "default/db")
            assert isinstance(dep, Deployment)
            other.update(dep.evolve(spec=dep.spec.model_copy(update={"replicas": 4})))
    for state, is_fast in ((fast, True), (full, False)):
        s = session(state, fast=is_fast)
        try:
            apply(service("web2", "web", 81))(s)
            assert not s.plane.started_from_converged
        finally:
            s.close()
    assert dump(fast) == dump(full)
    pods = [k for k in dump(fast) if k[0] == "Pod" and k[1].startswith("default/db-")]
    assert len(pods) == 4  # the write another process made was converged too


def test_losing_the_record_mid_run_lists_every_component(converged: Path, tmp_path: Path) -> None:
    """Another process writes while the change runs: the states the change overwrote
    are no longer all known, so the components not started yet are listed as in a
    full start; the cluster still converges (with the other write too)."""
    state = tmp_path / "fast"
    shutil.copytree(converged, state)
    s = session(state, fast=True)
    try:
        plane = s.plane
        assert plane.started_from_converged
        s.start_quietly()
        s.plane.apply(load_text(deployment("web", 5), source="x.yaml").objects)
        s.store.flush()  # type: ignore[attr-defined]
        with SqliteStore(state / "state.db") as other:
            dep = other.get("Deployment", "default/db")
            assert isinstance(dep, Deployment)
            other.update(dep.evolve(spec=dep.spec.model_copy(update={"replicas": 3})))
        s.converge()
        assert not plane.started_from_converged  # it fell back to listing
    finally:
        s.close()
    names = [k[1] for k in dump(state) if k[0] == "Pod"]
    assert sum(n.startswith("default/web-") for n in names) == 5
    assert sum(n.startswith("default/db-") for n in names) == 3


def test_a_new_service_starts_only_what_it_reaches(converged: Path, tmp_path: Path) -> None:
    """A new Service reaches the EndpointSlice controller, the garbage collector, the
    namespace controller and the kube-proxies' note, never the Deployment and ReplicaSet
    controllers or the kubelets: those read nothing that changed (the scheduler starts,
    for the pod it retries at every start)."""
    state = tmp_path / "fast"
    shutil.copytree(converged, state)
    s = session(state, fast=True)
    try:
        apply(service("web2", "web", 81))(s)
        plane = s.plane
        assert plane.started_from_converged
        assert plane.deployments.cache.count("Deployment") == 0
        assert plane.replicasets.cache.count("ReplicaSet") == 0
        assert plane.kubelets.kubelets == {}
        # no pod changed: the pods were never listed, web2's read by its selector
        assert plane.endpointslices.cache.count("Pod") == 0
        assert plane.garbage_collector._later is not None  # (nothing deleted: no index)
        slices = [
            o
            for o in plane.endpointslices.cache.list("EndpointSlice")
            if o.labels.get("kubernetes.io/service-name") == "web2"
        ]
        assert len(slices) == 1
    finally:
        s.close()


def test_start_work_is_read_without_decoding_pods(converged: Path) -> None:
    """What tells a converged start to start the scheduler, the kubelets or the pod
    garbage collector at once."""
    from control.agents import pod_summaries
    from control.agents.kubelet import KubeletPool
    from control.controllers.podgc import PodGarbageCollector
    from control.scheduler import Scheduler
    from netmodel.objects import Pod

    with SqliteStore(converged / "state.db") as store:
        assert Scheduler.has_start_work(store, pod_summaries(store))  # (the stuck pod)
        assert not KubeletPool.has_start_work(store, pod_summaries(store))
        pod = next(p for p in store.list("Pod") if p.name.startswith("web-"))
        assert isinstance(pod, Pod)
        store.update(pod.evolve(status=pod.status.model_copy(update={"phase": "Pending"})))
        assert KubeletPool.has_start_work(store, pod_summaries(store))
        store.delete("Pod", "default/stuck")
        assert not Scheduler.has_start_work(store, pod_summaries(store))
        assert not PodGarbageCollector.has_start_work(store, pod_summaries(store))
        store.create(
            pod.evolve(spec=pod.spec.model_copy(update={"node_name": "ghost"})).with_meta(
                name="orphan"
            )
        )
        assert PodGarbageCollector.has_start_work(
            store, pod_summaries(store)
        )  # bound to a node not stored


def test_start_work_is_recorded_and_read_again_while_no_pod_changes(
    converged: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change that writes no Pod and no Node records, with the converged revision,
    what a full start would find to do (the stuck pod to retry); the next start reads
    that instead of every pod. A change that writes pods records nothing of it, and
    the start after it reads the pods again."""
    import control.runner
    from control.noderules import converged_start_work

    scans: list[int] = []
    real = control.runner.pod_summaries

    def counting(store: object) -> object:
        scans.append(1)
        return real(store)  # type: ignore[arg-type]

    monkeypatch.setattr(control.runner, "pod_summaries", counting)

    def change(text: str) -> None:
        s = session(converged, fast=True)
        try:
            apply(text)(s)
            assert s.plane.started_from_converged
        finally:
            s.close()

    assert converged_start_work(converged) is None  # (the base was a full start)
    change(service("web2", "web", 81))
    assert scans == [1]
    want = {
        "default-scheduler": True,  # the stuck pod
        "kubelet": False,
        "pod-garbage-collector": False,
        "pods-deleting": False,
    }
    assert converged_start_work(converged) == want
    change(service("web3", "web", 82))
    assert scans == [1]  # read from the record
    assert converged_start_work(converged) == want
    change(deployment("web", 4))  # writes a pod
    assert converged_start_work(converged) is None
    change(service("web4", "web", 83))
    assert scans == [1, 1]
    assert converged_start_work(converged) == want
