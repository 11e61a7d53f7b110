"""An informer's indexed cache: a local copy of some kinds, fed in revision order.

:class:`ObjectCache` is what a shared informer keeps and what each controller reads
instead of the store (client-go's ``Indexer``). It is not thread-safe: the driver that
feeds it (the deterministic runner, or a live component's lock) serializes access.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable

from control.store.base import WatchEvent
from netmodel.objects import KubeObject

Indexer = Callable[[KubeObject], Iterable[str]]


class ObjectCache:
    """A controller's local copy of some kinds (an informer's indexer).

    Fed in revision order through :meth:`apply`. ``indexers`` map an index name to a
    function giving the index values of an object; :meth:`by_index` returns the objects
    with a value, sorted by key (deterministic)."""

    def __init__(self, indexers: dict[str, Indexer] | None = None) -> None:
        self._objects: dict[str, dict[str, KubeObject]] = {}
        self._indexers = dict(indexers or {})
        # index name -> value -> {(kind, key): None} (an ordered set)
        self._indexes: dict[str, dict[str, dict[tuple[str, str], None]]] = {
            name: {} for name in self._indexers
        }
        self._values: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}

    def apply(self, event: WatchEvent) -> KubeObject | None:
        """Apply one watch event; returns the object's previous cached state."""
        obj = event.object
        if event.type == "DELETED":
            return self.remove(obj.kind, obj.key)
        return self.put(obj)

    def put(self, obj: KubeObject) -> KubeObject | None:
        key = obj.key
        bucket = self._objects.setdefault(obj.kind, {})
        old = bucket.get(key)
        bucket[key] = obj
        if self._indexers:
            ident = (obj.kind, key)
            values: dict[str, tuple[str, ...]] = {}
            for name, fn in self._indexers.items():
                vals = tuple(fn(obj))
                if vals:
                    values[name] = vals
            if old is not None and self._values.get(ident, {}) == values:
                return old  # same index values: the object was replaced in place
            self._unindex(ident)
            for name, vals in values.items():
                index = self._indexes[name]
                for v in vals:
                    index.setdefault(v, {})[ident] = None
            if values:
                self._values[ident] = values
        return old

    def remove(self, kind: str, key: str) -> KubeObject | None:
        old = self._objects.get(kind, {}).pop(key, None)
        if old is not None and self._indexers:
            self._unindex((kind, key))
        return old

    def _unindex(self, ident: tuple[str, str]) -> None:
        values = self._values.pop(ident, None)
        if not values:
            return
        for name, vals in values.items():
            index = self._indexes[name]
            for v in vals:
                members = index.get(v)
                if members is not None:
                    members.pop(ident, None)
                    if not members:
                        del index[v]

    def get(self, kind: str, key: str) -> KubeObject | None:
        return self._objects.get(kind, {}).get(key)

    def list(self, kind: str) -> list[KubeObject]:
        bucket = self._objects.get(kind, {})
        return [bucket[k] for k in sorted(bucket)]

    def count(self, kind: str) -> int:
        return len(self._objects.get(kind, {}))

    def by_index(self, name: str, value: str) -> builtins.list[KubeObject]:
        members = self._indexes[name].get(value)
        if not members:
            return []
        return [self._objects[k][key] for k, key in sorted(members)]

    def index_size(self, name: str, value: str) -> int:
        return len(self._indexes[name].get(value, ()))

    def clear(self) -> None:
        self._objects.clear()
        self._values.clear()
        for index in self._indexes.values():
            index.clear()


__all__ = ["Indexer", "ObjectCache"]
