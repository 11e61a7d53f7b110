"""The StatefulSet strategy (apps/v1): kube-apiserver's defaulting and validation.

Defaults (SetDefaults_StatefulSet): ``replicas`` 1, ``podManagementPolicy``
OrderedReady, ``updateStrategy`` RollingUpdate with ``rollingUpdate.partition`` 0,
``revisionHistoryLimit`` 10, ``persistentVolumeClaimRetentionPolicy`` Retain/Retain
(the controller keeps it on the claims, :mod:`control.controllers.statefulset`), the pod
template's defaults. ``rollingUpdate.maxUnavailable`` is not defaulted (the controller
reads unset as 1), as upstream.

Validation (ValidateStatefulSetSpec), in its field paths and words:

* ``podManagementPolicy`` OrderedReady or Parallel; ``updateStrategy.type``
  RollingUpdate or OnDelete, ``rollingUpdate`` only with RollingUpdate, ``partition``
  at least 0, ``maxUnavailable`` an integer at least 1 or a percentage from 1% to
  100% (MaxUnavailableStatefulSet, on by default since 1.35); ``replicas``,
  ``minReadySeconds``, ``revisionHistoryLimit``, ``ordinals.start`` at least 0;
* ``persistentVolumeClaimRetentionPolicy.whenDeleted`` and ``.whenScaled`` Retain or
  Delete;
* a selector that is not empty and matches the template's labels; the template's
  ``restartPolicy`` Always; the pod template as a pod's;
* on update, only ``replicas``, ``ordinals``, ``template``, ``updateStrategy``,
  ``revisionHistoryLimit``, ``persistentVolumeClaimRetentionPolicy`` and
  ``minReadySeconds`` may change.

``serviceName`` (the governing Service the pods' DNS names go through) is required by
the apps/v1 schema the strict decoder checks (:mod:`netmodel.schema`), not here.
"""

from __future__ import annotations

from typing import Any

from control.apiserver.defaults import DEFAULT_REVISION_HISTORY_LIMIT, default_pod_spec
from control.apiserver.kinds_common import validate_int_or_percent
from control.apiserver.strategybase import GenericStrategy
from control.apiserver.validation import Problems, _label_selector, validate_pod_spec
from netmodel.apps import (
    RollingUpdateStatefulSetStrategy,
    StatefulSet,
    StatefulSetUpdateStrategy,
)
from netmodel.cluster import ClusterSpec
from netmodel.objects import KubeObject

ORDERED_READY = "OrderedReady"
PARALLEL = "Parallel"
ROLLING_UPDATE = "RollingUpdate"
ON_DELETE = "OnDelete"
RETAIN = "Retain"
DELETE = "Delete"
#: spec fields (wire names) an update may change; the rest are immutable
MUTABLE = (
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
)
_MUTABLE_MSG = (
    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
    "'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and "
    "'minReadySeconds' are forbidden"
)
_RETAIN = {"whenDeleted": RETAIN, "whenScaled": RETAIN}


def retention_policy(sts: StatefulSet) -> dict[str, str]:
    """``spec.persistentVolumeClaimRetentionPolicy`` with its defaults
    (``whenDeleted`` and ``whenScaled``, each Retain or Delete)."""
    policy = (sts.spec.model_extra or {}).get("persistentVolumeClaimRetentionPolicy")
    return {**_RETAIN, **(policy if isinstance(policy, dict) else {})}


def claim_templates(sts: StatefulSet) -> list[dict[str, Any]]:
    """``spec.volumeClaimTemplates`` (wire form; each a PersistentVolumeClaim without
    kind)."""
    templates = (sts.spec.model_extra or {}).get("volumeClaimTemplates")
    return [t for t in templates if isinstance(t, dict)] if isinstance(templates, list) else []


def default_statefulset(sts: StatefulSet) -> StatefulSet:
    """``sts`` with kube-apiserver's defaults (see the module docstring); idempotent."""
    spec = sts.spec
    ch: dict[str, Any] = {}
    if spec.replicas is None:
        ch["replicas"] = 1
    if not spec.pod_management_policy:
        ch["pod_management_policy"] = ORDERED_READY
    us = spec.update_strategy or StatefulSetUpdateStrategy()
    if not us.type:
        us = us.evolve(type=ROLLING_UPDATE)
    if us.type == ROLLING_UPDATE:
        ru = us.rolling_update or RollingUpdateStatefulSetStrategy()
        if ru.partition is None:
            ru = ru.evolve(partition=0)
        if ru is not us.rolling_update:
            us = us.evolve(rolling_update=ru)
    if us is not spec.update_strategy:
        ch["update_strategy"] = us
    if spec.revision_history_limit is None:
        ch["revision_history_limit"] = DEFAULT_REVISION_HISTORY_LIMIT
    extra = spec.model_extra or {}
    policy = extra.get("persistentVolumeClaimRetentionPolicy")
    full = {**_RETAIN, **(policy if isinstance(policy, dict) else {})}
    if policy != full:
        ch["persistentVolumeClaimRetentionPolicy"] = full
    tspec = default_pod_spec(spec.template.spec)
    if tspec is not spec.template.spec:
        ch["template"] = spec.template.evolve(spec=tspec)
    return sts.evolve(spec=spec.evolve(**ch)) if ch else sts


