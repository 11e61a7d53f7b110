"""The disruption controller (kube-controller-manager's ``disruption`` controller): it
keeps each PodDisruptionBudget's status, which the eviction subresource
(:mod:`control.apiserver.eviction`) reads before it lets a pod go.

Contract of :meth:`DisruptionController.reconcile` for a PodDisruptionBudget (keys are
``namespace/name``), as Kubernetes computes it (:func:`budget_status`):

* The PDB's pods: the pods of its namespace its ``spec.selector`` matches (an empty
  selector matches every pod of the namespace; no selector matches none).
* ``expectedPods`` and ``desiredHealthy``:

  - ``minAvailable`` an integer N: ``expectedPods`` is the number of its pods and
    ``desiredHealthy`` is N;
  - ``minAvailable`` a percentage, or ``maxUnavailable`` (integer or percentage):
    ``expectedPods`` is the sum of the scales (``spec.replicas``) of the pods'
    controllers, each counted once: a ReplicaSet owned by a Deployment counts the
    Deployment's, otherwise the ReplicaSet's; a ReplicationController's; a
    StatefulSet's. ``desiredHealthy`` is the percentage of ``expectedPods`` rounded up
    (minAvailable), or ``expectedPods`` less maxUnavailable (a percentage rounded up),
    at least 0. A pod with no controller, or whose controller has no scale (a
    DaemonSet, a Job, a missing owner), is an error: the budget fails safe (below);
  - neither set: both 0.

* ``currentHealthy``: the pods that are Ready, not being deleted, and not listed in
  ``status.disruptedPods`` (an eviction the apiserver granted and whose deletion has not
  been seen yet).
* ``disruptionsAllowed`` = currentHealthy - desiredHealthy, 0 when that is negative or
  ``expectedPods`` is 0. ``observedGeneration`` = the PDB's ``metadata.generation``.
  The condition ``DisruptionAllowed`` is True with reason ``SufficientPods`` when
  disruptions are allowed, else False with ``InsufficientPods``.
* ``disruptedPods`` keeps an entry only while its pod exists, is not being deleted and
  the entry is younger than :data:`DELETION_TIMEOUT` (2 minutes): an older one is
  dropped with a Warning Event ``NotDeleted`` (the pod was expected to go and did not).
  Expiry is checked each time the budget is reconciled (any change to it, its pods or
  their controllers), not on a timer.
* Fail safe (the expected count cannot be computed): ``disruptionsAllowed`` 0 and the
  condition False with reason ``SyncFailed`` and the error as message, the other counts
  kept; a Warning Event ``CalculateExpectedPodCountFailed``.
* No write when the status is already so (level-triggered, idempotent).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control.clock import Clock, parse_rfc3339, rfc3339
from control.controllers.base import APIClient, Controller
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError
from netmodel.objects import KubeObject, Pod, scaled_value
from netmodel.selectors import LabelSelector

PDB = "PodDisruptionBudget"
#: how long an eviction's entry in ``status.disruptedPods`` waits for the pod to go
#: (Kubernetes' DeletionTimeout)
DELETION_TIMEOUT = 120.0
#: the kinds whose ``spec.replicas`` is a pod's expected scale
SCALED = ("ReplicaSet", "Deployment", "ReplicationController", "StatefulSet")
CONDITION = "DisruptionAllowed"


class ExpectedCountError(Exception):
    """The expected pod count cannot be computed (a pod without a scaled controller)."""


def _spec(obj: KubeObject) -> dict[str, Any]:
    spec = (obj.model_extra or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def _status(obj: KubeObject) -> dict[str, Any]:
    status = (obj.model_extra or {}).get("status")
    return status if isinstance(status, dict) else {}


def selects(pdb: KubeObject, pod: KubeObject) -> bool:
    """Whether ``pdb``'s selector matches ``pod`` (same namespace; an empty selector
    matches every pod, a missing one none, as policy/v1 says)."""
    if pod.namespace != pdb.namespace:
        return False
    selector = _selector(pdb)
    return selector is not None and selector.matches(pod.metadata.labels)


#: (uid, resourceVersion) of a budget -> its parsed selector (None: it has none); a
#: stored object's selector never changes without its resourceVersion changing
_SELECTORS: dict[tuple[str, int], LabelSelector | None] = {}
_SELECTORS_MAX = 4096


def _selector(pdb: KubeObject) -> LabelSelector | None:
    """``pdb``'s parsed selector, parsed once per stored version (every pod event and
    every reconcile matches pods against its namespace's budgets)."""
    key = (pdb.metadata.uid or "", pdb.resource_version)
    if key[0] and key in _SELECTORS:
        return _SELECTORS[key]
    sel = _spec(pdb).get("selector")
    parsed = LabelSelector.model_validate(sel) if isinstance(sel, dict) else None
    if key[0]:
        if len(_SELECTORS) >= _SELECTORS_MAX:
            _SELECTORS.clear()
        _SELECTORS[key] = parsed
    return parsed


