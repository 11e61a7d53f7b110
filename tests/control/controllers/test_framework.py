"""The controller framework: work queue semantics, the informer cache, retries, GC."""

from __future__ import annotations

from collections.abc import Iterable

from cp_helpers import deployment, make_plane, pods, reasons, service, slices

from control.apiserver.server import APIServer
from control.clock import FakeClock
from control.controllers.base import Controller, ObjectCache, WorkQueue
from control.events import Recorder, timeline
from control.store.base import WatchEvent
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.errors import ConflictError
from netmodel.objects import (
    Container,
    KubeObject,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodSpec,
)


def test_queue_collapses_duplicates_and_keeps_fifo_order() -> None:
    q = WorkQueue()
    for k in ["a", "b", "a", "c", "b"]:
        q.add(k)
    assert len(q) == 3
    assert [q.get(), q.get(), q.get()] == ["a", "b", "c"]


def test_key_added_while_processing_is_requeued_after_done_not_duplicated() -> None:
    q = WorkQueue()
    q.add("a")
    key = q.get()
    q.add("a")  # while processing: marked dirty, not handed out again
    q.add("a")
    assert len(q) == 0
    q.done(key)
    assert len(q) == 1 and q.get() == "a"


def test_requeue_counts_failures_until_forget() -> None:
    q = WorkQueue()
    assert q.requeue("a") == 1
    q.get()
    q.done("a")
    assert q.requeue("a") == 2
    q.forget("a")
    assert q.num_requeues("a") == 0


def _pod(name: str, labels: dict[str, str]) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default", labels=labels),
        spec=PodSpec(containers=[Container(name="c", image="nginx")]),
    )


def test_cache_indexes_follow_updates_and_deletes() -> None:
    cache = ObjectCache({"app": lambda o: [o.labels["app"]] if "app" in o.labels else []})
    a = _pod("a", {"app": "web"})
    cache.apply(WatchEvent("ADDED", a, 1))
    cache.apply(WatchEvent("ADDED", _pod("b", {"app": "web"}), 2))
    assert [p.name for p in cache.by_index("app", "web")] == ["a", "b"]
    old = cache.apply(WatchEvent("MODIFIED", _pod("a", {"app": "db"}), 3))
    assert old is a
    assert [p.name for p in cache.by_index("app", "web")] == ["b"]
    assert [p.name for p in cache.by_index("app", "db")] == ["a"]
    cache.apply(WatchEvent("DELETED", _pod("b", {"app": "web"}), 4))
    assert cache.by_index("app", "web") == []
    assert cache.get("Pod", "default/b") is None


class _Failing(Controller):
    name = "failing-controller"
    kinds = frozenset({"Pod"})

    def __init__(self, api: APIServer, recorder: Recorder) -> None:
        super().__init__(api, recorder)
        self.calls = 0

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        return [event.object.key]

    def subject(self, key: str) -> KubeObject | None:
        return self.cache.get("Pod", key)

    def reconcile(self, key: str) -> None:
        self.calls += 1
        raise ConflictError("always stale")


def test_failing_reconcile_is_retried_a_bounded_number_of_times_then_reported() -> None:
    store = MemoryStore()
    clock = FakeClock()
    rec = Recorder(store, clock)
    api = APIServer(store, ClusterSpec(nodes=0), clock=clock, recorder=rec)
    pod = api.create(_pod("p", {"app": "x"}))
    c = _Failing(api, rec)
    c.handle([WatchEvent("ADDED", pod, pod.resource_version)])
    rounds = 0
    while c.sync():
        rounds += 1
        assert rounds < 20
    assert c.calls == 1 + c.max_retries
    failed = [e for e in timeline(store) if e.reason == "ReconcileFailed"]
    assert len(failed) == 1 and failed[0].type == "Warning"
    assert "always stale" in failed[0].message


def test_deleting_a_deployment_collects_replicasets_pods_but_not_others() -> None:
    plane = make_plane(2)
    plane.apply([deployment("web", 2), deployment("db", 1), service("web", {"app": "web"})])
    plane.run_until_idle()
    assert len(pods(plane, "web-")) == 2
    plane.delete("Deployment", "default/web")
    plane.run_until_idle()
    assert pods(plane, "web-") == []
    assert [r.name for r in plane.store.list("ReplicaSet")] == [
        rs.name for rs in plane.store.list("ReplicaSet") if rs.name.startswith("db-")
    ]
    assert len(pods(plane, "db-")) == 1
    # bound pods went through the kubelet: marked, then killed and finalised
    gone = pods(plane, "web-")
    assert gone == []
    assert slices(plane, "web")  # the Service is not owned by the Deployment


def test_deleting_a_service_collects_its_slices() -> None:
    plane = make_plane(1)
    plane.apply([deployment("web", 1), service("web", {"app": "web"})])
    plane.run_until_idle()
    names = [s.name for s in slices(plane, "web")]
    assert names
    plane.delete("Service", "default/web")
    plane.run_until_idle()
    assert slices(plane, "web") == []
    for n in names:
        assert "Deleted" in reasons(plane, "EndpointSlice", n)


def test_dependent_created_with_a_missing_owner_is_collected() -> None:
    plane = make_plane(1)
    ref = OwnerReference(kind="ReplicaSet", name="gone", uid="u-1", controller=True)
    orphan = _pod("stray", {"app": "stray"}).with_meta(owner_references=[ref])
    plane.apiserver.create(orphan)
    plane.run_until_idle()
    assert pods(plane, "stray") == []
