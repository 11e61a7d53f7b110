"""The iptables rule model: typed, frozen values produced by :mod:`.parse`.

A :class:`Ruleset` holds one address family's tables (``raw``, ``mangle``, ``nat``,
``filter``); a :class:`Table` holds chains in declaration order; a :class:`Chain` holds
:class:`Rule` values. A rule is a tuple of matches (the generic ``-s/-d/-i/-o/-p`` ones
first, because the kernel checks them before any ``-m`` match, then the ``-m`` matches
in the order written) and at most one target.

Addresses are stored as networks (``-s 10.0.0.1`` is ``10.0.0.1/32``); ports as
inclusive ``(lo, hi)`` ranges; marks as ``(value, mask)``. Every match carries ``invert``
for ``!``. The rule keeps its exact text (``spec``) so that a dump round-trips and a
trace can print the line the user wrote.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from netmodel.ip import IPAddress, IPNetwork

PortRange = tuple[int, int]

# --------------------------------------------------------------------------- matches


@dataclass(frozen=True, slots=True)
class AddrMatch:
    """``-s`` / ``-d``: the packet's source/destination is inside ``net``."""

    field: Literal["src", "dst"]
    net: IPNetwork
    invert: bool = False


@dataclass(frozen=True, slots=True)
class IfaceMatch:
    """``-i`` / ``-o``: interface name; a trailing ``+`` in iptables means prefix."""

    field: Literal["in", "out"]
    name: str
    prefix: bool = False
    invert: bool = False


@dataclass(frozen=True, slots=True)
class ProtoMatch:
    """``-p``: protocol name (``tcp``, ``udp``, ``icmp``, ``sctp``) or number as text."""

    proto: str
    invert: bool = False


@dataclass(frozen=True, slots=True)
class FragmentMatch:
    """``-f``: second and later fragments (svclab's packets are never fragments)."""

    invert: bool = False


@dataclass(frozen=True, slots=True)
class PortMatch:
    """``-m tcp|udp|sctp --sport/--dport [!] lo[:hi]``."""

    proto: str
    field: Literal["sport", "dport"]
    ports: PortRange
    invert: bool = False


@dataclass(frozen=True, slots=True)
class TcpFlagsMatch:
    """``--tcp-flags [!] MASK COMP`` (``--syn`` is ``SYN,RST,ACK,FIN SYN``)."""

    mask: frozenset[str]
    comp: frozenset[str]
    invert: bool = False


@dataclass(frozen=True, slots=True)
class MultiportMatch:
    """``-m multiport --dports/--sports/--ports [!] p1,p2:p3``."""

    field: Literal["sport", "dport", "either"]
    ports: tuple[PortRange, ...]
    invert: bool = False


AddrType = Literal[
    "UNSPEC",
    "UNICAST",
    "LOCAL",
    "BROADCAST",
    "ANYCAST",
    "MULTICAST",
    "BLACKHOLE",
    "UNREACHABLE",
    "PROHIBIT",
    "THROW",
    "NAT",
    "XRESOLVE",
]


@dataclass(frozen=True, slots=True)
class AddrTypeMatch:
    """``-m addrtype [!] --src-type T[,T] [!] --dst-type T[,T]``; an empty tuple means the
    side is not tested. ``limit_iface_in/out`` restrict LOCAL to the packet's interface."""

    src_types: tuple[str, ...] = ()
    src_invert: bool = False
    dst_types: tuple[str, ...] = ()
    dst_invert: bool = False
    limit_iface_in: bool = False
    limit_iface_out: bool = False


@dataclass(frozen=True, slots=True)
class CommentMatch:
    """``-m comment --comment TEXT``: always matches."""

    text: str


@dataclass(frozen=True, slots=True)
class StatisticMatch:
    """``-m statistic --mode random --probability P`` or ``--mode nth --every N
    [--packet P]``. ``threshold`` is what the kernel compares a 31-bit random number
    against: ``round(P * 2**31)``; the exact probability is ``threshold / 2**31``."""

    mode: Literal["random", "nth"]
    probability: float = 0.0
    threshold: int = 0
    every: int = 0
    packet: int = 0
    invert: bool = False

    @property
    def exact_probability(self) -> float:
        """Probability that the match (before ``!``) is true, as the kernel applies it."""
        if self.mode == "random":
            return self.threshold / 2**31
        return 1.0 / self.every


