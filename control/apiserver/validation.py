"""Validation of defaulted objects, with Kubernetes' field paths and wording.

Contract: each ``validate_*`` function raises the *first* problem through
:class:`Problems` as one :class:`~netmodel.errors.InvalidError` naming the object
(``Kind/ns/name``) and the field (``spec.ports[1].name``), e.g. ``Service/default/web:
spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive``; it
returns None for a valid object. They are pure: no store access, no allocation. Which
of them an object passes is its kind's strategy's choice (:mod:`.strategy`:
``strategy.validate`` / ``strategy.validate_update``).

Legacy IPs: as kube-apiserver does, the IP fields existing clusters may hold in the
legacy form (Service clusterIP(s), externalIPs, loadBalancerIP, loadBalancerSourceRanges,
status.loadBalancer.ingress[].ip, EndpointSlice addresses, Node addresses) accept IPv4
octets written with leading zeros (read as decimal), and each such value raises an
:class:`APIWarning` with kube-apiserver's text (``<field>: IP address was accepted, but
will be invalid in a future Kubernetes release: ...``) through :mod:`warnings`; callers
that answer a request (the CLI, an HTTP layer) collect them with
``warnings.catch_warnings(record=True)`` and show them as kubectl does (``Warning: ...``).
The value is stored as written; kube-proxy's renderers read it sloppily (normalised).
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import NoReturn

from control.apiserver.defaults import NODE_PORT_TYPES
from control.apiserver.names import (
    check_dns1035_label,
    check_dns1123_label,
    check_dns1123_subdomain,
    check_label_value,
    check_path_segment,
    check_port_name,
    check_qualified_name,
    quote,
)
from control.apiserver.servicecidrkinds import check_ip_address_name
from netmodel.cluster import ClusterSpec
from netmodel.errors import InvalidError
from netmodel.ip import leading_zero_warning, parse_cidr, parse_cidr_legacy, parse_ip_legacy
from netmodel.objects import (
    Container,
    Deployment,
    EndpointSlice,
    KubeObject,
    Node,
    Pod,
    PodSpec,
    Probe,
    ReplicaSet,
    Service,
)
from netmodel.selectors import LabelSelector

PROTOCOLS = ("SCTP", "TCP", "UDP")
SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
TRAFFIC_POLICIES = ("Cluster", "Local")
#: spec.trafficDistribution's values, in the order kube-apiserver 1.35 lists them
#: (PreferClose is deprecated: it means PreferSameZone)
TRAFFIC_DISTRIBUTIONS = ("PreferClose", "PreferSameZone", "PreferSameNode")
AFFINITIES = ("ClientIP", "None")
IP_FAMILY_POLICIES = ("PreferDualStack", "RequireDualStack", "SingleStack")
ADDRESS_TYPES = ("FQDN", "IPv4", "IPv6")
SELECTOR_OPS = ("DoesNotExist", "Exists", "In", "NotIn")
MAX_AFFINITY_TIMEOUT = 86400
STRATEGY_TYPES = ("Recreate", "RollingUpdate")
PERCENT = re.compile(r"[0-9]+%")
PERCENT_MESSAGE = (
    "a valid percent string must be a numeric string followed by an ending '%' "
    "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
)


class APIWarning(UserWarning):
    """A warning kube-apiserver would return with the response (a ``Warning:`` header):
    the write is accepted. ``str()`` is the text kubectl prints after ``Warning: ``."""


_WARNINGS = [0]  # how many warnings were given (a check that warned is not cached)


def warn(text: str) -> None:
    _WARNINGS[0] += 1
    warnings.warn(APIWarning(text), stacklevel=3)


class Problems:
    """Raises one InvalidError per call, in Kubernetes' ``field.Error`` wording."""

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def _raise(self, field: str, message: str) -> NoReturn:
        raise InvalidError(message, obj=self.ref, field=field)

    def invalid(self, field: str, value: object, why: str) -> NoReturn:
        self._raise(field, f"Invalid value: {quote(value)}: {why}")

    def required(self, field: str, why: str = "") -> NoReturn:
        self._raise(field, "Required value" + (f": {why}" if why else ""))

    def forbidden(self, field: str, why: str) -> NoReturn:
        self._raise(field, f"Forbidden: {why}")

    def not_found(self, field: str, value: object) -> NoReturn:
        self._raise(field, f"Not found: {quote(value)}")

    def duplicate(self, field: str, value: object) -> NoReturn:
        self._raise(field, f"Duplicate value: {quote(value)}")

    def unsupported(self, field: str, value: object, supported: Iterable[str]) -> NoReturn:
        allowed = ", ".join(quote(s) for s in supported)
        self._raise(field, f"Unsupported value: {quote(value)}: supported values: {allowed}")

    def too_long(self, field: str, limit: int) -> NoReturn:
        self._raise(field, f"Too long: may not be more than {limit} bytes")

    def too_many(self, field: str, have: int, limit: int) -> NoReturn:
        self._raise(field, f"Too many: {have}: must have at most {limit} items")

    def check(self, field: str, value: str, checker: Callable[[str], str | None]) -> None:
        why = checker(value)
        if why:
            self.invalid(field, value, why)

    def enum(self, field: str, value: str | None, supported: tuple[str, ...]) -> None:
        if value is not None and value not in supported:
            self.unsupported(field, value, supported)

    def port(self, field: str, value: int, *, allow_zero: bool = False) -> None:
        if allow_zero and value == 0:
            return
        if not 1 <= value <= 65535:
            self.invalid(field, value, "must be between 1 and 65535, inclusive")

    def ip(
        self, field: str, value: str, *, version: int | None = None, warn_legacy: bool = True
    ) -> None:
        known = _canonical_ip_version(value)
        if known is not None and (version is None or known == version):
            return  # a canonical address (no warning to give) of the right family
        try:
            addr = parse_ip_legacy(value)
        except ValueError:
            self.invalid(
                field, value, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
            )
        if version is not None and addr.version != version:
            self.invalid(field, value, f"must be a valid IPv{version} address")
        text = leading_zero_warning(field, value) if warn_legacy else None
        if text:
            warn(text)

    def labels(self, field: str, labels: Mapping[str, str]) -> None:
        for k, v in labels.items():
            self.check(field, k, check_qualified_name)
            self.check(f"{field}[{k}]", v, check_label_value)


