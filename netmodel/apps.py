"""Typed apps/v1 kinds of the StatefulSet controller: ControllerRevision (the revision
history StatefulSets and DaemonSets keep, :mod:`control.controllers.history`) and
StatefulSet.

Like every model of :mod:`netmodel.objects`, they type the fields svclab reads and keep
every other field as it came (``extra='allow'``), so an object round-trips through
``to_dict()``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from netmodel.objects import IntOrPercent, K8sModel, KubeObject, PodTemplateSpec
from netmodel.selectors import LabelSelector


class ControllerRevision(KubeObject):
    """An immutable snapshot of a controller's state (apps/v1 ControllerRevision):
    ``data`` is any JSON (a RawExtension; for StatefulSets and DaemonSets the template
    patch of :func:`control.controllers.history.template_patch`), ``revision`` its
    number in its owner's history."""

    KIND = "ControllerRevision"
    API_VERSION = "apps/v1"
    data: Any = None
    revision: int = 0


class RollingUpdateStatefulSetStrategy(K8sModel):
    """``spec.updateStrategy.rollingUpdate``: pods with an ordinal below ``partition``
    stay at the current revision."""

    partition: int | None = None
    max_unavailable: IntOrPercent | None = None


class StatefulSetUpdateStrategy(K8sModel):
    """``spec.updateStrategy``: ``RollingUpdate`` (the default) or ``OnDelete``."""

    type: str | None = None
    rolling_update: RollingUpdateStatefulSetStrategy | None = None


class StatefulSetOrdinals(K8sModel):
    """``spec.ordinals``: the ordinal the first pod takes."""

    start: int = 0


class StatefulSetSpec(K8sModel):
    replicas: int | None = None
    selector: LabelSelector = Field(default_factory=LabelSelector)
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)
    service_name: str | None = None
    pod_management_policy: str | None = None
    update_strategy: StatefulSetUpdateStrategy | None = None
    revision_history_limit: int | None = None
    min_ready_seconds: int | None = None
    ordinals: StatefulSetOrdinals | None = None


class StatefulSetStatus(K8sModel):
    observed_generation: int | None = None
    replicas: int | None = None
    ready_replicas: int | None = None
    current_replicas: int | None = None
    updated_replicas: int | None = None
    available_replicas: int | None = None
    current_revision: str | None = None
    update_revision: str | None = None
    collision_count: int | None = None


class StatefulSet(KubeObject):
    """apps/v1 StatefulSet: pods ``<name>-<ordinal>`` with stable identities
    (:mod:`control.controllers.statefulset`)."""

    KIND = "StatefulSet"
    API_VERSION = "apps/v1"
    spec: StatefulSetSpec = Field(default_factory=StatefulSetSpec)
    status: StatefulSetStatus = Field(default_factory=StatefulSetStatus)

    @property
    def start_ordinal(self) -> int:
        """``spec.ordinals.start`` (0 when unset)."""
        return self.spec.ordinals.start if self.spec.ordinals is not None else 0
