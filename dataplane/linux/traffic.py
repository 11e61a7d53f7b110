"""Traffic between namespaces: TCP/UDP connections to the pod servers, and ICMP echo.

Clients run *in this process*: the socket is created inside the source namespace by
briefly switching the calling thread there (:func:`dataplane.linux.nsenter.socket_in`),
after which it keeps that namespace for its whole life. No helper process and no fork
per connection, so a connection costs what the kernel path costs (~0.2 ms here), which
is what the real-vs-emulated benchmark wants to measure.

Answers come from :mod:`dataplane.linux.podserver`: one line ``<pod> <ip> <port>``
telling who answered and the source address it saw. A TCP client sends :data:`PROBE`
as soon as it is connected: a pod server answers a connection that sends nothing only
after its first-bytes window (``nc HOST PORT`` with no input), and one that sends any
non-HTTP bytes at once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Literal

from dataplane.linux import nsenter
from netmodel.errors import BackendError

Proto = Literal["tcp", "udp"]
_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
#: what a TCP client sends once connected (a line that is not an HTTP request: the pod
#: server answers the bare line at once, and logs ``"-" -``)
PROBE = b"\n"


class ConnectFailed(BackendError):
    """No answer: ``reason`` is ``timeout``, ``refused``, ``unreachable``, ``reset``,
    ``denied`` (EPERM: the client's own netfilter dropped or rejected the packet on its
    way out, which ``sendmsg`` reports at once for UDP) or ``error`` (anything else)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PortInUse(BackendError):
    """The source port asked for is taken in the client's namespace (bind: EADDRINUSE,
    e.g. a recent connection on it is still closing); ``port`` says which."""

    def __init__(self, port: int, message: str) -> None:
        super().__init__(message)
        self.port = port


@dataclass(frozen=True, slots=True)
class ConnectResult:
    """One answered connection: the pod that answered, the source (ip, port) the pod
    saw, the client's own (ip, port), and the wall time it took."""

    pod: str
    seen_src: tuple[IPv4Address, int]
    local: tuple[IPv4Address, int]
    seconds: float


@dataclass(frozen=True, slots=True)
class PingResult:
    """Echo requests sent, replies received, each reply's round-trip time and the TTL
    its IP header carried on arrival (in reply order)."""

    sent: int
    received: int
    rtts: tuple[float, ...]
    ttls: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        return self.received == self.sent


_REASONS = {
    errno.ECONNREFUSED: "refused",
    errno.EHOSTUNREACH: "unreachable",
    errno.ENETUNREACH: "unreachable",
    errno.ECONNRESET: "reset",
    errno.ETIMEDOUT: "timeout",
    errno.EPERM: "denied",
}


def _parse_answer(data: bytes, what: str) -> tuple[str, tuple[IPv4Address, int]]:
    parts = data.decode(errors="replace").split()
    if len(parts) != 3:
        raise ConnectFailed("garbled", f"{what}: unexpected answer {data!r}")
    return parts[0], (IPv4Address(parts[1]), int(parts[2]))


def connect(
    src_ns: str | None,
    dst_ip: IPv4Address | str,
    dport: int,
    proto: Proto = "tcp",
    *,
    sport: int | None = None,
    timeout: float = 2.0,
) -> ConnectResult:
    """Connect from kernel namespace ``src_ns`` (None: this process's) to
    ``dst_ip:dport`` and read the server's answer. ``sport`` pins the local port (None:
    the kernel picks one). Raises :class:`ConnectFailed` when nothing answers within
    ``timeout``, :class:`PortInUse` when ``sport`` cannot be bound."""
    what = f"{proto} {src_ns} -> {dst_ip}:{dport}"
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    start = time.perf_counter()
    s = nsenter.socket_in(src_ns, socket.AF_INET, kind)
    try:
        s.settimeout(timeout)
        if sport is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", sport))
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                raise PortInUse(sport, f"{what}: source port {sport} is in use") from None
        try:
            s.connect((str(dst_ip), dport))
            s.send(b"?\n" if proto == "udp" else PROBE)
            local = s.getsockname()
            chunks = []
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
                if proto == "udp" or chunk.endswith(b"\n"):
                    break
        except TimeoutError as e:
            raise ConnectFailed("timeout", f"{what}: no answer within {timeout}s") from e
        except OSError as e:
            reason = _REASONS.get(e.errno or 0, "error")
            raise ConnectFailed(reason, f"{what}: {e.strerror or e}") from e
    finally:
        s.close()
    pod, seen = _parse_answer(b"".join(chunks), what)
    return ConnectResult(
        pod=pod,
        seen_src=seen,
        local=(IPv4Address(local[0]), int(local[1])),
        seconds=time.perf_counter() - start,
    )


