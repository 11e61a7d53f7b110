"""core/v1 ReplicationController as a typed value.

A ReplicationController is a ReplicaSet with an equality-based selector: ``spec.selector``
is a plain label map (a pod matches when it carries every pair), and its
``spec.template`` is optional on the wire (validation requires it). Its status has the
ReplicaSet's fields (:class:`~netmodel.objects.ReplicaSetStatus`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from netmodel.objects import K8sModel, KubeObject, PodTemplateSpec, ReplicaSetStatus


class ReplicationControllerSpec(K8sModel):
    replicas: int | None = None
    min_ready_seconds: int | None = None
    selector: dict[str, str] = Field(default_factory=dict)
    template: PodTemplateSpec | None = None


class ReplicationController(KubeObject):
    KIND = "ReplicationController"
    API_VERSION = "v1"
    spec: ReplicationControllerSpec = Field(default_factory=ReplicationControllerSpec)
    status: ReplicaSetStatus = Field(default_factory=ReplicaSetStatus)

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod with ``labels`` matches: every selector pair present; an empty
        selector matches nothing (validation refuses one after defaulting)."""
        sel = self.spec.selector
        return bool(sel) and all(labels.get(k) == v for k, v in sel.items())
