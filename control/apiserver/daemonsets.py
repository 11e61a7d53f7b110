"""The DaemonSet's apiserver rules (kube-apiserver's ``pkg/registry/apps/daemonset``
strategy and ``pkg/apis/apps/validation``), registered in
:data:`control.apiserver.strategy.STRATEGIES`.

Defaults (apps/v1 ``SetDefaults_DaemonSet``): ``updateStrategy.type`` RollingUpdate; a
RollingUpdate strategy gets ``rollingUpdate.maxUnavailable`` 1 and ``maxSurge`` 0, each
on its own; ``revisionHistoryLimit`` 10; the pod template's defaults. The template
generation (``deprecated.daemonset.template.generation``) is 1 on create and goes up by
one with each update that changes the template.

Validation: a non-empty selector that matches the template's labels, the template's
pod spec with ``restartPolicy`` Always and no ``activeDeadlineSeconds``, non-negative
``minReadySeconds`` / ``revisionHistoryLimit``, an update strategy of RollingUpdate
(with ``rollingUpdate``: each limit a non-negative int or percentage of at most 100%,
exactly one of them non-zero) or OnDelete. The selector is immutable.
"""

from __future__ import annotations

from typing import Any

from control.apiserver.defaults import default_pod_spec
from control.apiserver.strategybase import GenericStrategy
from control.apiserver.validation import (
    PERCENT,
    PERCENT_MESSAGE,
    Problems,
    _label_selector,
    selector_text,
    validate_pod_spec,
)
from netmodel.cluster import ClusterSpec
from netmodel.daemonset import (
    ON_DELETE,
    ROLLING_UPDATE,
    TEMPLATE_GENERATION_ANNOTATION,
    DaemonSet,
    DaemonSetUpdateStrategy,
    RollingUpdateDaemonSet,
)
from netmodel.objects import IntOrPercent, KubeObject, PodTemplateSpec

DEFAULT_REVISION_HISTORY_LIMIT = 10
UPDATE_STRATEGY_TYPES = (ROLLING_UPDATE, ON_DELETE)


def _default_template(t: PodTemplateSpec) -> PodTemplateSpec:
    spec = default_pod_spec(t.spec)
    return t if spec is t.spec else t.evolve(spec=spec)


def _default_strategy(s: DaemonSetUpdateStrategy | None) -> DaemonSetUpdateStrategy:
    s = s or DaemonSetUpdateStrategy()
    ch: dict[str, Any] = {}
    type_ = s.type or ROLLING_UPDATE
    if s.type != type_:
        ch["type"] = type_
    if type_ == ROLLING_UPDATE:
        ru = s.rolling_update or RollingUpdateDaemonSet()
        ru_ch: dict[str, Any] = {}
        if ru.max_unavailable is None:
            ru_ch["max_unavailable"] = 1
        if ru.max_surge is None:
            ru_ch["max_surge"] = 0
        if ru_ch or s.rolling_update is None:
            ch["rolling_update"] = ru.evolve(**ru_ch)
    return s.evolve(**ch) if ch else s


def default(ds: DaemonSet) -> DaemonSet:
    """The DaemonSet with apps/v1's defaults (idempotent; see the module docstring)."""
    spec = ds.spec
    ch: dict[str, Any] = {}
    template = _default_template(spec.template)
    if template is not spec.template:
        ch["template"] = template
    strategy = _default_strategy(spec.update_strategy)
    if strategy is not spec.update_strategy:
        ch["update_strategy"] = strategy
    if spec.revision_history_limit is None:
        ch["revision_history_limit"] = DEFAULT_REVISION_HISTORY_LIMIT
    out = ds.evolve(spec=spec.evolve(**ch)) if ch else ds
    if TEMPLATE_GENERATION_ANNOTATION not in out.metadata.annotations:
        annotations = {**out.metadata.annotations, TEMPLATE_GENERATION_ANNOTATION: "1"}
        out = out.with_meta(annotations=annotations)
    return out


