"""Property: the flow cache's fast path and the full walk give the same results — the
same verdicts, deliveries and answers, and the same conntrack tables in every namespace —
for any sequence of connections, data segments, closes, UDP datagrams, clock steps and
table flushes."""

from __future__ import annotations

from typing import Any

from emu_helpers import RULES, both, cluster
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dataplane.emulator import EmulatedCluster
from dataplane.netfilter.conntrack import format_entry
from netmodel.packet import Packet

CLIENTS = ["pod/default/a", "pod/default/b", "pod/default/c", "node/n1"]
TARGETS = [("10.96.0.10", 80), ("10.96.0.20", 80), ("10.244.2.5", 8080), ("10.244.1.6", 8080)]
UDP_TARGETS = ["10.244.2.5", "10.244.1.6"]  # pods c and b, listening on udp/53
ACK, PSH_ACK = frozenset({"ACK"}), frozenset({"PSH", "ACK"})
FIN_ACK = frozenset({"FIN", "ACK"})

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("connect"),
            st.sampled_from(range(len(CLIENTS))),
            st.sampled_from(range(len(TARGETS))),
        ),
        st.tuples(st.just("data"), st.integers(0, 7), st.sampled_from([ACK, PSH_ACK])),
        # a FIN once (the server then waits for the last ACK) or three times (reset)
        st.tuples(st.just("data"), st.integers(0, 7), st.just(FIN_ACK), st.sampled_from([1, 3])),
        st.tuples(
            st.just("udp"),
            st.sampled_from(range(len(CLIENTS))),
            st.sampled_from(range(len(UDP_TARGETS))),
            st.integers(1, 3),
        ),
        st.tuples(st.just("advance"), st.sampled_from([1.0, 29.0, 30.0, 31.0, 120.0, 200.0])),
        st.tuples(st.just("flush"), st.sampled_from(["node/n1", "node/n2", "pod/default/c"])),
    ),
    min_size=1,
    max_size=40,
)


def _tables(c: EmulatedCluster) -> dict[str, list[str]]:
    now = c.clock.now()
    return {n: [format_entry(x, now) for x in f.conntrack.entries()] for n, f in c.filters.items()}


def _outcome(res: Any, reply: Any) -> tuple[object, ...]:
    d = res.delivered
    out: tuple[object, ...] = (
        res.verdict,
        d and d.host,
        d and d.packet,
        res.answer and res.answer.packet,
    )
    if reply is not None:
        rd = reply.delivered
        out += (reply.verdict, rd and rd.host, rd and rd.packet)
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
@example([("connect", 0, 0), ("data", 0, ACK), ("data", 0, PSH_ACK)])
@example([("udp", 0, 0, 3), ("advance", 29.0), ("udp", 0, 0, 3), ("advance", 120.0),
          ("udp", 0, 0, 3), ("advance", 31.0), ("udp", 0, 0, 2)])
@example([("connect", 3, 2), ("data", 0, PSH_ACK), ("advance", 30.0), ("data", 0, PSH_ACK)])
# a recorded ACK segment of a connection that has since been closed (FIN_WAIT, LAST_ACK)
@example([("connect", 0, 2), ("data", 0, ACK), ("data", 0, FIN_ACK, 1), ("data", 0, ACK)])
@example([("connect", 0, 2), ("data", 0, ACK), ("data", 0, FIN_ACK, 3), ("data", 0, ACK)])
# the instant an entry expires (a -> b: no VXLAN entries on the way, 120 s stream timeout)
@example([("udp", 0, 1, 3), ("advance", 120.0), ("udp", 0, 1, 3)])
@example([("udp", 0, 1, 2), ("advance", 30.0), ("udp", 0, 1, 3)])
def test_fast_path_and_full_walk_agree(steps: list[tuple[Any, ...]]) -> None:
    fast, full = cluster(both(RULES)), cluster(both(RULES))
    full.walker.flows.get = lambda key: None  # type: ignore[method-assign]  # never replay
    conns: list[tuple[str, Packet]] = []
    # connections on which a data segment must be replayed by the fast path: established,
    # no FIN sent yet, and no clock step or conntrack flush since they opened
    fresh: set[int] = set()
    must_replay = False
    for step in steps:
        kind = step[0]
        if kind == "connect":
            src, (dst, port) = CLIENTS[step[1]], TARGETS[step[2]]
            (a,) = fast.connect(src, dst, "tcp", port, n=1, record=False)
            (b,) = full.connect(src, dst, "tcp", port, n=1, record=False)
            assert (a.verdict, a.endpoint, a.established, a.sport) == (
                b.verdict,
                b.endpoint,
                b.established,
                b.sport,
            )
            conns.append((src, Packet.make(a.source, dst, "tcp", a.sport, port, flags=ACK)))
            if a.established:
                fresh.add(len(conns) - 1)
        elif kind == "data" and conns:
            k = step[1] % len(conns)
            src, base = conns[k]
            pkt = base.evolve(flags=step[2], length=100 if step[2] == PSH_ACK else 52)
            before = fast.walker.replayed
            reps = step[3] if len(step) > 3 else 3
            for _ in range(reps):  # the 2nd walk is recorded, the 3rd may replay
                assert _outcome(*fast.exchange(src, pkt, record=False)) == _outcome(
                    *full.exchange(src, pkt, record=False)
                )
                assert _tables(fast) == _tables(full)
            if k in fresh and step[2] != FIN_ACK:
                must_replay = True
                assert fast.walker.replayed > before, "the fast path replayed nothing"
                # an established connection's ACK segments take the one-loop replay
                flow = fast.walker.flows.get((fast.resolve_source(src)[0].name, pkt))
                assert flow is not None and flow.fast is not None
            if step[2] == FIN_ACK:
                fresh.discard(k)
        elif kind == "udp":
            src, dst = CLIENTS[step[1]], UDP_TARGETS[step[2]]
            port = 40000 + step[1]  # one flow per client and target: replies find it
            host = fast.resolve_source(src)[0].name
            for c in (fast, full):
                c.endpoints.open_client(host, "udp", *_udp_ends(c, src, dst, port))
            before = fast.walker.replayed
            for _ in range(step[3]):
                pf = _datagram(fast, src, dst, port)
                pl = _datagram(full, src, dst, port)
                assert pf == pl
                assert _outcome(*fast.exchange(src, pf, record=False)) == _outcome(
                    *full.exchange(src, pl, record=False)
                )
                assert _tables(fast) == _tables(full)
            if step[3] == 3:
                # the 2nd datagram and its answer are recorded, the 3rd replayed, in one loop
                assert fast.walker.replayed >= before + 2, "no datagram replayed"
                flow = fast.walker.flows.get((host, pf))
                assert flow is not None and flow.fast is not None
        elif kind == "advance":
            fast.clock.advance(step[1])  # type: ignore[attr-defined]
            full.clock.advance(step[1])  # type: ignore[attr-defined]
            fresh.clear()
            # no listing here: listing removes the entries that just expired, and the
            # next packet must meet them (the instant of expiry is a test of its own)
            continue
        elif kind == "flush":
            fast.filters[step[1]].conntrack.flush()
            full.filters[step[1]].conntrack.flush()
            fresh.clear()
        assert _tables(fast) == _tables(full)
    assert full.walker.replayed == 0
    if must_replay:
        assert fast.walker.replayed > 0


