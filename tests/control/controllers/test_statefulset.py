"""The StatefulSet controller (control.controllers.statefulset) and its strategy
(control.apiserver.statefulsets): ordinal pods created in order (OrderedReady) or at once
(Parallel), identities, scale-down in reverse, rolling updates by ordinal with a
partition, OnDelete, rollback, revision history, status, defaults and validation.

Ordering tests drive the deterministic control plane one round at a time and check the
store after every round."""

from __future__ import annotations

from typing import Any

import pytest
from cp_helpers import make_plane, pods, reasons

from control.controllers.history import POD_REVISION_LABEL
from control.controllers.statefulset import POD_INDEX_LABEL, POD_NAME_LABEL
from control.events import timeline
from control.runner import ControlPlane
from netmodel.apps import ControllerRevision, StatefulSet
from netmodel.errors import InputError
from netmodel.kinds import object_from_dict
from netmodel.objects import Pod

MAX_ROUNDS = 400


def _sts(
    replicas: int = 3, *, image: str = "nginx:1", name: str = "web", **spec: Any
) -> StatefulSet:
    obj = object_from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "serviceName": name,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "main", "image": image}]},
                },
                **spec,
            },
        }
    )
    assert isinstance(obj, StatefulSet)
    return obj


def _stored(plane: ControlPlane, name: str = "web") -> StatefulSet:
    s = plane.store.get("StatefulSet", f"default/{name}")
    assert isinstance(s, StatefulSet)
    return s


def _update(plane: ControlPlane, name: str = "web", **spec: Any) -> None:
    """Change the stored StatefulSet's spec (camelCase wire fields; ``image`` sets the
    container's image) as ``kubectl apply`` of an edited manifest would."""
    data = _stored(plane, name).to_dict()
    image = spec.pop("image", None)
    if image is not None:
        data["spec"]["template"]["spec"]["containers"][0]["image"] = image
    data["spec"].update(spec)
    data.pop("status", None)
    plane.apply([object_from_dict(data)])


def _by_ordinal(plane: ControlPlane, name: str = "web") -> dict[int, Pod]:
    return {int(p.labels[POD_INDEX_LABEL]): p for p in pods(plane, f"{name}-")}


def _ready(p: Pod) -> bool:
    return p.status.phase == "Running" and p.is_ready and p.metadata.deletion_timestamp is None


def _messages(plane: ControlPlane, reason: str) -> list[str]:
    return [e.message or "" for e in timeline(plane.store) if e.reason == reason]


def _rounds(plane: ControlPlane, check: Any = None) -> None:
    """Run rounds until idle, calling ``check(plane)`` after each."""
    for _ in range(MAX_ROUNDS):
        steps = plane.run_round()
        if check is not None:
            check(plane)
        if steps == 0:
            return
    raise AssertionError("did not converge")


def _converge(plane: ControlPlane) -> None:
    """Run until idle; a controller that never settles fails (ConvergenceError)."""
    plane.run_until_idle(max_steps=20_000)


def _image(p: Pod) -> str:
    return p.spec.containers[0].image or ""


# --------------------------------------------------------------------------- creation


def test_ordered_ready_creates_each_pod_once_the_previous_is_running_and_ready() -> None:
    plane = make_plane(2)
    plane.apply([_sts(4)])
    seen: list[int] = []

    def one_at_a_time(plane: ControlPlane) -> None:
        have = _by_ordinal(plane)
        assert sorted(have) == list(range(len(have))), "ordinals are a prefix"
        for o in sorted(have)[:-1]:
            assert _ready(have[o]), f"web-{o + 1} exists while web-{o} is not Running and Ready"
        if have and len(have) not in seen:
            seen.append(len(have))

    _rounds(plane, one_at_a_time)
    assert seen == [1, 2, 3, 4]
    creates = _messages(plane, "SuccessfulCreate")
    assert [m for m in creates if "StatefulSet web" in m] == [
        f"create Pod web-{i} in StatefulSet web successful" for i in range(4)
    ]


def test_parallel_creates_every_pod_at_once() -> None:
    plane = make_plane(2)
    plane.apply([_sts(4, podManagementPolicy="Parallel")])
    _converge(plane)
    # every pod was created before the first of them started
    events = [(e.reason, e.involved_object.name) for e in timeline(plane.store)]
    first_start = min(i for i, (r, _) in enumerate(events) if r == "Started")
    creates = [i for i, (r, _) in enumerate(events) if r == "SuccessfulCreate"]
    assert len(creates) == 4 and max(creates) < first_start
    assert all(_ready(p) for p in _by_ordinal(plane).values())