@dataclass(frozen=True, slots=True)
class RecentMatch:
    """``-m recent``: one of ``set``/``rcheck``/``update``/``remove`` on list ``name``."""

    command: Literal["set", "rcheck", "update", "remove"]
    name: str = "DEFAULT"
    seconds: int = 0
    hitcount: int = 0
    reap: bool = False
    rttl: bool = False
    side: Literal["src", "dst"] = "src"
    mask: int | None = None
    invert: bool = False


@dataclass(frozen=True, slots=True)
class MarkMatch:
    """``-m mark [!] --mark value[/mask]``."""

    value: int
    mask: int = 0xFFFFFFFF
    invert: bool = False


@dataclass(frozen=True, slots=True)
class ConnmarkMatch:
    """``-m connmark [!] --mark value[/mask]`` on the connection's mark."""

    value: int
    mask: int = 0xFFFFFFFF
    invert: bool = False


CT_STATES = ("INVALID", "NEW", "ESTABLISHED", "RELATED", "UNTRACKED", "SNAT", "DNAT")
CT_STATUSES = ("NONE", "EXPECTED", "SEEN_REPLY", "ASSURED", "CONFIRMED")


@dataclass(frozen=True, slots=True)
class CtAddrTest:
    """One ``--ctorigsrc`` / ``--ctorigdst`` / ``--ctreplsrc`` / ``--ctrepldst`` test."""

    field: Literal["orig_src", "orig_dst", "repl_src", "repl_dst"]
    net: IPNetwork
    invert: bool = False


@dataclass(frozen=True, slots=True)
class CtPortTest:
    """One ``--ctorigsrcport`` / ``--ctorigdstport`` / ``--ctreplsrcport`` /
    ``--ctrepldstport`` test."""

    field: Literal["orig_sport", "orig_dport", "repl_sport", "repl_dport"]
    ports: PortRange
    invert: bool = False


@dataclass(frozen=True, slots=True)
class ConntrackMatch:
    """``-m conntrack``: every option present must hold (each with its own ``!``).

    ``states`` may include the virtual SNAT/DNAT states (the connection has a source /
    destination NAT binding)."""

    states: tuple[str, ...] = ()
    states_invert: bool = False
    statuses: tuple[str, ...] = ()
    statuses_invert: bool = False
    proto: str | None = None
    proto_invert: bool = False
    addrs: tuple[CtAddrTest, ...] = ()
    ports: tuple[CtPortTest, ...] = ()
    direction: Literal["ORIGINAL", "REPLY"] | None = None
    direction_invert: bool = False


@dataclass(frozen=True, slots=True)
class StateMatch:
    """``-m state [!] --state S[,S]`` (the old name of ``--ctstate``)."""

    states: tuple[str, ...]
    invert: bool = False


@dataclass(frozen=True, slots=True)
class IcmpMatch:
    """``-m icmp [!] --icmp-type TYPE[/CODE]``; ``type`` None means ``any``."""

    type: int | None
    code: int | None = None
    invert: bool = False


@dataclass(frozen=True, slots=True)
class PhysdevMatch:
    """``-m physdev``: bridge port names and bridged-ness (basic)."""

    physdev_in: str | None = None
    physdev_in_invert: bool = False
    physdev_out: str | None = None
    physdev_out_invert: bool = False
    is_in: bool | None = None
    is_out: bool | None = None
    is_bridged: bool | None = None


@dataclass(frozen=True, slots=True)
class SetMatch:
    """``-m set [!] --match-set NAME src|dst[,src|dst...]`` against an ipset."""

    name: str
    flags: tuple[Literal["src", "dst"], ...]
    invert: bool = False


@dataclass(frozen=True, slots=True)
class NfacctMatch:
    """``-m nfacct --nfacct-name NAME``: always matches, counts the packet."""

    name: str


@dataclass(frozen=True, slots=True)
class LimitMatch:
    """``-m limit --limit RATE --limit-burst N``: a token bucket on the simulated clock,
    as the kernel's xt_limit keeps it per rule: it holds up to ``burst`` packets, starts
    full, refills at ``per_second``; a packet matches when it can take a token."""

    rate: str = "3/hour"
    burst: int = 5
    per_second: float = 3 / 3600


