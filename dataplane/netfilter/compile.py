"""Compile rules into fast tests, and index big chains.

Each rule's matches become one Python expression over a :class:`Work` (the mutable
per-packet evaluation context), evaluated with short-circuit ``and`` in the kernel's
order: the generic ``-s/-d/-i/-o/-p`` tests first, then the ``-m`` matches as written.
The expression is built only from values svclab parsed itself (ints, quoted names), and
compiled once per ruleset with ``eval`` into a ``lambda w: ...``.

:class:`ChainIndex` narrows the first-match search without changing its result: every
rule gets a key ``(dst, proto, dport)`` with None for "any", derived only from tests that
run *before* any match with a side effect or a random draw (so skipping a rule whose key
cannot match skips nothing observable). A lookup merges, in rule order, the rules whose
key fits the packet; rules with jumps and side effects keep their order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from netmodel.errors import InputError

from . import rules as R
from .choice import Chooser, NthCounter, RandomChooser
from .conntrack import DST_NAT, SRC_NAT, STATUS_NAMES, Connection, addr_int
from .limit import TokenBucket

if TYPE_CHECKING:
    from .ipset import IpSet
    from .recent import RecentTable

__all__ = ["ChainIndex", "Work", "compile_test", "index_key"]

T = TypeVar("T")

_V6 = 1 << 128

# ctstate bits
ST_INVALID = 1
ST_NEW = 2
ST_ESTABLISHED = 4
ST_RELATED = 8
ST_UNTRACKED = 16
ST_SNAT = 32
ST_DNAT = 64
STATE_BITS = {
    "INVALID": ST_INVALID,
    "NEW": ST_NEW,
    "ESTABLISHED": ST_ESTABLISHED,
    "RELATED": ST_RELATED,
    "UNTRACKED": ST_UNTRACKED,
    "SNAT": ST_SNAT,
    "DNAT": ST_DNAT,
}


_NO_CHOOSER: Chooser = RandomChooser.__new__(RandomChooser)


class Work:
    """Everything a rule can look at while one packet crosses one host's netfilter.

    Addresses are integers (:func:`~.conntrack.addr_int`); ``iif``/``oif`` are ``""``
    when the hook has no such interface. Targets mutate it; the engine turns it back
    into a :class:`~netmodel.packet.Packet` when the hook ends."""

    __slots__ = (
        "bridged",
        "chooser",
        "commit",
        "counters",
        "ct",
        "ctbits",
        "ctdir",
        "ctname",
        "ctzone",
        "dport",
        "dst",
        "flags",
        "hook",
        "host",
        "icmp_id",
        "icode",
        "iface_addrs",
        "iif",
        "inner",
        "itype",
        "left_as",
        "length",
        "locals",
        "mark",
        "masq_bit",
        "masq_seen",
        "nftrace",
        "now",
        "oif",
        "pdst",
        "phys_in",
        "phys_out",
        "priority",
        "proto",
        "psrc",
        "recent",
        "reject_with",
        "sets",
        "smac",
        "sport",
        "src",
        "table",
        "ttl",
        "untracked",
        "visited",
    )

    def __init__(self) -> None:
        self.src = 0
        self.dst = 0
        self.psrc = 0  # the packet's addresses as it entered (to see what NAT changed)
        self.pdst = 0
        self.proto = "tcp"
        self.sport = 0
        self.dport = 0
        self.flags: frozenset[str] = frozenset()
        self.itype: int | None = None
        self.icode: int | None = None
        self.icmp_id = 0
        self.length = 60
        self.ttl = 64
        self.mark = 0
        # skb->nf_trace and skb->priority (nft ``meta nftrace set``, ``meta priority set``):
        # skb metadata that stays with the packet inside one host, like the mark
        self.nftrace = False
        self.priority = 0
        self.iif = ""
        self.oif = ""
        self.phys_in = ""
        self.phys_out = ""
        self.bridged = False
        self.smac = ""
        self.ct: Connection | None = None
        self.ctdir = 0
        self.ctbits = ST_INVALID
        self.ctname = ""
        # the CT target's conntrack template (zone), for the conntrack stage
        self.ctzone: R.Notrack | None = None
        self.untracked = False
        self.inner: Any = None
        self.hook = ""
        self.table = ""
        self.locals: frozenset[int] = frozenset()
        self.iface_addrs: Mapping[str, frozenset[int]] = {}
        self.chooser: Chooser = _NO_CHOOSER
        self.commit = True
        self.now = 0.0
        self.recent: RecentTable | None = None
        self.sets: Mapping[str, IpSet] = {}
        self.counters: dict[str, int] = {}
        self.visited = 0
        self.host: Any = None
        self.masq_bit = 0x4000
        self.masq_seen = False
        self.reject_with = ""
        # the skb the fast path (Netfilter.run_quick) last made from this state, while
        # the state is still exactly that skb's; None otherwise
        self.left_as: object = None


class Ns:
    """Names bound into generated code. Every constant is bound (never written as a
    literal), so that structurally equal rules generate equal source text and can share
    one compiled code object (see :mod:`.codegen`)."""

    def __init__(self, prefix: str = "_v") -> None:
        self.values: dict[str, object] = {}
        self.prefix = prefix

    def bind(self, value: object) -> str:
        name = f"{self.prefix}{len(self.values)}"
        self.values[name] = value
        return name

    lit = bind


def _net_expr(var: str, net: Any, invert: bool, ns: Ns) -> str:
    width = net.max_prefixlen
    base = ns.lit(addr_int(net.network_address))
    if net.prefixlen == width:
        return f"({var} {'!=' if invert else '=='} {base})"
    m = ((1 << width) - 1) ^ ((1 << (width - net.prefixlen)) - 1)
    if width == 128:
        m |= _V6
    return f"(({var} & {ns.lit(m)}) {'!=' if invert else '=='} {base})"


def _range_expr(var: str, lo: int, hi: int, invert: bool, ns: Ns) -> str:
    e = f"({var} == {ns.lit(lo)})" if lo == hi else f"({ns.lit(lo)} <= {var} <= {ns.lit(hi)})"
    return f"(not {e})" if invert else e


def _ports_expr(var: str, ports: tuple[R.PortRange, ...], ns: Ns) -> str:
    singles = sorted({lo for lo, hi in ports if lo == hi})
    ranges = [(lo, hi) for lo, hi in ports if lo != hi]
    parts = []
    if singles:
        parts.append(
            f"({var} in {ns.lit(frozenset(singles))})"
            if len(singles) > 1
            else f"({var} == {ns.lit(singles[0])})"
        )
    parts += [f"({ns.lit(lo)} <= {var} <= {ns.lit(hi)})" for lo, hi in ranges]
    return "(" + " or ".join(parts) + ")"


ADDRTYPE_UNICAST = "UNICAST"


def _addr_kind(addr: int, w: Work, iface: str | None) -> str:
    if iface is not None:
        local = addr in w.iface_addrs.get(iface, frozenset())
    else:
        local = addr in w.locals
    if local:
        return "LOCAL"
    if addr & _V6:
        a6 = addr & (_V6 - 1)
        if a6 >> 120 == 0xFF:
            return "MULTICAST"
        return "UNICAST"
    if addr >> 28 == 0xE:
        return "MULTICAST"
    if addr == 0xFFFFFFFF:
        return "BROADCAST"
    if addr == 0:
        return "UNSPEC"
    return "UNICAST"


def _make_addrtype(m: R.AddrTypeMatch) -> Callable[[Work], bool]:
    src_t = frozenset(m.src_types)
    dst_t = frozenset(m.dst_types)

    def test(w: Work) -> bool:
        if src_t:
            iface = w.iif if m.limit_iface_in else (w.oif if m.limit_iface_out else None)
            if (_addr_kind(w.src, w, iface) in src_t) == m.src_invert:
                return False
        if dst_t:
            iface = w.iif if m.limit_iface_in else (w.oif if m.limit_iface_out else None)
            if (_addr_kind(w.dst, w, iface) in dst_t) == m.dst_invert:
                return False
        return True

    return test


def ctstate_bits(w: Work) -> int:
    """The packet's ctstate bits including the virtual SNAT/DNAT ones."""
    bits = w.ctbits
    ct = w.ct
    if ct is not None:
        if ct.status & SRC_NAT:
            bits |= ST_SNAT
        if ct.status & DST_NAT:
            bits |= ST_DNAT
    return bits


