"""The store protocol: versioned objects with watch, etcd-shaped.

Consistency contract (every backend keeps it; ``tests/control/store`` checks it):

* One global revision, an integer that only grows. A successful write (create, update,
  delete) outside a transaction increases it by exactly one when this store is the only
  writer (etcd: writes by other clients of the same etcd advance it too). ``revision`` is
  the latest one (0 for an empty memory or SQLite store; a fresh etcd is at 1).
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
* ``transaction()`` groups writes: either all of them become visible or, if the block
  raises, none does and the revision is unchanged. Reads in the block see its writes.
  How the writes of a committed block are numbered is the backend's
  ``TXN_REVISIONS``: ``"consecutive"`` (memory, SQLite: one revision and one watch
  event per write, as outside a block) or ``"shared"`` (etcd: the block is one etcd
  Txn, so its writes share one revision, and a key written several times in the block
  is written once, with its final state: one watch event, or none for a key created
  and deleted in the block). Either way ``revision + 1``, read in the block before a
  write, is the revision that write will get, and a watcher still sees a subsequence
  of each object's states.
* ``batch()`` (optional: use :func:`batched`, which falls back to no batching for a
  store without it) groups writes for speed, NOT for atomicity. Each write in a batch
  is checked when it is called, against the store's state including the batch's
  earlier writes (ConflictError / NotFoundError raised at the call, as outside a
  batch), and reads in the batch see it. What changes is when the writes reach the
  backend: memory and SQLite apply each at once (the block is a no-op); etcd sends
  them when the block ends, many per Txn. Each write stays its own all-or-nothing,
  compare-and-swap unit: when the batch is sent, a write whose compare fails in the
  backend (only possible when another client wrote that key after this store read
  it) is not applied, every other write of the batch is, and the block's exit raises
  :class:`BatchConflictError` naming the refused writes (never a silent drop). A block
  that raises still sends the writes made before the error (each was acknowledged).
  A transaction inside a batch first sends the batch's writes, then commits as it
  would outside. ``watch`` shows a batch's writes once they are sent. With one
  writer, each object returned in a batch carries the resourceVersion it gets.

Keys: ``(kind, key)`` where key is ``namespace/name`` for namespaced kinds and ``name``
for cluster-scoped ones (see :attr:`netmodel.objects.KubeObject.key`).
"""

from __future__ import annotations

import builtins
import gc
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from netmodel.errors import ConflictError
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
        return self.object.store_kind


@runtime_checkable
class Store(Protocol):
    """What every backend (memory, sqlite, etcd) provides. See the module docstring."""

    #: how a committed transaction's writes are numbered: "consecutive" or "shared"
    TXN_REVISIONS: str

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


class BatchConflictError(ConflictError):
    """Writes of a batch that the backend refused when the batch was sent (another client
    wrote those keys since this store read them); every other write was applied.
    ``refused``: the ``(kind, key)`` of each refused write."""

    def __init__(self, refused: Collection[tuple[str, str]]) -> None:
        self.refused = sorted(refused)
        shown = ", ".join(f"{k} {key!r}" for k, key in self.refused[:3])
        more = f" and {len(self.refused) - 3} more" if len(self.refused) > 3 else ""
        super().__init__(
            f"changed by another writer while batched: {shown}{more} "
            "(not written; the batch's other writes were)"
        )


class GuardMovedError(ConflictError):
    """A guarded transaction's guard (``guard``/``read_guard``: a backend shared by
    several writers, etcd) was moved by another writer since it was read; nothing of
    the transaction was applied."""


def batched(store: object) -> AbstractContextManager[None]:
    """``store.batch()`` when the store has one, else a block that changes nothing (each
    write is applied when called). See the module docstring."""
    batch = getattr(store, "batch", None)
    return batch() if batch is not None else nullcontext()


