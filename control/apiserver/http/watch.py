"""Watch fan-out: one reader of the store's change log, many HTTP watchers.

:meth:`Hub.pump` (called after every write the server makes, and after every round of
the control plane) reads the store's watch from the revision it last read and hands
each change to the watchers it concerns, in revision order. Each watcher has a queue
of ready-to-send JSON lines; a watch response drains it.

Selectors: a change is sent when the object matches the watcher's namespace, label
and field selectors. An object that stops matching is sent as DELETED, one that starts
matching as ADDED (kube-apiserver's watch cache does the same). Watchers with a
``spec.nodeName=X`` field selector (kubelets) are indexed by node, so a pod write
reaches only its own node's watchers and the unfiltered ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from control.apiserver.http.resources import Resource
from control.store.base import WatchEvent
from netmodel.objects import KubeObject

#: turns (watcher, event type, object) into the line to send (None: nothing)
Encoder = Callable[["Watcher", str, Any], bytes | None]


@dataclass(eq=False)
class Watcher:
    res: Resource
    namespace: str
    matches: Callable[[KubeObject], bool]
    encode: Encoder
    node: str | None = None  # spec.nodeName=... equality term, for the index
    matched: set[str] = field(default_factory=set)
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    #: kinds whose changes concern this watcher (endpoints: Service + EndpointSlice)
    kinds: tuple[str, ...] = ()
    #: for computed resources: event -> (key, object or None if gone)
    view: Callable[[WatchEvent], tuple[str, Any] | None] | None = None

    def send(self, line: bytes | None) -> None:
        self.queue.put_nowait(line)


class Hub:
    def __init__(self, revision: int) -> None:
        self.revision = revision
        self._by_kind: dict[str, set[Watcher]] = {}
        self._by_node: dict[tuple[str, str], set[Watcher]] = {}
        #: pod keys by spec.nodeName as of :attr:`revision` (built on first use, then
        #: kept by :meth:`dispatch`): where a kubelet's watch starts
        self._pods_by_node: dict[str, set[str]] | None = None

    def pods_on(self, node: str, pods: Callable[[], list[KubeObject]]) -> set[str]:
        """Keys of the pods bound to ``node``; ``pods`` lists every pod (first call)."""
        if self._pods_by_node is None:
            idx: dict[str, set[str]] = {}
            for p in pods():
                bound = p.spec.node_name  # type: ignore[attr-defined]
                if bound:
                    idx.setdefault(bound, set()).add(p.key)
            self._pods_by_node = idx
        return self._pods_by_node.get(node, set())

    def __len__(self) -> int:
        return sum(len(s) for s in self._by_kind.values()) + sum(
            len(s) for s in self._by_node.values()
        )

    def add(self, w: Watcher) -> None:
        for kind in w.kinds:
            if w.node is not None:
                self._by_node.setdefault((kind, w.node), set()).add(w)
            else:
                self._by_kind.setdefault(kind, set()).add(w)

    def remove(self, w: Watcher) -> None:
        for kind in w.kinds:
            if w.node is not None:
                self._by_node.get((kind, w.node), set()).discard(w)
            else:
                self._by_kind.get(kind, set()).discard(w)

    def close_all(self) -> None:
        for ws in [*self._by_kind.values(), *self._by_node.values()]:
            for w in ws:
                w.send(None)

    def reset(self, revision: int) -> None:
        """The store was replaced (the cluster was fixed): end every watch."""
        self.close_all()
        self._by_kind.clear()
        self._by_node.clear()
        self._pods_by_node = None
        self.revision = revision

    def dispatch(self, events: list[WatchEvent]) -> None:
        for ev in events:
            obj = ev.object
            kind = obj.store_kind
            targets: list[Watcher] = list(self._by_kind.get(kind, ()))
            if kind == "Pod":
                node = obj.spec.node_name  # type: ignore[attr-defined]
                if node:
                    targets += self._by_node.get((kind, node), ())
                    if self._pods_by_node is not None:
                        keys = self._pods_by_node.setdefault(node, set())
                        if ev.type == "DELETED":
                            keys.discard(obj.key)
                        else:
                            keys.add(obj.key)
            elif self._by_node:
                targets += self._by_node.get((kind, obj.name), ())
            for w in targets:
                deliver(w, ev)
            self.revision = ev.revision


def deliver(w: Watcher, ev: WatchEvent) -> None:
    if w.view is not None:
        out = w.view(ev)
        if out is None:
            return
        key, view_obj = out
        if view_obj is None:
            if key in w.matched:
                w.matched.discard(key)
                line = w.encode(w, "DELETED", key)
                if line is not None:
                    w.send(line)
            return
        typ = "MODIFIED" if key in w.matched else "ADDED"
        w.matched.add(key)
        line = w.encode(w, typ, view_obj)
        if line is not None:
            w.send(line)
        return
    obj = ev.object
    key = obj.key
    if w.namespace and obj.namespace != w.namespace:
        return
    now = w.matches(obj)
    before = key in w.matched
    if ev.type == "DELETED":
        if not (before or now):
            return
        w.matched.discard(key)
        typ = "DELETED"
    elif now:
        typ = "MODIFIED" if before and ev.type != "ADDED" else "ADDED"
        w.matched.add(key)
    elif before:
        w.matched.discard(key)
        typ = "DELETED"
    else:
        return
    line = w.encode(w, typ, obj)
    if line is not None:
        w.send(line)