def _make_conntrack(m: R.ConntrackMatch) -> Callable[[Work], bool]:
    state_mask = sum(STATE_BITS[s] for s in m.states)
    status_mask = sum(STATUS_NAMES.get(s, 0) for s in m.statuses)
    others = bool(m.statuses or m.proto or m.addrs or m.ports or m.direction)

    def test(w: Work) -> bool:
        if m.states and (not (ctstate_bits(w) & state_mask)) != m.states_invert:
            return False
        ct = w.ct
        if ct is None:
            return not others
        if m.statuses:
            ok = (ct.status & status_mask) != 0 if status_mask else ct.status == 0
            if ok == m.statuses_invert:
                return False
        if m.proto is not None and (ct.orig.proto == m.proto) == m.proto_invert:
            return False
        for a in m.addrs:
            t = ct.orig if a.field.startswith("orig") else ct.reply
            v = t.src if a.field.endswith("src") else t.dst
            net = a.net
            width = net.max_prefixlen
            mask = ((1 << width) - 1) ^ ((1 << (width - net.prefixlen)) - 1)
            if width == 128:
                mask |= _V6
            if ((v & mask) == addr_int(net.network_address)) == a.invert:
                return False
        for p in m.ports:
            t = ct.orig if p.field.startswith("orig") else ct.reply
            v = t.sport if p.field.endswith("sport") else t.dport
            if (p.ports[0] <= v <= p.ports[1]) == p.invert:
                return False
        if m.direction is not None:
            is_orig = w.ctdir == 0
            if (is_orig == (m.direction == "ORIGINAL")) == m.direction_invert:
                return False
        return True

    return test


