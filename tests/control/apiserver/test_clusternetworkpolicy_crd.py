"""ClusterNetworkPolicy (``policy.networking.k8s.io/v1alpha2``) through the apiserver
pipeline in process, served by the CRD svclab ships (the network-policy-api's standard
channel, v0.2.0): the API's own samples are stored as written; an invalid policy is
refused with every cause in kube-apiserver's words, from the CRD's OpenAPI schema and
its CEL rules (``isCIDR``, ``self.start < self.end``), and nothing stored changes."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import crdhelpers
import pytest
import yaml
from api_helpers import make_api

from control.apiserver import APIServer
from netmodel import clusterpolicy, structural
from netmodel.kinds import object_from_dict

CRD: dict[str, Any] = yaml.safe_load(
    resources.files("netmodel")
    .joinpath("crddata/policy.networking.k8s.io_clusternetworkpolicies.yaml")
    .read_text(encoding="utf-8")
)
STORIES = (
    Path(__file__).resolve().parents[2] / "data" / "clusternetworkpolicy" / "user-stories.yaml"
)
KIND = clusterpolicy.STORE_KIND


@pytest.fixture
def api() -> Iterator[APIServer]:
    with crdhelpers.installed(make_api(), copy.deepcopy(CRD)) as a:
        yield a


def _cnp(name: str = "p", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"tier": "Admin", "priority": 10, "subject": {"namespaces": {}}}
    return {
        "apiVersion": clusterpolicy.API_VERSION,
        "kind": "ClusterNetworkPolicy",
        "metadata": {"name": name},
        "spec": {**base, **spec},
    }


def _egress_to(*peers: dict[str, Any], **rule: Any) -> dict[str, Any]:
    return _cnp(egress=[{"action": "Deny", "to": list(peers), **rule}])


def _causes(api: APIServer, doc: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    with pytest.raises(structural.SchemaInvalidError) as err:
        api.create(object_from_dict(doc))
    return err.value.causes


def test_the_apis_samples_are_stored_as_written(api: APIServer) -> None:
    docs = [d for d in yaml.safe_load_all(STORIES.read_text(encoding="utf-8")) if d]
    for d in docs:
        api.create(object_from_dict(copy.deepcopy(d)))
    stored = {o.name: o.to_dict() for o in api.store.list(KIND)}
    assert sorted(stored) == sorted(d["metadata"]["name"] for d in docs)
    for d in docs:
        assert stored[d["metadata"]["name"]]["spec"] == d["spec"]
        # and read as the decision reads them
        assert (
            clusterpolicy.policy_from_wire(stored[d["metadata"]["name"]]).name
            == (d["metadata"]["name"])
        )


def test_every_problem_is_a_cause_in_kubes_words_and_nothing_is_stored(api: APIServer) -> None:
    bad = _cnp(
        "bad",
        tier="Middle",
        priority=1001,
        subject={"namespaces": {}, "pods": {"podSelector": {}}},
        ingress=[{"action": "Allow", "from": [{}]}],
        egress=[
            {
                "action": "Deny",
                "to": [{"networks": ["10.0.0.0/8", "10.0.0.0/8", "300.0.0.0/8"]}],
                "protocols": [
                    {"tcp": {"destinationPort": {"range": {"start": 90, "end": 80}}}},
                    {"tcp": {}, "udp": {"destinationPort": {"number": 0}}},
                ],
            }
        ],
    )
    assert _causes(api, bad) == (
        ("spec.tier", 'Unsupported value: "Middle": supported values: "Admin", "Baseline"'),
        (
            "spec.priority",
            "Invalid value: 1001: spec.priority in body should be less than or equal to 1000",
        ),
        ("spec.subject", "Too many: 2: must have at most 1 items"),
        (
            "spec.ingress[0].action",
            'Unsupported value: "Allow": supported values: "Accept", "Deny", "Pass"',
        ),
        (
            "spec.ingress[0].from[0]",
            "Invalid value: 0: spec.ingress[0].from[0] in body should have at least 1 properties",
        ),
        ("spec.egress[0].to[0].networks[1]", 'Duplicate value: "10.0.0.0/8"'),
        ("spec.egress[0].protocols[1]", "Too many: 2: must have at most 1 items"),
        (
            "spec.egress[0].protocols[1].tcp",
            "Invalid value: 0: spec.egress[0].protocols[1].tcp in body should have at least 1 "
            "properties",
        ),
        (
            "spec.egress[0].protocols[1].udp.destinationPort.number",
            "Invalid value: 0: spec.egress[0].protocols[1].udp.destinationPort.number in body "
            "should be greater than or equal to 1",
        ),
        (
            "spec.egress[0].to[0].networks[2]",
            'Invalid value: "string": Invalid CIDR format provided',
        ),
        (
            "spec.egress[0].protocols[0].tcp.destinationPort.range",
            'Invalid value: "object": Start port must be less than End port',
        ),
    )
    assert api.store.list(KIND) == []


@pytest.mark.parametrize(
    ("cidr", "valid"),
    [
        ("10.0.0.0/8", True),
        ("10.1.2.3/8", True),  # host bits set: netip.ParsePrefix takes it
        ("0.0.0.0/0", True),
        ("fd00::/8", True),
        ("::1.2.3.4/128", True),
        ("10.0.0.0", False),  # no '/'
        ("10.0.0.0/33", False),
        ("10.0.0.0/08", False),  # leading zero in the bits
        ("10.0.0.0/+8", False),
        ("010.0.0.0/8", False),  # leading zero in an octet
        ("10.0.0.0/255.0.0.0", False),
        ("::ffff:10.0.0.0/104", False),  # IPv4-mapped
        ("fe80::1%eth0/64", False),  # zone
    ],
)
def test_networks_are_checked_by_iscidr_as_kube_parses_them(
    api: APIServer, cidr: str, valid: bool
) -> None:
    doc = _egress_to({"networks": [cidr]})
    if valid:
        api.create(object_from_dict(doc))
        return
    assert _causes(api, doc) == (
        (
            "spec.egress[0].to[0].networks[0]",
            'Invalid value: "string": Invalid CIDR format provided',
        ),
    )


def test_an_experimental_peer_is_pruned_by_the_standard_crd(api: APIServer) -> None:
    """The standard channel has no ``nodes`` peer: pruned, the peer is empty and refused,
    as on a cluster that installed the standard channel."""
    assert _causes(api, _egress_to({"nodes": {}})) == (
        (
            "spec.egress[0].to[0]",
            "Invalid value: 0: spec.egress[0].to[0] in body should have at least 1 properties",
        ),
    )


def test_an_invalid_update_leaves_the_stored_policy_as_it_was(api: APIServer) -> None:
    api.create(object_from_dict(_egress_to({"networks": ["10.0.0.0/8"]})))
    before = api.store.list(KIND)[0].to_dict()
    with pytest.raises(structural.SchemaInvalidError):
        api.update(object_from_dict(_egress_to({"networks": ["10.0.0.0/8"]}, name="x" * 101)))
    assert api.store.list(KIND)[0].to_dict() == before
