"""Deployment rollouts: RollingUpdate within maxSurge / maxUnavailable, Recreate, revisions,
history, status, and the apiserver's defaulting and validation of ``spec.strategy``.

The rollout tests drive the control plane one round at a time (``run_round``) and check
the bounds on the store after every round."""

from __future__ import annotations

from typing import Any

import pytest
from cp_helpers import deployment, make_plane, pods

from control.controllers.deployment import (
    REVISION_ANNOTATION,
    REVISION_HISTORY_ANNOTATION,
    TEMPLATE_HASH_LABEL,
    rolling_limits,
)
from control.events import timeline
from control.runner import ControlPlane
from netmodel.errors import InputError
from netmodel.kinds import object_from_dict
from netmodel.objects import (
    Deployment,
    DeploymentStrategy,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodSpec,
    PodStatus,
    ReplicaSet,
    RollingUpdateDeployment,
)

MAX_ROUNDS = 200
DEFAULT_STRATEGY = DeploymentStrategy(
    type="RollingUpdate",
    rolling_update=RollingUpdateDeployment(max_unavailable="25%", max_surge="25%"),
)


def _dep(
    replicas: int,
    *,
    image: str = "nginx",
    strategy: dict[str, Any] | None = None,
    name: str = "web",
    **spec: Any,
) -> Deployment:
    data = deployment(name, replicas, image=image, **spec).to_dict()
    if strategy is not None:
        data["spec"]["strategy"] = strategy
    d = object_from_dict(data)
    assert isinstance(d, Deployment)
    return d


def _rolling(surge: int | str, unavailable: int | str) -> dict[str, Any]:
    return {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
    }


def _with(d: Deployment, **spec: Any) -> Deployment:
    """``d`` with top-level spec fields set from camelCase wire values."""
    data = d.to_dict()
    data["spec"].update(spec)
    out = object_from_dict(data)
    assert isinstance(out, Deployment)
    return out


def _replicasets(plane: ControlPlane) -> dict[str, ReplicaSet]:
    return {r.name: r for r in plane.store.list("ReplicaSet") if isinstance(r, ReplicaSet)}


def _scaling(plane: ControlPlane) -> list[str]:
    return [e.message for e in timeline(plane.store) if e.reason == "ScalingReplicaSet"]


def _status(plane: ControlPlane) -> tuple[int | None, ...]:
    d = plane.store.get("Deployment", "default/web")
    assert isinstance(d, Deployment)
    s = d.status
    return (
        s.replicas,
        s.updated_replicas,
        s.ready_replicas,
        s.available_replicas,
        s.unavailable_replicas or 0,
    )


def _rounds(plane: ControlPlane) -> list[list[Pod]]:
    """Run rounds until idle; the pods stored after each round."""
    seen = []
    for _ in range(MAX_ROUNDS):
        worked = plane.run_round()
        seen.append(pods(plane, "web-"))
        if not worked:
            return seen
    raise AssertionError(f"not idle after {MAX_ROUNDS} rounds")


def _available(ps: list[Pod]) -> int:
    return sum(1 for p in ps if p.is_ready and not p.is_terminating)


def _hashes(ps: list[Pod]) -> set[str]:
    return {p.labels[TEMPLATE_HASH_LABEL] for p in ps}


# --------------------------------------------------------------------------- RollingUpdate


