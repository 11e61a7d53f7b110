"""Build the proxier's model from Kubernetes objects (STRUCTURE.md §1.1).

* :func:`build_node_config` — a :class:`NodeProxyConfig` from a KubeProxyConfiguration
  (or upstream defaults), the Cluster spec and the Node's addresses.
* :func:`service_port_infos` / :func:`endpoints_by_port` — Services and EndpointSlices
  read as kube-proxy reads them: sloppy IP parsing (leading zeros normalised, unparsable
  addresses skipped), family filtering, endpoint dedupe and ``ip:port`` text sort.
* :func:`categorize_endpoints` — upstream's CategorizeEndpoints, topology included
  (:func:`topology_mode`: node and zone hints on endpoints, the node's name and zone
  label, as kube-proxy 1.35 reads them).
* :func:`make_state` / :func:`build_snapshot` — the derived flags and the snapshot.

Pure functions: same objects in, equal values out.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence

from dataplane.proxy.model import (
    DEFAULT_AFFINITY_TIMEOUT,
    PROTOCOLS,
    EndpointInfo,
    IPFamily,
    LocalDetector,
    NodeProxyConfig,
    ProxySnapshot,
    ServicePortInfo,
    ServicePortName,
    ServicePortState,
)
from netmodel.cluster import ClusterSpec
from netmodel.ip import parse_cidr_sloppy, parse_ip_sloppy
from netmodel.objects import Endpoint, EndpointSlice, Service
from netmodel.proxyconfig import KubeProxyConfiguration

TOPOLOGY_MODE_ANNOTATION = "service.kubernetes.io/topology-mode"
TOPOLOGY_HINTS_ANNOTATION = "service.kubernetes.io/topology-aware-hints"
ZONE_LABEL = "topology.kubernetes.io/zone"

# --------------------------------------------------------------------------- node config


def _family_of(text: str) -> IPFamily | None:
    ip = parse_ip_sloppy(text)
    if ip is None:
        return None
    return IPFamily.IPV4 if ip.version == 4 else IPFamily.IPV6


def _pick_cidr(cidrs: str, family: IPFamily) -> str | None:
    for part in cidrs.split(","):
        net = parse_cidr_sloppy(part)
        if net is not None and net.version == family.version:
            return str(net)
    return None


def build_node_config(
    proxy_config: KubeProxyConfiguration | None,
    cluster_spec: ClusterSpec | None,
    node_name: str,
    node_ips: Sequence[str],
    node_pod_cidr: str | None,
    *,
    ip_family: IPFamily | None = None,
    node_labels: Mapping[str, str] | None = None,
) -> NodeProxyConfig:
    """The proxier configuration of one node, following upstream defaults.

    ``node_ips`` are the Node object's addresses (loopback is added). ``ip_family``
    defaults to the family of the first node IP. The local-traffic detector defaults to
    ClusterCIDR with ``clusterCIDR`` = the Cluster's podCIDR; an explicitly empty
    ``clusterCIDR: ""`` turns detection off; NodeCIDR uses ``node_pod_cidr``. The
    masquerade mark is written as real kube-proxy writes it (``0x00004000``).
    ``node_labels`` give the node's zone for topology-aware routing.
    """
    pc = proxy_config or KubeProxyConfiguration()
    spec = cluster_spec or ClusterSpec()
    ips: list[str] = []
    for text in ["127.0.0.1", "::1", *node_ips]:
        ip = parse_ip_sloppy(text)
        if ip is not None and str(ip) not in ips:
            ips.append(str(ip))
    non_loop = [ip for ip in ips if not ipaddress.ip_address(ip).is_loopback]
    family = ip_family or (_family_of(non_loop[0]) if non_loop else None) or IPFamily.IPV4
    primary = next(
        (ip for ip in non_loop if ipaddress.ip_address(ip).version == family.version),
        "127.0.0.1" if family is IPFamily.IPV4 else "::1",
    )

    detector: LocalDetector | None = None
    mode = pc.effective_detect_local_mode
    if mode == "ClusterCIDR":
        cidrs = spec.pod_cidr if pc.cluster_cidr is None else pc.cluster_cidr
        cidr = _pick_cidr(cidrs, family) if cidrs else None
        detector = LocalDetector("ClusterCIDR", cidr) if cidr else None
    elif mode == "NodeCIDR":
        cidr = _pick_cidr(node_pod_cidr, family) if node_pod_cidr else None
        detector = LocalDetector("NodeCIDR", cidr) if cidr else None
    elif mode == "BridgeInterface" and pc.detect_local.bridge_interface:
        detector = LocalDetector("BridgeInterface", pc.detect_local.bridge_interface)
    elif mode == "InterfaceNamePrefix" and pc.detect_local.interface_name_prefix:
        detector = LocalDetector("InterfaceNamePrefix", pc.detect_local.interface_name_prefix)

    nftables = pc.effective_mode == "nftables"
    masq_all = pc.nftables.masquerade_all if nftables else pc.iptables.masquerade_all
    bit = pc.nftables.masquerade_bit if nftables else pc.iptables.masquerade_bit

    npa: list[str] = []
    for item in pc.node_port_addresses:
        if item == "primary":  # the node's primary IP of each family
            for fam in IPFamily:
                first = next((i for i in non_loop if _family_of(i) is fam), None)
                if first is not None:
                    npa.append(f"{first}/{fam.host_prefix}")
        else:
            net = parse_cidr_sloppy(item)
            if net is not None:
                npa.append(str(net))

    return NodeProxyConfig(
        node_name=node_name,
        node_ips=tuple(ips),
        primary_ip=primary,
        ip_family=family,
        local_detector=detector,
        masquerade_all=masq_all,
        masquerade_bit=bit,
        masquerade_mark="0x" + format(1 << bit, "08x"),
        localhost_node_ports=pc.iptables.localhost_node_ports,
        node_port_addresses=tuple(npa),
        conntrack_tcp_be_liberal=pc.conntrack.tcp_be_liberal,
        ipvs_scheduler=pc.ipvs.effective_scheduler,
        service_cidrs=tuple(
            str(n) for n in map(parse_cidr_sloppy, spec.service_cidr.split(",")) if n
        ),
        load_balancer_ip_mode=pc.feature_gates.get("LoadBalancerIPMode", True),
        zone=(node_labels or {}).get(ZONE_LABEL, ""),
    )


# --------------------------------------------------------------------------- services


def _cluster_ip(service: Service, family: IPFamily) -> str | None:
    spec = service.spec
    if spec.cluster_ip in (None, "", "None") or service.service_type == "ExternalName":
        return None
    candidates = spec.cluster_ips or [spec.cluster_ip or ""]
    for text in candidates:
        ip = parse_ip_sloppy(text)
        if ip is not None and ip.version == family.version:
            return str(ip)
    return None


def _ips_of_family(texts: Iterable[str | None], family: IPFamily) -> tuple[str, ...]:
    out: list[str] = []
    for text in texts:
        ip = parse_ip_sloppy(text or "")
        if ip is not None and ip.version == family.version:
            out.append(str(ip))
    return tuple(out)


def service_port_infos(service: Service, config: NodeProxyConfig) -> list[ServicePortInfo]:
    """The service ports kube-proxy handles for ``service`` on this family ([] if none).

    Headless, ExternalName and services without a ClusterIP of this family are skipped;
    ports with a protocol other than TCP/UDP/SCTP are skipped.
    """
    family = config.ip_family
    cluster_ip = _cluster_ip(service, family)
    if cluster_ip is None:
        return []
    spec = service.spec
    stype = service.service_type
    external_ips = _ips_of_family(spec.external_ips, family)
    ranges: list[str] = []
    for text in spec.load_balancer_source_ranges:
        net = parse_cidr_sloppy(text.strip())
        if net is not None and net.version == family.version:
            ranges.append(str(net))
    vips = _ips_of_family(
        (
            ing.ip
            for ing in service.status.load_balancer.ingress
            if not (config.load_balancer_ip_mode and ing.ip_mode == "Proxy")
        ),
        family,
    )
    etp_local = stype in ("NodePort", "LoadBalancer") and spec.external_traffic_policy == "Local"
    itp_local = spec.internal_traffic_policy == "Local"
    hcnp = (spec.health_check_node_port or 0) if stype == "LoadBalancer" and etp_local else 0
    affinity = 0
    if spec.session_affinity == "ClientIP":
        cfg = spec.session_affinity_config
        timeout = cfg.client_ip.timeout_seconds if cfg and cfg.client_ip else None
        affinity = timeout or DEFAULT_AFFINITY_TIMEOUT
    annotations = service.metadata.annotations
    hints = annotations.get(TOPOLOGY_MODE_ANNOTATION) or annotations.get(
        TOPOLOGY_HINTS_ANNOTATION, ""
    )
    topology = bool(spec.traffic_distribution) or hints in (
        "Auto",
        "auto",
    )
    out = []
    for port in spec.ports:
        protocol = (port.protocol or "TCP").upper()
        if protocol not in PROTOCOLS:
            continue
        spn = ServicePortName(service.namespace, service.name, port.name or "", protocol)
        out.append(
            ServicePortInfo(
                name=spn,
                cluster_ip=cluster_ip,
                port=port.port,
                node_port=port.node_port or 0,
                external_ips=external_ips,
                load_balancer_vips=vips,
                load_balancer_source_ranges=tuple(ranges),
                affinity_timeout=affinity,
                external_policy_local=etp_local,
                internal_policy_local=itp_local,
                health_check_node_port=hcnp,
                service_type=stype,
                topology_aware=topology,
            )
        )
    return out


# --------------------------------------------------------------------------- endpoints

_CANONICAL_V4 = re.compile(
    r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
)


def _normal_ip(text: str, version: int) -> str | None:
    """The normalised IP text if ``text`` parses sloppily to ``version``, else None.
    Canonical dotted quads (the common case) skip the full parser."""
    if version == 4 and _CANONICAL_V4.fullmatch(text):
        return text
    ip = parse_ip_sloppy(text)
    return str(ip) if ip is not None and ip.version == version else None


_NO_HINTS: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())


def _hints(ep: Endpoint) -> tuple[frozenset[str], frozenset[str]]:
    """The endpoint's (zone hints, node hints)."""
    h = ep.hints
    return _NO_HINTS if h is None else (h.zone_names, h.node_names)


