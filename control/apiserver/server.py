"""The apiserver: every write of the control plane goes through here.

Pipeline of a write: metadata (namespace, name from generateName, uid, timestamps,
generation) → defaulting (:mod:`.defaults`) → validation (:mod:`.validation`) →
admission / allocation (:mod:`.services`) → one store write → one Event.

Contract:

* Reads go straight to :attr:`APIServer.store` (the informer-cache role).
* Every successful write records an Event through the Recorder (the ``component``
  argument names who asked, e.g. ``replicaset-controller``; reasons ``Created``,
  ``Updated``, ``Deleted``, ``Deleting``). A write that changes nothing is not written
  and records nothing (Kubernetes' no-op update), and returns the stored object.
* ``update`` is compare-and-swap when the object carries ``metadata.resourceVersion``.
  It takes metadata labels/annotations/ownerReferences and the spec from the object and
  keeps the stored status (status has its own verb, :meth:`APIServer.update_status`).
* :meth:`APIServer.bind` is the ``pods/binding`` subresource (what the scheduler
  writes through): it sets ``spec.nodeName``, copies the Binding's annotations and sets
  the PodScheduled condition, under uid / resourceVersion preconditions, without the
  update pipeline (the rest of the pod is not changed, so it is not admitted again).
* Deleting a Pod bound to a node only marks it (``deletionTimestamp``); the kubelet ends
  it with :meth:`APIServer.finalize_pod_deletion` (``force`` removes it at once: what
  the pod GC does when the node is gone). Deleting a Service frees its ClusterIP,
  NodePorts and LoadBalancer IPs.
* Deleting a Namespace marks it Terminating; the namespace controller empties it and
  removes it with :meth:`APIServer.finalize_namespace`. While it is Terminating, creating
  anything in it is refused (Kubernetes' NamespaceLifecycle admission); updates and
  deletes are allowed. ``default``, ``kube-system`` and ``kube-public`` may not be deleted.
* :meth:`APIServer.apply` is all-or-nothing: every object is admitted before anything is
  written, the writes happen inside one ``store.transaction()``, and any error leaves the
  store (revision included) and the allocators as they were.
* Allocator state is rebuilt from the stored Services when the APIServer is constructed,
  so it survives restarts of a persistent store.
* Several API servers over one store (replicas over one etcd; a store with
  ``read_guard``/``guard``, :meth:`control.store.etcd.EtcdStore.guard`): each Service
  create or update reads the allocation guard, rebuilds the allocators from the stored
  Services when another replica moved it since this one last did, admits, and writes
  the Service in one transaction that moves the guard only if nobody else did
  meanwhile; otherwise everything it took is given back and the write is admitted
  again (:attr:`APIServer.GUARD_RETRIES` times). So two replicas never hand out one
  ClusterIP, NodePort or LoadBalancer IP. (A Service deleted through another replica
  frees its addresses here at the next rebuild: until then they stay taken, never
  given twice.)
* :meth:`APIServer.bootstrap` (run each time a control plane starts) creates the system
  Namespaces and, unless the Cluster says ``kubernetesService: false``, the
  ``default/kubernetes`` Service and its EndpointSlice (:mod:`.endpoints`), repairing
  the slice if it drifted; unless ``dns: false``, also cluster DNS, as kubeadm installs it
  (:mod:`.clusterdns`: the ``kube-system/kube-dns`` Service and the ``coredns``
  Deployment, created when missing).
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from control.apiserver import clusterdns, crds, endpoints, servicecidrs
from control.apiserver.admission import Allocations, BatchView
from control.apiserver.allocators import Journal
from control.apiserver.nodes import nodes_for
from control.apiserver.strategy import (
    default,
    strategy_for,
    strategy_of,
    validate,
    validate_update,
)
from control.apiserver.validation import validate_binding
from control.clock import Clock, rfc3339
from control.events import Recorder
from control.store.base import GuardMovedError, Store, bulk
from netmodel.cluster import ClusterSpec
from netmodel.customresources import CRD_KIND
from netmodel.errors import (
    ConflictError,
    InputError,
    InvalidError,
    NotFoundError,
    SvclabError,
)
from netmodel.kinds import stored_rows
from netmodel.objects import (
    FOREGROUND,
    Condition,
    EndpointSlice,
    KubeObject,
    Namespace,
    Node,
    ObjectMeta,
    Pod,
    Service,
    ServicePort,
    ServiceSpec,
    finalizers,
)

Action = Literal["created", "configured", "unchanged"]

#: Namespaces :meth:`APIServer.bootstrap` creates; the first two may not be deleted.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-node-lease", "svclab-system")
UNDELETABLE_NAMESPACES = ("default", "kube-system", "kube-public")

#: Kubernetes' generateName alphabet (no vowels, no confusable characters).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATED_BASE = 58
_UID_NAMESPACE = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")  # uuid.NAMESPACE_URL


@dataclass
class _Admitted:
    """One object that passed admission and waits to be written."""

    action: Action
    obj: KubeObject
    expected_version: int | None
    notes: list[str]
    journal: Journal = field(default_factory=Journal)


def _status_fields(obj: KubeObject) -> bool:
    return "status" in type(obj).model_fields


#: the condition a binding sets (its lastTransitionTime is the binding's time)
_POD_SCHEDULED = Condition(type="PodScheduled", status="True")

_NOT_SPEC = frozenset({"api_version", "kind", "metadata", "status"})


def _spec_changed(a: KubeObject, b: KubeObject) -> bool:
    """Whether anything but apiVersion/kind/metadata/status differs: what a generation
    counts (``spec``, or the top-level fields of spec-less kinds like EndpointSlice)."""
    for name in type(a).model_fields:
        if name not in _NOT_SPEC and getattr(a, name) != getattr(b, name):
            return True
    ea, eb = a.model_extra or {}, b.model_extra or {}
    return {k: v for k, v in ea.items() if k != "status"} != {
        k: v for k, v in eb.items() if k != "status"
    }


def _uid(kind: str, key: str, revision: int) -> str:
    """Deterministic uid: uuid5 of ``kind/key/revision`` (revision = the creating write)."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"{kind}/{key}/{revision}"))


