"""One traffic interface over both backends, so labs and differential tests ask the same
question of the emulator and of the kernel.

A :class:`Backend` is built from a :class:`control.emulation.ClusterView` (the same
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

import random
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from ipaddress import ip_address
from typing import TYPE_CHECKING, Any, Literal, Protocol

from control.emulation import ClusterView
from dataplane.emulator.cluster import EmulatedCluster
from dataplane.emulator.trace import Trace
from netmodel.errors import InputError
from netmodel.packet import Packet

if TYPE_CHECKING:
    from dataplane.linux.cni import CniMode
    from dataplane.linux.conntrack import ConntrackEntry
    from dataplane.linux.realize import RealCluster
    from dataplane.linux.rules import IptablesBackend, RuleCounter

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


@dataclass(frozen=True, slots=True)
class PingOutcome:
    ok: bool
    reply_from: str | None
    ttl: int | None
    #: round-trip time in seconds, when measured (the kernel backend); not part of the
    #: outcome's identity (the differential tests compare outcomes across backends)
    rtt: float | None = field(default=None, compare=False)


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


def _nodes(view: ClusterView) -> list[str]:
    return sorted(str(ns.node) for ns in view.network.namespaces.values() if ns.role == "node")


def _selected(e: ConntrackEntry, proto: str, source: str | None) -> bool:
    """A connection's entry (its source port already matched): the protocol, the source
    address if given, and never the overlay's own VXLAN flows (hashed source ports)."""
    return (
        e.proto == proto
        and (source is None or e.field("orig", "src") == source)
        and not (proto == "udp" and e.field("orig", "dport") == VXLAN_PORT)
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


# ---------------------------------------------------------------------------- emulator


def _for_socket(request: Packet, got: Packet) -> bool:
    """Does ``got`` reach the socket that sent ``request`` (connected to its destination):
    an answer from that destination, or an ICMP error quoting the request? A segment from
    elsewhere (an endpoint answering past the NAT that should have reverted it) is no
    answer: the kernel drops it or resets it, the socket hears nothing."""
    if got.proto == "icmp":
        q = got.inner
        return q is not None and (q.proto, q.src, q.sport, q.dst, q.dport) == (
            request.proto,
            request.src,
            request.sport,
            request.dst,
            request.dport,
        )
    return (got.proto, got.src, got.sport, got.dst, got.dport) == (
        request.proto,
        request.dst,
        request.dport,
        request.src,
        request.sport,
    )


def socket_verdict(trace: Trace, proto: str, client: str) -> str:
    """What a client socket in namespace ``client`` reports for the walk ``trace`` of
    its first packet (SYN or datagram) and the answer (see the module docstring)."""
    last = trace.hops[-1] if trace.hops else None
    if (
        proto == "udp"
        and trace.verdict in ("DROP", "REJECT")
        and last is not None
        and last.netns == client
        and last.hook in ("OUTPUT", "POSTROUTING")
    ):
        return "denied"  # ip_local_out's NF_DROP: sendmsg fails with EPERM
    reply = trace.reply
    got = None
    if reply is not None and reply.verdict == "delivered" and reply.received is not None:
        at = reply.delivered_to.netns if reply.delivered_to is not None else None
        if at == client and _for_socket(trace.packet, reply.received):
            got = reply.received
    if got is None:
        where = last.netns if last is not None else client
        if trace.verdict == "no-route" and where == client:
            return "unreachable"  # connect() fails at once: ENETUNREACH
        return "timeout"
    if got.proto == "icmp":
        code = got.icmp_code or 0
        if got.icmp_type == ICMP_DEST_UNREACH:
            if proto == "udp" and code not in UDP_FATAL_UNREACH_CODES:
                return "timeout"
            return "refused" if code == 3 else "unreachable" if code != 2 else "error"
        if got.icmp_type == ICMP_TIME_EXCEEDED and proto == "tcp":
            return "unreachable"
        return "timeout"
    if proto == "tcp":
        if "RST" in got.flags:
            return "refused"
        return "delivered" if {"SYN", "ACK"} <= got.flags else "timeout"
    return "delivered" if got.proto == "udp" else "timeout"


class EmulatorBackend:
    """The emulated cluster behind the Backend interface."""

    name = "emulator"

    def __init__(self, view: ClusterView, *, seed: int = 0) -> None:
        self.view = view
        from control.emulation import answerers

        self.cluster = EmulatedCluster(
            view.network,
            view.rulesets,
            view.listeners,
            view.local_addresses,
            seed=seed,
            answerers=answerers(view),
            resolv_confs=view.resolv_confs,
        )

    def ping(self, src: str, dst: str, count: int = 1) -> list[PingOutcome]:
        return [
            PingOutcome(r.ok, r.reply_from if r.ok else None, r.ttl)
            for r in self.cluster.ping(src, dst, count)
        ]

    def _outcome(self, trace: Trace, proto: str, client: str, sport: int) -> ConnOutcome:
        verdict = socket_verdict(trace, proto, client)
        d = trace.delivered_to
        ok = verdict == "delivered" and d is not None
        return ConnOutcome(
            verdict,
            d.pod if ok and d is not None else None,
            trace.source_seen if ok else None,
            f"{d.ip}:{d.port}" if ok and d is not None else None,
            source=str(trace.packet.src),
            sport=sport,
            detail=trace.verdict,
            sport_seen=trace.received.sport if ok and trace.received is not None else None,
        )

    def connect(
        self, src: str, dst: str, dport: int, proto: Proto = "tcp", n: int = 1
    ) -> list[ConnOutcome]:
        client = self.cluster.resolve_source(src)[0].name
        out = []
        # as the kernel's client does: TCP handshake, the server's line, close; UDP one
        # datagram each way (so both conntrack tables see the same packets)
        conns = self.cluster.connect(
            src, dst, proto, dport, n, close=True, record=True, complete=proto == "tcp"
        )
        for r in conns:
            assert r.trace is not None
            out.append(self._outcome(r.trace, proto, client, r.sport))
        return out

    def possible(
        self, src: str, dst: str, dport: int, proto: Proto = "tcp"
    ) -> list[tuple[float, ConnOutcome]]:
        """Every outcome one connection can have from the current state, with its
        probability (every branch of every random rule: ``trace --all``). Leaves the
        cluster's state as it was. ``sport`` of the outcomes is the one explored."""
        client = self.cluster.resolve_source(src)[0].name
        t = self.cluster.trace_all(src, dst, proto, dport)
        return [(p, self._outcome(b, proto, client, b.packet.sport)) for p, b in t.branches]

    def conntrack(self, node: str) -> list[str]:
        """The node's conntrack table as ``conntrack -L`` lines."""
        return [e.text for e in self.cluster.conntrack(node)]

    def flows_conntrack(
        self, sports: Iterable[int], proto: str, *, source: str | None = None
    ) -> dict[int, dict[str, list[str]]]:
        """Each node's entries of the connections from these source ports (and address
        ``source``, if given), selected as :meth:`RealBackend.flows_conntrack` does."""
        from dataplane.linux.conntrack import parse_line

        wanted = {str(p): p for p in sports}
        out: dict[int, dict[str, list[str]]] = {}
        for node in _nodes(self.view):
            for line in self.conntrack(node):
                e = parse_line(line)
                port = wanted.get(e.field("orig", "sport") or "")
                if port is not None and _selected(e, proto, source):
                    out.setdefault(port, {}).setdefault(node, []).append(line)
        return out

    def close(self) -> None:
        pass


@contextmanager
def emulator_backend(view: ClusterView, *, seed: int = 0) -> Iterator[EmulatorBackend]:
    b = EmulatorBackend(view, seed=seed)
    try:
        yield b
    finally:
        b.close()


# ---------------------------------------------------------------------------- kernel


@dataclass(frozen=True, slots=True)
class RuleHit:
    """A rule whose packet counter moved during a connection: by how much."""

    node: str
    table: str
    chain: str
    rule: str
    packets: int

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "table": self.table,
            "chain": self.chain,
            "rule": self.rule,
            "packets": self.packets,
        }


