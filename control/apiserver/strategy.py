"""What the apiserver does per kind, behind one protocol (kube-apiserver's generic
registry: ``RESTCreateStrategy``, ``RESTUpdateStrategy``, ``RESTDeleteStrategy`` and its
printers): defaulting, validation on create and on update, the fields an update keeps
as the control plane assigned them, whether writes count a ``metadata.generation``,
admission and release of allocations (a Service's clusterIPs and nodePorts), the checks
made once an ``apply`` batch is admitted (a dump's recorded Pod addresses), how a delete
goes (at once, graceful, held by finalizers), and the Table rows of ``kubectl get``.

:func:`strategy_for` gives an object's :class:`Strategy` (:func:`strategy_of` a store
kind's): its own (Service, Pod, Deployment and ReplicaSet, EndpointSlice, Node,
Namespace, Event; ConfigMap, Secret and ServiceAccount from :mod:`.configkinds`), else
the no-op :class:`GenericStrategy`: a kind served through the generic path needs no
code beyond its row in :mod:`netmodel.kinds`. A strategy of a new kind subclasses
:class:`GenericStrategy` and overrides what its kind does; it is registered in
:data:`STRATEGIES` under its store kind. :func:`default`, :func:`validate` and
:func:`validate_update` are what the apiserver calls; the metadata checks every object
passes (name, namespace, labels, annotations, owner references) are made there, not by
strategies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from control.apiserver import configkinds
from control.apiserver.admission import Allocations, BatchView
from control.apiserver.allocators import Journal
from control.apiserver.defaults import (
    default_deployment,
    default_endpointslice,
    default_namespace,
    default_pod,
    default_replicaset,
    default_service,
)
from control.apiserver.http import tables
from control.apiserver.http.resources import Resource
from control.apiserver.podips import check_recorded_pod_ips, recorded_ips
from control.apiserver.validation import (
    Problems,
    selector_text,
    validate_deployment,
    validate_endpointslice,
    validate_metadata,
    validate_node,
    validate_pod_spec,
    validate_pod_status,
    validate_service,
    validate_workload,
)
from netmodel import kinds
from netmodel.cluster import ClusterSpec
from netmodel.errors import InputError, InvalidError
from netmodel.objects import (
    Deployment,
    EndpointSlice,
    GenericObject,
    KubeObject,
    Namespace,
    Node,
    Pod,
    ReplicaSet,
    Service,
)

#: Namespaces that may not be deleted (kube-apiserver's NamespaceLifecycle admission)
UNDELETABLE_NAMESPACES = ("default", "kube-system", "kube-public")


@dataclass(frozen=True)
class Marked:
    """A graceful deletion: the object as it stays stored, marked (deletionTimestamp and
    whatever else the kind sets), and the message of its ``Deleting`` Event."""

    obj: KubeObject
    message: str


class Strategy(Protocol):
    """One kind's rules. ``default`` returns the object with unset fields filled in
    (idempotent); ``validate`` / ``validate_update`` raise the first problem through
    ``p`` (an :class:`~netmodel.errors.InvalidError`) and return None for a valid object
    (``stored``: the version an update replaces, None on create); ``keep_assigned``
    returns an update's object with the fields the control plane assigned and the update
    leaves unset taken from ``current``.

    Allocations: ``admit`` takes what a create (``old`` None) or an update needs from
    ``alloc`` and returns the object with it filled in, and notes (``clusterIP
    10.96.0.10``) for the Event; ``restatus`` does so for a status write; ``release``
    frees what a removed object held (notes for the Event). All through ``journal``,
    which the apiserver commits when the write succeeds and rolls back otherwise.
    ``check_created`` checks the objects of this kind one ``apply`` creates, once the
    whole batch is admitted, against ``batch``: ``[(index into objs, error)]`` for the
    first problem, or nothing.

    Deletion: ``graceful_delete`` returns the :class:`Marked` object a delete leaves
    stored (a bound Pod for its kubelet, a Namespace for its controller), or None: then
    the generic rules apply (finalizers and foreground deletion only mark it, when
    ``honours_finalizers``; else it is removed at once, the Event saying
    ``deleted_message``). It may refuse (InvalidError) to delete at all.

    Tables: ``table_columns`` and ``table_row`` are the Table (``kubectl get``) of the
    resource ``res`` serving this kind: kube-apiserver's columns
    (:mod:`.http.tables`), or the kind's own."""

    #: whether create sets ``metadata.generation`` and a spec change bumps it
    counts_generation: bool
    #: whether its writes are recorded as Events (Events are not)
    records_events: bool
    #: whether its objects keep a Terminating Namespace from being finalized (Events do
    #: not: the timeline outlives what it describes)
    holds_namespace: bool
    #: whether finalizers and foreground deletion only mark its objects
    honours_finalizers: bool
    #: whether a DELETE answers with the deleted object (kube's ReturnDeletedObject)
    #: rather than a Status
    returns_deleted_object: bool
    #: the field that binds its objects to a node (``spec.nodeName``), or names one
    #: (``metadata.name``): a watch selecting on it is a node's (the kubelet's)
    node_field: str | None

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject: ...

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None: ...

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None: ...

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject: ...

    def keeps_given_status(self, obj: KubeObject) -> bool:
        """Whether an update keeps the status ``obj`` brings (else the stored one)."""
        ...

    def admit(
        self, obj: KubeObject, old: KubeObject | None, alloc: Allocations, journal: Journal
    ) -> tuple[KubeObject, list[str]]: ...

    def restatus(
        self, obj: KubeObject, old: KubeObject, alloc: Allocations, journal: Journal
    ) -> None: ...

    def release(self, obj: KubeObject, alloc: Allocations, journal: Journal) -> list[str]: ...

    def check_created(
        self, objs: Sequence[KubeObject], batch: BatchView
    ) -> list[tuple[int, InputError]]: ...

    def graceful_delete(self, obj: KubeObject, *, force: bool, now: str) -> Marked | None: ...

    def deleted_message(self, obj: KubeObject, *, force: bool) -> str: ...

    def table_columns(self, res: Resource) -> list[dict[str, Any]]: ...

    def table_row(self, res: Resource, obj: Any, now: float) -> list[Any]: ...