def keep_template_generation(ds: DaemonSet, current: DaemonSet) -> DaemonSet:
    """An update's DaemonSet with the template generation kube-apiserver's
    ``PrepareForUpdate`` gives it: the stored one, plus one if the template changed."""
    before = current.template_generation or 1
    changed = _default_template(ds.spec.template) != current.spec.template
    want = str(before + 1 if changed else before)
    if ds.metadata.annotations.get(TEMPLATE_GENERATION_ANNOTATION) == want:
        return ds
    return ds.with_meta(
        annotations={**ds.metadata.annotations, TEMPLATE_GENERATION_ANNOTATION: want}
    )


def _int_or_percent(f: str, value: IntOrPercent | None, p: Problems) -> int:
    """ValidatePositiveIntOrPercent and IsNotMoreThan100Percent; the number (0 unset)."""
    if value is None:
        return 0
    if isinstance(value, str):
        if not PERCENT.fullmatch(value):
            p.invalid(f, value, PERCENT_MESSAGE)
        n = int(value[:-1])
        if n > 100:
            p.invalid(f, value, "must not be greater than 100%")
        return n
    if value < 0:
        p.invalid(f, value, "must be greater than or equal to 0")
    return value


def validate(ds: DaemonSet, p: Problems) -> None:
    """Raise the first problem of a defaulted DaemonSet (see the module docstring)."""
    spec = ds.spec
    if spec.selector.is_empty:
        p.invalid("spec.selector", {}, "empty selector is invalid for daemonset")
    _label_selector(spec.selector, "spec.selector", p)
    labels = spec.template.metadata.labels
    p.labels("spec.template.metadata.labels", labels)
    if not spec.selector.matches(labels):
        p.invalid(
            "spec.template.metadata.labels", labels, "`selector` does not match template `labels`"
        )
    validate_pod_spec(spec.template.spec, "spec.template.spec", p)
    extra = spec.template.spec.model_extra or {}
    restart = extra.get("restartPolicy", "Always")
    if restart != "Always":
        p.unsupported("spec.template.spec.restartPolicy", restart, ["Always"])
    if extra.get("activeDeadlineSeconds") is not None:
        p.forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            "activeDeadlineSeconds in DaemonSet is not Supported",
        )
    for f, value in (
        ("spec.minReadySeconds", spec.min_ready_seconds),
        ("spec.revisionHistoryLimit", spec.revision_history_limit),
    ):
        if value is not None and value < 0:
            p.invalid(f, value, "must be greater than or equal to 0")
    s = spec.update_strategy
    if s is None:
        return
    if s.type not in UPDATE_STRATEGY_TYPES:
        p.unsupported("spec.updateStrategy", s.type, UPDATE_STRATEGY_TYPES)
    if s.type == ON_DELETE:
        return
    f = "spec.updateStrategy.rollingUpdate"
    ru = s.rolling_update
    if ru is None:
        p.required(f)
    unavailable = _int_or_percent(f"{f}.maxUnavailable", ru.max_unavailable, p)
    surge = _int_or_percent(f"{f}.maxSurge", ru.max_surge, p)
    if unavailable and surge:
        p.invalid(f"{f}.maxSurge", ru.max_surge, "may not be set when maxUnavailable is non-zero")
    if not unavailable and not surge:
        p.required(f"{f}.maxUnavailable", "cannot be 0 when maxSurge is 0")


def validate_update(ds: DaemonSet, old: DaemonSet, p: Problems) -> None:
    """The selector is immutable."""
    if ds.spec.selector != old.spec.selector:
        p.invalid("spec.selector", selector_text(ds.spec.selector), "field is immutable")


class DaemonSetStrategy(GenericStrategy):
    """The :class:`control.apiserver.strategy.Strategy` of DaemonSets."""

    counts_generation = True

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, DaemonSet)
        return default(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, DaemonSet)
        validate(obj, p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        if isinstance(obj, DaemonSet) and isinstance(old, DaemonSet):
            validate_update(obj, old, p)

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        if isinstance(obj, DaemonSet) and isinstance(current, DaemonSet):
            return keep_template_generation(obj, current)
        return obj