@contextmanager
def bulk() -> Iterator[None]:
    """Pause the cyclic GC while a backend decodes many objects (they are acyclic; a collection
    rescanning tens of thousands of live objects makes a bulk load several times slower)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def scan(store: Store, kind: str, paths: Sequence[Sequence[str]]) -> builtins.list[tuple[Any, ...]]:
    """``(key, value at each path, ...)`` for every object of ``kind``, in key order (as
    :meth:`Store.list`). A path names keys of the object's stored JSON form
    (:meth:`~netmodel.objects.KubeObject.to_dict`: camelCase, ``("spec", "nodeName")``)
    and must end at a string, number or boolean; a value that is absent is None, a
    boolean comes back as 1 or 0. A backend with a ``scan`` method answers without
    building the objects (SQLite: its JSON functions, a fraction of the cost of
    decoding 20,000 pods); any other from :meth:`Store.list`."""
    own = getattr(store, "scan", None)
    if own is not None:
        return own(kind, paths)
    out = []
    for o in store.list(kind):
        d = o.to_dict()
        out.append((o.key, *(_at(d, path) for path in paths)))
    return out


def _at(d: Any, path: Sequence[str]) -> Any:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return int(d) if isinstance(d, bool) else d


def labelled(
    store: Store, kind: str, namespace: str, labels: dict[str, str]
) -> builtins.list[KubeObject]:
    """The objects of ``kind`` in ``namespace`` carrying every label in ``labels`` (all
    of the namespace when empty), in key order: exactly what
    ``store.list(kind, namespace, LabelSelector(match_labels=labels))`` returns. A
    backend with a ``labelled`` method answers without building the other objects of
    the kind (SQLite, when the kind is not loaded yet: a query over the stored labels,
    decoding only the rows that match)."""
    own = getattr(store, "labelled", None)
    if own is not None:
        return own(kind, namespace, labels)
    return store.list(kind, namespace, LabelSelector(match_labels=dict(labels)))


def state_token(store: Store) -> str | None:
    """A text naming the store's current state, for caches of what is derived from it:
    two reads that get the same token read the same objects (the same backend file at
    the same committed revision; a revision rolled back comes back with its content).
    None when the backend cannot say (then derive afresh)."""
    own = getattr(store, "state_token", None)
    return own() if own is not None else None


def encoded(store: Store, obj: KubeObject) -> str | None:
    """The JSON text the backend wrote for ``obj`` (its stored form, what
    :meth:`~netmodel.objects.KubeObject.to_dict` gives, compact) when ``obj`` is the very
    object the backend's latest write of its kind returned and the backend kept the
    text (``encoded``; SQLite); else None (encode it afresh). Saves a response from
    encoding again what the write has just encoded."""
    own = getattr(store, "encoded", None)
    return own(obj) if own is not None else None


def peek(store: Store, kind: str, key: str) -> KubeObject:
    """``store.get(kind, key)``, without loading every object of ``kind`` into a
    backend's cache when the backend can read one (``peek``; SQLite)."""
    own = getattr(store, "peek", None)
    if own is not None:
        return own(kind, key)
    return store.get(kind, key)


def track_first_states(store: Store) -> int | None:
    """Ask ``store`` to record, from now on, each object's state before this process
    first writes it (a backend with ``track_first_states``; SQLite). Returns the
    revision the record starts at, or None when the backend cannot record."""
    own = getattr(store, "track_first_states", None)
    return own() if own is not None else None


def first_states(store: Store) -> dict[tuple[str, str], KubeObject | None] | None:
    """Since :func:`track_first_states`: ``(kind, key)`` -> the object as it was at the
    revision the record started at (None: absent then), for every object written
    since. With the store's current state this gives its whole state at that revision
    without reading history. None: nothing recorded, or not all writes are known (the
    backend cannot record, or another process wrote meanwhile)."""
    own = getattr(store, "first_states", None)
    return own() if own is not None else None


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


def stamped(obj: KubeObject, revision: int) -> KubeObject:
    """``obj`` as a backend stores it at ``revision``: with ``metadata.resourceVersion``
    set to it. An object that carries that resourceVersion already (an Event the
    recorder made for the revision it will get) is returned as it is: it is immutable
    and equal to the copy."""
    rv = str(revision)
    if obj.metadata.resource_version == rv:
        return obj
    return obj.with_meta(resource_version=rv)
