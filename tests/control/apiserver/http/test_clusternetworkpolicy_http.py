"""ClusterNetworkPolicy through a real ``svclab serve``, the real kubectl and the official
kubernetes Python client, as on a real cluster: the network-policy-api's CRD (the one
svclab ships) is installed with ``kubectl apply``, then the API's samples are applied,
listed by the short name ``cnp`` with the CRD's Tier/Priority columns and read back;
an invalid policy or update gets kube-apiserver's 422 (kubectl's one line, the
client's causes) and nothing stored changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import crdhelpers
import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from serving import ROOT, Served

pytestmark = pytest.mark.slow

CRD_FILE = Path(
    str(
        resources.files("netmodel").joinpath(
            "crddata/policy.networking.k8s.io_clusternetworkpolicies.yaml"
        )
    )
)
STORIES = ROOT / "tests" / "data" / "clusternetworkpolicy" / "user-stories.yaml"
GROUP, VERSION, PLURAL = "policy.networking.k8s.io", "v1alpha2", "clusternetworkpolicies"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with crdhelpers.running(Served(tmp_path_factory.mktemp("serve") / "state")) as s:
        crdhelpers.apply_crd(s, yaml.safe_load(CRD_FILE.read_text(encoding="utf-8")))
        s.kubectl("apply", "-f", str(STORIES))
        yield s


@pytest.fixture(scope="module")
def co(srv: Served) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(config.new_client_from_config(str(srv.kubeconfig)))


def _stored(co: client.CustomObjectsApi) -> dict[str, Any]:
    items = co.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    return {i["metadata"]["name"]: i["spec"] for i in items}


def _bad(name: str, peer: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterNetworkPolicy",
        "metadata": {"name": name},
        "spec": {
            "tier": "Admin",
            "priority": 1,
            "subject": {"namespaces": {}},
            "egress": [{"action": "Deny", "to": [peer]}],
        },
    }


def test_the_samples_are_served_and_listed_by_tier_and_priority(
    srv: Served, co: client.CustomObjectsApi
) -> None:
    want = {d["metadata"]["name"]: d["spec"] for d in yaml.safe_load_all(STORIES.read_text()) if d}
    assert _stored(co) == want
    out = srv.kubectl("get", "cnp", "--sort-by=.spec.priority").stdout.splitlines()
    assert [line.split()[:3] for line in out] == [
        ["NAME", "TIER", "PRIORITY"],
        ["cluster-wide-deny-example", "Admin", "10"],
        ["default", "Baseline", "10"],
        ["pub-svc-delegate-example", "Admin", "20"],
        ["cluster-wide-allow-example", "Admin", "30"],
    ]
    got = json.loads(srv.kubectl("get", "clusternetworkpolicy", "default", "-o", "json").stdout)
    assert got["apiVersion"] == f"{GROUP}/{VERSION}"
    assert "namespace" not in got["metadata"]  # cluster-scoped


def test_kubectl_gets_the_422_in_kubes_words_and_nothing_is_stored(
    srv: Served, co: client.CustomObjectsApi
) -> None:
    before = _stored(co)
    bad = _bad("bad", {"networks": ["10.0.0.0/8", "10.0.0.0/8"]})
    bad["spec"]["tier"] = "Middle"
    out = srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert out.returncode == 1
    # kubectl prints the 422's causes one a line (sorted)
    assert out.stderr.strip().splitlines() == [
        'The ClusterNetworkPolicy "bad" is invalid: ',
        '* spec.egress[0].to[0].networks[1]: Duplicate value: "10.0.0.0/8"',
        '* spec.tier: Unsupported value: "Middle": supported values: "Admin", "Baseline"',
    ]
    assert _stored(co) == before


def test_the_client_gets_each_cause_of_the_422(co: client.CustomObjectsApi) -> None:
    before = _stored(co)
    body = _bad("bad2", {"networks": ["10.0.0.0/08"]})
    body["spec"]["egress"][0]["protocols"] = [
        {"udp": {"destinationPort": {"range": {"start": 53, "end": 53}}}}
    ]
    with pytest.raises(ApiException) as ei:
        co.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    assert ei.value.status == 422, ei.value.body
    status = json.loads(ei.value.body)
    assert status["reason"] == "Invalid"
    assert status["details"]["kind"] == "ClusterNetworkPolicy"
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "string": Invalid CIDR format provided',
            "field": "spec.egress[0].to[0].networks[0]",
        },
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "object": Start port must be less than End port',
            "field": "spec.egress[0].protocols[0].udp.destinationPort.range",
        },
    ]
    assert _stored(co) == before


def test_an_invalid_update_leaves_the_stored_policy_as_it_was(
    srv: Served, co: client.CustomObjectsApi
) -> None:
    before = _stored(co)
    out = srv.kubectl(
        "patch",
        "cnp",
        "default",
        "--type=merge",
        "-p",
        '{"spec": {"priority": 1001}}',
        check=False,
    )
    assert out.returncode == 1
    assert out.stderr.strip() == (
        'The ClusterNetworkPolicy "default" is invalid: spec.priority: Invalid value: 1001: '
        "spec.priority in body should be less than or equal to 1000"
    )
    assert _stored(co) == before
