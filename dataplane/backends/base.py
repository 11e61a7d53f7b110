"""One traffic interface over both backends, so labs and differential tests ask the same
question of the emulator and of the kernel.

A :class:`Backend` is built from a :class:`netmodel.view.ClusterView` (the same
network, rules and listeners for both). Endpoint names are logical (``pod/NS/NAME``,
``node/NAME``, ``ext/IP``) or an address one of them holds; destinations are IPs (a
Service VIP, a node IP, a pod IP) or a logical name (its first address).

Outcomes are plain values that compare across backends:

* :class:`PingOutcome` — did the echo reply come back, from which address, with which TTL;
* :class:`ConnOutcome` — what the client's socket observed (``verdict``), which pod
  answered (``ns/name``), the source address that pod saw and the client's own address
  and port (so ``masquerade`` is the same question on both sides).

``verdict`` is what a socket reports, the one vocabulary both backends speak:

``delivered``    the pod's server answered
``refused``      ECONNREFUSED: a TCP reset, or ICMP port unreachable (e.g. kube-proxy's
                 ``REJECT`` for a Service without endpoints)
``unreachable``  EHOSTUNREACH / ENETUNREACH: an ICMP error that aborts the connection,
                 or no route in the client's own namespace
``timeout``      nothing (or nothing the socket reports) came back: DROP, a black hole
``denied``       EPERM: the client's own netfilter dropped or rejected a UDP datagram on
                 its way out (OUTPUT/POSTROUTING), which ``sendmsg`` reports at once
                 (a TCP SYN is retransmitted instead: REJECT's ICMP error refuses it)
``reset``/``error``  (kernel only) a reset after the handshake, another errno

The emulator's own verdict (``DROP``, ``REJECT``, ``no-route``, ...) or the kernel's error
message is kept in ``detail``. The mapping from what reached the emulated client to a
socket's verdict follows Linux (``tcp_v4_err``: every ICMP error aborts a connecting TCP
socket; ``__udp4_lib_err``: a connected UDP socket only hears of errors
``icmp_err_convert`` marks fatal).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from netmodel.view import ClusterView

if TYPE_CHECKING:
    from dataplane.linux.conntrack import ConntrackEntry

Proto = Literal["tcp", "udp"]

#: ICMP destination-unreachable codes Linux reports to a connected UDP socket
#: (``icmp_err_convert[code].fatal``); the others only reach sockets with IP_RECVERR.
UDP_FATAL_UNREACH_CODES = frozenset({2, 3, 6, 7, 8, 9, 10, 13, 14, 15})
ICMP_DEST_UNREACH = 3
ICMP_TIME_EXCEEDED = 11
EPHEMERAL = (32768, 60999)
#: how many random source ports ``RealBackend.trace`` tries when one is taken
TRACE_PORT_ATTEMPTS = 20
VXLAN_PORT = "8472"
#: the UDP ports the overlays' own VXLAN flows go to: flannel's and Calico's
VXLAN_PORTS = (VXLAN_PORT, "4789")


@dataclass(frozen=True, slots=True)
class PingOutcome:
    """One echo request. ``ok``, ``reply_from`` and ``ttl`` compare across backends; the
    rest describes how this backend saw it and is not part of the outcome's identity."""

    ok: bool
    reply_from: str | None
    ttl: int | None
    #: round-trip time in seconds: measured by the kernel backend, simulated by the
    #: emulator (:data:`~dataplane.backends.emulated.LINK_LATENCY` per link crossed)
    rtt: float | None = field(default=None, compare=False)
    #: the address the request was sent to
    target: str | None = field(default=None, compare=False)
    #: the namespaces the request crossed (the emulator's walk; empty on the kernel)
    path: tuple[str, ...] = field(default=(), compare=False)
    #: the emulator's verdict for the request (``delivered``, ``DROP``, ...)
    detail: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ConnOutcome:
    """One connection as the client saw it (see the module docstring for ``verdict``).
    ``source``/``sport``: the client's own address and port; ``source_seen``: the source
    address the answering pod saw; ``endpoint``: ``ip:port`` that answered, when known."""

    verdict: str
    pod: str | None  # ns/name of the answering pod
    source_seen: str | None
    endpoint: str | None = None
    source: str | None = None
    sport: int | None = None
    detail: str | None = None
    sport_seen: int | None = None

    @property
    def masquerade(self) -> bool:
        """The pod saw another source (address, or port: ``MASQUERADE --random-fully``
        picks a new one even when the address stays) than the client's own."""
        if self.source_seen is None or self.source is None:
            return False
        return (self.source_seen, self.sport_seen) != (self.source, self.sport)

    def key(self) -> tuple[str, str | None, str | None, bool]:
        """What must agree across backends: verdict, pod, source seen, masquerade."""
        return (self.verdict, self.pod, self.source_seen, self.masquerade)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "pod": self.pod,
            "source_seen": self.source_seen,
            "endpoint": self.endpoint,
            "source": self.source,
            "sport": self.sport,
            "sport_seen": self.sport_seen,
            "masquerade": self.masquerade,
            "detail": self.detail,
        }


class Backend(Protocol):
    name: str

    def ping(self, src: str, dst: str, count: int = 1) -> list[PingOutcome]: ...

    def connect(
        self, src: str, dst: str, dport: int, proto: Proto = "tcp", n: int = 1
    ) -> list[ConnOutcome]: ...

    def conntrack(self, node: str) -> list[str]: ...

    def flows_conntrack(
        self, sports: Iterable[int], proto: str, *, source: str | None = None
    ) -> dict[int, dict[str, list[str]]]: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------------- conntrack


def node_names(view: ClusterView) -> list[str]:
    return sorted(str(ns.node) for ns in view.network.namespaces.values() if ns.role == "node")


def conntrack_selected(e: ConntrackEntry, proto: str, source: str | None) -> bool:
    """A connection's entry (its source port already matched): the protocol, the source
    address if given, and never the overlay's own VXLAN flows (hashed source ports)."""
    return (
        e.proto == proto
        and (source is None or e.field("orig", "src") == source)
        and not (proto == "udp" and e.field("orig", "dport") in VXLAN_PORTS)
    )


def conntrack_key(line: str) -> str:
    """A ``conntrack -L`` line as the backends are compared on it: timeout and ``use``
    left out, and the port a source NAT chose masked (``*``): kube-proxy masquerades with
    ``--random-fully``, so each backend draws its own."""
    from dataplane.linux.conntrack import normalize_line, parse_line

    e = parse_line(line)
    key = normalize_line(line)
    reply_to = (e.field("reply", "dst"), e.field("reply", "dport"))
    if reply_to != (e.field("orig", "src"), e.field("orig", "sport")):
        key = key.replace(f" dport={reply_to[1]} ", " dport=* ")
    return key
