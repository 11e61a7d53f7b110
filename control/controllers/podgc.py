"""The pod garbage collector (kube-controller-manager's PodGC): deletes *orphaned* pods,
those bound (``spec.nodeName``) to a Node that does not exist.

Contract:

* Whether the node exists is asked of the store when a pod is reconciled, not of the
  collector's own view (Kubernetes asks the apiserver before deleting): a node that
  registered in the meantime saves its pods.
* A node the collector saw deleted (its watch delivered the DELETED event) is known to
  be absent: its pods are deleted at once, whether they were marked for deletion or not.
* A node the collector never saw may still be registering (a pod bound to a node that
  does not exist *yet*; or one deleted while no control plane ran). Its pods are
  quarantined: deleted only once :attr:`PodGarbageCollector.quarantine_seconds`
  (Kubernetes: 40 s) have passed on the injected clock since the pod's
  creationTimestamp, if the node is still absent then. Every :meth:`sync` picks up the
  quarantines that ran out, so after ``clock.advance`` the next ``run_until_idle``
  collects them; a node that appears first ends its pods' quarantine.
* Deletion is forced (``delete(force=True)``, grace period 0): no kubelet is left to
  finish a pod whose node is gone. Each one leaves two Events: ``DeletionByPodGC``
  naming the node (the reason Kubernetes puts on the pod's DisruptionTarget condition),
  then the apiserver's ``Deleted``.

Left out: the threshold GC of terminated pods (``--terminated-pod-gc-threshold``:
svclab's pods never terminate on their own), the sweep of unscheduled terminating pods
(the apiserver removes an unbound pod at once), and the Failed phase / DisruptionTarget
condition Kubernetes writes just before deleting (svclab deletes directly).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from control.agents import PodSummary
from control.clock import Clock, parse_rfc3339
from control.controllers.base import APIClient, Controller
from control.controllers.podsbynode import PodsByNode
from control.events import Recorder
from control.store.base import Store, WatchEvent, scan
from netmodel.errors import NotFoundError
from netmodel.objects import KubeObject, Node, Pod

#: How long a pod may wait for its node to register (Kubernetes' quarantineTime).
QUARANTINE_SECONDS = 40.0


class PodGCAPI(APIClient, Protocol):
    """What the collector writes through: the apiserver's delete, with ``force``."""

    def delete(
        self,
        kind: str,
        key: str,
        *,
        component: str = ...,
        force: bool = ...,
        expected_version: int | None = ...,
        propagation: str | None = ...,
    ) -> KubeObject: ...


class PodGarbageCollector(Controller):
    """Deletes pods bound to a Node that does not exist; see the module docstring.

    Keys are pod keys (``ns/name``). Keeps no copy of the pods, only which pods are bound
    to which node name and which nodes it has seen come and go."""

    name = "pod-garbage-collector"
    kinds = frozenset({"Pod", "Node"})

    def __init__(
        self,
        api: PodGCAPI,
        recorder: Recorder,
        clock: Clock,
        *,
        quarantine_seconds: float = QUARANTINE_SECONDS,
    ) -> None:
        super().__init__(api, recorder)
        self._api = api
        self.clock = clock
        self.quarantine_seconds = quarantine_seconds
        self._nodes: set[str] = set()  # present, as watched
        self._gone: set[str] = set()  # seen deleted, and not back since
        self._pods = PodsByNode()
        self._quarantine: dict[str, float] = {}  # pod key -> when it may be deleted

    # ---- informer side

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterator[str]:
        obj = event.object
        if isinstance(obj, Node):
            name = obj.name
            if event.type == "DELETED":
                self._nodes.discard(name)
                self._gone.add(name)
                yield from self._pods.on(name)
            else:
                self._nodes.add(name)
                self._gone.discard(name)
                for key in self._pods.on(name):
                    self._quarantine.pop(key, None)
            return
        if not isinstance(obj, Pod):
            return
        key = obj.key
        if event.type == "DELETED":
            self._pods.unbind(key)
            self._quarantine.pop(key, None)
            return
        node = obj.spec.node_name
        if not node:
            return
        self._pods.bind(key, node)
        if node not in self._nodes and key not in self._quarantine:
            yield key

    def handle(self, events: Sequence[WatchEvent]) -> None:
        for ev in events:
            for key in self.keys_for(ev, None):
                self.queue.add(key)

    def resync(self, objects: Iterable[KubeObject]) -> None:
        self.queue.clear()
        for state in (self._nodes, self._gone, self._pods, self._quarantine):
            state.clear()
        objs = sorted(objects, key=lambda o: not isinstance(o, Node))  # nodes first
        self.handle([WatchEvent("ADDED", o, o.resource_version) for o in objs])

    @staticmethod
    def has_start_work(store: Store, pods: Sequence[PodSummary]) -> bool:
        """Whether a pod is bound to a node that is not stored (what :meth:`resync`
        queues): a full start works on it, so a control plane started on a converged
        store starts the collector at once (:meth:`control.runner.ControlPlane.start`)."""
        nodes = {key for (key,) in scan(store, Node.KIND, [])}
        return any(p.node_name and p.node_name not in nodes for p in pods)

    def prime(self, objects: Iterable[KubeObject]) -> None:
        """As :meth:`resync`: the quarantine of pods bound to missing nodes is this
        process's own (time-based), so it starts as a full start starts it."""
        self.resync(objects)

    # ---- work

    def pending(self) -> int:
        return len(self.queue) + len(self._due())

    def _due(self) -> list[str]:
        if not self._quarantine:
            return []
        now = self.clock.now()
        return sorted(k for k, due in self._quarantine.items() if due <= now)

    def sync(self) -> int:
        """Queue the pods whose quarantine ran out, then reconcile what is queued."""
        for key in self._due():
            del self._quarantine[key]
            self.queue.add(key)
        return super().sync()

    def reconcile(self, key: str) -> None:
        try:
            pod = self.store.get(Pod.KIND, key)
        except NotFoundError:
            self._quarantine.pop(key, None)
            return
        if not isinstance(pod, Pod) or not pod.spec.node_name:
            return
        node = pod.spec.node_name
        if self._node_exists(node):
            self._quarantine.pop(key, None)
            return
        if node in self._gone:
            why = f"PodGC: node {node} no longer exists"
        else:
            due = self._quarantine.get(key) or self._created(pod) + self.quarantine_seconds
            if self.clock.now() < due:
                self._quarantine[key] = due
                return
            why = (
                f"PodGC: node {node} does not exist "
                f"({self.quarantine_seconds:g}s after the pod was created)"
            )
        self._quarantine.pop(key, None)
        self.recorder.record(self.name, pod, "DeletionByPodGC", why)
        self._api.delete(Pod.KIND, key, component=self.name, force=True)

    def _node_exists(self, name: str) -> bool:
        try:
            self.store.get(Node.KIND, name)
        except NotFoundError:
            return False
        return True

    def _created(self, pod: Pod) -> float:
        ts = pod.metadata.creation_timestamp
        if ts:
            try:
                return parse_rfc3339(ts)
            except ValueError:
                pass
        return self.clock.now()

    def subject(self, key: str) -> KubeObject | None:
        try:
            return self.store.get(Pod.KIND, key)
        except NotFoundError:
            return None

    @property
    def quarantined(self) -> dict[str, float]:
        """Pods waiting for their node to register: pod key -> when they may go."""
        return dict(self._quarantine)