@functools.lru_cache(maxsize=1 << 16)
def _canonical_ip_version(value: str) -> int | None:
    """4 or 6 for an address in canonical form, else None (invalid, or accepted with a
    warning: :meth:`Problems.ip` says which). Cached: the EndpointSlice controller writes
    the same pod addresses over and over."""
    try:
        addr = parse_ip_legacy(value)
    except ValueError:
        return None
    return None if leading_zero_warning("", value) else addr.version


def validate_binding(pod: Pod, node: str, annotations: Mapping[str, str]) -> None:
    """A Binding of ``pod`` (its stored state) to ``node``, copying ``annotations``
    (pods/binding): the target is required and must be a valid node name, the
    annotation keys qualified names. Raises InvalidError naming the pod."""
    p = Problems(pod.ref)
    if not node:
        p.required("target.name")
    p.check("spec.nodeName", node, _subdomain_problem)
    for k in annotations:
        p.check("metadata.annotations", k, _qualified_name_problem)


# a scheduler binds every pod to one of a few node names with the same annotation key
_subdomain_problem = functools.lru_cache(maxsize=4096)(check_dns1123_subdomain)
_qualified_name_problem = functools.lru_cache(maxsize=4096)(check_qualified_name)


# --------------------------------------------------------------------------- metadata

_NAME_CHECKS: dict[str, Callable[[str], str | None]] = {
    "Service": check_dns1035_label,
    "Namespace": check_dns1123_label,
    "Role": check_path_segment,
    "ClusterRole": check_path_segment,
    "RoleBinding": check_path_segment,
    "ClusterRoleBinding": check_path_segment,
    "IPAddress": check_ip_address_name,
    # certificates' ValidateCertificateRequestName accepts any name
    "CertificateSigningRequest": lambda _name: None,
}


def validate_metadata(obj: KubeObject, p: Problems) -> None:
    meta = obj.metadata
    if not meta.name:
        p.required("metadata.name", "name or generateName is required")
    p.check("metadata.name", meta.name, _NAME_CHECKS.get(obj.kind, check_dns1123_subdomain))
    if obj.NAMESPACED:
        p.check("metadata.namespace", obj.namespace, check_dns1123_label)
    p.labels("metadata.labels", meta.labels)
    for k in meta.annotations:
        p.check("metadata.annotations", k, check_qualified_name)
    for i, ref in enumerate(meta.owner_references):
        if not ref.name:
            p.required(f"metadata.ownerReferences[{i}].name")
        if not ref.kind:
            p.required(f"metadata.ownerReferences[{i}].kind")


