"""A custom resource through the apiserver pipeline (in process, a memory store): every
schema problem reported at once, the ``/status`` write checked against the schema's
status part (pruned, defaulted, validated), and a CRD serving two versions with the
``None`` conversion strategy: each version validated by its own schema, the storage
version in the store."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import crdhelpers
import pytest
from api_helpers import make_api

from control.apiserver import APIServer
from netmodel import structural
from netmodel.errors import InvalidError
from netmodel.kinds import object_from_dict

CRD: dict[str, Any] = crdhelpers.gizmo_crd()


@pytest.fixture
def api() -> Iterator[APIServer]:
    with crdhelpers.installed(make_api(), copy.deepcopy(CRD)) as a:
        yield a


def _gizmo(version: str = "v1", name: str = "g", **spec: Any) -> Any:
    return object_from_dict(
        {
            "apiVersion": f"example.com/{version}",
            "kind": "Gizmo",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"color": "red", **spec},
        }
    )


def test_every_schema_problem_is_reported_in_kubes_order(api: APIServer) -> None:
    bad = _gizmo(replicas="three")
    del bad.model_extra["spec"]["color"]  # type: ignore[index]
    with pytest.raises(structural.SchemaInvalidError) as err:
        api.create(bad)
    assert err.value.causes == (
        (
            "spec.replicas",
            'Invalid value: "string": spec.replicas in body must be of type integer: "string"',
        ),
        ("spec.color", "Required value"),
    )
    assert err.value.reason == (
        '[spec.replicas: Invalid value: "string": spec.replicas in body must be of type '
        'integer: "string", spec.color: Required value]'
    )
    assert err.value.field is None
    with pytest.raises(structural.SchemaInvalidError) as one:
        api.create(_gizmo(color="pink"))
    assert (one.value.field, one.value.causes[0][0]) == ("spec.color", "spec.color")
    assert api.store.list("gizmos.example.com") == []


def test_a_status_write_is_pruned_defaulted_and_validated(api: APIServer) -> None:
    created = api.create(_gizmo())
    body = created.to_dict()
    body["status"] = {"replicas": -1}
    with pytest.raises(InvalidError) as err:
        api.update_status(object_from_dict(body))
    assert str(err.value) == (
        "Gizmo/default/g: status.replicas: Invalid value: -1: status.replicas in body "
        "should be greater than or equal to 0"
    )
    body["status"] = {"replicas": 2, "junk": True}
    body["spec"] = {"color": "blue"}  # a status write changes nothing else
    stored = api.update_status(object_from_dict(body))
    assert stored.to_dict()["status"] == {"replicas": 2, "phase": "Pending"}
    assert stored.to_dict()["spec"] == {"color": "red"}


def test_each_version_is_validated_by_its_schema_and_stored_in_the_storage_one(
    api: APIServer,
) -> None:
    with pytest.raises(InvalidError) as err:
        api.create(_gizmo("v1beta1", replicas=7))
    assert "spec.replicas in body should be less than or equal to 5" in str(err.value)
    old = api.create(_gizmo("v1beta1", "old", replicas=4))
    assert old.api_version == "example.com/v1"
    assert api.store.get("gizmos.example.com", "default/old").api_version == "example.com/v1"
    new = api.create(_gizmo("v1", "new", replicas=7))
    assert new.api_version == "example.com/v1"
    # an update through v1beta1 of the object stored as v1: v1beta1's schema again
    with pytest.raises(InvalidError):
        api.update(_gizmo("v1beta1", "new", replicas=8))
    again = api.update(_gizmo("v1beta1", "old", replicas=4))
    assert again == api.store.get("gizmos.example.com", "default/old")  # unchanged


def test_a_crd_asking_for_webhook_conversion_is_refused_naming_the_field() -> None:
    a = make_api()
    crd = copy.deepcopy(CRD)
    crd["spec"]["conversion"] = {"strategy": "Webhook"}
    with pytest.raises(InvalidError) as err:
        a.create(object_from_dict(crd))
    assert str(err.value) == (
        "CustomResourceDefinition/gizmos.example.com: spec.conversion.strategy: Invalid value: "
        '"Webhook": svclab calls no conversion webhooks: use the None strategy'
    )
    crd["spec"]["conversion"] = {
        "strategy": "None",
        "webhook": {"conversionReviewVersions": ["v1"]},
    }
    with pytest.raises(InvalidError) as err:
        a.create(object_from_dict(crd))
    assert err.value.field == "spec.conversion.webhook"
    assert err.value.reason == ("Forbidden: should not be set when strategy is not set to Webhook")
    assert a.store.list("CustomResourceDefinition") == []
