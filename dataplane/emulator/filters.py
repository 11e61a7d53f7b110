"""The netfilter of each emulated namespace, over :mod:`dataplane.netfilter`.

:data:`~netmodel.rulesets.RulesetInput` (:mod:`netmodel.rulesets`) is what a node's
rules can be given as: iptables, nftables or IPVS text, compiled here.

:class:`EngineFilter` implements :class:`~dataplane.emulator.hooks.PacketFilter` with a
:class:`dataplane.netfilter.evaluate.Netfilter`; a namespace without rules gets a
:class:`TrackingFilter`, which accepts everything but still tracks connections in the
engine's conntrack table (so replies find their entries). Trace records become
:class:`~dataplane.emulator.trace.Hop` values. :func:`~dataplane.emulator.replay.replay_safe`
decides whether the flow cache may replay a ruleset's verdicts for packets of known
connections.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from random import Random

from dataplane.emulator.hooks import FilterVerdict, HookName, HookOutcome, ReplayStep, Skb
from dataplane.emulator.replay import replay_safe
from dataplane.emulator.trace import Hop, HopKind
from dataplane.netfilter import evaluate as nf_eval
from dataplane.netfilter import rules as R
from dataplane.netfilter.choice import Chooser
from dataplane.netfilter.conntrack import (
    CONFIRMED,
    REPLY,
    Clock,
    Connection,
    ConntrackTable,
    CtTuple,
    PacketState,
    addr_int,
    make_tuple,
)
from dataplane.netfilter.ipset import IpSet, parse_ipset_save
from dataplane.netfilter.ipvs import IpvsEngine, IpvsState
from dataplane.netfilter.ipvsadm import parse_ipvsadm
from dataplane.netfilter.nft import NftEngine, NftRuleset, parse_nft
from dataplane.netfilter.parse import apply_restore, parse_save
from dataplane.netfilter.rules import Ruleset
from dataplane.netfilter.trace import TraceRecord
from dataplane.netfilter.verdict import REJECT, STOLEN
from netmodel.ip import IPAddress
from netmodel.packet import Packet
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules, RulesetInput


@dataclass(frozen=True, slots=True)
class CompiledRules:
    """Parsed rules, their compiled form (lazy: each chain compiled when a packet first
    runs it), and whether the flow cache may replay their verdicts (:func:`replay_safe`).
    ``stateful``: a compiled rule keeps state of its own (an nth counter, a limit's
    token bucket: :func:`_uses_nth`), so each namespace runs a fresh copy of
    ``compiled`` (:meth:`~dataplane.netfilter.compiled.CompiledRuleset.fresh`), never
    the shared one. ``nft``/``ipvs``/``ipsets`` hold the parsed nftables ruleset, IPVS
    state and ipsets (immutable; each namespace wraps them in its own engine, which
    keeps the mutable part).

    Pickled (the compiled-rule cache, :mod:`control.rulecache`), ``ruleset`` is left
    out when ``compiled`` holds the rules: those pickle chain by chain and come back lazy
    (:class:`~dataplane.netfilter.compiled.CompiledRuleset`), and the engine evaluates
    ``compiled`` alone; such a restored value has ``ruleset`` None."""

    ruleset: Ruleset | None
    compiled: nf_eval.CompiledRuleset | None
    replayable: bool
    nft: NftRuleset | None = None
    ipvs: IpvsState | None = None
    ipsets: Mapping[str, IpSet] | None = None
    stateful: bool = False

    def __reduce__(self) -> tuple[object, ...]:
        ruleset = self.ruleset if self.compiled is None else None
        return (CompiledRules, (ruleset, self.compiled, self.replayable, self.nft,
                                self.ipvs, self.ipsets, self.stateful))


def compile_rules(rules: RulesetInput) -> CompiledRules:
    """Parse (and, when shareable, compile) one ruleset input."""
    if isinstance(rules, NftRules):
        # nft rules are evaluated by their own engine; the flow cache does not replay them
        nft = parse_nft(rules.text, source=rules.source)
        if not rules.iptables:
            return CompiledRules(None, None, False, nft=nft)
        # iptables-nft tables beside kube-proxy's (Calico's Felix): evaluated too
        sets = parse_ipset_save(rules.ipsets, source=rules.source) if rules.ipsets else {}
        beside = parse_save(rules.iptables, source=rules.source, ipsets=sets)
        return CompiledRules(beside, nf_eval.CompiledRuleset(beside, sets=sets, lazy=True),
                             False, nft=nft, ipsets=sets, stateful=_uses_nth(beside))
    if isinstance(rules, IpvsRules):
        sets = parse_ipset_save(rules.ipset, source=rules.source)
        glue = parse_save(rules.iptables, source=rules.source, ipsets=sets)
        state = IpvsState.of(parse_ipvsadm(rules.ipvsadm, source=rules.source))
        compiled = nf_eval.CompiledRuleset(glue, sets=sets, lazy=True)
        # IPVS schedules only connections it does not own yet (a replayed packet's is
        # owned); for its own connections it rewrites from the entry: the glue decides
        return CompiledRules(glue, compiled, replay_safe(glue), ipvs=state, ipsets=sets,
                             stateful=_uses_nth(glue))
    given = parse_ipset_save(rules.ipsets, source=rules.source) if rules.ipsets else None
    ruleset = parse_iptables(rules, given)
    # each chain compiled when a packet first runs it (a node's 60,000 rules, three run;
    # kube-router's pod chains log with -m limit: stateful, yet compiled lazily too)
    compiled = nf_eval.CompiledRuleset(ruleset, sets=given, lazy=True)
    return CompiledRules(ruleset, compiled, replay_safe(ruleset), ipsets=given,
                         stateful=_uses_nth(ruleset))


def _uses_nth(ruleset: Ruleset) -> bool:
    """Whether a rule keeps state of its own in the compiled form (an nth counter, a
    limit's token bucket): such a compiled ruleset is not shared between nodes."""
    return any(
        (isinstance(m, R.StatisticMatch) and m.mode == "nth") or isinstance(m, R.LimitMatch)
        for _, rule in ruleset.rules()
        for m in rule.matches
    )


def parse_iptables(rules: IptablesRules, sets: Mapping[str, IpSet] | None = None) -> Ruleset:
    """The ruleset of ``rules``; ``sets``: the ipsets its ``-m set`` rules may name."""
    if rules.restore:
        return apply_restore(
            Ruleset(), rules.text, noflush=False, source=rules.source, ipsets=sets
        )
    return parse_save(rules.text, source=rules.source, ipsets=sets)


def ct_tuple(pkt: Packet) -> CtTuple:
    """The conntrack tuple of a packet (ICMP: the identifier as both ports)."""
    if pkt.proto == "icmp":
        return make_tuple("icmp", addr_int(pkt.src), addr_int(pkt.dst), pkt.icmp_id, pkt.icmp_id)
    return make_tuple(pkt.proto, addr_int(pkt.src), addr_int(pkt.dst), pkt.sport, pkt.dport)


def _inner_tuple(pkt: Packet) -> CtTuple | None:
    inner = pkt.inner
    if pkt.proto != "icmp" or inner is None:
        return None
    return ct_tuple(inner)


def _log_step(
    log: list[ReplayStep | None],
    table: ConntrackTable,
    t: CtTuple,
    before: tuple[Connection, int] | None,
    tcp_before: str | None,
    conn: object,
    direction: int,
    state: str,
    replayable: bool,
) -> None:
    if (
        replayable
        and before is not None
        and isinstance(conn, Connection)
        and before[0] is conn
        and state in ("NEW", "ESTABLISHED")
    ):
        log.append(ReplayStep(table, t, conn, direction, state, tcp_before))
    else:
        log.append(None)


_new_tuple = tuple.__new__
_NO_HOPS: list[Hop] = []  # shared, never appended to (only when recording)


class TrackingFilter:
    """A namespace without rules: every packet is accepted, its connection tracked
    (conntrack's PREROUTING/OUTPUT step and the confirmation at INPUT/POSTROUTING; a
    confirmation clash drops the packet, as in the kernel)."""

    __slots__ = ("name", "table")

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self.table = ConntrackTable(clock)

    @property
    def conntrack(self) -> ConntrackTable:
        return self.table

    def run(
        self,
        hook: HookName,
        pkt: Packet,
        indev: str | None,
        outdev: str | None,
        skb: Skb,
        *,
        record: bool,
        log: list[ReplayStep | None] | None = None,
        physin: str | None = None,
        physout: str | None = None,
        hops_wanted: bool = True,
    ) -> HookOutcome:
        record = record and hops_wanted  # no rules here: a trace is its only use
        hops: list[Hop] = [] if record else _NO_HOPS
        if hook == "PREROUTING" or hook == "OUTPUT":
            if skb.ct is None:
                t = ct_tuple(pkt)
                before = self.table.lookup(t) if log is not None else None
                tcp_before = before[0].tcp_state if before is not None else None
                ps = self.table.classify(t, pkt.flags, pkt.icmp_type, _inner_tuple(pkt))
                skb.ct = ps
                if log is not None:
                    _log_step(log, self.table, t, before, tcp_before, ps.conn, ps.direction,
                              ps.state, True)
                if record:
                    note = f"state {ps.state}" + (" reply" if ps.direction == REPLY else "")
                    hops.append(Hop("conntrack", self.name, dev_in=indev, dev_out=outdev,
                                    hook=hook, conntrack=ps.state, note=note))
        elif hook == "INPUT" or hook == "POSTROUTING":
            att = skb.ct
            if isinstance(att, PacketState) and att.conn is not None and not (
                att.conn.status & CONFIRMED
            ):
                if not self.table.confirm(att.conn):
                    if record:
                        hops.append(Hop("conntrack", self.name, dev_in=indev, dev_out=outdev,
                                        hook=hook, conntrack=att.state,
                                        note="DROP: tuple clash on confirm"))
                    return HookOutcome("DROP", pkt, hops)
                if record:
                    hops.append(Hop("conntrack", self.name, dev_in=indev, dev_out=outdev,
                                    hook=hook, conntrack=att.state, note="confirmed"))
        return _new_tuple(HookOutcome, ("ACCEPT", pkt, hops, None, None))

    def quick(
        self,
        hook: HookName,
        pkt: Packet,
        indev: str | None,
        outdev: str | None,
        skb: Skb,
        physin: str | None,
        physout: str | None,
    ) -> tuple[Packet | None, FilterVerdict, str | None]:
        """``run`` without trace steps nor flow-cache log (the walk's fast path): the
        conntrack step at the first hook, the confirmation at the last, nothing else."""
        if hook == "PREROUTING" or hook == "OUTPUT":
            if skb.ct is None:
                skb.ct = self.table.classify(ct_tuple(pkt), pkt.flags, pkt.icmp_type,
                                             _inner_tuple(pkt))
        elif hook == "INPUT" or hook == "POSTROUTING":
            att = skb.ct
            if isinstance(att, PacketState) and att.conn is not None and not (
                att.conn.status & CONFIRMED
            ) and not self.table.confirm(att.conn):
                return None, "DROP", None
        return pkt, "ACCEPT", None

    def snapshot(self) -> object:
        return self.table.copy()

    def restore(self, state: object) -> None:
        assert isinstance(state, ConntrackTable)
        self.table = state.copy()


class EngineFilter:
    """A namespace with rules, evaluated by :class:`dataplane.netfilter.evaluate.Netfilter`.

    The chooser is read at every hook call from ``chooser_box`` so that the cluster can
    swap a seeded chooser for an explorer (``--all``)."""

    __slots__ = ("chooser_box", "name", "nf", "replayable")

    def __init__(
        self, name: str, nf: nf_eval.Netfilter, chooser_box: list[Chooser], replayable: bool
    ) -> None:
        self.name = name
        self.nf = nf
        self.chooser_box = chooser_box
        self.replayable = replayable

    @classmethod
    def build(
        cls,
        name: str,
        rules: RulesetInput,
        *,
        local_addrs: Iterable[IPAddress],
        iface_addrs: Mapping[str, Sequence[IPAddress]],
        clock: Clock,
        chooser_box: list[Chooser],
        seed: int = 0,
        cache: MutableMapping[RulesetInput, CompiledRules] | None = None,
    ) -> EngineFilter:
        """A filter for namespace ``name`` with ``rules``. ``seed`` seeds the engine's own
        generator (``--random-fully`` source ports). ``cache`` shares the parsed and
        compiled form between namespaces given the same rules (compiled rules keep no
        per-namespace state unless they use ``-m statistic --mode nth`` or ``-m limit``,
        whose counters and buckets they hold: such a namespace runs a fresh copy,
        its chains compiled as it runs them; nft and IPVS engines, which
        keep set elements and scheduler positions, are always per namespace)."""
        compiled = cache.get(rules) if cache is not None else None
        if compiled is None:
            compiled = compile_rules(rules)
            if cache is not None:
                cache[rules] = compiled
        extra: dict[str, object] = {}
        if isinstance(rules, NftRules):
            assert compiled.nft is not None
            extra["nft"] = NftEngine(compiled.nft)
        elif isinstance(rules, IpvsRules):
            assert compiled.ipvs is not None
            extra["ipvs"] = IpvsEngine(compiled.ipvs)
        if compiled.ipsets is not None:
            extra["ipsets"] = compiled.ipsets
        own = compiled.compiled
        if own is not None and compiled.stateful:
            own = own.fresh()  # this namespace's counters and buckets, no other's
        nf = nf_eval.Netfilter(
            compiled.ruleset,
            local_addrs=local_addrs,
            iface_addrs=iface_addrs,
            conntrack=ConntrackTable(clock),
            clock=clock,
            rng=Random(f"{seed}/{name}"),
            compiled=own,
            **extra,  # type: ignore[arg-type]
        )
        return cls(name, nf, chooser_box, compiled.replayable)

    @property
    def conntrack(self) -> ConntrackTable:
        return self.nf.conntrack

    def run(
        self,
        hook: HookName,
        pkt: Packet,
        indev: str | None,
        outdev: str | None,
        skb: Skb,
        *,
        record: bool,
        log: list[ReplayStep | None] | None = None,
        physin: str | None = None,
        physout: str | None = None,
        hops_wanted: bool = True,
    ) -> HookOutcome:
        """Run ``hook``. ``record``: trace the rules (the outcome's hops, unless not
        ``hops_wanted``, and ``chosen_by``); ``log``: the flow cache's replay log."""
        prev = skb.ct
        if not record and log is None:
            done, said, reject_with = self.quick(hook, pkt, indev, outdev, skb, physin, physout)
            # tuple.__new__ directly: the named tuple's own __new__ is a Python-level call
            return _new_tuple(HookOutcome, (said, pkt if done is None else done, (),
                                            reject_with, None))
        eskb: nf_eval.Skb | Packet
        if prev is not None:
            assert isinstance(prev, nf_eval.Skb)
            eskb = prev if prev.packet is pkt else nf_eval.Skb(
                pkt, prev.conn, prev.direction, prev.state, prev.untracked, prev.masq)
            first = False
        elif skb.related is not None and isinstance(skb.related, nf_eval.Skb):
            eskb = _related(pkt, skb.related)
            first = False
        else:
            eskb = pkt
            first = True
        nf = self.nf
        if nf.trace is not record:
            nf.trace = record
        if log is None or not first:
            res = nf.run_hook(hook, eskb, in_iface=indev, out_iface=outdev,
                              chooser=self.chooser_box[0], physdev_in=physin,
                              physdev_out=physout)
            out = res.skb
            if log is not None and out is None:
                log.append(None)
        else:
            table = nf.conntrack
            t = ct_tuple(pkt)
            before = table.lookup(t)
            tcp_before = before[0].tcp_state if before is not None else None
            res = nf.run_hook(hook, eskb, in_iface=indev, out_iface=outdev,
                              chooser=self.chooser_box[0], physdev_in=physin,
                              physdev_out=physout)
            out = res.skb
            if out is None:
                log.append(None)
            else:
                _log_step(log, table, t, before, tcp_before, out.conn, out.direction,
                          out.state, self.replayable)
        if not record:
            # tuple.__new__ directly: the named tuple's own __new__ is a Python-level call
            if out is None:
                return _new_tuple(HookOutcome, ("REJECT" if res.verdict == "REJECT" else "DROP",
                                                pkt, (), res.reject_with, None))
            skb.ct = out
            return _new_tuple(HookOutcome, ("STOLEN" if res.verdict == "STOLEN" else "ACCEPT",
                                            out.packet, (), None, None))
        hops = [_hop(self.name, indev, outdev, r) for r in res.records] if hops_wanted else []
        if out is None:
            verdict: FilterVerdict = "REJECT" if res.verdict == "REJECT" else "DROP"
            return HookOutcome(verdict, pkt, hops, res.reject_with, None)
        skb.ct = out
        return HookOutcome("STOLEN" if res.verdict == "STOLEN" else "ACCEPT", out.packet, hops,
                           None, _chosen_by(res.records))

    def quick(
        self,
        hook: HookName,
        pkt: Packet,
        indev: str | None,
        outdev: str | None,
        skb: Skb,
        physin: str | None,
        physout: str | None,
    ) -> tuple[Packet | None, FilterVerdict, str | None]:
        """``run`` without trace steps nor flow-cache log (the walk's fast path): the
        packet after the hook (None when it did not survive), the verdict and the REJECT
        answer type. One positional engine call (:meth:`Netfilter.run_quick`)."""
        prev = skb.ct
        if prev is None:
            rel = skb.related
            if rel is not None and isinstance(rel, nf_eval.Skb):
                prev = _related(pkt, rel)
        v, done, reject_with = self.nf.run_quick(hook, pkt, prev, indev, outdev,  # type: ignore[arg-type]
                                                 self.chooser_box[0], physin, physout)
        if done is None:
            return None, "REJECT" if v == REJECT else "DROP", reject_with
        skb.ct = done
        return done.packet, "STOLEN" if v == STOLEN else "ACCEPT", None

    def snapshot(self) -> object:
        return self.nf.snapshot()

    def restore(self, state: object) -> None:
        assert isinstance(state, tuple)
        ct, recent, counters, nft = state
        self.nf.restore((ct.copy(), recent.copy(), dict(counters), nft))


PacketFilterImpl = TrackingFilter | EngineFilter


def _related(pkt: Packet, orig: nf_eval.Skb) -> nf_eval.Skb:
    """The attachment of a kernel-generated error (``nf_ct_attach``): RELATED to the
    connection of the packet it answers, in the other direction. The engine translates
    such an error through the connection's bindings and never confirms on it (even when
    the connection is unconfirmed because its packet died before POSTROUTING)."""
    conn = orig.conn
    if not isinstance(conn, Connection) or not orig.state:
        return nf_eval.Skb(pkt)
    direction = REPLY if orig.direction == 0 else 0
    return nf_eval.Skb(pkt, conn, direction, "RELATED", False, False)


def _hop(netns: str, din: str | None, dout: str | None, r: TraceRecord) -> Hop:
    if r.table == "conntrack":
        return Hop("conntrack", netns, dev_in=din, dev_out=dout, hook=r.hook,
                   conntrack=r.ctstate, note=r.effect)
    if r.rule == 0 and r.nat is not None:
        return Hop("nat", netns, dev_in=din, dev_out=dout, hook=r.hook, table=r.table,
                   nat=r.nat, conntrack=r.ctstate, note=r.effect)
    if r.rule == 0:
        kind: HopKind = "policy" if r.effect.startswith("policy") else "rule"
        return Hop(kind, netns, dev_in=din, dev_out=dout, hook=r.hook, table=r.table,
                   chain=r.chain or None, verdict=r.effect, conntrack=r.ctstate)
    return Hop(
        "rule",
        netns,
        dev_in=din,
        dev_out=dout,
        hook=r.hook,
        table=r.table,
        chain=r.chain,
        rule_number=r.rule,
        rule=r.text,
        verdict=r.effect,
        nat=r.nat,
        conntrack=r.ctstate,
    )


def _chosen_by(records: Sequence[TraceRecord]) -> str | None:
    """The rule that picked the endpoint: the one that jumped into the chain holding the
    DNAT, else the DNAT rule itself (or an IPVS scheduling record)."""
    for i, r in enumerate(records):
        if r.table == "ipvs":
            return r.text or r.effect
        if r.effect.startswith("DNAT") and r.rule:
            for prev in reversed(records[:i]):
                if prev.effect in (f"jump {r.chain}", f"goto {r.chain}"):
                    return prev.text
            return r.text
    return None