# --------------------------------------------------------------------------- Service


def validate_service(svc: Service, cluster: ClusterSpec, p: Problems) -> None:
    spec = svc.spec
    type_ = spec.type or "ClusterIP"
    p.enum("spec.type", type_, SERVICE_TYPES)
    headless = spec.cluster_ip == "None"
    if type_ == "ExternalName":
        if spec.cluster_ip:
            p.forbidden("spec.clusterIP", "may not be set for ExternalName services")
        if not spec.external_name:
            p.required("spec.externalName")
        p.check("spec.externalName", spec.external_name.rstrip("."), check_dns1123_subdomain)
    else:
        _cluster_ips(svc, type_, p)
        if not spec.ports and not headless:
            p.required("spec.ports")
    _service_ports(svc, type_, p)
    if spec.selector:
        p.labels("spec.selector", spec.selector)
    p.enum("spec.sessionAffinity", spec.session_affinity, AFFINITIES)
    cfg = spec.session_affinity_config
    if spec.session_affinity == "ClientIP":
        timeout = cfg.client_ip.timeout_seconds if cfg and cfg.client_ip else None
        if timeout is not None and not 0 < timeout <= MAX_AFFINITY_TIMEOUT:
            p.invalid(
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                timeout,
                f"must be greater than 0 and less than {MAX_AFFINITY_TIMEOUT}",
            )
    elif cfg is not None and cfg.client_ip is not None:
        p.invalid(
            "spec.sessionAffinityConfig",
            {"clientIP": {"timeoutSeconds": cfg.client_ip.timeout_seconds}},
            f"must not be set when sessionAffinity is {spec.session_affinity or 'None'}",
        )
    _traffic_policies(svc, type_, p)
    for i, ip in enumerate(spec.external_ips):
        _non_special_ip(f"spec.externalIPs[{i}]", ip, p)
    if spec.load_balancer_source_ranges and type_ != "LoadBalancer":
        p.forbidden(
            "spec.loadBalancerSourceRanges", "may only be used when `type` is 'LoadBalancer'"
        )
    for i, cidr in enumerate(spec.load_balancer_source_ranges):
        try:
            parse_cidr_legacy(cidr)
        except ValueError:
            p.invalid(
                f"spec.loadBalancerSourceRanges[{i}]",
                cidr,
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            )
        text = leading_zero_warning(f"spec.loadBalancerSourceRanges[{i}]", cidr, cidr=True)
        if text:
            warn(text)
    if spec.load_balancer_ip:
        if type_ != "LoadBalancer":
            p.forbidden("spec.loadBalancerIP", "may only be used when `type` is 'LoadBalancer'")
        p.ip("spec.loadBalancerIP", spec.load_balancer_ip)
    if spec.allocate_load_balancer_node_ports is not None and type_ != "LoadBalancer":
        p.forbidden(
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        )
    _ip_families(svc, type_, cluster, p)
    for i, ing in enumerate(svc.status.load_balancer.ingress):
        if ing.ip:
            p.ip(f"status.loadBalancer.ingress[{i}].ip", ing.ip)
        p.enum(f"status.loadBalancer.ingress[{i}].ipMode", ing.ip_mode, ("Proxy", "VIP"))


def _cluster_ips(svc: Service, type_: str, p: Problems) -> None:
    spec = svc.spec
    ip = spec.cluster_ip
    if ip and ip != "None":
        p.ip("spec.clusterIP", ip, warn_legacy=not spec.cluster_ips)  # warned as clusterIPs
    if spec.cluster_ips and ip and spec.cluster_ips[0] != ip:
        p.invalid("spec.clusterIPs[0]", spec.cluster_ips[0], "must match `clusterIP`")
    if len(spec.cluster_ips) > 1:
        p.invalid(
            "spec.clusterIPs",
            spec.cluster_ips,
            "may specify no more than one IP for each IP family",
        )
    for i, cip in enumerate(spec.cluster_ips):
        if cip != "None":
            p.ip(f"spec.clusterIPs[{i}]", cip)
    headless = ip == "None" or (not ip and spec.cluster_ips[:1] == ["None"])
    if headless and type_ in NODE_PORT_TYPES:
        p.invalid("spec.clusterIPs[0]", "None", f"may not be set to 'None' for {type_} services")


