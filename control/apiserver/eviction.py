"""The ``pods/eviction`` subresource, as kube-apiserver's eviction REST handler serves it:
delete a pod unless that would break its PodDisruptionBudget.

Contract of :func:`evict` (an ``Eviction`` of policy/v1, or of policy/v1beta1: both
carry ``metadata`` and ``deleteOptions``):

* The Eviction's ``metadata.name`` must be the pod's (400 "name in URL does not match
  name in Eviction object"); its namespace, when given, the request's.
* ``deleteOptions`` are those of a pod DELETE: ``gracePeriodSeconds`` (0: the pod goes
  at once), ``preconditions`` (uid, resourceVersion: 409 when the stored pod differs),
  ``propagationPolicy`` (checked), ``dryRun: ["All"]`` (or ``dryRun=All`` on the URL:
  everything is checked, nothing is written).
* A pod that has already caused its disruption, or never will (phase Succeeded, Failed
  or Pending, or being deleted), is deleted without looking at any budget.
* Otherwise the PodDisruptionBudgets of its namespace whose selector matches it decide:
  none: the pod is deleted; more than one: 500 "This pod has more than one
  PodDisruptionBudget, which the eviction subresource does not support.".
* With one budget: a pod that is not Ready is deleted without spending the budget when
  the budget's ``unhealthyPodEvictionPolicy`` is ``AlwaysAllow``, or when the budget is
  healthy (``currentHealthy >= desiredHealthy > 0``). Else the budget is checked: a
  status older than its spec (``observedGeneration < generation``): 429 with
  ``retryAfterSeconds`` 10 and the cause "The disruption budget NAME is still being
  processed by the server."; ``disruptionsAllowed`` negative, or more than 2000 pods
  already in ``disruptedPods``: 403; ``disruptionsAllowed`` 0: 429 "Cannot evict pod as
  it would violate the pod's disruption budget." with the ``DisruptionTarget`` cause
  "The disruption budget NAME needs D healthy pods and has C currently". When it allows,
  ``disruptionsAllowed`` is decremented and the pod is listed in ``disruptedPods`` with
  the time (the disruption controller then keeps it out of ``currentHealthy`` until the
  pod is seen going), compare-and-swap on the budget (retried on a lost race); then the
  pod is deleted.
* Deleting the pod first sets its ``DisruptionTarget`` condition (True,
  ``EvictionByEvictionAPI``, "Eviction API: evicting"), then deletes it as a DELETE
  would (a bound pod is marked and its kubelet finishes it).

Refusals raise :class:`EvictionRefused` (a kube-apiserver Status: code, reason,
message, details); a missing pod raises NotFoundError; nothing is written on a refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from control.clock import Clock, rfc3339
from control.controllers.disruption import PDB, allowed_condition, selects
from control.store.base import Store
from netmodel.errors import ConflictError
from netmodel.objects import Condition, KubeObject, Pod

EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
#: the cause type kube-apiserver puts on a refusal (policy/v1 DisruptionBudgetCause)
CAUSE = "DisruptionTarget"
#: the pod condition an eviction sets before it deletes the pod
TARGET = Condition(
    type="DisruptionTarget",
    status="True",
    reason="EvictionByEvictionAPI",
    message="Eviction API: evicting",
)
MAX_DISRUPTED = 2000
#: how many times a budget update that lost a race is retried
RETRIES = 5
PROPAGATION = ("Orphan", "Foreground", "Background")


class EvictionRefused(Exception):
    """A refusal, as the Status kube-apiserver sends (``retry_after``: the seconds in
    ``details.retryAfterSeconds`` and the ``Retry-After`` header; 0: none)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        retry_after: int = 0,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})
        self.retry_after = retry_after
        if retry_after:
            self.details["retryAfterSeconds"] = retry_after

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            out["details"] = self.details
        return out


