"""What the endpoints of a namespace do with a packet delivered to them (the socket layer).

Contract, per namespace:

* **Listeners** are ``(proto, port)`` pairs (pods answer on every containerPort they
  declare). **Client sockets** are opened by the emulated cluster for each flow it starts
  and are matched on the full 4-tuple (local ip, local port, remote ip, remote port), so
  an answer from an unexpected address (a broken NAT) finds no socket.
* ICMP: an echo request is answered by the kernel with an echo reply (any namespace);
  echo replies and ICMP errors go to the client socket they quote.
* TCP: a SYN to a listener is answered with SYN-ACK and creates a server connection;
  data (a segment with ``PSH``) to a connection is acknowledged with a data answer; a FIN is
  answered with FIN-ACK and the next segment closes the connection; a bare ACK or RST is
  consumed. A segment that finds neither a connection nor (for a SYN) a listener is
  answered with RST,ACK — unless it is itself an RST.
* UDP: a datagram to a listener is answered by a datagram back; to a client socket it is
  consumed; otherwise the kernel answers ICMP port unreachable.
* SCTP: an association's first packet (INIT) to a listener is answered (INIT-ACK, which
  completes the probe's exchange; the rest of the four-way handshake is not modelled);
  to a client socket it is consumed; otherwise the kernel answers ABORT (RFC 9260
  8.4: an "out of the blue" INIT), which the client's socket reports as refused.
* **Answerers** (DNS servers: ``netns -> (proto, port) -> function``) compute the
  payload of an answer from the payload received: a UDP datagram to such a listener is
  answered with ``answerer(payload, tcp=False)`` (None: nothing is sent back); a TCP data
  segment with the 2-octet length prefix of DNS over TCP (RFC 1035 4.2.2) is answered
  with the answer, length-prefixed. Other listeners answer as above, without payload.
* Every listener that accepts a new connection or datagram records a :class:`Seen`
  (which source address it saw, for "source_seen"); the last :data:`SEEN_KEPT` are kept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from netmodel.ip import IPAddress
from netmodel.lazy import LazyMapping
from netmodel.packet import (
    ICMP_DEST_UNREACH,
    ICMP_ECHO_REPLY,
    ICMP_ECHO_REQUEST,
    ICMP_PORT_UNREACH,
    Packet,
)

#: how many :class:`Seen` records are kept (the most recent ones)
SEEN_KEPT = 10_000

ReceptionKind = Literal["listener", "client", "kernel", "refused", "consumed"]
#: proto, local address, local port, remote address, remote port (addresses as integers:
#: hashing ipaddress objects is slow on the hot path)
FourTuple = tuple[str, int, int, int, int]
#: payload received, over TCP? -> payload of the answer (None: no answer)
Answerer = Callable[[bytes, bool], "bytes | None"]


@dataclass(frozen=True, slots=True)
class Seen:
    """A listener accepted a connection/datagram: who it saw and where it answered."""

    netns: str
    proto: str
    source: IPAddress
    sport: int
    dest: IPAddress
    dport: int


class Reception(NamedTuple):
    """What happened to a locally delivered packet.

    ``kind``: ``listener`` (a server socket took it), ``client`` (an answer reached the
    socket that started the flow), ``kernel`` (an echo request answered by the kernel),
    ``refused`` (no socket: the kernel answered RST / port unreachable), ``consumed``
    (no answer needed, e.g. a stray RST). ``answer`` is the packet to send back, if any.
    ``port`` is the local port the packet was delivered to (0 for ICMP)."""

    kind: ReceptionKind
    answer: Packet | None
    port: int
    note: str = ""


@dataclass(slots=True)
class _ServerConn:
    state: Literal["established", "last-ack"] = "established"
    #: the last data segment answered and its reception: a segment that *is* that one
    #: (a flow-cache replay delivers the same packet object again) gets the same answer,
    #: which depends on nothing but the segment (packets are immutable values)
    answered: tuple[Packet, Reception] | None = None


@dataclass(slots=True)
class Endpoints:
    """The socket state of every namespace (see the module docstring)."""

    listeners: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    clients: dict[str, set[FourTuple]] = field(default_factory=dict)
    server_conns: dict[str, dict[FourTuple, _ServerConn]] = field(default_factory=dict)
    seen: deque[Seen] = field(default_factory=lambda: deque(maxlen=SEEN_KEPT))
    pings: dict[str, set[int]] = field(default_factory=dict)
    answerers: dict[str, dict[tuple[str, int], Answerer]] = field(default_factory=dict)

    @classmethod
    def from_listeners(cls, listeners: Mapping[str, Iterable[tuple[str, int]]]) -> Endpoints:
        """``listeners`` may be a lazy mapping: each namespace's sockets are then read
        when a packet first reaches it."""

        def sockets(ns: str) -> set[tuple[str, int]]:
            return {(p.lower(), int(port)) for p, port in listeners[ns]}

        if isinstance(listeners, LazyMapping):
            return cls(listeners=LazyMapping(listeners, sockets))  # type: ignore[arg-type]
        return cls(listeners={ns: sockets(ns) for ns in listeners})

    def copy(self) -> Endpoints:
        """An independent copy of the socket state (listeners are shared: read-only)."""
        return Endpoints(
            listeners=self.listeners,
            clients={k: set(v) for k, v in self.clients.items()},
            server_conns={
                k: {t: _ServerConn(c.state) for t, c in v.items()}
                for k, v in self.server_conns.items()
            },
            seen=deque(self.seen, maxlen=SEEN_KEPT),
            pings={k: set(v) for k, v in self.pings.items()},
            answerers=self.answerers,
        )

    def listening(self, netns: str, proto: str, port: int) -> bool:
        return (proto, port) in self.listeners.get(netns, ())

    # ---- client side

    def open_client(
        self, netns: str, proto: str, local: IPAddress, lport: int, remote: IPAddress, rport: int
    ) -> None:
        """Register a client socket (TCP/UDP) so that answers to it are recognised."""
        self.clients.setdefault(netns, set()).add((proto, int(local), lport, int(remote), rport))

    def close_client(
        self, netns: str, proto: str, local: IPAddress, lport: int, remote: IPAddress, rport: int
    ) -> None:
        self.clients.get(netns, set()).discard((proto, int(local), lport, int(remote), rport))

    def close_server(
        self, netns: str, proto: str, local: IPAddress, lport: int, remote: IPAddress, rport: int
    ) -> None:
        """Forget a server's accepted connection (its socket closed)."""
        conns = self.server_conns.get(netns)
        if conns is not None:
            conns.pop((proto, int(local), lport, int(remote), rport), None)

    def open_ping(self, netns: str, ident: int) -> None:
        self.pings.setdefault(netns, set()).add(ident)

    def close_ping(self, netns: str, ident: int) -> None:
        self.pings.get(netns, set()).discard(ident)

    # ---- delivery

    def receive(self, netns: str, pkt: Packet) -> Reception:
        """Deliver ``pkt`` (already routed to this namespace) and decide the answer."""
        proto = pkt.proto
        if proto == "tcp":
            return self._tcp(netns, pkt)
        if proto == "icmp":
            return self._icmp(netns, pkt)
        if proto == "udp":
            return self._udp(netns, pkt)
        if proto == "sctp":
            return self._sctp(netns, pkt)
        return Reception("refused", _port_unreachable(pkt), pkt.dport, "protocol unreachable")

    def _icmp(self, netns: str, pkt: Packet) -> Reception:
        if pkt.icmp_type == ICMP_ECHO_REQUEST:
            answer = Packet(
                src=pkt.dst,
                dst=pkt.src,
                proto="icmp",
                icmp_type=ICMP_ECHO_REPLY,
                icmp_code=0,
                icmp_id=pkt.icmp_id,
                length=pkt.length,
                df=pkt.df,
            )
            self.seen.append(Seen(netns, "icmp", pkt.src, pkt.icmp_id, pkt.dst, 0))
            return Reception("kernel", answer, 0, "echo request answered")
        if pkt.icmp_type == ICMP_ECHO_REPLY:
            if pkt.icmp_id in self.pings.get(netns, ()):
                return Reception("client", None, 0, "echo reply to ping")
            return Reception("consumed", None, 0, "echo reply without a ping socket")
        inner = pkt.inner
        if inner is not None:
            key = (inner.proto, int(inner.src), inner.sport, int(inner.dst), inner.dport)
            if key in self.clients.get(netns, ()) or (
                inner.proto == "icmp" and inner.icmp_id in self.pings.get(netns, ())
            ):
                return Reception("client", None, inner.sport, "ICMP error to the socket")
        return Reception("consumed", None, 0, "ICMP error without a socket")

    def _tcp(self, netns: str, pkt: Packet) -> Reception:
        dport = pkt.dport
        key: FourTuple = ("tcp", pkt.dst._ip, dport, pkt.src._ip, pkt.sport)  # type: ignore[union-attr]
        flags = pkt.flags
        if key in self.clients.get(netns, ()):
            # tuple.__new__: the named tuple's own __new__ is a Python-level call (hot path)
            return _new_tuple(Reception, ("client", None, dport, "answer to the client socket"))
        conns = self.server_conns.get(netns)
        if conns is None:
            conns = self.server_conns[netns] = {}
        conn = conns.get(key)
        if "SYN" in flags and "ACK" not in flags:
            if not self.listening(netns, "tcp", pkt.dport):
                return Reception("refused", _rst(pkt), pkt.dport, f"no listener on tcp/{pkt.dport}")
            conns[key] = _ServerConn()
            self.seen.append(Seen(netns, "tcp", pkt.src, pkt.sport, pkt.dst, pkt.dport))
            return Reception("listener", _tcp_answer(pkt, SYN_ACK), pkt.dport, "SYN-ACK")
        if conn is None:
            if "RST" in flags:
                return Reception("consumed", None, pkt.dport, "RST without a socket")
            return Reception("refused", _rst(pkt), pkt.dport, "no socket for this segment")
        if "RST" in flags:
            del conns[key]
            return Reception("listener", None, pkt.dport, "connection reset by peer")
        if conn.state == "last-ack":
            del conns[key]
            return Reception("listener", None, pkt.dport, "last ACK: connection closed")
        if "FIN" in flags:
            conn.state = "last-ack"
            return Reception("listener", _tcp_answer(pkt, FIN_ACK), pkt.dport, "FIN-ACK")
        if "PSH" in flags:
            answerer = self.answerers.get(netns, _NO_ANSWERERS).get(("tcp", dport))
            if answerer is None:
                memo = conn.answered
                if memo is not None and memo[0] is pkt:
                    return memo[1]
            elif len(pkt.payload) >= 2:
                out = answerer(pkt.payload[2:], True)
                if out is None:
                    return Reception("listener", None, pkt.dport, "data, no answer")
                data = len(out).to_bytes(2, "big") + out
                ans = _tcp_answer(pkt, PSH_ACK, length=40 + len(data)).evolve(payload=data)
                return Reception("listener", ans, pkt.dport, "data answered")
            rec = _new_tuple(Reception, ("listener", _tcp_answer(pkt, PSH_ACK, pkt.length),
                                         dport, "data"))
            conn.answered = (pkt, rec)
            return rec
        return _new_tuple(Reception, ("listener", None, dport, "ACK"))

    def _udp(self, netns: str, pkt: Packet) -> Reception:
        key: FourTuple = ("udp", _int(pkt.dst), pkt.dport, _int(pkt.src), pkt.sport)
        if key in self.clients.get(netns, ()):
            return Reception("client", None, pkt.dport, "answer to the client socket")
        if not self.listening(netns, "udp", pkt.dport):
            return Reception(
                "refused", _port_unreachable(pkt), pkt.dport, f"no listener on udp/{pkt.dport}"
            )
        self.seen.append(Seen(netns, "udp", pkt.src, pkt.sport, pkt.dst, pkt.dport))
        answerer = self.answerers.get(netns, {}).get(("udp", pkt.dport))
        if answerer is not None:
            out = answerer(pkt.payload, False)
            if out is None:
                return Reception("listener", None, pkt.dport, "datagram, no answer")
            answer = Packet(
                src=pkt.dst,
                dst=pkt.src,
                proto="udp",
                sport=pkt.dport,
                dport=pkt.sport,
                length=28 + len(out),
                payload=out,
            )
            return Reception("listener", answer, pkt.dport, "datagram answered")
        answer = Packet(
            src=pkt.dst,
            dst=pkt.src,
            proto="udp",
            sport=pkt.dport,
            dport=pkt.sport,
            length=pkt.length,
        )
        return Reception("listener", answer, pkt.dport, "datagram answered")

    def _sctp(self, netns: str, pkt: Packet) -> Reception:
        key: FourTuple = ("sctp", _int(pkt.dst), pkt.dport, _int(pkt.src), pkt.sport)
        if key in self.clients.get(netns, ()):
            if pkt.flags >= SCTP_ABORT:
                return Reception("refused", None, pkt.dport, "ABORT: association refused")
            return Reception("client", None, pkt.dport, "answer to the client socket")
        back = (pkt.dst, pkt.src, "sctp", pkt.dport, pkt.sport)
        if not self.listening(netns, "sctp", pkt.dport):
            abort = Packet(*back, flags=SCTP_ABORT)  # type: ignore[arg-type]
            return Reception("refused", abort, pkt.dport, f"no listener on sctp/{pkt.dport}")
        self.seen.append(Seen(netns, "sctp", pkt.src, pkt.sport, pkt.dst, pkt.dport))
        answer = Packet(*back, flags=SCTP_INIT_ACK)  # type: ignore[arg-type]
        return Reception("listener", answer, pkt.dport, "INIT answered (INIT-ACK)")