_Read = tuple[str, str | None, bool, bool, bool, tuple[frozenset[str], frozenset[str]]]
#: id(slice) -> (the slice, IP version, its endpoints read: what does not depend on the
#: node), for the kube-proxies of many nodes in one process reading the same slices
_READ: dict[int, tuple[EndpointSlice, int, list[_Read]]] = {}


def _read_endpoints(eps: EndpointSlice, version: int) -> list[_Read]:
    """Per endpoint with a usable first address of ``version``: (normalised IP, node
    name, ready, serving, terminating, (zone hints, node hints))."""
    hit = _READ.get(id(eps))
    if hit is not None and hit[0] is eps and hit[1] == version:
        return hit[2]
    out: list[_Read] = []
    for ep in eps.endpoints:
        if not ep.addresses:
            continue
        ip = _normal_ip(ep.addresses[0], version)
        if ip is None:
            continue
        c = ep.conditions
        out.append(
            (
                ip,
                ep.node_name,
                c.ready is None or c.ready,
                c.serving is None or c.serving,
                c.terminating is not None and c.terminating,
                _hints(ep),
            )
        )
    if len(_READ) >= 1 << 16:
        _READ.clear()
    _READ[id(eps)] = (eps, version, out)
    return out


def slice_endpoints(
    eps: EndpointSlice, config: NodeProxyConfig
) -> dict[ServicePortName, list[EndpointInfo]]:
    """The endpoints one EndpointSlice contributes, per service port (not deduplicated).

    Only slices of this family with a ``kubernetes.io/service-name`` label count; only an
    endpoint's first address is used; conditions resolve as kube-proxy does (nil ready or
    serving = true, nil terminating = false).
    """
    svc = eps.service_name
    family = config.ip_family
    if not svc or eps.address_type != family.value:
        return {}
    node = config.node_name
    infos = [
        (ip, node_name is not None and node_name == node, r, s, t, h)
        for ip, node_name, r, s, t, h in _read_endpoints(eps, family.version)
    ]
    out: dict[ServicePortName, list[EndpointInfo]] = {}
    for port in eps.ports:
        if port.port is None:
            continue
        spn = ServicePortName(eps.namespace, svc, port.name or "", (port.protocol or "TCP").upper())
        out.setdefault(spn, []).extend(
            EndpointInfo(
                ip,
                port.port,
                is_local=local,
                ready=r,
                serving=s,
                terminating=t,
                zone_hints=h[0],
                node_hints=h[1],
                service_port=spn,
            )
            for ip, local, r, s, t, h in infos
        )
    return out


