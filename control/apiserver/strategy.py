"""What the apiserver does per kind, behind one protocol (kube-apiserver's
``RESTCreateStrategy`` / ``RESTUpdateStrategy``): defaulting, validation on create and
on update, the fields an update keeps as the control plane assigned them, and whether
writes count a ``metadata.generation``.

:func:`strategy_for` gives a store kind's :class:`Strategy`: its own (Service, Pod,
Deployment and ReplicaSet, EndpointSlice, Node, Namespace; ConfigMap, Secret and
ServiceAccount from :mod:`.configkinds`), else the no-op :class:`GenericStrategy`: a
kind served through the generic path needs no code beyond its row in
:mod:`netmodel.kinds`. :func:`default`, :func:`validate` and :func:`validate_update`
are what the apiserver calls; the metadata checks every object passes (name, namespace,
labels, annotations, owner references) are made there, not by strategies.

Not here yet (issue 23): admission and release of allocations (Service clusterIPs and
nodePorts, :mod:`.services`), delete modes, Table rows.
"""

from __future__ import annotations

from typing import Protocol

from control.apiserver import configkinds, replication
from control.apiserver.defaults import (
    default_deployment,
    default_endpointslice,
    default_namespace,
    default_pod,
    default_replicaset,
    default_service,
)
from control.apiserver.validation import (
    Problems,
    selector_text,
    validate_endpointslice,
    validate_metadata,
    validate_node,
    validate_pod_spec,
    validate_pod_status,
    validate_service,
    validate_workload,
)
from netmodel.cluster import ClusterSpec
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


class Strategy(Protocol):
    """One kind's admission rules. ``default`` returns the object with unset fields
    filled in (idempotent); ``validate`` / ``validate_update`` raise the first problem
    through ``p`` (an :class:`~netmodel.errors.InvalidError`) and return None for a
    valid object (``stored``: the version an update replaces, None on create);
    ``keep_assigned`` returns an update's object with the fields the control plane
    assigned and the update leaves unset taken from ``current``."""

    #: whether create sets ``metadata.generation`` and a spec change bumps it
    counts_generation: bool

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject: ...

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None: ...

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None: ...

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject: ...


class GenericStrategy:
    """No defaults, no checks beyond the metadata ones, nothing assigned. Kinds served
    through the generic path count no generation (kube-apiserver counts none for
    ConfigMaps and the like); typed kinds without rules of their own (Events, RBAC) do,
    as svclab always has."""

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
    """Defaults and validation; its clusterIPs and nodePorts are kept and allocated by
    its admission (:mod:`.services`), which the apiserver still calls by type."""

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, Service)
        return default_service(obj, cluster)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, Service)
        validate_service(obj, cluster, p)


class PodStrategy(GenericStrategy):
    """A Pod's spec or status equal to its stored one is not checked again (an
    annotation patch re-parsed every address of the pod); nodeName is kept once set."""

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


class WorkloadStrategy(GenericStrategy):
    """Deployment and ReplicaSet; a Deployment's selector is immutable."""

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        if isinstance(obj, Deployment):
            return default_deployment(obj)
        assert isinstance(obj, ReplicaSet)
        return default_replicaset(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, Deployment | ReplicaSet)
        validate_workload(obj, p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        if (
            isinstance(obj, Deployment)
            and isinstance(old, Deployment)
            and obj.spec.selector != old.spec.selector
        ):
            p.invalid("spec.selector", selector_text(obj.spec.selector), "field is immutable")


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
    """The ``kubernetes.io/metadata.name`` label and phase Active."""

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, Namespace)
        return default_namespace(obj)


class ReplicationControllerStrategy(GenericStrategy):
    """ReplicationController: :mod:`.replication`."""

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        return replication.default(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        replication.validate(obj, p)


GENERIC: Strategy = GenericStrategy()
#: typed kinds with no rules of their own (Events, RBAC)
TYPED_NO_RULES: Strategy = GenericStrategy(counts_generation=True)
_CONFIG = ConfigStrategy()
_WORKLOAD = WorkloadStrategy(counts_generation=True)
#: store kind -> its strategy
STRATEGIES: dict[str, Strategy] = {
    "Service": ServiceStrategy(counts_generation=True),
    "Pod": PodStrategy(counts_generation=True),
    "Deployment": _WORKLOAD,
    "ReplicaSet": _WORKLOAD,
    "EndpointSlice": EndpointSliceStrategy(counts_generation=True),
    "Node": NodeStrategy(counts_generation=True),
    "Namespace": NamespaceStrategy(counts_generation=True),
    **dict.fromkeys(configkinds.KINDS, _CONFIG),
    "ReplicationController": ReplicationControllerStrategy(counts_generation=True),
}


def strategy_for(obj: KubeObject) -> Strategy:
    """``obj``'s strategy: its kind's own, else the no-op one (counting generations for
    typed kinds, not for generic ones)."""
    s = STRATEGIES.get(obj.kind)
    if s is not None:
        return s
    return GENERIC if isinstance(obj, GenericObject) else TYPED_NO_RULES


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