_new_tuple = tuple.__new__
_NO_ANSWERERS: dict[tuple[str, int], Answerer] = {}


def _int(addr: IPAddress) -> int:
    """``int(addr)``: the integer both address classes hold (one call instead of two
    Python-level ones, on the delivery hot path)."""
    return addr._ip  # type: ignore[union-attr]


SYN_ACK = frozenset({"SYN", "ACK"})
FIN_ACK = frozenset({"FIN", "ACK"})
PSH_ACK = frozenset({"PSH", "ACK"})
RST = frozenset({"RST"})
RST_ACK = frozenset({"RST", "ACK"})
#: the SCTP chunks the model sends, as packet flags
SCTP_INIT = frozenset({"INIT"})
SCTP_INIT_ACK = frozenset({"INIT_ACK"})
SCTP_ABORT = frozenset({"ABORT"})


def _tcp_answer(pkt: Packet, flags: frozenset[str], length: int = 40) -> Packet:
    # positional: the constructor with keywords is measurably slower on the hot path
    return Packet(pkt.dst, pkt.src, "tcp", pkt.dport, pkt.sport, 64, length, flags)


def _rst(pkt: Packet) -> Packet:
    """The kernel's answer to a segment without a socket: RST (ACK set when the segment
    had no ACK, as ``tcp_v4_send_reset`` does)."""
    return _tcp_answer(pkt, RST if "ACK" in pkt.flags else RST_ACK)


def _port_unreachable(pkt: Packet) -> Packet:
    return icmp_error(pkt, ICMP_DEST_UNREACH, ICMP_PORT_UNREACH, src=pkt.dst)


def icmp_error(pkt: Packet, icmp_type: int, code: int, *, src: IPAddress) -> Packet:
    """An ICMP error about ``pkt`` sent from ``src`` back to ``pkt.src``: it quotes the
    offending header (``inner``); its length is 20 + 8 + the quoted header and 8 bytes."""
    quoted = pkt.evolve(payload=b"", inner=None)
    return Packet(
        src=src,
        dst=pkt.src,
        proto="icmp",
        icmp_type=icmp_type,
        icmp_code=code,
        inner=quoted,
        length=20 + 8 + min(pkt.length, 548),
        df=False,
    )
