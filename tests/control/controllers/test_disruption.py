"""The disruption controller: each PodDisruptionBudget's status as kube-controller-manager
computes it (expected, desired and current healthy pods, disruptions allowed, the
DisruptionAllowed condition), driven by the deterministic runner; and the eviction
subresource's decisions (control/apiserver/eviction.py) against that status."""

from __future__ import annotations

from typing import Any

import pytest
from cp_helpers import deployment, make_plane, pods, reasons

from control.apiserver.eviction import VIOLATION, EvictionRefused, evict
from control.clock import FakeClock, rfc3339
from control.controllers.disruption import DELETION_TIMEOUT, budget_status
from control.runner import ControlPlane
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject, Pod


def _pdb(name: str = "web-pdb", selector: Any = None, **spec: Any) -> KubeObject:
    body: dict[str, Any] = dict(spec)
    body["selector"] = {"matchLabels": {"app": "web"}} if selector is None else selector
    return object_from_dict(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": body,
        }
    )


def _status(plane: ControlPlane, name: str = "web-pdb") -> dict[str, Any]:
    obj = plane.store.get("PodDisruptionBudget", f"default/{name}")
    return dict((obj.model_extra or {})["status"])


def _counts(st: dict[str, Any]) -> tuple[int, int, int, int]:
    return (
        st["expectedPods"],
        st["desiredHealthy"],
        st["currentHealthy"],
        st["disruptionsAllowed"],
    )


def _condition(st: dict[str, Any]) -> tuple[str, str]:
    (c,) = [c for c in st["conditions"] if c["type"] == "DisruptionAllowed"]
    return c["status"], c["reason"]


def _plane_with(*budgets: KubeObject, replicas: int = 3) -> ControlPlane:
    plane = make_plane(3)
    plane.apply([deployment("web", replicas), *budgets])
    plane.run_until_idle()
    return plane


@pytest.mark.parametrize(
    ("spec", "replicas", "want"),
    [
        ({"minAvailable": 2}, 3, (3, 2, 3, 1)),
        ({"minAvailable": 3}, 3, (3, 3, 3, 0)),
        # a percentage of the Deployment's scale, rounded up: 50% of 4 is 2, 34% of 4 is 2
        ({"minAvailable": "50%"}, 4, (4, 2, 4, 2)),
        ({"minAvailable": "34%"}, 4, (4, 2, 4, 2)),
        # maxUnavailable rounds up too: 4 - ceil(0.26 * 4) = 2
        ({"maxUnavailable": "26%"}, 4, (4, 2, 4, 2)),
        ({"maxUnavailable": 1}, 4, (4, 3, 4, 1)),
        ({"maxUnavailable": 0}, 4, (4, 4, 4, 0)),
        ({}, 4, (0, 0, 4, 0)),  # neither: nothing expected, nothing allowed
    ],
)
def test_budget_counts(
    spec: dict[str, Any], replicas: int, want: tuple[int, int, int, int]
) -> None:
    """(expectedPods, desiredHealthy, currentHealthy, disruptionsAllowed)."""
    st = _status(_plane_with(_pdb(**spec), replicas=replicas))
    assert _counts(st) == want
    sufficient = ("True", "SufficientPods") if want[3] else ("False", "InsufficientPods")
    assert _condition(st) == sufficient
    assert st["observedGeneration"] == 1


def test_status_follows_scale_and_spec_and_settles() -> None:
    plane = _plane_with(_pdb(maxUnavailable=1), replicas=3)
    assert _counts(_status(plane)) == (3, 2, 3, 1)
    plane.apply([deployment("web", 5)])
    plane.run_until_idle()
    assert _counts(_status(plane)) == (5, 4, 5, 1)
    plane.apply([_pdb(maxUnavailable=3)])  # a spec change: a new generation, observed
    plane.run_until_idle()
    st = _status(plane)
    assert _counts(st) == (5, 2, 5, 3) and st["observedGeneration"] == 2
    # level-triggered: reconciling a settled budget writes nothing
    rv = plane.store.get("PodDisruptionBudget", "default/web-pdb").resource_version
    plane.disruption.reconcile("default/web-pdb")
    assert plane.store.get("PodDisruptionBudget", "default/web-pdb").resource_version == rv


