"""Kubernetes objects as typed, frozen values.

Each model carries the fields svclab reads and keeps every other field the Kubernetes
schema knows (``extra='allow'``), so a replayed manifest round-trips through
``to_dict()``. Strict field validation (typos, unknown kinds) happens before these
models are built, in :mod:`netmodel.schema`. Objects are immutable: change one with
:meth:`K8sModel.evolve` (pydantic's ``model_copy``), never in place.

Field names are snake_case in Python and camelCase on the wire (aliases).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from netmodel.selectors import LabelSelector

M = TypeVar("M", bound="K8sModel")
_set = object.__setattr__
#: the setters of BaseModel's four slots (what ``object.__setattr__`` ends up calling)
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
#: each model class's field names (pydantic's ``__pydantic_fields__`` keys)
_FIELD_NAMES: dict[type, frozenset[str]] = {}

#: A resource quantity ("100m", "1Gi", 2): kept as its text.
Quantity = Annotated[str, BeforeValidator(lambda v: v if isinstance(v, str) else str(v))]


class K8sModel(BaseModel):
    """Base of every wire object: frozen, camelCase aliases, unknown-but-valid fields kept."""

    model_config = ConfigDict(
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        extra="allow",
        ser_json_inf_nan="constants",
    )

    def evolve(self: M, **changes: Any) -> M:
        """A copy with ``changes`` applied (field names in snake_case): what pydantic's
        ``model_copy(update=changes)`` gives (no validation; an unknown name becomes an
        extra field), made directly. It is the hottest call of the control plane (every
        write stamps a resourceVersion), and the objects are frozen, so the copy shares
        the unchanged values and the extra fields' dict."""
        cls = type(self)
        new = cls.__new__(cls)
        values = self.__dict__.copy()
        extra = self.__pydantic_extra__
        fields = _FIELD_NAMES.get(cls)
        if fields is None:
            fields = _FIELD_NAMES[cls] = frozenset(cls.__pydantic_fields__)
        if changes.keys() <= fields:  # the usual case: model fields only
            values.update(changes)
        else:
            for name, value in changes.items():
                if name in fields:
                    values[name] = value
                else:
                    extra = {**(extra or {}), name: value}
        _set_dict(new, values)
        _set_extra(new, extra)
        _set_fields_set(new, self.__pydantic_fields_set__ | changes.keys())
        _set_private(new, getattr(self, "__pydantic_private__", None))
        return new

    @classmethod
    def maker(cls: type[M], prototype: M) -> Callable[[dict[str, Any]], M]:
        """A function ``values -> prototype.evolve(**values)`` for ``values`` that name
        model fields only (the caller's promise: nothing checks it), without evolve's
        per-call lookups; for objects made in bulk from one prototype (Events)."""
        base = dict(prototype.__dict__)
        extra = prototype.__pydantic_extra__
        fields_set = set(prototype.__pydantic_fields_set__)
        private = getattr(prototype, "__pydantic_private__", None)
        new = cls.__new__

        def make(values: dict[str, Any]) -> M:
            obj = new(cls)
            d = base.copy()
            d.update(values)
            _set_dict(obj, d)
            _set_extra(obj, extra)
            _set_fields_set(obj, fields_set | values.keys())
            _set_private(obj, private)
            return obj

        return make

    def to_dict(self) -> dict[str, Any]:
        """The Kubernetes JSON form: camelCase, only fields that were given or set (never
        svclab's empty defaults), every kept-but-unmodelled field as it came."""
        return self.model_dump(by_alias=True, exclude_unset=True, exclude_none=True, mode="json")


# --------------------------------------------------------------------------- metadata


class OwnerReference(K8sModel):
    api_version: str = "apps/v1"
    kind: str
    name: str
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(K8sModel):
    name: str = ""
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    owner_references: list[OwnerReference] = Field(default_factory=list)

    def controller_ref(self) -> OwnerReference | None:
        for ref in self.owner_references:
            if ref.controller:
                return ref
        return None


#: the finalizer of a foreground deletion (metav1.FinalizerDeleteDependents)
FOREGROUND = "foregroundDeletion"


def finalizers(obj: KubeObject) -> list[str]:
    """``metadata.finalizers`` (kept as an extra field of :class:`ObjectMeta`)."""
    return list((obj.metadata.model_extra or {}).get("finalizers") or [])


