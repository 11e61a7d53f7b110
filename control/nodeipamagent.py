"""The node IPAM controller as an agent (the :class:`control.agents.Agent` protocol),
for every driver of the component registry (:mod:`control.components`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from control.controllers.nodeipam import NodeIPAM, natural_key
from control.store.base import WatchEvent
from netmodel.errors import SvclabError
from netmodel.objects import KubeObject, Node


class NodeIPAMAgent:
    """The node IPAM controller as an agent. Reconciles (in natural name order) every Node
    that appears, loses or changes its podCIDR, or is deleted; a deletion may free a
    subnet, so Nodes still waiting for one are tried again."""

    name = "nodeipam-controller"
    kinds = frozenset({"Node"})
    max_retries = 5

    def __init__(self, ipam: NodeIPAM) -> None:
        self.ipam = ipam
        self._queue: dict[str, None] = {}
        self._seen: dict[str, str | None] = {}
        self._failures: dict[str, int] = {}

    def handle(self, events: Sequence[WatchEvent]) -> None:
        for ev in events:
            node = ev.object
            if not isinstance(node, Node):
                continue
            key = node.key
            if ev.type == "DELETED":
                self._seen.pop(key, None)
                self._queue[key] = None
                for other, cidr in self._seen.items():
                    if not cidr:
                        self._queue[other] = None
                continue
            cidr = node.spec.pod_cidr
            if key not in self._seen or not cidr or self._seen[key] != cidr:
                self._queue[key] = None
            self._seen[key] = cidr

    def resync(self, objects: Iterable[KubeObject]) -> None:
        self._queue.clear()
        self._seen.clear()
        self.handle([WatchEvent("ADDED", o, o.resource_version) for o in objects])

    def pending(self) -> int:
        return len(self._queue)

    def sync(self) -> int:
        keys, self._queue = sorted(self._queue, key=natural_key), {}
        for key in keys:
            try:
                self.ipam.reconcile(key)
                self._failures.pop(key, None)
            except SvclabError:
                n = self._failures[key] = self._failures.get(key, 0) + 1
                if n <= self.max_retries:
                    self._queue[key] = None
        return len(keys)


__all__ = ["NodeIPAMAgent"]
