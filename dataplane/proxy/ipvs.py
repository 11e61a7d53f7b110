"""kube-proxy's IPVS mode, rendered as a pure function (STRUCTURE.md §3).

:func:`render_ipvs` returns an :class:`IpvsRender` with

* ``virtual_servers`` — the IPVS state as data: one :class:`VirtualServer` per (IP,
  protocol, port) for ClusterIPs, external IPs, LoadBalancer IPs and NodePorts on every
  NodePort address, each with its :class:`RealServer` list, scheduler and persistence
  (ClientIP affinity → persistent with ``timeoutSeconds``), for emulators to evaluate.
  A Local traffic policy uses the node's own endpoints, and falls back to the
  cluster-wide ones when the node has none (so local pods can still reach the
  Service; external clients then lose their source IP — upstream behaves so too);
* ``ipvsadm_text`` — ``ipvsadm-save -n``; ``ipset_text`` — ``ipset save`` of
  kube-proxy's sets (:data:`IPSETS`), loadable with ``ipset restore``;
* ``restore_input`` — the iptables glue (``iptables-restore --noflush`` payload), with
  ``jump_rules`` / ``ensure_input()`` as in iptables mode;
* ``addresses`` — what kube-proxy binds to the dummy interface ``kube-ipvs0``
  (ClusterIPs, and external/LoadBalancer IPs that are not already node addresses);
* ``save_text`` — ipvsadm-save, ipset save and iptables-save of the glue, each section
  headed by a ``#`` line.

The kernel here has no IPVS: this mode is checked against its rendered text and its
ipsets/iptables glue load for real (``tests/kernel``). Graceful termination of removed
real servers (weight 0 until drained) is an apply-time concern and not modelled.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from dataplane.proxy.hostchains import JumpRule
from dataplane.proxy.model import (
    EndpointInfo,
    NodeProxyConfig,
    ProxySnapshot,
    ServicePortName,
    ServicePortState,
)
from dataplane.proxy.normalize import parse_tables
from dataplane.proxy.savefmt import save_form


class IpsetSpec(NamedTuple):
    """One of kube-proxy's ipsets: name (IPv4 form), type, and its purpose."""

    name: str
    type: str
    comment: str


#: kube-proxy's ipsets; IPv6 proxiers use the prefix ``KUBE-6-`` instead of ``KUBE-``.
IPSETS: tuple[IpsetSpec, ...] = (
    IpsetSpec(
        "KUBE-LOOP-BACK",
        "hash:ip,port,ip",
        "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose",
    ),
    IpsetSpec(
        "KUBE-CLUSTER-IP",
        "hash:ip,port",
        "Kubernetes service cluster ip + port for masquerade purpose",
    ),
    IpsetSpec(
        "KUBE-EXTERNAL-IP",
        "hash:ip,port",
        "Kubernetes service external ip + port for masquerade and filter purpose",
    ),
    IpsetSpec(
        "KUBE-EXTERNAL-IP-LOCAL",
        "hash:ip,port",
        "Kubernetes service external ip + port with externalTrafficPolicy=local",
    ),
    IpsetSpec("KUBE-LOAD-BALANCER", "hash:ip,port", "Kubernetes service lb portal"),
    IpsetSpec(
        "KUBE-LOAD-BALANCER-FW",
        "hash:ip,port",
        "Kubernetes service load balancer ip + port for load balancer with sourceRange",
    ),
    IpsetSpec(
        "KUBE-LOAD-BALANCER-LOCAL",
        "hash:ip,port",
        "Kubernetes service load balancer ip + port with externalTrafficPolicy=local",
    ),
    IpsetSpec(
        "KUBE-LOAD-BALANCER-SOURCE-IP",
        "hash:ip,port,ip",
        "Kubernetes service load balancer ip + port + source IP for packet filter purpose",
    ),
    IpsetSpec(
        "KUBE-LOAD-BALANCER-SOURCE-CIDR",
        "hash:ip,port,net",
        "Kubernetes service load balancer ip + port + source cidr for packet filter purpose",
    ),
    IpsetSpec(
        "KUBE-NODE-PORT-TCP", "bitmap:port", "Kubernetes nodeport TCP port for masquerade purpose"
    ),
    IpsetSpec(
        "KUBE-NODE-PORT-LOCAL-TCP",
        "bitmap:port",
        "Kubernetes nodeport TCP port with externalTrafficPolicy=local",
    ),
    IpsetSpec(
        "KUBE-NODE-PORT-UDP", "bitmap:port", "Kubernetes nodeport UDP port for masquerade purpose"
    ),
    IpsetSpec(
        "KUBE-NODE-PORT-LOCAL-UDP",
        "bitmap:port",
        "Kubernetes nodeport UDP port with externalTrafficPolicy=local",
    ),
    IpsetSpec(
        "KUBE-NODE-PORT-SCTP-HASH",
        "hash:ip,port",
        "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'",
    ),
    IpsetSpec(
        "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
        "hash:ip,port",
        "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'",
    ),
    IpsetSpec("KUBE-HEALTH-CHECK-NODE-PORT", "bitmap:port", "Kubernetes health check node port"),
    IpsetSpec("KUBE-IPVS-IPS", "hash:ip", "Kubernetes service IPs"),
)