class Condition(K8sModel):
    type: str
    status: str = "True"
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class KubeObject(K8sModel):
    """A top-level object: apiVersion, kind, metadata. Subclasses fix ``KIND``."""

    KIND: ClassVar[str] = ""
    API_VERSION: ClassVar[str] = "v1"
    NAMESPACED: ClassVar[bool] = True
    #: the kind name the stores keep it under when that is not ``kind`` (a custom
    #: resource's ``<plural>.<group>``, so that it never meets a built-in kind's store)
    STORE_KIND: ClassVar[str] = ""

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def model_post_init(self, __context: Any) -> None:
        if not self.api_version:
            object.__setattr__(self, "api_version", self.API_VERSION)
        if not self.kind:
            object.__setattr__(self, "kind", self.KIND)
        self.__pydantic_fields_set__.update(("api_version", "kind", "metadata"))

    @property
    def store_kind(self) -> str:
        """The kind the stores keep it under: ``kind``, or a custom resource's
        ``<plural>.<group>``."""
        return self.STORE_KIND or self.kind

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        """The namespace, ``""`` for cluster-scoped kinds."""
        return (self.metadata.namespace or "default") if self.NAMESPACED else ""

    @property
    def key(self) -> str:
        """``ns/name`` for namespaced objects, ``name`` otherwise (the store key)."""
        return f"{self.namespace}/{self.name}" if self.NAMESPACED else self.name

    @classmethod
    def store_kind_of(cls) -> str:
        """The store kind of the class's objects (:attr:`store_kind`)."""
        return cls.STORE_KIND or cls.KIND

    @property
    def ref(self) -> str:
        """``Kind/ns/name`` for messages."""
        return f"{self.kind}/{self.key}"

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels

    @property
    def resource_version(self) -> int:
        return int(self.metadata.resource_version or 0)

    def with_meta(self: M, **changes: Any) -> M:
        meta: ObjectMeta = self.metadata  # type: ignore[attr-defined]
        return self.evolve(metadata=meta.evolve(**changes))


class GenericObject(KubeObject):
    """An object of a kind svclab has no typed class for (ConfigMap, Secret, a custom
    resource...): apiVersion, kind and metadata are typed, every other field is kept as
    it came (pydantic extra fields) and written back unchanged by ``to_dict()``. Each such
    kind gets its own subclass fixing ``KIND``, ``API_VERSION`` and ``NAMESPACED`` (see
    :func:`netmodel.kinds.generic_class`)."""

    def field(self, name: str) -> Any:
        """A top-level field other than apiVersion/kind/metadata (None if absent)."""
        return (self.model_extra or {}).get(name)


# --------------------------------------------------------------------------- core/v1


class Namespace(KubeObject):
    KIND = "Namespace"
    NAMESPACED = False
    spec: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] = Field(default_factory=dict)


class Taint(K8sModel):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodeSpec(K8sModel):
    pod_cidr: str | None = Field(default=None, alias="podCIDR")
    pod_cidrs: list[str] = Field(default_factory=list, alias="podCIDRs")
    unschedulable: bool = False
    taints: list[Taint] = Field(default_factory=list)


class NodeAddress(K8sModel):
    type: str
    address: str


class NodeStatus(K8sModel):
    addresses: list[NodeAddress] = Field(default_factory=list)
    capacity: dict[str, Quantity] = Field(default_factory=dict)
    allocatable: dict[str, Quantity] = Field(default_factory=dict)
    conditions: list[Condition] = Field(default_factory=list)


class Node(KubeObject):
    KIND = "Node"
    NAMESPACED = False
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)

    @property
    def internal_ips(self) -> list[str]:
        return [a.address for a in self.status.addresses if a.type == "InternalIP"]


class ContainerPort(K8sModel):
    name: str | None = None
    container_port: int
    protocol: str = "TCP"
    host_port: int | None = None


class ResourceRequirements(K8sModel):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class HTTPHeader(K8sModel):
    name: str = ""
    value: str = ""


class HTTPGetAction(K8sModel):
    """A probe's HTTP GET: ``port`` a number or a container port's name."""

    path: str | None = None
    port: int | str = 0
    host: str | None = None
    scheme: str | None = None
    http_headers: list[HTTPHeader] = Field(default_factory=list)


class TCPSocketAction(K8sModel):
    port: int | str = 0
    host: str | None = None


class ExecAction(K8sModel):
    command: list[str] = Field(default_factory=list)


class GRPCAction(K8sModel):
    port: int = 0
    service: str | None = None