class GenericStrategy:
    """No defaults, no checks beyond the metadata ones, nothing assigned, nothing
    allocated; deleted at once unless finalizers hold it; kube-apiserver's Table columns
    (name and age for a kind without columns of its own). Kinds served through the
    generic path count no generation (kube-apiserver counts none for ConfigMaps and the
    like); typed kinds without rules of their own (RBAC) do, as svclab always has.
    Strategies of other kinds subclass it and override what their kind does."""

    records_events: bool = True
    holds_namespace: bool = True
    honours_finalizers: bool = True
    returns_deleted_object: bool = False
    node_field: str | None = None

    def __init__(self, *, counts_generation: bool = False) -> None:
        self.counts_generation = counts_generation

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        return obj

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        return None

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        return None

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        return obj

    def keeps_given_status(self, obj: KubeObject) -> bool:
        return False

    def admit(
        self, obj: KubeObject, old: KubeObject | None, alloc: Allocations, journal: Journal
    ) -> tuple[KubeObject, list[str]]:
        return obj, []

    def restatus(
        self, obj: KubeObject, old: KubeObject, alloc: Allocations, journal: Journal
    ) -> None:
        return None

    def release(self, obj: KubeObject, alloc: Allocations, journal: Journal) -> list[str]:
        return []

    def check_created(
        self, objs: Sequence[KubeObject], batch: BatchView
    ) -> list[tuple[int, InputError]]:
        return []

    def graceful_delete(self, obj: KubeObject, *, force: bool, now: str) -> Marked | None:
        return None

    def deleted_message(self, obj: KubeObject, *, force: bool) -> str:
        return "deleted"

    def table_columns(self, res: Resource) -> list[dict[str, Any]]:
        return tables.columns(res)

    def table_row(self, res: Resource, obj: Any, now: float) -> list[Any]:
        return tables.row_cells(res, obj, now)


class ConfigStrategy(GenericStrategy):
    """ConfigMap, Secret, ServiceAccount: :mod:`.configkinds`."""

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        return configkinds.default(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        configkinds.validate(obj, p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        configkinds.validate_update(obj, old, p)


class ServiceStrategy(GenericStrategy):
    """Defaults and validation; its clusterIPs, nodePorts and LoadBalancer IPs are
    allocated on admission and freed when it is removed (:mod:`.services`); a status
    write that brings LoadBalancer ingress takes those addresses, and an update that
    brings ingress keeps it (a replayed manifest). A DELETE returns the deleted Service."""

    returns_deleted_object = True

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, Service)
        return default_service(obj, cluster)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, Service)
        validate_service(obj, cluster, p)

    def keeps_given_status(self, obj: KubeObject) -> bool:
        return isinstance(obj, Service) and bool(obj.status.load_balancer.ingress)

    def admit(
        self, obj: KubeObject, old: KubeObject | None, alloc: Allocations, journal: Journal
    ) -> tuple[KubeObject, list[str]]:
        assert isinstance(obj, Service)
        if old is not None and not isinstance(old, Service):
            return obj, []
        return alloc.services.admit(obj, old, journal)

    def restatus(
        self, obj: KubeObject, old: KubeObject, alloc: Allocations, journal: Journal
    ) -> None:
        if isinstance(obj, Service) and isinstance(old, Service):
            alloc.services.restatus(obj, old, journal)

    def release(self, obj: KubeObject, alloc: Allocations, journal: Journal) -> list[str]:
        assert isinstance(obj, Service)
        return alloc.services.release(obj, journal)