def _make_set(m: R.SetMatch, sets: Mapping[str, IpSet]) -> Callable[[Work], bool]:
    s = sets.get(m.name)
    if s is None:
        raise InputError(f"-m set: no ipset named {m.name!r} was given to the engine")
    dims = s.dims
    flags = m.flags

    def test(w: Work) -> bool:
        if len(flags) < len(dims):
            return m.invert
        vals: list[object] = []
        for d, f in zip(dims, flags, strict=False):
            if d == "port":
                if w.proto not in ("tcp", "udp", "sctp"):
                    return m.invert
                vals.append((w.proto, w.sport if f == "src" else w.dport))
            else:
                vals.append(w.src if f == "src" else w.dst)
        return s.contains(tuple(vals)) != m.invert

    return test


def _ifname_match(want: str, have: str) -> bool:
    """An interface name against a pattern (``+`` at the end: prefix)."""
    return have.startswith(want[:-1]) if want.endswith("+") else have == want


def _make_physdev(m: R.PhysdevMatch) -> Callable[[Work], bool]:
    """``-m physdev`` as xt_physdev decides it. A packet with no bridge information
    (``w.bridged`` False: never crossed a bridge port under br_netfilter) matches only
    if every option given is negated. Otherwise ``--physdev-is-bridged`` means "has a
    bridge output port" (so only FORWARD/POSTROUTING of a bridged frame),
    ``--physdev-is-in``/``-out`` whether that port is known, ``--physdev-in NAME`` is
    not tested when no input port is known, and ``--physdev-out NAME`` never matches
    (negated or not) when no output port is known."""
    options = [
        (v is not None, inv)
        for v, inv in (
            (m.is_bridged, m.is_bridged is False),
            (m.is_in, m.is_in is False),
            (m.is_out, m.is_out is False),
            (m.physdev_in, m.physdev_in_invert),
            (m.physdev_out, m.physdev_out_invert),
        )
    ]
    unbridged = all(inv for given, inv in options if given)

    def test(w: Work) -> bool:
        if not w.bridged:
            return unbridged
        indev, outdev = w.phys_in, w.phys_out
        if m.is_bridged is not None and bool(outdev) != m.is_bridged:
            return False
        if m.is_in is not None and bool(indev) != m.is_in:
            return False
        if m.is_out is not None and bool(outdev) != m.is_out:
            return False
        if (
            m.physdev_in is not None
            and indev
            and (_ifname_match(m.physdev_in, indev) == m.physdev_in_invert)
        ):
            return False
        if m.physdev_out is not None:
            if not outdev:
                return False
            return _ifname_match(m.physdev_out, outdev) != m.physdev_out_invert
        return True

    return test