class Probe(K8sModel):
    """A container's readiness, liveness or startup probe (kube's ``v1.Probe``): one
    handler (``httpGet``, ``tcpSocket``, ``exec`` or ``grpc``) and its timing; the
    apiserver defaults the timing (:func:`control.apiserver.defaults.default_probe`)."""

    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None
    exec: ExecAction | None = None
    grpc: GRPCAction | None = None
    initial_delay_seconds: int | None = None
    period_seconds: int | None = None
    timeout_seconds: int | None = None
    success_threshold: int | None = None
    failure_threshold: int | None = None
    termination_grace_period_seconds: int | None = None


class Container(K8sModel):
    name: str
    image: str | None = None
    ports: list[ContainerPort] = Field(default_factory=list)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    readiness_probe: Probe | None = None
    liveness_probe: Probe | None = None
    startup_probe: Probe | None = None


class Toleration(K8sModel):
    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if not self.key:  # empty key with Equal matches nothing (validation forbids it)
            return False
        return (self.value or "") == (taint.value or "")


class NodeSelectorRequirement(K8sModel):
    key: str
    operator: str
    values: list[str] = Field(default_factory=list)


class NodeSelectorTerm(K8sModel):
    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list)


class NodeSelector(K8sModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list)


class NodeAffinity(K8sModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class PodAffinityTerm(K8sModel):
    label_selector: LabelSelector | None = None
    topology_key: str = ""
    namespaces: list[str] = Field(default_factory=list)


class PodAntiAffinity(K8sModel):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = Field(
        default_factory=list
    )


class Affinity(K8sModel):
    node_affinity: NodeAffinity | None = None
    pod_anti_affinity: PodAntiAffinity | None = None


class PodSpec(K8sModel):
    node_name: str | None = None
    containers: list[Container] = Field(default_factory=list)
    #: added through the ``pods/ephemeralcontainers`` subresource only (``kubectl
    #: debug``); their own fields (``targetContainerName``...) are kept as extra fields
    ephemeral_containers: list[Container] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: Affinity | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    host_network: bool = False
    scheduler_name: str | None = None


class PodIP(K8sModel):
    ip: str


class PodStatus(K8sModel):
    phase: str | None = None
    pod_ip: str | None = Field(default=None, alias="podIP")
    pod_ips: list[PodIP] = Field(default_factory=list, alias="podIPs")
    host_ip: str | None = Field(default=None, alias="hostIP")
    conditions: list[Condition] = Field(default_factory=list)


class Pod(KubeObject):
    KIND = "Pod"
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)

    def condition(self, type_: str) -> Condition | None:
        for c in self.status.conditions:
            if c.type == type_:
                return c
        return None

    @property
    def is_ready(self) -> bool:
        c = self.condition("Ready")
        return c is not None and c.status == "True"

    @property
    def is_terminating(self) -> bool:
        return self.metadata.deletion_timestamp is not None


class PodTemplateSpec(K8sModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)


class ServicePort(K8sModel):
    name: str | None = None
    protocol: str | None = None
    port: int
    target_port: int | str | None = None
    node_port: int | None = None
    app_protocol: str | None = None


class ClientIPConfig(K8sModel):
    timeout_seconds: int | None = None


class SessionAffinityConfig(K8sModel):
    client_ip: ClientIPConfig | None = Field(default=None, alias="clientIP")


class ServiceSpec(K8sModel):
    type: str | None = None
    selector: dict[str, str] | None = None
    ports: list[ServicePort] = Field(default_factory=list)
    cluster_ip: str | None = Field(default=None, alias="clusterIP")
    cluster_ips: list[str] = Field(default_factory=list, alias="clusterIPs")
    external_ips: list[str] = Field(default_factory=list, alias="externalIPs")
    session_affinity: str | None = None
    session_affinity_config: SessionAffinityConfig | None = None
    external_traffic_policy: str | None = None
    internal_traffic_policy: str | None = None
    health_check_node_port: int | None = None
    load_balancer_ip: str | None = Field(default=None, alias="loadBalancerIP")
    load_balancer_source_ranges: list[str] = Field(default_factory=list)
    allocate_load_balancer_node_ports: bool | None = None
    external_name: str | None = None
    ip_families: list[str] = Field(default_factory=list)
    ip_family_policy: str | None = None
    #: PreferSameZone, PreferSameNode, or PreferClose (deprecated: PreferSameZone)
    traffic_distribution: str | None = None


class LoadBalancerIngress(K8sModel):
    ip: str | None = None
    hostname: str | None = None
    ip_mode: str | None = None