def test_selectors_empty_matches_the_namespace_and_other_labels_match_nothing() -> None:
    plane = _plane_with(
        _pdb("all", selector={}, minAvailable=1),
        _pdb("none", selector={"matchLabels": {"app": "other"}}, minAvailable=1),
    )
    assert _counts(_status(plane, "all")) == (3, 1, 3, 2)
    assert _counts(_status(plane, "none")) == (0, 1, 0, 0)


def test_a_pod_without_a_controller_fails_safe() -> None:
    plane = _plane_with(_pdb(maxUnavailable=1))
    bare = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bare", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
    )
    plane.apply([bare])
    plane.run_until_idle()
    st = _status(plane)
    assert st["disruptionsAllowed"] == 0
    (c,) = st["conditions"]
    assert (c["status"], c["reason"], c["message"]) == (
        "False",
        "SyncFailed",
        'found no controller ref for pod "bare"',
    )
    assert "CalculateExpectedPodCountFailed" in reasons(plane, "PodDisruptionBudget", "web-pdb")


def _pod(name: str, *, ready: bool, deleting: bool = False) -> Pod:
    p = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {"app": "web"},
                **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {}),
            },
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )
    assert isinstance(p, Pod)
    return p


def test_health_excludes_unready_deleting_and_recently_evicted_pods() -> None:
    now = 1767225600.0
    pdb = object_from_dict(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "b", "namespace": "default", "generation": 1},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {
                "disruptedPods": {
                    "evicted": rfc3339(now - 10),
                    "stale": rfc3339(now - DELETION_TIMEOUT - 1),
                    "gone": rfc3339(now),
                }
            },
        }
    )
    ps = [
        _pod("ok", ready=True),
        _pod("unready", ready=False),
        _pod("deleting", ready=True, deleting=True),
        _pod("evicted", ready=True),
        _pod("stale", ready=True),
    ]
    st, expired, err = budget_status(pdb, ps, {}, now)
    assert err is None and expired == ["stale"]
    # ok and stale (its eviction timed out) are healthy; evicted is still expected to go
    assert _counts(st) == (5, 1, 2, 1)
    assert st["disruptedPods"] == {"evicted": rfc3339(now - 10)}


# --------------------------------------------------------------------------- eviction


def _evict(plane: ControlPlane, name: str, **opts: Any) -> None:
    body: dict[str, Any] = {
        "apiVersion": opts.pop("api_version", "policy/v1"),
        "kind": "Eviction",
        "metadata": {"name": opts.pop("body_name", name), "namespace": "default"},
    }
    if opts:
        body["deleteOptions"] = opts
    evict(
        plane.apiserver,
        "default",
        name,
        body,
        dry_run=False,
        component="test",
        clock=plane.clock,
    )


def test_eviction_spends_the_budget_then_refuses_with_429() -> None:
    plane = _plane_with(_pdb(minAvailable=2))
    first, second = sorted(p.name for p in pods(plane, "web-"))[:2]
    _evict(plane, first)
    gone = plane.store.get("Pod", f"default/{first}")
    assert isinstance(gone, Pod) and gone.is_terminating
    cond = gone.condition("DisruptionTarget")
    assert cond is not None and (cond.status, cond.reason, cond.message) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )
    st = _status(plane)
    assert st["disruptionsAllowed"] == 0 and list(st["disruptedPods"]) == [first]
    assert _condition(st) == ("False", "InsufficientPods")
    with pytest.raises(EvictionRefused) as e:
        _evict(plane, second)
    assert (e.value.code, e.value.reason, e.value.message) == (429, "TooManyRequests", VIOLATION)
    assert e.value.details["causes"] == [
        {
            "reason": "DisruptionTarget",
            "message": "The disruption budget web-pdb needs 2 healthy pods and has 3 currently",
        }
    ]
    assert e.value.retry_after == 0
    assert not plane.store.get("Pod", f"default/{second}").metadata.deletion_timestamp
    # the first pod goes, its replacement becomes ready: the budget allows one again
    plane.run_until_idle()
    with pytest.raises(NotFoundError):
        plane.store.get("Pod", f"default/{first}")
    st = _status(plane)
    assert _counts(st) == (3, 2, 3, 1) and "disruptedPods" not in st


def test_eviction_dry_run_and_preconditions_write_nothing() -> None:
    plane = _plane_with(_pdb(minAvailable=2))
    name = pods(plane, "web-")[0].name
    before = plane.store.revision
    _evict(plane, name, dryRun=["All"])
    with pytest.raises(EvictionRefused) as e:
        _evict(plane, name, preconditions={"uid": "not-it"})
    assert e.value.code == 409 and "Precondition failed: UID in precondition: not-it" in str(
        e.value
    )
    assert plane.store.revision == before