def test_rolling_update_surge_1_unavailable_0_stays_within_5_pods_and_4_available() -> None:
    plane = make_plane(3)
    plane.apply([_dep(4, strategy=_rolling(1, 0))])
    plane.run_until_idle()
    (old,) = _replicasets(plane)
    plane.apply([_dep(4, image="nginx:1.27", strategy=_rolling(1, 0))])
    rounds = _rounds(plane)
    for i, ps in enumerate(rounds):
        assert len(ps) <= 5, f"round {i}: {len(ps)} pods"
        assert _available(ps) >= 4, f"round {i}: {_available(ps)} available"
    assert max(len(ps) for ps in rounds) == 5  # the surge was used
    rss = _replicasets(plane)
    (new,) = (name for name in rss if name != old)
    assert (rss[new].spec.replicas, rss[old].spec.replicas) == (4, 0)
    assert _hashes(rounds[-1]) == {rss[new].labels[TEMPLATE_HASH_LABEL]}
    assert _scaling(plane)[1:] == [
        f"Scaled up replica set {new} to 1 from 0",
        f"Scaled down replica set {old} to 3 from 4",
        f"Scaled up replica set {new} to 2 from 1",
        f"Scaled down replica set {old} to 2 from 3",
        f"Scaled up replica set {new} to 3 from 2",
        f"Scaled down replica set {old} to 1 from 2",
        f"Scaled up replica set {new} to 4 from 3",
        f"Scaled down replica set {old} to 0 from 1",
    ]
    assert _status(plane) == (4, 4, 4, 4, 0)
    assert rss[new].metadata.annotations[REVISION_ANNOTATION] == "2"
    assert rss[old].metadata.annotations[REVISION_ANNOTATION] == "1"


def test_rolling_update_surge_0_unavailable_1_never_exceeds_replicas() -> None:
    plane = make_plane(3)
    plane.apply([_dep(4, strategy=_rolling(0, 1))])
    plane.run_until_idle()
    plane.apply([_dep(4, image="nginx:1.27", strategy=_rolling(0, 1))])
    rounds = _rounds(plane)
    assert all(len(ps) <= 4 and _available(ps) >= 3 for ps in rounds)
    assert min(_available(ps) for ps in rounds) == 3  # the unavailability was used
    assert len(_hashes(rounds[-1])) == 1 and len(rounds[-1]) == 4


@pytest.mark.parametrize(
    ("replicas", "surge", "unavailable", "expected"),
    [
        (10, "25%", "25%", (3, 2)),  # 2.5 surge rounds up, 2.5 unavailable rounds down
        (4, "25%", "25%", (1, 1)),
        (1, "25%", "25%", (1, 0)),
        (5, "30%", "30%", (2, 1)),
        (4, "0%", "10%", (0, 1)),  # both round to 0: unavailable becomes 1
        (4, 2, 3, (2, 3)),
        (2, 1, 5, (1, 2)),  # unavailable is at most replicas
        (0, "25%", "25%", (0, 0)),
        (10, "100%", "100%", (10, 10)),
    ],
)
def test_surge_and_unavailable_resolve_as_upstream(
    replicas: int, surge: int | str, unavailable: int | str, expected: tuple[int, int]
) -> None:
    assert rolling_limits(_dep(replicas, strategy=_rolling(surge, unavailable))) == expected


def test_percentages_drive_the_first_step_of_a_rollout() -> None:
    # replicas 10, 25%/25%: surge 3, unavailable 2 -> the new ReplicaSet starts at 3
    # and, in the same step, the old one goes to 8 (13 pods, 8 of them old and available)
    plane = make_plane(3)
    plane.apply([_dep(10)])
    plane.run_until_idle()
    (old,) = _replicasets(plane)
    plane.apply([_dep(10, image="nginx:1.27")])
    rounds = _rounds(plane)
    (new,) = (name for name in _replicasets(plane) if name != old)
    assert _scaling(plane)[1:3] == [
        f"Scaled up replica set {new} to 3 from 0",
        f"Scaled down replica set {old} to 8 from 10",
    ]
    assert all(len(ps) <= 13 and _available(ps) >= 8 for ps in rounds)
    assert {(r.name, r.spec.replicas) for r in _replicasets(plane).values()} == {
        (old, 0),
        (new, 10),
    }


def test_default_strategy_is_rolling_update_25_percent() -> None:
    plane = make_plane(3)
    plane.apply([_dep(4)])
    d = plane.store.get("Deployment", "default/web")
    assert isinstance(d, Deployment)
    assert d.spec.strategy == DEFAULT_STRATEGY
    assert (d.spec.revision_history_limit, d.spec.progress_deadline_seconds) == (10, 600)
    plane.run_until_idle()
    plane.apply([_dep(4, image="nginx:1.27")])
    rounds = _rounds(plane)
    assert all(len(ps) <= 5 and _available(ps) >= 3 for ps in rounds)