class LoadBalancerStatus(K8sModel):
    ingress: list[LoadBalancerIngress] = Field(default_factory=list)


class ServiceStatus(K8sModel):
    load_balancer: LoadBalancerStatus = Field(default_factory=LoadBalancerStatus)


class Service(KubeObject):
    KIND = "Service"
    spec: ServiceSpec = Field(default_factory=ServiceSpec)
    status: ServiceStatus = Field(default_factory=ServiceStatus)

    @property
    def is_headless(self) -> bool:
        return self.spec.cluster_ip == "None"

    @property
    def service_type(self) -> str:
        return self.spec.type or "ClusterIP"


# --------------------------------------------------------------------------- apps/v1


#: An int-or-string (``3`` or ``"25%"``), as Kubernetes' ``intstr.IntOrString``.
IntOrPercent = int | str

_PERCENT = re.compile(r"[0-9]+%")


def scaled_value(value: IntOrPercent, total: int, *, round_up: bool) -> int:
    """Kubernetes' ``GetScaledValueFromIntOrPercent``: an int is itself; ``"N%"`` is N
    percent of ``total``, rounded up or down. ValueError for any other string (a valid
    percentage is digits followed by ``%``)."""
    if isinstance(value, int):
        return value
    if not _PERCENT.fullmatch(value):
        raise ValueError(f"invalid percentage {value!r}")
    scaled, rest = divmod(int(value[:-1]) * total, 100)
    return scaled + 1 if round_up and rest else scaled


class RollingUpdateDeployment(K8sModel):
    """``spec.strategy.rollingUpdate``: how far a rollout may go below / above replicas."""

    max_unavailable: IntOrPercent | None = None
    max_surge: IntOrPercent | None = None

    def fenceposts(self, replicas: int) -> tuple[int, int]:
        """``(max surge, max unavailable)`` as pod counts for ``replicas`` (Kubernetes'
        ``ResolveFenceposts``): surge percentages round up, unavailable ones down; unset
        values count as 25%; when both come to 0 (rounding: validation refuses an
        explicit 0/0), unavailable is 1 so the rollout can still move."""
        surge = scaled_value(
            "25%" if self.max_surge is None else self.max_surge, replicas, round_up=True
        )
        unavailable = scaled_value(
            "25%" if self.max_unavailable is None else self.max_unavailable,
            replicas,
            round_up=False,
        )
        if surge == 0 and unavailable == 0:
            unavailable = 1
        return surge, unavailable


class DeploymentStrategy(K8sModel):
    """``spec.strategy``: ``RollingUpdate`` (the default) or ``Recreate``."""

    type: str | None = None
    rolling_update: RollingUpdateDeployment | None = None


class DeploymentSpec(K8sModel):
    replicas: int | None = None
    selector: LabelSelector = Field(default_factory=LabelSelector)
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)
    strategy: DeploymentStrategy | None = None
    min_ready_seconds: int | None = None
    revision_history_limit: int | None = None
    progress_deadline_seconds: int | None = None
    paused: bool | None = None


class DeploymentCondition(Condition):
    """A Deployment's (or a ReplicaSet's) condition: ``lastUpdateTime`` moves whenever
    the condition is set again (progress made), ``lastTransitionTime`` only when its
    status changes."""

    last_update_time: str | None = None


class DeploymentStatus(K8sModel):
    replicas: int | None = None
    ready_replicas: int | None = None
    available_replicas: int | None = None
    unavailable_replicas: int | None = None
    updated_replicas: int | None = None
    observed_generation: int | None = None
    collision_count: int | None = None
    conditions: list[DeploymentCondition] = Field(default_factory=list)

    def condition(self, type_: str) -> DeploymentCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class Deployment(KubeObject):
    KIND = "Deployment"
    API_VERSION = "apps/v1"
    spec: DeploymentSpec = Field(default_factory=DeploymentSpec)
    status: DeploymentStatus = Field(default_factory=DeploymentStatus)


class ReplicaSetSpec(K8sModel):
    replicas: int | None = None
    min_ready_seconds: int | None = None
    selector: LabelSelector = Field(default_factory=LabelSelector)
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)


class ReplicaSetStatus(K8sModel):
    """Also a ReplicationController's status (the same fields on the wire)."""

    replicas: int | None = None
    fully_labeled_replicas: int | None = None
    ready_replicas: int | None = None
    available_replicas: int | None = None
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class ReplicaSet(KubeObject):
    KIND = "ReplicaSet"
    API_VERSION = "apps/v1"
    spec: ReplicaSetSpec = Field(default_factory=ReplicaSetSpec)
    status: ReplicaSetStatus = Field(default_factory=ReplicaSetStatus)