class EvictionAPI(Protocol):
    """The apiserver calls an eviction makes (:class:`control.apiserver.server.APIServer`)."""

    @property
    def store(self) -> Store: ...

    def update(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...

    def update_status(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...

    def delete(
        self, kind: str, key: str, *, component: str = ..., force: bool = ...
    ) -> KubeObject: ...


@dataclass(frozen=True)
class Options:
    """An Eviction's deleteOptions, checked."""

    dry_run: bool
    grace_period: int | None
    uid: str | None
    resource_version: str | None


def _bad(message: str) -> EvictionRefused:
    return EvictionRefused(400, "BadRequest", message)


def _invalid(field: str, why: str) -> EvictionRefused:
    return EvictionRefused(
        422,
        "Invalid",
        f"DeleteOptions.meta.k8s.io is invalid: {field}: {why}",
        {
            "group": "meta.k8s.io",
            "kind": "DeleteOptions",
            "causes": [{"reason": "FieldValueNotSupported", "message": why, "field": field}],
        },
    )


def parse_eviction(body: Any, namespace: str, name: str, *, dry_run: bool) -> Options:
    """Check an Eviction body against the request's pod (module docstring); ``dry_run``
    is the URL's ``dryRun=All``."""
    if not isinstance(body, dict):
        raise _bad("the object must be a JSON object")
    kind, api_version = body.get("kind"), body.get("apiVersion")
    if kind and kind != "Eviction":
        raise _bad(f"the object provided is unrecognized (kind {kind} in a pods/eviction request)")
    if api_version and api_version not in EVICTION_VERSIONS:
        raise _bad(
            f"the API version in the data ({api_version}) is not one of policy/v1, policy/v1beta1"
        )
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict) or meta.get("name") != name:
        raise _bad("name in URL does not match name in Eviction object")
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise _bad(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    opts = body.get("deleteOptions") or {}
    if not isinstance(opts, dict):
        raise _bad("deleteOptions must be an object")
    dry = opts.get("dryRun") or []
    if not isinstance(dry, list) or any(d != "All" for d in dry):
        bad = next((d for d in dry if d != "All"), dry) if isinstance(dry, list) else dry
        raise _invalid("dryRun", f'Unsupported value: "{bad}": supported values: "All"')
    policy = opts.get("propagationPolicy")
    if policy is not None and policy not in PROPAGATION:
        raise _invalid(
            "propagationPolicy",
            f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
            '"Orphan", "nil"',
        )
    grace = opts.get("gracePeriodSeconds")
    if grace is not None:
        try:
            grace = int(grace)  # an int64 from protobuf arrives as a string
        except (TypeError, ValueError):
            raise _bad(f"gracePeriodSeconds must be an integer, got {grace!r}") from None
    pre = opts.get("preconditions") or {}
    if not isinstance(pre, dict):
        raise _bad("deleteOptions.preconditions must be an object")
    return Options(
        dry_run=dry_run or bool(dry),
        grace_period=grace,
        uid=pre.get("uid") or None,
        resource_version=pre.get("resourceVersion") or None,
    )


def _can_ignore_budget(pod: Pod) -> bool:
    return pod.status.phase in ("Succeeded", "Failed", "Pending") or pod.is_terminating


def _status(pdb: KubeObject) -> dict[str, Any]:
    status = (pdb.model_extra or {}).get("status")
    return status if isinstance(status, dict) else {}


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _check_preconditions(pod: Pod, opts: Options) -> None:
    name = pod.name
    if opts.uid is not None and opts.uid != pod.metadata.uid:
        raise EvictionRefused(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods "{name}": Precondition failed: UID in '
            f"precondition: {opts.uid}, UID in object meta: {pod.metadata.uid}",
            {"name": name, "kind": "pods"},
        )
    rv = pod.metadata.resource_version
    if opts.resource_version is not None and opts.resource_version != str(rv):
        raise EvictionRefused(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods "{name}": Precondition failed: '
            f"ResourceVersion in precondition: {opts.resource_version}, ResourceVersion in "
            f"object meta: {rv}",
            {"name": name, "kind": "pods"},
        )


def _delete_pod(api: EvictionAPI, pod: Pod, opts: Options, component: str, clock: Clock) -> None:
    """Set the DisruptionTarget condition, then delete (nothing on a dry run)."""
    _check_preconditions(pod, opts)
    if opts.dry_run:
        return
    if pod.condition(TARGET.type) is None:
        cond = TARGET.evolve(last_transition_time=rfc3339(clock.now()))
        marked = pod.evolve(status=pod.status.evolve(conditions=[*pod.status.conditions, cond]))
        pod = api.update_status(marked, component=component)  # type: ignore[assignment]
    api.delete(Pod.KIND, pod.key, component=component, force=opts.grace_period == 0)


def _budgets(store: Store, pod: Pod) -> list[KubeObject]:
    return [b for b in store.list(PDB, pod.namespace) if selects(b, pod)]


def _spend(
    api: EvictionAPI, pdb: KubeObject, pod: Pod, opts: Options, component: str, clock: Clock
) -> None:
    """kube-apiserver's check-and-decrement of one budget (module docstring)."""
    name = pdb.name
    status = _status(pdb)
    if _int(status.get("observedGeneration")) < _int(pdb.metadata.generation):
        raise EvictionRefused(
            429,
            "TooManyRequests",
            VIOLATION,
            {
                "causes": [
                    {
                        "reason": CAUSE,
                        "message": f"The disruption budget {name} is still being processed "
                        "by the server.",
                    }
                ]
            },
            retry_after=10,
        )
    allowed = _int(status.get("disruptionsAllowed"))
    disrupted: Mapping[str, Any] = status.get("disruptedPods") or {}
    forbidden = {"name": name, "group": "policy", "kind": "poddisruptionbudget"}
    if allowed < 0:
        raise EvictionRefused(
            403,
            "Forbidden",
            f'poddisruptionbudget.policy "{name}" is forbidden: pdb disruptions allowed is '
            "negative",
            forbidden,
        )
    if len(disrupted) > MAX_DISRUPTED:
        raise EvictionRefused(
            403,
            "Forbidden",
            f'poddisruptionbudget.policy "{name}" is forbidden: DisruptedPods map too big - '
            "too many evictions not confirmed by PDB controller",
            forbidden,
        )
    if allowed == 0:
        raise EvictionRefused(
            429,
            "TooManyRequests",
            VIOLATION,
            {
                "causes": [
                    {
                        "reason": CAUSE,
                        "message": f"The disruption budget {name} needs "
                        f"{_int(status.get('desiredHealthy'))} healthy pods and has "
                        f"{_int(status.get('currentHealthy'))} currently",
                    }
                ]
            },
        )
    if opts.dry_run:
        return
    now = rfc3339(clock.now())
    new = {**status, "disruptionsAllowed": allowed - 1}
    new["disruptedPods"] = {**disrupted, pod.name: now}
    if allowed - 1 == 0:
        conds = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        before = next((c for c in conds if c.get("type") == "DisruptionAllowed"), None)
        others = [c for c in conds if c.get("type") != "DisruptionAllowed"]
        new["conditions"] = [*others, allowed_condition(0, before, now)]
    data = pdb.to_dict()
    data["status"] = new
    api.update(type(pdb).model_validate(data), component=component)  # CAS on its version


def evict(
    api: EvictionAPI,
    namespace: str,
    name: str,
    body: Any,
    *,
    dry_run: bool,
    component: str,
    clock: Clock,
) -> None:
    """Evict the pod ``namespace/name`` as the Eviction ``body`` asks (module docstring).
    Returns when the pod is deleted (or would be, on a dry run)."""
    opts = parse_eviction(body, namespace, name, dry_run=dry_run)
    store = api.store
    key = f"{namespace}/{name}"
    for _ in range(RETRIES):
        pod = store.get(Pod.KIND, key)  # NotFoundError: 404
        assert isinstance(pod, Pod)
        if _can_ignore_budget(pod):
            _delete_pod(api, pod, opts, component, clock)
            return
        budgets = _budgets(store, pod)
        if len(budgets) > 1:
            raise EvictionRefused(
                500,
                "InternalError",
                "Internal error occurred: This pod has more than one PodDisruptionBudget, "
                "which the eviction subresource does not support.",
                {
                    "causes": [
                        {
                            "message": "This pod has more than one PodDisruptionBudget, "
                            "which the eviction subresource does not support."
                        }
                    ]
                },
            )
        if not budgets:
            _delete_pod(api, pod, opts, component, clock)
            return
        pdb = budgets[0]
        status = _status(pdb)
        spec = (pdb.model_extra or {}).get("spec") or {}
        if not pod.is_ready:
            healthy_budget = (
                _int(status.get("currentHealthy")) >= _int(status.get("desiredHealthy")) > 0
            )
            if spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or healthy_budget:
                # the pod must still be as read (unready): its resourceVersion as precondition
                _delete_pod(
                    api,
                    pod,
                    Options(
                        opts.dry_run,
                        opts.grace_period,
                        opts.uid,
                        opts.resource_version or str(pod.metadata.resource_version),
                    ),
                    component,
                    clock,
                )
                return
        _check_preconditions(pod, opts)
        try:
            _spend(api, pdb, pod, opts, component, clock)
        except ConflictError:
            continue  # the budget changed under us: read it and the pod again
        _delete_pod(api, pod, opts, component, clock)
        return
    raise EvictionRefused(
        429,
        "TooManyRequests",
        f"too many conflicts updating the disruption budget of pod {name}; try again",
        retry_after=1,
    )
