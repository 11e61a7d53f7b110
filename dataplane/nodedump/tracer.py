"""``svclab trace|connect --node-dump DIR``: one real node's state answering "where does
this flow go, and with which source address?".

Contract (what :class:`NodeTracer` evaluates, as the kernel would):

* The node's netfilter: its iptables rules (with its ipsets), its nft ruleset, its IPVS
  services (:mod:`.dump`), run by the engine (:mod:`dataplane.netfilter.evaluate`).
* Origin: a flow whose source is one of the node's local addresses (``ip -j addr``,
  ``local`` routes) is sent by the node (OUTPUT first); any other arrives on the
  interface the flow names (``iif``), else on the one the node routes that source
  through (its reverse path), PREROUTING first.
* Routing: every decision (after PREROUTING, before and after OUTPUT) is a lookup in the
  node's policy rules and tables with the packet's current destination and mark
  (:class:`~.routing.Fib`), so ``-i``/``-o`` match the real interface names. A route of
  type ``blackhole``/``unreachable``/``prohibit``, or no route, drops the packet there.
* MASQUERADE takes the kernel's address: the output interface's primary address
  (the one in the next hop's subnet first); SNAT/MASQUERADE "happened" when the
  connection got a source binding.
* Sysctls: ``ip_forward=0`` drops what would be forwarded; without ``route_localnet`` a
  packet arriving on a device with a 127/8 destination (after DNAT), or leaving a device
  with a 127/8 source, is dropped as a martian; ``rp_filter`` (strict or loose) drops
  an arriving packet whose source has no route back.
* Each flow is the first packet of a new connection from ``sport``; :meth:`trace`
  commits nothing, :meth:`connect` commits each connection (conntrack, ``recent``,
  IPVS schedulers advance as on the node).
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Network, ip_address
from random import Random
from typing import Any

from dataplane.netfilter.choice import RandomChooser
from dataplane.netfilter.conntrack import SRC_NAT, int_addr
from dataplane.netfilter.evaluate import Netfilter, Traversal
from dataplane.netfilter.ipvs import IpvsEngine
from dataplane.netfilter.nft import NftEngine
from dataplane.netfilter.trace import TraceRecord
from netmodel.ip import IPAddress, join_host_port
from netmodel.packet import Packet

from .dump import NodeDump
from .routing import Fib

__all__ = ["BranchOutcome", "NodeFlow", "NodeTracer"]

_LOOPBACK_NET = IPv4Network("127.0.0.0/8")
_SYN = frozenset({"SYN"})


@dataclass(frozen=True, slots=True)
class NodeFlow:
    """One flow: source, destination, destination port, protocol, source port, and the
    interface it arrives on (``iif``; None: the one the node routes the source through)."""

    source: str
    dest: str
    dport: int
    protocol: str = "tcp"
    sport: int = 40000
    iif: str | None = None

    def packet(self) -> Packet:
        src, dst = ip_address(self.source), ip_address(self.dest)
        if self.protocol == "icmp":
            return Packet(src, dst, "icmp", icmp_type=8, icmp_code=0, icmp_id=self.sport)
        flags = _SYN if self.protocol == "tcp" else frozenset()
        return Packet(src, dst, self.protocol, self.sport, self.dport, 64, 60, flags)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class BranchOutcome:
    """One branch of a flow: its probability, the verdict (``reason`` when routing or a
    sysctl decided), the DNAT destination, whether a source NAT happened and the source
    address the destination sees, the output interface and the rules walked."""

    probability: float
    verdict: str
    reason: str | None
    endpoint: str | None
    masquerade: bool
    source: str
    out_dev: str | None
    delivery: str | None
    records: tuple[TraceRecord, ...]
    visited: int


class _NodeNetfilter(Netfilter):
    """The engine with the node's routing deciding MASQUERADE's address."""

    fib: Fib

    def masq_source(self, w: Any) -> IPAddress | None:
        dst = int_addr(w.dst)
        if dst.version == 4:
            d = self.fib.lookup(dst, mark=w.mark)
            dev = w.oif or d.dev
            if dev:
                a = self.fib.masquerade_source(dev, d.gateway or dst)
                if a is not None:
                    return a
        return super().masq_source(w)


class NodeTracer:
    """A node dump, compiled, ready to answer many flows (module docstring)."""

    def __init__(self, dump: NodeDump, *, linear: bool = False) -> None:
        self.dump = dump
        self.fib = dump.fib
        local: list[IPAddress] = [ip_address("127.0.0.1"), ip_address("::1")]
        local += [a for a in self.fib.local if a not in local]
        ifaces: dict[str, list[IPAddress]] = {}
        for a in self.fib.addrs:
            if not a.secondary:
                ifaces.setdefault(a.ifname, []).append(a.address)
        for a in self.fib.addrs:
            if a.secondary:
                ifaces.setdefault(a.ifname, []).append(a.address)
        nf = _NodeNetfilter.__new__(_NodeNetfilter)
        nf.fib = self.fib
        state = dump.ipvs_state
        Netfilter.__init__(
            nf,
            dump.iptables,
            local_addrs=local,
            iface_addrs=ifaces,
            ipsets=dump.ipsets,
            nft=NftEngine(dump.nft) if dump.nft is not None else None,
            ipvs=IpvsEngine(state) if state is not None else None,
            linear=linear,
        )
        self.netfilter: Netfilter = nf

    # ---- where the packet comes from and goes

    def origin(self, flow: NodeFlow) -> str:
        if flow.iif is not None:
            return "in"
        return "out" if self.fib.is_local(ip_address(flow.source)) else "in"

    def in_iface(self, flow: NodeFlow) -> str:
        """The flow's ``iif`` if it names one, else the interface the node routes the
        source through (its reverse path: right unless policy rules select by ``iif``,
        as the AWS VPC CNI's branch-ENI rules do)."""
        if flow.iif is not None:
            return flow.iif
        src = ip_address(flow.source)
        d = self.fib.lookup(src)
        if d.kind == "unicast" and d.dev:
            return d.dev
        for a in self.fib.addrs:
            if a.ifname != "lo":
                return a.ifname
        return "eth0"

    def _router(self, flow: NodeFlow, origin: str, iif: str) -> Any:
        fib = self.fib
        src = ip_address(flow.source)

        def route(p: Packet) -> str | None:
            d = fib.lookup(p.dst, src, iif if origin == "in" else None, p.mark)
            if d.kind == "local":
                return None
            return d.dev or "-"

        return route

    # ---- one traversal into an outcome

    def _outcome(
        self, flow: NodeFlow, origin: str, iif: str, t: Traversal, probability: float
    ) -> BranchOutcome:
        sys = self.dump.sysctls
        p = t.packet
        verdict, reason = t.verdict, None
        src = ip_address(flow.source)
        out_dev: str | None = None
        if verdict == "ACCEPT":
            d = self.fib.lookup(p.dst, src, iif if origin == "in" else None, p.mark)
            out_dev = d.dev if d.kind == "unicast" else None
            if d.dropped:
                verdict, reason = "DROP", f"routing: {d.kind} ({d.route})"
            elif origin == "in":
                if sys.rp_filter(iif) and self.fib.lookup(src).dropped:
                    verdict, reason = "DROP", f"rp_filter on {iif}: no route back to {src}"
                elif p.dst in _LOOPBACK_NET and not sys.route_localnet(iif):
                    verdict = "DROP"
                    reason = f"martian destination {p.dst} on {iif} (route_localnet=0)"
                elif d.kind == "unicast" and not sys.ip_forward:
                    verdict, reason = "DROP", "net.ipv4.ip_forward=0"
            elif (
                src in _LOOPBACK_NET
                and d.kind == "unicast"
                and d.dev not in (None, "lo")
                and not sys.route_localnet(str(d.dev))
            ):
                verdict = "DROP"
                reason = f"martian source {src} leaving {d.dev} (route_localnet=0)"
        records = t.records
        if reason is not None:
            keep = "PREROUTING" if origin == "in" else "OUTPUT"
            records = tuple(r for r in records if r.hook == keep)
            out_dev = None
        snat = False
        if verdict == "ACCEPT":
            skb = t.skb
            conn = skb.conn if skb is not None else None
            snat = t.snat is not None or bool(conn is not None and conn.status & SRC_NAT)  # type: ignore[attr-defined]
        endpoint = join_host_port(t.dnat[0], t.dnat[1]) if t.dnat else None
        return BranchOutcome(
            probability,
            verdict,
            reason,
            endpoint,
            snat,
            str(p.src),
            out_dev,
            t.delivery if verdict == "ACCEPT" else None,
            records,
            t.visited,
        )

    def trace(self, flow: NodeFlow) -> list[BranchOutcome]:
        """Every branch of the flow's random choices (nothing committed)."""
        origin = self.origin(flow)
        iif = self.in_iface(flow) if origin == "in" else "lo"
        branches = self.netfilter.enumerate(
            flow.packet(), origin=origin, in_iface=iif, route=self._router(flow, origin, iif)
        )
        return [self._outcome(flow, origin, iif, b.result, b.probability) for b in branches]

    def sample(self, flow: NodeFlow, rng: Random, *, commit: bool = False) -> BranchOutcome:
        """One traversal with random choices drawn from ``rng``."""
        origin = self.origin(flow)
        iif = self.in_iface(flow) if origin == "in" else "lo"
        t = self.netfilter.traverse(
            flow.packet(),
            origin=origin,
            in_iface=iif,
            route=self._router(flow, origin, iif),
            chooser=RandomChooser(rng),
            commit=commit,
        )
        return self._outcome(flow, origin, iif, t, 1.0)


def summarise(flow: NodeFlow, origin: str, branches: list[BranchOutcome]) -> dict[str, Any]:
    """The JSON answer for ``trace --node-dump --all``: verdicts with probabilities,
    each endpoint with its probability, ``masquerade`` (a source NAT happened on every
    branch to it) and ``source`` (the source address it sees; a list when branches
    differ), and top-level ``masquerade`` (a source NAT happened on every branch)."""
    verdicts: dict[str, float] = {}
    eps: dict[str, dict[str, Any]] = {}
    for b in branches:
        verdicts[b.verdict] = verdicts.get(b.verdict, 0.0) + b.probability
        if b.endpoint is None:
            continue
        e = eps.setdefault(
            b.endpoint,
            {"endpoint": b.endpoint, "probability": 0.0, "masquerade": True, "sources": []},
        )
        e["probability"] += b.probability
        e["masquerade"] = e["masquerade"] and b.masquerade
        e.setdefault("verdicts", set()).add(b.verdict)
        if b.verdict == "ACCEPT" and b.source not in e["sources"]:
            e["sources"].append(b.source)
    endpoints = []
    for e in eps.values():
        srcs = e.pop("sources")
        vs = sorted(e.pop("verdicts"))
        e["probability"] = round(e["probability"], 10)
        e["verdict"] = vs[0] if len(vs) == 1 else vs
        e["source"] = srcs[0] if len(srcs) == 1 else (srcs or None)
        endpoints.append(e)
    accepted = [b for b in branches if b.verdict == "ACCEPT"]
    sources = sorted({b.source for b in accepted})
    reasons = sorted({b.reason for b in branches if b.reason})
    return {
        "flow": {
            "from": flow.source,
            "to": flow.dest,
            "port": flow.dport,
            "proto": flow.protocol,
            "sport": flow.sport,
        }
        | ({"iif": flow.iif} if flow.iif is not None else {}),
        "origin": origin,
        "verdict": max(verdicts.items(), key=lambda kv: kv[1])[0] if verdicts else "ACCEPT",
        "verdicts": {k: round(v, 10) for k, v in verdicts.items()},
        "endpoints": endpoints,
        "masquerade": bool(branches) and all(b.masquerade for b in branches),
        "source": sources[0] if len(sources) == 1 else (sources or None),
        "out_dev": sorted({b.out_dev for b in accepted if b.out_dev}) or None,
        "reasons": reasons,
    }