@pytest.mark.parametrize(
    ("kwargs", "code", "text"),
    [
        ({"body_name": "other"}, 400, "name in URL does not match name in Eviction object"),
        ({"api_version": "policy/v2"}, 400, "policy/v2"),
        ({"dryRun": ["Some"]}, 422, 'dryRun: Unsupported value: "Some"'),
        ({"propagationPolicy": "Sideways"}, 422, 'Unsupported value: "Sideways"'),
    ],
)
def test_eviction_bad_bodies(kwargs: dict[str, Any], code: int, text: str) -> None:
    plane = _plane_with(_pdb(minAvailable=1))
    name = pods(plane, "web-")[0].name
    before = plane.store.revision
    with pytest.raises(EvictionRefused) as e:
        _evict(plane, name, **kwargs)
    assert e.value.code == code and text in e.value.message
    assert plane.store.revision == before


def test_eviction_v1beta1_body_and_no_budget_deletes() -> None:
    plane = _plane_with()
    name = pods(plane, "web-")[0].name
    _evict(plane, name, api_version="policy/v1beta1", gracePeriodSeconds=0)
    with pytest.raises(NotFoundError):  # grace period 0: removed at once
        plane.store.get("Pod", f"default/{name}")


def test_two_budgets_are_an_internal_error_and_stale_status_asks_to_retry() -> None:
    plane = _plane_with(_pdb("a", minAvailable=1), _pdb("b", minAvailable=1))
    name = pods(plane, "web-")[0].name
    with pytest.raises(EvictionRefused) as e:
        _evict(plane, name)
    assert e.value.code == 500 and "more than one PodDisruptionBudget" in e.value.message
    plane.apiserver.delete("PodDisruptionBudget", "default/b")
    plane.run_until_idle()
    # a spec change the controller has not observed yet: 429, retry after 10 s
    plane.apply([_pdb("a", minAvailable=0)])
    with pytest.raises(EvictionRefused) as e:
        _evict(plane, name)
    assert (e.value.code, e.value.retry_after) == (429, 10)
    assert e.value.details["causes"][0]["message"] == (
        "The disruption budget a is still being processed by the server."
    )
    plane.run_until_idle()
    _evict(plane, name)


def test_an_expired_eviction_entry_is_dropped_with_an_event() -> None:
    plane = _plane_with(_pdb(minAvailable=1))
    name = pods(plane, "web-")[0].name
    pdb = plane.store.get("PodDisruptionBudget", "default/web-pdb")
    data = pdb.to_dict()
    data["status"]["disruptedPods"] = {name: rfc3339(plane.clock.now())}
    plane.apiserver.update(type(pdb).model_validate(data))
    plane.run_until_idle()
    assert _counts(_status(plane)) == (3, 1, 2, 1)  # the listed pod does not count
    clock = plane.clock
    assert isinstance(clock, FakeClock)
    clock.advance(DELETION_TIMEOUT + 1)
    plane.disruption.reconcile("default/web-pdb")
    st = _status(plane)
    assert _counts(st) == (3, 1, 3, 2) and "disruptedPods" not in st
    assert "NotDeleted" in reasons(plane, "PodDisruptionBudget", "web-pdb")


def test_pod_updates_reach_budgets_only_when_a_budget_could_see_them() -> None:
    plane = _plane_with(_pdb(maxUnavailable=1), replicas=3)
    ctl = plane.disruption
    ready = _pod("web-a", ready=True).with_meta(resource_version=7)
    bound = ready.evolve(spec=ready.spec.evolve(node_name="node-2"))  # a bind: nothing a
    # budget reads

    def keys(new: Pod, old: Pod) -> list[str]:
        return list(ctl.keys_for(WatchEvent("MODIFIED", new, 8), old))

    assert keys(bound, ready) == []
    assert keys(_pod("web-a", ready=False), ready) == ["default/web-pdb"]  # health
    assert keys(_pod("web-a", ready=True, deleting=True), ready) == ["default/web-pdb"]
    relabelled = ready.with_meta(labels={"app": "other"})  # it leaves the selector
    assert keys(relabelled, ready) == ["default/web-pdb"]
