"""The controller framework: informer cache → work queue → level-triggered ``reconcile(key)``.

Shape (client-go's, single-threaded and deterministic):

* The runner reads the store's watch once and hands each component the events of the
  kinds it declares (:attr:`Controller.kinds`), in revision order, via :meth:`handle`.
* :meth:`Controller.handle` applies each event to the controller's :class:`ObjectCache`
  (its informer: a local copy of the watched kinds, with indexes) and maps the event to
  keys (:meth:`Controller.keys_for`) that go into the :class:`WorkQueue`.
* :meth:`Controller.sync` pops the keys queued so far and calls :meth:`reconcile` on each.
  ``reconcile`` re-reads its primary object from the store, reads related objects from
  the cache, and writes the difference through the apiserver. It is idempotent: running
  it twice in a row writes nothing the second time.
* A reconcile that raises a :class:`~netmodel.errors.SvclabError` (a conflict, a missing
  object, a refused write) is re-queued, at most :attr:`Controller.max_retries` times in
  a row; then the key is dropped and a Warning Event records why. Any other exception
  is a bug and propagates.

Cache consistency: the runner delivers every write made up to the start of a component's
:meth:`sync` before that sync runs, so a reconcile sees its own earlier writes in the
cache. Within one sync a key is reconciled at most once.

Keys are strings; a controller that watches several kinds of primary object encodes the
kind in its keys (see :class:`GarbageCollector`).
"""

from __future__ import annotations

import builtins
import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import ClassVar, Protocol

from control.events import Recorder
from control.store.base import Store, WatchEvent
from netmodel.errors import NotFoundError, SvclabError
from netmodel.objects import KINDS, KubeObject, OwnerReference

log = logging.getLogger(__name__)


