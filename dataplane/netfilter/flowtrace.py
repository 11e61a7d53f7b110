"""``svclab trace --at node/NAME``: one node's netfilter answering "where does this flow
go?", the question kube-proxy's own packet-flow tests ask.

Unlike upstream's simplified tracer this runs the real engine (:mod:`.evaluate`): real
hook order, conntrack, the built-in chains and kube-proxy's jump rules, marks, and every
branch of each random choice. On upstream's flows it gives the same answers
(:meth:`FlowResult.upstream_output`).

Contract:

* A flow whose source is one of the node's LOCAL addresses starts on the node (OUTPUT,
  POSTROUTING, and PREROUTING/INPUT again over ``lo`` when it stays local); any other
  source arrives from outside on ``eth0`` (PREROUTING, then INPUT if the — possibly
  DNATed — destination is local, else FORWARD and POSTROUTING).
* The flow is the first packet of a new connection (a TCP SYN from port
  :data:`SOURCE_PORT`); nothing is committed to the node's state.
* ``endpoints`` lists each DNAT destination in rule order with the probability of
  reaching it; ``masquerade`` says whether the masquerade mark (0x4000) was set on any
  branch; ``verdict`` is the most probable verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import ip_address
from random import Random

from netmodel.ip import IPAddress, join_host_port
from netmodel.packet import Packet

from .choice import Branch, RandomChooser
from .evaluate import Netfilter, Provider, Traversal
from .parse import parse_save
from .rules import Ruleset

__all__ = ["SOURCE_PORT", "EndpointShare", "Flow", "FlowResult", "FlowTracer", "trace_flow"]

SOURCE_PORT = 40000


@dataclass(frozen=True, slots=True, init=False)
class Flow:
    """What upstream's flow tables give: source IP, protocol, destination IP and port."""

    source: str
    dest: str
    dport: int
    protocol: str = "tcp"

    def __init__(self, source: str, dest: str, dport: int, protocol: str = "tcp") -> None:
        # the generated __init__ of a frozen dataclass, written out with the slots' own
        # stores (its object.__setattr__ per field costs twice as much: one Flow is made
        # per traced flow); same fields, order and default (a test checks it)
        _set_source(self, source)
        _set_dest(self, dest)
        _set_dport(self, dport)
        _set_protocol(self, protocol)

    def packet(self) -> Packet:
        """The flow's first packet: a TCP SYN, a UDP datagram or an ICMP echo request
        from :data:`SOURCE_PORT` (or with it as the echo identifier)."""
        proto = self.protocol.lower()
        src, dst = _address(self.source), _address(self.dest)
        if proto == "icmp":
            return Packet(src, dst, "icmp", icmp_type=8, icmp_code=0, icmp_id=SOURCE_PORT)
        flags = _SYN if proto == "tcp" else _NO_FLAGS
        return Packet(src, dst, proto, SOURCE_PORT, self.dport, 64, 60, flags)  # type: ignore[arg-type]


_set_source = Flow.__dict__["source"].__set__
_set_dest = Flow.__dict__["dest"].__set__
_set_dport = Flow.__dict__["dport"].__set__
_set_protocol = Flow.__dict__["protocol"].__set__
_SYN = frozenset({"SYN"})
_NO_FLAGS: frozenset[str] = frozenset()
_ADDRESSES: dict[str, IPAddress] = {}


def _address(text: str) -> IPAddress:
    """``ip_address(text)``, memoised (a flow table names the same addresses again and
    again; parsing one costs more than tracing through an indexed chain)."""
    a = _ADDRESSES.get(text)
    if a is None:
        if len(_ADDRESSES) >= 100_000:
            _ADDRESSES.clear()
        a = _ADDRESSES[text] = ip_address(text)
    return a


@dataclass(frozen=True, slots=True)
class EndpointShare:
    """A DNAT destination (``ip:port``), the probability of reaching it, and whether the
    masquerade mark was set on the way there."""

    endpoint: str
    probability: float
    masquerade: bool
    verdict: str


@dataclass(frozen=True, slots=True)
class FlowResult:
    """The answer for one flow (see the module docstring)."""

    flow: Flow
    verdict: str
    verdicts: tuple[tuple[str, float], ...]
    endpoints: tuple[EndpointShare, ...]
    masquerade: bool
    origin: str
    branches: tuple[Branch[Traversal], ...]

    def upstream_output(self) -> str:
        """The result in upstream's ``output`` form: the endpoints joined with ``", "`` in
        rule order; or, when nothing was DNATed, the verdict of the rule that decided
        (``REJECT``, ``DROP``, ``ACCEPT``), or ``""`` when only policies applied."""
        if self.endpoints:
            return ", ".join(e.endpoint for e in self.endpoints)
        words: list[str] = []
        for b in self.branches:
            w = _deciding_rule_verdict(b.result)
            if w and w not in words:
                words.append(w)
        return ", ".join(words)


def _deciding_rule_verdict(t: Traversal) -> str:
    """ACCEPT/DROP/REJECT if a filter rule (not a policy, not KUBE-FORWARD's conntrack
    bookkeeping) decided the packet's fate."""
    for r in reversed(t.records):
        if r.rule == 0 or r.table in ("conntrack", "nat"):
            continue
        eff = r.effect.split(" ")[0].upper()
        if eff in ("ACCEPT", "DROP", "REJECT"):
            if eff == "ACCEPT" and t.verdict == "ACCEPT" and r.chain == "KUBE-FORWARD":
                return ""
            return eff
    return ""


