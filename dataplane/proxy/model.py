"""The kube-proxy model: what one node's proxier knows, as frozen values.

* :class:`NodeProxyConfig` — the proxier's configuration on one node for one IP family
  (node name and IPs, local-traffic detector, masquerade mark, NodePort addresses, ...).
* :class:`ServicePortName`, :class:`ServicePortInfo`, :class:`EndpointInfo` — one Service
  port and its endpoints as kube-proxy reads them (IPs already parsed and normalised).
* :class:`ServicePortState` — a service port together with its categorised endpoints and
  every derived flag the renderers need (STRUCTURE.md §1.1).
* :class:`ProxySnapshot` — all service ports of one family, in a deterministic order.

Everything here is immutable and hashable. :class:`ServicePortState` caches its hash so
that renderers can memoise per-service text cheaply (10,000 Services per sync).
Builders from Kubernetes objects are in :mod:`dataplane.proxy.snapshot`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import KW_ONLY, InitVar, dataclass, field
from enum import StrEnum
from typing import Literal

from dataplane.proxy import naming
from netmodel.ip import IPNetwork, join_host_port

LARGE_CLUSTER_THRESHOLD = 1000
DEFAULT_AFFINITY_TIMEOUT = 10800
PROTOCOLS = ("TCP", "UDP", "SCTP")

#: The nfacct counters kube-proxy creates (and matches on when present).
NFACCT_INVALID_DROPPED = "ct_state_invalid_dropped_pkts"
NFACCT_LOCALHOST_NODEPORTS = "localhost_nps_accepted_pkts"


class IPFamily(StrEnum):
    """The IP family one proxier handles (a dual-stack node runs one proxier per family)."""

    IPV4 = "IPv4"
    IPV6 = "IPv6"

    @property
    def version(self) -> int:
        return 4 if self is IPFamily.IPV4 else 6

    @property
    def loopback_cidr(self) -> str:
        return "127.0.0.0/8" if self is IPFamily.IPV4 else "::1/128"

    @property
    def host_prefix(self) -> int:
        return 32 if self is IPFamily.IPV4 else 128


DetectLocalMode = Literal["ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix"]


@dataclass(frozen=True, slots=True)
class LocalDetector:
    """kube-proxy's local-traffic detector (``--detect-local-mode``).

    ``value`` is a CIDR for ClusterCIDR / NodeCIDR, a bridge name for BridgeInterface, an
    interface name prefix for InterfaceNamePrefix. A node without a detector has
    ``NodeProxyConfig.local_detector is None`` (no pod-traffic rules are written).
    """

    mode: DetectLocalMode
    value: str

    @property
    def iptables_local(self) -> str:
        """Match text for "comes from a local pod" (``-s 10.0.0.0/8``, ``-i cbr0``)."""
        if self.mode in ("ClusterCIDR", "NodeCIDR"):
            return f"-s {self.value}"
        if self.mode == "BridgeInterface":
            return f"-i {self.value}"
        return f"-i {self.value}+"

    @property
    def iptables_not_local(self) -> str:
        """Negation of :attr:`iptables_local` (``! -s 10.0.0.0/8``)."""
        return "! " + self.iptables_local

    def nft_local(self, family: IPFamily) -> str:
        """nftables match for "comes from a local pod" (``ip saddr 10.0.0.0/8``)."""
        if self.mode in ("ClusterCIDR", "NodeCIDR"):
            return f"{'ip' if family is IPFamily.IPV4 else 'ip6'} saddr {self.value}"
        if self.mode == "BridgeInterface":
            return f"iifname {self.value}"
        return f"iifname {self.value}*"

    def nft_not_local(self, family: IPFamily) -> str:
        """nftables negation of :meth:`nft_local` (``ip saddr != 10.0.0.0/8``)."""
        if self.mode in ("ClusterCIDR", "NodeCIDR"):
            return f"{'ip' if family is IPFamily.IPV4 else 'ip6'} saddr != {self.value}"
        if self.mode == "BridgeInterface":
            return f"iifname != {self.value}"
        return f"iifname != {self.value}*"


@dataclass(frozen=True, slots=True)
class NodeProxyConfig:
    """One node's proxier configuration for one IP family.

    ``node_ips`` holds every address of the node in both families (the Node object's
    addresses plus loopback), normalised; it is the ``--dst-type LOCAL`` set.
    ``primary_ip`` is the proxier's ``nodeIP`` (used for LB source ranges and IPVS).
    ``masquerade_mark`` is the mark exactly as written into rules: real kube-proxy writes
    ``0x00004000``, upstream's test fake ``0x4000``. ``node_port_addresses`` are CIDRs
    (both families; empty = every local address). ``nfacct_counters`` names the nfacct
    objects that exist on the node (rules match on them only then).
    """

    node_name: str
    node_ips: tuple[str, ...]
    primary_ip: str
    ip_family: IPFamily = IPFamily.IPV4
    local_detector: LocalDetector | None = None
    masquerade_all: bool = False
    masquerade_bit: int = 14
    masquerade_mark: str = "0x00004000"
    localhost_node_ports: bool = True
    node_port_addresses: tuple[str, ...] = ()
    conntrack_tcp_be_liberal: bool = False
    random_fully: bool = True
    nfacct_counters: frozenset[str] = frozenset(
        {NFACCT_INVALID_DROPPED, NFACCT_LOCALHOST_NODEPORTS}
    )
    large_cluster_threshold: int = LARGE_CLUSTER_THRESHOLD
    ipvs_scheduler: str = "rr"
    service_cidrs: tuple[str, ...] = ()
    load_balancer_ip_mode: bool = True
    zone: str = ""

    @property
    def is_ipv6(self) -> bool:
        return self.ip_family is IPFamily.IPV6

    @property
    def mark_value(self) -> int:
        """The masquerade bit as a number (``1 << masquerade_bit``)."""
        return 1 << self.masquerade_bit

    @property
    def family_node_ips(self) -> tuple[str, ...]:
        """Node IPs of this proxier's family, loopback included, in ``node_ips`` order."""
        v = self.ip_family.version
        return tuple(ip for ip in self.node_ips if ipaddress.ip_address(ip).version == v)

    def family_node_port_cidrs(self) -> tuple[IPNetwork, ...]:
        """``node_port_addresses`` of this family, parsed."""
        v = self.ip_family.version
        nets = (ipaddress.ip_network(c, strict=False) for c in self.node_port_addresses)
        return tuple(n for n in nets if n.version == v)

    @property
    def node_ports_match_all(self) -> bool:
        """True when NodePorts are open on every local address (no CIDR of this family,
        or one covering everything)."""
        cidrs = self.family_node_port_cidrs()
        return not cidrs or any(n.prefixlen == 0 for n in cidrs)

    def node_port_ips(self) -> tuple[str, ...]:
        """The node IPs that accept NodePorts when not :attr:`node_ports_match_all`,
        sorted as text (upstream lists them from a string set)."""
        cidrs = self.family_node_port_cidrs()
        return tuple(
            sorted(
                ip
                for ip in self.family_node_ips
                if any(ipaddress.ip_address(ip) in n for n in cidrs)
            )
        )


