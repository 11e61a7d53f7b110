"""StatefulSet options the controller evaluates on the emulated control plane:
``minReadySeconds`` (availability, availableReplicas, ordered creation and rolling
updates wait for it), ``updateStrategy.rollingUpdate.maxUnavailable`` (Parallel and
OrderedReady, and its validation), ``volumeClaimTemplates`` (claims made before their
pods, pod volumes naming them) and ``persistentVolumeClaimRetentionPolicy`` (the
garbage collector deletes claims on scale-down or StatefulSet deletion).

The control plane runs on a FakeClock: time passes only through ``clock.advance``."""

from __future__ import annotations

from typing import Any

import pytest

from control.clock import FakeClock
from control.controllers.statefulset import POD_INDEX_LABEL, max_unavailable_of
from control.events import timeline
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from netmodel.apps import StatefulSet
from netmodel.cluster import ClusterSpec
from netmodel.errors import InputError
from netmodel.kinds import object_from_dict
from netmodel.objects import GenericObject, KubeObject, Pod

MAX_ROUNDS = 400
CLAIM_TEMPLATE = {
    "metadata": {"name": "data", "labels": {"tier": "db"}},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


def _plane() -> tuple[ControlPlane, FakeClock]:
    clock = FakeClock()
    cluster = ClusterSpec.model_validate({"nodes": 2, "dns": False})
    plane = ControlPlane(MemoryStore(), cluster, clock=clock)
    plane.start()
    plane.run_until_idle()
    return plane, clock


def _sts(replicas: int = 3, **spec: Any) -> StatefulSet:
    obj = object_from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "main", "image": "nginx:1"}]},
                },
                **spec,
            },
        }
    )
    assert isinstance(obj, StatefulSet)
    return obj


def _stored(plane: ControlPlane) -> StatefulSet:
    s = plane.store.get("StatefulSet", "default/web")
    assert isinstance(s, StatefulSet)
    return s


def _update(plane: ControlPlane, **spec: Any) -> None:
    """Change the stored spec (wire names; ``image`` sets the container's image)."""
    data = _stored(plane).to_dict()
    image = spec.pop("image", None)
    if image is not None:
        data["spec"]["template"]["spec"]["containers"][0]["image"] = image
    data["spec"].update(spec)
    data.pop("status", None)
    plane.apply([object_from_dict(data)])


def _pods(plane: ControlPlane) -> dict[int, Pod]:
    return {
        int(p.labels[POD_INDEX_LABEL]): p
        for p in plane.store.list("Pod")
        if isinstance(p, Pod) and p.name.startswith("web-")
    }


def _healthy(p: Pod) -> bool:
    return p.status.phase == "Running" and p.is_ready and p.metadata.deletion_timestamp is None


def _claims(plane: ControlPlane) -> dict[str, KubeObject]:
    return {c.name: c for c in plane.store.list("PersistentVolumeClaim")}


def _rounds(plane: ControlPlane, check: Any) -> None:
    for _ in range(MAX_ROUNDS):
        steps = plane.run_round()
        check(plane)
        if steps == 0:
            return
    raise AssertionError("did not converge")


def _events(plane: ControlPlane, reason: str) -> list[str]:
    return [e.message or "" for e in timeline(plane.store) if e.reason == reason]


# --------------------------------------------------------------------------- minReadySeconds


def test_ordered_ready_waits_min_ready_seconds_before_the_next_pod() -> None:
    plane, clock = _plane()
    plane.apply([_sts(3, minReadySeconds=10)])
    plane.run_until_idle()
    assert sorted(_pods(plane)) == [0]
    assert _healthy(_pods(plane)[0])
    st = _stored(plane).status
    assert (st.ready_replicas, st.available_replicas) == (1, 0)
    clock.advance(10)  # ready for exactly 10 s: not yet more than minReadySeconds
    plane.run_until_idle()
    assert sorted(_pods(plane)) == [0]
    clock.advance(1)
    plane.run_until_idle()  # the controller queued itself for this moment
    assert sorted(_pods(plane)) == [0, 1]
    assert _stored(plane).status.available_replicas == 1
    for _ in range(2):
        clock.advance(11)
        plane.run_until_idle()
    st = _stored(plane).status
    assert sorted(_pods(plane)) == [0, 1, 2]
    assert (st.ready_replicas, st.available_replicas) == (3, 3)


def test_parallel_pods_become_available_after_min_ready_seconds() -> None:
    plane, clock = _plane()
    plane.apply([_sts(3, minReadySeconds=30, podManagementPolicy="Parallel")])
    plane.run_until_idle()
    st = _stored(plane).status
    assert sorted(_pods(plane)) == [0, 1, 2]
    assert (st.ready_replicas, st.available_replicas) == (3, 0)
    clock.advance(31)
    plane.run_until_idle()
    assert _stored(plane).status.available_replicas == 3


