"""Zones and traffic distribution through the control plane: the Cluster's node zones
reach the Node objects, the apiserver validates spec.trafficDistribution as
kube-apiserver 1.35 does, and the EndpointSlice controller writes (and removes) hints
for trafficDistribution and the topology-mode annotation."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from cp_helpers import deployment, make_plane, service, slices

from control.apiserver.validation import APIWarning
from control.events import timeline
from control.runner import ControlPlane
from netmodel.cluster import ZONE_LABEL, cluster_from_dict
from netmodel.errors import InputError, InvalidError
from netmodel.objects import Endpoint, Node

ZONED = [
    {"name": "node-1", "zone": "zone-a"},
    {"name": "node-2", "zone": "zone-a"},
    {"name": "node-3", "zone": "zone-b"},
    {"name": "node-4", "zone": "zone-b"},
]


def _eps(plane: ControlPlane, name: str = "web") -> list[Endpoint]:
    return sorted(
        (ep for sl in slices(plane, name) for ep in sl.endpoints), key=lambda e: e.addresses[0]
    )


def _hints(ep: Endpoint) -> tuple[list[str], list[str]]:
    h = ep.hints
    if h is None:
        return [], []
    return [z.name for z in h.for_zones], [n.name for n in h.for_nodes]


def _web(replicas: int = 4, **spec: Any) -> list[Any]:
    return [deployment("web", replicas), service("web", {"app": "web"}, **spec)]


def _events(plane: ControlPlane, reason: str) -> list[str]:
    return [e.message for e in timeline(plane.store) if e.reason == reason]


def test_cluster_zone_becomes_the_node_label() -> None:
    plane = make_plane([*ZONED, {"name": "node-5"}])
    nodes = {n.name: n for n in plane.store.list("Node") if isinstance(n, Node)}
    assert nodes["node-1"].labels[ZONE_LABEL] == "zone-a"
    assert nodes["node-4"].labels[ZONE_LABEL] == "zone-b"
    assert ZONE_LABEL not in nodes["node-5"].labels
    # the same zone given as a label too is accepted
    make_plane([{"name": "n", "zone": "z", "labels": {ZONE_LABEL: "z"}}])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "n", "zone": "-a"}, "spec.nodes.0.zone: invalid zone '-a'"),
        ({"name": "n", "zone": ""}, "spec.nodes.0.zone: invalid zone ''"),
        ({"name": "n", "zone": "z" * 64}, "spec.nodes.0.zone: invalid zone"),
        (
            {"name": "n", "zone": "a", "labels": {ZONE_LABEL: "b"}},
            "zone 'a' contradicts labels[topology.kubernetes.io/zone] 'b'",
        ),
    ],
)
def test_bad_zone_is_one_line_error(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as e:
        cluster_from_dict({"kind": "Cluster", "spec": {"nodes": [entry]}}, file="c.yaml")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_traffic_distribution_is_validated_as_kube_apiserver_does() -> None:
    plane = make_plane(1)
    with pytest.raises(InvalidError) as e:
        plane.apiserver.create(service("web", {"app": "web"}, trafficDistribution="Nearby"))
    assert (
        'spec.trafficDistribution: Unsupported value: "Nearby": supported values: '
        '"PreferClose", "PreferSameZone", "PreferSameNode"'
    ) in str(e.value)
    assert [s.key for s in plane.store.list("Service", "default")] == ["default/kubernetes"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plane.apiserver.create(service("web", {"app": "web"}, trafficDistribution="PreferClose"))
    assert [str(w.message) for w in caught if issubclass(w.category, APIWarning)] == [
        'spec.trafficDistribution: "PreferClose" is deprecated; use "PreferSameZone"'
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plane.apiserver.create(service("api", {"app": "a"}, trafficDistribution="PreferSameNode"))
    assert not [w for w in caught if issubclass(w.category, APIWarning)]


@pytest.mark.parametrize("td", ["PreferSameZone", "PreferClose"])
def test_same_zone_hints_every_ready_endpoint_for_its_zone(td: str) -> None:
    plane = make_plane(ZONED)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plane.apply(_web(trafficDistribution=td))
    assert len([w for w in caught if issubclass(w.category, APIWarning)]) == (td == "PreferClose")
    plane.run_until_idle()
    eps = _eps(plane)
    assert len(eps) == 4
    for ep in eps:
        assert ep.zone in ("zone-a", "zone-b")
        assert _hints(ep) == ([ep.zone], [])
    # the stored wire form is upstream's: forZones only
    (sl,) = slices(plane, "web")
    for e in sl.to_dict()["endpoints"]:
        assert e["hints"] == {"forZones": [{"name": e["zone"]}]}


def test_same_node_hints_name_the_node_too_and_removing_the_field_removes_hints() -> None:
    plane = make_plane(ZONED)
    plane.apply(_web(trafficDistribution="PreferSameNode"))
    plane.run_until_idle()
    for ep in _eps(plane):
        assert _hints(ep) == ([ep.zone], [ep.node_name])
    plane.apply([service("web", {"app": "web"})])
    plane.run_until_idle()
    assert all(ep.hints is None for ep in _eps(plane))


def test_no_hints_without_zones_or_request() -> None:
    plane = make_plane(3)  # no zones: endpoints have no zone, so no zone hints
    plane.apply(_web(3, trafficDistribution="PreferSameZone"))
    plane.run_until_idle()
    assert all(ep.zone is None and ep.hints is None for ep in _eps(plane))
    plane = make_plane(ZONED)  # zones, but the Service asks for nothing
    plane.apply(_web())
    plane.run_until_idle()
    assert all(ep.zone and ep.hints is None for ep in _eps(plane))


def test_auto_shares_zones_by_cpu_and_says_so() -> None:
    plane = make_plane(ZONED)
    plane.apply(
        [
            deployment("web", 4),
            service("web", {"app": "web"}).with_meta(
                annotations={"service.kubernetes.io/topology-mode": "Auto"}
            ),
        ]
    )
    plane.run_until_idle()
    eps = _eps(plane)
    per_zone: dict[str, int] = {}
    for ep in eps:
        zones, nodes = _hints(ep)
        assert len(zones) == 1 and nodes == []
        per_zone[zones[0]] = per_zone.get(zones[0], 0) + 1
    # equal CPU in both zones: two endpoints each, whatever zones the pods landed in
    assert per_zone == {"zone-a": 2, "zone-b": 2}
    assert _events(plane, "TopologyAwareHintsEnabled") == [
        "Topology Aware Hints has been enabled, addressType: IPv4"
    ]
    # the annotation wins over trafficDistribution, as upstream orders them; dropping
    # it hands the hints to trafficDistribution
    plane.apply([service("web", {"app": "web"}, trafficDistribution="PreferSameZone")])
    plane.run_until_idle()
    for ep in _eps(plane):
        assert _hints(ep) == ([ep.zone], [])
    assert _events(plane, "TopologyAwareHintsDisabled") == [
        "Topology Aware Hints has been disabled, addressType: IPv4"
    ]


def test_auto_safeguards_remove_hints() -> None:
    plane = make_plane([{"name": "node-1", "zone": "zone-a"}, {"name": "node-2", "zone": "zone-a"}])
    annotated = service("web", {"app": "web"}).with_meta(
        annotations={"service.kubernetes.io/topology-aware-hints": "auto"}
    )
    plane.apply([deployment("web", 2), annotated])
    plane.run_until_idle()
    assert all(ep.hints is None for ep in _eps(plane))
    assert _events(plane, "TopologyAwareHintsDisabled") == [
        "Insufficient Node information: allocatable CPU or zone not specified on one or "
        "more nodes, addressType: IPv4"
    ]


def test_a_node_zone_change_moves_the_hints() -> None:
    plane = make_plane(ZONED)
    plane.apply(_web(trafficDistribution="PreferSameZone"))
    plane.run_until_idle()
    node = plane.store.get("Node", "node-1")
    assert isinstance(node, Node)
    plane.store.update(node.with_meta(labels={**node.labels, ZONE_LABEL: "zone-c"}))
    plane.run_until_idle()
    assert any(ep.node_name == "node-1" for ep in _eps(plane))  # 4 pods spread on 4 nodes
    for ep in _eps(plane):
        want = "zone-c" if ep.node_name == "node-1" else ep.zone
        assert ep.zone == want and _hints(ep) == ([want], [])
