"""The node heartbeat: each kubelet creates and renews its node's Lease
(``kube-node-lease/<node>``), and, as in a cluster, neither leaves an Event."""

from __future__ import annotations

from control.agents import nodelease
from control.clock import FakeClock
from control.events import timeline
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import Pod


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
