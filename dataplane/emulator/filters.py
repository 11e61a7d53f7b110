"""The netfilter of each emulated namespace, over :mod:`dataplane.netfilter`.

:class:`RulesetInput` is what a node's rules can be given as (a small union):

* :class:`IptablesRules` — ``iptables-save`` text (or an ``iptables-restore`` payload
  applied to empty tables with ``restore=True``);
* :class:`NftRules` — ``nft list ruleset`` / ``nft -f`` text;
* :class:`IpvsRules` — ``ipvsadm-save -n`` text plus ``ipset save`` text plus the
  iptables glue (``iptables-save`` text).

:class:`EngineFilter` implements :class:`~dataplane.emulator.hooks.PacketFilter` with a
:class:`dataplane.netfilter.evaluate.Netfilter`; a namespace without rules gets one with
no tables, so its connections are still tracked. Trace records become
:class:`~dataplane.emulator.trace.Hop` values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from random import Random

from dataplane.emulator.hooks import FilterVerdict, HookIO, HookName, HookOutcome, Skb
from dataplane.emulator.trace import Hop, HopKind
from dataplane.netfilter import evaluate as nf_eval
from dataplane.netfilter.choice import Chooser
from dataplane.netfilter.conntrack import CONFIRMED, REPLY, Clock, Connection, ConntrackTable
from dataplane.netfilter.parse import apply_restore, parse_save
from dataplane.netfilter.rules import Ruleset
from dataplane.netfilter.trace import TraceRecord
from netmodel.errors import UnsupportedRuleError
from netmodel.ip import IPAddress
from netmodel.packet import Packet


@dataclass(frozen=True, slots=True)
class IptablesRules:
    """``iptables-save`` text; with ``restore`` an ``iptables-restore`` payload applied to
    empty tables (kube-proxy's jump rules are then missing unless the text has them)."""

    text: str
    restore: bool = False
    source: str = "<iptables-save>"


@dataclass(frozen=True, slots=True)
class NftRules:
    """``nft`` ruleset text."""

    text: str
    source: str = "<nft>"


@dataclass(frozen=True, slots=True)
class IpvsRules:
    """IPVS state: ``ipvsadm-save -n`` text, ``ipset save`` text and the iptables glue."""

    ipvsadm: str
    ipset: str
    iptables: str
    source: str = "<ipvs>"


RulesetInput = IptablesRules | NftRules | IpvsRules


def parse_iptables(rules: IptablesRules) -> Ruleset:
    if rules.restore:
        return apply_restore(Ruleset(), rules.text, noflush=False, source=rules.source)
    return parse_save(rules.text, source=rules.source)


class EngineFilter:
    """One namespace's netfilter (see the module docstring).

    ``chooser`` is read at every hook call from ``chooser_source`` so that the cluster
    can swap a seeded chooser for an explorer (``--all``)."""

    __slots__ = ("chooser_box", "name", "nf")

    def __init__(self, name: str, nf: nf_eval.Netfilter, chooser_box: list[Chooser]) -> None:
        self.name = name
        self.nf = nf
        self.chooser_box = chooser_box

    @classmethod
    def build(
        cls,
        name: str,
        rules: RulesetInput | None,
        *,
        local_addrs: Iterable[IPAddress],
        iface_addrs: Mapping[str, Sequence[IPAddress]],
        clock: Clock,
        chooser_box: list[Chooser],
        seed: int = 0,
    ) -> EngineFilter:
        """A filter for namespace ``name`` with ``rules`` (None: no tables). ``seed``
        seeds the engine's own generator (``--random-fully`` source ports)."""
        ruleset: Ruleset | None = None
        if isinstance(rules, IptablesRules):
            ruleset = parse_iptables(rules)
        elif rules is not None:
            raise _unsupported(rules)
        nf = nf_eval.Netfilter(
            ruleset,
            local_addrs=local_addrs,
            iface_addrs=iface_addrs,
            conntrack=ConntrackTable(clock),
            clock=clock,
            rng=Random(f"{seed}/{name}"),
        )
        return cls(name, nf, chooser_box)

    # ---- PacketFilter

    def run(
        self, hook: HookName, pkt: Packet, io: HookIO, skb: Skb, *, record: bool
    ) -> HookOutcome:
        prev = skb.ct
        if isinstance(prev, nf_eval.Skb):
            eskb = nf_eval.Skb(pkt, prev.conn, prev.direction, prev.state, prev.untracked, prev.masq)
        elif skb.related is not None and isinstance(skb.related, nf_eval.Skb):
            eskb = _related(pkt, skb.related)
        else:
            eskb = nf_eval.Skb(pkt)
        nf = self.nf
        nf.trace = record
        res = nf.run_hook(
            hook,
            eskb,
            in_iface=io.indev,
            out_iface=io.outdev,
            chooser=self.chooser_box[0],
        )
        hops = [_hop(self.name, io, r) for r in res.records] if record else []
        if res.skb is None:
            verdict: FilterVerdict = "REJECT" if res.verdict == "REJECT" else "DROP"
            return HookOutcome(verdict, pkt, hops, res.reject_with, None)
        skb.ct = res.skb
        return HookOutcome("ACCEPT", res.skb.packet, hops, None, _chosen_by(res.records))

    # ---- state

    @property
    def conntrack(self) -> ConntrackTable:
        return self.nf.conntrack


def _related(pkt: Packet, orig: nf_eval.Skb) -> nf_eval.Skb:
    """The attachment of a kernel-generated error (``nf_ct_attach``): RELATED to the
    connection of the packet it answers, in the other direction. An unconfirmed
    connection (its packet died before POSTROUTING) is copied and marked confirmed, so
    that the error translates through it without inserting it into the table (the kernel
    never confirms on a reply-direction packet)."""
    conn = orig.conn
    if not isinstance(conn, Connection) or not orig.state:
        return nf_eval.Skb(pkt)
    if not conn.status & CONFIRMED:
        conn = conn.copy()
        conn.status |= CONFIRMED
    direction = REPLY if orig.direction == 0 else 0
    return nf_eval.Skb(pkt, conn, direction, "RELATED", False, False)


def _hop(netns: str, io: HookIO, r: TraceRecord) -> Hop:
    din, dout = io.indev, io.outdev
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


def _unsupported(rules: NftRules | IpvsRules) -> UnsupportedRuleError:
    kind = "nftables" if isinstance(rules, NftRules) else "IPVS"
    return UnsupportedRuleError(
        f"{rules.source}: the netfilter engine does not evaluate {kind} rules yet"
    )