def test_pods_carry_their_identity() -> None:
    plane = make_plane(2)
    plane.apply([_sts(2, ordinals={"start": 5})])
    _converge(plane)
    have = _by_ordinal(plane)
    assert sorted(have) == [5, 6]
    rev = _stored(plane).status.update_revision
    for o, p in have.items():
        assert p.name == f"web-{o}"
        assert p.labels == {
            "app": "web",
            POD_NAME_LABEL: f"web-{o}",
            POD_INDEX_LABEL: str(o),
            POD_REVISION_LABEL: rev,
        }
        extra = p.spec.model_extra or {}
        assert (extra["hostname"], extra["subdomain"]) == (f"web-{o}", "web")
        ref = p.metadata.controller_ref()
        assert ref is not None and (ref.kind, ref.name) == ("StatefulSet", "web")


def test_status_when_converged() -> None:
    plane = make_plane(2)
    plane.apply([_sts(3)])
    _converge(plane)
    s = _stored(plane)
    revs = [r for r in plane.store.list("ControllerRevision") if isinstance(r, ControllerRevision)]
    assert [(r.name, r.revision) for r in revs] == [(s.status.update_revision, 1)]
    assert s.status.model_dump() == {
        "observed_generation": 1,
        "replicas": 3,
        "ready_replicas": 3,
        "current_replicas": 3,
        "updated_replicas": 3,
        "available_replicas": 3,
        "current_revision": revs[0].name,
        "update_revision": revs[0].name,
        "collision_count": 0,
    }


# --------------------------------------------------------------------------- scaling


def test_scale_down_deletes_from_the_highest_ordinal_one_at_a_time() -> None:
    plane = make_plane(2)
    plane.apply([_sts(4)])
    _converge(plane)
    _update(plane, replicas=1)

    def one_going(plane: ControlPlane) -> None:
        going = [p for p in _by_ordinal(plane).values() if p.metadata.deletion_timestamp]
        assert len(going) <= 1

    _rounds(plane, one_going)
    assert sorted(_by_ordinal(plane)) == [0]
    assert _messages(plane, "SuccessfulDelete") == [
        f"delete Pod web-{i} in StatefulSet web successful" for i in (3, 2, 1)
    ]
    assert _stored(plane).status.replicas == 1


# --------------------------------------------------------------------------- updates


def test_rolling_update_replaces_pods_from_the_highest_ordinal() -> None:
    plane = make_plane(2)
    plane.apply([_sts(3)])
    _converge(plane)
    old_rev = _stored(plane).status.current_revision
    _update(plane, image="nginx:2")

    def one_down(plane: ControlPlane) -> None:
        have = _by_ordinal(plane)
        assert sum(1 for p in have.values() if not _ready(p)) + (3 - len(have)) <= 1

    _rounds(plane, one_down)
    assert _messages(plane, "SuccessfulDelete") == [
        f"delete Pod web-{i} in StatefulSet web successful" for i in (2, 1, 0)
    ]
    s = _stored(plane)
    assert s.status.update_revision != old_rev
    assert s.status.current_revision == s.status.update_revision
    assert (s.status.current_replicas, s.status.updated_replicas) == (3, 3)
    for p in _by_ordinal(plane).values():
        assert _image(p) == "nginx:2" and p.labels[POD_REVISION_LABEL] == s.status.update_revision