def test_rolling_update_waits_for_the_updated_pod_to_be_available() -> None:
    """Parallel, maxUnavailable 1 (upstream issue 112307): the next pod is deleted only
    once the last updated one has been ready for minReadySeconds."""
    plane, clock = _plane()
    plane.apply([_sts(3, minReadySeconds=20, podManagementPolicy="Parallel")])
    plane.run_until_idle()
    clock.advance(21)
    plane.run_until_idle()
    _update(plane, image="nginx:2")
    plane.run_until_idle()
    images = {o: p.spec.containers[0].image for o, p in _pods(plane).items()}
    assert images == {0: "nginx:1", 1: "nginx:1", 2: "nginx:2"}
    assert _stored(plane).status.available_replicas == 2
    clock.advance(21)
    plane.run_until_idle()
    images = {o: p.spec.containers[0].image for o, p in _pods(plane).items()}
    assert images == {0: "nginx:1", 1: "nginx:2", 2: "nginx:2"}


# --------------------------------------------------------------------------- maxUnavailable


def _unavailable_in_range(plane: ControlPlane, n: int) -> int:
    have = _pods(plane)
    return sum(1 for o in range(n) if o not in have or not _healthy(have[o]))


def test_parallel_updates_max_unavailable_pods_at_once() -> None:
    plane, _ = _plane()
    plane.apply(
        [
            _sts(
                5,
                podManagementPolicy="Parallel",
                updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}},
            )
        ]
    )
    plane.run_until_idle()
    _update(plane, image="nginx:2")
    worst: list[int] = []
    _rounds(plane, lambda pl: worst.append(_unavailable_in_range(pl, 5)))
    assert max(worst) == 2, worst
    deletes = _events(plane, "SuccessfulDelete")
    assert deletes[:2] == [
        "delete Pod web-4 in StatefulSet web successful",
        "delete Pod web-3 in StatefulSet web successful",
    ]
    assert {p.spec.containers[0].image for p in _pods(plane).values()} == {"nginx:2"}


def test_max_unavailable_percentage_rounds_up() -> None:
    plane, _ = _plane()
    plane.apply(
        [
            _sts(
                3,
                podManagementPolicy="Parallel",
                updateStrategy={
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": "50%"},
                },
            )
        ]
    )
    plane.run_until_idle()
    assert max_unavailable_of(_stored(plane)) == 2
    _update(plane, image="nginx:2")
    worst: list[int] = []
    _rounds(plane, lambda pl: worst.append(_unavailable_in_range(pl, 3)))
    assert max(worst) == 2, worst
    assert _events(plane, "SuccessfulDelete")[:2] == [
        "delete Pod web-2 in StatefulSet web successful",
        "delete Pod web-1 in StatefulSet web successful",
    ]


def test_ordered_ready_deletes_a_batch_and_recreates_it_in_order() -> None:
    plane, _ = _plane()
    plane.apply(
        [_sts(4, updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}})]
    )
    plane.run_until_idle()
    _update(plane, image="nginx:2")

    def ordered(pl: ControlPlane) -> None:
        have = _pods(pl)
        if 2 in have and have[2].spec.containers[0].image == "nginx:2":
            pass
        elif 3 in have and have[3].spec.containers[0].image == "nginx:2":
            raise AssertionError("web-3 recreated before web-2")

    worst: list[int] = []
    _rounds(plane, lambda pl: (ordered(pl), worst.append(_unavailable_in_range(pl, 4))))
    assert max(worst) == 2, worst  # web-3 and web-2 were down together
    deletes = _events(plane, "SuccessfulDelete")
    assert deletes[:2] == [
        "delete Pod web-3 in StatefulSet web successful",
        "delete Pod web-2 in StatefulSet web successful",
    ]
    assert {p.spec.containers[0].image for p in _pods(plane).values()} == {"nginx:2"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "Invalid value: 0: cannot be 0"),
        ("0%", 'Invalid value: "0%": cannot be 0'),
        (-1, "Invalid value: -1: must be greater than or equal to 0"),
        ("101%", 'Invalid value: "101%": must not be greater than 100%'),
        ("two", "a valid percent string must be a numeric string followed by an ending '%'"),
    ],
)
def test_max_unavailable_validation(value: object, message: str) -> None:
    plane, _ = _plane()
    bad = _sts(
        2, updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": value}}
    )
    with pytest.raises(InputError) as e:
        plane.apply([bad])
    assert "spec.updateStrategy.rollingUpdate.maxUnavailable" in str(e.value)
    assert message in str(e.value)
    assert plane.store.list("StatefulSet") == []


def test_retention_policy_validation() -> None:
    plane, _ = _plane()
    bad = _sts(1, persistentVolumeClaimRetentionPolicy={"whenScaled": "Keep"})
    with pytest.raises(InputError) as e:
        plane.apply([bad])
    assert "spec.persistentVolumeClaimRetentionPolicy.whenScaled" in str(e.value)
    assert 'Unsupported value: "Keep": supported values: "Delete", "Retain"' in str(e.value)


# --------------------------------------------------------------------------- claims


def _owners(claim: KubeObject) -> list[tuple[str, str]]:
    return [(r.kind, r.name) for r in claim.metadata.owner_references]