@dataclass(frozen=True, slots=True)
class ServicePortName:
    """``namespace/name:port`` plus protocol: the key of one service port.

    ``str()`` is upstream's ServicePortName string (``ns/svc`` for an unnamed port).
    """

    namespace: str
    name: str
    port: str
    protocol: str
    text: str = field(init=False, compare=False, repr=False)
    #: ``namespace/name`` of the Service (the granularity of partial syncs).
    service_key: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        base = f"{self.namespace}/{self.name}"
        object.__setattr__(self, "service_key", base)
        object.__setattr__(self, "text", f"{base}:{self.port}" if self.port else base)

    def __str__(self) -> str:
        return self.text

    def sort_key(self) -> tuple[str, str, str, str]:
        return (self.namespace, self.name, self.port, self.protocol)


@dataclass(frozen=True, slots=True)
class ServicePortInfo:
    """One Service port as kube-proxy reads it (STRUCTURE.md §1.1).

    IP texts are normalised (sloppy-parsed); ``load_balancer_source_ranges`` are masked
    CIDRs; ``affinity_timeout`` is 0 without ClientIP affinity; ``node_port`` and
    ``health_check_node_port`` are 0 when unset or unused; ``topology_aware`` is set by
    the topology-mode annotation (``Auto``) or ``spec.trafficDistribution``: what the
    Service asked for, shown to users; kube-proxy 1.35 filters by the endpoints' hints
    alone (:func:`dataplane.proxy.snapshot.topology_mode`).
    """

    name: ServicePortName
    cluster_ip: str
    port: int
    node_port: int = 0
    external_ips: tuple[str, ...] = ()
    load_balancer_vips: tuple[str, ...] = ()
    load_balancer_source_ranges: tuple[str, ...] = ()
    affinity_timeout: int = 0
    external_policy_local: bool = False
    internal_policy_local: bool = False
    health_check_node_port: int = 0
    service_type: str = "ClusterIP"
    topology_aware: bool = False

    @property
    def protocol(self) -> str:
        return self.name.protocol

    @property
    def proto(self) -> str:
        """Lower-case protocol as written in rules (``tcp``)."""
        return self.name.protocol.lower()

    @property
    def externally_accessible(self) -> bool:
        return bool(self.node_port or self.load_balancer_vips or self.external_ips)

    @property
    def uses_cluster_endpoints(self) -> bool:
        return not self.internal_policy_local or self.externally_accessible

    @property
    def uses_local_endpoints(self) -> bool:
        return self.internal_policy_local or (
            self.external_policy_local and self.externally_accessible
        )


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    """One endpoint of ``service_port``: ``ip:port`` with its conditions.

    ``endpoint`` is ``ip:port`` (``[ip]:port`` for IPv6), the string kube-proxy sorts and
    hashes. ``is_local`` means the endpoint's nodeName is this node; ``zone_hints`` are
    the zones of ``hints.forZones``, ``node_hints`` the nodes of ``hints.forNodes``.
    ``chain_name`` is the endpoint's ``KUBE-SEP-…``
    chain (and ``-m recent`` list) for ``service_port``, computed once when the endpoint
    is made and kept, as upstream's endpoints change tracker keeps it on its endpoint
    info: the renderers read it instead of hashing on every sync. ``service_port`` is not
    kept (an endpoint belongs to the one port whose state holds it) and takes no part in
    equality.
    """

    ip: str
    port: int
    is_local: bool = False
    ready: bool = True
    serving: bool = True
    terminating: bool = False
    zone_hints: frozenset[str] = frozenset()
    node_hints: frozenset[str] = frozenset()
    _: KW_ONLY
    service_port: InitVar[ServicePortName]
    endpoint: str = field(init=False, compare=False, repr=False)
    chain_name: str = field(init=False, compare=False, repr=False)

    def __post_init__(self, service_port: ServicePortName) -> None:
        endpoint = join_host_port(self.ip, self.port)
        object.__setattr__(self, "endpoint", endpoint)
        object.__setattr__(
            self,
            "chain_name",
            naming.sep_chain(service_port.text, service_port.protocol, endpoint),
        )

    def __str__(self) -> str:
        return self.endpoint


