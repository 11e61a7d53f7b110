"""Defaulting, as the Kubernetes apiserver does it before validation.

Each function takes an object and returns a new one with unset fields filled in; set
fields are never changed. Defaulting is idempotent (``d(d(x)) == d(x)``), so re-applying
a stored object changes nothing.
"""

from __future__ import annotations

from typing import Any

from netmodel.cluster import ClusterSpec
from netmodel.objects import (
    ClientIPConfig,
    Container,
    Deployment,
    DeploymentStrategy,
    EndpointSlice,
    Namespace,
    Pod,
    PodSpec,
    PodStatus,
    PodTemplateSpec,
    Probe,
    ReplicaSet,
    RollingUpdateDeployment,
    Service,
    ServicePort,
    ServiceStatus,
    SessionAffinityConfig,
)

DEFAULT_AFFINITY_TIMEOUT = 10800
NODE_PORT_TYPES = ("NodePort", "LoadBalancer")


def ip_family(cluster: ClusterSpec) -> str:
    return "IPv4" if cluster.service_net.version == 4 else "IPv6"


def default_namespace(ns: Namespace) -> Namespace:
    """Label ``kubernetes.io/metadata.name``, status.phase Active."""
    label = "kubernetes.io/metadata.name"
    if ns.labels.get(label) == ns.name and ns.status.get("phase"):
        return ns
    labels = {**ns.labels, label: ns.name}
    status = {**ns.status, "phase": ns.status.get("phase") or "Active"}
    return ns.with_meta(labels=labels).evolve(status=status)


# --------------------------------------------------------------------------- Service


def _default_service_port(p: ServicePort) -> ServicePort:
    protocol = p.protocol or "TCP"
    target = p.target_port
    if target is None or target == 0 or target == "":
        target = p.port
    if protocol == p.protocol and target == p.target_port:
        return p
    return p.evolve(protocol=protocol, target_port=target)


def default_service(svc: Service, cluster: ClusterSpec) -> Service:
    """type ClusterIP; port protocol TCP and targetPort = port; sessionAffinity None (ClientIP
    gets timeoutSeconds 10800); internalTrafficPolicy Cluster; externalTrafficPolicy Cluster
    for externally accessible Services (NodePort, LoadBalancer, ClusterIP with
    externalIPs); allocateLoadBalancerNodePorts true for LoadBalancer;
    ipFamilies / ipFamilyPolicy from the cluster's service range (not for ExternalName).
    clusterIP(s) and nodePorts are filled in by admission, not here."""
    spec = svc.spec
    type_ = spec.type or "ClusterIP"
    ch: dict[str, Any] = {}
    if spec.type != type_:
        ch["type"] = type_
    ports = [_default_service_port(p) for p in spec.ports]
    if any(a is not b for a, b in zip(ports, spec.ports, strict=True)):
        ch["ports"] = ports
    affinity = spec.session_affinity or "None"
    if spec.session_affinity != affinity:
        ch["session_affinity"] = affinity
    if affinity == "ClientIP":
        cfg = spec.session_affinity_config
        if cfg is None or cfg.client_ip is None or cfg.client_ip.timeout_seconds is None:
            ch["session_affinity_config"] = SessionAffinityConfig(
                client_ip=ClientIPConfig(timeout_seconds=DEFAULT_AFFINITY_TIMEOUT)
            )
    if type_ != "ExternalName":
        if spec.internal_traffic_policy is None:
            ch["internal_traffic_policy"] = "Cluster"
        if not spec.ip_families:
            ch["ip_families"] = [ip_family(cluster)]
        if spec.ip_family_policy is None:
            ch["ip_family_policy"] = "SingleStack"
    externally_accessible = type_ in NODE_PORT_TYPES or (
        type_ == "ClusterIP" and bool(spec.external_ips)
    )
    if externally_accessible and spec.external_traffic_policy is None:
        ch["external_traffic_policy"] = "Cluster"
    if type_ == "LoadBalancer" and spec.allocate_load_balancer_node_ports is None:
        ch["allocate_load_balancer_node_ports"] = True
    # kube-apiserver always writes status.loadBalancer (a struct, never omitted)
    bare = "status" not in svc.model_fields_set or (
        "load_balancer" not in svc.status.model_fields_set
    )
    if not ch and not bare:
        return svc
    out = svc.evolve(spec=spec.evolve(**ch)) if ch else svc
    if bare:
        out = out.evolve(status=ServiceStatus(load_balancer=svc.status.load_balancer))
    return out


# --------------------------------------------------------------------------- Pods


#: kube's SetDefaults_Probe: the timing a probe gets when its field is unset (or 0)
PROBE_DEFAULTS = {
    "timeout_seconds": 1,
    "period_seconds": 10,
    "success_threshold": 1,
    "failure_threshold": 3,
}


def default_probe(probe: Probe | None) -> Probe | None:
    """kube's probe defaults: timeoutSeconds 1, periodSeconds 10, successThreshold 1,
    failureThreshold 3 (each when unset or 0, as the zero value of an int32 is unset on
    the wire); httpGet's path ``/`` and scheme ``HTTP``."""
    if probe is None:
        return None
    ch: dict[str, Any] = {k: v for k, v in PROBE_DEFAULTS.items() if not getattr(probe, k)}
    get = probe.http_get
    if get is not None and (not get.path or not get.scheme):
        ch["http_get"] = get.evolve(path=get.path or "/", scheme=get.scheme or "HTTP")
    return probe.evolve(**ch) if ch else probe


_PROBES = ("readiness_probe", "liveness_probe", "startup_probe")