@dataclass(frozen=True, slots=True)
class MacMatch:
    """``-m mac [!] --mac-source XX:XX:XX:XX:XX:XX`` (lower case)."""

    mac: str
    invert: bool = False


@dataclass(frozen=True, slots=True)
class IpRangeMatch:
    """``-m iprange [!] --src-range a-b [!] --dst-range a-b``."""

    src: tuple[IPAddress, IPAddress] | None = None
    src_invert: bool = False
    dst: tuple[IPAddress, IPAddress] | None = None
    dst_invert: bool = False


@dataclass(frozen=True, slots=True)
class LengthMatch:
    """``-m length [!] --length lo[:hi]`` (IP total length)."""

    lo: int
    hi: int
    invert: bool = False


@dataclass(frozen=True, slots=True)
class TtlMatch:
    """``-m ttl --ttl-eq|--ttl-lt|--ttl-gt N`` (``! --ttl-eq`` negates)."""

    op: Literal["eq", "lt", "gt"]
    value: int
    invert: bool = False


Match = (
    AddrMatch
    | IfaceMatch
    | ProtoMatch
    | FragmentMatch
    | PortMatch
    | TcpFlagsMatch
    | MultiportMatch
    | AddrTypeMatch
    | CommentMatch
    | StatisticMatch
    | RecentMatch
    | MarkMatch
    | ConnmarkMatch
    | ConntrackMatch
    | StateMatch
    | IcmpMatch
    | PhysdevMatch
    | SetMatch
    | NfacctMatch
    | LimitMatch
    | MacMatch
    | IpRangeMatch
    | LengthMatch
    | TtlMatch
)

# --------------------------------------------------------------------------- targets


@dataclass(frozen=True, slots=True)
class Verdict:
    """``ACCEPT``, ``DROP`` or ``RETURN``."""

    name: Literal["ACCEPT", "DROP", "RETURN"]


@dataclass(frozen=True, slots=True)
class Reject:
    """``REJECT [--reject-with TYPE]`` (default ``icmp-port-unreachable``)."""

    reject_with: str = "icmp-port-unreachable"


@dataclass(frozen=True, slots=True)
class Jump:
    """``-j CHAIN`` (``goto`` False) or ``-g CHAIN`` (``goto`` True)."""

    chain: str
    goto: bool = False


@dataclass(frozen=True, slots=True)
class NatRange:
    """``addr[-addr][:port[-port]]``; an absent part is None."""

    addr_lo: IPAddress | None = None
    addr_hi: IPAddress | None = None
    port_lo: int | None = None
    port_hi: int | None = None

    def __str__(self) -> str:
        text = ""
        if self.addr_lo is not None:
            text = str(self.addr_lo)
            if self.addr_hi is not None and self.addr_hi != self.addr_lo:
                text += f"-{self.addr_hi}"
            if self.addr_lo.version == 6 and self.port_lo is not None:
                text = f"[{text}]"
        if self.port_lo is not None:
            text += f":{self.port_lo}"
            if self.port_hi is not None and self.port_hi != self.port_lo:
                text += f"-{self.port_hi}"
        return text


@dataclass(frozen=True, slots=True)
class Dnat:
    """``DNAT --to-destination RANGE [--random] [--persistent]``."""

    ranges: tuple[NatRange, ...]
    random: bool = False
    persistent: bool = False


@dataclass(frozen=True, slots=True)
class Snat:
    """``SNAT --to-source RANGE [--random] [--random-fully] [--persistent]``."""

    ranges: tuple[NatRange, ...]
    random: bool = False
    random_fully: bool = False
    persistent: bool = False


@dataclass(frozen=True, slots=True)
class Masquerade:
    """``MASQUERADE [--to-ports lo[-hi]] [--random] [--random-fully]``."""

    ports: PortRange | None = None
    random: bool = False
    random_fully: bool = False


@dataclass(frozen=True, slots=True)
class SetMark:
    """``MARK``: every form normalised to the kernel's xmark:
    ``mark = (mark & ~mask) ^ value``. ``op`` keeps the spelling for display."""

    value: int
    mask: int
    op: str = "set-xmark"