def test_partition_keeps_lower_ordinals_at_the_current_revision() -> None:
    plane = make_plane(2)
    plane.apply([_sts(3)])
    _converge(plane)
    old_rev = _stored(plane).status.current_revision
    _update(
        plane,
        image="nginx:2",
        updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
    )
    _converge(plane)
    images = {o: _image(p) for o, p in _by_ordinal(plane).items()}
    assert images == {0: "nginx:1", 1: "nginx:1", 2: "nginx:2"}
    s = _stored(plane).status
    assert s.current_revision == old_rev != s.update_revision
    assert (s.current_replicas, s.updated_replicas, s.ready_replicas) == (2, 1, 3)
    # a pod below the partition deleted by hand comes back at the current revision
    plane.delete("Pod", "default/web-0")
    _converge(plane)
    assert _image(_by_ordinal(plane)[0]) == "nginx:1"
    # the partition lowered to 0: the rest follows
    _update(plane, updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    _converge(plane)
    assert {_image(p) for p in _by_ordinal(plane).values()} == {"nginx:2"}
    s = _stored(plane).status
    assert s.current_revision == s.update_revision


def test_on_delete_replaces_only_the_pods_the_user_deletes() -> None:
    plane = make_plane(2)
    plane.apply([_sts(3, updateStrategy={"type": "OnDelete"})])
    _converge(plane)
    _update(plane, image="nginx:2")
    _converge(plane)
    assert {_image(p) for p in _by_ordinal(plane).values()} == {"nginx:1"}
    assert _messages(plane, "SuccessfulDelete") == []
    plane.delete("Pod", "default/web-1")
    _converge(plane)
    images = {o: _image(p) for o, p in _by_ordinal(plane).items()}
    assert images == {0: "nginx:1", 1: "nginx:2", 2: "nginx:1"}
    assert _stored(plane).status.updated_replicas == 1


def _revisions(plane: ControlPlane) -> dict[str, int]:
    return {
        r.name: r.revision
        for r in plane.store.list("ControllerRevision")
        if isinstance(r, ControllerRevision)
    }


def test_rollback_reuses_the_old_revision_and_history_is_truncated() -> None:
    plane = make_plane(2)
    plane.apply([_sts(2, revisionHistoryLimit=2)])
    _converge(plane)
    names = [_stored(plane).status.update_revision]
    for image in ("nginx:2", "nginx:3", "nginx:4"):
        _update(plane, image=image)
        _converge(plane)
        names.append(_stored(plane).status.update_revision)
    # four revisions made: the live one (4) and the two newest others (2, 3) are kept
    assert _revisions(plane) == {names[1]: 2, names[2]: 3, names[3]: 4}
    # back to nginx:2: its revision is renumbered 5, nothing new is made
    _update(plane, image="nginx:2")
    _converge(plane)
    s = _stored(plane).status
    assert s.update_revision == names[1] == s.current_revision
    assert _revisions(plane) == {names[1]: 5, names[2]: 3, names[3]: 4}
    assert {_image(p) for p in _by_ordinal(plane).values()} == {"nginx:2"}


def test_deleting_the_statefulset_collects_pods_and_revisions() -> None:
    plane = make_plane(2)
    plane.apply([_sts(2)])
    _converge(plane)
    plane.delete("StatefulSet", "default/web")
    _converge(plane)
    assert pods(plane, "web-") == []
    assert plane.store.list("ControllerRevision") == []
    assert "SuccessfulCreate" in reasons(plane, "StatefulSet", "web")


# --------------------------------------------------------------------------- strategy


def test_defaults() -> None:
    plane = make_plane(1)
    plane.apply([_sts(2)])
    spec = _stored(plane).to_dict()["spec"]
    assert spec["podManagementPolicy"] == "OrderedReady"
    assert spec["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert spec["revisionHistoryLimit"] == 10
    assert spec["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    assert _stored(plane).metadata.generation == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"podManagementPolicy": "Sometimes"},
            "StatefulSet/default/web: spec.podManagementPolicy: Invalid value: "
            "\"Sometimes\": must be 'OrderedReady' or 'Parallel'",
        ),
        (
            {"updateStrategy": {"type": "OnDelete", "rollingUpdate": {"partition": 1}}},
            "spec.updateStrategy.rollingUpdate: Invalid value: ",
        ),
        (
            {"updateStrategy": {"type": "Sideways"}},
            "spec.updateStrategy: Invalid value: ",
        ),
        (
            {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": -1}}},
            "spec.updateStrategy.rollingUpdate.partition: Invalid value: -1: "
            "must be greater than or equal to 0",
        ),
        (
            {"selector": {"matchLabels": {"app": "db"}}},
            "spec.template.metadata.labels: Invalid value: ",
        ),
        (
            {"selector": {}},
            "spec.selector: Invalid value: {}: empty selector is invalid for statefulset",
        ),
        ({"minReadySeconds": -1}, "spec.minReadySeconds: Invalid value: -1: must be greater"),
    ],
)
def test_validation(spec: dict[str, Any], message: str) -> None:
    plane = make_plane(1)
    with pytest.raises(InputError) as err:
        plane.apply([_sts(2, **spec)])
    assert message in str(err.value)
    assert plane.store.list("StatefulSet") == []


def test_restart_policy_must_be_always() -> None:
    plane = make_plane(1)
    data = _sts(1).to_dict()
    data["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    with pytest.raises(InputError, match=r"spec.template.spec.restartPolicy: Unsupported value"):
        plane.apply([object_from_dict(data)])


def test_only_the_mutable_fields_may_change() -> None:
    plane = make_plane(1)
    plane.apply([_sts(2)])
    _update(plane, replicas=3, minReadySeconds=0, revisionHistoryLimit=3)  # allowed
    with pytest.raises(InputError, match="updates to statefulset spec for fields other than"):
        _update(plane, serviceName="other")
    with pytest.raises(InputError, match="updates to statefulset spec for fields other than"):
        _update(plane, podManagementPolicy="Parallel")
    assert _stored(plane).spec.service_name == "web"
