"""Connection tracking for one host (one network namespace).

Contract:

* A connection has an *original* tuple (as its first packet was seen when it entered
  conntrack, before any NAT) and a *reply* tuple (what an answer looks like after NAT:
  DNAT rewrites the reply's source, SNAT/MASQUERADE its destination). Both tuples index
  the table, so a packet's direction is the tuple it matches.
* Tuples are ``(proto, src, dst, sport, dport)`` with addresses as integers (see
  :func:`addr_int`); ICMP query messages use the identifier as both ports.
* Packet states (``ctstate``): NEW (original direction, no reply seen yet), ESTABLISHED
  (reply seen, or a reply-direction packet), RELATED (an ICMP error about a tracked
  connection), INVALID (no sane transition), UNTRACKED (NOTRACK in raw).
* Status bits are the kernel's (SEEN_REPLY, ASSURED, CONFIRMED, SRC_NAT, DST_NAT and the
  *_DONE bits that say a NAT decision — possibly a null binding — was taken, so the nat
  table is consulted once per connection and direction).
* The TCP state machine covers SYN_SENT, SYN_SENT2, SYN_RECV, ESTABLISHED, FIN_WAIT,
  CLOSE_WAIT, LAST_ACK, TIME_WAIT, CLOSE; timeouts are the kernel's defaults in seconds,
  on an injectable clock. Expired entries disappear lazily.
* An entry enters the table only when *confirmed* (end of POSTROUTING or INPUT); until
  then it belongs to the packet that created it.
* Conntrack zones (the raw table's ``CT --zone``) are part of a tuple's identity, per
  direction, as in the kernel: a connection made in zone ``(zo, zr)`` (original and
  reply direction; ``--zone N`` is ``(N, N)``, ``--zone-orig N`` is ``(N, 0)``) is found
  by a packet of zone ``(qo, qr)`` through its original tuple only when ``zo == qo``,
  through its reply tuple only when ``zr == qr``. NAT's search for a free tuple and the
  clash check at confirmation look in the connection's own zone. Zone 0 is every
  packet's zone without a CT template. (One simplification: with asymmetric zones a
  tuple already present in the same zone id, whatever its direction, counts as a clash.)
"""

from __future__ import annotations

import random as _random
import zlib
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address, IPv6Address
from typing import NamedTuple, Protocol

from netmodel.ip import IPAddress

__all__ = [
    "ASSURED",
    "CONFIRMED",
    "DST_NAT",
    "DST_NAT_DONE",
    "IPVS",
    "SEEN_REPLY",
    "SRC_NAT",
    "SRC_NAT_DONE",
    "Clock",
    "Connection",
    "ConntrackTable",
    "CtTuple",
    "RefreshStep",
    "SimClock",
    "addr_int",
    "format_conntrack_l",
    "int_addr",
    "is_plain_ack",
    "refresh_all",
    "refresh_step",
]

# status bits (values as in the kernel's enum ip_conntrack_status)
EXPECTED = 1 << 0
SEEN_REPLY = 1 << 1
ASSURED = 1 << 2
CONFIRMED = 1 << 3
SRC_NAT = 1 << 4
DST_NAT = 1 << 5
SRC_NAT_DONE = 1 << 7
DST_NAT_DONE = 1 << 8
DYING = 1 << 9  # removed from its table (deleted, expired, flushed)
# svclab's own bit (no kernel status bit): IPVS owns the connection's translation
# (``net.ipv4.vs.conntrack=1``: IPVS altered the reply tuple; nf_nat leaves it alone)
IPVS = 1 << 24

STATUS_NAMES = {
    "EXPECTED": EXPECTED,
    "SEEN_REPLY": SEEN_REPLY,
    "ASSURED": ASSURED,
    "CONFIRMED": CONFIRMED,
}

ORIGINAL = 0
REPLY = 1

_V6 = 1 << 128