@dataclass(frozen=True, slots=True)
class Connmark:
    """``CONNMARK``: ``set`` (xmark on the connection mark with ``value``/``mask``),
    ``save`` (ctmark = (ctmark & ~ctmask) ^ (mark & nfmask)) or ``restore``
    (mark = (mark & ~nfmask) ^ (ctmark & ctmask))."""

    mode: Literal["set", "save", "restore"]
    value: int = 0
    mask: int = 0xFFFFFFFF
    nfmask: int = 0xFFFFFFFF
    ctmask: int = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Log:
    """``LOG`` / ``NFLOG`` (and ``CHECKSUM --checksum-fill``, which changes nothing a
    path depends on): non-terminating; the trace carries the prefix."""

    kind: Literal["LOG", "NFLOG", "CHECKSUM"] = "LOG"
    prefix: str = ""
    level: str = ""
    group: int = 0


ZONE_ORIG = 1
ZONE_REPLY = 2
ZONE_BOTH = ZONE_ORIG | ZONE_REPLY


@dataclass(frozen=True, slots=True)
class Notrack:
    """The raw table's ``NOTRACK`` and ``CT`` targets. They attach a conntrack template
    to a packet that has none yet (the first one wins; the rule continues either way):
    ``notrack`` leaves the packet untracked; otherwise the template carries a conntrack
    zone: ``zone`` (or, ``by_mark``, the packet's mark & 0xffff when conntrack looks it
    up) for the directions in ``zone_dirs`` (:data:`ZONE_ORIG`, :data:`ZONE_REPLY`; the
    other direction is in zone 0)."""

    notrack: bool = True
    zone: int = 0
    zone_dirs: int = ZONE_BOTH
    by_mark: bool = False

    @property
    def zoned(self) -> bool:
        """Whether the template puts the packet's connection outside zone 0."""
        return not self.notrack and (self.by_mark or self.zone != 0)


@dataclass(frozen=True, slots=True)
class Trace:
    """``TRACE`` (raw table): non-terminating; svclab always traces."""


Target = (
    Verdict | Reject | Jump | Dnat | Snat | Masquerade | SetMark | Connmark | Log | Notrack | Trace
)

# --------------------------------------------------------------------------- structure


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule. ``spec`` is the text after ``-A CHAIN`` exactly as written; ``line`` is
    the 1-based line of the input it came from (0 if built in code)."""

    chain: str
    matches: tuple[Match, ...]
    target: Target | None
    spec: str
    line: int = 0
    counters: tuple[int, int] | None = None

    @property
    def text(self) -> str:
        """The rule as ``iptables-save`` prints it: ``-A CHAIN spec``."""
        return f"-A {self.chain} {self.spec}" if self.spec else f"-A {self.chain}"


BUILTIN_CHAINS: Mapping[str, tuple[str, ...]] = {
    "raw": ("PREROUTING", "OUTPUT"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}


@dataclass(frozen=True, slots=True)
class Chain:
    """A chain. ``policy`` is None for user chains. ``declared`` says whether the input
    named it (``:CHAIN`` or ``-N``); built-in chains a table always has are not."""

    name: str
    policy: str | None = None
    rules: tuple[Rule, ...] = ()
    counters: tuple[int, int] = (0, 0)
    declared: bool = True

    @property
    def builtin(self) -> bool:
        return self.policy is not None


@dataclass(frozen=True, slots=True)
class Table:
    """A table: its chains by name, in declaration order (built-in chains first).

    ``checked``: what the restore parser's COMMIT-time check learned of each chain (its
    jump targets and hook-restricted rules, keyed by the chain's rules), so that a later
    ``--noflush`` restore onto this table re-reads only the chains it changes; None for a
    table built any other way (then the whole table is checked). Opaque outside
    :mod:`.parse`, and no part of equality."""

    name: str
    chains: Mapping[str, Chain] = field(default_factory=dict)
    checked: Mapping[str, object] | None = field(default=None, compare=False, repr=False)

    def __iter__(self) -> Iterator[Chain]:
        return iter(self.chains.values())


@dataclass(frozen=True, slots=True)
class Ruleset:
    """One family's iptables state (``family`` 4 for iptables, 6 for ip6tables)."""

    tables: Mapping[str, Table] = field(default_factory=dict)
    family: int = 4

    def chain(self, table: str, chain: str) -> Chain | None:
        t = self.tables.get(table)
        return None if t is None else t.chains.get(chain)

    def rules(self) -> Iterator[tuple[str, Rule]]:
        """Every rule with its table name."""
        for t in self.tables.values():
            for c in t.chains.values():
                for r in c.rules:
                    yield t.name, r
