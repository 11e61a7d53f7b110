"""CEL rules (``x-kubernetes-validations``) of a CRD through a real ``svclab serve``, the
real kubectl and the official kubernetes Python client: a valid object is stored, an
invalid one refused with kube-apiserver's 422 (every failed rule a cause, its type from
the rule's ``reason``), a transition rule refuses an update, and a CRD with a rule that
does not compile is refused with nothing stored."""

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

GROUP, VERSION, PLURAL = "example.com", "v1", "scalers"

CRD: dict[str, Any] = crdhelpers.crd(
    GROUP,
    PLURAL,
    "Scaler",
    [
        crdhelpers.version(
            VERSION,
            {
                "spec": {
                    "type": "object",
                    "x-kubernetes-validations": [
                        {"rule": "self.minReplicas <= self.replicas"},
                        {
                            "rule": "self.mode != 'off'",
                            "message": "mode off is not allowed",
                            "reason": "FieldValueForbidden",
                            "fieldPath": ".mode",
                        },
                        {
                            "rule": "self.replicas >= oldSelf.replicas",
                            "message": "replicas may not go down",
                        },
                    ],
                    "properties": {
                        "replicas": {"type": "integer"},
                        "minReplicas": {"type": "integer"},
                        "mode": {"type": "string"},
                    },
                }
            },
        )
    ],
)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with crdhelpers.running(Served(tmp_path_factory.mktemp("serve") / "state")) as s:
        yield s


@pytest.fixture(scope="module")
def co(srv: Served) -> client.CustomObjectsApi:
    crdhelpers.apply_crd(srv, CRD)
    return client.CustomObjectsApi(config.new_client_from_config(str(srv.kubeconfig)))


def _scaler(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Scaler",
        "metadata": {"name": name},
        "spec": {"replicas": 3, "minReplicas": 1, "mode": "auto", **spec},
    }


def test_a_valid_scaler_is_stored_and_a_bad_one_refused_by_kubectl(
    srv: Served, co: client.CustomObjectsApi
) -> None:
    srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(_scaler("ok")))
    got = co.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "ok")
    assert got["spec"]["replicas"] == 3
    out = srv.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump(_scaler("bad", minReplicas=5)), check=False
    )
    assert out.returncode == 1
    assert out.stderr.strip() == (
        'The Scaler "bad" is invalid: spec: Invalid value: "object": failed rule: '
        "self.minReplicas <= self.replicas"
    )


def test_every_failed_rule_is_a_cause_of_the_422(co: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as ei:
        co.create_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, _scaler("bad2", minReplicas=5, mode="off")
        )
    assert ei.value.status == 422, ei.value.body
    causes = json.loads(ei.value.body)["details"]["causes"]
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "object": failed rule: self.minReplicas <= self.replicas',
            "field": "spec",
        },
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: mode off is not allowed",
            "field": "spec.mode",
        },
    ]
    names = [
        i["metadata"]["name"]
        for i in co.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"]
    ]
    assert "bad2" not in names


def test_a_transition_rule_refuses_an_update(srv: Served, co: client.CustomObjectsApi) -> None:
    srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(_scaler("t", replicas=5)))
    out = srv.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump(_scaler("t", replicas=2)), check=False
    )
    assert out.returncode == 1
    assert 'spec: Invalid value: "object": replicas may not go down' in out.stderr
    got = co.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "t")
    assert got["spec"]["replicas"] == 5
    srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(_scaler("t", replicas=7)))


def test_a_crd_with_a_rule_that_does_not_compile_is_refused(
    srv: Served, co: client.CustomObjectsApi
) -> None:
    body = copy.deepcopy(CRD)
    body["metadata"]["name"] = "gears.example.com"
    body["spec"]["names"] = {"plural": "gears", "kind": "Gear"}
    schema = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["x-kubernetes-validations"] = [{"rule": "self.replicas >"}]
    out = srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(body), check=False)
    assert out.returncode == 1
    assert (
        'The CustomResourceDefinition "gears.example.com" is invalid: '
        "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: "
        'Invalid value: apiextensions.ValidationRule{Rule:"self.replicas >"'
    ) in out.stderr
    assert "compilation failed: " in out.stderr
    listed = srv.kubectl("get", "crd", "-o", "name").stdout.split()
    assert "customresourcedefinition.apiextensions.k8s.io/gears.example.com" not in listed