class PodStrategy(GenericStrategy):
    """A Pod's spec or status equal to its stored one is not checked again (an
    annotation patch re-parsed every address of the pod); nodeName is kept once set.
    Pods an ``apply`` creates with recorded addresses keep them once :mod:`.podips` has
    checked them against their nodes and the other pods. Deleting a Pod bound to a node
    only marks it (its kubelet finishes it) unless forced; finalizers do not hold it. A
    DELETE returns the deleted Pod."""

    honours_finalizers = False
    returns_deleted_object = True
    node_field: str | None = "spec.nodeName"

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, Pod)
        return default_pod(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, Pod)
        old = stored if isinstance(stored, Pod) else None
        if old is None or obj.spec != old.spec:
            validate_pod_spec(obj.spec, "spec", p)
        if old is None or obj.status != old.status:
            validate_pod_status(obj, p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        if not (isinstance(obj, Pod) and isinstance(old, Pod)):
            return
        if old.spec.node_name and obj.spec.node_name != old.spec.node_name:
            p.forbidden("spec.nodeName", "pod updates may not change nodeName once set")

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        """The scheduler's nodeName."""
        if (
            isinstance(obj, Pod)
            and isinstance(current, Pod)
            and not obj.spec.node_name
            and current.spec.node_name
        ):
            return obj.evolve(spec=obj.spec.evolve(node_name=current.spec.node_name))
        return obj

    def check_created(
        self, objs: Sequence[KubeObject], batch: BatchView
    ) -> list[tuple[int, InputError]]:
        at = [i for i, o in enumerate(objs) if isinstance(o, Pod) and recorded_ips(o)]
        if not at:
            return []

        def node(name: str) -> Node | None:
            n = batch.get(Node.KIND, name)
            return n if isinstance(n, Node) else None

        pods = [objs[i] for i in at]
        held = [p for p in batch.store.list(Pod.KIND) if isinstance(p, Pod)]
        cluster = batch.cluster
        pools = cluster.calico_pools if cluster.cni == "calico" else None
        found = check_recorded_pod_ips(pods, node=node, held=held, pools=pools)  # type: ignore[arg-type]
        return [(at[j], err) for j, err in found]

    def graceful_delete(self, obj: KubeObject, *, force: bool, now: str) -> Marked | None:
        if force or not isinstance(obj, Pod) or not obj.spec.node_name:
            return None
        return Marked(
            obj.with_meta(deletion_timestamp=now),
            f"marked for deletion; the kubelet on {obj.spec.node_name} finishes it",
        )

    def deleted_message(self, obj: KubeObject, *, force: bool) -> str:
        if force and isinstance(obj, Pod) and obj.spec.node_name:
            return f"deleted at once (force, grace period 0; was on {obj.spec.node_name})"
        return "deleted"


class DeploymentStrategy(GenericStrategy):
    """Deployments (:func:`.validation.validate_deployment`); the selector is immutable."""

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, Deployment)
        return default_deployment(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, Deployment)
        validate_deployment(obj, p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        if (
            isinstance(obj, Deployment)
            and isinstance(old, Deployment)
            and obj.spec.selector != old.spec.selector
        ):
            p.invalid("spec.selector", selector_text(obj.spec.selector), "field is immutable")


class ReplicaSetStrategy(GenericStrategy):
    """ReplicaSets (:func:`.validation.validate_workload`)."""

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, ReplicaSet)
        return default_replicaset(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, ReplicaSet)
        validate_workload(obj, p)