def is_healthy(pod: Pod) -> bool:
    """Kubernetes' IsPodReady, for a pod not being deleted."""
    return pod.is_ready and not pod.is_terminating


@dataclass(frozen=True)
class Expected:
    expected: int
    desired: int


ScaleOf = Mapping[tuple[str, str, str], KubeObject]  # (kind, namespace, name) -> object


def _replicas(obj: KubeObject) -> int:
    r = getattr(getattr(obj, "spec", None), "replicas", None)
    return 1 if r is None else int(r)


def _controller_scale(pod: Pod, objects: ScaleOf) -> tuple[str, int]:
    """(controller identity, replicas) of the scaled controller above ``pod``."""
    ref = pod.metadata.controller_ref()
    if ref is None:
        raise ExpectedCountError(f'found no controller ref for pod "{pod.name}"')
    owner = objects.get((ref.kind, pod.namespace, ref.name))
    if ref.kind not in SCALED or owner is None or (ref.uid and owner.metadata.uid != ref.uid):
        raise ExpectedCountError(f'found no controllers for pod "{pod.name}"')
    if ref.kind == "ReplicaSet":
        up = owner.metadata.controller_ref()
        if up is not None and up.kind == "Deployment":
            dep = objects.get(("Deployment", pod.namespace, up.name))
            if dep is not None and (not up.uid or dep.metadata.uid == up.uid):
                owner = dep
    return f"{owner.kind}/{owner.metadata.uid or owner.name}", _replicas(owner)


def expected_counts(pdb: KubeObject, pods: Sequence[Pod], objects: ScaleOf) -> Expected:
    """``expectedPods`` and ``desiredHealthy`` (module docstring). ExpectedCountError
    when they cannot be computed; ValueError for a malformed percentage."""
    spec = _spec(pdb)
    lo, hi = spec.get("minAvailable"), spec.get("maxUnavailable")
    if lo is None and hi is None:
        return Expected(0, 0)
    if isinstance(lo, int):
        return Expected(len(pods), lo)
    scales: dict[str, int] = {}
    for pod in pods:
        ident, n = _controller_scale(pod, objects)
        scales[ident] = n
    expected = sum(scales.values())
    if hi is not None:
        desired = max(0, expected - scaled_value(hi, expected, round_up=True))
    else:
        assert isinstance(lo, str)  # an int returned above
        desired = scaled_value(lo, expected, round_up=True)
    return Expected(expected, desired)