@dataclass(frozen=True, slots=True, eq=False)
class ServicePortState:
    """A service port, its endpoints and everything derived from them on this node.

    ``endpoints`` are all endpoints (deduplicated, sorted by ``ip:port`` text);
    ``cluster_endpoints`` / ``local_endpoints`` / ``reachable_endpoints`` come from
    CategorizeEndpoints. The chain fields hold chain names; the ``*_filter`` fields are
    ``(target, comment)`` for the REJECT/DROP rules, or ``None`` when traffic is handled.
    Equality is by value; the hash is computed once.
    """

    info: ServicePortInfo
    endpoints: tuple[EndpointInfo, ...]
    cluster_endpoints: tuple[EndpointInfo, ...]
    local_endpoints: tuple[EndpointInfo, ...]
    reachable_endpoints: tuple[EndpointInfo, ...]
    has_endpoints: bool
    has_internal_endpoints: bool
    has_external_endpoints: bool
    uses_cluster_chain: bool
    uses_local_chain: bool
    uses_external_chain: bool
    uses_fw_chain: bool
    internal_filter: tuple[str, str] | None
    external_filter: tuple[str, str] | None
    svc_chain: str = field(init=False)
    svl_chain: str = field(init=False)
    ext_chain: str = field(init=False)
    fw_chain: str = field(init=False)
    _hash: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        h = naming.service_hash(self.info.name.text, self.info.proto)
        object.__setattr__(self, "svc_chain", "KUBE-SVC-" + h)
        object.__setattr__(self, "svl_chain", "KUBE-SVL-" + h)
        object.__setattr__(self, "ext_chain", "KUBE-EXT-" + h)
        object.__setattr__(self, "fw_chain", "KUBE-FW-" + h)
        object.__setattr__(
            self,
            "_hash",
            hash(
                (
                    self.info,
                    self.endpoints,
                    self.cluster_endpoints,
                    self.local_endpoints,
                    self.reachable_endpoints,
                    self.has_endpoints,
                )
            ),
        )

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, ServicePortState) or other._hash != self._hash:
            return False
        return (
            self.info == other.info
            and self.endpoints == other.endpoints
            and self.cluster_endpoints == other.cluster_endpoints
            and self.local_endpoints == other.local_endpoints
            and self.reachable_endpoints == other.reachable_endpoints
            and self.has_endpoints == other.has_endpoints
        )

    @property
    def name(self) -> ServicePortName:
        return self.info.name

    @property
    def internal_chain(self) -> str:
        """Where ClusterIP traffic goes: KUBE-SVL-… for iTP Local, else KUBE-SVC-…."""
        return self.svl_chain if self.info.internal_policy_local else self.svc_chain

    @property
    def external_policy_chain(self) -> str:
        """Where KUBE-EXT-… finally goes: KUBE-SVL-… for eTP Local, else KUBE-SVC-…."""
        return self.svl_chain if self.info.external_policy_local else self.svc_chain

    @property
    def load_balancer_chain(self) -> str:
        """Target of LB-IP rules: KUBE-FW-… with source ranges, else KUBE-EXT-…."""
        return self.fw_chain if self.uses_fw_chain else self.ext_chain

    def sep_chain(self, ep: EndpointInfo) -> str:
        """The KUBE-SEP-… chain (and recent list) of one endpoint of this port."""
        return ep.chain_name

    def active_chains(self) -> Iterator[str]:
        """Every per-service nat chain this port keeps in the kernel (iptables mode)."""
        if self.uses_external_chain:
            yield self.ext_chain
        if self.uses_fw_chain:
            yield self.fw_chain
        if self.uses_cluster_chain:
            yield self.svc_chain
        if self.uses_local_chain:
            yield self.svl_chain
        for ep in self.reachable_endpoints:
            yield ep.chain_name


@dataclass(frozen=True, slots=True)
class ProxySnapshot:
    """Every service port one proxier handles, in deterministic (name) order.

    ``ports`` maps each :class:`ServicePortName` to its :class:`ServicePortState`; its
    iteration order is the render order (upstream iterates a Go map: random).
    """

    ip_family: IPFamily
    ports: Mapping[ServicePortName, ServicePortState]
    total_endpoints: int

    def __iter__(self) -> Iterator[ServicePortState]:
        return iter(self.ports.values())

    def __len__(self) -> int:
        return len(self.ports)

    def services(self) -> frozenset[str]:
        """``namespace/name`` of every Service with at least one port here."""
        return frozenset(n.service_key for n in self.ports)
