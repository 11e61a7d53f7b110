"""Which pods are bound to which node, as a controller's informer saw them: the index
the pod garbage collector, the node lifecycle controller and the taint eviction
controller each keep, to find a node's pods when the node changes without reading the
store.

Contract: :meth:`PodsByNode.bind` records a pod's node (moving it if it was recorded on
another), :meth:`PodsByNode.unbind` forgets it; :meth:`PodsByNode.on` lists a node's pods
in the order they were first bound there. Not thread-safe: one controller's informer
side owns it.
"""

from __future__ import annotations

from collections.abc import Iterator


class PodsByNode:
    """Pod keys by node name, and each pod key's node."""

    __slots__ = ("_bound", "_node_of")

    def __init__(self) -> None:
        self._bound: dict[str, dict[str, None]] = {}  # node name -> pod keys, in order
        self._node_of: dict[str, str] = {}  # pod key -> node name

    def bind(self, key: str, node: str) -> None:
        """Pod ``key`` is on ``node`` (a move when it was on another)."""
        if self._node_of.get(key) == node:
            return
        self.unbind(key)
        self._node_of[key] = node
        self._bound.setdefault(node, {})[key] = None

    def unbind(self, key: str) -> None:
        """Pod ``key`` is on no node (deleted); nothing when it was not recorded."""
        node = self._node_of.pop(key, None)
        if node is None:
            return
        pods = self._bound.get(node)
        if pods is not None:
            pods.pop(key, None)
            if not pods:
                del self._bound[node]

    def on(self, node: str) -> list[str]:
        """The pods bound to ``node`` (a copy: the caller may bind and unbind while
        iterating it)."""
        return list(self._bound.get(node, ()))

    def node_of(self, key: str) -> str | None:
        return self._node_of.get(key)

    def clear(self) -> None:
        self._bound.clear()
        self._node_of.clear()

    def __iter__(self) -> Iterator[str]:
        """Every node with a pod bound."""
        return iter(list(self._bound))