def _spec_changes(before: KubeObject, after: KubeObject) -> str:
    """``updated spec.nodeName=node-2, spec.podCIDR=10.244.1.0/24`` (scalars shown with
    their new value, other changed fields by name): what the timeline says of an update."""
    old_spec, new_spec = getattr(before, "spec", None), getattr(after, "spec", None)
    if old_spec is None or new_spec is None or old_spec == new_spec:
        return "updated"
    old, new = _spec_fields(old_spec), _spec_fields(new_spec)
    parts = []
    for wire in [*new, *(k for k in old if k not in new)]:
        a, b = old.get(wire), new.get(wire)
        if a == b:
            continue
        parts.append(f"spec.{wire}={b}" if isinstance(b, str | int | bool) else f"spec.{wire}")
    return "updated " + ", ".join(parts) if parts else "updated"


def _spec_fields(spec: Any) -> dict[str, Any]:
    """A spec's fields by their wire names: a typed spec's (in field order) or a generic
    object's spec as it came (a generic kind's ``spec`` is a plain mapping); nothing
    for anything else."""
    if isinstance(spec, BaseModel):
        fields = type(spec).model_fields
        return {info.alias or name: getattr(spec, name) for name, info in fields.items()}
    if isinstance(spec, dict):
        return spec
    return {}


def _message(verb: str, notes: Sequence[str]) -> str:
    allocated = [n for n in notes if not n.startswith("released ")]
    released = [n.removeprefix("released ") for n in notes if n.startswith("released ")]
    parts = []
    if allocated:
        parts.append("allocated " + ", ".join(allocated))
    if released:
        parts.append("released " + ", ".join(released))
    return "; ".join(parts) if parts else verb