class FlowTracer:
    """A node's compiled netfilter, ready to answer many flows.

    ``rules`` is iptables-save text (or a parsed :class:`~.rules.Ruleset`) including the
    built-in chains and kube-proxy's jump rules; ``local_addrs`` the node's LOCAL
    addresses (loopback included); ``node_ip`` the address MASQUERADE uses (default:
    the first non-loopback IPv4 LOCAL address)."""

    def __init__(
        self,
        rules: str | Ruleset,
        local_addrs: Iterable[str | IPAddress],
        *,
        node_ip: str | None = None,
        linear: bool = False,
        trace: bool = True,
        nft: Provider | None = None,
        ipvs: Provider | None = None,
    ) -> None:
        ruleset = parse_save(rules) if isinstance(rules, str) else rules
        addrs: list[IPAddress] = [ip_address(str(a)) for a in local_addrs]
        primary: list[IPAddress]
        if node_ip is not None:
            primary = [ip_address(node_ip)]
        else:
            primary = []
            for a in addrs:
                if a.version == 4 and not a.is_loopback:
                    primary.append(a)
                    break
        self.local = frozenset(addrs)
        self._starts: dict[tuple[str, str, int, str], tuple[Packet, str]] = {}
        self._chooser: RandomChooser | None = None
        self.netfilter = Netfilter(
            ruleset,
            local_addrs=addrs,
            iface_addrs={
                "eth0": primary + [a for a in addrs if a.version == 6 and not a.is_loopback]
            },
            linear=linear,
            trace=trace,
            nft=nft,
            ipvs=ipvs,
        )

    def origin(self, flow: Flow) -> str:
        """``out`` when the flow's source is one of the node's addresses, else ``in``."""
        return "out" if _address(flow.source) in self.local else "in"

    def _start(self, flow: Flow) -> tuple[Packet, str]:
        """The flow's first packet and origin, memoised per (source, destination, port,
        protocol): a flow table repeats its flows, and building the packet (a frozen
        dataclass of 15 fields) costs more than a tenth of a traversal. Packets are
        immutable, so one object serves every traversal of the flow."""
        key = (flow.source, flow.dest, flow.dport, flow.protocol)
        start = self._starts.get(key)
        if start is None:
            if len(self._starts) >= 100_000:
                self._starts.clear()
            start = self._starts[key] = (flow.packet(), self.origin(flow))
        return start

    def trace(self, flow: Flow) -> FlowResult:
        """Every branch of the flow, summarised (nothing is committed)."""
        packet, origin = self._start(flow)
        branches = self.netfilter.enumerate(packet, origin=origin)
        return summarise(flow, origin, branches)

    def sample(self, flow: Flow, rng: Random | None = None, *, commit: bool = False) -> Traversal:
        """One traversal, random choices drawn from ``rng`` (``--at`` without ``--all``)."""
        start = self._starts.get((flow.source, flow.dest, flow.dport, flow.protocol))
        packet, origin = start if start is not None else self._start(flow)
        chooser = None
        if rng is not None:
            # one chooser per generator, reused (it holds nothing but the generator)
            chooser = self._chooser
            if chooser is None or chooser.rng is not rng:
                chooser = self._chooser = RandomChooser(rng)
        return self.netfilter.traverse(packet, origin=origin, chooser=chooser, commit=commit)


def summarise(flow: Flow, origin: str, branches: list[Branch[Traversal]]) -> FlowResult:
    """Fold enumerated branches into a :class:`FlowResult`."""
    eps: dict[str, list[object]] = {}
    verdicts: dict[str, float] = {}
    masq = False
    for b in branches:
        t = b.result
        verdicts[t.verdict] = verdicts.get(t.verdict, 0.0) + b.probability
        masq = masq or t.masquerade
        if t.dnat is not None:
            key = join_host_port(t.dnat[0], t.dnat[1])
            cur = eps.get(key)
            if cur is None:
                eps[key] = [b.probability, t.masquerade, t.verdict]
            else:
                cur[0] = float(cur[0]) + b.probability  # type: ignore[arg-type]
                cur[1] = bool(cur[1]) or t.masquerade
    verdict = max(verdicts.items(), key=lambda kv: kv[1])[0] if verdicts else "ACCEPT"
    return FlowResult(
        flow,
        verdict,
        tuple(verdicts.items()),
        tuple(
            EndpointShare(k, float(v[0]), bool(v[1]), str(v[2]))  # type: ignore[arg-type]
            for k, v in eps.items()
        ),
        masq,
        origin,
        tuple(branches),
    )


def trace_flow(
    rules: str | Ruleset,
    local_addrs: Iterable[str | IPAddress],
    flow: Flow,
    *,
    node_ip: str | None = None,
) -> FlowResult:
    """One-shot :meth:`FlowTracer.trace` (compiles the rules each call)."""
    return FlowTracer(rules, local_addrs, node_ip=node_ip).trace(flow)