def _default_container(c: Container) -> Container:
    ports = [
        p if "protocol" in p.model_fields_set else p.evolve(protocol=p.protocol or "TCP")
        for p in c.ports
    ]
    ch: dict[str, Any] = {}
    if any(a is not b for a, b in zip(ports, c.ports, strict=True)):
        ch["ports"] = ports
    for kind in _PROBES:
        probe = getattr(c, kind)
        if probe is not None:
            done = default_probe(probe)
            if done is not probe:
                ch[kind] = done
    return c.evolve(**ch) if ch else c


#: wire name -> (snake_case name, default) of PodSpec fields svclab does not model
_POD_SPEC_EXTRA_DEFAULTS: dict[str, tuple[str, Any]] = {
    "restartPolicy": ("restart_policy", "Always"),
    "dnsPolicy": ("dns_policy", "ClusterFirst"),
    "terminationGracePeriodSeconds": ("termination_grace_period_seconds", 30),
}


def default_pod_spec(spec: PodSpec) -> PodSpec:
    """Container port protocol TCP, schedulerName default-scheduler, restartPolicy Always,
    dnsPolicy ClusterFirst, terminationGracePeriodSeconds 30."""
    ch: dict[str, Any] = {}
    containers = [_default_container(c) for c in spec.containers]
    if any(a is not b for a, b in zip(containers, spec.containers, strict=True)):
        ch["containers"] = containers
    if spec.scheduler_name is None:
        ch["scheduler_name"] = "default-scheduler"
    extra = spec.model_extra or {}
    for wire, (snake, value) in _POD_SPEC_EXTRA_DEFAULTS.items():
        if wire not in extra and snake not in extra:
            ch[wire] = value
    return spec.evolve(**ch) if ch else spec


def default_pod(pod: Pod) -> Pod:
    """Pod spec defaults, and status.phase Pending."""
    spec = default_pod_spec(pod.spec)
    status: PodStatus = pod.status
    if status.phase is None:
        status = status.evolve(phase="Pending")
    if spec is pod.spec and status is pod.status:
        return pod
    return pod.evolve(spec=spec, status=status)


def _default_template(t: PodTemplateSpec) -> PodTemplateSpec:
    spec = default_pod_spec(t.spec)
    return t if spec is t.spec else t.evolve(spec=spec)


# --------------------------------------------------------------------------- apps/v1

DEFAULT_MAX_SURGE = "25%"
DEFAULT_MAX_UNAVAILABLE = "25%"
DEFAULT_REVISION_HISTORY_LIMIT = 10
DEFAULT_PROGRESS_DEADLINE_SECONDS = 600


def default_strategy(strategy: DeploymentStrategy | None) -> DeploymentStrategy:
    """type RollingUpdate; a RollingUpdate strategy gets rollingUpdate.maxUnavailable and
    rollingUpdate.maxSurge 25% each, each defaulted on its own (a Recreate strategy gets
    nothing more)."""
    s = strategy or DeploymentStrategy()
    ch: dict[str, Any] = {}
    type_ = s.type or "RollingUpdate"
    if s.type != type_:
        ch["type"] = type_
    if type_ == "RollingUpdate":
        ru = s.rolling_update or RollingUpdateDeployment()
        ru_ch: dict[str, Any] = {}
        if ru.max_unavailable is None:
            ru_ch["max_unavailable"] = DEFAULT_MAX_UNAVAILABLE
        if ru.max_surge is None:
            ru_ch["max_surge"] = DEFAULT_MAX_SURGE
        if ru_ch or s.rolling_update is None:
            ch["rolling_update"] = ru.evolve(**ru_ch)
    if strategy is not None and not ch:
        return strategy
    return s.evolve(**ch)


def default_deployment(dep: Deployment) -> Deployment:
    """replicas 1; strategy as :func:`default_strategy`; revisionHistoryLimit 10;
    progressDeadlineSeconds 600; pod template defaults."""
    spec = dep.spec
    ch: dict[str, Any] = {}
    if spec.replicas is None:
        ch["replicas"] = 1
    template = _default_template(spec.template)
    if template is not spec.template:
        ch["template"] = template
    strategy = default_strategy(spec.strategy)
    if strategy is not spec.strategy:
        ch["strategy"] = strategy
    if spec.revision_history_limit is None:
        ch["revision_history_limit"] = DEFAULT_REVISION_HISTORY_LIMIT
    if spec.progress_deadline_seconds is None:
        ch["progress_deadline_seconds"] = DEFAULT_PROGRESS_DEADLINE_SECONDS
    return dep.evolve(spec=spec.evolve(**ch)) if ch else dep


def default_replicaset(rs: ReplicaSet) -> ReplicaSet:
    """replicas 1; pod template defaults."""
    spec = rs.spec
    ch: dict[str, Any] = {}
    if spec.replicas is None:
        ch["replicas"] = 1
    template = _default_template(spec.template)
    if template is not spec.template:
        ch["template"] = template
    return rs.evolve(spec=spec.evolve(**ch)) if ch else rs


# --------------------------------------------------------------------------- discovery/v1


def default_endpointslice(es: EndpointSlice) -> EndpointSlice:
    """Port protocol TCP."""
    ports = [p if p.protocol else p.evolve(protocol="TCP") for p in es.ports]
    if all(a is b for a, b in zip(ports, es.ports, strict=True)):
        return es
    return es.evolve(ports=ports)


__all__ = [
    "DEFAULT_AFFINITY_TIMEOUT",
    "DEFAULT_MAX_SURGE",
    "DEFAULT_MAX_UNAVAILABLE",
    "DEFAULT_PROGRESS_DEADLINE_SECONDS",
    "DEFAULT_REVISION_HISTORY_LIMIT",
    "NODE_PORT_TYPES",
    "default_deployment",
    "default_endpointslice",
    "default_namespace",
    "default_pod",
    "default_pod_spec",
    "default_replicaset",
    "default_service",
    "default_strategy",
    "ip_family",
]
