"""The ReplicationController controller: keeps ``spec.replicas`` pods matching an
equality selector, as kube-controller-manager's replication manager does (it is the
ReplicaSet controller run over ReplicationControllers).

Everything but selection is :class:`~control.controllers.replicaset.ReplicaController`'s:
pod names ``<rc>-<5 chars>``, adoption of matching orphans, scale-down ranking, burst
limit, status (replicas, fullyLabeledReplicas, readyReplicas, availableReplicas with
``minReadySeconds``, observedGeneration) and the ``ReplicaFailure`` condition. A pod
matches when it carries every pair of ``spec.selector``.
"""

from __future__ import annotations

from collections.abc import Mapping

from control.controllers.replicaset import ReplicaController
from netmodel.objects import KubeObject, PodTemplateSpec
from netmodel.replication import ReplicationController


class ReplicationControllerController(ReplicaController):
    """Creates and deletes pods for ReplicationControllers; see the module docstring."""

    name = "replication-controller"
    owner_kind = "ReplicationController"
    kinds = frozenset({"ReplicationController", "Pod"})

    def selects(self, owner: KubeObject, labels: Mapping[str, str]) -> bool:
        assert isinstance(owner, ReplicationController)
        return owner.selects(labels)

    def template(self, owner: KubeObject) -> PodTemplateSpec | None:
        assert isinstance(owner, ReplicationController)
        return owner.spec.template