def validate_statefulset(sts: StatefulSet, p: Problems) -> None:
    """Raise through ``p`` the first problem of a defaulted StatefulSet."""
    spec = sts.spec
    if spec.pod_management_policy not in (ORDERED_READY, PARALLEL):
        p.invalid(
            "spec.podManagementPolicy",
            spec.pod_management_policy or "",
            f"must be '{ORDERED_READY}' or '{PARALLEL}'",
        )
    us = spec.update_strategy
    if us is None or not us.type:
        p.required("spec.updateStrategy")
    if us.type == ROLLING_UPDATE:
        ru = us.rolling_update
        if ru is not None and ru.partition is not None and ru.partition < 0:
            p.invalid(
                "spec.updateStrategy.rollingUpdate.partition",
                ru.partition,
                "must be greater than or equal to 0",
            )
        mu = ru.max_unavailable if ru is not None else None
        if mu is not None:
            f = "spec.updateStrategy.rollingUpdate.maxUnavailable"
            validate_int_or_percent(f, mu, p)
            if (int(mu[:-1]) if isinstance(mu, str) else mu) == 0:
                p.invalid(f, mu, "cannot be 0")
    elif us.type == ON_DELETE:
        if us.rolling_update is not None:
            p.invalid(
                "spec.updateStrategy.rollingUpdate",
                us.rolling_update.to_dict(),
                f"only allowed for updateStrategy '{ROLLING_UPDATE}'",
            )
    else:
        p.invalid(
            "spec.updateStrategy",
            us.to_dict(),
            f"must be '{ROLLING_UPDATE}' or '{ON_DELETE}'",
        )
    for f, value in (
        ("spec.replicas", spec.replicas),
        ("spec.minReadySeconds", spec.min_ready_seconds),
        ("spec.revisionHistoryLimit", spec.revision_history_limit),
        ("spec.ordinals.start", spec.ordinals.start if spec.ordinals else None),
    ):
        if value is not None and value < 0:
            p.invalid(f, value, "must be greater than or equal to 0")
    policy = retention_policy(sts)
    for key in ("whenDeleted", "whenScaled"):
        p.enum(
            f"spec.persistentVolumeClaimRetentionPolicy.{key}", policy[key], (DELETE, RETAIN)
        )
    if spec.selector.is_empty:
        p.invalid("spec.selector", {}, "empty selector is invalid for statefulset")
    _label_selector(spec.selector, "spec.selector", p)
    labels = spec.template.metadata.labels
    p.labels("spec.template.metadata.labels", labels)
    if not spec.selector.matches(labels):
        p.invalid(
            "spec.template.metadata.labels", labels, "`selector` does not match template `labels`"
        )
    restart = (spec.template.spec.model_extra or {}).get("restartPolicy")
    if restart is not None and restart != "Always":
        p.unsupported("spec.template.spec.restartPolicy", restart, ["Always"])
    validate_pod_spec(spec.template.spec, "spec.template.spec", p)


def validate_statefulset_update(new: StatefulSet, old: StatefulSet, p: Problems) -> None:
    """Raise through ``p`` if the update changes a spec field other than :data:`MUTABLE`."""
    a, b = new.spec.to_dict(), old.spec.to_dict()
    for f in MUTABLE:
        a.pop(f, None)
        b.pop(f, None)
    if a != b:
        p.forbidden("spec", _MUTABLE_MSG)


class StatefulSetStrategy(GenericStrategy):
    """The :class:`~control.apiserver.strategy.Strategy` of StatefulSets."""

    counts_generation = True

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, StatefulSet)
        return default_statefulset(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, StatefulSet)
        validate_statefulset(obj, p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        if isinstance(obj, StatefulSet) and isinstance(old, StatefulSet):
            validate_statefulset_update(obj, old, p)

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        return obj