class APIServer:
    """Validating, defaulting, allocating front of a :class:`Store`. See module docstring."""

    def __init__(
        self, store: Store, cluster: ClusterSpec, *, clock: Clock, recorder: Recorder
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.clock = clock
        self.recorder = recorder
        self._now_cache: tuple[int, str] = (-1, "")
        self.alloc = Allocations.rebuilt(cluster, store, now=self._now)
        self.services = self.alloc.services
        self._guard_seen = 0  # the allocation guard's revision the allocators reflect
        crds.sync(store)  # a persistent store's CRDs: their kinds before any of their objects

    # ------------------------------------------------------------------ bootstrap

    def bootstrap(self) -> None:
        """Create the system Namespaces and the ``default/kubernetes`` Service (first
        address of the serviceCIDR, port 443 ``https`` → 6443, no selector), then
        reconcile that Service's EndpointSlice (:meth:`reconcile_kubernetes_endpoints`).
        With ``kubernetesService: false`` neither is created. Unless ``dns: false``, the
        kube-dns Service and the coredns Deployment are created when missing
        (:mod:`.clusterdns`). Idempotent."""
        for name in SYSTEM_NAMESPACES:
            if self._get(Namespace.KIND, name) is None:
                self.create(Namespace(metadata=ObjectMeta(name=name)))
        servicecidrs.bootstrap(self, self.store, self.cluster, self._now())
        self.services.repair()
        if self.cluster.dns:
            if self._get(Service.KIND, clusterdns.SERVICE_KEY) is None:
                self.create(clusterdns.kube_dns_service(self.cluster))
            if self._get("Deployment", clusterdns.DEPLOYMENT_KEY) is None:
                self.create(clusterdns.coredns_deployment())
        if not self.cluster.kubernetes_service:
            return
        if self._get(Service.KIND, endpoints.KEY) is None:
            svc = Service(
                metadata=ObjectMeta(
                    name=endpoints.NAME,
                    namespace=endpoints.NAMESPACE,
                    labels={"component": "apiserver", "provider": "kubernetes"},
                ),
                spec=ServiceSpec(
                    type="ClusterIP",
                    ports=[
                        ServicePort(
                            name=endpoints.PORT_NAME,
                            port=443,
                            protocol="TCP",
                            target_port=endpoints.SECURE_PORT,
                        )
                    ],
                ),
            )
            self.create(svc)
        self.reconcile_kubernetes_endpoints()

    def reconcile_kubernetes_endpoints(self) -> EndpointSlice | None:
        """kube-apiserver's endpoint reconciler, run once: make the EndpointSlice
        ``default/kubernetes`` say what :func:`.endpoints.desired_slice` says (one
        endpoint, the Cluster's apiserver address, port ``https`` 6443/TCP, ready).

        Creates it when missing; rewrites the endpoints, the ports and the service-name
        label of a stored one that differs, keeping labels and annotations a user added
        (one of another addressType, which is immutable, is deleted and created again);
        writes nothing when it already agrees. Returns the stored slice, or
        None when the Cluster wants none (``kubernetesService: false`` or no node):
        then nothing is written and nothing is deleted."""
        want = endpoints.desired_slice(self.cluster)
        if want is None:
            return None
        current = self._get(EndpointSlice.KIND, endpoints.KEY)
        if isinstance(current, EndpointSlice) and current.address_type != want.address_type:
            self.delete(EndpointSlice.KIND, endpoints.KEY)
            current = None
        if not isinstance(current, EndpointSlice):
            stored = self.create(want)
        elif endpoints.same_content(current, want):
            return current
        else:
            labels = {**current.labels, **want.labels}
            fixed = current.evolve(
                metadata=current.metadata.evolve(labels=labels),
                endpoints=want.endpoints,
                ports=want.ports,
            )
            stored = self.update(fixed)
        assert isinstance(stored, EndpointSlice)
        return stored

    def bootstrap_nodes(self) -> list[Node]:
        """Create the Node objects the Cluster declares (those not stored yet) and return
        every declared Node as stored. Idempotent: when every declared Node is stored
        (a persistent cluster's every later start), none is built."""
        stored_now = [self._get(Node.KIND, name) for name in self.cluster.node_names()]
        if all(isinstance(n, Node) for n in stored_now):
            return [n for n in stored_now if isinstance(n, Node)]
        out: list[Node] = []
        for node in nodes_for(self.cluster, now=self._now()):
            stored = self._get(Node.KIND, node.key)
            if stored is None:
                stored = self.create(node)
            if isinstance(stored, Node):
                out.append(stored)
        return out

    # ------------------------------------------------------------------ verbs

    #: admissions of one Service write raced by other replicas before giving up
    GUARD_RETRIES = 20
    #: the guard every replica's allocating writes move (see the module docstring)
    ALLOC_GUARD = "service-allocations"

    def _guarded(self, obj: KubeObject) -> bool:
        return obj.store_kind == Service.KIND and hasattr(self.store, "read_guard")

    def _sync_allocations(self) -> int:
        """Read the allocation guard; when another writer moved it since this server
        last saw it, rebuild the allocators from the stored Services. Returns the
        guard's revision, to write under."""
        seen = self.store.read_guard(self.ALLOC_GUARD)  # type: ignore[attr-defined]
        if seen != self._guard_seen:
            self.alloc = Allocations.rebuilt(self.cluster, self.store, now=self._now)
            self.services = self.alloc.services
            self._guard_seen = seen
        return seen

    def _write_guarded(self, adm: _Admitted, guard: int) -> KubeObject:
        """:meth:`_write` in a transaction with the allocation guard (module docstring);
        returns the object as stored (its resourceVersion the commit's)."""
        with self.store.transaction():
            self.store.guard(self.ALLOC_GUARD, guard)  # type: ignore[attr-defined]
            self._write(adm)
        stored = self.store.get(adm.obj.store_kind, adm.obj.key)
        self._guard_seen = stored.resource_version
        return stored

    def _racing(self, attempt: int) -> bool:
        """Whether a write whose guard moved may be admitted again."""
        return attempt + 1 < self.GUARD_RETRIES

    def create(
        self, obj: KubeObject, *, component: str = "apiserver", dry_run: bool = False
    ) -> KubeObject:
        """Admit and store a new object. ConflictError if it exists; InvalidError /
        AllocationError if refused (nothing stored, nothing allocated). ``dry_run``:
        admit only and return what would be stored (nothing written or allocated)."""
        if not self._guarded(obj) or dry_run:
            return self._create(obj, component=component, dry_run=dry_run, guard=None)
        for attempt in itertools.count():
            try:
                guard = self._sync_allocations()
                return self._create(obj, component=component, dry_run=False, guard=guard)
            except GuardMovedError:
                if not self._racing(attempt):
                    raise
        raise AssertionError("unreachable")

    def _create(
        self, obj: KubeObject, *, component: str, dry_run: bool, guard: int | None
    ) -> KubeObject:
        if obj.name and self._get(obj.store_kind, obj.key) is not None:
            raise ConflictError(f"{obj.kind} {obj.key!r} already exists")
        adm = self._admit_create(obj, reserved=set(), uid_revision=self.store.revision + 1)
        if dry_run:
            adm.journal.rollback()
            return adm.obj
        try:
            stored = self._write(adm) if guard is None else self._write_guarded(adm, guard)
        except BaseException:
            adm.journal.rollback()
            raise
        adm.journal.commit()
        self._record(component, stored, "Created", _message("created", adm.notes))
        return stored

    def update(
        self, obj: KubeObject, *, component: str = "apiserver", dry_run: bool = False
    ) -> KubeObject:
        """Admit and store a new version of an existing object (CAS when
        ``metadata.resourceVersion`` is set). Returns the stored object; a no-op update
        returns the stored object unchanged without a write. ``dry_run``: admit only
        and return what would be stored."""
        if not self._guarded(obj) or dry_run:
            return self._update(obj, component=component, dry_run=dry_run, guard=None)
        for attempt in itertools.count():
            try:
                guard = self._sync_allocations()
                return self._update(obj, component=component, dry_run=False, guard=guard)
            except GuardMovedError:
                if not self._racing(attempt):
                    raise
        raise AssertionError("unreachable")

    def _update(
        self, obj: KubeObject, *, component: str, dry_run: bool, guard: int | None
    ) -> KubeObject:
        current = self.store.get(obj.store_kind, obj.key)
        if obj.metadata.resource_version and obj.resource_version != current.resource_version:
            raise ConflictError(
                f"{obj.ref}: the object has been modified; please apply your changes to the "
                f"latest version and try again (resourceVersion {obj.resource_version}, "
                f"stored {current.resource_version})"
            )
        adm = self._admit_update(obj, current)
        if adm.action == "unchanged":
            return current
        if dry_run:
            adm.journal.rollback()
            return adm.obj
        if current.metadata.deletion_timestamp is not None and not finalizers(adm.obj):
            # the last finalizer removed: the deletion completes (kube-apiserver's
            # graceful deletion of a finalized object); what is returned is the last state
            adm.journal.rollback()
            return self._remove(current, component, "deleted (its finalizers are done)")
        try:
            stored = self._write(adm) if guard is None else self._write_guarded(adm, guard)
        except BaseException:
            adm.journal.rollback()
            raise
        adm.journal.commit()
        self._record(
            component, stored, "Updated", _message(_spec_changes(current, stored), adm.notes)
        )
        return stored

    def update_status(
        self,
        obj: KubeObject,
        *,
        component: str = "apiserver",
        reason: str | None = None,
        message: str | None = None,
        event_type: str = "Normal",
    ) -> KubeObject:
        """Store ``obj.status`` on the stored object; nothing else of ``obj`` is taken and
        the spec is not re-validated. CAS when ``metadata.resourceVersion`` is set. No
        Event unless ``reason`` is given. No write if the status is unchanged."""
        if not _status_fields(obj):
            raise InvalidError(f"{obj.kind} has no status", obj=obj.ref, field="status")
        current = self.store.get(obj.store_kind, obj.key)
        if obj.metadata.resource_version and obj.resource_version != current.resource_version:
            raise ConflictError(
                f"{obj.ref}: status update on resourceVersion {obj.resource_version}, "
                f"stored {current.resource_version}"
            )
        status = obj.status  # type: ignore[attr-defined]
        if status == current.status:  # type: ignore[attr-defined]
            return current
        new = current.evolve(status=status)
        journal = Journal()
        new = strategy_for(new).restatus(new, current, self.alloc, journal) or new
        if new == current:
            return current
        try:
            stored = self.store.update(new, expected_version=current.resource_version)
        except BaseException:
            journal.rollback()
            raise
        journal.commit()
        if reason:
            self.recorder.record(
                component, stored, reason, message or "status updated", type_=event_type
            )
        return stored

    def bind(
        self,
        key: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
        *,
        uid: str | None = None,
        resource_version: int | None = None,
        component: str = "apiserver",
        dry_run: bool = False,
    ) -> Pod:
        """The ``pods/binding`` subresource: assign the Pod ``key`` (``ns/name``) to
        ``node``, as kube-apiserver's BindingREST does. Only ``spec.nodeName`` is set, the
        Binding's ``annotations`` are copied onto the pod and its ``PodScheduled``
        condition becomes True; nothing else of the pod is defaulted, admitted or
        validated again (it was on create and is not changed), and the generation stays.

        Refused, with nothing written: an invalid node name or annotation key
        (InvalidError); a ``uid`` or ``resource_version`` precondition the stored pod
        does not meet, a pod already assigned to a node or being deleted
        (ConflictError); a missing pod (NotFoundError). Records the ``Updated`` Event of
        any write that sets ``spec.nodeName`` (``updated spec.nodeName=NODE``).
        ``dry_run``: checked, and the pod that would be stored returned."""
        current = self.store.get(Pod.KIND, key)
        if not isinstance(current, Pod):
            raise NotFoundError(f"Pod {key!r} not found")
        ann = dict(annotations or {})
        validate_binding(current, node, ann)
        meta = current.metadata
        # kube-apiserver's wording (an HTTP 409 quotes it after the pod's name)
        if uid is not None and meta.uid != uid:
            raise ConflictError(
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.uid}"
            )
        if resource_version is not None and current.resource_version != resource_version:
            raise ConflictError(
                f"the ResourceVersion in the precondition ({resource_version}) does not match "
                f"the ResourceVersion in record ({current.resource_version}). "
                "The object might have been modified"
            )
        if current.is_terminating:
            raise ConflictError(
                f"pod {current.name} is being deleted, cannot be assigned to a host"
            )
        if current.spec.node_name:
            raise ConflictError(
                f'pod {current.name} is already assigned to node "{current.spec.node_name}"'
            )
        changes: dict[str, Any] = {"spec": current.spec.evolve(node_name=node)}
        if ann:
            changes["metadata"] = meta.evolve(annotations={**meta.annotations, **ann})
        conds = current.status.conditions
        old = current.condition("PodScheduled")
        if old is None or old.status != "True":
            cond = _POD_SCHEDULED.evolve(last_transition_time=self._now())
            kept = [c for c in conds if c.type != "PodScheduled"]
            changes["status"] = current.status.evolve(conditions=[*kept, cond])
        bound = current.evolve(**changes)
        if dry_run:
            return bound
        stored = self.store.update(bound, expected_version=current.resource_version)
        assert isinstance(stored, Pod)
        self._record(component, stored, "Updated", f"updated spec.nodeName={node}")
        return stored

    def delete(
        self,
        kind: str,
        key: str,
        *,
        component: str = "apiserver",
        force: bool = False,
        expected_version: int | None = None,
        propagation: str | None = None,
        grace_period: int | None = None,
    ) -> KubeObject:
        """Delete an object and free what it holds. Returns the last stored state.

        * ``propagation="Foreground"`` (DeleteOptions' propagationPolicy), for anything
          but a Pod or a Namespace: the object is only marked, as kube-apiserver does it
          (deletionTimestamp, and the ``foregroundDeletion`` finalizer); it stays while
          the garbage collector deletes its dependents, which then removes the
          finalizer, and the update that removes an object's last finalizer removes it
          (:meth:`update`).
        * Anything else but a Pod that has finalizers: only marked (deletionTimestamp),
          as kube-apiserver does; the update that removes its last finalizer removes it.

        * A Pod bound to a node is only marked (deletionTimestamp set, stays stored;
          marking twice is a no-op); the kubelet finishes it with
          :meth:`finalize_pod_deletion`. With ``force`` it is removed at once, marked or
          not (``kubectl delete --force --grace-period=0``). The mark records
          ``metadata.deletionGracePeriodSeconds``: ``grace_period`` (DeleteOptions'
          gracePeriodSeconds) or the pod's ``terminationGracePeriodSeconds`` (30): how
          long the kubelet lets it run (and serve, as terminating); and, as
          kube-apiserver sets it, ``deletionTimestamp`` = the time of the delete plus
          that grace period (when the pod is to be gone by).
        * A Namespace is marked Terminating (deletionTimestamp, ``status.phase``;
          marking twice is a no-op); :meth:`finalize_namespace` removes it once empty.
          ``default``, ``kube-system`` and ``kube-public``: InvalidError (Forbidden).
        * Anything else is removed at once.

        ``expected_version`` is a precondition (DeleteOptions' resourceVersion): unless the
        stored object has that resourceVersion, ConflictError and nothing changes."""
        current = self.store.get(kind, key)
        if expected_version is not None and current.resource_version != expected_version:
            raise ConflictError(
                f"{kind} {key!r}: the resourceVersion in the precondition ({expected_version}) "
                f"does not match the one in record ({current.resource_version})"
            )
        strategy = strategy_for(current)
        marked = strategy.graceful_delete(current, force=force, now=self._now())
        if marked is not None:
            if current.metadata.deletion_timestamp is not None:
                return current  # marked already
            obj = marked.obj
            if isinstance(obj, Pod):
                spec_grace = (obj.spec.model_extra or {}).get("terminationGracePeriodSeconds")
                grace = grace_period if grace_period is not None else spec_grace
                seconds = int(grace if grace is not None else 30)
                # as kube-apiserver: the time the pod is to be gone by
                obj = obj.with_meta(
                    deletion_timestamp=rfc3339(int(self.clock.now()) + seconds),
                    deletionGracePeriodSeconds=seconds,
                )
            stored = self.store.update(obj, expected_version=current.resource_version)
            self._record(component, stored, "Deleting", marked.message)
            return stored
        if strategy.honours_finalizers:
            held = self._hold_for_finalizers(current, component, propagation)
            if held is not None:
                return held
        return self._remove(current, component, strategy.deleted_message(current, force=force))

    def _hold_for_finalizers(
        self, current: KubeObject, component: str, propagation: str | None
    ) -> KubeObject | None:
        """The object as a delete leaves it stored while finalizers hold it (a foreground
        deletion adds its own), or None when nothing holds it."""
        if current.metadata.deletion_timestamp is not None:
            return current  # being deleted already (its finalizers are pending)
        if propagation == "Foreground":
            fins = finalizers(current)
            doomed = current.with_meta(
                deletion_timestamp=self._now(),
                finalizers=fins if FOREGROUND in fins else [*fins, FOREGROUND],
            )
            kept = self.store.update(doomed, expected_version=current.resource_version)
            self._record(
                component,
                kept,
                "Deleting",
                "marked for deletion in the foreground: the garbage collector deletes its "
                "dependents first",
            )
            return kept
        if fins := finalizers(current):
            kept = self.store.update(
                current.with_meta(deletion_timestamp=self._now()),
                expected_version=current.resource_version,
            )
            self._record(
                component,
                kept,
                "Deleting",
                f"marked for deletion: it goes once its finalizers ({', '.join(fins)}) are removed",
            )
            return kept
        return None

    def _remove(self, current: KubeObject, component: str, message: str) -> KubeObject:
        """Remove ``current`` from the store and free what it holds (its strategy's
        release: a Service's addresses and ports); returns the last state."""
        journal = Journal()
        released = strategy_for(current).release(current, self.alloc, journal)
        notes = [f"released {n}" for n in released]
        deleted = self.store.delete(
            current.store_kind, current.key, expected_version=current.resource_version
        )
        journal.commit()
        self._record(component, deleted, "Deleted", _message(message, notes))
        return deleted

    def finalize_namespace(
        self, name: str, *, component: str = "namespace-controller"
    ) -> KubeObject | None:
        """Remove a Terminating Namespace for good (the namespace controller's last step;
        Kubernetes' ``/finalize``). Refused while it is not Terminating (InvalidError) or
        still holds namespaced objects (ConflictError; Events do not count: the timeline
        outlives what it describes). Returns the last stored state; None if already gone."""
        current = self._get(Namespace.KIND, name)
        if current is None:
            return None
        if current.metadata.deletion_timestamp is None:
            raise InvalidError(
                "Forbidden: the namespace is not being deleted", obj=current.ref, field=None
            )
        left = [
            f"{len(objs)} {kind}"
            for kind in sorted(r.store_kind for r in stored_rows() if r.namespaced and r.store_kind)
            if strategy_of(kind).holds_namespace and (objs := self.store.list(kind, name))
        ]
        if left:
            raise ConflictError(f"{current.ref}: still holds {', '.join(left)}")
        deleted = self.store.delete(Namespace.KIND, name, expected_version=current.resource_version)
        self._record(component, deleted, "Deleted", "deleted (nothing left in it)")
        return deleted

    def finalize_pod_deletion(self, key: str) -> None:
        """Remove a Pod for good (the kubelet's last step). Idempotent: a Pod already gone
        is fine."""
        try:
            current = self.store.get(Pod.KIND, key)
        except NotFoundError:
            return
        deleted = self.store.delete(Pod.KIND, key, expected_version=current.resource_version)
        self._record("kubelet", deleted, "Deleted", "deleted")

    def apply(
        self,
        objs: Sequence[KubeObject],
        *,
        source: str | None = None,
        documents: Sequence[int] | None = None,
        dry_run: bool = False,
    ) -> list[tuple[str, KubeObject]]:
        """kubectl-apply-like: create or update each object, in order.

        All objects are admitted first, then written inside one ``store.transaction()``.
        Any error raises an :class:`InputError` naming ``source`` (the file), the document
        (``documents[i]`` if given, else the 1-based position in ``objs``), the object and
        the field; then nothing is stored and the revision is unchanged.
        ``metadata.resourceVersion`` in the objects is ignored (replayed dumps apply); a
        ``metadata.uid`` is kept on create, and Pods created with ``spec.nodeName`` and
        ``status.podIP(s)`` keep those addresses once :mod:`.podips` has checked them
        (a replayed ``kubectl get -A -o yaml`` dump keeps its identities and addresses).
        Returns ``(action, object)`` per input, action ``created`` / ``configured`` /
        ``unchanged``. ``dry_run`` (``kubectl apply --dry-run=server``): every object
        admitted and checked as above, then nothing written or allocated; the results
        are what would be stored."""
        with bulk():  # many acyclic values made at once: no GC rescans (store.base)
            return self._apply(objs, source, documents, dry_run)

    def _apply(
        self,
        objs: Sequence[KubeObject],
        source: str | None,
        documents: Sequence[int] | None,
        dry_run: bool = False,
    ) -> list[tuple[str, KubeObject]]:
        plan: list[_Admitted] = []
        batch: dict[tuple[str, str], KubeObject] = {}
        reserved: set[str] = set()  # keys taken in this batch (for generateName)
        try:
            for i, obj in enumerate(objs):
                doc = documents[i] if documents is not None else i + 1
                try:
                    plan.append(self._admit_apply(obj, batch, reserved))
                except InputError as e:
                    raise _holder_in_batch(e, plan).located(file=source, document=doc) from None
                except SvclabError as e:
                    raise InputError(str(e), file=source, document=doc, obj=obj.ref) from None
            self._check_created(plan, batch, source, documents)
            if dry_run:
                for adm in reversed(plan):
                    adm.journal.rollback()
                return [(adm.action, adm.obj) for adm in plan]
            results: list[tuple[str, KubeObject]] = []
            with self.store.transaction():
                for adm in plan:
                    if adm.action == "unchanged":
                        results.append((adm.action, adm.obj))
                        continue
                    stored = self._write(adm)
                    verb = "Created" if adm.action == "created" else "Updated"
                    self._record("apiserver", stored, verb, _message(verb.lower(), adm.notes))
                    results.append((adm.action, stored))
        except BaseException:
            for adm in reversed(plan):
                adm.journal.rollback()
            raise
        for adm in plan:
            adm.journal.commit()
        return results

    def _check_created(
        self,
        plan: Sequence[_Admitted],
        batch: dict[tuple[str, str], KubeObject],
        source: str | None,
        documents: Sequence[int] | None,
    ) -> None:
        """The objects the batch creates, checked by their strategies once the whole
        batch is admitted (a dump's Pods with recorded addresses, :mod:`.podips`, whose
        Nodes may come after them); the first problem, in batch order, is raised."""
        created: dict[str, list[int]] = {}
        for i, adm in enumerate(plan):
            if adm.action == "created":
                created.setdefault(adm.obj.store_kind, []).append(i)
        view = BatchView(batch, self.store, self.cluster)
        found: list[tuple[int, InputError]] = []
        for kind, at in created.items():
            problems = strategy_of(kind).check_created([plan[i].obj for i in at], view)
            found += [(at[j], err) for j, err in problems]
        if found:
            i, err = min(found, key=lambda f: f[0])
            raise err.located(file=source, document=documents[i] if documents else i + 1)

    # ------------------------------------------------------------------ admission

    def _admit_apply(
        self, obj: KubeObject, batch: dict[tuple[str, str], KubeObject], reserved: set[str]
    ) -> _Admitted:
        obj = obj.with_meta(resource_version=None) if obj.metadata.resource_version else obj
        ident = (obj.store_kind, obj.key)
        current = batch.get(ident) or (self._get(obj.store_kind, obj.key) if obj.name else None)
        if current is None:
            adm = self._admit_create(obj, reserved=reserved, keep_uid=True)
        else:
            adm = self._admit_update(obj, current)
            if ident in batch:
                adm.expected_version = None  # written earlier in this batch
        batch[(adm.obj.store_kind, adm.obj.key)] = adm.obj
        reserved.add(adm.obj.key)
        return adm

    def _admit_create(
        self,
        obj: KubeObject,
        *,
        reserved: set[str],
        uid_revision: int | None = None,
        keep_uid: bool = False,
    ) -> _Admitted:
        """``uid_revision``: the revision the write will get, when known (then the uid is
        set here; otherwise at write time). ``keep_uid`` (apply): a uid the object
        carries is kept, so that a replayed dump's ownerReferences still name their
        owners (else the garbage collector would take every dependent for an orphan of a
        deleted owner)."""
        given = obj.metadata.uid if keep_uid else None
        obj = self._new_metadata(obj, reserved, uid_revision)
        if given:
            obj = obj.with_meta(uid=given)
        obj = default(obj, self.cluster)
        validate(obj, self.cluster)
        self._check_namespace_active(obj)
        journal = Journal()
        try:
            obj, notes = strategy_for(obj).admit(obj, None, self.alloc, journal)
        except BaseException:
            journal.rollback()
            raise
        return _Admitted("created", obj, None, notes, journal)

    def _admit_update(self, obj: KubeObject, current: KubeObject) -> _Admitted:
        merged = default(self._merge(obj, current), self.cluster)
        validate(merged, self.cluster, current)
        validate_update(merged, current)
        journal = Journal()
        try:
            merged, notes = strategy_for(merged).admit(merged, current, self.alloc, journal)
        except BaseException:
            journal.rollback()
            raise
        if merged == current:
            return _Admitted("unchanged", current, current.resource_version, [], journal)
        if strategy_for(merged).counts_generation and _spec_changed(merged, current):
            merged = merged.with_meta(generation=(current.metadata.generation or 1) + 1)
        return _Admitted("configured", merged, current.resource_version, notes, journal)

    def _check_namespace_active(self, obj: KubeObject) -> None:
        """NamespaceLifecycle: nothing new goes into a Terminating namespace."""
        if not obj.NAMESPACED:
            return
        ns = self._get(Namespace.KIND, obj.namespace)
        if ns is not None and ns.metadata.deletion_timestamp is not None:
            raise InvalidError(
                f"Forbidden: unable to create new content in namespace {obj.namespace} "
                "because it is being terminated",
                obj=obj.ref,
                field=None,
            )

    def _new_metadata(
        self, obj: KubeObject, reserved: set[str], uid_revision: int | None
    ) -> KubeObject:
        meta = obj.metadata
        ch: dict[str, Any] = {
            "creation_timestamp": self._now(),
            "resource_version": None,
            "deletion_timestamp": None,
            "uid": None,
        }
        if strategy_for(obj).counts_generation:
            ch["generation"] = 1
        if obj.NAMESPACED:
            if not meta.namespace:
                ch["namespace"] = "default"
        elif meta.namespace is not None:
            ch["namespace"] = None
        if not meta.name:
            if not meta.generate_name:
                raise InvalidError(
                    "Required value: name or generateName is required",
                    obj=f"{obj.kind}/{meta.namespace or ''}/".rstrip("/"),
                    field="metadata.name",
                )
            ns = ch.get("namespace", meta.namespace) or ""
            ch["name"] = self._generate_name(obj.store_kind, ns, meta.generate_name, reserved)
        if uid_revision is not None:
            ns = ch.get("namespace", meta.namespace) or ""
            name = ch.get("name", meta.name)
            key = f"{ns}/{name}" if obj.NAMESPACED else name
            ch["uid"] = _uid(obj.kind, key, uid_revision)
        return obj.with_meta(**ch)

    def _generate_name(self, kind: str, namespace: str, base: str, reserved: set[str]) -> str:
        """``base`` + 5 characters, deterministic in (kind, namespace, base, revision)."""
        base = base[:_MAX_GENERATED_BASE]
        for attempt in itertools.count():
            seed = f"{kind}/{namespace}/{base}/{self.store.revision}/{attempt}".encode()
            digest = hashlib.sha256(seed).digest()
            name = base + "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:5])
            key = f"{namespace}/{name}" if namespace else name
            if key not in reserved and self._get(kind, key) is None:
                return name
        raise AssertionError("unreachable")

    def _merge(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        """The object an update stores: ``obj``'s metadata (labels, annotations, owners,
        ...) and spec, the stored identity fields, and the stored status (Service
        status.loadBalancer.ingress may be given, as in a replayed manifest). Values the
        control plane assigned and ``obj`` leaves unset are kept (its strategy's keep_assigned)."""
        strategy = strategy_for(obj)
        obj = strategy.keep_assigned(obj, current)
        cm, om = current.metadata, obj.metadata
        identity = {
            "name": cm.name,
            "namespace": cm.namespace,
            "generate_name": cm.generate_name,
            "uid": cm.uid,
            "resource_version": cm.resource_version,
            "generation": cm.generation,
            "creation_timestamp": cm.creation_timestamp,
            "deletion_timestamp": cm.deletion_timestamp,
        }
        ch: dict[str, Any] = {}
        if any(getattr(om, k) != v for k, v in identity.items()):
            ch["metadata"] = om.evolve(**identity)
        if _status_fields(current):
            keep_given = strategy.keeps_given_status(obj)
            status = current.status  # type: ignore[attr-defined]
            if not keep_given and obj.status is not status:  # type: ignore[attr-defined]
                ch["status"] = status
        return obj.evolve(**ch) if ch else obj

    # ------------------------------------------------------------------ writes

    def _write(self, adm: _Admitted) -> KubeObject:
        if adm.action == "created":
            obj = adm.obj
            if obj.metadata.uid is None:  # apply: the revision is known only now
                obj = obj.with_meta(uid=_uid(obj.kind, obj.key, self.store.revision + 1))
                hook = getattr(strategy_for(obj), "uid_assigned", None)
                if hook is not None:  # e.g. a Job's generated selector names its uid
                    obj = hook(obj)
            return self.store.create(obj)
        obj = adm.obj
        if obj.metadata.uid is None:  # created earlier in the same apply batch
            obj = obj.with_meta(uid=self.store.get(obj.store_kind, obj.key).metadata.uid)
        return self.store.update(obj, expected_version=adm.expected_version)

    def _record(self, component: str, obj: KubeObject, reason: str, message: str) -> None:
        if not strategy_for(obj).records_events:
            return
        if obj.store_kind == CRD_KIND:  # its kinds are served from now on (or no more)
            crds.sync(self.store)
        # the write it follows: a Deleted object still carries its last resourceVersion
        self.recorder.record(component, obj, reason, message, revision=self.store.revision)

    # ------------------------------------------------------------------ helpers

    def _get(self, kind: str, key: str) -> KubeObject | None:
        try:
            return self.store.get(kind, key)
        except NotFoundError:
            return None

    def _now(self) -> str:
        t = int(self.clock.now())
        if t != self._now_cache[0]:
            self._now_cache = (t, rfc3339(t))
        return self._now_cache[1]


def _holder_in_batch(e: InputError, plan: Sequence[_Admitted]) -> InputError:
    """An allocation refused because an object admitted earlier in the same apply holds
    the address or port: say so, since that object is rolled back with the apply and is
    then nowhere to be found (the allocators' message names the holder ``(to REF)``)."""
    for adm in plan:
        held = f"(to {adm.obj.ref})"
        if adm.action == "created" and e.reason.endswith(held):
            reason = e.reason[: -len(held)] + f"(to {adm.obj.ref}, earlier in this apply)"
            return type(e)(reason, file=e.file, document=e.document, obj=e.obj, field=e.field)
    return e
