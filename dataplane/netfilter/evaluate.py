"""Evaluate a packet through one host's netfilter with the kernel's semantics.

**Hooks and order.** Each hook runs its stages by priority (IPv4 values):

====================  =================================================================
PREROUTING            raw (-300), conntrack (-200), mangle (-150), nat DNAT (-100)
INPUT                 mangle (-150), filter (0), security (50), nat SNAT (100), confirm
FORWARD               mangle (-150), filter (0), security (50)
OUTPUT                raw (-300), conntrack (-200), mangle (-150), nat DNAT (-100),
                      filter (0), security (50)
POSTROUTING           mangle (-150), nat SNAT (100), confirm
====================  =================================================================

nftables base chains (:mod:`.nft`) join at their own priority; their ``type nat``
chains run inside the nat stage after the iptables nat table. IPVS (:mod:`.ipvs`) runs
in INPUT at priority 98 (it may take the packet: STOLEN) and OUTPUT at -99, and
rewrites its replies in FORWARD and INPUT.

Paths (:meth:`Netfilter.traverse`): a packet that arrives runs PREROUTING, then — after
routing on the possibly DNATed destination — INPUT when it is local, else FORWARD and
POSTROUTING. A packet the host sends runs OUTPUT and POSTROUTING; if it is addressed to
the host itself it then comes back through PREROUTING and INPUT on ``lo`` (conntrack and
nat are not consulted again for it, as in the kernel).

**Tables.** First match wins; ``-j CHAIN`` returns to the next rule when CHAIN ends or
``RETURN``s; ``-g CHAIN`` does not return to the chain that jumped (a RETURN from it goes
to the chain that called *that* one); a built-in chain that ends or RETURNs applies its
policy. ACCEPT ends the table for this hook (later tables still run), DROP and REJECT
end the packet, DNAT/SNAT/MASQUERADE accept. MARK, CONNMARK, LOG, NFLOG, TRACE and
NOTRACK continue with the next rule.

**NAT and conntrack** (:mod:`.nat`). The nat chains are consulted only while a connection has no NAT
decision for that manipulation (the first packet); later packets, and replies, are
rewritten from the binding stored in the connection (:mod:`.conntrack`). An ICMP error
RELATED to a connection never runs the nat chains: the hooks translate its outer header
and the packet it quotes per the connection's bindings, as
``nf_nat_icmp_reply_translation`` does. A connection enters the table at the end of
POSTROUTING or INPUT, and only on a packet of its original direction.

**Indexing.** Chains with many rules are searched through :class:`~.compile.ChainIndex`;
``linear=True`` walks every rule instead. Both give the same results (a property test
checks it); ``visited`` counts the rules examined.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from ipaddress import IPv4Address
from random import Random
from typing import Any, NamedTuple, Protocol, cast

from netmodel.ip import IPAddress
from netmodel.packet import Packet

from . import rules as R
from .choice import Branch, Chooser, Explorer, RandomChooser, explore
from .compile import ST_INVALID, ST_UNTRACKED, STATE_BITS, Work
from .compiled import CompiledRuleset, RawTrace, materialize
from .conntrack import (
    CONFIRMED,
    REPLY,
    Clock,
    ConntrackTable,
    CtTuple,
    SimClock,
    addr_int,
    int_addr,
)
from .ipset import IpSet
from .nat import Stage, nat_stage
from .recent import RecentTable
from .trace import TraceRecord
from .verdict import ACCEPT, CONTINUE, DROP, STOLEN, VERDICT_NAMES

__all__ = [
    "HOOKS",
    "CompiledRuleset",
    "HookResult",
    "Netfilter",
    "Provider",
    "Skb",
    "Traversal",
]

HOOKS = ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")
_HOOK_MARKS = {h: ("H", h) for h in HOOKS}
_PATH_PRE = ("PREROUTING",)
_PATH_IN = ("PREROUTING", "INPUT")
_PATH_FWD = ("PREROUTING", "FORWARD", "POSTROUTING")
_PATH_IPVS = ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING")
_PATH_OUT = ("OUTPUT", "POSTROUTING", "PREROUTING", "INPUT")

# --------------------------------------------------------------------------- values out


class Skb:
    """A packet inside one host, with the conntrack state it carries between hooks
    (the kernel's skb->_nfct). Immutable by convention; hooks return a new one, or
    (:meth:`Netfilter.run_quick`) the same one when they changed nothing."""

    __slots__ = ("conn", "direction", "masq", "nftrace", "packet", "priority", "state", "untracked")

    def __init__(
        self,
        packet: Packet,
        conn: object = None,
        direction: int = 0,
        state: str = "",
        untracked: bool = False,
        masq: bool = False,
        nftrace: bool = False,
        priority: int = 0,
    ) -> None:
        self.packet = packet
        self.conn = conn
        self.direction = direction
        self.state = state
        self.untracked = untracked
        self.masq = masq
        # skb->nf_trace and skb->priority, set by nft ``meta nftrace|priority set``
        self.nftrace = nftrace
        self.priority = priority

    def __repr__(self) -> str:
        return f"Skb({self.packet.summary()}, state={self.state or '-'})"


class HookResult(NamedTuple):
    """What one hook did: the packet after it (None when dropped), the verdict
    (``ACCEPT``/``DROP``/``REJECT``, or ``STOLEN`` in INPUT when IPVS took the packet to
    send it to a remote real server itself: ``skb`` is then the rewritten packet, which
    the caller routes and passes through OUTPUT and POSTROUTING), the ICMP/TCP reply type
    for REJECT, the trace records, and how many rules were examined."""

    skb: Skb | None
    verdict: str
    reject_with: str | None
    records: tuple[TraceRecord, ...]
    visited: int


class Traversal:
    """A packet's whole way through one host (:meth:`Netfilter.traverse`). Immutable.

    ``packet`` is the packet as it leaves (or is delivered), after NAT; ``verdict`` is
    ``ACCEPT``, ``DROP`` or ``REJECT``; ``delivery`` is ``local`` (INPUT), ``forward`` or
    ``out`` (left the host), or None when dropped; ``hooks`` the hooks run in order;
    ``masquerade`` whether the masquerade mark was set or a source NAT applied;
    ``dnat``/``snat`` the ``(address, port)`` the destination/source was rewritten to;
    ``ctstate`` the conntrack state; ``records`` the trace (built on first access);
    ``visited`` the number of rules examined; ``skb`` carries the connection for a
    follow-up hook call (None when dropped)."""

    __slots__ = (
        "_ctinfo",
        "_raw",
        "_records",
        "ctstate",
        "delivery",
        "dnat",
        "hooks",
        "masquerade",
        "packet",
        "reject_with",
        "snat",
        "verdict",
        "visited",
    )

    def __init__(
        self,
        packet: Packet,
        verdict: str,
        reject_with: str | None,
        delivery: str | None,
        hooks: tuple[str, ...],
        masquerade: bool,
        dnat: tuple[IPAddress, int] | None,
        snat: tuple[IPAddress, int] | None,
        ctstate: str,
        raw: RawTrace | None,
        visited: int,
        ctinfo: tuple[object, int, bool, bool, int] | None,
    ) -> None:
        self.packet = packet
        self.verdict = verdict
        self.reject_with = reject_with
        self.delivery = delivery
        self.hooks = hooks
        self.masquerade = masquerade
        self.dnat = dnat
        self.snat = snat
        self.ctstate = ctstate
        self._raw = raw
        self._records: tuple[TraceRecord, ...] | None = None
        self.visited = visited
        self._ctinfo = ctinfo

    @property
    def skb(self) -> Skb | None:
        """The packet with its connection, for a follow-up :meth:`Netfilter.run_hook`."""
        if self._ctinfo is None:
            return None
        conn, direction, untracked, nftrace, priority = self._ctinfo
        return Skb(
            self.packet,
            conn,
            direction,
            self.ctstate,
            untracked,
            self.masquerade,
            nftrace,
            priority,
        )

    @property
    def records(self) -> tuple[TraceRecord, ...]:
        if self._records is None:
            self._records = materialize(self._raw)
            self._raw = None
        return self._records

    def __repr__(self) -> str:
        return (
            f"Traversal({self.packet.summary()}, {self.verdict}, delivery={self.delivery}, "
            f"dnat={self.dnat}, masquerade={self.masquerade})"
        )


# --------------------------------------------------------------------------- the host


class Provider(Protocol):
    """What the engine asks of a collaborator that hooks into netfilter next to the
    iptables tables: the nftables engine (:class:`~.nft.NftEngine`) and IPVS
    (:class:`~.ipvs.IpvsEngine`)."""

    def stages(self, nf: Netfilter) -> list[tuple[str, int, str, Stage]]:
        """Its stages as ``(hook, priority, name, stage)``."""
        ...

    def nat_chains(self, nf: Netfilter, hook: str) -> list[Stage]:
        """Its chains for the nat stage of ``hook``, in priority order."""
        ...

    def snapshot(self) -> object:
        """A copy of its mutable memory, for :meth:`restore`."""
        ...

    def restore(self, state: Any) -> None:
        """Go back to a :meth:`snapshot`'s state (copied: it can be restored twice)."""
        ...


def _hook_runner(hook: str, stages: list[Stage]) -> Callable[[Work, RawTrace | None], int]:
    """A function that runs ``stages`` one after the other (generated: no loop)."""
    lines = [
        "def run(w, rec, MARK=MARK, " + "".join(f"s{i}=s{i}, " for i in range(len(stages))) + "):",
        f"    w.hook = {hook!r}",
        "    w.reject_with = ''",
        "    if rec is not None: rec.append(MARK)",
    ]
    if hook == "FORWARD":
        # ip_forward() sets skb->priority from the TOS before the hook:
        # rt_tos2priority(0) is 0, and svclab's packets carry TOS 0
        lines.append("    w.priority = 0")
    for i in range(len(stages)):
        lines += [f"    v = s{i}(w, rec)", "    if v >= 2: return v"]
    lines.append("    return 1")
    env: dict[str, object] = {"MARK": _HOOK_MARKS[hook]}
    env.update({f"s{i}": st for i, st in enumerate(stages)})
    exec("\n".join(lines), env)
    fn: Callable[[Work, RawTrace | None], int] = env["run"]  # type: ignore[assignment]
    return fn


class Netfilter:
    """One host's netfilter: iptables rules, optional nftables/IPVS, conntrack, the
    ``-m recent`` lists and counters.

    ``local_addrs`` are the host's addresses (``addrtype LOCAL``, local delivery);
    ``iface_addrs`` the addresses per interface (MASQUERADE's source, ``--limit-iface``);
    ``ipsets`` the sets ``-m set`` refers to; ``rng`` seeds the random decisions;
    ``clock`` drives conntrack and ``recent``; ``masq_mark`` is the bit reported as
    "masquerade mark set" (kube-proxy's 0x4000)."""

    def __init__(
        self,
        iptables: R.Ruleset | None = None,
        *,
        local_addrs: Iterable[IPAddress] = (),
        iface_addrs: Mapping[str, Sequence[IPAddress]] | None = None,
        ipsets: Mapping[str, IpSet] | None = None,
        nft: Provider | None = None,
        ipvs: Provider | None = None,
        conntrack: ConntrackTable | None = None,
        clock: Clock | None = None,
        rng: Random | None = None,
        linear: bool = False,
        masq_mark: int = 0x4000,
        trace: bool = True,
        compiled: CompiledRuleset | None = None,
    ) -> None:
        self.clock: Clock = clock or (conntrack.clock if conntrack else SimClock())
        self.conntrack = conntrack or ConntrackTable(self.clock)
        self.recent = RecentTable()
        self.counters: dict[str, int] = {}
        self.ipsets = dict(ipsets or {})
        self.chooser: Chooser = RandomChooser(rng or Random(0))
        self.masq_mark = masq_mark
        self.trace = trace
        self.linear = linear
        self.local_addrs = frozenset(addr_int(a) for a in local_addrs)
        self.iface_addrs: dict[str, frozenset[int]] = {
            k: frozenset(addr_int(a) for a in v) for k, v in (iface_addrs or {}).items()
        }
        self.iface_addr_list: dict[str, list[IPAddress]] = {
            k: list(v) for k, v in (iface_addrs or {}).items()
        }
        if compiled is None and iptables is not None:
            compiled = CompiledRuleset(iptables, sets=self.ipsets, linear=linear)
        self.compiled = compiled
        self.nft = nft
        self.ipvs = ipvs
        self._stages: dict[str, list[tuple[int, str, Stage]]] = {}
        self._runners: dict[str, Callable[[Work, RawTrace | None], int]] = {}
        self._spare: Work | None = None
        self._build_stages()

    # ---- stage plan

    def _build_stages(self) -> None:
        plan: dict[str, list[tuple[int, str, Stage]]] = {h: [] for h in HOOKS}
        cr = self.compiled
        prios = {"raw": -300, "mangle": -150, "filter": 0, "security": 50}
        for hook in HOOKS:
            if cr is not None:
                for table, prio in prios.items():
                    chain = cr.builtin(table, hook)
                    if chain is not None:
                        plan[hook].append((prio, f"iptables {table}", chain.fn))
            if hook in ("PREROUTING", "OUTPUT"):
                plan[hook].append((-200, "conntrack", self._conntrack_in))
            if hook != "FORWARD":
                manip = "DST" if hook in ("PREROUTING", "OUTPUT") else "SRC"
                plan[hook].append(
                    (-100 if manip == "DST" else 100, "nat", nat_stage(self, hook, manip))
                )
            if hook in ("INPUT", "POSTROUTING"):
                plan[hook].append((2**31 - 1, "confirm", self._confirm))
        for hook, prio, name, stage in self._extra_stages():
            plan[hook].append((prio, name, stage))
        for hook in HOOKS:
            plan[hook].sort(key=lambda s: s[0])
        self._stages = plan
        self._runners = {h: _hook_runner(h, [st for _, _, st in plan[h]]) for h in HOOKS}

    def _extra_stages(self) -> list[tuple[str, int, str, Stage]]:
        out: list[tuple[str, int, str, Stage]] = []
        for provider in (self.nft, self.ipvs):
            if provider is not None:
                out.extend(provider.stages(self))
        return out

    def nat_chains(self, hook: str) -> list[Stage]:
        """The nat chains of ``hook`` in the order the nat stage consults them: the
        iptables nat table's built-in chain, then the nftables ``type nat`` chains."""
        chains: list[Stage] = []
        cr = self.compiled
        if cr is not None:
            chain = cr.builtin("nat", hook)
            if chain is not None:
                chains.append(chain.fn)
        if self.nft is not None:
            chains.extend(self.nft.nat_chains(self, hook))
        return chains

    # ---- what NAT asks the host

    def masq_source(self, w: Work) -> IPAddress | None:
        """MASQUERADE's source address for the packet in ``w``: the first address of its
        family on the output interface, else (an interface without addresses, as
        Calico's ``cali`` veths are) the first non-loopback address of the interfaces in
        their order, as ``inet_select_addr`` walks the namespace's devices, else the
        first non-loopback local address (None: nothing to masquerade to). A host that
        routes overrides it."""
        want6 = bool(w.src & (1 << 128))
        for a in self.iface_addr_list.get(w.oif, ()):
            if (a.version == 6) == want6:
                return a
        for addrs in self.iface_addr_list.values():
            for a in addrs:
                if (a.version == 6) == want6 and not a.is_loopback:
                    return a
        for v in sorted(self.local_addrs):
            a = int_addr(v)
            if (a.version == 6) == want6 and not a.is_loopback:
                return a
        return None

    # ---- conntrack and nat stages

    def _conntrack_in(self, w: Work, rec: RawTrace | None) -> int:
        if w.ct is not None or w.ctname:
            return CONTINUE
        if w.untracked:
            w.ctbits, w.ctname = ST_UNTRACKED, "UNTRACKED"
            return CONTINUE
        proto = w.proto
        icmp = proto in ("icmp", "ipv6-icmp")
        # make_tuple, inlined
        if icmp:
            t = _new_tuple(CtTuple, (proto, w.src, w.dst, w.icmp_id, w.icmp_id))
        else:
            t = _new_tuple(CtTuple, (proto, w.src, w.dst, w.sport, w.dport))
        inner = None
        if icmp and w.inner is not None:
            p: Packet = w.inner
            ip_ = p.icmp_id if p.proto in ("icmp", "ipv6-icmp") else None
            inner = CtTuple(
                p.proto,
                addr_int(p.src),
                addr_int(p.dst),
                p.sport if ip_ is None else ip_,
                p.dport if ip_ is None else ip_,
            )
        tmpl = w.ctzone
        if tmpl is not None and tmpl.zoned:
            # CT --zone: the packet's connection is looked up (and made) in that zone,
            # per direction (nf_ct_zone_tmpl; ``mark``: the mark as conntrack sees it)
            zid = w.mark & 0xFFFF if tmpl.by_mark else tmpl.zone
            dirs = tmpl.zone_dirs
            zone = (zid if dirs & R.ZONE_ORIG else 0, zid if dirs & R.ZONE_REPLY else 0)
            ps = self.conntrack.classify(t, w.flags, w.itype, inner, commit=w.commit, zone=zone)
        else:
            ps = self.conntrack.classify(t, w.flags, w.itype, inner, commit=w.commit)
        w.ct = ps.conn
        w.ctdir = ps.direction
        w.ctname = ps.state
        w.ctbits = STATE_BITS[ps.state]
        if rec is not None:
            rec.append(("S", ps.state, True, ps.direction, w.mark))
        return CONTINUE

    def _confirm(self, w: Work, rec: RawTrace | None) -> int:
        ct = w.ct
        if ct is None or ct.status & CONFIRMED or not w.commit or w.ctdir == REPLY:
            # __nf_conntrack_confirm: only a packet of the original direction inserts
            # (an error attached in the reply direction to an unconfirmed connection
            # leaves it out of the table)
            return CONTINUE
        if not self.conntrack.confirm(ct):
            if rec is not None:
                rec.append(("C", False, w.mark))
            return DROP
        if rec is not None:
            rec.append(("C", True, w.mark))
        return CONTINUE

    # ---- running hooks

    def _work(
        self,
        p: Packet,
        skb: Skb | None,
        chooser: Chooser | None,
        commit: bool,
        phys_in: str = "",
        phys_out: str = "",
        smac: str = "",
    ) -> Work:
        """A working context for one packet (recycled: the engine is not re-entrant per
        host, and a nested call simply gets a fresh one); ``phys_in``/``phys_out`` are
        its bridge ports (either one given: the packet is bridged), ``smac`` its source
        MAC address in lower case."""
        w = self._spare
        if w is None:
            w = self._new_work()
        else:
            self._spare = None
        _load(w, p, skb)
        w.chooser = chooser or self.chooser
        w.commit = commit
        w.now = self.clock.now()
        w.visited = 0
        w.reject_with = ""
        w.phys_in = phys_in
        w.phys_out = phys_out
        w.bridged = bool(phys_in or phys_out)
        w.smac = smac
        return w

    def _new_work(self) -> Work:
        """A working context bound to this host's tables (addresses, recent lists, sets,
        counters, masquerade mark)."""
        w = Work()
        w.locals = self.local_addrs
        w.iface_addrs = self.iface_addrs
        w.recent = self.recent
        w.sets = self.ipsets
        w.counters = self.counters
        w.masq_bit = self.masq_mark
        w.host = self
        return w

    def _release(self, w: Work) -> None:
        """Keep ``w`` as the spare, without the connection, inner packet, skb and chooser
        of its last use."""
        w.ct = None
        w.inner = None
        w.left_as = None
        w.chooser = self.chooser
        self._spare = w

    def _run(self, hook: str, w: Work, rec: RawTrace | None) -> int:
        """Run one hook's stages in priority order; the first DROP/REJECT/STOLEN ends it."""
        return self._runners[hook](w, rec)

    def run_hook(
        self,
        hook: str,
        skb: Skb | Packet,
        *,
        in_iface: str | None = None,
        out_iface: str | None = None,
        chooser: Chooser | None = None,
        commit: bool = True,
        physdev_in: str | None = None,
        physdev_out: str | None = None,
        src_mac: str | None = None,
    ) -> HookResult:
        """Run one hook (``PREROUTING``, ``INPUT``, ``FORWARD``, ``OUTPUT``,
        ``POSTROUTING``) on a packet, for a packet walk that routes between hooks itself.
        Pass the returned ``skb`` to the next hook; pass a bare Packet only to the first
        hook of a path. ``commit`` False evaluates without changing any state.

        ``physdev_in``/``physdev_out`` name the bridge ports of a bridged packet
        (``-m physdev``; giving either marks the packet as bridged) and ``src_mac`` its
        source MAC address (``-m mac``)."""
        runner = self._runners.get(hook)
        if runner is None:
            raise ValueError(f"unknown hook {hook!r}")
        attached: Skb | None
        if isinstance(skb, Packet):
            pkt, attached = skb, None
        else:
            pkt, attached = skb.packet, skb
        state = attached.state if attached is not None else ""
        w = self._work(
            pkt,
            attached,
            chooser,
            commit,
            physdev_in or "",
            physdev_out or "",
            src_mac.lower() if src_mac else "",
        )
        w.iif = in_iface or ""
        w.oif = out_iface or ""
        if self.trace:
            rec: RawTrace | None = []
            if state:
                rec.append(("S", state, False, skb.direction, w.mark))  # type: ignore[union-attr]
            v = runner(w, rec)
            records = materialize(rec)
        else:
            v = runner(w, None)
            records = ()
        out = None
        if v in (ACCEPT, STOLEN):
            out = _skb_after(w, _rebuild(pkt, w))
        # tuple.__new__ directly: the named tuple's own __new__ is a Python-level call
        result: HookResult = _new_tuple(
            HookResult, (out, VERDICT_NAMES[v], w.reject_with or None, records, w.visited)
        )
        self._release(w)
        return result

    def run_quick(
        self,
        hook: str,
        pkt: Packet,
        prev: Skb | None,
        in_iface: str | None,
        out_iface: str | None,
        chooser: Chooser | None,
        physdev_in: str | None,
        physdev_out: str | None,
    ) -> tuple[int, Skb | None, str | None]:
        """:meth:`run_hook` without trace records, for the packet walk's fast path:
        ``pkt`` with the conntrack attachment of ``prev`` (the previous hook's skb, None at
        a packet's first hook), committing, no source MAC. Returns the verdict code, the
        skb after the hook (None when dropped) and the REJECT answer type. Same effects as
        ``run_hook(hook, Skb(pkt, prev...) or pkt, ...)`` with ``trace`` off; positional
        (20 calls per connection on the full path), setting the per-hook fields itself
        and the packet's (:func:`_load`) only when they are not carried (below).

        The per-packet state is carried from one hook to the next: when ``prev`` is the
        skb the previous call returned and ``pkt`` its packet (the walk changed nothing
        in between), the recycled :class:`Work` still holds exactly what filling it from
        them would write, so only the per-hook fields are set. And a hook that changes
        neither the packet nor the conntrack attachment returns ``prev`` itself (skbs
        are immutable: no copy is needed)."""
        w = self._spare
        if w is not None and w.left_as is prev and prev is not None and pkt is prev.packet:
            self._spare = None
            w.psrc = w.src  # the addresses ``pkt`` has (the previous hook's NAT included)
            w.pdst = w.dst
        else:
            if w is None:
                w = self._new_work()
            else:
                self._spare = None
            _load(w, pkt, prev)
            w.commit = True
            w.smac = ""
        # the per-hook fields (``hook`` and ``reject_with`` are the runner's)
        w.chooser = chooser or self.chooser
        w.now = self.clock.now()
        w.visited = 0
        w.phys_in = physdev_in = physdev_in or ""
        w.phys_out = physdev_out = physdev_out or ""
        w.bridged = bool(physdev_in or physdev_out)
        w.iif = in_iface or ""
        w.oif = out_iface or ""
        v = self._runners[hook](w, None)
        out = None
        if v in (ACCEPT, STOLEN):
            if (  # _rebuild's test, inlined: did the hook change the packet?
                w.src == w.psrc
                and w.dst == w.pdst
                and w.sport == pkt.sport
                and w.dport == pkt.dport
                and w.mark == pkt.mark
                and w.icmp_id == pkt.icmp_id
                and w.inner is pkt.inner
            ):
                if (
                    prev is not None
                    and prev.packet is pkt
                    and prev.conn is w.ct
                    and prev.state == w.ctname
                    and prev.direction == w.ctdir
                    and prev.untracked == w.untracked
                    and prev.masq == w.masq_seen
                    and prev.nftrace == w.nftrace
                    and prev.priority == w.priority
                ):
                    out = prev
                else:
                    out = _skb_after(w, pkt)
            else:
                out = _skb_after(w, _rebuild(pkt, w))
        reject_with = w.reject_with or None
        # kept as the spare with its state, which is ``out``'s (see above)
        w.left_as = out
        w.chooser = self.chooser
        self._spare = w
        return v, out, reject_with

    def traverse(
        self,
        packet: Packet | Skb,
        *,
        origin: str = "in",
        in_iface: str | None = None,
        out_iface: str | None = None,
        route: Callable[[Packet], str | None] | None = None,
        chooser: Chooser | None = None,
        commit: bool = True,
    ) -> Traversal:
        """Walk a packet through this host.

        ``origin`` ``"in"``: it arrives on ``in_iface`` (PREROUTING first);
        ``"out"``: the host sends it (OUTPUT first). ``route(packet)`` returns the
        outgoing interface, or None for local delivery; by default a destination in
        ``local_addrs`` is local and anything else leaves through ``out_iface``
        (``eth0`` if not given)."""
        if isinstance(packet, Skb):
            skb: Skb | None = packet
            pkt = packet.packet
        else:
            skb, pkt = None, packet
        w = self._work(pkt, skb, chooser, commit)
        rec: RawTrace | None = [] if self.trace else None
        odst, odport, osrc, osport = w.dst, w.dport, w.src, w.sport
        default_out = out_iface or "eth0"
        local = self.local_addrs
        runners = self._runners
        hooks: tuple[str, ...]

        delivery: str | None = None
        if origin == "in":
            iif = in_iface or "eth0"
            w.iif, w.oif = iif, ""
            v = runners["PREROUTING"](w, rec)
            hooks = _PATH_PRE
            if v == ACCEPT:
                oif = (
                    (None if w.dst in local else default_out)
                    if route is None
                    else route(_rebuild(pkt, w))
                )
                if oif is None:
                    v = runners["INPUT"](w, rec)
                    hooks = _PATH_IN
                    delivery = "local" if v == ACCEPT else None
                    if v == STOLEN:  # IPVS forwards it: out through OUTPUT, POSTROUTING
                        oif = _where(route, pkt, w, local, default_out) or default_out
                        w.iif, w.oif = "", oif
                        v = runners["OUTPUT"](w, rec)
                        hooks = _PATH_IPVS[:3]
                        if v == ACCEPT:
                            v = runners["POSTROUTING"](w, rec)
                            hooks = _PATH_IPVS
                        delivery = "forward" if v == ACCEPT else None
                else:
                    w.oif = oif
                    v = runners["FORWARD"](w, rec)
                    hooks = _PATH_FWD[:2]
                    if v == ACCEPT:
                        w.iif = ""
                        v = runners["POSTROUTING"](w, rec)
                        hooks = _PATH_FWD
                    delivery = "forward" if v == ACCEPT else None
        elif origin == "out":
            oif = _where(route, pkt, w, local, default_out)
            w.iif, w.oif = "", oif or "lo"
            v = runners["OUTPUT"](w, rec)
            hooks = _PATH_OUT[:1]
            if v == ACCEPT:
                oif = _where(route, pkt, w, local, default_out)
                w.oif = oif or "lo"
                v = runners["POSTROUTING"](w, rec)
                hooks = _PATH_OUT[:2]
                if v == ACCEPT and oif is None:
                    w.iif, w.oif = "lo", ""
                    v = runners["PREROUTING"](w, rec)
                    hooks = _PATH_OUT[:3]
                    if v == ACCEPT:
                        v = runners["INPUT"](w, rec)
                        hooks = _PATH_OUT
                delivery = ("local" if oif is None else "out") if v == ACCEPT else None
        else:
            self._release(w)
            raise ValueError(f"origin must be 'in' or 'out', not {origin!r}")
        final = _rebuild(pkt, w)
        if rec is not None and skb is not None and skb.state:
            rec.insert(0, ("S", skb.state, False, skb.direction, 0))
        dnat = snat = None
        if w.ctdir == 0:
            if w.dst != odst or w.dport != odport:
                dnat = (final.dst, w.dport)
            if w.src != osrc or w.sport != osport:
                snat = (final.src, w.sport)
        t = Traversal(
            final,
            VERDICT_NAMES[v],
            w.reject_with or None,
            delivery,
            hooks,
            w.masq_seen,
            dnat,
            snat,
            w.ctname,
            rec,
            w.visited,
            (w.ct, w.ctdir, w.untracked, w.nftrace, w.priority) if v == ACCEPT else None,
        )
        self._release(w)
        return t

    def enumerate(
        self,
        packet: Packet,
        *,
        origin: str = "in",
        in_iface: str | None = None,
        out_iface: str | None = None,
        route: Callable[[Packet], str | None] | None = None,
        limit: int = 100_000,
    ) -> list[Branch[Traversal]]:
        """``--all``: every reachable traversal of ``packet`` with its probability,
        following both outcomes of each random decision (nothing is committed)."""

        def once(ex: Explorer) -> Traversal:
            return self.traverse(
                packet,
                origin=origin,
                in_iface=in_iface,
                out_iface=out_iface,
                route=route,
                chooser=ex,
                commit=False,
            )

        return explore(once, limit=limit)

    def snapshot(self) -> tuple[ConntrackTable, RecentTable, dict[str, int], object]:
        """Copies of the mutable state (for exploring and then restoring): conntrack,
        ``recent`` lists, counters, and the providers' memory as a pair — the nftables
        sets' dynamic elements (affinity) and the IPVS schedulers' positions and
        persistence templates (None for a provider this host does not have)."""
        nft = self.nft.snapshot() if self.nft is not None else None
        ipvs = self.ipvs.snapshot() if self.ipvs is not None else None
        return self.conntrack.copy(), self.recent.copy(), dict(self.counters), (nft, ipvs)

    def restore(self, state: tuple[ConntrackTable, RecentTable, dict[str, int], object]) -> None:
        """Go back to a :meth:`snapshot`. The conntrack table, ``recent`` lists and
        counters of ``state`` are taken over (copy them first to restore twice); the
        providers' memory is copied."""
        self.conntrack, self.recent, self.counters, providers = state
        nft, ipvs = cast(tuple[object, object], providers)
        if self.nft is not None and nft is not None:
            self.nft.restore(nft)
        if self.ipvs is not None and ipvs is not None:
            self.ipvs.restore(ipvs)
        self._spare = None  # a recycled Work would keep the old recent lists and counters


_new_tuple = tuple.__new__
_ADDRS: dict[int, IPAddress] = {}


def _where(
    route: Callable[[Packet], str | None] | None,
    pkt: Packet,
    w: Work,
    local: frozenset[int],
    default_out: str,
) -> str | None:
    """:meth:`Netfilter.traverse`'s routing decision for the packet in ``w`` (a module
    function rather than a closure: no function object is made per traversal)."""
    if route is None:
        return None if w.dst in local else default_out
    return route(_rebuild(pkt, w))


def _addr(v: int) -> IPAddress:
    """The address object of an integer (cached: NAT targets repeat)."""
    a = _ADDRS.get(v)
    if a is None:
        if len(_ADDRS) > 100_000:
            _ADDRS.clear()
        a = _ADDRS[v] = IPv4Address(v) if v < (1 << 32) else int_addr(v)
    return a


def _load(w: Work, p: Packet, skb: Skb | None) -> None:
    """Fill ``w`` with packet ``p`` and the conntrack state ``skb`` carries (None: a
    packet at its first hook): the fields that stay until a hook changes them."""
    # addr_int, inlined for IPv4 (the integer the address object holds)
    a = p.src
    w.src = w.psrc = a._ip if a.__class__ is IPv4Address else addr_int(a)  # type: ignore[attr-defined]
    a = p.dst
    w.dst = w.pdst = a._ip if a.__class__ is IPv4Address else addr_int(a)  # type: ignore[attr-defined]
    w.proto = p.proto
    w.sport = p.sport
    w.dport = p.dport
    w.flags = p.flags
    w.itype = p.icmp_type
    w.icode = p.icmp_code
    w.icmp_id = p.icmp_id
    w.length = p.length
    w.ttl = p.ttl
    w.mark = p.mark
    w.inner = p.inner
    w.ctzone = None
    w.nftrace = skb.nftrace if skb is not None else False
    w.priority = skb.priority if skb is not None else 0
    if skb is not None and skb.state:
        w.ct = skb.conn  # type: ignore[assignment]
        w.ctdir = skb.direction
        w.ctname = skb.state
        w.ctbits = STATE_BITS[skb.state]
        w.masq_seen = skb.masq
        w.untracked = skb.untracked
    else:
        w.ct = None
        w.ctdir = 0
        w.ctname = ""
        w.ctbits = ST_INVALID
        w.masq_seen = skb.masq if skb is not None else False
        w.untracked = skb.untracked if skb is not None else False


def _skb_after(w: Work, p: Packet) -> Skb:
    """The skb a hook hands on: packet ``p`` with the conntrack state ``w`` ends with."""
    return Skb(p, w.ct, w.ctdir, w.ctname, w.untracked, w.masq_seen, w.nftrace, w.priority)


def _rebuild(p: Packet, w: Work) -> Packet:
    """The packet with the fields NAT and MARK may have changed (a new value; the
    dataclass constructor is called directly, ``replace`` is much slower)."""
    src = w.src
    dst = w.dst
    psrc = w.psrc
    pdst = w.pdst
    if (
        src == psrc
        and dst == pdst
        and w.sport == p.sport
        and w.dport == p.dport
        and w.mark == p.mark
        and w.icmp_id == p.icmp_id
        and w.inner is p.inner
    ):
        return p
    return Packet(
        p.src if src == psrc else _addr(src),
        p.dst if dst == pdst else _addr(dst),
        p.proto,
        w.sport,
        w.dport,
        p.ttl,
        p.length,
        p.flags,
        p.icmp_type,
        p.icmp_code,
        w.icmp_id,
        p.payload,
        w.mark,
        w.inner,
        p.df,
    )