def merge_endpoints(groups: Iterable[Iterable[EndpointInfo]]) -> tuple[EndpointInfo, ...]:
    """Deduplicate by ``ip:port`` (first wins, a local copy replaces a remote one) and
    sort by the ``ip:port`` text, as kube-proxy does."""
    seen: dict[str, EndpointInfo] = {}
    for group in groups:
        for ep in group:
            if ep.endpoint not in seen or ep.is_local:
                seen[ep.endpoint] = ep
    return tuple(seen[k] for k in sorted(seen))


def endpoints_by_port(
    slices: Iterable[EndpointSlice], config: NodeProxyConfig
) -> dict[ServicePortName, tuple[EndpointInfo, ...]]:
    """All endpoints per service port (slices taken in name order, then merged)."""
    groups: dict[ServicePortName, list[list[EndpointInfo]]] = {}
    for eps in sorted(slices, key=lambda s: (s.namespace, s.name)):
        for spn, infos in slice_endpoints(eps, config).items():
            groups.setdefault(spn, []).append(infos)
    return {spn: merge_endpoints(g) for spn, g in groups.items()}


# --------------------------------------------------------------------------- categorize


def topology_mode(endpoints: Sequence[EndpointInfo], node: str, zone: str) -> str:
    """Which hints this node's kube-proxy follows (upstream 1.35's topologyModeFromHints):
    ``PreferSameNode`` when every ready endpoint has node hints and one is for ``node``;
    else ``PreferSameZone`` when every ready endpoint has zone hints and one is for
    ``zone``; else ``""`` (every endpoint). No ready endpoint: ``""``. The Service's
    annotation and trafficDistribution are not read here: the hints are what the
    EndpointSlice controller made of them."""
    has_ready = False
    all_nodes = all_zones = True
    for_node = for_zone = False
    for e in endpoints:
        if not e.ready:
            continue
        has_ready = True
        if not e.node_hints:
            all_nodes = False
        elif node in e.node_hints:
            for_node = True
        if not e.zone_hints:
            all_zones = False
        elif zone in e.zone_hints:
            for_zone = True
    if not has_ready:
        return ""
    if all_nodes and for_node:
        return "PreferSameNode"
    if all_zones and for_zone:
        return "PreferSameZone"
    return ""