def addr_int(addr: IPAddress) -> int:
    """An address as one integer: IPv4 as is, IPv6 with bit 128 set, so the two families
    never collide in a tuple."""
    if addr.__class__ is IPv4Address:
        # the integer the address object holds (what int() returns, without the two
        # Python-level calls int() and .version cost on this hot path)
        return addr._ip  # type: ignore[attr-defined]
    return int(addr) if addr.version == 4 else int(addr) | _V6


def int_addr(value: int) -> IPAddress:
    """Inverse of :func:`addr_int`."""
    return IPv6Address(value & (_V6 - 1)) if value & _V6 else IPv4Address(value)


class CtTuple(NamedTuple):
    """A direction of a connection. ICMP queries: ``sport == dport == identifier``."""

    proto: str
    src: int
    dst: int
    sport: int
    dport: int

    def inverted(self) -> CtTuple:
        return _new_tuple(CtTuple, (self[0], self[2], self[1], self[4], self[3]))


_new_tuple = tuple.__new__

#: A key of the table: a direction's tuple in zone 0, else (zone id, tuple).
CtKey = CtTuple | tuple[int, CtTuple]


def make_tuple(proto: str, src: int, dst: int, sport: int, dport: int) -> CtTuple:
    """A :class:`CtTuple` (fast path: skips the named tuple's Python-level ``__new__``)."""
    return _new_tuple(CtTuple, (proto, src, dst, sport, dport))


class Clock(Protocol):
    """Where conntrack (and ``-m recent``) read the time, in seconds."""

    def now(self) -> float: ...


class SimClock:
    """A simulated clock that only moves when told (``advance``)."""

    __slots__ = ("t",)

    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


# Kernel default timeouts (seconds), net.netfilter.nf_conntrack_*_timeout*
TCP_TIMEOUTS: dict[str, int] = {
    "SYN_SENT": 120,
    "SYN_SENT2": 120,
    "SYN_RECV": 60,
    "ESTABLISHED": 432000,
    "FIN_WAIT": 120,
    "CLOSE_WAIT": 60,
    "LAST_ACK": 30,
    "TIME_WAIT": 120,
    "CLOSE": 10,
}
UDP_TIMEOUT = 30
UDP_STREAM_TIMEOUT = 120
ICMP_TIMEOUT = 30
GENERIC_TIMEOUT = 600

PROTO_NUMBERS = {"icmp": 1, "tcp": 6, "udp": 17, "sctp": 132, "ipv6-icmp": 58}

ICMP_QUERY_REPLY = {8: 0, 13: 14, 15: 16, 17: 18, 0: 8, 14: 13, 16: 15, 18: 17}
ICMP_REQUESTS = {8, 13, 15, 17}
ICMP_ERRORS = {3, 4, 5, 11, 12}


class Connection:
    """One tracked connection (mutable: its state, timeout and marks change)."""

    __slots__ = (
        "closer",
        "expires",
        "icmp_type",
        "id",
        "mark",
        "orig",
        "reply",
        "status",
        "tcp_state",
        "zone_orig",
        "zone_reply",
    )

    def __init__(self, orig: CtTuple, icmp_type: int = 0, conn_id: int = 0) -> None:
        self.orig = orig
        self.reply = _new_tuple(CtTuple, (orig[0], orig[2], orig[1], orig[4], orig[3]))  # inverted
        self.status = 0
        self.tcp_state: str | None = None
        self.expires = 0.0
        self.mark = 0
        # conntrack zone per direction (CT --zone/--zone-orig/--zone-reply; 0: default)
        self.zone_orig = 0
        self.zone_reply = 0
        self.id = conn_id
        self.icmp_type = icmp_type
        self.closer = -1

    @property
    def seen_reply(self) -> bool:
        return bool(self.status & SEEN_REPLY)

    def copy(self) -> Connection:
        c = Connection.__new__(Connection)
        for s in Connection.__slots__:
            setattr(c, s, getattr(self, s))
        return c

    def __repr__(self) -> str:
        return f"<Connection {self.orig} -> {self.reply} status={self.status:#x} {self.tcp_state}>"


class PacketState(NamedTuple):
    """What conntrack concluded about one packet: its connection (None when INVALID or
    UNTRACKED), the direction (0 original, 1 reply) and the ctstate name."""

    conn: Connection | None
    direction: int
    state: str


