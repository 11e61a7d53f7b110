"""kube-proxy's nftables mode, rendered as a pure function (STRUCTURE.md §2).

:func:`render_nftables` returns an :class:`NftablesRender`:

* ``restore_input`` — one ``nft -f`` transaction, loadable on a fresh node and on a node
  that already has the table: ``add`` the table, sets, maps and chains, ``flush`` the
  maps, fixed sets and every chain it rewrites, add rules and elements, then ``delete``
  stale affinity sets. Dynamic affinity sets are never flushed, so ClientIP affinity
  survives a sync. ``changed`` works as in iptables mode: chains of unchanged Services
  are neither flushed nor rewritten.
* ``cleanup_input`` — the transaction to run *before* ``restore_input`` (empty when
  there is nothing to do): ``delete`` of the stale chains that have waited long enough.
* ``save_text`` — the ruleset as ``nft list ruleset`` prints it (priorities by name,
  ``meta mark ... | 0x00004000``, one-element anonymous sets unwrapped, timeouts as
  ``3h``). nft lists the elements of hash sets in hash order and wraps long element
  lists; compare with :func:`~dataplane.proxy.normalize.normalize_listing`, which sorts
  elements and ignores layout.

Stale chains, as upstream's nftables proxier handles them (``staleChains`` in
``pkg/proxy/nftables/proxier.go``): a per-service chain (a name with ``/``) that the
table holds but this sync does not use is *flushed*, not deleted, and recorded with
the sync's time, because before Linux 6.2 a chain that a just-deleted map element
pointed to stays referenced for a short while. Every sync re-flushes and re-stamps the
chains still stale and drops from the record those in use again (they are rewritten
and kept). At the start of a sync, the recorded chains stamped more than
:data:`STALE_CHAIN_DELAY` (1 s) before it are deleted, in a transaction of their own.
The record is an input and an output (``stale_since``; the caller keeps it between
syncs, and the time is the caller's clock), so the render stays pure. Stale affinity
sets are deleted at once, as upstream does.

Names follow NAMING.md (``service-<hash>-ns/svc/tcp/port`` ...). Output is deterministic
(service ports in snapshot order).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from dataplane.proxy import naming
from dataplane.proxy.model import (
    EndpointInfo,
    IPFamily,
    NodeProxyConfig,
    ProxySnapshot,
    ServicePortName,
    ServicePortState,
)

TABLE = "kube-proxy"

#: Seconds a flushed stale chain waits before it is deleted: upstream deletes, at the
#: start of a sync, the chains it flushed more than one second before that sync.
STALE_CHAIN_DELAY = 1.0


@dataclass
class NftSet:
    """A set or verdict map: ``kind`` is ``set`` or ``map``; ``elements`` as written."""

    name: str
    kind: str
    type: str
    comment: str | None = None
    flags: str | None = None
    timeout: int | None = None
    elements: list[str] = field(default_factory=list)

    def declaration(self) -> str:
        parts = [f"type {self.type}"]
        if self.flags:
            parts.append(f"flags {self.flags}")
        if self.timeout:
            parts.append(f"timeout {self.timeout}s")
        if self.comment:
            parts.append(f'comment "{self.comment}"')
        return "{ " + " ; ".join(parts) + " ; }"


@dataclass
class NftChain:
    """A chain; ``hook`` is ``(type, hook, priority)`` for base chains."""

    name: str
    hook: tuple[str, str, int] | None = None
    comment: str | None = None
    rules: list[str] = field(default_factory=list)

    def declaration(self) -> str:
        if self.hook:
            t, h, p = self.hook
            return f" {{ type {t} hook {h} priority {p} ; }}"
        if self.comment:
            return f' {{ comment "{self.comment}" ; }}'
        return ""


class _ServiceObjects(NamedTuple):
    chains: tuple[NftChain, ...]
    sets: tuple[NftSet, ...]
    elements: tuple[tuple[str, str], ...]  # (set or map name, element text)


def _fam(family: IPFamily) -> tuple[str, str]:
    """(nft table family / address keyword, address type)."""
    return ("ip", "ipv4_addr") if family is IPFamily.IPV4 else ("ip6", "ipv6_addr")


def _ep_base(st: ServicePortState, ep: EndpointInfo) -> str:
    n = st.info.name
    return naming.nft_endpoint_base(n.namespace, n.name, n.protocol, n.port, ep.ip, ep.port)


def _svc_base(name: ServicePortName) -> str:
    return naming.nft_service_base(name.namespace, name.name, name.protocol, name.port)


class _Ctx(NamedTuple):
    family: IPFamily
    masquerade_all: bool
    not_local: str | None
    local: str | None
    primary_ip: str


def _verdict(target: str) -> str:
    return "goto reject-chain" if target == "REJECT" else "drop"


@functools.lru_cache(maxsize=1 << 16)
def _service_objects(st: ServicePortState, ctx: _Ctx) -> _ServiceObjects:
    info = st.info
    ipx, addr_type = _fam(ctx.family)
    p = info.proto
    base = _svc_base(info.name)
    svc_chain, local_chain = f"service-{base}", f"local-{base}"
    ext_chain, fw_chain = f"external-{base}", f"firewall-{base}"
    internal = local_chain if info.internal_policy_local else svc_chain
    external_policy = local_chain if info.external_policy_local else svc_chain
    chains: list[NftChain] = []
    sets: list[NftSet] = []
    elems: list[tuple[str, str]] = []
    spn = info.name.text

    def endpoint_chain_rules(chain: NftChain, eps: tuple[EndpointInfo, ...]) -> None:
        if info.affinity_timeout:
            for ep in eps:
                b = _ep_base(st, ep)
                chain.rules.append(f"{ipx} saddr @affinity-{b} goto endpoint-{b}")
        vmap = " , ".join(f"{i} : goto endpoint-{_ep_base(st, ep)}" for i, ep in enumerate(eps))
        chain.rules.append(f"numgen random mod {len(eps)} vmap {{ {vmap} }}")

    masq_rule: str | None = None
    if st.has_internal_endpoints:
        if ctx.masquerade_all:
            masq_rule = f"{ipx} daddr {info.cluster_ip} jump mark-for-masquerade"
        elif ctx.not_local is not None:
            masq_rule = f"{ipx} daddr {info.cluster_ip} {ctx.not_local} jump mark-for-masquerade"

    if st.uses_cluster_chain:
        c = NftChain(svc_chain)
        if masq_rule and internal == svc_chain:
            c.rules.append(masq_rule)
        endpoint_chain_rules(c, st.cluster_endpoints)
        chains.append(c)
    if st.uses_local_chain:
        c = NftChain(local_chain)
        if masq_rule and internal == local_chain:
            c.rules.append(masq_rule)
        endpoint_chain_rules(c, st.local_endpoints)
        chains.append(c)
    if st.uses_external_chain:
        c = NftChain(ext_chain)
        if not info.external_policy_local:
            c.rules.append("jump mark-for-masquerade")
        else:
            if ctx.local is not None:
                c.rules.append(f'{ctx.local} goto {svc_chain} comment "short-circuit pod traffic"')
            c.rules.append(
                'fib saddr type local jump mark-for-masquerade comment "masquerade local traffic"'
            )
            c.rules.append(
                f'fib saddr type local goto {svc_chain} comment "short-circuit local traffic"'
            )
        if st.has_external_endpoints:
            c.rules.append(f"goto {external_policy}")
        chains.append(c)
    for ep in st.reachable_endpoints:
        b = _ep_base(st, ep)
        c = NftChain(f"endpoint-{b}")
        c.rules.append(f"{ipx} saddr {ep.ip} jump mark-for-masquerade")
        if info.affinity_timeout:
            sets.append(
                NftSet(
                    f"affinity-{b}",
                    "set",
                    addr_type,
                    flags="dynamic,timeout",
                    timeout=info.affinity_timeout,
                )
            )
            c.rules.append(f"update @affinity-{b} {{ {ipx} saddr }}")
        c.rules.append(f"meta l4proto {p} dnat to {ep.endpoint}")
        chains.append(c)
    if st.uses_fw_chain:
        sources = list(info.load_balancer_source_ranges)
        if any(_contains(c, ctx.primary_ip) for c in sources):
            sources.extend(info.load_balancer_vips)
        chains.append(
            NftChain(fw_chain, rules=[f"{ipx} saddr != {{ {' , '.join(sources)} }} drop"])
        )

    # elements
    cip, port = info.cluster_ip, info.port
    elems.append(("cluster-ips", cip))
    if st.has_internal_endpoints:
        elems.append(("service-ips", f"{cip} . {p} . {port} : goto {internal}"))
    elif st.internal_filter:
        elems.append(
            (
                "no-endpoint-services",
                f'{cip} . {p} . {port} comment "{spn}" : {_verdict(st.internal_filter[0])}',
            )
        )
    for ip in (*info.external_ips, *info.load_balancer_vips):
        if st.has_endpoints:
            elems.append(("service-ips", f"{ip} . {p} . {port} : goto {ext_chain}"))
        if st.external_filter:
            elems.append(
                (
                    "no-endpoint-services",
                    f'{ip} . {p} . {port} comment "{spn}" : {_verdict(st.external_filter[0])}',
                )
            )
    if st.uses_fw_chain:
        for ip in info.load_balancer_vips:
            elems.append(("firewall-ips", f"{ip} . {p} . {port} : goto {fw_chain}"))
    if info.node_port:
        if st.has_endpoints:
            elems.append(("service-nodeports", f"{p} . {info.node_port} : goto {ext_chain}"))
        if st.external_filter:
            elems.append(
                (
                    "no-endpoint-nodeports",
                    f'{p} . {info.node_port} comment "{spn}" : {_verdict(st.external_filter[0])}',
                )
            )
    return _ServiceObjects(tuple(chains), tuple(sets), tuple(elems))


@functools.lru_cache(maxsize=4096)
def _contains(cidr: str, ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip) in ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False


# --------------------------------------------------------------------------- fixed part


def _fixed(cfg: NodeProxyConfig) -> tuple[list[NftSet], list[NftChain]]:
    ipx, addr = _fam(cfg.ip_family)
    mark = hex(cfg.mark_value)
    sets = [
        NftSet("cluster-ips", "set", addr, "Active ClusterIPs"),
        NftSet("nodeport-ips", "set", addr, "IPs that accept NodePort traffic"),
        NftSet(
            "firewall-ips",
            "map",
            f"{addr} . inet_proto . inet_service : verdict",
            "destinations that are subject to LoadBalancerSourceRanges",
        ),
        NftSet(
            "no-endpoint-nodeports",
            "map",
            "inet_proto . inet_service : verdict",
            "vmap to drop or reject packets to service nodeports with no endpoints",
        ),
        NftSet(
            "no-endpoint-services",
            "map",
            f"{addr} . inet_proto . inet_service : verdict",
            "vmap to drop or reject packets to services with no endpoints",
        ),
        NftSet(
            "service-ips",
            "map",
            f"{addr} . inet_proto . inet_service : verdict",
            "ClusterIP, ExternalIP and LoadBalancer IP traffic",
        ),
        NftSet(
            "service-nodeports", "map", "inet_proto . inet_service : verdict", "NodePort traffic"
        ),
    ]
    cidrs = [c for c in cfg.service_cidrs if (":" in c) == (cfg.ip_family is IPFamily.IPV6)]
    cluster_check = [
        f'{ipx} daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"'
    ]
    if cidrs:
        cluster_check.append(
            f"{ipx} daddr {{ {','.join(cidrs)} }} drop comment "
            '"Drop traffic to unallocated ClusterIPs"'
        )
    if cfg.node_ports_match_all:
        # every local address but loopback (nftables mode has no localhost NodePorts);
        # the nodeport-ips set is not kept (render_nftables deletes it)
        no_lo = f"{ipx} daddr != {'127.0.0.0/8' if ipx == 'ip' else '::1'}"
        np_check = f"{no_lo} meta l4proto . th dport vmap @no-endpoint-nodeports"
        np_services = (
            f"fib daddr type local {no_lo} meta l4proto . th dport vmap @service-nodeports"
        )
        del sets[1]
    else:
        np_check = f"{ipx} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports"
        np_services = f"{ipx} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"
        sets[1].elements = [
            ip for ip in cfg.node_port_ips() if not ipaddress.ip_address(ip).is_loopback
        ]
    masq = "masquerade fully-random"
    chains = [
        NftChain("cluster-ips-check", rules=cluster_check),
        NftChain(
            "filter-prerouting-pre-dnat",
            ("filter", "prerouting", -110),
            rules=["ct state new jump firewall-check"],
        ),
        NftChain(
            "filter-output-pre-dnat",
            ("filter", "output", -110),
            rules=["ct state new jump firewall-check"],
        ),
        NftChain(
            "filter-forward",
            ("filter", "forward", 0),
            rules=[
                "ct state new jump service-endpoints-check",
                "ct state new jump cluster-ips-check",
            ],
        ),
        NftChain(
            "filter-input",
            ("filter", "input", 0),
            rules=[
                "ct state new jump nodeport-endpoints-check",
                "ct state new jump service-endpoints-check",
            ],
        ),
        NftChain(
            "filter-output",
            ("filter", "output", 0),
            rules=[
                "ct state new jump service-endpoints-check",
                "ct state new jump cluster-ips-check",
            ],
        ),
        NftChain(
            "firewall-check", rules=[f"{ipx} daddr . meta l4proto . th dport vmap @firewall-ips"]
        ),
        NftChain("mark-for-masquerade", rules=[f"mark set mark or {mark}"]),
        NftChain(
            "masquerading",
            rules=[f"mark and {mark} == 0 return", f"mark set mark xor {mark}", masq],
        ),
        NftChain("nat-output", ("nat", "output", -100), rules=["jump services"]),
        NftChain("nat-postrouting", ("nat", "postrouting", 100), rules=["jump masquerading"]),
        NftChain("nat-prerouting", ("nat", "prerouting", -100), rules=["jump services"]),
        NftChain("nodeport-endpoints-check", rules=[np_check]),
        NftChain(
            "reject-chain",
            comment="helper for @no-endpoint-services / @no-endpoint-nodeports",
            rules=["reject"],
        ),
        NftChain(
            "services",
            rules=[f"{ipx} daddr . meta l4proto . th dport vmap @service-ips", np_services],
        ),
        NftChain(
            "service-endpoints-check",
            rules=[f"{ipx} daddr . meta l4proto . th dport vmap @no-endpoint-services"],
        ),
    ]
    return sets, chains


# --------------------------------------------------------------------------- render


class NftablesRender:
    """The result of one nftables-mode sync (see the module docstring).

    ``sets`` and ``chains`` describe the whole table after the sync (fixed objects
    first, then per service port in snapshot order, then the stale chains, empty), for
    emulators to evaluate. ``stale``: the per-service chains this sync flushed because
    they are no longer used, and the affinity sets it deleted; ``deleted``: the stale
    chains ``cleanup_input`` deletes; ``stale_since``: chain -> time it was last
    flushed, to pass to the next sync.
    """

    __slots__ = (
        "chains",
        "cleanup_input",
        "deleted",
        "family",
        "partial",
        "restore_input",
        "sets",
        "stale",
        "stale_since",
    )

    def __init__(
        self,
        restore_input: str,
        family: IPFamily,
        sets: list[NftSet],
        chains: list[NftChain],
        stale: tuple[str, ...],
        partial: bool,
        *,
        cleanup_input: str = "",
        deleted: tuple[str, ...] = (),
        stale_since: Mapping[str, float] | None = None,
    ) -> None:
        self.restore_input = restore_input
        self.family = family
        self.sets = sets
        self.chains = chains
        self.stale = stale
        self.partial = partial
        self.cleanup_input = cleanup_input
        self.deleted = deleted
        self.stale_since: Mapping[str, float] = dict(stale_since or {})

    @property
    def save_text(self) -> str:
        """``nft list ruleset`` after the sync (layout and element order aside)."""
        return listing(self.family, self.sets, self.chains)


def render_nftables(
    snapshot: ProxySnapshot,
    node_config: NodeProxyConfig,
    *,
    changed: Collection[ServicePortName | str] | None = None,
    existing_chains: Iterable[str] = (),
    stale_since: Mapping[str, float] | None = None,
    now: float = 0.0,
) -> NftablesRender:
    """Render one sync of kube-proxy's nftables mode (pure).

    ``changed`` as in :func:`~dataplane.proxy.iptables.render_iptables`;
    ``existing_chains``: chain and set names currently in the table; ``stale_since``:
    the previous sync's :attr:`NftablesRender.stale_since` (None: nothing recorded);
    ``now``: this sync's time (seconds, the caller's clock). Per-service chains
    (names containing ``/``) of ``existing_chains`` that are no longer used are
    flushed and recorded at ``now``; recorded ones stamped before ``now -``
    :data:`STALE_CHAIN_DELAY` are deleted by ``cleanup_input``; unused affinity sets
    are deleted. A recorded chain the table no longer holds is forgotten (upstream
    would try to delete it, fail, and forget it too).
    """
    cfg = node_config
    ipx, addr = _fam(cfg.ip_family)
    det = cfg.local_detector
    ctx = _Ctx(
        cfg.ip_family,
        cfg.masquerade_all,
        det.nft_not_local(cfg.ip_family) if det else None,
        det.nft_local(cfg.ip_family) if det else None,
        cfg.primary_ip,
    )
    changed_keys: set[str] | None = None
    if changed is not None:
        changed_keys = {c.service_key if isinstance(c, ServicePortName) else c for c in changed}
    existing = set(existing_chains)
    # first, as upstream does before the sync proper: delete what has waited long enough
    deleted = tuple(
        sorted(
            n
            for n, t in (stale_since or {}).items()
            if n in existing and t < now - STALE_CHAIN_DELAY
        )
    )
    existing.difference_update(deleted)
    sets, chains = _fixed(cfg)
    by_name = {s.name: s for s in sets}
    svc_sets: list[NftSet] = []
    svc_chains: list[tuple[NftChain, bool]] = []  # (chain, rewritten in this sync)
    cluster_ips: set[str] = set()
    for st in snapshot:
        objs = _service_objects(st, ctx)
        write = changed_keys is None or st.info.name.service_key in changed_keys
        # a chain just deleted is written again even if its Service did not change
        svc_chains.extend((c, write or c.name in deleted) for c in objs.chains)
        svc_sets.extend(objs.sets)
        for set_name, elem in objs.elements:
            if set_name == "cluster-ips":
                if elem in cluster_ips:
                    continue
                cluster_ips.add(elem)
            by_name[set_name].elements.append(elem)
    active = {c.name for c, _ in svc_chains} | {s.name for s in svc_sets}
    unused = sorted(n for n in existing if "/" in n and n not in active)
    stale_sets = [n for n in unused if n.startswith("affinity-")]
    stale_chains = [n for n in unused if not n.startswith("affinity-")]

    t = f"{ipx} {TABLE}"
    out: list[str] = [f'add table {t} {{ comment "rules for kube-proxy" ; }}']
    for s in sets:
        out.append(f"add {s.kind} {t} {s.name} {s.declaration()}")
        out.append(f"flush {s.kind} {t} {s.name}")
    out.extend(f"add set {t} {s.name} {s.declaration()}" for s in svc_sets)
    written = [*chains, *(c for c, w in svc_chains if w)]
    for c in written:
        out.append(f"add chain {t} {c.name}{c.declaration()}")
        out.append(f"flush chain {t} {c.name}")
    # stale chains: emptied, kept until a later sync deletes them ("add" first so that
    # the transaction also loads on a fresh node, where it leaves them empty)
    for n in stale_chains:
        out.append(f"add chain {t} {n}")
        out.append(f"flush chain {t} {n}")
    for c in written:
        out.extend(f"add rule {t} {c.name} {r}" for r in c.rules)
    for s in sets:
        out.extend(f"add element {t} {s.name} {{ {e} }}" for e in s.elements)
    out.extend(f"delete set {t} {n}" for n in stale_sets)
    if "nodeport-ips" not in by_name:  # add+delete: gone whether or not it existed
        out.append(
            f'add set {t} nodeport-ips {{ type {addr} ; comment "IPs that accept '
            'NodePort traffic" ; }'
        )
        out.append(f"delete set {t} nodeport-ips")
    cleanup = "".join(f"delete chain {t} {n}\n" for n in deleted)
    return NftablesRender(
        "\n".join(out) + "\n",
        cfg.ip_family,
        [*sets, *svc_sets],
        [*chains, *(c for c, _ in svc_chains), *(NftChain(n) for n in stale_chains)],
        tuple(unused),
        changed_keys is not None,
        cleanup_input=cleanup,
        deleted=deleted,
        stale_since=dict.fromkeys(stale_chains, now),
    )


# --------------------------------------------------------------------------- listing

_PRIORITIES = (
    ("raw", -300),
    ("mangle", -150),
    ("dstnat", -100),
    ("filter", 0),
    ("security", 50),
    ("srcnat", 100),
)
_PRIO_HOOKS = {"dstnat": {"prerouting"}, "srcnat": {"postrouting"}}


def _priority_name(hook: str, value: int) -> str:
    for name, base in _PRIORITIES:
        if name in _PRIO_HOOKS and hook not in _PRIO_HOOKS[name]:
            continue
        off = value - base
        if off == 0:
            return name
        if abs(off) <= 10:
            return f"{name} {'+' if off > 0 else '-'} {abs(off)}"
    return str(value)


def _duration(seconds: int) -> str:
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out += f"{seconds // size}{unit}"
            seconds %= size
    return out or "0s"


def _list_rule(rule: str) -> str:
    rule = re.sub(
        r"\bmark set mark or (0x[0-9a-f]+)",
        lambda m: f"meta mark set meta mark | 0x{int(m[1], 16):08x}",
        rule,
    )
    rule = re.sub(
        r"\bmark set mark xor (0x[0-9a-f]+)",
        lambda m: f"meta mark set meta mark ^ 0x{int(m[1], 16):08x}",
        rule,
    )
    rule = re.sub(
        r"\bmark and (0x[0-9a-f]+) == 0\b",
        lambda m: f"meta mark & 0x{int(m[1], 16):08x} == 0x00000000",
        rule,
    )
    rule = re.sub(r"(saddr|daddr)( != | )\{ ([^{}]+) \}", _list_anonymous_set, rule)
    return rule.replace(" , ", ", ")


def _list_anonymous_set(m: re.Match[str]) -> str:
    """nft merges overlapping prefixes of an anonymous set and lists them in address
    order; a single remaining element loses its braces."""
    nets = [ipaddress.ip_network(x.strip(), strict=False) for x in m[3].split(",")]
    spans = sorted((int(n.network_address), int(n.broadcast_address)) for n in nets)
    merged: list[list[int]] = []
    for lo, hi in spans:  # overlapping or adjacent intervals become one
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    version = nets[0].version
    texts = [_interval_text(lo, hi, version) for lo, hi in merged]
    body = texts[0] if len(texts) == 1 else "{ " + ", ".join(texts) + " }"
    return f"{m[1]}{m[2]}{body}"


def _interval_text(lo: int, hi: int, version: int) -> str:
    """An address interval as nft lists it: an address, a prefix, or ``a-b``."""
    addr = ipaddress.ip_address(lo if version == 4 else ipaddress.IPv6Address(lo))
    if lo == hi:
        return str(addr)
    size = hi - lo + 1
    bits = 32 if version == 4 else 128
    if size & (size - 1) == 0 and lo % size == 0:
        return f"{addr}/{bits - size.bit_length() + 1}"
    end = ipaddress.ip_address(hi if version == 4 else ipaddress.IPv6Address(hi))
    return f"{addr}-{end}"


def listing(family: IPFamily, sets: Iterable[NftSet], chains: Iterable[NftChain]) -> str:
    """The table as ``nft list ruleset`` prints it (elements on one line each block)."""
    ipx, _ = _fam(family)
    blocks: list[str] = []
    for s in sets:
        lines = [f"\t{s.kind} {s.name} {{", f"\t\ttype {s.type}"]
        if s.flags and "dynamic" in s.flags:
            lines.append("\t\tsize 65535")
        if s.flags:
            lines.append(f"\t\tflags {s.flags}")
        if s.timeout:
            lines.append(f"\t\ttimeout {_duration(s.timeout)}")
        if s.comment:
            lines.append(f'\t\tcomment "{s.comment}"')
        if s.elements:
            lines.append(f"\t\telements = {{ {', '.join(s.elements)} }}")
        lines.append("\t}")
        blocks.append("\n".join(lines))
    for c in chains:
        lines = [f"\tchain {c.name} {{"]
        if c.hook:
            t, h, p = c.hook
            lines.append(f"\t\ttype {t} hook {h} priority {_priority_name(h, p)}; policy accept;")
        if c.comment:
            lines.append(f'\t\tcomment "{c.comment}"')
        lines.extend(f"\t\t{_list_rule(r)}" for r in c.rules)
        lines.append("\t}")
        blocks.append("\n".join(lines))
    head = f'table {ipx} {TABLE} {{\n\tcomment "rules for kube-proxy"\n'
    return head + "\n\n".join(blocks) + "\n}\n"