def _available(e: EndpointInfo, mode: str, node: str, zone: str) -> bool:
    if mode == "PreferSameNode":
        return node in e.node_hints
    if mode == "PreferSameZone":
        return zone in e.zone_hints
    return True


def categorize_endpoints(
    endpoints: Sequence[EndpointInfo], info: ServicePortInfo, zone: str = "", node: str = ""
) -> tuple[tuple[EndpointInfo, ...], tuple[EndpointInfo, ...], tuple[EndpointInfo, ...], bool]:
    """Upstream CategorizeEndpoints: ``(cluster, local, reachable, has_any)``.

    cluster = ready endpoints (only those hinted for ``node`` or ``zone`` when
    :func:`topology_mode` says so), or the serving-and-terminating ones when none is
    ready (only if the port uses cluster endpoints); local = local ready endpoints, or
    local serving-and-terminating ones (hints never narrow them: traffic policy Local
    comes first); reachable = the endpoints some chain sends traffic to.
    """
    cluster: tuple[EndpointInfo, ...] = ()
    local: tuple[EndpointInfo, ...] = ()
    has_any = False
    topology = False
    if info.uses_cluster_endpoints:
        mode = topology_mode(endpoints, node, zone)
        topology = mode != ""
        cluster = tuple(e for e in endpoints if e.ready and _available(e, mode, node, zone))
        if not cluster:
            cluster = tuple(e for e in endpoints if e.serving and e.terminating)
        has_any = bool(cluster)
    if not info.uses_local_endpoints:
        return cluster, local, cluster, has_any
    local_ready = local_term = False
    for e in endpoints:
        if e.ready:
            has_any = True
            local_ready = local_ready or e.is_local
        elif e.serving and e.terminating:
            has_any = True
            local_term = local_term or e.is_local
    fallback = False
    if local_ready:
        local = tuple(e for e in endpoints if e.is_local and e.ready)
    elif local_term:
        fallback = True
        local = tuple(e for e in endpoints if e.is_local and e.serving and e.terminating)
    if not info.uses_cluster_endpoints:
        return cluster, local, local, has_any
    if not fallback and not topology:
        return cluster, local, cluster, has_any
    merged = {e.endpoint: e for e in cluster}
    merged.update((e.endpoint, e) for e in local)
    return cluster, local, tuple(merged[k] for k in sorted(merged)), has_any