@dataclass(frozen=True, slots=True)
class RealTrace:
    """What the kernel did with one connection: the outcome, the conntrack entries of
    the connection on each node (``conntrack -L`` lines), and the rules that matched
    (their counters' increase; nodes in nftables mode have no counters)."""

    flow: dict[str, Any]
    outcome: ConnOutcome
    conntrack: dict[str, list[str]] = field(default_factory=dict)
    rules: tuple[RuleHit, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": "kernel",
            "flow": self.flow,
            **self.outcome.to_json(),
            "delivered": self.outcome.verdict == "delivered",
            "conntrack": self.conntrack,
            "rules": [r.to_json() for r in self.rules],
        }

    def render_text(self) -> str:
        f, o = self.flow, self.outcome
        head = f"{f['proto']} {f['from']} -> {f['to']}:{f['port']} (kernel): {o.verdict}"
        lines = [head]
        if o.verdict == "delivered":
            lines.append(f"  answered by pod/{o.pod}" + (f" at {o.endpoint}" if o.endpoint else ""))
            lines.append(
                f"  source seen {o.source_seen} (client {o.source}:{o.sport})"
                + (" (masquerade)" if o.masquerade else "")
            )
        elif o.detail:
            lines.append(f"  {o.detail}")
        lines.append("conntrack:")
        if not any(self.conntrack.values()):
            lines.append("  (no entry)")
        for node, entries in sorted(self.conntrack.items()):
            lines.extend(f"  node/{node}: {e}" for e in entries)
        lines.append("rules matched (packets):")
        if not self.rules:
            lines.append("  (none counted)")
        lines.extend(
            f"  node/{r.node} {r.table}/{r.chain} +{r.packets}: {r.rule}" for r in self.rules
        )
        return "\n".join(lines)


