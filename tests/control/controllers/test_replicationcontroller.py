"""ReplicationControllers on the deterministic runner: defaults and validation as
kube-apiserver gives them, pods kept at ``replicas`` through the shared ReplicaSet code,
adoption by an equality selector, status, and the garbage collector on deletion."""

from __future__ import annotations

from typing import Any

import pytest
from cp_helpers import make_plane, pods

from control.runner import ControlPlane
from netmodel.errors import InvalidError
from netmodel.kinds import object_from_dict
from netmodel.replication import ReplicationController


def _rc(replicas: int | None = 2, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {"app": "legacy", "tier": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        },
        **spec,
    }
    if replicas is not None:
        body["replicas"] = replicas
    return {
        "apiVersion": "v1",
        "kind": "ReplicationController",
        "metadata": {"name": "legacy", "namespace": "default"},
        "spec": body,
    }


def _get(plane: ControlPlane) -> ReplicationController:
    rc = plane.store.get("ReplicationController", "default/legacy")
    assert isinstance(rc, ReplicationController)
    return rc


def test_defaults_selector_labels_and_replicas_from_the_template() -> None:
    plane = make_plane()
    plane.apply([object_from_dict(_rc(None))])
    plane.run_until_idle()
    rc = _get(plane)
    assert rc.spec.selector == {"app": "legacy", "tier": "web"}
    assert rc.metadata.labels == {"app": "legacy", "tier": "web"}
    assert rc.spec.replicas == 1 and len(pods(plane, "legacy-")) == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"selector": {"app": "other"}}, "spec.template.metadata.labels: Invalid value"),
        ({"replicas": -1}, "spec.replicas: Invalid value: -1"),
        ({"template": None}, "spec.template: Required value"),
    ],
)
def test_invalid_controllers_are_refused_and_nothing_is_stored(
    spec: dict[str, Any], message: str
) -> None:
    plane = make_plane()
    data = _rc()
    data["spec"].update(spec)
    if data["spec"].get("template") is None:
        data["spec"].pop("template")
        data["spec"]["selector"] = {"app": "legacy"}
    with pytest.raises(InvalidError) as e:
        plane.apply([object_from_dict(data)])
    assert message in str(e.value)
    assert plane.store.list("ReplicationController") == []


def test_scales_up_and_down_and_reports_status() -> None:
    plane = make_plane()
    plane.apply([object_from_dict(_rc(3))])
    plane.run_until_idle()
    owned = pods(plane, "legacy-")
    assert len(owned) == 3
    assert all(p.metadata.owner_references[0].kind == "ReplicationController" for p in owned)
    s = _get(plane).status
    assert (s.replicas, s.fully_labeled_replicas, s.ready_replicas, s.available_replicas) == (
        3,
        3,
        3,
        3,
    )
    assert s.observed_generation == 1
    rc = _get(plane)
    plane.apiserver.update(rc.evolve(spec=rc.spec.evolve(replicas=1)))
    plane.run_until_idle()
    assert len(pods(plane, "legacy-")) == 1 and _get(plane).status.replicas == 1


def test_an_orphan_pod_carrying_every_selector_pair_is_adopted() -> None:
    plane = make_plane()
    orphan = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "stray",
            "namespace": "default",
            "labels": {"app": "legacy", "tier": "web", "extra": "x"},
        },
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }
    half = {
        **orphan,
        "metadata": {**orphan["metadata"], "name": "half", "labels": {"app": "legacy"}},
    }
    plane.apply([object_from_dict(orphan), object_from_dict(half)])
    plane.run_until_idle()
    plane.apply([object_from_dict(_rc(2))])
    plane.run_until_idle()
    stray = plane.store.get("Pod", "default/stray")
    ref = stray.metadata.controller_ref()
    assert ref is not None and ref.kind == "ReplicationController"
    assert plane.store.get("Pod", "default/half").metadata.controller_ref() is None
    assert len(pods(plane, "legacy-")) == 1  # the adopted pod counts


def test_deleting_the_controller_deletes_its_pods() -> None:
    plane = make_plane()
    plane.apply([object_from_dict(_rc(2))])
    plane.run_until_idle()
    plane.delete("ReplicationController", "default/legacy")
    plane.run_until_idle()
    assert pods(plane, "legacy-") == []