def allowed_condition(
    allowed: int, before: Mapping[str, Any] | None, now: str, *, failed: str | None = None
) -> dict[str, Any]:
    """The ``DisruptionAllowed`` condition for ``allowed`` disruptions (``failed``: the
    sync error: False / SyncFailed); its transition time stays while its status does."""
    if failed is not None:
        status, reason, message = "False", "SyncFailed", failed
    elif allowed > 0:
        status, reason, message = "True", "SufficientPods", ""
    else:
        status, reason, message = "False", "InsufficientPods", ""
    since = now
    if before is not None and before.get("status") == status and before.get("lastTransitionTime"):
        since = str(before["lastTransitionTime"])
    return {
        "type": CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


def budget_status(
    pdb: KubeObject, pods: Sequence[Pod], objects: ScaleOf, now: float
) -> tuple[dict[str, Any], list[str], str | None]:
    """The status the controller writes for ``pdb`` over ``pods`` (its matched pods) at
    time ``now``: (status, the disruptedPods entries that expired, the sync error or
    None). Pure: reads nothing else."""
    old = _status(pdb)
    stamp = rfc3339(now)
    by_name = {p.name: p for p in pods}
    disrupted: dict[str, str] = {}
    expired: list[str] = []
    for name, when in (old.get("disruptedPods") or {}).items():
        pod = by_name.get(name)
        if pod is None or pod.is_terminating:
            continue
        try:
            t = parse_rfc3339(str(when))
        except ValueError:
            t = now  # an unreadable time: count from now
        if t + DELETION_TIMEOUT < now:
            expired.append(name)
            continue
        disrupted[name] = str(when)
    conds = [c for c in old.get("conditions") or [] if isinstance(c, dict)]
    before = next((c for c in conds if c.get("type") == CONDITION), None)
    others = [c for c in conds if c.get("type") != CONDITION]
    generation = pdb.metadata.generation
    try:
        exp = expected_counts(pdb, pods, objects)
    except (ExpectedCountError, ValueError) as e:
        new = {**old, "disruptionsAllowed": 0, "observedGeneration": generation}
        new["conditions"] = [*others, allowed_condition(0, before, stamp, failed=str(e))]
        if disrupted:
            new["disruptedPods"] = disrupted
        else:
            new.pop("disruptedPods", None)
        return new, expired, str(e)
    healthy = sum(1 for p in pods if is_healthy(p) and p.name not in disrupted)
    allowed = healthy - exp.desired
    if exp.expected <= 0 or allowed < 0:
        allowed = 0
    new = {
        **({"disruptedPods": disrupted} if disrupted else {}),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": exp.desired,
        "expectedPods": exp.expected,
        "observedGeneration": generation,
        "conditions": [*others, allowed_condition(allowed, before, stamp)],
    }
    return new, expired, None


def _namespace(obj: KubeObject) -> Iterable[str]:
    return (obj.namespace,)


def _budget_namespace(obj: KubeObject) -> Iterable[str]:
    return (obj.namespace,) if obj.kind == PDB else ()


def _same_for_budgets(old: KubeObject, new: KubeObject) -> bool:
    """Whether a pod's update leaves everything a budget's status reads unchanged: its
    labels, its owners, its health and whether it is being deleted."""
    if not isinstance(old, Pod) or not isinstance(new, Pod):
        return False
    return (
        old.metadata.labels == new.metadata.labels
        and old.metadata.owner_references == new.metadata.owner_references
        and is_healthy(old) == is_healthy(new)
        and old.is_terminating == new.is_terminating
        and old.status.phase == new.status.phase
    )


class DisruptionController(Controller):
    """Keeps every PodDisruptionBudget's status; see the module docstring."""

    name = "disruption-controller"
    kinds = frozenset({PDB, "Pod", *SCALED})

    def __init__(self, api: APIClient, recorder: Recorder, clock: Clock) -> None:
        super().__init__(api, recorder)
        self.clock = clock

    def indexers(self) -> dict[str, Any]:
        # budgets by namespace apart: every pod event looks its namespace's budgets up
        return {"namespace": _namespace, "budgets": _budget_namespace}

    def _budgets(self, namespace: str) -> list[KubeObject]:
        return self.cache.by_index("budgets", namespace)

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterator[str]:
        obj = event.object
        if obj.kind == PDB:
            yield obj.key
            return
        budgets = self._budgets(obj.namespace)
        if obj.kind == "Pod":
            if old is not None and _same_for_budgets(old, obj):
                return  # a change no budget's status depends on (a bind, an address)
            for pdb in budgets:
                if selects(pdb, obj) or (old is not None and selects(pdb, old)):
                    yield pdb.key
            return
        for pdb in budgets:  # a controller's scale: every budget of its namespace
            yield pdb.key

    def reconcile(self, key: str) -> None:
        try:
            pdb = self.store.get(PDB, key)
        except NotFoundError:
            return
        pods: list[Pod] = []
        objects: dict[tuple[str, str, str], KubeObject] = {}
        for o in self.cache.by_index("namespace", pdb.namespace):
            if isinstance(o, Pod):
                if selects(pdb, o):
                    pods.append(o)
            elif o.kind in SCALED:
                objects[(o.kind, o.namespace, o.name)] = o
        status, expired, error = budget_status(pdb, pods, objects, self.clock.now())
        for name in expired:
            self.recorder.record(
                self.name,
                pdb,
                "NotDeleted",
                f"Pod {pdb.namespace}/{name} was expected to be deleted at "
                f"{(_status(pdb).get('disruptedPods') or {}).get(name)} but it wasn't, "
                "updating pdb",
                type_="Warning",
            )
        if error is not None and status != _status(pdb):
            self.recorder.record(
                self.name,
                pdb,
                "CalculateExpectedPodCountFailed",
                f"Failed to calculate the number of expected pods: {error}",
                type_="Warning",
            )
        if status == _status(pdb):
            return
        data = pdb.to_dict()
        data["status"] = status
        self.api.update(type(pdb).model_validate(data), component=self.name)

    def subject(self, key: str) -> KubeObject | None:
        try:
            return self.store.get(PDB, key)
        except NotFoundError:
            return None
