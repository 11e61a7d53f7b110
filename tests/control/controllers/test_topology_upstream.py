"""Upstream's topology test cases, restated as data in tests/data/topology (see its
PROVENANCE.md), run against svclab: kube-proxy's CategorizeEndpoints with hints, the
EndpointSlice controller's trafficDistribution hints, and topology-aware routing's
allocation (AddHints) and zone shares (SetNodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from control.controllers.topologyhints import (
    INSUFFICIENT_NODE_INFO,
    ZoneRatios,
    auto_hints,
    cpu_ratios,
    traffic_distribution_hints,
)
from dataplane.proxy.model import EndpointInfo, ServicePortInfo, ServicePortName
from dataplane.proxy.snapshot import categorize_endpoints
from netmodel.objects import Condition, Endpoint, Node, NodeStatus, ObjectMeta

DATA = Path(__file__).resolve().parents[2] / "data" / "topology"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DATA / name).read_text())
    return data


CATEGORIZE = _load("kube-proxy-categorize.yaml")["cases"]
TRAFFICDIST = _load("endpointslice-trafficdist.yaml")["cases"]
CACHE = _load("endpointslice-topologycache.yaml")


def test_every_file_is_named_in_provenance() -> None:
    text = (DATA / "PROVENANCE.md").read_text()
    for f in DATA.glob("*.yaml"):
        assert f"`{f.name}`" in text, f.name
    assert len(CATEGORIZE) == 31 and len(TRAFFICDIST) == 8
    assert len(CACHE["add_hints"]) == 6 and len(CACHE["set_nodes"]) == 9


# --------------------------------------------------------------------------- kube-proxy

SPN = ServicePortName("ns", "svc", "", "TCP")


def _endpoint(d: dict[str, Any]) -> EndpointInfo:
    ip, port = d["ep"].rsplit(":", 1)
    return EndpointInfo(
        ip,
        int(port),
        is_local=d.get("local", False),
        ready=d.get("ready", False),
        serving=d.get("serving", False),
        terminating=d.get("terminating", False),
        zone_hints=frozenset(d.get("zones") or ()),
        node_hints=frozenset(d.get("nodes") or ()),
        service_port=SPN,
    )


@pytest.mark.parametrize("case", CATEGORIZE, ids=[c["name"] for c in CATEGORIZE])
def test_kube_proxy_categorize_endpoints(case: dict[str, Any]) -> None:
    svc = case["service"]
    info = ServicePortInfo(
        name=SPN,
        cluster_ip="172.30.0.1",
        port=80,
        node_port=svc.get("node_port", 0),
        internal_policy_local=svc.get("internal_local", False),
        external_policy_local=svc.get("external_local", False),
    )
    eps = tuple(sorted((_endpoint(e) for e in case["endpoints"]), key=lambda e: e.endpoint))
    zone = case.get("node_zone") or ""
    cluster, local, reachable, has_any = categorize_endpoints(
        eps, info, zone, case.get("node", "node-1")
    )
    want = case["expect"]
    for what, got, used in (
        ("cluster", cluster, info.uses_cluster_endpoints),
        ("local", local, info.uses_local_endpoints),
    ):
        if want[what] is None:  # the service never uses this kind of endpoints
            assert not used and got == (), what
        else:
            assert used, what
            assert sorted(e.endpoint for e in got) == sorted(want[what]), what
    if want["cluster"] is not None and want["local"] is None:
        want_all = want["cluster"]
    elif want["local"] is not None and want["cluster"] is None:
        want_all = want["local"]
    else:
        want_all = want["all"]
    assert sorted(e.endpoint for e in reachable) == sorted(want_all)
    assert has_any == (bool(want_all) or want.get("only_remote", False))


# --------------------------------------------------------------------------- trafficDistribution


def _slices(raw: list[list[dict[str, Any]]] | None) -> list[list[Endpoint]]:
    return [[Endpoint.model_validate(e) for e in sl] for sl in raw or []]


@pytest.mark.parametrize("case", TRAFFICDIST, ids=[c["name"] for c in TRAFFICDIST])
def test_endpointslice_traffic_distribution_hints(case: dict[str, Any]) -> None:
    td = case["traffic_distribution"]
    create = [traffic_distribution_hints(sl, td) for sl in _slices(case.get("create"))]
    update = [traffic_distribution_hints(sl, td) for sl in _slices(case.get("update"))]
    unchanged = []
    for sl in _slices(case.get("unchanged")):
        hinted = traffic_distribution_hints(sl, td)
        (update if hinted != sl else unchanged).append(hinted)
    assert create == _slices(case.get("want_create"))
    assert update == _slices(case.get("want_update"))
    assert unchanged == _slices(case.get("want_unchanged"))
    # what the controller stores: the wire form of the hints, as upstream writes them
    for got, want in zip(create, case.get("want_create") or [], strict=True):
        assert [e.to_dict() for e in got] == want


def test_traffic_distribution_leaves_unchanged_endpoints_as_they_are() -> None:
    """Upstream's TestReconcileHints_doesNotMutateUnchangedSlices: svclab's objects are
    frozen, and an endpoint whose hints are right comes back as the same object."""
    ep = Endpoint.model_validate(
        {"addresses": ["10.0.0.1"], "zone": "zone-a", "conditions": {"ready": True}}
    )
    (hinted,) = traffic_distribution_hints([ep], "PreferClose")
    assert ep.hints is None and hinted.hints is not None
    assert traffic_distribution_hints([hinted], "PreferClose")[0] is hinted


# --------------------------------------------------------------------------- topology-mode Auto


@pytest.mark.parametrize("case", CACHE["add_hints"], ids=[c["name"] for c in CACHE["add_hints"]])
def test_endpointslice_topology_cache_add_hints(case: dict[str, Any]) -> None:
    ratios = case["cpu_ratios"]
    zr = ZoneRatios(None, INSUFFICIENT_NODE_INFO) if ratios is None else ZoneRatios(ratios)
    create, update = _slices(case.get("create")), _slices(case.get("update"))
    flat = [ep for sl in create + update for ep in sl]
    outcome = auto_hints(flat, zr)
    it = iter(outcome.endpoints)
    got_create = [[next(it) for _ in sl] for sl in create]
    got_update = [[next(it) for _ in sl] for sl in update]
    assert got_create == _slices(case.get("want_create"))
    assert got_update == _slices(case.get("want_update"))
    want_per_zone = case["want_per_zone"]
    assert outcome.per_zone == (want_per_zone or {})
    event = case["want_event"]
    assert outcome.event is not None
    reason, message = outcome.event
    assert reason == event["reason"] and message.startswith(event["message"])
    assert ("Normal" if reason == "TopologyAwareHintsEnabled" else "Warning") == event["type"]


def _node(i: int, d: dict[str, Any]) -> Node:
    labels = dict(d.get("labels") or {})
    if d.get("zone"):
        labels["topology.kubernetes.io/zone"] = d["zone"]
    return Node(
        metadata=ObjectMeta(name=f"n{i}", labels=labels),
        status=NodeStatus(
            allocatable={"cpu": d["cpu"]},
            conditions=[Condition(type="Ready", status=d["ready"])],
        ),
    )


@pytest.mark.parametrize("case", CACHE["set_nodes"], ids=[c["name"] for c in CACHE["set_nodes"]])
def test_endpointslice_topology_cache_set_nodes(case: dict[str, Any]) -> None:
    got = cpu_ratios(_node(i, d) for i, d in enumerate(case["nodes"]))
    want = case["want_ratios"]
    if want is None:
        assert got.ratios is None and got.reason == INSUFFICIENT_NODE_INFO
    else:
        assert got.ratios == want
