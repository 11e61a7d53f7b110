"""A CRD serving two versions (``conversion.strategy: None``) with the status
subresource, against a real ``svclab serve``, driven by the real kubectl and the
official Python client: every version served (apiVersion rewritten, nothing else),
each validated by its own schema (also a patch through the older version), every
schema problem in one 422 (``Gizmo.example.com "x" is invalid: [...]``, one cause each,
kubectl listing them), ``/status`` writes checked against the status schema, and a
webhook conversion refused naming the field."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import crdhelpers
import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from serving import Served

pytestmark = pytest.mark.slow

GROUP, PLURAL = "example.com", "gizmos"


CRD: dict[str, Any] = crdhelpers.gizmo_crd()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with crdhelpers.running(Served(tmp_path_factory.mktemp("crdversions") / "state")) as s:
        crdhelpers.apply_crd(s, CRD, timeout="30s")
        yield s


@pytest.fixture(scope="module")
def co(srv: Served) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(config.new_client_from_config(str(srv.kubeconfig)))


def _gizmo(version: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "Gizmo",
        "metadata": {"name": name},
        "spec": {"color": "red", **spec},
    }


def _create(co: client.CustomObjectsApi, version: str, body: dict[str, Any]) -> Any:
    return co.create_namespaced_custom_object(GROUP, version, "default", PLURAL, body)


def _status(ei: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    assert ei.value.status == 422, ei.value.body
    out: dict[str, Any] = json.loads(ei.value.body)
    return out


def test_every_served_version_reads_the_same_object(co: client.CustomObjectsApi) -> None:
    made = _create(co, "v1beta1", _gizmo("v1beta1", "g-old", replicas=3))
    assert made["apiVersion"] == "example.com/v1beta1"  # answered in the version asked
    for version in ("v1", "v1beta1"):
        got = co.get_namespaced_custom_object(GROUP, version, "default", PLURAL, "g-old")
        assert got["apiVersion"] == f"example.com/{version}"
        assert got["spec"] == {"color": "red", "replicas": 3}
        assert got["metadata"]["uid"] == made["metadata"]["uid"]
        listed = co.list_namespaced_custom_object(GROUP, version, "default", PLURAL)
        assert {i["apiVersion"] for i in listed["items"]} == {f"example.com/{version}"}


def test_kubectl_reads_each_version(srv: Served, co: client.CustomObjectsApi) -> None:
    _create(co, "v1", _gizmo("v1", "g-kubectl"))
    out = srv.kubectl("get", "gizmos.v1beta1.example.com", "g-kubectl", "-o", "json").stdout
    assert json.loads(out)["apiVersion"] == "example.com/v1beta1"
    out = srv.kubectl("get", "gizmos.v1.example.com", "g-kubectl", "-o", "json").stdout
    assert json.loads(out)["apiVersion"] == "example.com/v1"


def test_each_version_is_validated_by_its_own_schema(co: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as ei:
        _create(co, "v1beta1", _gizmo("v1beta1", "g-seven", replicas=7))
    assert _status(ei)["message"] == (
        'Gizmo.example.com "g-seven" is invalid: spec.replicas: Invalid value: 7: '
        "spec.replicas in body should be less than or equal to 5"
    )
    _create(co, "v1", _gizmo("v1", "g-seven", replicas=7))  # v1 allows up to 10
    with pytest.raises(ApiException) as ei:  # a patch through v1beta1: its schema
        co.patch_namespaced_custom_object(
            GROUP, "v1beta1", "default", PLURAL, "g-seven", {"spec": {"replicas": 6}}
        )
    assert _status(ei)["details"]["causes"][0]["field"] == "spec.replicas"
    got = co.get_namespaced_custom_object(GROUP, "v1", "default", PLURAL, "g-seven")
    assert got["spec"]["replicas"] == 7


def test_every_schema_problem_is_one_cause(srv: Served, co: client.CustomObjectsApi) -> None:
    body = _gizmo("v1", "g-bad", replicas="three")
    del body["spec"]["color"]
    with pytest.raises(ApiException) as ei:
        _create(co, "v1", body)
    st = _status(ei)
    assert st["message"] == (
        'Gizmo.example.com "g-bad" is invalid: [spec.replicas: Invalid value: "string": '
        'spec.replicas in body must be of type integer: "string", spec.color: Required value]'
    )
    assert st["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "string": spec.replicas in body must be of type '
            'integer: "string"',
            "field": "spec.replicas",
        },
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.color"},
    ]
    assert (st["details"]["group"], st["details"]["kind"]) == (GROUP, "Gizmo")
    out = srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(body), check=False)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        'The Gizmo "g-bad" is invalid: ',
        '* spec.replicas: Invalid value: "string": spec.replicas in body must be of type '
        'integer: "string"',
        "* spec.color: Required value",
    ]


def test_status_writes_are_checked_against_the_status_schema(
    co: client.CustomObjectsApi,
) -> None:
    _create(co, "v1", _gizmo("v1", "g-status"))
    with pytest.raises(ApiException) as ei:
        co.patch_namespaced_custom_object_status(
            GROUP, "v1", "default", PLURAL, "g-status", {"status": {"replicas": "two"}}
        )
    assert _status(ei)["message"] == (
        'Gizmo.example.com "g-status" is invalid: status.replicas: Invalid value: "string": '
        'status.replicas in body must be of type integer: "string"'
    )
    got = co.patch_namespaced_custom_object_status(
        GROUP,
        "v1",
        "default",
        PLURAL,
        "g-status",
        {"status": {"replicas": 2, "junk": 1}, "spec": {"color": "blue"}},
    )
    assert got["status"] == {"replicas": 2, "phase": "Pending"}  # pruned, defaulted
    assert got["spec"]["color"] == "red"  # nothing but the status


def test_webhook_conversion_is_refused_naming_the_field(srv: Served) -> None:
    crd = copy.deepcopy(CRD)
    crd["metadata"]["name"] = "doohickeys.example.com"
    crd["spec"]["names"] = {"plural": "doohickeys", "kind": "Doohickey"}
    crd["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://convert.example.com/"},
        },
    }
    out = srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(crd), check=False)
    assert out.returncode == 1
    assert (
        'spec.conversion.strategy: Invalid value: "Webhook": svclab calls no conversion '
        "webhooks: use the None strategy"
    ) in out.stderr
    assert srv.kubectl("get", "crd", "-o", "name").stdout.split() == [
        "customresourcedefinition.apiextensions.k8s.io/gizmos.example.com"
    ]