def test_each_missing_rolling_update_field_is_defaulted_on_its_own() -> None:
    plane = make_plane(1)
    plane.apply([_dep(2, strategy={"rollingUpdate": {"maxSurge": 1}})])
    d = plane.store.get("Deployment", "default/web")
    assert isinstance(d, Deployment)
    assert d.to_dict()["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"},
    }
    plane.apply([_dep(2, strategy={"type": "Recreate"}, name="other")])
    other = plane.store.get("Deployment", "default/other")
    assert isinstance(other, Deployment)
    assert other.to_dict()["spec"]["strategy"] == {"type": "Recreate"}


def test_a_stuck_rollout_keeps_the_old_pods_and_reports_the_unavailable_one() -> None:
    # one node fits two 400m pods: the surge pod of the new template stays Pending
    plane = make_plane([{"name": "n1", "capacity": {"cpu": "1"}}])
    requests = {"cpu": "400m"}
    plane.apply([_dep(2, strategy=_rolling(1, 0), requests=requests)])
    plane.run_until_idle()
    (old,) = _replicasets(plane)
    plane.apply([_dep(2, image="nginx:1.27", strategy=_rolling(1, 0), requests=requests)])
    rounds = _rounds(plane)
    assert all(_available(ps) == 2 for ps in rounds)
    rss = _replicasets(plane)
    (new,) = (name for name in rss if name != old)
    assert (rss[old].spec.replicas, rss[new].spec.replicas) == (2, 1)
    # replicas, updated, ready, available, unavailable (3 wanted by the ReplicaSets, 2 available)
    assert _status(plane) == (3, 1, 2, 2, 1)


def test_unavailable_old_replicas_are_removed_first() -> None:
    # one node fits two 400m pods: of 3 old pods one is Pending (unavailable). With
    # maxSurge 0 / maxUnavailable 1 the rollout may remove one pod: it is that one, and
    # the two available old pods stay while the new pod cannot be scheduled either.
    plane = make_plane([{"name": "n1", "capacity": {"cpu": "1"}}])
    requests = {"cpu": "400m"}
    plane.apply([_dep(3, strategy=_rolling(0, 1), requests=requests)])
    plane.run_until_idle()
    (old,) = _replicasets(plane)
    running = {p.name for p in pods(plane, "web-") if p.status.phase == "Running"}
    assert len(running) == 2
    plane.apply([_dep(3, image="nginx:1.27", strategy=_rolling(0, 1), requests=requests)])
    rounds = _rounds(plane)
    assert all(_available(ps) >= 2 for ps in rounds)
    (new,) = (name for name in _replicasets(plane) if name != old)
    assert _scaling(plane)[1:] == [
        f"Scaled down replica set {old} to 2 from 3",
        f"Scaled up replica set {new} to 1 from 0",
    ]
    assert running <= {p.name for p in pods(plane, "web-")}


def test_scaling_without_a_template_change_resizes_the_replicaset() -> None:
    plane = make_plane(3)
    plane.apply([_dep(2)])
    plane.run_until_idle()
    (rs,) = _replicasets(plane)
    plane.apply([_dep(7)])
    plane.run_until_idle()
    plane.apply([_dep(3)])
    plane.run_until_idle()
    assert _scaling(plane) == [
        f"Scaled up replica set {rs} to 2 from 0",
        f"Scaled up replica set {rs} to 7 from 2",
        f"Scaled down replica set {rs} to 3 from 7",
    ]
    assert len(pods(plane, "web-")) == 3


# --------------------------------------------------------------------------- Recreate


def test_recreate_never_has_old_and_new_pods_at_once() -> None:
    plane = make_plane(3)
    recreate = {"type": "Recreate"}
    plane.apply([_dep(3, strategy=recreate)])
    plane.run_until_idle()
    (old,) = _replicasets(plane)
    plane.apply([_dep(3, image="nginx:1.27", strategy=recreate)])
    rounds = _rounds(plane)
    for i, ps in enumerate(rounds):
        assert len(_hashes(ps)) <= 1, f"round {i}: {sorted(_hashes(ps))}"
    assert any(not ps for ps in rounds)  # all old pods went before any new one came
    (new,) = (name for name in _replicasets(plane) if name != old)
    assert _scaling(plane)[1:] == [
        f"Scaled down replica set {old} to 0 from 3",
        f"Scaled up replica set {new} to 3 from 0",
    ]
    assert len(rounds[-1]) == 3 and _status(plane) == (3, 3, 3, 3, 0)


