"""kube-controller-manager's taint eviction controller (``TaintEvictionController``, once
the NoExecuteTaintManager): pods on a node with NoExecute taints they do not tolerate
are deleted.

Contract of :meth:`TaintEvictionController.reconcile` (keys are pod keys ``ns/name``),
for a pod bound to a node, not being deleted, not finished:

* the node has no NoExecute taint: nothing to do; an eviction that was scheduled is
  cancelled (Event ``TaintManagerEviction`` ``Cancelling deletion of Pod NS/NAME``);
* some NoExecute taint is tolerated by none of the pod's tolerations
  (:meth:`netmodel.objects.Toleration.tolerates`): the pod is deleted now;
* every NoExecute taint is tolerated: the tolerations that match one of them, if any
  gives ``tolerationSeconds``, give the smallest; the pod is deleted that many seconds
  (on the injected clock) after the controller first saw it so tainted (0 or less: now),
  and stays while the taints stay tolerated with no ``tolerationSeconds``.

Deleting: Event ``TaintManagerEviction`` ``Marking for deletion Pod NS/NAME``, the pod's
condition ``DisruptionTarget`` True (reason ``DeletionByTaintManager``), then a graceful
delete through the API, as ``kubectl delete`` would (its kubelet, if alive, finishes it;
on a lost node it stays Terminating, as upstream, while its owner replaces it).
Pods are read from the store on reconcile; the controller keeps only which pods are bound
to which node and when each pod's countdown started. Every :meth:`sync` picks up the
countdowns that ran out (:class:`~control.controllers.timed.TimedController`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from control.clock import Clock, rfc3339
from control.controllers.base import APIClient
from control.controllers.podsbynode import PodsByNode
from control.controllers.timed import TimedController
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError
from netmodel.objects import Condition, KubeObject, Node, Pod, Taint, Toleration

REASON = "TaintManagerEviction"
#: a finished pod's phases (nothing left to evict)
TERMINAL = ("Succeeded", "Failed")


def no_execute(node: Node) -> list[Taint]:
    """The node's NoExecute taints."""
    return [t for t in node.spec.taints if t.effect == "NoExecute"]


def toleration_time(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> float | None:
    """How long a pod with ``tolerations`` may stay on a node with ``taints`` (all
    NoExecute): 0 when one is not tolerated, None when forever, else the smallest
    ``tolerationSeconds`` among the tolerations that match one of them."""
    used: list[Toleration] = []
    for taint in taints:
        matching = [t for t in tolerations if t.tolerates(taint)]
        if not matching:
            return 0.0
        used += matching
    seconds = [t.toleration_seconds for t in used if t.toleration_seconds is not None]
    return float(min(seconds)) if seconds else None


class TaintEvictionController(TimedController):
    """Deletes pods from nodes with NoExecute taints they do not tolerate; see the
    module docstring."""

    name = "taint-eviction-controller"
    kinds = frozenset({"Node", "Pod"})

    def __init__(self, api: APIClient, recorder: Recorder, clock: Clock) -> None:
        super().__init__(api, recorder, clock)
        self._pods = PodsByNode()
        self._taints: dict[str, list[Taint]] = {}  # node name -> NoExecute taints, as watched
        self._since: dict[str, float] = {}  # pod key -> when its countdown started

    # ---- informer side

    def handle(self, events: Sequence[WatchEvent]) -> None:
        for ev in events:
            for key in self.keys_for(ev, None):
                self.queue.add(key)

    def resync(self, objects: Iterable[KubeObject]) -> None:
        self.queue.clear()
        for state in (self._pods, self._taints, self._since, self._timers):
            state.clear()
        objs = sorted(objects, key=lambda o: not isinstance(o, Node))  # nodes first
        self.handle([WatchEvent("ADDED", o, o.resource_version) for o in objs])

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterator[str]:
        obj = event.object
        if isinstance(obj, Node):
            name = obj.name
            before = self._taints.get(name, [])
            now = [] if event.type == "DELETED" else no_execute(obj)
            if now:
                self._taints[name] = now
            else:
                self._taints.pop(name, None)
            if now != before:
                yield from sorted(self._pods.on(name))
            return
        if not isinstance(obj, Pod):
            return
        key = obj.key
        if event.type == "DELETED":
            self._pods.unbind(key)
            self._since.pop(key, None)
            self._timers.pop(key, None)
            return
        node = obj.spec.node_name
        if not node:
            return
        self._pods.bind(key, node)
        if node in self._taints or key in self._since:
            yield key

    # ---- reconcile

    def reconcile(self, key: str) -> None:
        try:
            pod = self.store.get(Pod.KIND, key)
        except NotFoundError:
            pod = None
        if (
            not isinstance(pod, Pod)
            or not pod.spec.node_name
            or pod.is_terminating
            or pod.status.phase in TERMINAL
        ):
            self._since.pop(key, None)
            self._timers.pop(key, None)
            return
        try:
            node = self.store.get(Node.KIND, pod.spec.node_name)
        except NotFoundError:
            node = None
        taints = no_execute(node) if isinstance(node, Node) else []
        if not taints:
            if self._since.pop(key, None) is not None:
                self._timers.pop(key, None)
                self.recorder.record(self.name, pod, REASON, f"Cancelling deletion of Pod {key}")
            return
        seconds = toleration_time(taints, pod.spec.tolerations)
        if seconds is None:  # tolerated for ever
            if self._since.pop(key, None) is not None:
                self._timers.pop(key, None)
                self.recorder.record(self.name, pod, REASON, f"Cancelling deletion of Pod {key}")
            return
        now = self.clock.now()
        start = self._since.setdefault(key, now)
        if now < start + seconds:
            self._timers[key] = start + seconds
            return
        self._evict(pod, now)

    def _evict(self, pod: Pod, now: float) -> None:
        self.recorder.record(self.name, pod, REASON, f"Marking for deletion Pod {pod.key}")
        target = Condition.model_validate(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
                "lastTransitionTime": rfc3339(now),
            }
        )
        conds = [c for c in pod.status.conditions if c.type != "DisruptionTarget"]
        self.api.update_status(
            pod.evolve(status=pod.status.evolve(conditions=[*conds, target])),
            component=self.name,
        )
        self.api.delete(Pod.KIND, pod.key, component=self.name)
        self._since.pop(pod.key, None)
        self._timers.pop(pod.key, None)

    def subject(self, key: str) -> KubeObject | None:
        try:
            return self.store.get(Pod.KIND, key)
        except NotFoundError:
            return None