class EndpointSliceStrategy(GenericStrategy):
    """addressType is immutable."""

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, EndpointSlice)
        return default_endpointslice(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, EndpointSlice)
        validate_endpointslice(obj, p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        if (
            isinstance(obj, EndpointSlice)
            and isinstance(old, EndpointSlice)
            and obj.address_type != old.address_type
        ):
            p.invalid("addressType", obj.address_type, "field is immutable")


class NodeStrategy(GenericStrategy):
    """podCIDR changes only from unset; node IPAM's podCIDR(s) are kept."""

    node_field: str | None = "metadata.name"

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, Node)
        validate_node(obj, cluster, p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        if (
            isinstance(obj, Node)
            and isinstance(old, Node)
            and old.spec.pod_cidr
            and obj.spec.pod_cidr != old.spec.pod_cidr
        ):
            p.forbidden(
                "spec.podCIDR", 'node updates may not change podCIDR except from "" to valid'
            )

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        if not (isinstance(obj, Node) and isinstance(current, Node)):
            return obj
        if not obj.spec.pod_cidr and not obj.spec.pod_cidrs and current.spec.pod_cidr:
            spec = obj.spec.evolve(
                pod_cidr=current.spec.pod_cidr, pod_cidrs=list(current.spec.pod_cidrs)
            )
            return obj.evolve(spec=spec)
        return obj


class NamespaceStrategy(GenericStrategy):
    """The ``kubernetes.io/metadata.name`` label and phase Active. Deleting a Namespace
    marks it Terminating (deletionTimestamp, ``status.phase``); its controller empties
    it and removes it (``/finalize``). ``default``, ``kube-system`` and ``kube-public``
    may not be deleted."""

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, Namespace)
        return default_namespace(obj)

    def graceful_delete(self, obj: KubeObject, *, force: bool, now: str) -> Marked | None:
        assert isinstance(obj, Namespace)
        if obj.name in UNDELETABLE_NAMESPACES:
            raise InvalidError(
                "Forbidden: this namespace may not be deleted", obj=obj.ref, field=None
            )
        marked = obj.with_meta(deletion_timestamp=now).evolve(
            status={**obj.status, "phase": "Terminating"}
        )
        return Marked(
            marked,
            "marked Terminating; the namespace controller deletes everything in it, then it",
        )


class EventStrategy(GenericStrategy):
    """Events: the timeline. Their own writes are not recorded as Events, they count no
    generation, and they do not keep a Terminating namespace from going."""

    records_events = False
    holds_namespace = False


GENERIC: Strategy = GenericStrategy()
#: typed kinds with no rules of their own (RBAC)
TYPED_NO_RULES: Strategy = GenericStrategy(counts_generation=True)
_CONFIG = ConfigStrategy()
#: store kind -> its strategy
STRATEGIES: dict[str, Strategy] = {
    "Service": ServiceStrategy(counts_generation=True),
    "Pod": PodStrategy(counts_generation=True),
    "Deployment": DeploymentStrategy(counts_generation=True),
    "ReplicaSet": ReplicaSetStrategy(counts_generation=True),
    "EndpointSlice": EndpointSliceStrategy(counts_generation=True),
    "Node": NodeStrategy(counts_generation=True),
    "Namespace": NamespaceStrategy(counts_generation=True),
    "Event": EventStrategy(),
    **dict.fromkeys(configkinds.KINDS, _CONFIG),
}


def strategy_of(store_kind: str | None) -> Strategy:
    """The strategy of the objects kept under ``store_kind``: its own, else the no-op
    one (counting generations for typed kinds, not for kinds served through the generic
    path). ``None`` (a resource computed on read): the no-op one."""
    s = STRATEGIES.get(store_kind) if store_kind is not None else None
    if s is not None:
        return s
    if store_kind is None:
        return GENERIC
    cls = kinds.KINDS.get(store_kind)  # a dict lookup: this is asked per Table row
    typed = cls is not None and not issubclass(cls, GenericObject)
    return TYPED_NO_RULES if typed else GENERIC


def strategy_for(obj: KubeObject) -> Strategy:
    """``obj``'s strategy (:func:`strategy_of` its store kind)."""
    return strategy_of(obj.store_kind)


def default(obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
    """``obj`` with its kind's defaults (idempotent)."""
    return strategy_for(obj).default(obj, cluster)


def validate(obj: KubeObject, cluster: ClusterSpec, stored: KubeObject | None = None) -> None:
    """Raise InvalidError for the first problem of a defaulted object: the metadata
    checks, then its kind's. ``stored``: the version an update replaces."""
    p = Problems(obj.ref)
    validate_metadata(obj, p)
    strategy_for(obj).validate(obj, cluster, p, stored)


def validate_update(obj: KubeObject, old: KubeObject) -> None:
    """Raise InvalidError if ``obj`` changes what its kind keeps immutable in ``old``."""
    strategy_for(obj).validate_update(obj, old, Problems(obj.ref))
