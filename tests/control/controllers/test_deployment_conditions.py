"""Deployment conditions (Available, Progressing with its deadline, ReplicaFailure),
minReadySeconds, revision and change-cause annotations and ``spec.paused``, as
kube-controller-manager sets them, on the deterministic runner and its FakeClock."""

from __future__ import annotations

from typing import Any

from cp_helpers import deployment, make_plane

from control.controllers.deployment import (
    CHANGE_CAUSE_ANNOTATION,
    DESIRED_REPLICAS_ANNOTATION,
    MAX_REPLICAS_ANNOTATION,
    REVISION_ANNOTATION,
)
from control.runner import ControlPlane
from netmodel.kinds import object_from_dict
from netmodel.objects import Deployment, ReplicaSet


def _apply(plane: ControlPlane, name: str, replicas: int, **spec: Any) -> Deployment:
    data = deployment(name, replicas).to_dict()
    pod_spec = spec.pop("pod", None)
    if pod_spec:
        data["spec"]["template"]["spec"].update(pod_spec)
    annotations = spec.pop("annotations", None)
    if annotations:
        data["metadata"]["annotations"] = annotations
    data["spec"].update(spec)
    plane.apply([object_from_dict(data)])
    plane.run_until_idle()
    return _get(plane, name)


def _get(plane: ControlPlane, name: str) -> Deployment:
    d = plane.store.get("Deployment", f"default/{name}")
    assert isinstance(d, Deployment)
    return d


def _conds(d: Deployment) -> dict[str, tuple[str, str | None]]:
    return {c.type: (c.status, c.reason) for c in d.status.conditions}


def _rs(plane: ControlPlane) -> list[ReplicaSet]:
    return [r for r in plane.store.list("ReplicaSet") if isinstance(r, ReplicaSet)]


def test_a_complete_rollout_is_available_and_has_progressed() -> None:
    plane = make_plane()
    d = _apply(plane, "web", 3)
    (rs,) = _rs(plane)
    assert _conds(d) == {
        "Available": ("True", "MinimumReplicasAvailable"),
        "Progressing": ("True", "NewReplicaSetAvailable"),
    }
    prog = d.status.condition("Progressing")
    assert (
        prog is not None and prog.message == f'ReplicaSet "{rs.name}" has successfully progressed.'
    )
    s = d.status
    assert (s.replicas, s.updated_replicas, s.ready_replicas, s.available_replicas) == (3, 3, 3, 3)
    assert s.unavailable_replicas == 0 and s.observed_generation == d.metadata.generation
    assert d.metadata.annotations[REVISION_ANNOTATION] == "1"
    a = rs.metadata.annotations
    assert (a[REVISION_ANNOTATION], a[DESIRED_REPLICAS_ANNOTATION], a[MAX_REPLICAS_ANNOTATION]) == (
        "1",
        "3",
        "4",  # 3 + 25% surge rounded up
    )


def test_a_stuck_rollout_exceeds_its_progress_deadline_on_the_clock() -> None:
    plane = make_plane()
    # pods nobody can schedule: the rollout never makes its pods available
    d = _apply(plane, "web", 2, progressDeadlineSeconds=30, pod={"nodeSelector": {"no": "such"}})
    assert _conds(d) == {
        "Available": ("False", "MinimumReplicasUnavailable"),
        "Progressing": ("True", "ReplicaSetUpdated"),
    }
    plane.clock.advance(30)  # type: ignore[attr-defined]
    plane.run_until_idle()
    assert _conds(_get(plane, "web"))["Progressing"] == ("True", "ReplicaSetUpdated")
    plane.clock.advance(1)  # type: ignore[attr-defined]
    plane.run_until_idle()
    d = _get(plane, "web")
    assert _conds(d)["Progressing"] == ("False", "ProgressDeadlineExceeded")
    prog = d.status.condition("Progressing")
    assert prog is not None and prog.message is not None
    assert prog.message.endswith("has timed out progressing.")
    assert prog.last_transition_time == "2026-01-01T00:00:31Z"