def _ps(conn: Connection | None, direction: int, state: str) -> PacketState:
    """A :class:`PacketState` (the hot returns of ``classify`` inline this)."""
    return _new_tuple(PacketState, (conn, direction, state))


_ACK = frozenset({"ACK"})
_SYN = frozenset({"SYN"})


def _tcp_event(flags: frozenset[str]) -> str:
    if "RST" in flags:
        return "rst"
    if "SYN" in flags:
        return "synack" if "ACK" in flags else "syn"
    if "FIN" in flags:
        return "fin"
    if "ACK" in flags:
        return "ack"
    return "none"


_PLAIN_ACK: dict[frozenset[str], bool] = {}
_TCP_ESTABLISHED = TCP_TIMEOUTS["ESTABLISHED"]


def _plain_ack(flags: frozenset[str]) -> bool:
    """Whether a segment's flags are the ``ack`` event (ACK without SYN, FIN or RST),
    memoised per flag set."""
    hit = _PLAIN_ACK.get(flags)
    if hit is None:
        hit = _PLAIN_ACK[flags] = _tcp_event(flags) == "ack"
    return hit


def is_plain_ack(flags: frozenset[str]) -> bool:
    """Whether a TCP segment with these flags is conntrack's ``ack`` event (ACK without
    SYN, FIN or RST): the segment that leaves an ESTABLISHED connection ESTABLISHED."""
    return _plain_ack(flags)


def tcp_next(state: str | None, direction: int, event: str, closer: int) -> str | None:
    """The TCP conntrack state after a packet; None means INVALID (state unchanged).

    ``closer`` is the direction that sent the first FIN (-1 if none yet)."""
    s = state or "NONE"
    if event == "rst":
        return None if s == "NONE" else "CLOSE"
    if event == "syn":
        if direction == ORIGINAL:
            if s in ("NONE", "SYN_SENT", "TIME_WAIT", "CLOSE"):
                return "SYN_SENT"
            return s
        return "SYN_SENT2" if s == "SYN_SENT" else s
    if event == "synack":
        if s == "NONE":
            return None
        if direction == REPLY and s in ("SYN_SENT", "SYN_RECV"):
            return "SYN_RECV"
        if direction == ORIGINAL and s == "SYN_SENT2":
            return "SYN_RECV"
        return s
    if event == "fin":
        if s == "NONE":
            return None
        if s in ("ESTABLISHED", "SYN_RECV"):
            return "FIN_WAIT"
        if s in ("FIN_WAIT", "CLOSE_WAIT") and direction != closer:
            return "LAST_ACK"
        return s
    if event == "ack":
        if s == "NONE":
            return "ESTABLISHED"  # mid-stream pickup (nf_conntrack_tcp_loose=1)
        if s == "SYN_RECV" and direction == ORIGINAL:
            return "ESTABLISHED"
        if s == "FIN_WAIT" and direction != closer:
            return "CLOSE_WAIT"
        if s == "LAST_ACK" and direction == closer:
            return "TIME_WAIT"
        return s
    return None if s == "NONE" else s


