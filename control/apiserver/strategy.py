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

from control.apiserver import (
    configkinds,
    crds,
    ephemeral,
    kinds_networking,
    kinds_policy,
    kinds_storage,
    replication,
    servicecidrkinds,
)
from control.apiserver.admission import Allocations, BatchView, default_toleration_seconds
from control.apiserver.allocators import Journal
from control.apiserver.batchkinds import CronJobStrategy, JobStrategy
from control.apiserver.daemonsets import DaemonSetStrategy
from control.apiserver.defaults import (
    default_deployment,
    default_endpointslice,
    default_namespace,
    default_pod,
    default_replicaset,
    default_service,
)
from control.apiserver.podips import check_recorded_pod_ips, recorded_ips
from control.apiserver.statefulsets import StatefulSetStrategy
from control.apiserver.strategybase import GenericStrategy, Marked, Strategy
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
from netmodel.customresources import CustomResource
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



__all__ = ["GenericStrategy", "Marked", "Strategy"]


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


class ServiceCIDRStrategy(GenericStrategy):
    """ServiceCIDR and IPAddress: :mod:`.servicecidrkinds`."""

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        servicecidrkinds.validate(obj, p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        servicecidrkinds.validate_update(obj, old, p)


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
    checked them against their nodes and the other pods. A created or updated Pod gets the
    DefaultTolerationSeconds plugin's tolerations (:func:`.admission.default_toleration_seconds`).
    Deleting a Pod bound to a node only marks it (its kubelet finishes it) unless
    forced; finalizers do not hold it. A DELETE returns the deleted Pod."""

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
        if old is None:
            ephemeral.forbid_on_create(obj.spec, p)
        if old is None or obj.spec != old.spec:
            validate_pod_spec(obj.spec, "spec", p)
            ephemeral.validate_ephemeral_containers(obj.spec, "spec", p)
        if old is None or obj.status != old.status:
            validate_pod_status(obj, p)

    def admit(
        self, obj: KubeObject, old: KubeObject | None, alloc: Allocations, journal: Journal
    ) -> tuple[KubeObject, list[str]]:
        """A created or updated Pod passes DefaultTolerationSeconds (:mod:`.admission`;
        kube-apiserver runs it on both, so a re-applied manifest keeps the tolerations)."""
        if isinstance(obj, Pod):
            return default_toleration_seconds(obj), []
        return obj, []

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


def keep_annotations(obj: KubeObject, current: KubeObject, prefix: str) -> KubeObject:
    """``obj`` with the annotations of ``current`` under ``prefix`` that it lacks."""
    have = obj.metadata.annotations or {}
    kept = {
        k: v
        for k, v in (current.metadata.annotations or {}).items()
        if k.startswith(prefix) and k not in have
    }
    return obj.with_meta(annotations={**have, **kept}) if kept else obj


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

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        """The annotations the Deployment controller sets (``deployment.kubernetes.io/``:
        the revision) stay when an update (a re-applied manifest) leaves them unset, as
        ``kubectl apply``'s three-way merge leaves fields it does not manage."""
        return keep_annotations(obj, current, "deployment.kubernetes.io/")


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


class ReplicationControllerStrategy(GenericStrategy):
    """ReplicationController: :mod:`.replication`."""

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        return replication.default(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        replication.validate(obj, p)


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
    **dict.fromkeys(servicecidrkinds.KINDS, ServiceCIDRStrategy()),
    # kinds without a controller of their own (kinds_networking, kinds_policy, kinds_storage)
    "NetworkPolicy": kinds_networking.NetworkPolicyStrategy(counts_generation=True),
    "Ingress": kinds_networking.IngressStrategy(counts_generation=True),
    "IngressClass": kinds_networking.IngressClassStrategy(counts_generation=True),
    "PodDisruptionBudget": kinds_policy.PodDisruptionBudgetStrategy(counts_generation=True),
    "HorizontalPodAutoscaler": kinds_policy.HorizontalPodAutoscalerStrategy(),
    "PriorityClass": kinds_policy.PriorityClassStrategy(),
    "LimitRange": kinds_policy.LimitRangeStrategy(),
    "ResourceQuota": kinds_policy.ResourceQuotaStrategy(),
    "PodTemplate": kinds_policy.PodTemplateStrategy(),
    "Lease": kinds_policy.LeaseStrategy(),
    "RuntimeClass": kinds_policy.RuntimeClassStrategy(),
    "CertificateSigningRequest": kinds_policy.CertificateSigningRequestStrategy(),
    "ValidatingWebhookConfiguration": kinds_policy.WebhookConfigurationStrategy(mutating=False),
    "MutatingWebhookConfiguration": kinds_policy.WebhookConfigurationStrategy(mutating=True),
    "PersistentVolume": kinds_storage.PersistentVolumeStrategy(),
    "PersistentVolumeClaim": kinds_storage.PersistentVolumeClaimStrategy(),
    "StorageClass": kinds_storage.StorageClassStrategy(),
    "DaemonSet": DaemonSetStrategy(),
    "CustomResourceDefinition": crds.STRATEGY,
    "StatefulSet": StatefulSetStrategy(),
    "Job": JobStrategy(),
    "CronJob": CronJobStrategy(),
    "ReplicationController": ReplicationControllerStrategy(counts_generation=True),
}


def strategy_of(store_kind: str | None) -> Strategy:
    """The strategy of the objects kept under ``store_kind``: its own, else a custom
    resource's (its CRD's schema decides), else the no-op one (counting generations for
    typed kinds, not for kinds served through the generic path). ``None`` (a resource
    computed on read): the no-op one."""
    s = STRATEGIES.get(store_kind) if store_kind is not None else None
    if s is not None:
        return s
    if store_kind is None:
        return GENERIC
    cls = kinds.KINDS.get(store_kind)  # a dict lookup: this is asked per Table row
    if cls is not None and issubclass(cls, CustomResource):
        return crds.CUSTOM
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