def sctp_refused() -> str | None:
    """Why this kernel cannot open SCTP sockets (None: it can). Without the ``sctp``
    module (not loadable in some sandboxes and containers) ``socket(AF_INET,
    SOCK_STREAM, IPPROTO_SCTP)`` fails with EPROTONOSUPPORT."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_SCTP)
    except OSError as e:
        return f"this kernel has no SCTP (socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP): {e.strerror})"
    s.close()
    return None


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def _echo_request(ident: int, seq: int) -> bytes:
    payload = b"svclab-ping"
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    return struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, seq) + payload


def ping(
    src_ns: str | None,
    dst: IPv4Address | str,
    count: int = 1,
    *,
    timeout: float = 1.0,
    interval: float = 0.0,
) -> PingResult:
    """ICMP echo from kernel namespace ``src_ns`` to ``dst``, ``count`` times, each
    waiting up to ``timeout`` for its reply. Uses a raw ICMP socket (root; the ``ping``
    binary is not installed here and unprivileged ICMP sockets are disabled by
    ``net.ipv4.ping_group_range``)."""
    ident = (os.getpid() ^ id(object())) & 0xFFFF
    rtts: list[float] = []
    ttls: list[int] = []
    s = nsenter.socket_in(src_ns, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    try:
        for seq in range(1, count + 1):
            sent_at = time.perf_counter()
            try:
                s.sendto(_echo_request(ident, seq), (str(dst), 0))
            except OSError:
                continue  # no route: counted as lost, like ping
            deadline = sent_at + timeout
            while (left := deadline - time.perf_counter()) > 0:
                ready, _, _ = select.select([s], [], [], left)
                if not ready:
                    break
                packet, addr = s.recvfrom(2048)
                ihl = (packet[0] & 0x0F) * 4
                icmp_type, _, _, rid, rseq = struct.unpack("!BBHHH", packet[ihl : ihl + 8])
                if icmp_type == 0 and rid == ident and rseq == seq and addr[0] == str(dst):
                    rtts.append(time.perf_counter() - sent_at)
                    ttls.append(packet[8])
                    break
            if interval and seq < count:
                time.sleep(interval)
    finally:
        with contextlib.suppress(OSError):
            s.close()
    return PingResult(sent=count, received=len(rtts), rtts=tuple(rtts), ttls=tuple(ttls))


def ping_many(
    src_ns: str | None,
    dsts: Sequence[IPv4Address | str],
    *,
    timeout: float = 0.5,
    window: int = 64,
) -> set[str]:
    """One ICMP echo from kernel namespace ``src_ns`` to each of ``dsts`` (one raw
    socket, sequence number = position); returns the addresses that answered within
    ``timeout`` of their request. Cheap readiness probing of many addresses.

    At most ``window`` requests are in flight (sent, neither answered nor older than
    ``timeout``), and replies are read while the rest is sent: a raw socket sees every
    ICMP packet of its namespace, and hundreds of echo replies arriving at once overflow
    its receive buffer (the kernel drops them silently and the destinations look dead).
    The buffer is also raised (``SO_RCVBUFFORCE`` as root) for the replies in flight."""
    ident = (os.getpid() ^ id(object())) & 0xFFFF
    want = {i + 1: str(d) for i, d in enumerate(dsts)}
    targets = set(want.values())
    answered: set[str] = set()
    in_flight: dict[int, float] = {}  # seq -> deadline, in send order
    s = nsenter.socket_in(src_ns, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    try:
        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, 1 << 22)
        pending = iter(want.items())
        more = True
        while len(answered) < len(targets):
            now = time.perf_counter()
            for seq in [q for q, dl in in_flight.items() if dl <= now]:
                del in_flight[seq]
            while more and len(in_flight) < window:
                item = next(pending, None)
                if item is None:
                    more = False
                    break
                seq, dst = item
                if dst in answered:
                    continue
                with contextlib.suppress(OSError):  # no route: never answers
                    s.sendto(_echo_request(ident, seq), (dst, 0))
                    in_flight[seq] = time.perf_counter() + timeout
            if not in_flight:
                if not more:
                    break
                continue
            wait = max(0.0, min(in_flight.values()) - time.perf_counter())
            if not select.select([s], [], [], wait)[0]:
                continue
            while True:
                try:
                    packet, addr = s.recvfrom(2048, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                ihl = (packet[0] & 0x0F) * 4
                icmp_type, _, _, rid, rseq = struct.unpack("!BBHHH", packet[ihl : ihl + 8])
                if icmp_type == 0 and rid == ident and want.get(rseq) == addr[0]:
                    answered.add(addr[0])
                    in_flight.pop(rseq, None)
    finally:
        with contextlib.suppress(OSError):
            s.close()
    return answered