class ConntrackTable:
    """The conntrack table of one host. ``clock`` drives timeouts."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SimClock()
        # a direction's tuple, or (zone id, tuple) outside zone 0 -> (connection, dir)
        self._by_tuple: dict[CtKey, tuple[Connection, int]] = {}
        self._next_id = 1

    # ---- lookup and lifetime

    def lookup(
        self, t: CtTuple, zone: tuple[int, int] | None = None
    ) -> tuple[Connection, int] | None:
        """The live connection a tuple belongs to and the direction it is, or None.
        ``zone`` is the looking packet's zone (original, reply direction); None or
        ``(0, 0)``: the default zone."""
        hit = self._by_tuple.get(t) if not zone or zone == (0, 0) else self._zoned(t, zone)
        if hit is None:
            return None
        if hit[0].expires <= self.clock.now():
            self._remove(hit[0])
            return None
        return hit

    def _zoned(self, t: CtTuple, zone: tuple[int, int]) -> tuple[Connection, int] | None:
        """The entry a packet of ``zone`` finds for tuple ``t`` (expired or not), as
        ``resolve_normal_ct`` looks it up: in the zone id of the original direction,
        then in that of the reply direction; a hit counts only when the connection's
        zone id for the hit's direction equals the packet's."""
        zo, zr = zone
        by = self._by_tuple
        hit = by.get((zo, t) if zo else t)
        if hit is not None and (hit[1] == ORIGINAL or zo == zr):
            return hit
        if zr != zo:
            hit = by.get((zr, t) if zr else t)
            if hit is not None and hit[1] == REPLY:
                return hit
        return None

    def _live(self, key: CtKey) -> bool:
        """Whether a live entry holds ``key`` (an expired one is removed)."""
        hit = self._by_tuple.get(key)
        if hit is None:
            return False
        if hit[0].expires <= self.clock.now():
            self._remove(hit[0])
            return False
        return True

    def new(self, orig: CtTuple, icmp_type: int = 0) -> Connection:
        """An unconfirmed connection for a first packet (not yet in the table)."""
        c = Connection(orig, icmp_type=icmp_type, conn_id=self._next_id)
        self._next_id += 1
        return c

    def confirm(self, conn: Connection) -> bool:
        """Insert an unconfirmed connection. False (and nothing inserted) when either of
        its tuples is already taken by another live connection: the kernel drops such a
        packet."""
        if conn.status & CONFIRMED:
            return True
        by = self._by_tuple
        zo, zr = conn.zone_orig, conn.zone_reply
        ko: CtKey = (zo, conn.orig) if zo else conn.orig
        kr: CtKey = (zr, conn.reply) if zr else conn.reply
        if (ko in by and self._live(ko)) or (kr in by and self._live(kr)):
            return False
        conn.status |= CONFIRMED
        by[ko] = (conn, ORIGINAL)
        by[kr] = (conn, REPLY)
        return True

    def taken(self, t: CtTuple, zone_id: int = 0) -> bool:
        """Whether a live connection already uses this tuple (either direction) in
        conntrack zone ``zone_id``."""
        return self._live((zone_id, t) if zone_id else t)

    def _remove(self, conn: Connection) -> None:
        zo, zr = conn.zone_orig, conn.zone_reply
        for key in ((zo, conn.orig) if zo else conn.orig, (zr, conn.reply) if zr else conn.reply):
            if self._by_tuple.get(key, (None,))[0] is conn:
                del self._by_tuple[key]
        # a removed entry is dead for good: :meth:`refresh` must not revive it
        conn.status |= DYING

    def delete(self, conn: Connection) -> None:
        """Remove a connection (``conntrack -D``)."""
        self._remove(conn)

    def delete_where(self, pred: Callable[[Connection], bool]) -> int:
        """Delete every live connection for which ``pred`` is true; returns how many
        (what kube-proxy's stale-UDP cleanup does with ``conntrack -D``)."""
        victims = [c for c in self.entries() if pred(c)]
        for c in victims:
            self._remove(c)
        return len(victims)

    def mark(self) -> int:
        """An opaque position: :meth:`delete_since` removes what comes after it."""
        return self._next_id

    def delete_since(self, mark: int) -> int:
        """Delete the live connections created since :meth:`mark` returned ``mark``
        (as if they had expired); returns how many. Costs what it deletes: recent
        entries are at the end of the table."""
        if mark >= self._next_id:  # nothing created since: the common case, made cheap
            return 0
        victims: list[Connection] = []
        for conn, _ in reversed(self._by_tuple.values()):
            if conn.id < mark:
                break
            victims.append(conn)
        for c in victims:
            self._remove(c)
        return len({id(c) for c in victims})

    def flush(self) -> None:
        for conn, _ in self._by_tuple.values():
            conn.status |= DYING
        self._by_tuple.clear()

    def entries(self) -> list[Connection]:
        """Live connections in insertion order (expired ones are removed first)."""
        now = self.clock.now()
        seen: dict[int, Connection] = {}
        dead: list[Connection] = []
        for conn, _ in self._by_tuple.values():
            if conn.expires <= now:
                dead.append(conn)
            else:
                seen.setdefault(id(conn), conn)
        for c in dead:
            self._remove(c)
        return list(seen.values())

    def __len__(self) -> int:
        return len(self.entries())

    def __iter__(self) -> Iterator[Connection]:
        return iter(self.entries())

    def copy(self) -> ConntrackTable:
        """A deep copy (for exploring alternatives without touching this table)."""
        other = ConntrackTable(self.clock)
        other._next_id = self._next_id
        clones: dict[int, Connection] = {}
        for t, (conn, d) in self._by_tuple.items():
            c = clones.get(id(conn))
            if c is None:
                c = clones[id(conn)] = conn.copy()
            other._by_tuple[t] = (c, d)
        return other

    # ---- per-packet state

    def classify(
        self,
        t: CtTuple,
        flags: frozenset[str],
        icmp_type: int | None,
        inner: CtTuple | None,
        *,
        commit: bool = True,
        zone: tuple[int, int] | None = None,
    ) -> PacketState:
        """Find or create the connection of a packet (conntrack's PREROUTING/OUTPUT step)
        and apply the protocol state machine. A new connection is returned unconfirmed.

        ``inner`` is the tuple of the packet quoted inside an ICMP error. With ``commit``
        False an existing connection is not changed: the state machine runs on a copy.
        ``zone`` is the packet's conntrack zone (original, reply direction) from a CT
        template; None is the default zone."""
        proto = t.proto
        if proto in ("icmp", "ipv6-icmp") and icmp_type is not None and icmp_type in ICMP_ERRORS:
            if inner is None:
                return _ps(None, ORIGINAL, "INVALID")
            hit = self.lookup(inner.inverted(), zone)
            if hit is None:
                return _ps(None, ORIGINAL, "INVALID")
            return _ps(hit[0], hit[1], "RELATED")
        now = self.clock.now()
        hit = self._by_tuple.get(t) if zone is None else self._zoned(t, zone)
        if hit is not None and hit[0].expires <= now:
            self._remove(hit[0])
            hit = None
        if hit is None:
            if proto in ("icmp", "ipv6-icmp") and icmp_type not in ICMP_REQUESTS:
                return _ps(None, ORIGINAL, "INVALID")
            conn = Connection(t, icmp_type or 0, self._next_id)  # positional: hot
            self._next_id += 1
            if zone is not None:
                conn.zone_orig, conn.zone_reply = zone
            if proto == "tcp":
                if flags == _SYN:
                    conn.tcp_state = "SYN_SENT"
                    conn.expires = now + TCP_TIMEOUTS["SYN_SENT"]
                    return _new_tuple(PacketState, (conn, ORIGINAL, "NEW"))
                ev = _tcp_event(flags)
                st = tcp_next(None, ORIGINAL, ev, -1)
                if st is None:
                    return _ps(None, ORIGINAL, "INVALID")
                conn.tcp_state = st
                conn.expires = now + TCP_TIMEOUTS[st]
            elif proto == "udp":
                conn.expires = now + UDP_TIMEOUT
            elif proto in ("icmp", "ipv6-icmp"):
                conn.expires = now + ICMP_TIMEOUT
            else:
                conn.expires = now + GENERIC_TIMEOUT
            return _new_tuple(PacketState, (conn, ORIGINAL, "NEW"))
        conn, direction = hit
        if not commit:
            conn = conn.copy()
        state = self._advance(conn, direction, flags, now, commit)
        if state is None:
            return _ps(None, direction, "INVALID")
        return _new_tuple(PacketState, (conn, direction, state))

    def refresh(self, conn: Connection, direction: int, flags: frozenset[str]) -> str | None:
        """Apply one more packet of a connection the caller already holds (from
        :meth:`lookup` or :meth:`classify`) in ``direction``, without looking its tuple
        up: exactly what :meth:`classify` does for that packet (state machine, timeout,
        SEEN_REPLY/ASSURED, an unreplied TCP RST deleting the entry). Returns the
        ctstate (``NEW`` or ``ESTABLISHED``), or None when the packet is INVALID for
        the connection or the connection is no longer in the table (expired, deleted,
        flushed — a removed connection is never revived)."""
        status = conn.status
        if status & DYING:
            return None
        now = self.clock.now()
        if conn.expires <= now:
            self._remove(conn)
            return None
        if conn.tcp_state == "ESTABLISHED" and (
            _PLAIN_ACK.get(flags) or (flags not in _PLAIN_ACK and _plain_ack(flags))
        ):
            # the common case, in place: what _advance does for it (_plain_ack's memo
            # read inline: this runs once per namespace a replayed packet crosses)
            if direction == REPLY:
                status |= SEEN_REPLY
            if status & SEEN_REPLY:
                status |= ASSURED
                conn.status = status
                conn.expires = now + _TCP_ESTABLISHED
                return "ESTABLISHED"
            conn.expires = now + _TCP_ESTABLISHED
            return "NEW"
        return self._advance(conn, direction, flags, now, True)

    def _advance(
        self, conn: Connection, direction: int, flags: frozenset[str], now: float, commit: bool
    ) -> str | None:
        unreplied = not conn.status & SEEN_REPLY
        if not self._update(conn, direction, flags, now):
            return None
        if commit and unreplied and conn.orig[0] == "tcp" and "RST" in flags:
            # nf_conntrack_tcp_packet: "If only reply is a RST, we can consider ourselves
            # not to have an established connection [...] delete the conntrack
            # immediately" (the packet itself still passes with it, NAT undone).
            self.delete(conn)
        if direction == REPLY or conn.status & SEEN_REPLY:
            return "ESTABLISHED"
        return "NEW"

    def _update(self, conn: Connection, direction: int, flags: frozenset[str], now: float) -> bool:
        first_reply = direction == REPLY and not conn.status & SEEN_REPLY
        if direction == REPLY:
            conn.status |= SEEN_REPLY
        proto = conn.orig[0]
        if proto == "tcp":
            if conn.tcp_state == "ESTABLISHED" and _plain_ack(flags):
                # ESTABLISHED stays; ASSURED once a reply was seen (tcp_packet)
                if conn.status & SEEN_REPLY:
                    conn.status |= ASSURED
                conn.expires = now + _TCP_ESTABLISHED
                return True
            ev = _tcp_event(flags)
            old = conn.tcp_state
            st = tcp_next(old, direction, ev, conn.closer)
            if st is None:
                return False
            if ev == "fin" and conn.closer < 0:
                conn.closer = direction
            if (
                st == "ESTABLISHED"
                and old in ("SYN_RECV", "ESTABLISHED")
                and conn.status & SEEN_REPLY
            ):
                conn.status |= ASSURED
            if st == "SYN_SENT" and old in ("TIME_WAIT", "CLOSE"):
                conn.closer = -1
                conn.status &= ~(SEEN_REPLY | ASSURED)
            conn.tcp_state = st
            conn.expires = now + TCP_TIMEOUTS[st]
        elif proto == "udp":
            if conn.status & SEEN_REPLY:
                if not first_reply:
                    conn.status |= ASSURED
                conn.expires = now + (UDP_STREAM_TIMEOUT if conn.status & ASSURED else UDP_TIMEOUT)
            else:
                conn.expires = now + UDP_TIMEOUT
        elif proto in ("icmp", "ipv6-icmp"):
            conn.expires = now + ICMP_TIMEOUT
        else:
            conn.expires = now + GENERIC_TIMEOUT
        return True

    # ---- NAT bindings (only on unconfirmed connections)

    def alter_reply(self, conn: Connection, src: int, sport: int) -> None:
        """What IPVS's NAT forwarding does to the conntrack entry of a connection it
        schedules (``ip_vs_update_conntrack`` → ``nf_conntrack_alter_reply``): replies
        come from the real server ``src:sport``. No NAT status bit is set (nf_nat does
        not translate the connection's packets, IPVS does); the entry is marked
        :data:`IPVS`."""
        r = conn.reply
        conn.reply = _new_tuple(CtTuple, (r[0], src, r[2], sport, r[4]))
        conn.status |= IPVS

    def bind_dnat(self, conn: Connection, dst: int, dport: int) -> None:
        """Record a destination NAT: replies come from ``dst:dport``."""
        r = conn.reply
        conn.reply = _new_tuple(CtTuple, (r[0], dst, r[2], dport, r[4]))
        conn.status |= DST_NAT | DST_NAT_DONE

    def bind_snat(
        self,
        conn: Connection,
        src: int,
        ports: tuple[int, int] | None,
        *,
        random_fully: bool = False,
        random: bool = False,
        rng: _random.Random | None = None,
    ) -> int | None:
        """Record a source NAT to ``src`` and pick the source port: the original one if
        it is in ``ports`` (or no range was given) and the resulting reply tuple is free,
        otherwise another port from the range (random start with ``random_fully``,
        else a start derived from the tuple). ``random`` (``--random``) and
        ``random_fully`` never keep the original port (nf_nat's RANDOM_ALL) and start at
        a random offset. Returns the port, or None when every port
        is taken (the kernel then drops the packet)."""
        orig = conn.orig
        proto = orig.proto
        port = orig.sport
        if proto in ("tcp", "udp", "sctp", "icmp", "ipv6-icmp"):
            lo, hi = ports if ports else _default_port_range(port, proto)
        else:
            lo = hi = port
        keep_ok = not (random_fully or random) and (ports is None or lo <= port <= hi)
        cand = conn.reply._replace(dst=src, dport=port)
        if proto in ("icmp", "ipv6-icmp"):
            cand = cand._replace(sport=port, dport=port)
        zr = conn.zone_reply
        if keep_ok and not self.taken(cand, zr):
            chosen = port
        else:
            size = hi - lo + 1
            if random_fully or random:
                start = (rng or _random).randrange(size)
            else:
                start = zlib.crc32(f"{orig.src}/{orig.dst}/{orig.dport}".encode()) % size
            chosen = -1
            for k in range(size):
                p = lo + (start + k) % size
                c2 = (
                    cand._replace(dport=p)
                    if proto not in ("icmp", "ipv6-icmp")
                    else cand._replace(sport=p, dport=p)
                )
                if not self.taken(c2, zr):
                    chosen, cand = p, c2
                    break
            if chosen < 0:
                return None
        conn.reply = cand
        conn.status |= SRC_NAT | SRC_NAT_DONE
        return chosen


class RefreshStep(NamedTuple):
    """One connection of :func:`refresh_all`: its table, the status bits tested
    (``mask``) and the value they must have (``want``), the TCP state it must be in
    (None for UDP), the bits the packet sets (``add``) and the timeout it gives. Made by
    :func:`refresh_step`."""

    conn: Connection
    table: ConntrackTable
    mask: int
    want: int
    tcp_state: str | None
    add: int
    timeout: int


def refresh_step(
    table: ConntrackTable, conn: Connection, direction: int, state: str, flags: frozenset[str]
) -> RefreshStep | None:
    """The :func:`refresh_all` step of a packet with TCP ``flags`` of ``conn`` (of
    ``table``) in ``direction`` that gives ctstate ``state``, for the packets that leave
    a connection's state as it was: a plain ACK segment (:func:`is_plain_ack`) of an
    ESTABLISHED TCP connection, or a UDP datagram (in the reply direction, of a
    connection that has seen a reply before). None for any other."""
    proto = conn.orig[0]
    if proto == "tcp":
        if not _plain_ack(flags):
            return None
        if direction == REPLY:
            # a reply sets SEEN_REPLY, then ASSURED (tcp_packet): always ESTABLISHED
            if state != "ESTABLISHED":
                return None
            return RefreshStep(conn, table, DYING, 0, "ESTABLISHED", SEEN_REPLY | ASSURED,
                               _TCP_ESTABLISHED)
        if state == "ESTABLISHED":
            return RefreshStep(conn, table, DYING | SEEN_REPLY, SEEN_REPLY, "ESTABLISHED",
                               ASSURED, _TCP_ESTABLISHED)
        if state == "NEW":
            return RefreshStep(conn, table, DYING | SEEN_REPLY, 0, "ESTABLISHED", 0,
                               _TCP_ESTABLISHED)
        return None
    if proto == "udp":
        if state == "ESTABLISHED":
            # a reply was seen before this datagram (either direction): ASSURED, stream
            # timeout (nf_conntrack_udp_packet)
            return RefreshStep(conn, table, DYING | SEEN_REPLY, SEEN_REPLY, None, ASSURED,
                               UDP_STREAM_TIMEOUT)
        if state == "NEW" and direction == ORIGINAL:
            return RefreshStep(conn, table, DYING | SEEN_REPLY, 0, None, 0, UDP_TIMEOUT)
    return None


def refresh_all(steps: tuple[RefreshStep, ...], now: float) -> bool:
    """Apply one packet, at time ``now``, to each step's connection in turn, exactly as
    :meth:`ConntrackTable.refresh` does for it (timeout, SEEN_REPLY and ASSURED),
    provided the connection is still in its table (neither dying nor expired: an expired
    one is removed, as ``refresh`` removes it), in the step's TCP state and gives the
    step's ctstate (its status bits as the step requires). At the first step that fails
    the test, stop and return False; the steps before it stay applied, and applying one
    again later changes nothing (same packet, same ``now``: same timeout and bits). The
    flow cache's replay of a packet of known connections: one loop for every namespace
    the packet crosses."""
    for conn, table, mask, want, tcp_state, add, timeout in steps:
        status = conn.status
        if status & mask != want or conn.tcp_state != tcp_state:
            return False
        if conn.expires <= now:
            table._remove(conn)
            return False
        conn.expires = now + timeout
        if add:
            conn.status = status | add
    return True


def _default_port_range(port: int, proto: str) -> tuple[int, int]:
    if proto in ("icmp", "ipv6-icmp"):
        return (0, 65535)
    if port < 512:
        return (1, 511)
    if port < 1024:
        return (600, 1023)
    return (1024, 65535)


# --------------------------------------------------------------------------- conntrack -L


def _tuple_text(t: CtTuple, icmp_type: int) -> str:
    src, dst = int_addr(t.src), int_addr(t.dst)
    if t.proto in ("icmp", "ipv6-icmp"):
        return f"src={src} dst={dst} type={icmp_type} code=0 id={t.sport}"
    return f"src={src} dst={dst} sport={t.sport} dport={t.dport}"


def format_entry(conn: Connection, now: float) -> str:
    """One line of ``conntrack -L``."""
    proto = conn.orig.proto
    remaining = max(0, int(conn.expires - now))
    parts = [f"{proto:<8} {PROTO_NUMBERS.get(proto, 0)} {remaining}"]
    if conn.tcp_state is not None:
        parts.append(conn.tcp_state)
    # the zone: one id for both directions prints as zone=, a zone for one direction
    # only beside that direction's tuple (ctnetlink sends CTA_ZONE or CTA_TUPLE_ZONE)
    zo, zr = conn.zone_orig, conn.zone_reply
    both = zo == zr
    parts.append(_tuple_text(conn.orig, conn.icmp_type))
    if zo and not both:
        parts.append(f"zone-orig={zo}")
    if not conn.status & SEEN_REPLY:
        parts.append("[UNREPLIED]")
    parts.append(_tuple_text(conn.reply, ICMP_QUERY_REPLY.get(conn.icmp_type, 0)))
    if zr and not both:
        parts.append(f"zone-reply={zr}")
    if conn.status & ASSURED:
        parts.append("[ASSURED]")
    parts.append(f"mark={conn.mark}")
    if zo and both:
        parts.append(f"zone={zo}")
    parts.append("use=1")
    return " ".join(parts)


def format_conntrack_l(table: ConntrackTable) -> str:
    """The table printed exactly like ``conntrack -L`` prints it on stdout, one entry per
    line (the tool's closing ``N flow entries have been shown.`` goes to stderr and is
    not included)."""
    now = table.clock.now()
    return "".join(format_entry(c, now) + "\n" for c in table.entries())
