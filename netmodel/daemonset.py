"""apps/v1 DaemonSet as a typed, frozen value (see :mod:`netmodel.objects` for the
conventions: snake_case fields, camelCase on the wire, unmodelled fields kept).

The fields are those of the Kubernetes API reference (DaemonSetSpec, DaemonSetStatus,
DaemonSetUpdateStrategy, RollingUpdateDaemonSet). Defaults are the apiserver's job
(:mod:`control.apiserver.daemonsets`), the pods the controller's
(:mod:`control.controllers.daemonset`).
"""

from __future__ import annotations

from pydantic import Field

from netmodel.objects import (
    Condition,
    IntOrPercent,
    K8sModel,
    KubeObject,
    PodTemplateSpec,
    scaled_value,
)
from netmodel.selectors import LabelSelector

#: ``spec.updateStrategy.type`` values
ROLLING_UPDATE = "RollingUpdate"
ON_DELETE = "OnDelete"
#: the annotation kube-apiserver keeps the template generation in (apps/v1 carries the
#: internal ``spec.templateGeneration`` there); the pods get it as a label
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
TEMPLATE_GENERATION_LABEL = "pod-template-generation"


class RollingUpdateDaemonSet(K8sModel):
    """``spec.updateStrategy.rollingUpdate``: how many nodes may be without an available
    pod (``maxUnavailable``) or run two pods (``maxSurge``) during an update."""

    max_unavailable: IntOrPercent | None = None
    max_surge: IntOrPercent | None = None

    def limits(self, desired: int) -> tuple[int, int]:
        """``(maxSurge, maxUnavailable)`` as node counts for ``desired`` scheduled nodes
        (the DaemonSet controller's ``updatedDesiredNodeCounts``): percentages of
        ``desired`` round up, both; when both come to 0, maxUnavailable is 1 so the
        update can move. ValueError for a malformed percentage."""
        surge = scaled_value(self.max_surge or 0, desired, round_up=True)
        unavailable = scaled_value(self.max_unavailable or 0, desired, round_up=True)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        return surge, unavailable


class DaemonSetUpdateStrategy(K8sModel):
    type: str | None = None
    rolling_update: RollingUpdateDaemonSet | None = None


class DaemonSetSpec(K8sModel):
    selector: LabelSelector = Field(default_factory=LabelSelector)
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)
    update_strategy: DaemonSetUpdateStrategy | None = None
    min_ready_seconds: int | None = None
    revision_history_limit: int | None = None


class DaemonSetStatus(K8sModel):
    current_number_scheduled: int = 0
    number_misscheduled: int = 0
    desired_number_scheduled: int = 0
    number_ready: int = 0
    observed_generation: int | None = None
    updated_number_scheduled: int | None = None
    number_available: int | None = None
    number_unavailable: int | None = None
    collision_count: int | None = None
    conditions: list[Condition] = Field(default_factory=list)


class DaemonSet(KubeObject):
    KIND = "DaemonSet"
    API_VERSION = "apps/v1"
    spec: DaemonSetSpec = Field(default_factory=DaemonSetSpec)
    status: DaemonSetStatus = Field(default_factory=DaemonSetStatus)

    @property
    def is_rolling_update(self) -> bool:
        s = self.spec.update_strategy
        return s is None or (s.type or ROLLING_UPDATE) == ROLLING_UPDATE

    @property
    def template_generation(self) -> int | None:
        """The template generation the apiserver keeps (None if unset or not a number)."""
        raw = self.metadata.annotations.get(TEMPLATE_GENERATION_ANNOTATION)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None