class RealBackend:
    """A realised cluster (:mod:`control.real`) behind the Backend interface.

    ``timeout``: how long a connection or echo request waits for its answer (a DROP
    costs that much). Sources may be logical names or an address of the network;
    destinations an address or a logical name."""

    name = "kernel"

    def __init__(self, view: ClusterView, cluster: RealCluster, *, timeout: float = 1.0) -> None:
        self.view = view
        self.cluster = cluster
        self.timeout = timeout
        self._rng = random.Random()

    # ------------------------------------------------------------------ names
    def source_ns(self, src: str) -> str:
        """The logical namespace a source names (a logical name, or an address in it)."""
        if src in self.view.network.namespaces:
            return src
        try:
            addr = ip_address(src)
        except ValueError:
            raise InputError(f"unknown source {src!r}", field="--from") from None
        owner = self.view.network.owner_of(addr)
        if owner is None:
            raise InputError(
                f"{addr} is no address of the realised network (an external client must be "
                "realised: svclab up --real --external-client IP)",
                field="--from",
            )
        return owner.name

    def dest_ip(self, dst: str) -> str:
        """An address, or a logical namespace's first address."""
        ns = self.view.network.namespaces.get(dst)
        if ns is None:
            return str(ip_address(dst))
        for itf in ns.interfaces:
            if itf.kind != "loopback" and itf.addresses:
                return str(itf.addresses[0].ip)
        raise InputError(f"{dst} has no address", field="--to")

    def _nodes(self) -> list[str]:
        return _nodes(self.view)

    def _endpoint(self, pod: str, dst: str, dport: int, proto: str) -> str | None:
        """``ip:port`` that answered: known when the pod listens on one port of ``proto``
        (its server answered on it) or was addressed directly."""
        res = self.cluster.pods.get(pod)
        if res is None:
            return None
        if str(res.ip) == dst:
            return f"{dst}:{dport}"
        ports = [p for pr, p in self.view.listeners.get(f"pod/{pod}", ()) if pr == proto]
        return f"{res.ip}:{ports[0]}" if len(ports) == 1 else None

    # ------------------------------------------------------------------ traffic
    def ping(self, src: str, dst: str, count: int = 1) -> list[PingOutcome]:
        ns, ip = self.source_ns(src), self.dest_ip(dst)
        out = []
        for _ in range(count):
            r = self.cluster.ping(ns, ip, 1, timeout=self.timeout)
            ok = r.received == 1
            out.append(
                PingOutcome(
                    ok,
                    ip if ok else None,
                    r.ttls[0] if ok and r.ttls else None,
                    r.rtts[0] if ok and r.rtts else None,
                )
            )
        return out

    def connect(
        self,
        src: str,
        dst: str,
        dport: int,
        proto: Proto = "tcp",
        n: int = 1,
        *,
        sports: Sequence[int] | None = None,
    ) -> list[ConnOutcome]:
        """``n`` connections (``sports``: their source ports, one each; default: the
        kernel's ephemeral choice)."""
        from dataplane.linux.traffic import ConnectFailed

        if sports is not None and len(sports) != n:
            raise InputError(f"{len(sports)} source ports for {n} connections", field="sports")
        ns, ip = self.source_ns(src), self.dest_ip(dst)
        out = []
        for i in range(n):
            sport = sports[i] if sports is not None else None
            try:
                r = self.cluster.connect(ns, ip, dport, proto, sport=sport, timeout=self.timeout)
            except ConnectFailed as e:
                out.append(ConnOutcome(e.reason, None, None, sport=sport, detail=str(e)))
                continue
            out.append(
                ConnOutcome(
                    "delivered",
                    r.pod,
                    str(r.seen_src[0]),
                    self._endpoint(r.pod, ip, dport, proto),
                    source=str(r.local[0]),
                    sport=r.local[1],
                    sport_seen=r.seen_src[1],
                )
            )
        return out

    # ------------------------------------------------------------------ state
    def conntrack(self, node: str) -> list[str]:
        """The node's conntrack table (``conntrack -L`` lines)."""
        from dataplane.linux import conntrack

        node = node.removeprefix("node/")
        return [e.render() for e in conntrack.list_entries(self.cluster.node_netns(node))]

    def flow_conntrack(
        self, sport: int, proto: str, *, source: str | None = None, settle: float = 1.0
    ) -> dict[str, list[str]]:
        """Each node's conntrack entries of the connection from source port ``sport``
        (and address ``source``, if given) by original tuple, once TCP entries have left
        the closing states (up to ``settle`` seconds: the last ACK may still be on its
        way)."""
        found = self.flows_conntrack([sport], proto, source=source, settle=settle)
        return found.get(sport, {})

    def flows_conntrack(
        self,
        sports: Iterable[int],
        proto: str,
        *,
        source: str | None = None,
        settle: float = 1.0,
    ) -> dict[int, dict[str, list[str]]]:
        """:meth:`flow_conntrack` for several connections at once (one ``conntrack -L``
        per node): source port -> node -> entries. The overlay's own flows (VXLAN, UDP
        to port 8472) are left out: their source port is a hash that may collide."""
        from dataplane.linux import conntrack

        wanted = {str(p): p for p in sports}
        deadline = time.monotonic() + settle
        while True:
            found: dict[int, dict[str, list[str]]] = {}
            closing = False
            for node in self._nodes():
                for e in conntrack.list_entries(self.cluster.node_netns(node)):
                    port = wanted.get(e.field("orig", "sport") or "")
                    if port is not None and _selected(e, proto, source):
                        found.setdefault(port, {}).setdefault(node, []).append(e.render())
                        closing |= e.state in ("FIN_WAIT", "CLOSE_WAIT", "LAST_ACK", "CLOSE")
            if not closing or time.monotonic() >= deadline:
                return found
            time.sleep(0.02)

    def counters(self) -> dict[str, list[RuleCounter]]:
        """Every iptables rule of every node with its counters (nftables-mode nodes:
        none; their rules carry no counters), from the cluster's iptables back end
        (legacy: read through libiptc)."""
        from dataplane.emulator.filters import IptablesRules
        from dataplane.linux.rules import rule_counters

        backend = self.cluster.iptables_backend
        return {
            node: rule_counters(self.cluster.node_netns(node), backend=backend)
            for node in self._nodes()
            if isinstance(self.view.rulesets.get(node), IptablesRules)
        }

    def trace(
        self, src: str, dst: str, dport: int, proto: Proto = "tcp", *, sport: int | None = None
    ) -> RealTrace:
        """One connection with what the kernel did: its outcome, its conntrack entries,
        and the rules whose counters it moved."""
        from dataplane.linux.traffic import PortInUse

        before = self.counters()
        for attempt in range(TRACE_PORT_ATTEMPTS):
            # a port of our own choosing (the conntrack read-back needs it even when the
            # connection fails); one still held by a recent connection: another one
            port = sport if sport is not None else self._rng.randint(*EPHEMERAL)
            try:
                [o] = self.connect(src, dst, dport, proto, 1, sports=[port])
                break
            except PortInUse:
                if sport is not None or attempt == TRACE_PORT_ATTEMPTS - 1:
                    raise
        sport = port
        ct = self.flow_conntrack(sport, proto, source=o.source)
        after = self.counters()
        hits = []
        for node, rules in after.items():
            old = {(r.table, r.chain, r.rule): r.packets for r in before.get(node, [])}
            for r in rules:
                delta = r.packets - old.get((r.table, r.chain, r.rule), 0)
                if delta > 0:
                    hits.append(RuleHit(node, r.table, r.chain, r.rule, delta))
        flow = {"from": src, "to": dst, "port": dport, "proto": proto}
        return RealTrace(flow, o, ct, tuple(hits))

    def diagnose(self, sport: int | None = None, proto: str = "tcp") -> str:
        """Why might a flow have failed? The readiness probes that fail now, the router's
        and nodes' links, routes and neighbours, and (``sport`` given) every node's
        conntrack entries of that source port. Text for assertion and error messages."""
        from dataplane.linux import ready

        net = self.view.network
        kernel = self.cluster.namespaces
        failed = ready.failed_probes(ready.probes(net), kernel, timeout=0.3)
        lines = [f"probe failed: {p.src} -> {p.dst} ({p.what})" for p in failed]
        lines.append(f"readiness probes: {len(failed)} failed")
        if sport is not None:
            for port, by_node in self.flows_conntrack([sport], proto).items():
                for node, entries in sorted(by_node.items()):
                    lines += [f"conntrack {node} sport {port}: {e}" for e in entries]
        infra = (n for n, ns in net.namespaces.items() if ns.role in ("router", "node"))
        lines.append(ready.diagnose(infra, kernel))
        return "\n".join(lines)

    def close(self) -> None:
        """Nothing to release (the cluster's owner tears it down)."""


@contextmanager
def real_backend(
    view: ClusterView,
    *,
    cluster_id: str | None = None,
    cni: CniMode = "bridge-plugin",
    timeout: float = 1.0,
    iptables_backend: IptablesBackend = "nft",
) -> Iterator[RealBackend]:
    """Realise ``view`` on fresh network namespaces (network, rules, pod servers) and
    yield its :class:`RealBackend`; always tear it down, also on error or Ctrl-C.
    ``iptables_backend``: ``nft`` or ``legacy`` (:mod:`dataplane.linux.rules`)."""
    from control.real import new_cluster_id, realize_view
    from dataplane.linux.realize import teardown

    cid = cluster_id or new_cluster_id()
    try:
        cluster, _ = realize_view(
            view, cluster_id=cid, cni=cni, iptables_backend=iptables_backend
        )
        b = RealBackend(view, cluster, timeout=timeout)
        yield b
        b.close()
    finally:
        teardown(cid)
