"""kube-controller-manager's node lifecycle controller: node health from heartbeats, the
taints that follow a node's conditions, and pods marked not ready on a lost node.

Contract of :meth:`NodeLifecycleController.reconcile` (keys are Node names):

* **Health.** A node's *probe time* is the controller's clock time when it last saw its
  heartbeat change: the Lease ``kube-node-lease/<node>`` with a new ``renewTime``, or
  the Ready condition with a new ``lastHeartbeatTime`` (as upstream, the times are not
  trusted, only their change; every node starts with a full grace period when the
  controller starts). The controller checks every ``monitor_period`` seconds (ticks
  from its start); at the first check where more than ``grace_period`` seconds have
  passed since the probe time, the Ready condition (and MemoryPressure, DiskPressure,
  PIDPressure, where present) turns ``Unknown``, reason ``NodeStatusUnknown``, message
  ``Kubelet stopped posting node status.`` (lastHeartbeatTime kept, lastTransitionTime
  now), with an Event ``NodeNotReady``. The kubelet that comes back posts Ready True
  (:mod:`control.agents.kubelet`).
* **Taints** (kept in step with the Ready condition on every reconcile, other taints
  untouched and in their order, new ones last): Ready ``False`` →
  ``node.kubernetes.io/not-ready`` NoSchedule and NoExecute; ``Unknown`` (or no Ready
  condition) → ``node.kubernetes.io/unreachable`` NoSchedule and NoExecute; ``True`` →
  neither. A NoExecute taint carries ``timeAdded``. ``spec.unschedulable`` true ⇔
  ``node.kubernetes.io/unschedulable:NoSchedule`` (the cordon pass).
* **MarkPodsNotReady.** While a node's Ready condition is not True, every pod bound to
  it whose Ready condition is True gets it ``False`` (lastTransitionTime now), with an
  Event ``NodeNotReady`` on the pod: its endpoints turn not ready and leave the rules.
  Pods are read from the store when a node is reconciled; the controller keeps only
  which pod keys are bound to which node.

No write when all is already so. Left out: upstream's zone states (a zone with every
node lost stops being tainted) and the rate limit on NoExecute tainting
(``--node-eviction-rate``), the startup grace period for nodes that never posted
status, and NodeStatusNeverUpdated. The evictions that follow the NoExecute taints are
:mod:`control.controllers.tainteviction`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from control.agents import nodelease
from control.clock import Clock, rfc3339
from control.controllers.base import APIClient
from control.controllers.podsbynode import PodsByNode
from control.controllers.timed import TimedController
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError
from netmodel.objects import Condition, KubeObject, Node, Pod, Taint

UNSCHEDULABLE = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
#: kube-controller-manager's --node-monitor-grace-period default (50 s since 1.32)
GRACE_PERIOD = 50.0
#: kube-controller-manager's --node-monitor-period default
MONITOR_PERIOD = 5.0
#: the node conditions a kubelet posts, turned Unknown when it stops
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."

_HEALTH_TAINTS = {(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")}
_HEALTH_TAINTS |= {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}


def ready_status(node: Node) -> str:
    """The status of the node's Ready condition (``Unknown`` when it has none)."""
    return next((c.status for c in node.status.conditions if c.type == "Ready"), "Unknown")


def _heartbeat(node: Node) -> str | None:
    """The Ready condition's lastHeartbeatTime (None: none)."""
    for c in node.status.conditions:
        if c.type == "Ready":
            beat = (c.model_extra or {}).get("lastHeartbeatTime")
            return str(beat) if beat is not None else None
    return None


def wanted_taints(node: Node, now: float | None = None) -> list[Taint]:
    """``node``'s taints as the controller leaves them (``now``: the ``timeAdded`` of a
    NoExecute taint it adds; None: the node's Ready condition is not looked at, only
    the cordon)."""
    keep = [t for t in node.spec.taints if (t.key, t.effect) != (UNSCHEDULABLE.key, "NoSchedule")]
    if now is not None:
        status = ready_status(node)
        key = {"True": None, "False": NOT_READY}.get(status, UNREACHABLE)
        wanted = {(key, "NoSchedule"), (key, "NoExecute")} if key else set()
        keep = [t for t in keep if (t.key, t.effect) not in _HEALTH_TAINTS - wanted]
        have = {(t.key, t.effect) for t in keep}
        for effect in ("NoSchedule", "NoExecute"):
            if key is not None and (key, effect) not in have:
                extra = {"timeAdded": rfc3339(now)} if effect == "NoExecute" else {}
                keep.append(Taint.model_validate({"key": key, "effect": effect, **extra}))
    return [*keep, UNSCHEDULABLE] if node.spec.unschedulable else keep


@dataclass
class _Health:
    """What the controller saw of a node's heartbeat: when it last changed (its clock),
    the Lease renewTime and the Ready lastHeartbeatTime it then had."""

    probe: float
    renew: str | None = None
    beat: str | None = None


