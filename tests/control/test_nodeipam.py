"""Node IPAM: disjoint podCIDRs inside the podCIDR, stable across restarts, exhaustion is a
condition."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from control.apiserver import APIServer
from control.clock import FakeClock
from control.controllers.nodeipam import NodeIPAM
from control.events import Recorder, timeline
from control.store import MemoryStore, SqliteStore, Store
from netmodel.cluster import ClusterSpec
from netmodel.objects import Node, ObjectMeta


def cluster_api(store: Store | None = None, **spec: Any) -> APIServer:
    store = store if store is not None else MemoryStore()
    clock = FakeClock()
    api = APIServer(
        store, ClusterSpec.model_validate(spec), clock=clock, recorder=Recorder(store, clock)
    )
    api.bootstrap()
    api.bootstrap_nodes()
    return api


def nodes(api: APIServer) -> dict[str, Node]:
    return {n.name: n for n in api.store.list("Node") if isinstance(n, Node)}


def cidrs(api: APIServer) -> dict[str, str | None]:
    return {name: n.spec.pod_cidr for name, n in nodes(api).items()}


def add_node(api: APIServer, name: str, pod_cidr: str | None = None) -> None:
    node = Node(metadata=ObjectMeta(name=name))
    if pod_cidr:
        node = node.evolve(spec=node.spec.evolve(pod_cidr=pod_cidr, pod_cidrs=[pod_cidr]))
    api.create(node)


def test_each_node_gets_a_disjoint_subnet_in_natural_order() -> None:
    api = cluster_api(nodes=12)
    ipam = NodeIPAM(api, api.cluster)
    ipam.sync_all()
    got = cidrs(api)
    assert got["node-1"] == "10.244.0.0/24"
    assert got["node-2"] == "10.244.1.0/24"
    assert got["node-10"] == "10.244.9.0/24"
    nets = [ipaddress.IPv4Network(c) for c in got.values() if c]
    assert len(nets) == 12
    pod_net = ipaddress.IPv4Network("10.244.0.0/16")
    assert all(n.prefixlen == 24 and n.subnet_of(pod_net) for n in nets)
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
    for n in nodes(api).values():
        assert n.spec.pod_cidrs == [n.spec.pod_cidr]
    # idempotent: a second pass writes nothing
    rev = api.store.revision
    ipam.sync_all()
    assert api.store.revision == rev


def test_user_given_pod_cidr_is_honoured_and_skipped(tmp_path: Path) -> None:
    api = cluster_api(nodes=0)
    add_node(api, "fixed", "10.244.0.0/23")  # a bigger block covers two /24s
    add_node(api, "a")
    add_node(api, "b")
    ipam = NodeIPAM(api)
    ipam.sync_all()
    assert cidrs(api) == {"a": "10.244.2.0/24", "b": "10.244.3.0/24", "fixed": "10.244.0.0/23"}
    assert ipam.owner("10.244.1.0/24") == "fixed"


def test_overlapping_user_cidr_is_reported_not_shared() -> None:
    api = cluster_api(nodes=1)
    ipam = NodeIPAM(api)
    ipam.sync_all()
    add_node(api, "intruder", "10.244.0.0/24")  # node-1's
    ipam.reconcile("intruder")
    ipam.reconcile("intruder")
    assert ipam.owner("10.244.0.0/24") == "node-1"
    warnings = [e for e in timeline(api.store) if e.reason == "CIDRNotAvailable"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    assert "overlaps the podCIDR of node-1" in warnings[0].message


def test_assignments_are_stable_across_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteStore(path)
    api = cluster_api(store, nodes=3)
    NodeIPAM(api).sync_all()
    api.delete("Node", "node-2")  # frees 10.244.1.0/24 (after the restart too)
    before = cidrs(api)
    store.close()

    store2 = SqliteStore(path)
    clock = FakeClock()
    api2 = APIServer(store2, api.cluster, clock=clock, recorder=Recorder(store2, clock))
    ipam2 = NodeIPAM(api2)
    ipam2.sync_all()
    assert cidrs(api2) == before  # nothing moved
    add_node(api2, "node-4")
    add_node(api2, "node-5")
    ipam2.reconcile("node-4")
    ipam2.reconcile("node-5")
    after = cidrs(api2)
    assert after["node-4"] == "10.244.1.0/24"  # the freed one, not a duplicate
    assert after["node-5"] == "10.244.3.0/24"
    assert len(set(after.values())) == len(after)
    store2.close()


def test_running_out_is_a_condition_and_recovers() -> None:
    api = cluster_api(nodes=4, podCIDR="10.244.0.0/22", nodeCIDRMaskSize=24)
    ipam = NodeIPAM(api)
    ipam.sync_all()
    assert ipam.free == 0
    add_node(api, "node-5")
    ipam.reconcile("node-5")  # no crash
    n5 = nodes(api)["node-5"]
    assert n5.spec.pod_cidr is None
    (cond,) = [c for c in n5.status.conditions if c.type == "NetworkUnavailable"]
    assert (cond.status, cond.reason) == ("True", "NoCIDRAvailable")
    assert cond.message == "no podCIDR of /24 left in 10.244.0.0/22"
    ev = timeline(api.store)[-1]
    assert (ev.reason, ev.type, ev.involved_object.name) == (
        "CIDRNotAvailable",
        "Warning",
        "node-5",
    )
    rev = api.store.revision
    ipam.reconcile("node-5")  # already reported: no new write, no new event
    assert api.store.revision == rev

    api.delete("Node", "node-2")
    ipam.reconcile("node-2")  # gone: its subnet comes back
    ipam.reconcile("node-5")
    n5 = nodes(api)["node-5"]
    assert n5.spec.pod_cidr == "10.244.1.0/24"
    (cond,) = [c for c in n5.status.conditions if c.type == "NetworkUnavailable"]
    assert (cond.status, cond.reason) == ("False", "CIDRAssigned")


def test_subnets_of_a_service_range_inside_the_pod_range_are_never_handed_out() -> None:
    """A serviceCIDR carved out of the podCIDR (GKE routes-based) is filtered out of the
    node ranges, as kube-controller-manager's allocator does."""
    api = cluster_api(nodes=3, podCIDR="10.4.0.0/22", serviceCIDR="10.4.1.0/24")
    NodeIPAM(api, api.cluster).sync_all()
    assert cidrs(api) == {
        "node-1": "10.4.0.0/24",
        "node-2": "10.4.2.0/24",
        "node-3": "10.4.3.0/24",
    }