def test_recreate_waits_for_terminating_old_pods() -> None:
    plane = make_plane(2)
    recreate = {"type": "Recreate"}
    plane.apply([_dep(1, strategy=recreate)])
    plane.run_until_idle()
    (old,) = _replicasets(plane).values()
    # an old pod on a node without a kubelet: marked for deletion, it stays until finalized
    ghost = Pod(
        metadata=ObjectMeta(
            name="web-ghost",
            namespace="default",
            labels=dict(old.spec.template.metadata.labels),
            owner_references=[
                OwnerReference(
                    kind="ReplicaSet", name=old.name, uid=old.metadata.uid or "", controller=True
                )
            ],
        ),
        spec=PodSpec(node_name="ghost", containers=old.spec.template.spec.containers),
        status=PodStatus(phase="Running"),
    )
    plane.apiserver.create(ghost)
    plane.apiserver.delete("Pod", "default/web-ghost")
    plane.run_until_idle()
    plane.apply([_dep(1, image="nginx:1.27", strategy=recreate)])
    plane.run_until_idle()
    assert [r.name for r in _replicasets(plane).values()] == [old.name]
    assert _replicasets(plane)[old.name].spec.replicas == 0
    assert [p.name for p in pods(plane, "web-")] == ["web-ghost"]
    plane.apiserver.finalize_pod_deletion("default/web-ghost")
    plane.run_until_idle()
    rss = _replicasets(plane)
    assert len(rss) == 2
    assert _hashes(pods(plane, "web-")) == {
        r.labels[TEMPLATE_HASH_LABEL] for r in rss.values() if r.name != old.name
    }


# --------------------------------------------------------------------------- revisions


def test_rolling_back_to_an_earlier_template_takes_a_new_revision() -> None:
    plane = make_plane(2)
    plane.apply([_dep(2)])
    plane.run_until_idle()
    (first,) = _replicasets(plane)
    plane.apply([_dep(2, image="nginx:1.27")])
    plane.run_until_idle()
    plane.apply([_dep(2)])
    plane.run_until_idle()
    rss = _replicasets(plane)
    assert len(rss) == 2
    ann = rss[first].metadata.annotations
    assert (ann[REVISION_ANNOTATION], ann[REVISION_HISTORY_ANNOTATION]) == ("3", "1")
    assert rss[first].spec.replicas == 2
    assert all(r.spec.replicas == 0 for n, r in rss.items() if n != first)


