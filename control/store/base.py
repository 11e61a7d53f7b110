"""The store protocol: versioned objects with watch, etcd-shaped.

Consistency contract (every backend keeps it; ``tests/control/store`` checks it):

* One global revision, a positive integer that every successful write (create, update,
  delete) increases by exactly one. ``revision`` is the latest one (0 for an empty store).
* Every stored object carries ``metadata.resourceVersion`` = the revision of the write
  that produced it (as a decimal string, as Kubernetes does).
* ``update`` and ``delete`` with ``expected_version`` are compare-and-swap: they fail with
  :class:`ConflictError` unless the stored object's resourceVersion equals it.
  ``create`` fails with ConflictError if the key exists.
* ``watch(since)`` returns, in revision order, every change with revision > ``since``:
  one :class:`WatchEvent` per write, carrying the object as written (for DELETED, the
  last stored state with the deleting revision). A watcher that applies them in order
  sees a subsequence of each object's states ending in its current state. Asking for a
  revision older than the compacted one raises :class:`CompactedError`; the watcher
  must re-list (``list`` + ``revision``) and watch from there.
* ``list`` returns objects sorted by key; ``get`` raises :class:`NotFoundError`.
* ``transaction()`` groups writes: either all of them become visible (consecutive
  revisions) or, if the block raises, none does and the revision is unchanged.

Keys: ``(kind, key)`` where key is ``namespace/name`` for namespaced kinds and ``name``
for cluster-scoped ones (see :attr:`netmodel.objects.KubeObject.key`).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from netmodel.objects import KubeObject
from netmodel.selectors import LabelSelector

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: EventType
    object: KubeObject
    revision: int

    @property
    def kind(self) -> str:
        return self.object.kind


@runtime_checkable
class Store(Protocol):
    """What every backend (memory, sqlite, etcd) provides. See the module docstring."""

    @property
    def revision(self) -> int: ...

    @property
    def compacted_revision(self) -> int: ...

    def get(self, kind: str, key: str) -> KubeObject: ...

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        selector: LabelSelector | None = None,
    ) -> builtins.list[KubeObject]: ...

    def create(self, obj: KubeObject) -> KubeObject: ...

    def update(self, obj: KubeObject, expected_version: int | None = None) -> KubeObject: ...

    def delete(self, kind: str, key: str, expected_version: int | None = None) -> KubeObject: ...

    def watch(
        self, since: int, kinds: Collection[str] | None = None
    ) -> builtins.list[WatchEvent]: ...

    def compact(self, revision: int) -> None: ...

    def transaction(self) -> AbstractContextManager[None]: ...

    def close(self) -> None: ...


def iter_matching(
    objs: Iterator[KubeObject] | list[KubeObject],
    namespace: str | None,
    selector: LabelSelector | None,
    predicate: Callable[[KubeObject], bool] | None = None,
) -> builtins.list[KubeObject]:
    """Filter helper shared by the backends: namespace, label selector, predicate."""
    out = []
    for o in objs:
        if namespace is not None and o.namespace != namespace:
            continue
        if selector is not None and not selector.matches(o.labels):
            continue
        if predicate is not None and not predicate(o):
            continue
        out.append(o)
    return out
