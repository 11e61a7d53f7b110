"""What :class:`~dataplane.emulator.cluster.EmulatedCluster`'s operations return besides
traces: per echo request (:class:`PingResult`), per connection (:class:`ConnResult`) and
per conntrack entry (:class:`ConntrackEntry`). Frozen values with a ``to_json()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataplane.emulator.trace import Trace
from dataplane.netfilter.conntrack import ASSURED, SEEN_REPLY, Connection, format_entry, int_addr


@dataclass(frozen=True, slots=True)
class PingResult:
    """One echo request: ``ok`` when its echo reply reached the sender; ``ttl`` is the
    reply's TTL as received; ``path``/``reply_path`` the namespaces each crossed."""

    seq: int
    ok: bool
    verdict: str
    ttl: int | None
    reply_from: str | None
    path: tuple[str, ...]
    reply_path: tuple[str, ...]
    trace: Trace

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "ok": self.ok,
            "verdict": self.verdict,
            "ttl": self.ttl,
            "reply_from": self.reply_from,
            "path": list(self.path),
            "reply_path": list(self.reply_path),
        }


@dataclass(frozen=True, slots=True)
class ConnResult:
    """One connection: the client's source port, the endpoint that accepted it (``ip:port``,
    its pod and node), the rule that chose it, what the endpoint saw as source, and whether
    it got established (the answer reached the client)."""

    index: int
    sport: int
    source: str
    verdict: str
    endpoint: str | None
    pod: str | None
    node: str | None
    chosen_by: str | None
    source_seen: str | None
    established: bool
    trace: Trace | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "sport": self.sport,
            "source": self.source,
            "verdict": self.verdict,
            "endpoint": self.endpoint,
            "pod": self.pod,
            "node": self.node,
            "chosen_by": self.chosen_by,
            "source_seen": self.source_seen,
            "established": self.established,
        }


@dataclass(frozen=True, slots=True)
class ConntrackEntry:
    """One conntrack entry: tuples as (src, dst, sport, dport) text, TCP state, status
    flags, seconds left, and ``text`` (the ``conntrack -L`` line)."""

    proto: str
    tcp_state: str | None
    orig: tuple[str, str, int, int]
    reply: tuple[str, str, int, int]
    assured: bool
    seen_reply: bool
    timeout: int
    mark: int
    text: str

    @staticmethod
    def of(conn: Connection, now: float) -> ConntrackEntry:
        o, r = conn.orig, conn.reply
        return ConntrackEntry(
            proto=o.proto,
            tcp_state=conn.tcp_state,
            orig=(str(int_addr(o.src)), str(int_addr(o.dst)), o.sport, o.dport),
            reply=(str(int_addr(r.src)), str(int_addr(r.dst)), r.sport, r.dport),
            assured=bool(conn.status & ASSURED),
            seen_reply=bool(conn.status & SEEN_REPLY),
            timeout=max(0, int(conn.expires - now)),
            mark=conn.mark,
            text=format_entry(conn, now),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "proto": self.proto,
            "state": self.tcp_state,
            "orig": list(self.orig),
            "reply": list(self.reply),
            "assured": self.assured,
            "seen_reply": self.seen_reply,
            "timeout": self.timeout,
            "mark": self.mark,
            "text": self.text,
        }