class NodeLifecycleController(TimedController):
    """Node health, condition taints, the cordon taint, pods marked not ready; see the
    module docstring."""

    name = "node-lifecycle-controller"
    kinds = frozenset({"Node", "Lease", "Pod"})

    def __init__(
        self,
        api: APIClient,
        recorder: Recorder,
        clock: Clock,
        *,
        grace_period: float = GRACE_PERIOD,
        monitor_period: float = MONITOR_PERIOD,
    ) -> None:
        super().__init__(api, recorder, clock)
        self.grace_period = grace_period
        self.monitor_period = monitor_period
        self._origin = clock.now()  # the monitor's ticks count from here
        self._health: dict[str, _Health] = {}
        self._pods = PodsByNode()
        self._ready: dict[str, bool] = {}  # node name -> Ready condition True, as watched

    # ---- informer side (no object cache: the store is read on reconcile)

    def handle(self, events: Sequence[WatchEvent]) -> None:
        for ev in events:
            for key in self.keys_for(ev, None):
                self.queue.add(key)

    def resync(self, objects: Iterable[KubeObject]) -> None:
        self.queue.clear()
        for state in (self._health, self._pods, self._ready, self._timers):
            state.clear()
        objs = sorted(objects, key=lambda o: not isinstance(o, Node))  # nodes first
        self.handle([WatchEvent("ADDED", o, o.resource_version) for o in objs])

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterator[str]:
        obj = event.object
        if isinstance(obj, Node):
            yield from self._on_node(event.type, obj)
        elif isinstance(obj, Pod):
            yield from self._on_pod(event.type, obj)
        elif obj.kind == "Lease" and obj.namespace == nodelease.NAMESPACE:
            self._on_lease(event.type, obj)

    def _on_node(self, type_: str, node: Node) -> Iterator[str]:
        name = node.name
        if type_ == "DELETED":
            self._health.pop(name, None)
            self._ready.pop(name, None)
            self._timers.pop(name, None)
            return
        now = self.clock.now()
        h = self._health.get(name)
        beat = _heartbeat(node)
        if h is None:
            h = self._health[name] = _Health(now, beat=beat)
            self._wake_at(name, self._check_after(now))
        elif beat != h.beat:
            h.probe, h.beat = now, beat
        self._ready[name] = ready_status(node) == "True"
        yield name

    def _on_pod(self, type_: str, pod: Pod) -> Iterator[str]:
        key = pod.key
        if type_ == "DELETED":
            self._pods.unbind(key)
            return
        node = pod.spec.node_name
        if not node:
            return
        self._pods.bind(key, node)
        if not self._ready.get(node, True) and pod.is_ready:
            yield node  # a ready pod on a node that is not: mark it

    def _on_lease(self, type_: str, lease: KubeObject) -> None:
        h = self._health.get(lease.name)
        if h is None or type_ == "DELETED":
            return
        spec = (lease.model_extra or {}).get("spec")
        renew = spec.get("renewTime") if isinstance(spec, dict) else None
        if renew is not None and renew != h.renew:
            h.probe, h.renew = self.clock.now(), str(renew)

    def _check_after(self, probe: float) -> float:
        """The first monitor tick past ``probe`` + the grace period."""
        ticks = int((probe + self.grace_period - self._origin) // self.monitor_period) + 1
        return self._origin + ticks * self.monitor_period

    # ---- reconcile

    def reconcile(self, key: str) -> None:
        try:
            node = self.store.get(Node.KIND, key)
        except NotFoundError:
            return
        assert isinstance(node, Node)
        now = self.clock.now()
        h = self._health.get(key)
        if h is not None:
            due = self._check_after(h.probe)
            if now >= due:
                node = self._lost(node, now)
            else:
                self._wake_at(key, due)
        want = wanted_taints(node, now)
        if want != node.spec.taints:
            written = self.api.update(
                node.evolve(spec=node.spec.evolve(taints=want)), component=self.name
            )
            assert isinstance(written, Node)
            node = written
        if ready_status(node) != "True":
            self._mark_pods_not_ready(key, now)

    def _lost(self, node: Node, now: float) -> Node:
        """Turn the kubelet's conditions Unknown (if not already); the Node as written."""
        stamp = rfc3339(now)
        changed = False
        conds: list[Condition] = []
        for c in node.status.conditions:
            if c.type in KUBELET_CONDITIONS and c.status != "Unknown":
                c = c.evolve(
                    status="Unknown",
                    reason=UNKNOWN_REASON,
                    message=UNKNOWN_MESSAGE,
                    last_transition_time=stamp,
                )
                changed = True
            conds.append(c)
        if not any(c.type == "Ready" for c in conds):
            conds.insert(
                0,
                Condition(
                    type="Ready",
                    status="Unknown",
                    reason=UNKNOWN_REASON,
                    message=UNKNOWN_MESSAGE,
                    last_transition_time=stamp,
                ),
            )
            changed = True
        if not changed:
            return node
        written = self.api.update_status(
            node.evolve(status=node.status.evolve(conditions=conds)), component=self.name
        )
        assert isinstance(written, Node)
        self.recorder.record(
            self.name, written, "NodeNotReady", f"Node {node.name} status is now: NodeNotReady"
        )
        return written

    def _mark_pods_not_ready(self, node_name: str, now: float) -> None:
        stamp = rfc3339(now)
        for key in sorted(self._pods.on(node_name)):
            try:
                pod = self.store.get(Pod.KIND, key)
            except NotFoundError:
                continue
            if not isinstance(pod, Pod) or pod.spec.node_name != node_name or not pod.is_ready:
                continue
            conds = [
                c.evolve(status="False", last_transition_time=stamp) if c.type == "Ready" else c
                for c in pod.status.conditions
            ]
            written = self.api.update_status(
                pod.evolve(status=pod.status.evolve(conditions=conds)), component=self.name
            )
            self.recorder.record(
                self.name, written, "NodeNotReady", "Node is not ready", type_="Warning"
            )

    def subject(self, key: str) -> KubeObject | None:
        try:
            return self.store.get(Node.KIND, key)
        except NotFoundError:
            return None