def _service_ports(svc: Service, type_: str, p: Problems) -> None:
    ports = svc.spec.ports
    names: set[str] = set()
    port_protos: set[tuple[int, str]] = set()
    node_ports: set[tuple[int, str]] = set()
    for i, port in enumerate(ports):
        f = f"spec.ports[{i}]"
        if len(ports) > 1 and not port.name:
            p.required(f"{f}.name")
        if port.name:
            p.check(f"{f}.name", port.name, check_dns1123_label)
            if port.name in names:
                p.duplicate(f"{f}.name", port.name)
            names.add(port.name)
        p.port(f"{f}.port", port.port)
        proto = port.protocol or "TCP"
        p.enum(f"{f}.protocol", proto, PROTOCOLS)
        if (port.port, proto) in port_protos:
            p.duplicate(f, {"port": port.port, "protocol": proto})
        port_protos.add((port.port, proto))
        target = port.target_port
        if isinstance(target, str):
            p.check(f"{f}.targetPort", target, check_port_name)
        elif target is not None:
            p.port(f"{f}.targetPort", target)
        if port.node_port:
            if type_ not in NODE_PORT_TYPES:
                p.forbidden(f"{f}.nodePort", f"may not be used when `type` is '{type_}'")
            p.port(f"{f}.nodePort", port.node_port)
            if (port.node_port, proto) in node_ports:
                p.duplicate(f"{f}.nodePort", port.node_port)
            node_ports.add((port.node_port, proto))
        if port.app_protocol:
            p.check(f"{f}.appProtocol", port.app_protocol, check_qualified_name)