class APIClient(Protocol):
    """The part of the apiserver controllers and agents write through."""

    @property
    def store(self) -> Store: ...

    def create(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...

    def update(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...

    def update_status(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...

    def delete(self, kind: str, key: str, *, component: str = ...) -> KubeObject: ...

    def finalize_pod_deletion(self, key: str) -> None: ...


# --------------------------------------------------------------------------- work queue


class WorkQueue:
    """A FIFO of keys with client-go's guarantees, for one thread.

    * ``add`` of a key that is already queued does nothing (duplicates collapse).
    * A key handed out by ``get`` is *processing* until ``done``; adding it meanwhile
      marks it dirty, and ``done`` puts it back at the end of the queue. So a key is
      never processed twice at once, and no add is lost.
    * ``num_requeues`` counts consecutive failures (``requeue``) until ``forget``.
    """

    def __init__(self) -> None:
        self._queue: deque[str] = deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._queue)

    def __contains__(self, key: object) -> bool:
        return key in self._queued

    def add(self, key: str) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)

    def get(self) -> str:
        """The next key (IndexError when empty); it is processing until :meth:`done`."""
        key = self._queue.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def requeue(self, key: str) -> int:
        """Count one more failure of ``key`` and queue it again; returns the count."""
        n = self._failures.get(key, 0) + 1
        self._failures[key] = n
        self.add(key)
        return n

    def num_requeues(self, key: str) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def clear(self) -> None:
        self._queue.clear()
        self._queued.clear()
        self._dirty.clear()
        self._failures.clear()


# --------------------------------------------------------------------------- cache

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


# --------------------------------------------------------------------------- controllers


class Controller(ABC):
    """A level-triggered controller; see the module docstring for the contract.

    Subclasses set :attr:`name` (the component written on Events) and :attr:`kinds`,
    and implement :meth:`keys_for` and :meth:`reconcile`."""

    name: ClassVar[str] = "controller"
    kinds: ClassVar[frozenset[str]] = frozenset()
    max_retries: ClassVar[int] = 5

    def __init__(self, api: APIClient, recorder: Recorder) -> None:
        self.api = api
        self.store = api.store
        self.recorder = recorder
        self.queue = WorkQueue()
        self.cache = ObjectCache(self.indexers())

    # ---- what subclasses provide

    def indexers(self) -> dict[str, Indexer]:
        """Indexes the cache keeps (name -> object -> values)."""
        return {}

    @abstractmethod
    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        """The keys to reconcile because of ``event`` (``old``: the cached previous state)."""

    @abstractmethod
    def reconcile(self, key: str) -> None:
        """Make the world match the desired state for ``key``. Idempotent."""

    def subject(self, key: str) -> KubeObject | None:
        """The object Events about ``key`` attach to (used when a key is dropped)."""
        return None

    # ---- the agent interface the runner drives

    def handle(self, events: Sequence[WatchEvent]) -> None:
        """Apply watch events to the cache and queue the keys they touch."""
        for ev in events:
            old = self.cache.apply(ev)
            for key in self.keys_for(ev, old):
                self.queue.add(key)

    def resync(self, objects: Iterable[KubeObject]) -> None:
        """Replace the cache by a full listing and queue every key (initial list, relist)."""
        self.cache.clear()
        self.queue.clear()
        objs = list(objects)
        for obj in objs:
            self.cache.put(obj)
        for obj in objs:
            for key in self.keys_for(WatchEvent("ADDED", obj, obj.resource_version), None):
                self.queue.add(key)

    def pending(self) -> int:
        return len(self.queue)

    def sync(self) -> int:
        """Reconcile every key queued when called; returns how many were reconciled."""
        n = len(self.queue)
        for _ in range(n):
            key = self.queue.get()
            failed: SvclabError | None = None
            try:
                self.reconcile(key)
            except SvclabError as e:
                failed = e
            finally:
                self.queue.done(key)
            if failed is None:
                self.queue.forget(key)
            else:
                self._retry(key, failed)
        return n

    def _retry(self, key: str, err: SvclabError) -> None:
        if self.queue.num_requeues(key) < self.max_retries:
            self.queue.requeue(key)
            return
        self.queue.forget(key)
        log.warning("%s: dropping %s after %d retries: %s", self.name, key, self.max_retries, err)
        subject = self.subject(key)
        if subject is not None:
            self.recorder.record(
                self.name,
                subject,
                "ReconcileFailed",
                f"gave up after {self.max_retries} retries: {err}",
                type_="Warning",
            )


# --------------------------------------------------------------------------- helpers


def controller_ref(owner: KubeObject) -> OwnerReference:
    """The ownerReference a controller puts on what it creates (controller: true)."""
    return OwnerReference(
        api_version=owner.api_version,
        kind=owner.kind,
        name=owner.name,
        uid=owner.metadata.uid or "",
        controller=True,
        block_owner_deletion=True,
    )


def owner_id(kind: str, namespace: str, name: str, uid: str | None) -> str:
    """The identity of an owner in indexes: its uid, or ``Kind/ns/name`` without one."""
    return uid or f"{kind}/{namespace}/{name}"


def controlled_by(obj: KubeObject, kind: str) -> str | None:
    """The owner id of ``obj``'s controller if it is of ``kind``, else None."""
    ref = obj.metadata.controller_ref()
    if ref is None or ref.kind != kind:
        return None
    return owner_id(ref.kind, obj.namespace, ref.name, ref.uid)


def is_controlled_by(obj: KubeObject, owner: KubeObject) -> bool:
    ref = obj.metadata.controller_ref()
    if ref is None or ref.kind != owner.kind or ref.name != owner.name:
        return False
    return not (ref.uid and owner.metadata.uid and ref.uid != owner.metadata.uid)


# --------------------------------------------------------------------------- garbage collector


class GarbageCollector(Controller):
    """Deletes objects whose owners are all gone (background cascading deletion).

    Watches every kind that can own or be owned. When an owner is deleted, each of its
    dependents is reconciled: if none of the dependent's ``ownerReferences`` resolves
    to an existing object (same kind, namespace, name and uid), the dependent is deleted
    through the apiserver; deleting it may in turn orphan its own dependents (Deployment
    → ReplicaSet → Pod). A dependent created with a dangling owner is collected too.
    Keys are ``Kind|key``."""

    name = "garbage-collector"
    kinds = frozenset({"Deployment", "ReplicaSet", "Pod", "Service", "EndpointSlice"})

    def __init__(self, api: APIClient, recorder: Recorder) -> None:
        super().__init__(api, recorder)
        # owner id -> dependents' keys; dependent key -> owner ids
        self._dependents: dict[str, dict[str, None]] = {}
        self._owners: dict[str, tuple[str, ...]] = {}

    def handle(self, events: Sequence[WatchEvent]) -> None:
        # No object cache: owners are checked against the store, dependents indexed here.
        for ev in events:
            for key in self.keys_for(ev, None):
                self.queue.add(key)

    def resync(self, objects: Iterable[KubeObject]) -> None:
        self._dependents.clear()
        self._owners.clear()
        self.queue.clear()
        for obj in objects:
            for key in self.keys_for(WatchEvent("ADDED", obj, obj.resource_version), None):
                self.queue.add(key)

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterator[str]:
        obj = event.object
        key = f"{obj.kind}|{obj.key}"
        if event.type == "DELETED":
            self._unlink(key)
            uid = obj.metadata.uid
            ident = owner_id(obj.kind, obj.namespace, obj.name, uid)
            yield from list(self._dependents.pop(ident, {}))
            if uid:  # dependents that referenced it by name only
                yield from list(
                    self._dependents.pop(owner_id(obj.kind, obj.namespace, obj.name, None), {})
                )
            return
        refs = obj.metadata.owner_references
        owners = tuple(owner_id(r.kind, obj.namespace, r.name, r.uid) for r in refs)
        if self._owners.get(key) != owners:
            self._unlink(key)
            if owners:
                self._owners[key] = owners
                for o in owners:
                    self._dependents.setdefault(o, {})[key] = None
        if owners and event.type == "ADDED":
            yield key

    def _unlink(self, key: str) -> None:
        for o in self._owners.pop(key, ()):
            deps = self._dependents.get(o)
            if deps is not None:
                deps.pop(key, None)
                if not deps:
                    del self._dependents[o]

    def _owner_exists(self, namespace: str, ref: OwnerReference) -> bool:
        cls = KINDS.get(ref.kind)
        if cls is None:
            return True  # an owner kind svclab does not model: never collect for it
        key = f"{namespace}/{ref.name}" if cls.NAMESPACED else ref.name
        try:
            owner = self.store.get(ref.kind, key)
        except NotFoundError:
            return False
        return not (ref.uid and owner.metadata.uid and ref.uid != owner.metadata.uid)

    def reconcile(self, key: str) -> None:
        kind, _, obj_key = key.partition("|")
        try:
            obj = self.store.get(kind, obj_key)
        except NotFoundError:
            return
        refs = obj.metadata.owner_references
        if not refs or obj.metadata.deletion_timestamp is not None:
            return
        if any(self._owner_exists(obj.namespace, r) for r in refs):
            return
        self.api.delete(kind, obj_key, component=self.name)

    def subject(self, key: str) -> KubeObject | None:
        kind, _, obj_key = key.partition("|")
        try:
            return self.store.get(kind, obj_key)
        except NotFoundError:
            return None


def kinds_of(controllers: Collection[Controller]) -> frozenset[str]:
    """Every kind some controller watches."""
    out: set[str] = set()
    for c in controllers:
        out |= c.kinds
    return frozenset(out)
