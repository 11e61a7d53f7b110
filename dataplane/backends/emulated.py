"""The emulated cluster (:class:`dataplane.emulator.cluster.EmulatedCluster`) behind the
:class:`~dataplane.backends.base.Backend` interface; what a client socket reports is
derived from the emulator's walk (:func:`socket_verdict`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping
from contextlib import contextmanager

from dataplane.backends.base import (
    ICMP_DEST_UNREACH,
    ICMP_TIME_EXCEEDED,
    UDP_FATAL_UNREACH_CODES,
    ConnOutcome,
    PingOutcome,
    Proto,
    conntrack_selected,
    node_names,
)
from dataplane.emulator.cluster import EmulatedCluster
from dataplane.emulator.filters import CompiledRules
from dataplane.emulator.trace import Trace
from dataplane.emulator.traffic import Answerer
from netmodel.packet import Packet
from netmodel.rulesets import RulesetInput
from netmodel.view import ClusterView

#: the simulated one-way latency of a link between two namespaces (veth, bridge port or
#: underlay alike), in seconds: a ping's round trip is this times the links crossed by
#: the request and the reply
LINK_LATENCY = 0.05e-3


def answerers(view: ClusterView) -> dict[str, dict[tuple[str, int], Answerer]]:
    """The emulator's DNS servers: every DNS pod answers on 53/UDP and 53/TCP from the
    view's zone (one shared answerer: one cache, as if the pods shared it)."""
    if view.dns_zone is None or not view.dns_servers:
        return {}
    from dataplane.dns import ZoneAnswerer  # (it loads dnspython: only for a cluster DNS)

    answer = ZoneAnswerer(view.dns_zone)
    return {ns: {("udp", 53): answer, ("tcp", 53): answer} for ns in view.dns_servers}


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

    def __init__(
        self,
        view: ClusterView,
        *,
        seed: int = 0,
        compiled_cache: MutableMapping[RulesetInput, CompiledRules] | None = None,
    ) -> None:
        """``compiled_cache``: parsed and compiled rules by ruleset, shared across
        clusters (:class:`~dataplane.emulator.cluster.EmulatedCluster`)."""
        self.view = view
        self.cluster = EmulatedCluster(
            view.network,
            view.rulesets,
            view.listeners,
            view.local_addresses,
            seed=seed,
            answerers=answerers(view),
            resolv_confs=view.resolv_confs,
            compiled_cache=compiled_cache,
        )

    def ping(self, src: str, dst: str, count: int = 1) -> list[PingOutcome]:
        return [
            PingOutcome(
                r.ok,
                r.reply_from if r.ok else None,
                r.ttl,
                LINK_LATENCY * (max(len(r.path) - 1, 0) + max(len(r.reply_path) - 1, 0))
                if r.ok
                else None,
                target=str(r.trace.packet.dst),
                path=tuple(r.path),
                detail=r.verdict,
            )
            for r in self.cluster.ping(src, dst, count)
        ]

    def trace(
        self,
        src: str,
        dst: str,
        dport: int | None,
        proto: str = "tcp",
        *,
        sport: int | None = None,
        all_branches: bool = False,
    ) -> Trace:
        """One packet's walk and its reply, hop by hop (``all_branches``: every branch of
        every random rule, with its probability)."""
        if all_branches:
            return self.cluster.trace_all(src, dst, proto, dport, sport)  # type: ignore[arg-type]
        return self.cluster.trace(src, dst, proto, dport, sport)  # type: ignore[arg-type]

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
        for node in node_names(self.view):
            for line in self.conntrack(node):
                e = parse_line(line)
                port = wanted.get(e.field("orig", "sport") or "")
                if port is not None and conntrack_selected(e, proto, source):
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