def match_expr(m: R.Match, ns: Ns, sets: Mapping[str, IpSet]) -> str | None:
    """One match as a Python expression over ``w`` (None: always true)."""
    if isinstance(m, R.AddrMatch):
        return _net_expr("w.src" if m.field == "src" else "w.dst", m.net, m.invert, ns)
    if isinstance(m, R.IfaceMatch):
        var = "w.iif" if m.field == "in" else "w.oif"
        e = f"{var}.startswith({ns.lit(m.name)})" if m.prefix else f"({var} == {ns.lit(m.name)})"
        return f"(not {e})" if m.invert else e
    if isinstance(m, R.ProtoMatch):
        return f"(w.proto {'!=' if m.invert else '=='} {ns.lit(m.proto)})"
    if isinstance(m, R.FragmentMatch):
        return "True" if m.invert else "False"
    if isinstance(m, R.PortMatch):
        return _range_expr(f"w.{m.field}", m.ports[0], m.ports[1], m.invert, ns)
    if isinstance(m, R.TcpFlagsMatch):
        mask = ns.bind(m.mask)
        comp = ns.bind(m.comp)
        return f"((w.flags & {mask}) {'!=' if m.invert else '=='} {comp})"
    if isinstance(m, R.MultiportMatch):
        if m.field == "either":
            e = f"({_ports_expr('w.sport', m.ports, ns)} or {_ports_expr('w.dport', m.ports, ns)})"
        else:
            e = _ports_expr(f"w.{m.field}", m.ports, ns)
        return f"(not {e})" if m.invert else e
    if isinstance(m, R.AddrTypeMatch):
        if (
            m.src_types in ((), ("LOCAL",))
            and m.dst_types in ((), ("LOCAL",))
            and not m.limit_iface_in
            and not m.limit_iface_out
        ):
            parts = []
            if m.src_types:
                parts.append(f"((w.src in w.locals) {'!=' if m.src_invert else '=='} True)")
            if m.dst_types:
                parts.append(f"((w.dst in w.locals) {'!=' if m.dst_invert else '=='} True)")
            return " and ".join(parts) if parts else None
        return f"{ns.bind(_make_addrtype(m))}(w)"
    if isinstance(m, R.CommentMatch):
        return None
    if isinstance(m, R.LimitMatch):
        return f"{ns.bind(TokenBucket(m.per_second, m.burst))}.take(w.now, w.commit)"
    if isinstance(m, R.StatisticMatch):
        if m.mode == "random":
            e = f"w.chooser.bernoulli({ns.lit(m.threshold)})"
        else:
            e = (
                f"w.chooser.nth({ns.bind(NthCounter())}, {ns.lit(m.every)}, {ns.lit(m.packet)}, "
                "w.commit)"
            )
        return f"(not {e})" if m.invert else e
    if isinstance(m, R.RecentMatch):
        var = "w.src" if m.side == "src" else "w.dst"
        return f"w.recent.match({ns.bind(m)}, {var}, w.ttl, w.now, w.commit)"
    if isinstance(m, R.MarkMatch):
        return f"((w.mark & {ns.lit(m.mask)}) {'!=' if m.invert else '=='} {ns.lit(m.value)})"
    if isinstance(m, R.ConnmarkMatch):
        return (
            f"(w.ct is not None and ((w.ct.mark & {ns.lit(m.mask)}) "
            f"{'!=' if m.invert else '=='} {ns.lit(m.value)}))"
        )
    if isinstance(m, R.ConntrackMatch):
        if m.states and not (m.statuses or m.proto or m.addrs or m.ports or m.direction):
            bits = sum(STATE_BITS[s] for s in m.states)
            if not bits & (ST_SNAT | ST_DNAT):
                return f"((w.ctbits & {ns.lit(bits)}) {'==' if m.states_invert else '!='} 0)"
        return f"{ns.bind(_make_conntrack(m))}(w)"
    if isinstance(m, R.StateMatch):
        bits = sum(STATE_BITS[s] for s in m.states)
        return f"((w.ctbits & {ns.lit(bits)}) {'==' if m.invert else '!='} 0)"
    if isinstance(m, R.IcmpMatch):
        if m.type is None:
            e = "True"
        elif m.code is None:
            e = f"(w.itype == {ns.lit(m.type)})"
        else:
            e = f"(w.itype == {ns.lit(m.type)} and w.icode == {ns.lit(m.code)})"
        return f"(not {e})" if m.invert else e
    if isinstance(m, R.PhysdevMatch):
        return f"{ns.bind(_make_physdev(m))}(w)"
    if isinstance(m, R.SetMatch):
        return f"{ns.bind(_make_set(m, sets))}(w)"
    if isinstance(m, R.NfacctMatch):
        return f"{ns.bind(_nfacct(m.name))}(w)"
    if isinstance(m, R.MacMatch):
        return f"(w.smac {'!=' if m.invert else '=='} {ns.lit(m.mac)})"
    if isinstance(m, R.IpRangeMatch):
        parts = []
        for rng, var, inv in ((m.src, "w.src", m.src_invert), (m.dst, "w.dst", m.dst_invert)):
            if rng is not None:
                parts.append(_range_expr(var, addr_int(rng[0]), addr_int(rng[1]), inv, ns))
        return " and ".join(parts) if parts else None
    if isinstance(m, R.LengthMatch):
        return _range_expr("w.length", m.lo, m.hi, m.invert, ns)
    if isinstance(m, R.TtlMatch):
        op = {"eq": "!=" if m.invert else "==", "lt": "<", "gt": ">"}[m.op]
        return f"(w.ttl {op} {ns.lit(m.value)})"
    raise TypeError(f"no compiler for {type(m).__name__}")  # pragma: no cover