def test_revision_history_limit_keeps_only_the_newest_old_replicasets() -> None:
    plane = make_plane(2)
    for image in ("a", "b", "c", "d"):
        plane.apply([_with(_dep(2, image=image), revisionHistoryLimit=1)])
        plane.run_until_idle()
    revisions = sorted(
        (int(r.metadata.annotations[REVISION_ANNOTATION]), r.spec.replicas)
        for r in _replicasets(plane).values()
    )
    assert revisions == [(3, 0), (4, 2)]
    deleted = [
        e.involved_object.name
        for e in timeline(plane.store)
        if e.reason == "Deleted" and e.involved_object.kind == "ReplicaSet"
    ]
    assert len(deleted) == 2


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("strategy", "field", "why"),
    [
        (
            _rolling(0, 0),
            "spec.strategy.rollingUpdate.maxUnavailable",
            "Invalid value: 0: may not be 0 when `maxSurge` is 0",
        ),
        (
            _rolling("0%", 0),
            "spec.strategy.rollingUpdate.maxUnavailable",
            "Invalid value: 0: may not be 0 when `maxSurge` is 0",
        ),
        (
            _rolling(-1, 1),
            "spec.strategy.rollingUpdate.maxSurge",
            "Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            _rolling(1, -2),
            "spec.strategy.rollingUpdate.maxUnavailable",
            "Invalid value: -2: must be greater than or equal to 0",
        ),
        (
            _rolling("abc", 1),
            "spec.strategy.rollingUpdate.maxSurge",
            'Invalid value: "abc": a valid percent string must be',
        ),
        (
            _rolling(1, "5"),
            "spec.strategy.rollingUpdate.maxUnavailable",
            'Invalid value: "5": a valid percent string must be',
        ),
        (
            _rolling(1, "-5%"),
            "spec.strategy.rollingUpdate.maxUnavailable",
            'Invalid value: "-5%": a valid percent string must be',
        ),
        (
            _rolling(1, "150%"),
            "spec.strategy.rollingUpdate.maxUnavailable",
            'Invalid value: "150%": must not be greater than 100%',
        ),
        (
            {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}},
            "spec.strategy.rollingUpdate",
            "Forbidden: may not be specified when strategy `type` is 'Recreate'",
        ),
        (
            {"type": "BlueGreen"},
            "spec.strategy.type",
            'Unsupported value: "BlueGreen"',
        ),
    ],
)
def test_an_invalid_strategy_is_refused_and_nothing_is_stored(
    strategy: dict[str, Any], field: str, why: str
) -> None:
    plane = make_plane(1)
    plane.apply([_dep(2)])
    plane.run_until_idle()
    for obj in (_dep(2, strategy=strategy), _dep(2, strategy=strategy, name="fresh")):
        rev = plane.store.revision
        with pytest.raises(InputError) as err:
            plane.apply([obj])
        msg = str(err.value)
        assert "\n" not in msg
        assert f"{obj.ref}: {field}: {why}" in msg
        assert plane.store.revision == rev
    stored = plane.store.get("Deployment", "default/web")
    assert isinstance(stored, Deployment) and stored.spec.strategy == DEFAULT_STRATEGY
    assert "default/fresh" not in {d.key for d in plane.store.list("Deployment")}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"revisionHistoryLimit": -1}, "spec.revisionHistoryLimit"),
        ({"minReadySeconds": -1}, "spec.minReadySeconds"),
        ({"minReadySeconds": 30, "progressDeadlineSeconds": 30}, "spec.progressDeadlineSeconds"),
    ],
)
def test_invalid_history_and_timing_fields_are_refused(spec: dict[str, Any], field: str) -> None:
    plane = make_plane(1)
    rev = plane.store.revision
    with pytest.raises(InputError, match=f"Deployment/default/web: {field}: Invalid value"):
        plane.apply([_with(_dep(2), **spec)])
    assert plane.store.revision == rev


def test_a_replicaset_name_taken_by_another_object_bumps_the_collision_count() -> None:
    """Upstream's hash collision path: the new ReplicaSet's name (``web-<hash>``) is taken
    by a ReplicaSet the Deployment does not control, so the create fails with "already
    exists"; the controller raises status.collisionCount, which changes the hash, and the
    next sync creates ``web-<other hash>``. Without it the Deployment never gets pods."""
    probe = make_plane(3)
    probe.apply([_dep(3)])
    probe.run_until_idle()
    (taken,) = _replicasets(probe)

    plane = make_plane(3)
    squatter = object_from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": taken, "namespace": "default", "labels": {"app": "other"}},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "other"}},
                "template": {
                    "metadata": {"labels": {"app": "other"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        }
    )
    plane.apply([squatter])
    plane.apply([_dep(3)])
    _rounds(plane)
    d = plane.store.get("Deployment", "default/web")
    assert isinstance(d, Deployment)
    assert d.status.collision_count == 1
    rss = _replicasets(plane)
    (new,) = (name for name in rss if name != taken)
    assert rss[taken].spec.replicas == 0 and not rss[taken].metadata.owner_references
    web = pods(plane, "web-")
    assert len(web) == 3 and _hashes(web) == {rss[new].labels[TEMPLATE_HASH_LABEL]}
    assert _status(plane) == (3, 3, 3, 3, 0)