@dataclass(frozen=True, slots=True)
class RealServer:
    """An IPVS real server (always masquerading, weight 1)."""

    ip: str
    port: int
    weight: int = 1

    @property
    def address(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"


@dataclass(frozen=True, slots=True)
class VirtualServer:
    """An IPVS virtual service. ``persistence`` is 0 without ClientIP affinity.

    ``kind``: ClusterIP, ExternalIP, LoadBalancer or NodePort; ``local_only`` means the
    real servers are this node's endpoints only (Local traffic policy).
    """

    ip: str
    port: int
    protocol: str
    scheduler: str
    persistence: int
    real_servers: tuple[RealServer, ...]
    service: ServicePortName
    kind: str
    local_only: bool = False

    @property
    def address(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"

    @property
    def proto_flag(self) -> str:
        return {"TCP": "-t", "UDP": "-u", "SCTP": "--sctp-service"}[self.protocol]

    def save_lines(self) -> list[str]:
        """This virtual server and its real servers as ``ipvsadm-save -n`` lines."""
        head = f"-A {self.proto_flag} {self.address} -s {self.scheduler}"
        if self.persistence:
            head += f" -p {self.persistence}"
        return [head] + [
            f"-a {self.proto_flag} {self.address} -r {rs.address} -m -w {rs.weight}"
            for rs in self.real_servers
        ]


class IpvsRender:
    """The result of one IPVS-mode sync (see the module docstring)."""

    __slots__ = (
        "addresses",
        "config",
        "ipsets",
        "restore_input",
        "virtual_servers",
    )

    def __init__(
        self,
        restore_input: str,
        config: NodeProxyConfig,
        virtual_servers: tuple[VirtualServer, ...],
        ipsets: dict[str, tuple[str, list[str]]],
        addresses: tuple[str, ...],
    ) -> None:
        self.restore_input = restore_input
        self.config = config
        self.virtual_servers = virtual_servers
        self.ipsets = ipsets
        self.addresses = addresses

    @property
    def ipvsadm_text(self) -> str:
        """``ipvsadm-save -n`` (virtual servers sorted by protocol, address, port)."""
        lines: list[str] = []
        for vs in self.virtual_servers:
            lines.extend(vs.save_lines())
        return "".join(line + "\n" for line in lines)

    @property
    def ipset_text(self) -> str:
        """``ipset save`` of kube-proxy's sets (``ipset restore`` loads it)."""
        fam = "inet6" if self.config.is_ipv6 else "inet"
        lines: list[str] = []
        for name, (stype, entries) in self.ipsets.items():
            if stype.startswith("bitmap:"):
                lines.append(f"create {name} {stype} range 0-65535")
            else:
                lines.append(f"create {name} {stype} family {fam} hashsize 1024 maxelem 65536")
            lines.extend(f"add {name} {e}" for e in entries)
        return "".join(line + "\n" for line in lines)

    @property
    def jump_rules(self) -> tuple[JumpRule, ...]:
        return IPVS_JUMP_RULES

    def ensure_input(self) -> str:
        """iptables-restore payload creating the glue chains and the built-in jumps."""
        out: list[str] = []
        for table in ("filter", "nat"):
            out.append(f"*{table}")
            out.extend(f":{c} - [0:0]" for c in _CHAINS[table])
            out.extend(f"-I {r.chain} 1 {r.args}" for r in IPVS_JUMP_RULES if r.table == table)
            out.append("COMMIT")
        return "\n".join(out) + "\n"

    @property
    def iptables_save_text(self) -> str:
        """``iptables-save -t filter`` + ``-t nat`` of the glue after the sync."""
        tables = parse_tables(self.restore_input)
        out: list[str] = []
        builtins = {
            "filter": ("INPUT", "FORWARD", "OUTPUT"),
            "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
        }
        v6 = self.config.is_ipv6
        for tname, chains in builtins.items():
            t = tables[tname]
            out.append(f"*{tname}")
            out.extend(f":{c} ACCEPT [0:0]" for c in chains)
            names = sorted(t.chain_order())
            out.extend(f":{c} - [0:0]" for c in names)
            for c in chains:
                rules = [
                    f"-A {r.chain} {r.args}"
                    for r in IPVS_JUMP_RULES
                    if r.table == tname and r.chain == c
                ]
                out.extend(save_form(r, v6) for r in reversed(rules))
            for c in names:
                out.extend(save_form(r, v6) for r in t.rules.get(c, []))
            out.append("COMMIT")
        return "\n".join(out) + "\n"

    @property
    def save_text(self) -> str:
        """ipvsadm-save -n, ipset save and iptables-save, each headed by a ``#`` line."""
        return (
            "# ipvsadm-save -n\n"
            + self.ipvsadm_text
            + "# ipset save\n"
            + self.ipset_text
            + "# iptables-save\n"
            + self.iptables_save_text
        )


_CHAINS = {
    "nat": (
        "KUBE-SERVICES",
        "KUBE-POSTROUTING",
        "KUBE-NODE-PORT",
        "KUBE-LOAD-BALANCER",
        "KUBE-MARK-MASQ",
    ),
    "filter": (
        "KUBE-FORWARD",
        "KUBE-NODE-PORT",
        "KUBE-PROXY-FIREWALL",
        "KUBE-SOURCE-RANGES-FIREWALL",
        "KUBE-IPVS-FILTER",
        "KUBE-IPVS-OUT-FILTER",
    ),
}

_SVC = '"kubernetes service portals"'
IPVS_JUMP_RULES: tuple[JumpRule, ...] = (
    JumpRule("nat", "OUTPUT", f"-m comment --comment {_SVC} -j KUBE-SERVICES"),
    JumpRule("nat", "PREROUTING", f"-m comment --comment {_SVC} -j KUBE-SERVICES"),
    JumpRule(
        "nat",
        "POSTROUTING",
        '-m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    ),
    JumpRule(
        "filter", "FORWARD", '-m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD'
    ),
    JumpRule(
        "filter", "INPUT", '-m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT'
    ),
    JumpRule(
        "filter", "INPUT", '-m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL'
    ),
    JumpRule(
        "filter",
        "FORWARD",
        '-m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL',
    ),
    JumpRule(
        "filter",
        "INPUT",
        '-m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER',
    ),
    JumpRule(
        "filter",
        "OUTPUT",
        '-m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER',
    ),
)


def _set_name(name: str, ipv6: bool) -> str:
    return "KUBE-6-" + name[len("KUBE-") :] if ipv6 else name


def _rs(eps: Iterable[EndpointInfo]) -> tuple[RealServer, ...]:
    return tuple(RealServer(e.ip, e.port) for e in eps)


def _contains(cidr: str, ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False


#: (set, table, from chain, to, match flags, protocol): rules written only when the set
#: has entries, in this order (the Local NodePort sets come before the plain ones).
_SET_RULES: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("KUBE-LOOP-BACK", "nat", "KUBE-POSTROUTING", "MASQUERADE", "dst,dst,src", ""),
    ("KUBE-LOAD-BALANCER", "nat", "KUBE-SERVICES", "KUBE-LOAD-BALANCER", "dst,dst", ""),
    ("KUBE-LOAD-BALANCER-LOCAL", "nat", "KUBE-LOAD-BALANCER", "RETURN", "dst,dst", ""),
    ("KUBE-NODE-PORT-LOCAL-TCP", "nat", "KUBE-NODE-PORT", "RETURN", "dst", "tcp"),
    ("KUBE-NODE-PORT-TCP", "nat", "KUBE-NODE-PORT", "KUBE-MARK-MASQ", "dst", "tcp"),
    ("KUBE-NODE-PORT-LOCAL-UDP", "nat", "KUBE-NODE-PORT", "RETURN", "dst", "udp"),
    ("KUBE-NODE-PORT-UDP", "nat", "KUBE-NODE-PORT", "KUBE-MARK-MASQ", "dst", "udp"),
    ("KUBE-NODE-PORT-LOCAL-SCTP-HASH", "nat", "KUBE-NODE-PORT", "RETURN", "dst,dst", "sctp"),
    ("KUBE-NODE-PORT-SCTP-HASH", "nat", "KUBE-NODE-PORT", "KUBE-MARK-MASQ", "dst,dst", "sctp"),
    (
        "KUBE-LOAD-BALANCER-FW",
        "filter",
        "KUBE-PROXY-FIREWALL",
        "KUBE-SOURCE-RANGES-FIREWALL",
        "dst,dst",
        "",
    ),
    (
        "KUBE-LOAD-BALANCER-SOURCE-CIDR",
        "filter",
        "KUBE-SOURCE-RANGES-FIREWALL",
        "RETURN",
        "dst,dst,src",
        "",
    ),
    (
        "KUBE-LOAD-BALANCER-SOURCE-IP",
        "filter",
        "KUBE-SOURCE-RANGES-FIREWALL",
        "RETURN",
        "dst,dst,src",
        "",
    ),
)


def _glue(
    cfg: NodeProxyConfig,
    sets: dict[str, tuple[str, list[str]]],
    lb_no_node_access: list[tuple[str, str, int]],
) -> str:
    """The iptables-restore payload of IPVS mode (nat first, then filter, as upstream)."""
    v6 = cfg.is_ipv6
    mark = cfg.masquerade_mark
    comment = {s.name: s.comment for s in IPSETS}

    def name(base: str) -> str:
        return _set_name(base, v6)

    def has(base: str) -> bool:
        return bool(sets[name(base)][1])

    def match(base: str, flags: str) -> str:
        return f'-m comment --comment "{comment[base]}" -m set --match-set {name(base)} {flags}'

    nat: list[str] = [f"-A KUBE-SERVICES -s {'::1/128' if v6 else '127.0.0.0/8'} -j RETURN"]
    flt: list[str] = []
    for base, table, chain, target, flags, proto in _SET_RULES:
        if has(base):
            p = f"-p {proto} " if proto else ""
            (nat if table == "nat" else flt).append(
                f"-A {chain} {p}{match(base, flags)} -j {target}"
            )
    if has("KUBE-CLUSTER-IP"):
        if cfg.masquerade_all:
            nat.append(f"-A KUBE-SERVICES {match('KUBE-CLUSTER-IP', 'dst,dst')} -j KUBE-MARK-MASQ")
        elif cfg.local_detector is not None:
            nat.append(
                f"-A KUBE-SERVICES {match('KUBE-CLUSTER-IP', 'dst,dst')} "
                f"{cfg.local_detector.iptables_not_local} -j KUBE-MARK-MASQ"
            )
        else:  # node-originated traffic sourced from a VIP on kube-ipvs0
            nat.append(f"-A KUBE-SERVICES {match('KUBE-CLUSTER-IP', 'src,dst')} -j KUBE-MARK-MASQ")
    for base in ("KUBE-EXTERNAL-IP", "KUBE-EXTERNAL-IP-LOCAL"):
        if not has(base):
            continue
        head = f"-A KUBE-SERVICES {match(base, 'dst,dst')}"
        if base == "KUBE-EXTERNAL-IP":
            nat.append(f"{head} -j KUBE-MARK-MASQ")
        # off-machine traffic, and traffic to external IPs that are local addresses
        nat.append(f"{head} -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT")
        nat.append(f"{head} -m addrtype --dst-type LOCAL -j ACCEPT")
    nat.append("-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT")
    nat.append("-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ")
    flt.append("-A KUBE-SOURCE-RANGES-FIREWALL -j DROP")
    for ip, proto, port in lb_no_node_access:
        flt.append(
            f"-A KUBE-IPVS-OUT-FILTER -s {ip} -m ipvs --vaddr {ip} --vproto {proto} "
            f"--vport {port} -j DROP"
        )
    for base in ("KUBE-CLUSTER-IP", "KUBE-LOAD-BALANCER"):
        if has(base):
            nat.append(f"-A KUBE-SERVICES -m set --match-set {name(base)} dst,dst -j ACCEPT")
    flt.append(
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" '
        f"-m mark --mark {mark}/{mark} -j ACCEPT"
    )
    flt.append(
        '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" '
        "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
    )
    flt.append(f"-A KUBE-NODE-PORT {match('KUBE-HEALTH-CHECK-NODE-PORT', 'dst')} -j ACCEPT")
    for base, flags in (
        ("KUBE-LOAD-BALANCER", "dst,dst"),
        ("KUBE-CLUSTER-IP", "dst,dst"),
        ("KUBE-EXTERNAL-IP", "dst,dst"),
        ("KUBE-EXTERNAL-IP-LOCAL", "dst,dst"),
        ("KUBE-HEALTH-CHECK-NODE-PORT", "dst"),
    ):
        flt.append(f"-A KUBE-IPVS-FILTER -m set --match-set {name(base)} {flags} -j RETURN")
    flt.append(
        "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW "
        f"-m set --match-set {name('KUBE-IPVS-IPS')} dst -j REJECT"
    )
    masq = '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" '
    masq += "-j MASQUERADE" + (" --random-fully" if cfg.random_fully else "")
    nat += [
        f"-A KUBE-POSTROUTING -m mark ! --mark {mark}/{mark} -j RETURN",
        f"-A KUBE-POSTROUTING -j MARK --xor-mark {mark}",
        masq,
        f"-A KUBE-MARK-MASQ -j MARK --or-mark {mark}",
    ]
    lines = ["*nat", *(f":{c} - [0:0]" for c in _CHAINS["nat"]), *nat, "COMMIT"]
    lines += ["*filter", *(f":{c} - [0:0]" for c in _CHAINS["filter"]), *flt, "COMMIT"]
    return "\n".join(lines) + "\n"


def _virtual_servers(
    st: ServicePortState, cfg: NodeProxyConfig, node_port_ips: tuple[str, ...]
) -> list[VirtualServer]:
    info = st.info
    sched = cfg.ipvs_scheduler
    pers = info.affinity_timeout

    def real_servers(local_only: bool) -> tuple[RealServer, ...]:
        # a Local policy with no local endpoint falls back to the cluster-wide ones
        # (so pods on this node can still reach the service)
        if local_only and st.local_endpoints:
            return _rs(st.local_endpoints)
        return _rs(st.cluster_endpoints)

    internal = real_servers(info.internal_policy_local)
    external = real_servers(info.external_policy_local)
    out = [
        VirtualServer(
            info.cluster_ip,
            info.port,
            info.protocol,
            sched,
            pers,
            internal,
            info.name,
            "ClusterIP",
            info.internal_policy_local,
        )
    ]
    for kind, ips in (("ExternalIP", info.external_ips), ("LoadBalancer", info.load_balancer_vips)):
        out.extend(
            VirtualServer(
                ip,
                info.port,
                info.protocol,
                sched,
                pers,
                external,
                info.name,
                kind,
                info.external_policy_local,
            )
            for ip in ips
        )
    if info.node_port:
        out.extend(
            VirtualServer(
                ip,
                info.node_port,
                info.protocol,
                sched,
                pers,
                external,
                info.name,
                "NodePort",
                info.external_policy_local,
            )
            for ip in node_port_ips
        )
    return out


def _node_port_ips(cfg: NodeProxyConfig) -> tuple[str, ...]:
    """Every node address when NodePorts match all (loopback included: upstream lists the
    node's addresses), else the non-loopback addresses inside nodePortAddresses."""
    if cfg.node_ports_match_all:
        return cfg.family_node_ips
    return tuple(ip for ip in cfg.node_port_ips() if not ipaddress.ip_address(ip).is_loopback)


def render_ipvs(snapshot: ProxySnapshot, node_config: NodeProxyConfig) -> IpvsRender:
    """Render kube-proxy's IPVS mode for one node (always a full sync)."""
    cfg = node_config
    v6 = cfg.is_ipv6
    sets: dict[str, tuple[str, list[str]]] = {_set_name(s.name, v6): (s.type, []) for s in IPSETS}
    seen: set[tuple[str, str]] = set()

    def add(name: str, entry: str) -> None:
        key = (name, entry)
        if key not in seen:
            seen.add(key)
            sets[_set_name(name, v6)][1].append(entry)

    node_addresses = set(cfg.node_ips)
    np_ips = _node_port_ips(cfg)
    vss: list[VirtualServer] = []
    bound: dict[str, None] = {}
    lb_no_node_access: list[tuple[str, str, int]] = []
    for st in snapshot:
        info = st.info
        p = info.proto
        vss.extend(_virtual_servers(st, cfg, np_ips))
        for ep in st.endpoints:
            if ep.is_local:
                add("KUBE-LOOP-BACK", f"{ep.ip},{p}:{ep.port},{ep.ip}")
        add("KUBE-CLUSTER-IP", f"{info.cluster_ip},{p}:{info.port}")
        bound[info.cluster_ip] = None
        for ip in info.external_ips:
            local = "KUBE-EXTERNAL-IP-LOCAL" if info.external_policy_local else "KUBE-EXTERNAL-IP"
            add(local, f"{ip},{p}:{info.port}")
            if ip not in node_addresses:  # never bind an address another interface has
                bound[ip] = None
        for ip in info.load_balancer_vips:
            e = f"{ip},{p}:{info.port}"
            add("KUBE-LOAD-BALANCER", e)
            if info.external_policy_local:
                add("KUBE-LOAD-BALANCER-LOCAL", e)
            if info.load_balancer_source_ranges:
                add("KUBE-LOAD-BALANCER-FW", e)
                for cidr in info.load_balancer_source_ranges:
                    add("KUBE-LOAD-BALANCER-SOURCE-CIDR", f"{e},{cidr}")
                if any(_contains(c, cfg.primary_ip) for c in info.load_balancer_source_ranges):
                    add("KUBE-LOAD-BALANCER-SOURCE-IP", f"{e},{ip}")
                else:  # the node itself is outside every range: block it explicitly
                    lb_no_node_access.append((ip, p, info.port))
            if ip not in node_addresses:
                bound[ip] = None
        if info.node_port and np_ips:
            proto = info.protocol
            if proto == "SCTP":
                entries = [f"{ip},sctp:{info.node_port}" for ip in np_ips]
                names = ["KUBE-NODE-PORT-SCTP-HASH"]
                if info.external_policy_local:
                    names.append("KUBE-NODE-PORT-LOCAL-SCTP-HASH")
            else:
                entries = [str(info.node_port)]
                names = [f"KUBE-NODE-PORT-{proto}"]
                if info.external_policy_local:
                    names.append(f"KUBE-NODE-PORT-LOCAL-{proto}")
            for set_name in names:
                for entry in entries:
                    add(set_name, entry)
        if info.health_check_node_port:
            add("KUBE-HEALTH-CHECK-NODE-PORT", str(info.health_check_node_port))
    for ip in bound:
        add("KUBE-IPVS-IPS", ip)
    vss.sort(key=lambda v: (v.protocol, ipaddress.ip_address(v.ip), v.port))
    prefix = 128 if v6 else 32
    return IpvsRender(
        _glue(cfg, sets, lb_no_node_access),
        cfg,
        tuple(vss),
        sets,
        tuple(f"{ip}/{prefix}" for ip in bound),
    )