# --------------------------------------------------------------------------- discovery/v1


class EndpointConditions(K8sModel):
    ready: bool | None = None
    serving: bool | None = None
    terminating: bool | None = None


class ObjectReference(K8sModel):
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None


class ForZone(K8sModel):
    name: str = ""


class ForNode(K8sModel):
    name: str = ""


class EndpointHints(K8sModel):
    """Where an endpoint should be used (``hints``): the zones (``forZones``) and, for
    ``trafficDistribution: PreferSameNode``, the nodes (``forNodes``) whose kube-proxy
    should prefer it (:mod:`control.controllers.topologyhints` writes them,
    :func:`dataplane.proxy.snapshot.categorize_endpoints` reads them)."""

    for_zones: list[ForZone] = Field(default_factory=list)
    for_nodes: list[ForNode] = Field(default_factory=list)

    @property
    def zone_names(self) -> frozenset[str]:
        return frozenset(z.name for z in self.for_zones if z.name)

    @property
    def node_names(self) -> frozenset[str]:
        return frozenset(n.name for n in self.for_nodes if n.name)


class Endpoint(K8sModel):
    addresses: list[str] = Field(default_factory=list)
    conditions: EndpointConditions = Field(default_factory=EndpointConditions)
    node_name: str | None = None
    target_ref: ObjectReference | None = None
    zone: str | None = None
    hostname: str | None = None
    hints: EndpointHints | None = None


class EndpointPort(K8sModel):
    name: str | None = None
    port: int | None = None
    protocol: str | None = None
    app_protocol: str | None = None


class EndpointSlice(KubeObject):
    KIND = "EndpointSlice"
    API_VERSION = "discovery.k8s.io/v1"
    address_type: str = "IPv4"
    endpoints: list[Endpoint] = Field(default_factory=list)
    ports: list[EndpointPort] = Field(default_factory=list)

    @property
    def service_name(self) -> str | None:
        return self.metadata.labels.get("kubernetes.io/service-name")


# --------------------------------------------------------------------------- events


class Event(KubeObject):
    """One step on the timeline (stored like a core/v1 Event, plus the store revision)."""

    KIND = "Event"
    involved_object: ObjectReference = Field(default_factory=ObjectReference)
    reason: str = ""
    message: str = ""
    type: str = "Normal"
    source_component: str = ""
    revision: int = 0
    sequence: int = 0


# --------------------------------------------------------------------------- rbac/v1


class PolicyRule(K8sModel):
    """One RBAC rule: verbs over API groups and resources (or non-resource URLs)."""

    verbs: list[str] = Field(default_factory=list)
    api_groups: list[str] = Field(default_factory=list)
    resources: list[str] = Field(default_factory=list)
    resource_names: list[str] = Field(default_factory=list)
    non_resource_ur_ls: list[str] = Field(default_factory=list, alias="nonResourceURLs")


class AggregationRule(K8sModel):
    cluster_role_selectors: list[LabelSelector] = Field(default_factory=list)


class Subject(K8sModel):
    kind: str
    name: str
    namespace: str | None = None
    api_group: str | None = None


class RoleRef(K8sModel):
    api_group: str = "rbac.authorization.k8s.io"
    kind: str
    name: str


class Role(KubeObject):
    KIND = "Role"
    API_VERSION = "rbac.authorization.k8s.io/v1"
    rules: list[PolicyRule] = Field(default_factory=list)


class ClusterRole(KubeObject):
    KIND = "ClusterRole"
    API_VERSION = "rbac.authorization.k8s.io/v1"
    NAMESPACED = False
    rules: list[PolicyRule] = Field(default_factory=list)
    aggregation_rule: AggregationRule | None = None


class RoleBinding(KubeObject):
    KIND = "RoleBinding"
    API_VERSION = "rbac.authorization.k8s.io/v1"
    subjects: list[Subject] = Field(default_factory=list)
    role_ref: RoleRef | None = None


class ClusterRoleBinding(KubeObject):
    KIND = "ClusterRoleBinding"
    API_VERSION = "rbac.authorization.k8s.io/v1"
    NAMESPACED = False
    subjects: list[Subject] = Field(default_factory=list)
    role_ref: RoleRef | None = None