def _udp_ends(c: EmulatedCluster, src: str, dst: str, port: int) -> tuple[Any, ...]:
    """The client socket of a UDP flow: (local address, port, remote address, port)."""
    pkt = _datagram(c, src, dst, port)
    return (pkt.src, port, pkt.dst, 53)


def _datagram(c: EmulatedCluster, src: str, dst: str, port: int) -> Packet:
    host, addr = c.resolve_source(src)
    daddr = Packet.make("0.0.0.0", dst).dst
    saddr = addr or host.fib.lookup(daddr).src or host.primary_address()
    return Packet(saddr, daddr, "udp", port, 53, length=40)


TARGETS_Q = [*TARGETS, ("10.96.0.11", 80), ("10.244.1.6", 9999)]  # REJECT, refused


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.lists(st.sampled_from(range(len(TARGETS_Q))), max_size=6))
def test_quick_hooks_and_full_hooks_agree(steps: list[tuple[Any, ...]], extra: list[int]) -> None:
    """The walk's untraced per-hook fast path (``PacketFilter.quick``: one positional
    call, no trace steps, no flow-cache log) and the traced walk (``PacketFilter.run``
    with records) give the same verdicts, deliveries, answers and conntrack tables."""
    quick, full = cluster(both(RULES)), cluster(both(RULES))
    quick.walker.flows.get = lambda key: None  # type: ignore[method-assign]  # never replay
    quick.walker.flows.seen_before = lambda key: False  # type: ignore[method-assign]  # no log
    conns: list[tuple[str, Packet]] = []
    steps = [*steps, *(("connect", i % len(CLIENTS), t) for i, t in enumerate(extra))]
    for step in steps:
        kind = step[0]
        if kind == "connect":
            src, (dst, port) = CLIENTS[step[1]], TARGETS_Q[step[2] % len(TARGETS_Q)]
            (a,) = quick.connect(src, dst, "tcp", port, n=1, record=False)
            (b,) = full.connect(src, dst, "tcp", port, n=1, record=True)
            assert (a.verdict, a.endpoint, a.established, a.sport, a.source) == (
                b.verdict,
                b.endpoint,
                b.established,
                b.sport,
                b.source,
            )
            conns.append((src, Packet.make(a.source, dst, "tcp", a.sport, port, flags=ACK)))
        elif kind == "data" and conns:
            src, base = conns[step[1] % len(conns)]
            pkt = base.evolve(flags=step[2], length=100 if step[2] == PSH_ACK else 52)
            for _ in range(2):
                assert _outcome(*quick.exchange(src, pkt, record=False)) == _outcome(
                    *full.exchange(src, pkt, record=True)
                )
        elif kind == "advance":
            quick.clock.advance(step[1])  # type: ignore[attr-defined]
            full.clock.advance(step[1])  # type: ignore[attr-defined]
        elif kind == "flush":
            quick.filters[step[1]].conntrack.flush()
            full.filters[step[1]].conntrack.flush()
        assert _tables(quick) == _tables(full)
    assert quick.walker.replayed == 0