def _nfacct(name: str) -> Callable[[Work], bool]:
    def count(w: Work) -> bool:
        if w.commit:
            w.counters[name] = w.counters.get(name, 0) + 1
        return True

    return count


def compile_test(
    rule: R.Rule, sets: Mapping[str, IpSet] | None = None
) -> Callable[[Work], bool] | None:
    """The rule's matches as one callable (None when the rule matches every packet)."""
    ns = Ns()
    parts = [e for e in (match_expr(m, ns, sets or {}) for m in rule.matches) if e is not None]
    if not parts:
        return None
    src = "lambda w: " + " and ".join(parts)
    env: dict[str, Any] = {"__builtins__": {}}
    env.update(ns.values)
    fn: Callable[[Work], bool] = eval(src, env)
    return fn


_EFFECTFUL = (R.StatisticMatch, R.RecentMatch, R.NfacctMatch, R.LimitMatch)

IndexKey = tuple[int | None, str | None, int | None]


def index_covers(rule: R.Rule) -> bool:
    """Whether a rule's matches say nothing beyond its :func:`index_key` (and comments):
    then an index hit needs no further test."""
    dst, proto, dport = index_key(rule)
    for m in rule.matches:
        if isinstance(m, R.CommentMatch):
            continue
        if (
            isinstance(m, R.AddrMatch)
            and m.field == "dst"
            and not m.invert
            and dst is not None
            and m.net.prefixlen == m.net.max_prefixlen
        ):
            continue
        if isinstance(m, R.ProtoMatch) and not m.invert and proto is not None:
            continue
        if (
            isinstance(m, R.PortMatch)
            and m.field == "dport"
            and not m.invert
            and dport is not None
            and m.ports == (dport, dport)
        ):
            continue
        return False
    return True


def index_key(rule: R.Rule) -> IndexKey:
    """``(dst, proto, dport)`` the rule requires, None where it accepts anything; only
    tests evaluated before any side effect or random draw count."""
    dst: int | None = None
    proto: str | None = None
    dport: int | None = None
    for m in rule.matches:
        if isinstance(m, _EFFECTFUL):
            break
        if isinstance(m, R.AddrMatch) and m.field == "dst" and not m.invert:
            if m.net.prefixlen == m.net.max_prefixlen:
                dst = addr_int(m.net.network_address)
        elif isinstance(m, R.ProtoMatch) and not m.invert:
            proto = m.proto
        elif (
            isinstance(m, R.PortMatch)
            and m.field == "dport"
            and not m.invert
            and m.ports[0] == m.ports[1]
        ):
            dport = m.ports[0]
    return (dst, proto, dport)


class ChainIndex(Generic[T]):
    """First-match candidates of a chain by ``(dst, proto, dport)``, in rule order:
    ``candidates`` returns the items (compiled rules) whose key fits the packet."""

    __slots__ = ("buckets", "cache", "items", "shapes", "wild")

    MAX_CACHE = 1 << 16

    def __init__(self, keys: list[IndexKey], items: list[T]) -> None:
        self.items = items
        self.wild: list[int] = []
        self.buckets: dict[tuple[bool, bool, bool], dict[IndexKey, list[int]]] = {}
        for i, k in enumerate(keys):
            if k == (None, None, None):
                self.wild.append(i)
                continue
            shape = (k[0] is not None, k[1] is not None, k[2] is not None)
            self.buckets.setdefault(shape, {}).setdefault(k, []).append(i)
        self.shapes = list(self.buckets.items())
        self.cache: dict[IndexKey, list[T]] = {}

    def candidates(self, dst: int, proto: str, dport: int) -> list[T]:
        key = (dst, proto, dport)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        found: list[int] = list(self.wild)
        for (sd, sp, so), bucket in self.shapes:
            lst = bucket.get((dst if sd else None, proto if sp else None, dport if so else None))
            if lst:
                found.extend(lst)
        found.sort()
        items = self.items
        out = [items[i] for i in found]
        if len(self.cache) >= self.MAX_CACHE:
            self.cache.clear()
        self.cache[key] = out
        return out