def test_min_ready_seconds_delays_availability() -> None:
    plane = make_plane()
    d = _apply(plane, "web", 2, minReadySeconds=10)
    assert d.status.ready_replicas == 2 and d.status.available_replicas == 0
    assert _conds(d)["Available"] == ("False", "MinimumReplicasUnavailable")
    plane.clock.advance(10)  # type: ignore[attr-defined]
    plane.run_until_idle()
    assert _get(plane, "web").status.available_replicas == 0  # strictly more than 10 s
    plane.clock.advance(1)  # type: ignore[attr-defined]
    plane.run_until_idle()
    d = _get(plane, "web")
    assert d.status.available_replicas == 2
    assert _conds(d) == {
        "Available": ("True", "MinimumReplicasAvailable"),
        "Progressing": ("True", "NewReplicaSetAvailable"),
    }


def test_a_refused_pod_creation_is_a_replica_failure() -> None:
    plane = make_plane()
    # "x"*57 + ".web": the ReplicaSet's pods are named "xxx.-abcde", an invalid name,
    # as they would be on a real cluster (generateName is cut to 58 characters)
    name = "x" * 57 + ".web"
    d = _apply(plane, name, 1)
    conds = _conds(d)
    assert conds["ReplicaFailure"] == ("True", "FailedCreate")
    (rs,) = _rs(plane)
    failure = rs.status.condition("ReplicaFailure")
    assert failure is not None and "metadata.name: Invalid value" in (failure.message or "")


def test_change_cause_is_carried_and_a_rollback_takes_the_next_revision() -> None:
    plane = make_plane()
    _apply(plane, "web", 2, annotations={CHANGE_CAUSE_ANNOTATION: "first"})
    data = _get(plane, "web").to_dict()
    data["metadata"]["annotations"][CHANGE_CAUSE_ANNOTATION] = "second"
    data["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    plane.apply([object_from_dict(data)])
    plane.run_until_idle()
    by_rev = {r.metadata.annotations[REVISION_ANNOTATION]: r for r in _rs(plane)}
    assert sorted(by_rev) == ["1", "2"]
    assert by_rev["1"].metadata.annotations[CHANGE_CAUSE_ANNOTATION] == "first"
    assert by_rev["2"].metadata.annotations[CHANGE_CAUSE_ANNOTATION] == "second"
    assert _get(plane, "web").metadata.annotations[REVISION_ANNOTATION] == "2"
    first = by_rev["1"]
    data = _get(plane, "web").to_dict()
    data["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx"
    plane.apply([object_from_dict(data)])
    plane.run_until_idle()
    back = plane.store.get("ReplicaSet", first.key)
    assert back.metadata.annotations[REVISION_ANNOTATION] == "3"
    assert _get(plane, "web").metadata.annotations[REVISION_ANNOTATION] == "3"
    assert back.spec.replicas == 2  # type: ignore[attr-defined]


def test_a_paused_deployment_does_not_roll_out_until_resumed() -> None:
    plane = make_plane()
    d = _apply(plane, "web", 2, progressDeadlineSeconds=60)
    data = d.to_dict()
    data["spec"]["paused"] = True
    data["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    plane.apply([object_from_dict(data)])
    plane.run_until_idle()
    assert len(_rs(plane)) == 1
    assert _conds(_get(plane, "web"))["Progressing"] == ("Unknown", "DeploymentPaused")
    # a paused Deployment still resizes
    data = _get(plane, "web").to_dict()
    data["spec"]["replicas"] = 3
    plane.apply([object_from_dict(data)])
    plane.run_until_idle()
    assert [r.spec.replicas for r in _rs(plane)] == [3]
    data = _get(plane, "web").to_dict()
    data["spec"]["paused"] = False
    plane.apply([object_from_dict(data)])
    plane.run_until_idle()
    d = _get(plane, "web")
    assert len(_rs(plane)) == 2
    assert _conds(d)["Progressing"] == ("True", "NewReplicaSetAvailable")
    assert d.status.updated_replicas == 3
