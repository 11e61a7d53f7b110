"""The node heartbeat: each kubelet creates and renews its node's Lease
(``kube-node-lease/<node>``), and, as in a cluster, neither leaves an Event."""

from __future__ import annotations

from control.agents import nodelease
from control.agents.nodelease import LeaseAPI
from control.clock import FakeClock
from control.events import timeline
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject, Pod


def _renew_times(plane: ControlPlane) -> dict[str, str]:
    out: dict[str, str] = {}
    for lease in plane.store.list("Lease", nodelease.NAMESPACE):
        spec = (lease.model_extra or {})["spec"]
        assert spec["holderIdentity"] == lease.name
        out[lease.name] = spec["renewTime"]
    return out


def _pod(name: str, node: str) -> Pod:
    p = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x"}]},
        }
    )
    assert isinstance(p, Pod)
    return p


def test_leases_are_created_and_renewed_when_due_and_record_no_event() -> None:
    clock = FakeClock()
    cluster = ClusterSpec.model_validate({"nodes": 2, "dns": False})
    plane = ControlPlane(MemoryStore(), cluster, seed=1, clock=clock)
    plane.start()
    plane.run_until_idle()
    first = _renew_times(plane)
    assert first == {n: nodelease.micro_time(clock.now()) for n in ("node-1", "node-2")}
    clock.advance(nodelease.RENEW_INTERVAL - 1)
    plane.run_until_idle()
    assert _renew_times(plane) == first  # not due yet: nothing written
    clock.advance(1)
    # under the runner a kubelet renews at its next sync once due: give node-1 a pod
    plane.apply([_pod("web", "node-1")])
    plane.run_until_idle()
    assert _renew_times(plane)["node-1"] == nodelease.micro_time(clock.now())
    about = {(e.involved_object.kind, e.involved_object.namespace) for e in timeline(plane.store)}
    assert ("Lease", nodelease.NAMESPACE) not in about


class _WritesOnly:
    """The apiserver's writes, with a read view that refuses every read: what a kubelet
    renewing from the Lease it last wrote must never need."""

    def __init__(self, api: LeaseAPI) -> None:
        self._api = api

    @property
    def store(self) -> object:
        raise AssertionError("the renewal read the Lease")

    def create(self, obj: KubeObject, *, component: str = "") -> KubeObject:
        return self._api.create(obj, component=component)

    def update(self, obj: KubeObject, *, component: str = "") -> KubeObject:
        return self._api.update(obj, component=component)


def _stored_lease(plane: ControlPlane, node: str) -> KubeObject:
    return plane.store.get("Lease", f"{nodelease.NAMESPACE}/{node}")


def _started_plane(clock: FakeClock) -> ControlPlane:
    plane = ControlPlane(MemoryStore(), ClusterSpec.model_validate({"nodes": 1, "dns": False}),
                         seed=1, clock=clock)  # fmt: skip
    plane.start()
    plane.run_until_idle()
    return plane


def test_a_renewal_from_the_lease_last_written_is_one_write_without_a_read() -> None:
    clock = FakeClock()
    plane = _started_plane(clock)
    latest = _stored_lease(plane, "node-1")
    clock.advance(nodelease.RENEW_INTERVAL)
    written = nodelease.renew(
        _WritesOnly(plane.apiserver), None, "node-1", clock.now(), latest=latest
    )
    assert written is not None
    assert written == _stored_lease(plane, "node-1")
    assert written.resource_version > latest.resource_version
    assert (written.model_extra or {})["spec"]["renewTime"] == nodelease.micro_time(clock.now())
    # not due again yet: nothing written, nothing read
    assert (
        nodelease.renew(_WritesOnly(plane.apiserver), None, "node-1", clock.now(), latest=written)
        is None
    )


def test_a_lease_changed_meanwhile_is_read_again_and_renewed_keeping_the_change() -> None:
    clock = FakeClock()
    plane = _started_plane(clock)
    latest = _stored_lease(plane, "node-1")
    relabelled = plane.apiserver.update(latest.with_meta(labels={"team": "net"}), component="user")
    clock.advance(nodelease.RENEW_INTERVAL)
    written = nodelease.renew(plane.apiserver, None, "node-1", clock.now(), latest=latest)
    assert written is not None and written == _stored_lease(plane, "node-1")
    assert written.resource_version > relabelled.resource_version
    assert written.labels == {"team": "net"}  # renewed from what is stored, not the stale one
    assert (written.model_extra or {})["spec"]["renewTime"] == nodelease.micro_time(clock.now())


def test_a_lease_deleted_meanwhile_is_created_again_when_due() -> None:
    clock = FakeClock()
    plane = _started_plane(clock)
    latest = _stored_lease(plane, "node-1")
    plane.apiserver.delete("Lease", latest.key, component="user")
    clock.advance(nodelease.RENEW_INTERVAL)
    written = nodelease.renew(plane.apiserver, None, "node-1", clock.now(), latest=latest)
    assert written is not None and written == _stored_lease(plane, "node-1")
    assert (written.model_extra or {})["spec"]["renewTime"] == nodelease.micro_time(clock.now())
