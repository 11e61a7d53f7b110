"""The flow cache: packets of known connections replayed with the same outcome and the
same conntrack updates as a full walk, and not replayed once what it relied on changed."""

from __future__ import annotations

from emu_helpers import RULES, A, C, both, cluster

from dataplane.emulator import EmulatedCluster
from dataplane.emulator.replay import replay_safe
from dataplane.netfilter.parse import parse_save
from netmodel.packet import Packet

CIP = "10.96.0.10"


def _established(c: EmulatedCluster) -> Packet:
    (res,) = c.connect("pod/default/a", CIP, "tcp", 80, n=1, record=False)
    assert res.established
    # a segment connect() did not send, so the first send below is its first walk
    return Packet.make(A, CIP, "tcp", res.sport, 80, flags=frozenset({"ACK"}), length=52)


def _tables(c: EmulatedCluster) -> dict[str, list[str]]:
    now = c.clock.now()
    from dataplane.netfilter.conntrack import format_entry

    return {n: [format_entry(x, now) for x in f.conntrack.entries()] for n, f in c.filters.items()}


def test_replayed_packets_match_full_walks_and_update_conntrack_alike() -> None:
    fast, full = cluster(both()), cluster(both())
    pf, pl = _established(fast), _established(full)
    assert pf == pl
    for _ in range(4):
        fast.clock.advance(7)  # type: ignore[attr-defined]
        full.clock.advance(7)  # type: ignore[attr-defined]
        a = fast.walker.send("pod/default/a", pf, record=False)
        b = full.walker.send("pod/default/a", pl, record=True)
        assert (a.verdict, a.delivered and a.delivered.packet) == (
            b.verdict,
            b.delivered and b.delivered.packet,
        )
        assert a.delivered is not None and str(a.delivered.packet.dst) == C
    assert fast.walker.replayed == 2  # the 3rd and 4th: the 2nd was recorded
    assert full.walker.replayed == 0
    assert _tables(fast) == _tables(full)


def test_no_replay_after_the_conntrack_entry_is_gone() -> None:
    c = cluster(both())
    p = _established(c)
    for _ in range(3):
        c.walker.send("pod/default/a", p, record=False)
    assert c.walker.replayed == 1
    c.filters["node/n1"].conntrack.flush()
    res = c.walker.send("pod/default/a", p, record=False)
    assert c.walker.replayed == 1
    assert res.verdict == "delivered"  # picked up mid-stream and NATed afresh


def test_no_replay_after_an_fdb_entry_moved() -> None:
    c = cluster(both())
    p = _established(c)
    for _ in range(3):
        c.walker.send("pod/default/a", p, record=False)
    assert c.walker.replayed == 1
    br = c.hosts["node/n1"].devices["cni0"]
    a_mac = c.hosts["pod/default/a"].devices["eth0"].mac
    other = next(port for port in br.ports.values() if port is not br.fdb[a_mac])  # type: ignore[attr-defined]
    assert br.learn(a_mac, other)  # type: ignore[attr-defined]
    c.walker.send("pod/default/a", p, record=False)
    assert c.walker.replayed == 1


def test_replay_safety_of_rulesets() -> None:
    assert replay_safe(parse_save(RULES))
    risky = RULES.replace(
        "-A FORWARD -d 10.96.0.12/32 -j DROP\n",
        "-A FORWARD -d 10.96.0.12/32 -j DROP\n"
        "-A FORWARD -m statistic --mode random --probability 0.5 -j ACCEPT\n",
    )
    assert not replay_safe(parse_save(risky))
    guarded = RULES.replace(
        "-A FORWARD -d 10.96.0.12/32 -j DROP\n",
        "-A FORWARD -d 10.96.0.12/32 -j DROP\n"
        "-A FORWARD -m conntrack --ctstate INVALID -m statistic --mode random "
        "--probability 0.5 -j DROP\n",
    )
    assert replay_safe(parse_save(guarded))
    connmark = (
        "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j CONNMARK --set-mark 0x1\nCOMMIT\n"
    )
    assert not replay_safe(parse_save(connmark))