def make_state(
    info: ServicePortInfo, endpoints: tuple[EndpointInfo, ...], zone: str = "", node: str = ""
) -> ServicePortState:
    """A service port with its categorised endpoints and derived flags (§1.1); ``zone``
    and ``node`` are this node's zone label and name (topology hints)."""
    cluster, local, reachable, has_any = categorize_endpoints(endpoints, info, zone, node)
    has_internal = has_any and not (info.internal_policy_local and not local)
    has_external = has_any and not (info.external_policy_local and not local)
    spn = info.name.text
    internal_filter: tuple[str, str] | None = None
    external_filter: tuple[str, str] | None = None
    if not has_any:
        internal_filter = external_filter = ("REJECT", f"{spn} has no endpoints")
    else:
        if not has_internal:
            internal_filter = ("DROP", f"{spn} has no local endpoints")
        if not has_external:
            external_filter = ("DROP", f"{spn} has no local endpoints")
    return ServicePortState(
        info=info,
        endpoints=endpoints,
        cluster_endpoints=cluster,
        local_endpoints=local,
        reachable_endpoints=reachable,
        has_endpoints=has_any,
        has_internal_endpoints=has_internal,
        has_external_endpoints=has_external,
        uses_cluster_chain=bool(cluster) and info.uses_cluster_endpoints,
        uses_local_chain=bool(local) and info.uses_local_endpoints,
        uses_external_chain=has_any and info.externally_accessible,
        uses_fw_chain=has_any
        and bool(info.load_balancer_vips)
        and bool(info.load_balancer_source_ranges),
        internal_filter=internal_filter,
        external_filter=external_filter,
    )


def service_states(
    service: Service,
    endpoints: dict[ServicePortName, tuple[EndpointInfo, ...]],
    config: NodeProxyConfig,
) -> list[ServicePortState]:
    """The states of one Service's ports, given endpoints per service port."""
    return [
        make_state(i, endpoints.get(i.name, ()), config.zone, config.node_name)
        for i in service_port_infos(service, config)
    ]


def snapshot_from_states(
    states: Iterable[ServicePortState], config: NodeProxyConfig
) -> ProxySnapshot:
    """Assemble a snapshot, ordering ports by (namespace, name, port name, protocol)."""
    ordered = sorted(states, key=lambda s: s.info.name.sort_key())
    return ProxySnapshot(
        ip_family=config.ip_family,
        ports={s.info.name: s for s in ordered},
        total_endpoints=sum(len(s.endpoints) for s in ordered),
    )


def build_snapshot(
    services: Iterable[Service],
    endpointslices: Iterable[EndpointSlice],
    node_config: NodeProxyConfig,
) -> ProxySnapshot:
    """Everything one proxier renders: every handled service port and its endpoints.

    If two Services share a namespace/name the last one wins (as a watch cache would).
    """
    by_key = {s.key: s for s in services}
    eps = endpoints_by_port(endpointslices, node_config)
    states: list[ServicePortState] = []
    for svc in by_key.values():
        states.extend(service_states(svc, eps, node_config))
    return snapshot_from_states(states, node_config)
