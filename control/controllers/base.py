"""The controller framework: informer cache → work queue → level-triggered ``reconcile(key)``.

Shape (client-go's). A driver hands each component the events of the kinds it declares
(:attr:`Controller.kinds`), in revision order, via :meth:`handle`, and calls
:meth:`sync`; never both at once. Two drivers exist: the deterministic runner
(:mod:`control.runner`: one thread, one watch read of the in-process store per step) and
the live driver (:mod:`control.live`: informers over the HTTPS API, a worker thread per
component, writes through an API client with the component's own identity).

* The driver's informer (a reflector over a
  :class:`~control.informers.listwatch.ListerWatcher`) lists, then watches from the
  list's revision, and relists after 410 Gone.
* :meth:`Controller.handle` applies each event to the controller's :class:`ObjectCache`
  (its informer: a local copy of the watched kinds, with indexes) and maps the event to
  keys (:meth:`Controller.keys_for`) that go into the :class:`WorkQueue`.
* :meth:`Controller.sync` pops the keys queued so far and calls :meth:`reconcile` on each.
  ``reconcile`` re-reads its primary object (from the store, or a GET through the API),
  reads related objects from the cache, and writes the difference through the apiserver. It is idempotent: running
  it twice in a row writes nothing the second time.
* A reconcile that raises a :class:`~netmodel.errors.SvclabError` (a conflict, a missing
  object, a refused write) is re-queued after the queue's rate limiter's delay (none
  under the runner; exponential backoff under the live driver), at most
  :attr:`Controller.max_retries` times in a row; then the key is dropped and a Warning
  Event records why. Any other exception is a bug and propagates.

Cache consistency: a component's own earlier writes are in its cache when its
:meth:`sync` runs. The runner delivers every write made up to the start of a sync before
it; the live driver holds a sync back until the component's informers have seen its
writes (:class:`~control.informers.remote.RemoteAPI`'s expectations). Within one sync a
key is reconciled at most once.

Keys are strings; a controller that watches several kinds of primary object encodes the
kind in its keys (see :class:`GarbageCollector`).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import ClassVar

from control.apiclient import APIClient
from control.events import Recorder
from control.informers.cache import Indexer, ObjectCache
from control.informers.workqueue import WorkQueue
from control.store.base import WatchEvent, first_states
from netmodel.errors import NotFoundError, SvclabError
from netmodel.kinds import KINDS
from netmodel.objects import FOREGROUND, KubeObject, OwnerReference, finalizers

log = logging.getLogger(__name__)


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

    def prime(self, objects: Iterable[KubeObject]) -> None:
        """Start from a listing of a converged store (:meth:`control.runner.ControlPlane.start`):
        what :meth:`resync` keeps, without queueing every key (their reconciles would
        write nothing). Controllers whose reconcile does more than converge the store
        (time-based work) keep :meth:`resync` here."""
        self.resync(objects)
        self.queue.clear()

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


def controller_index(kind: str) -> dict[str, Indexer]:
    """The ``by`` index of objects by the owner id of their controller of ``kind``
    (:func:`controlled_by`); objects with no such controller are not indexed."""

    def index(obj: KubeObject) -> Iterator[str]:
        o = controlled_by(obj, kind)
        if o is not None:
            yield o

    return {"by": index}


def controller_keys(obj: KubeObject, old: KubeObject | None, kind: str) -> list[str]:
    """The keys (``namespace/name``) of the controllers of ``kind`` of ``old`` and of
    ``obj``, old first (twice when both name the same one; a work queue collapses them)."""
    keys = []
    for o in (old, obj):
        if o is None:
            continue
        ref = o.metadata.controller_ref()
        if ref is not None and ref.kind == kind:
            keys.append(f"{obj.namespace}/{ref.name}")
    return keys


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
    kinds = frozenset(
        {
            "Deployment",
            "ReplicaSet",
            "ReplicationController",
            "DaemonSet",
            "ControllerRevision",
            "Pod",
            "Service",
            "EndpointSlice",
            "StatefulSet",
            "Job",
            "CronJob",
            "PersistentVolumeClaim",  # a StatefulSet's claims (retention policy Delete)
        }
    )
    #: what :meth:`prime_deferred` can start without (see there)
    deferrable_kinds = frozenset({"Pod"})

    def __init__(self, api: APIClient, recorder: Recorder) -> None:
        super().__init__(api, recorder)
        # owner id -> dependents' keys; dependent key -> owner ids
        self._dependents: dict[str, dict[str, None]] = {}
        self._owners: dict[str, tuple[str, ...]] = {}
        # owner id -> key, of the owners being deleted in the foreground
        self._foreground: dict[str, str] = {}
        # after prime: the objects whose owners are not indexed yet, and the keys
        # whose events came since (see prime)
        self._unindexed: list[KubeObject] | None = None
        self._touched: set[str] = set()
        # after prime_deferred: the listing of the deferred kinds, made with the index
        self._later: Callable[[], list[KubeObject]] | None = None

    def handle(self, events: Sequence[WatchEvent]) -> None:
        # No object cache: owners are checked against the store, dependents indexed here.
        for ev in events:
            for key in self.keys_for(ev, None):
                self.queue.add(key)

    def resync(self, objects: Iterable[KubeObject]) -> None:
        self._dependents.clear()
        self._owners.clear()
        self.queue.clear()
        self._unindexed = None
        self._later = None
        for obj in objects:
            for key in self.keys_for(WatchEvent("ADDED", obj, obj.resource_version), None):
                self.queue.add(key)

    def prime(self, objects: Iterable[KubeObject]) -> None:
        """:meth:`Controller.prime`: objects being deleted are taken at once (as
        :meth:`resync` takes them); the index of everyone else's owners is built from
        ``objects`` only when a deletion first needs it (a change that deletes nothing
        never builds it), leaving out the objects whose events came meanwhile (their
        owners are indexed from those)."""
        self.resync([])
        rest = []
        for obj in objects:
            if obj.metadata.deletion_timestamp is not None:
                for key in self.keys_for(WatchEvent("ADDED", obj, obj.resource_version), None):
                    self.queue.add(key)
            elif obj.metadata.owner_references:
                rest.append(obj)
        self._unindexed = rest
        self._touched = set()

    def prime_deferred(
        self,
        objects: Iterable[KubeObject],
        later: Callable[[], list[KubeObject]],
        deleting: bool,
    ) -> None:
        """:meth:`prime` with every kind but :attr:`deferrable_kinds` (the pods);
        ``later()`` lists those as they were at the revision ``objects`` were listed at,
        and is called when the index is built (a deletion first needs it). When a full
        prime would queue work at once (an object being deleted, or a pod that was
        being deleted at that revision: ``deleting``, which the runner knows without
        decoding the pods), the pods are listed here instead, and this is :meth:`prime`."""
        objs = list(objects)
        first = first_states(self.store)
        if (
            first is None
            or any(o.metadata.deletion_timestamp is not None for o in objs)
            or any(kind in self.deferrable_kinds for kind, _ in first)
            or deleting
        ):
            self.prime(sorted(objs + later(), key=lambda o: o.kind))  # (as _prime lists)
            return
        self.prime(objs)
        self._later = later

    def _index_listing(self) -> None:
        """Index the owners of what :meth:`prime` left unindexed (see there)."""
        listing, self._unindexed = self._unindexed or [], None
        if self._later is not None:  # (no object in it is being deleted: prime_deferred)
            later, self._later = self._later, None
            listing = listing + [o for o in later() if o.metadata.owner_references]
        for obj in listing:
            key = f"{obj.kind}|{obj.key}"
            if key not in self._touched:
                owners = tuple(
                    owner_id(r.kind, obj.namespace, r.name, r.uid)
                    for r in obj.metadata.owner_references
                )
                self._owners[key] = owners
                for o in owners:
                    self._dependents.setdefault(o, {})[key] = None
        self._touched = set()

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterator[str]:
        obj = event.object
        key = f"{obj.kind}|{obj.key}"
        if self._unindexed is not None:
            if event.type == "DELETED" or obj.metadata.deletion_timestamp is not None:
                self._index_listing()
            else:
                self._touched.add(key)
        if event.type == "DELETED":
            # a dependent gone: the owners waiting for it in the foreground look again
            yield from [
                self._foreground[o] for o in self._owners.get(key, ()) if o in self._foreground
            ]
            self._unlink(key)
            uid = obj.metadata.uid
            for ident in (
                owner_id(obj.kind, obj.namespace, obj.name, uid),
                owner_id(obj.kind, obj.namespace, obj.name, None),
            ):
                self._foreground.pop(ident, None)
            ident = owner_id(obj.kind, obj.namespace, obj.name, uid)
            # in key order, whatever order the index learnt them in (a primed
            # collector learns them later than one started from a full listing)
            yield from sorted(self._dependents.pop(ident, {}))
            if uid:  # dependents that referenced it by name only
                yield from sorted(
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
        if obj.metadata.deletion_timestamp is not None and FOREGROUND in finalizers(obj):
            for ident in (
                owner_id(obj.kind, obj.namespace, obj.name, obj.metadata.uid),
                owner_id(obj.kind, obj.namespace, obj.name, None),
            ):
                self._foreground[ident] = key
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
        if obj.metadata.deletion_timestamp is not None:
            if FOREGROUND in finalizers(obj):
                self._delete_dependents_first(obj)
            return
        refs = obj.metadata.owner_references
        if not refs:
            return
        if any(self._owner_exists(obj.namespace, r) for r in refs):
            return
        # the read may be an informer's cache, behind the API: delete only the state this
        # decision saw (a dependent orphaned meanwhile, e.g. by a propagationPolicy=Orphan
        # delete of its owner, has a newer resourceVersion: ConflictError, and the retry
        # re-reads it without the ownerReference), as upstream's collector checks the
        # latest state before it deletes
        self.api.delete(kind, obj_key, component=self.name, expected_version=obj.resource_version)

    def _delete_dependents_first(self, owner: KubeObject) -> None:
        """Foreground deletion: delete the owner's dependents (in the foreground too);
        once none is left, remove the ``foregroundDeletion`` finalizer, which lets the
        apiserver remove the owner. A dependent's DELETED event brings the owner back."""
        if self._unindexed is not None:
            self._index_listing()
        ids = (
            owner_id(owner.kind, owner.namespace, owner.name, owner.metadata.uid),
            owner_id(owner.kind, owner.namespace, owner.name, None),
        )
        left = 0
        for dep_key in [k for i in ids for k in sorted(self._dependents.get(i, {}))]:
            kind, _, obj_key = dep_key.partition("|")
            try:
                dep = self.store.get(kind, obj_key)
            except NotFoundError:
                continue
            left += 1
            if dep.metadata.deletion_timestamp is None:
                self.api.delete(kind, obj_key, component=self.name, propagation="Foreground")
        if left:
            return
        rest = [f for f in finalizers(owner) if f != FOREGROUND]
        self.api.update(owner.with_meta(finalizers=rest), component=self.name)

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
