"""The part of kube-controller-manager's node lifecycle controller that follows a cordon:
a Node whose ``spec.unschedulable`` is true carries the taint
``node.kubernetes.io/unschedulable:NoSchedule``, and one that is schedulable again loses
it (``kubectl cordon`` / ``uncordon`` / ``drain`` set only the field; the taint is how
the scheduler and the DaemonSet controller's tolerations see it).

Contract of :meth:`NodeLifecycleController.reconcile` (keys are Node names): the taint
is present exactly when ``spec.unschedulable`` is true, other taints untouched and in
their order (the new taint goes last); no write when it already is so. The other
passes of the upstream controller (not-ready / unreachable taints from node
heartbeats, NoExecute evictions) are not modelled: svclab's kubelets do not miss
heartbeats.
"""

from __future__ import annotations

from collections.abc import Iterator

from control.controllers.base import Controller
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError
from netmodel.objects import KubeObject, Node, Taint

UNSCHEDULABLE = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")


def wanted_taints(node: Node) -> list[Taint]:
    """``node``'s taints as the controller leaves them."""
    others = [t for t in node.spec.taints if (t.key, t.effect) != (UNSCHEDULABLE.key, "NoSchedule")]
    return [*others, UNSCHEDULABLE] if node.spec.unschedulable else others


class NodeLifecycleController(Controller):
    """Keeps the unschedulable taint in step with ``spec.unschedulable``."""

    name = "node-lifecycle-controller"
    kinds = frozenset({"Node"})

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterator[str]:
        if event.type != "DELETED":
            yield event.object.name

    def reconcile(self, key: str) -> None:
        try:
            node = self.store.get(Node.KIND, key)
        except NotFoundError:
            return
        assert isinstance(node, Node)
        want = wanted_taints(node)
        if want == node.spec.taints:
            return
        self.api.update(node.evolve(spec=node.spec.evolve(taints=want)), component=self.name)

    def subject(self, key: str) -> KubeObject | None:
        try:
            return self.store.get(Node.KIND, key)
        except NotFoundError:
            return None