def test_claims_are_made_before_their_pods_and_named_by_the_pods_volumes() -> None:
    plane, _ = _plane()
    volumes = [{"name": "data", "emptyDir": {}}, {"name": "cfg", "emptyDir": {}}]
    sts = _sts(2, volumeClaimTemplates=[CLAIM_TEMPLATE])
    data = sts.to_dict()
    data["spec"]["template"]["spec"]["volumes"] = volumes
    plane.apply([object_from_dict(data)])
    plane.run_until_idle()
    claims = _claims(plane)
    assert sorted(claims) == ["data-web-0", "data-web-1"]
    for claim in claims.values():
        assert isinstance(claim, GenericObject)
        assert claim.labels == {"tier": "db", "app": "web"}
        assert claim.field("spec")["resources"] == {"requests": {"storage": "1Gi"}}
        assert _owners(claim) == []  # Retain / Retain
    for o, pod in _pods(plane).items():
        assert (pod.spec.model_extra or {})["volumes"] == [
            {"name": "data", "persistentVolumeClaim": {"claimName": f"data-web-{o}"}},
            {"name": "cfg", "emptyDir": {}},
        ]
    creates = _events(plane, "SuccessfulCreate")
    assert creates.index("create Claim data-web-1 Pod web-1 in StatefulSet web success") < (
        creates.index("create Pod web-1 in StatefulSet web successful")
    )


def test_retain_keeps_claims_on_scale_down_and_deletion() -> None:
    plane, _ = _plane()
    plane.apply([_sts(2, volumeClaimTemplates=[CLAIM_TEMPLATE])])
    plane.run_until_idle()
    _update(plane, replicas=1)
    plane.run_until_idle()
    assert sorted(_pods(plane)) == [0]
    plane.delete("StatefulSet", "default/web")
    plane.run_until_idle()
    assert _pods(plane) == {}
    assert sorted(_claims(plane)) == ["data-web-0", "data-web-1"]


def test_when_scaled_delete_removes_the_claims_of_condemned_pods() -> None:
    plane, _ = _plane()
    policy = {"whenScaled": "Delete", "whenDeleted": "Retain"}
    plane.apply(
        [
            _sts(
                3,
                volumeClaimTemplates=[CLAIM_TEMPLATE],
                persistentVolumeClaimRetentionPolicy=policy,
            )
        ]
    )
    plane.run_until_idle()
    assert all(_owners(c) == [] for c in _claims(plane).values())
    _update(plane, replicas=1)
    seen: list[tuple[str, str]] = []

    def owners(pl: ControlPlane) -> None:
        for c in _claims(pl).values():
            seen.extend(_owners(c))

    _rounds(plane, owners)
    assert ("Pod", "web-2") in seen and ("Pod", "web-1") in seen
    assert sorted(_claims(plane)) == ["data-web-0"]
    assert _owners(_claims(plane)["data-web-0"]) == []


def test_when_deleted_delete_removes_claims_with_the_statefulset() -> None:
    plane, _ = _plane()
    policy = {"whenScaled": "Retain", "whenDeleted": "Delete"}
    plane.apply(
        [
            _sts(
                2,
                volumeClaimTemplates=[CLAIM_TEMPLATE],
                persistentVolumeClaimRetentionPolicy=policy,
            )
        ]
    )
    plane.run_until_idle()
    claims = _claims(plane)
    assert all(_owners(c) == [("StatefulSet", "web")] for c in claims.values())
    assert all(c.metadata.controller_ref() is not None for c in claims.values())
    _update(plane, replicas=1)
    plane.run_until_idle()
    assert sorted(_claims(plane)) == ["data-web-0", "data-web-1"]  # whenScaled Retain
    plane.delete("StatefulSet", "default/web")
    plane.run_until_idle()
    # the claim of the scaled-down pod keeps the StatefulSet as owner (whenScaled Retain)
    assert _claims(plane) == {}


def test_a_pod_waits_for_its_stale_claim_to_go() -> None:
    """whenScaled Delete, scaled down and up again before the garbage collector removed
    the condemned pod's claim: the new pod gets a new claim, not the doomed one."""
    plane, _ = _plane()
    policy = {"whenScaled": "Delete", "whenDeleted": "Retain"}
    plane.apply(
        [
            _sts(
                2,
                volumeClaimTemplates=[CLAIM_TEMPLATE],
                persistentVolumeClaimRetentionPolicy=policy,
            )
        ]
    )
    plane.run_until_idle()
    old_uid = _claims(plane)["data-web-1"].metadata.uid
    _update(plane, replicas=1)
    for _ in range(MAX_ROUNDS):
        plane.run_round()
        claim = _claims(plane).get("data-web-1")
        if claim is not None and ("Pod", "web-1") in _owners(claim):
            break
    else:
        raise AssertionError("the condemned pod never owned its claim")
    _update(plane, replicas=2)
    plane.run_until_idle()
    claim = _claims(plane)["data-web-1"]
    assert claim.metadata.uid != old_uid
    assert _owners(claim) == []
    assert sorted(_pods(plane)) == [0, 1]