def _traffic_policies(svc: Service, type_: str, p: Problems) -> None:
    spec = svc.spec
    etp = spec.external_traffic_policy
    if etp is not None:
        if type_ not in NODE_PORT_TYPES and not spec.external_ips:
            p.invalid(
                "spec.externalTrafficPolicy",
                etp,
                "may only be set when `type` is 'NodePort' or 'LoadBalancer'",
            )
        p.enum("spec.externalTrafficPolicy", etp, TRAFFIC_POLICIES)
    p.enum("spec.internalTrafficPolicy", spec.internal_traffic_policy, TRAFFIC_POLICIES)
    td = spec.traffic_distribution
    p.enum("spec.trafficDistribution", td, TRAFFIC_DISTRIBUTIONS)
    if td == "PreferClose":
        warn('spec.trafficDistribution: "PreferClose" is deprecated; use "PreferSameZone"')
    hc = spec.health_check_node_port
    if hc:
        if type_ != "LoadBalancer" or etp != "Local":
            p.invalid(
                "spec.healthCheckNodePort",
                hc,
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` "
                "is 'Local'",
            )
        p.port("spec.healthCheckNodePort", hc)


def _ip_families(svc: Service, type_: str, cluster: ClusterSpec, p: Problems) -> None:
    spec = svc.spec
    if type_ == "ExternalName":
        return
    family = "IPv4" if cluster.service_net.version == 4 else "IPv6"
    for i, fam in enumerate(spec.ip_families):
        p.enum(f"spec.ipFamilies[{i}]", fam, ("IPv4", "IPv6"))
        if fam != family:
            p.invalid(f"spec.ipFamilies[{i}]", fam, "not configured on this cluster")
    p.enum("spec.ipFamilyPolicy", spec.ip_family_policy, IP_FAMILY_POLICIES)
    if spec.ip_family_policy == "RequireDualStack":
        p.invalid(
            "spec.ipFamilyPolicy",
            spec.ip_family_policy,
            "this cluster is not configured for dual-stack services",
        )


def _non_special_ip(field: str, value: str, p: Problems) -> None:
    p.ip(field, value)
    addr = parse_ip_legacy(value)
    if addr.is_unspecified:
        p.invalid(field, value, f"may not be unspecified ({addr})")
    if addr.is_loopback:
        p.invalid(field, value, "may not be in the loopback range (127.0.0.0/8, ::1/128)")
    if addr.is_link_local:
        p.invalid(field, value, "may not be in the link-local range (169.254.0.0/16, fe80::/10)")
    if addr.is_multicast:
        p.invalid(field, value, "may not be in the multicast range (224.0.0.0/4, ff00::/8)")


# --------------------------------------------------------------------------- Pods


#: container lists found valid without a warning, by identity (each held, so that its id
#: is not reused): a ReplicaSet's pods share their template's list, and a pod's later
#: writes (binding, status) keep it
_VALID_CONTAINERS: dict[int, list[Container]] = {}


def _containers(containers: list[Container], f: str, p: Problems) -> None:
    if _VALID_CONTAINERS.get(id(containers)) is containers:
        return
    warned = _WARNINGS[0]
    names: set[str] = set()
    port_names: set[str] = set()
    for i, c in enumerate(containers):
        cf = f"{f}.containers[{i}]"
        if not c.name:
            p.required(f"{cf}.name")
        p.check(f"{cf}.name", c.name, check_dns1123_label)
        if c.name in names:
            p.duplicate(f"{cf}.name", c.name)
        names.add(c.name)
        _container_ports(c, cf, port_names, p)
        _container_probes(c, cf, p)
    if _WARNINGS[0] == warned:
        if len(_VALID_CONTAINERS) >= 4096:
            _VALID_CONTAINERS.clear()
        _VALID_CONTAINERS[id(containers)] = containers


def validate_pod_spec(spec: PodSpec, f: str, p: Problems) -> None:
    if not spec.containers:
        p.required(f"{f}.containers")
    _containers(spec.containers, f, p)
    if spec.node_name:
        p.check(f"{f}.nodeName", spec.node_name, check_dns1123_subdomain)
    p.labels(f"{f}.nodeSelector", spec.node_selector)
    for i, t in enumerate(spec.tolerations):
        tf = f"{f}.tolerations[{i}]"
        p.enum(f"{tf}.operator", t.operator, ("Equal", "Exists"))
        if t.key:
            p.check(f"{tf}.key", t.key, check_qualified_name)
        elif t.operator != "Exists":
            p.invalid(
                f"{tf}.operator",
                t.operator,
                'operator must be Exists when `key` is empty, which means "match all values and all keys"',
            )
        if t.operator == "Exists" and t.value:
            p.invalid(f"{tf}.operator", t.value, "value must be empty when `operator` is 'Exists'")
        p.enum(f"{tf}.effect", t.effect, ("NoExecute", "NoSchedule", "PreferNoSchedule"))
        if t.toleration_seconds is not None and t.effect != "NoExecute":
            p.invalid(
                f"{tf}.effect",
                t.effect or "",
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            )
    _pod_dns(spec, f, p)


DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")


def _pod_dns(spec: PodSpec, f: str, p: Problems) -> None:
    """``dnsPolicy`` and ``dnsConfig`` as Kubernetes' validateDNSPolicy and
    validatePodDNSConfig check them (at most 3 nameservers, 32 search paths)."""
    extra = spec.model_extra or {}
    policy = extra.get("dnsPolicy")
    if policy is not None:
        p.enum(f"{f}.dnsPolicy", str(policy), DNS_POLICIES)
    config = extra.get("dnsConfig")
    cf = f"{f}.dnsConfig"
    if config is None:
        if policy == "None":
            p.required(cf, "must provide `dnsConfig` when `dnsPolicy` is None")
        return
    if not isinstance(config, dict):
        p.invalid(cf, config, "must be an object")
    servers = config.get("nameservers") or []
    if policy == "None" and not servers:
        p.required(
            f"{cf}.nameservers", "must provide at least one DNS nameserver when `dnsPolicy` is None"
        )
    if not isinstance(servers, list) or len(servers) > 3:
        p.invalid(f"{cf}.nameservers", servers, "must not have more than 3 nameservers")
    for i, server in enumerate(servers):
        p.ip(f"{cf}.nameservers[{i}]", str(server))
    searches = config.get("searches") or []
    if not isinstance(searches, list) or len(searches) > 32:
        p.invalid(f"{cf}.searches", searches, "must not have more than 32 search paths")
    for i, search in enumerate(searches):
        p.check(f"{cf}.searches[{i}]", str(search).rstrip("."), check_dns1123_subdomain)
    for i, opt in enumerate(config.get("options") or []):
        if not isinstance(opt, dict) or not opt.get("name"):
            p.required(f"{cf}.options[{i}].name")


HTTP_SCHEMES = ("HTTP", "HTTPS")
_HEADER_NAME = re.compile(r"[-A-Za-z0-9]+")


def _container_probes(c: Container, cf: str, p: Problems) -> None:
    """kube-apiserver's validateLivenessProbe / validateReadinessProbe /
    validateStartupProbe, in that order."""
    if c.liveness_probe is not None:
        _probe(c.liveness_probe, f"{cf}.livenessProbe", p)
        if c.liveness_probe.success_threshold != 1:
            p.invalid(
                f"{cf}.livenessProbe.successThreshold",
                c.liveness_probe.success_threshold,
                "must be 1",
            )
    if c.readiness_probe is not None:
        _probe(c.readiness_probe, f"{cf}.readinessProbe", p)
        if c.readiness_probe.termination_grace_period_seconds is not None:
            p.invalid(
                f"{cf}.readinessProbe.terminationGracePeriodSeconds",
                c.readiness_probe.termination_grace_period_seconds,
                "must not be set for readinessProbes",
            )
    if c.startup_probe is not None:
        _probe(c.startup_probe, f"{cf}.startupProbe", p)
        if c.startup_probe.success_threshold != 1:
            p.invalid(
                f"{cf}.startupProbe.successThreshold",
                c.startup_probe.success_threshold,
                "must be 1",
            )


def _probe(probe: Probe, f: str, p: Problems) -> None:
    """One handler (validateHandler), its fields, then the non-negative timing."""
    given = [
        (name, h)
        for name, h in (
            ("exec", probe.exec),
            ("httpGet", probe.http_get),
            ("tcpSocket", probe.tcp_socket),
            ("grpc", probe.grpc),
        )
        if h is not None
    ]
    if not given:
        p.required(f, "must specify a handler type")
    if len(given) > 1:
        p.forbidden(f"{f}.{given[1][0]}", "may not specify more than 1 handler type")
    if probe.exec is not None and not probe.exec.command:
        p.required(f"{f}.exec.command")
    if probe.http_get is not None:
        get = probe.http_get
        if not get.path:
            p.required(f"{f}.httpGet.path")
        _port_num_or_name(get.port, f"{f}.httpGet.port", p)
        if get.scheme not in HTTP_SCHEMES:
            p.unsupported(f"{f}.httpGet.scheme", get.scheme, HTTP_SCHEMES)
        for h in get.http_headers:
            if not _HEADER_NAME.fullmatch(h.name):
                p.invalid(
                    f"{f}.httpGet.httpHeaders",
                    h.name,
                    "a valid HTTP header must consist of alphanumeric characters or '-' "
                    "(e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
                )
    if probe.tcp_socket is not None:
        _port_num_or_name(probe.tcp_socket.port, f"{f}.tcpSocket.port", p)
    if probe.grpc is not None:
        p.port(f"{f}.grpc.port", probe.grpc.port)
    for name, value in (
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ):
        if value is not None and value < 0:
            p.invalid(f"{f}.{name}", value, "must be greater than or equal to 0")
    grace = probe.termination_grace_period_seconds
    if grace is not None and grace <= 0:
        p.invalid(f"{f}.terminationGracePeriodSeconds", grace, "must be greater than 0")


def _port_num_or_name(port: int | str, f: str, p: Problems) -> None:
    if isinstance(port, int):
        p.port(f, port)
    else:
        p.check(f, port, check_port_name)


def _container_ports(c: Container, cf: str, port_names: set[str], p: Problems) -> None:
    seen: set[tuple[int, str]] = set()
    for j, port in enumerate(c.ports):
        pf = f"{cf}.ports[{j}]"
        if port.name:
            p.check(f"{pf}.name", port.name, check_port_name)
            if port.name in port_names:
                p.duplicate(f"{pf}.name", port.name)
            port_names.add(port.name)
        p.port(f"{pf}.containerPort", port.container_port)
        p.enum(f"{pf}.protocol", port.protocol, PROTOCOLS)
        if port.host_port is not None:
            p.port(f"{pf}.hostPort", port.host_port, allow_zero=True)
        key = (port.container_port, port.protocol)
        if key in seen:
            p.duplicate(pf, {"containerPort": port.container_port, "protocol": port.protocol})
        seen.add(key)


def validate_pod_status(pod: Pod, p: Problems) -> None:
    st = pod.status
    p.enum("status.phase", st.phase, ("Failed", "Pending", "Running", "Succeeded", "Unknown"))
    if st.pod_ip:
        p.ip("status.podIP", st.pod_ip)
    for i, pip in enumerate(st.pod_ips):
        p.ip(f"status.podIPs[{i}].ip", pip.ip)
    if st.host_ip:
        p.ip("status.hostIP", st.host_ip)


# --------------------------------------------------------------------------- apps/v1


def selector_text(sel: LabelSelector) -> dict[str, object]:
    out: dict[str, object] = {}
    if sel.match_labels:
        out["matchLabels"] = dict(sel.match_labels)
    if sel.match_expressions:
        out["matchExpressions"] = [
            f"{e.key} {e.operator} {e.values}" for e in sel.match_expressions
        ]
    return out


def _label_selector(sel: LabelSelector, f: str, p: Problems) -> None:
    p.labels(f"{f}.matchLabels", sel.match_labels)
    for i, req in enumerate(sel.match_expressions):
        rf = f"{f}.matchExpressions[{i}]"
        p.check(f"{rf}.key", req.key, check_qualified_name)
        p.enum(f"{rf}.operator", req.operator, SELECTOR_OPS)
        if req.operator in ("In", "NotIn") and not req.values:
            p.required(f"{rf}.values", "must be specified when `operator` is 'In' or 'NotIn'")
        if req.operator in ("Exists", "DoesNotExist") and req.values:
            p.forbidden(
                f"{rf}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )


def validate_workload(
    obj: Deployment | ReplicaSet, p: Problems, *, empty_selector: str | None = None
) -> None:
    """What a ReplicaSet and a Deployment both check: replicas, the selector (an empty
    one refused with ``empty_selector`` first, when given), the template's labels and
    pod spec."""
    spec = obj.spec
    if spec.replicas is not None and spec.replicas < 0:
        p.invalid("spec.replicas", spec.replicas, "must be greater than or equal to 0")
    if spec.selector.is_empty:
        if empty_selector is not None:
            p.invalid("spec.selector", {}, empty_selector)
        p.required("spec.selector")
    _label_selector(spec.selector, "spec.selector", p)
    labels = spec.template.metadata.labels
    p.labels("spec.template.metadata.labels", labels)
    if not spec.selector.matches(labels):
        p.invalid(
            "spec.template.metadata.labels", labels, "`selector` does not match template `labels`"
        )
    validate_pod_spec(spec.template.spec, "spec.template.spec", p)


def validate_deployment(d: Deployment, p: Problems) -> None:
    """A ReplicaSet's checks, then the strategy, revisionHistoryLimit and the like."""
    validate_workload(d, p, empty_selector="empty selector is invalid for deployment")
    _deployment_spec(d, p)


def _deployment_spec(d: Deployment, p: Problems) -> None:
    spec = d.spec
    for f, value in (
        ("spec.minReadySeconds", spec.min_ready_seconds),
        ("spec.revisionHistoryLimit", spec.revision_history_limit),
        ("spec.progressDeadlineSeconds", spec.progress_deadline_seconds),
    ):
        if value is not None and value < 0:
            p.invalid(f, value, "must be greater than or equal to 0")
    deadline = spec.progress_deadline_seconds
    if deadline is not None and deadline <= (spec.min_ready_seconds or 0):
        p.invalid("spec.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds")
    strategy = spec.strategy
    if strategy is None:
        return
    p.enum("spec.strategy.type", strategy.type, STRATEGY_TYPES)
    ru = strategy.rolling_update
    if strategy.type == "Recreate":
        if ru is not None:
            p.forbidden(
                "spec.strategy.rollingUpdate",
                "may not be specified when strategy `type` is 'Recreate'",
            )
        return
    if ru is None:
        p.required("spec.strategy.rollingUpdate", "this should be defaulted and never be nil")
    f = "spec.strategy.rollingUpdate"
    unavailable = _int_or_percent(f"{f}.maxUnavailable", ru.max_unavailable, p)
    surge = _int_or_percent(f"{f}.maxSurge", ru.max_surge, p)
    if unavailable == 0 and surge == 0:
        p.invalid(f"{f}.maxUnavailable", ru.max_unavailable, "may not be 0 when `maxSurge` is 0")
    if isinstance(ru.max_unavailable, str) and unavailable > 100:
        p.invalid(f"{f}.maxUnavailable", ru.max_unavailable, "must not be greater than 100%")


def _int_or_percent(f: str, value: int | str | None, p: Problems) -> int:
    """Kubernetes' ValidatePositiveIntOrPercent; returns the number (a percentage's digits,
    0 when unset)."""
    if value is None:
        return 0
    if isinstance(value, str):
        if not PERCENT.fullmatch(value):
            p.invalid(f, value, PERCENT_MESSAGE)
        return int(value[:-1])
    if value < 0:
        p.invalid(f, value, "must be greater than or equal to 0")
    return value


# --------------------------------------------------------------------------- discovery/v1

MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100
MAX_PORTS = 100


def validate_endpointslice(es: EndpointSlice, p: Problems) -> None:
    p.enum("addressType", es.address_type, ADDRESS_TYPES)
    if len(es.endpoints) > MAX_ENDPOINTS:
        p.too_many("endpoints", len(es.endpoints), MAX_ENDPOINTS)
    version = {"IPv4": 4, "IPv6": 6}.get(es.address_type)
    for i, ep in enumerate(es.endpoints):
        ef = f"endpoints[{i}]"
        if not ep.addresses:
            p.required(f"{ef}.addresses", "must contain at least 1 address")
        if len(ep.addresses) > MAX_ADDRESSES:
            p.too_many(f"{ef}.addresses", len(ep.addresses), MAX_ADDRESSES)
        for j, addr in enumerate(ep.addresses):
            af = f"{ef}.addresses[{j}]"
            if version is None:
                p.check(af, addr, check_dns1123_subdomain)
            else:
                p.ip(af, addr, version=version)
        if ep.node_name:
            p.check(f"{ef}.nodeName", ep.node_name, check_dns1123_subdomain)
        if ep.hostname:
            p.check(f"{ef}.hostname", ep.hostname, check_dns1123_label)
    if len(es.ports) > MAX_PORTS:
        p.too_many("ports", len(es.ports), MAX_PORTS)
    names: set[str] = set()
    for i, port in enumerate(es.ports):
        pf = f"ports[{i}]"
        name = port.name or ""
        if name:
            p.check(f"{pf}.name", name, check_dns1123_label)
        if name in names:
            p.duplicate(f"{pf}.name", name)
        names.add(name)
        if port.port is not None:
            p.port(f"{pf}.port", port.port)
        p.enum(f"{pf}.protocol", port.protocol, PROTOCOLS)


# --------------------------------------------------------------------------- Node


def validate_node(node: Node, cluster: ClusterSpec, p: Problems) -> None:
    spec = node.spec
    pod_net = cluster.pod_net
    cidrs = list(spec.pod_cidrs)
    if spec.pod_cidr and cidrs and cidrs[0] != spec.pod_cidr:
        p.invalid("spec.podCIDRs[0]", cidrs[0], "must match spec.podCIDR")
    if len(cidrs) > 2:
        p.invalid("spec.podCIDRs", cidrs, "may specify no more than one CIDR for each IP family")
    for i, cidr in enumerate(cidrs or ([spec.pod_cidr] if spec.pod_cidr else [])):
        f = "spec.podCIDR" if not cidrs else f"spec.podCIDRs[{i}]"
        try:
            net = parse_cidr(cidr)
        except ValueError:
            p.invalid(f, cidr, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")
        if net.version == pod_net.version and not net.subnet_of(pod_net):  # type: ignore[arg-type]
            p.invalid(f, cidr, f"must be inside the cluster podCIDR {pod_net}")
    for i, t in enumerate(spec.taints):
        p.check(f"spec.taints[{i}].key", t.key, check_qualified_name)
        if t.value:
            p.check(f"spec.taints[{i}].value", t.value, check_label_value)
    for i, a in enumerate(node.status.addresses):
        if a.type in ("InternalIP", "ExternalIP"):
            p.ip(f"status.addresses[{i}].address", a.address)
