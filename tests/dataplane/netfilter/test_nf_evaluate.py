"""Kernel semantics of the evaluator: traversal order, jump/goto/RETURN, NAT once per
connection, conntrack un-NAT, random choices, xt_recent affinity, marks."""

from __future__ import annotations

from ipaddress import ip_address
from random import Random

import pytest

from dataplane.netfilter import Netfilter, Skb, format_conntrack_l, parse_save
from netmodel.packet import Packet

NODE = "192.168.0.2"


def nf_of(text: str, **kw: object) -> Netfilter:
    kw.setdefault("local_addrs", [ip_address(NODE), ip_address("127.0.0.1")])
    kw.setdefault("iface_addrs", {"eth0": [ip_address(NODE)]})
    return Netfilter(parse_save(text), **kw)  # type: ignore[arg-type]


def syn(src: str, dst: str, sport: int = 40000, dport: int = 80) -> Packet:
    return Packet.make(src, dst, "tcp", sport, dport, flags=frozenset({"SYN"}))


CHAINS = """*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:J - [0:0]
:G - [0:0]
:SUB - [0:0]
-A FORWARD -s 10.0.0.1 -j J
-A FORWARD -s 10.0.0.2 -g G
-A FORWARD -s 10.0.0.3 -j SUB
-A FORWARD -j ACCEPT
-A J -j RETURN
-A J -j DROP
-A G -j RETURN
-A SUB -g G
-A SUB -j DROP
COMMIT
"""


def test_jump_returns_to_next_rule_goto_does_not() -> None:
    nf = nf_of(CHAINS)
    # jump: J returns, FORWARD continues with its next rules -> ACCEPT at rule 4
    t = nf.traverse(syn("10.0.0.1", "10.9.9.9"), commit=False)
    assert t.verdict == "ACCEPT"
    fwd = [(r.chain, r.rule, r.effect) for r in t.records if r.hook == "FORWARD"]
    assert fwd == [("FORWARD", 1, "jump J"), ("J", 1, "return"), ("FORWARD", 4, "ACCEPT")]
    # goto from a built-in chain: G's RETURN goes back past FORWARD -> policy DROP
    t = nf.traverse(syn("10.0.0.2", "10.9.9.9"), commit=False)
    assert t.verdict == "DROP"
    assert t.records[-1].effect == "policy DROP"
    # goto from a user chain: G's RETURN returns to FORWARD (SUB's caller), skipping
    # SUB's DROP; FORWARD then accepts at rule 4
    t = nf.traverse(syn("10.0.0.3", "10.9.9.9"), commit=False)
    assert t.verdict == "ACCEPT"
    assert [r.effect for r in t.records if r.hook == "FORWARD"][-1] == "ACCEPT"
    assert not any(r.chain == "SUB" and r.rule == 2 for r in t.records)


def test_accept_ends_only_its_table_and_hook_order() -> None:
    text = """*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -j ACCEPT
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
-A PREROUTING -j MARK --set-mark 0x1
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
-A INPUT -m mark --mark 0x1 -j REJECT --reject-with tcp-reset
COMMIT
"""
    t = nf_of(text).traverse(syn("10.0.0.1", NODE), commit=False)
    assert t.verdict == "REJECT" and t.reject_with == "tcp-reset"
    assert t.hooks == ("PREROUTING", "INPUT")
    assert [(r.hook, r.table) for r in t.records if r.rule] == [
        ("PREROUTING", "raw"),
        ("PREROUTING", "mangle"),
        ("INPUT", "filter"),
    ]


NAT = """*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:SVC - [0:0]
-A PREROUTING -d 172.30.0.1 -p tcp --dport 80 -j SVC
-A OUTPUT -d 172.30.0.1 -p tcp --dport 80 -j SVC
-A SVC -m statistic --mode random --probability 0.3333333333 -j DNAT --to-destination 10.1.0.1:8080
-A SVC -m statistic --mode random --probability 0.5000000000 -j DNAT --to-destination 10.1.0.2:8080
-A SVC -p tcp -j DNAT --to-destination 10.1.0.3:8080
-A POSTROUTING -s 10.0.0.0/8 -d 10.1.0.0/16 -j MASQUERADE
COMMIT
"""


def test_nat_only_on_first_packet_then_binding_reused() -> None:
    nf = nf_of(NAT, rng=Random(3))
    first = nf.traverse(syn("10.0.0.5", "172.30.0.1"))
    assert first.dnat is not None and first.verdict == "ACCEPT"
    assert first.packet.src == ip_address(NODE)  # masqueraded
    ack = syn("10.0.0.5", "172.30.0.1").evolve(flags=frozenset({"ACK"}))
    for _ in range(20):  # whatever the random draws, later packets keep the binding
        later = nf.traverse(ack)
        assert (later.packet.dst, later.packet.dport) == first.dnat
        assert later.packet.src == ip_address(NODE)
        effects = [r.effect for r in later.records]
        assert "skipped: connection already has its NAT decision" in effects
        assert not any(r.table == "nat" and r.rule for r in later.records)
    assert len(nf.conntrack) == 1


def test_reply_is_un_nated_and_state_becomes_established() -> None:
    nf = nf_of(NAT, rng=Random(1))
    first = nf.traverse(syn("10.0.0.5", "172.30.0.1"))
    out = first.packet
    reply = Packet.make(
        out.dst, out.src, "tcp", out.dport, out.sport, flags=frozenset({"SYN", "ACK"})
    )
    back = nf.traverse(reply)
    assert back.ctstate == "ESTABLISHED"
    assert (str(back.packet.src), back.packet.sport) == ("172.30.0.1", 80)
    assert (str(back.packet.dst), back.packet.dport) == ("10.0.0.5", 40000)
    assert back.delivery == "forward"
    (conn,) = nf.conntrack.entries()
    assert conn.tcp_state == "SYN_RECV"


def test_statistic_branches_sum_to_one_in_rule_order() -> None:
    nf = nf_of(NAT)
    branches = nf.enumerate(syn("10.0.0.5", "172.30.0.1"))
    got = [(str(b.result.dnat[0]), round(b.probability, 6)) for b in branches if b.result.dnat]
    assert got == [("10.1.0.1", 0.333333), ("10.1.0.2", 0.333333), ("10.1.0.3", 0.333333)]
    assert sum(b.probability for b in branches) == pytest.approx(1.0, abs=1e-12)
    assert len(nf.conntrack) == 0  # enumeration commits nothing


def test_random_choice_frequencies_follow_probabilities() -> None:
    nf = nf_of(NAT, rng=Random(11))
    counts: dict[str, int] = {}
    for i in range(3000):
        t = nf.traverse(syn("10.0.0.5", "172.30.0.1", sport=10000 + i), commit=False)
        assert t.dnat is not None
        counts[str(t.dnat[0])] = counts.get(str(t.dnat[0]), 0) + 1
    for ep in ("10.1.0.1", "10.1.0.2", "10.1.0.3"):
        assert 850 < counts[ep] < 1150


def test_nth_mode_cycles_and_enumerates() -> None:
    text = """*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -p tcp -m statistic --mode nth --every 3 --packet 0 -j DNAT --to-destination 10.1.0.1
-A PREROUTING -p tcp -m statistic --mode nth --every 2 --packet 0 -j DNAT --to-destination 10.1.0.2
-A PREROUTING -p tcp -j DNAT --to-destination 10.1.0.3
COMMIT
"""
    nf = nf_of(text)
    seq = [
        str(nf.traverse(syn("10.0.0.5", "172.30.0.1", sport=1000 + i)).dnat[0])  # type: ignore[index]
        for i in range(6)
    ]
    assert seq == ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.1", "10.1.0.2", "10.1.0.3"]
    probs = {
        str(b.result.dnat[0]): b.probability
        for b in nf.enumerate(syn("10.0.0.5", "172.30.0.1"))
        if b.result.dnat
    }
    assert probs == pytest.approx({"10.1.0.1": 1 / 3, "10.1.0.2": 1 / 3, "10.1.0.3": 1 / 3})


AFFINITY = """*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:SVC - [0:0]
:SEP-A - [0:0]
:SEP-B - [0:0]
-A PREROUTING -d 172.30.0.9 -p tcp --dport 80 -j SVC
-A SVC -m recent --name SEP-A --rcheck --seconds 10800 --reap -j SEP-A
-A SVC -m recent --name SEP-B --rcheck --seconds 10800 --reap -j SEP-B
-A SVC -m statistic --mode random --probability 0.5000000000 -j SEP-A
-A SVC -j SEP-B
-A SEP-A -m recent --name SEP-A --set -p tcp -j DNAT --to-destination 10.1.0.1:80
-A SEP-B -m recent --name SEP-B --set -p tcp -j DNAT --to-destination 10.1.0.2:80
COMMIT
"""


def test_recent_affinity_pins_a_client_until_the_timeout() -> None:
    from dataplane.netfilter.conntrack import SimClock

    clock = SimClock()
    nf = nf_of(AFFINITY, rng=Random(5), clock=clock)
    first = nf.traverse(syn("10.0.0.7", "172.30.0.9", sport=1000))
    pinned = first.dnat
    for i in range(30):
        clock.advance(60)
        t = nf.traverse(syn("10.0.0.7", "172.30.0.9", sport=2000 + i))
        assert t.dnat == pinned
        assert any("recent" in r.text and "--rcheck" in r.text for r in t.records)
    # another client is not pinned to the same endpoint every time
    others = {nf.traverse(syn(f"10.0.1.{i}", "172.30.0.9", sport=3000)).dnat for i in range(1, 30)}
    assert len(others) == 2
    # after the affinity timeout the client is balanced again
    clock.advance(10801)
    seen = set()
    for i in range(40):
        seen.add(nf.traverse(syn("10.0.0.7", "172.30.0.9", sport=5000 + i), commit=False).dnat)
    assert len(seen) == 2


def test_mark_and_connmark_targets() -> None:
    text = """*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -j CONNMARK --restore-mark
-A PREROUTING -m mark --mark 0x0 -j MARK --set-xmark 0x5/0xff
-A PREROUTING -j MARK --or-mark 0x100
-A PREROUTING -j MARK --and-mark 0xff0f
-A PREROUTING -j CONNMARK --save-mark
COMMIT
"""
    nf = nf_of(text)
    t = nf.traverse(syn("10.0.0.1", NODE))
    assert t.packet.mark == 0x105 & 0xFF0F
    (conn,) = nf.conntrack.entries()
    assert conn.mark == 0x105 & 0xFF0F
    ack = syn("10.0.0.1", NODE).evolve(flags=frozenset({"ACK"}))
    t2 = nf.traverse(ack)
    # restored from the connection, so the "mark 0" rule no longer fires
    assert t2.packet.mark == 0x105 & 0xFF0F
    assert " mark=261 use=1" in format_conntrack_l(nf.conntrack)


def test_notrack_in_raw_skips_conntrack_and_nat() -> None:
    text = """*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -p udp --dport 53 -j CT --notrack
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -p udp -j DNAT --to-destination 10.1.0.1
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -m conntrack --ctstate UNTRACKED -j ACCEPT
-A FORWARD -j DROP
COMMIT
"""
    nf = nf_of(text)
    t = nf.traverse(Packet.make("10.0.0.1", "10.9.9.9", "udp", 5000, 53))
    assert t.verdict == "ACCEPT" and t.dnat is None and t.ctstate == "UNTRACKED"
    assert len(nf.conntrack) == 0
    t = nf.traverse(Packet.make("10.0.0.1", "10.9.9.9", "udp", 5000, 54))
    assert t.dnat is not None and t.verdict == "DROP"


def test_run_hook_carries_conntrack_between_hooks() -> None:
    nf = nf_of(NAT, rng=Random(2))
    r1 = nf.run_hook("PREROUTING", syn("10.0.0.5", "172.30.0.1"), in_iface="cni0")
    assert r1.verdict == "ACCEPT" and r1.skb is not None
    assert str(r1.skb.packet.dst).startswith("10.1.0.")
    r2 = nf.run_hook("FORWARD", r1.skb, in_iface="cni0", out_iface="eth0")
    r3 = nf.run_hook("POSTROUTING", r2.skb or Skb(r1.skb.packet), out_iface="eth0")
    assert r3.skb is not None and r3.skb.packet.src == ip_address(NODE)
    assert r3.records[-1].effect == "confirmed"
    assert len(nf.conntrack) == 1
    with pytest.raises(ValueError):
        nf.run_hook("PRE", syn("10.0.0.5", "172.30.0.1"))


def test_local_to_local_goes_out_and_back_in_without_renat() -> None:
    text = NAT.replace("-A OUTPUT -d 172.30.0.1", "-A OUTPUT -d 172.30.0.2")
    text = text.replace(
        "COMMIT\n", "-A OUTPUT -p tcp --dport 81 -j DNAT --to-destination 127.0.0.1:8081\nCOMMIT\n"
    )
    nf = nf_of(text)
    t = nf.traverse(syn(NODE, "172.30.0.9", dport=81), origin="out")
    assert t.hooks == ("OUTPUT", "POSTROUTING", "PREROUTING", "INPUT")
    assert t.delivery == "local" and t.dnat == (ip_address("127.0.0.1"), 8081)
    assert not any(r.hook == "PREROUTING" and r.table == "nat" and r.rule for r in t.records)


def test_physdev_and_mac_context_through_run_hook() -> None:
    text = """*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -m physdev --physdev-in veth1 --physdev-is-bridged -j DROP
-A FORWARD -m mac --mac-source 02:00:00:00:00:01 -j REJECT
COMMIT
"""
    nf = nf_of(text)
    p = syn("10.0.0.1", "10.0.0.2")
    assert nf.run_hook("FORWARD", p, physdev_in="veth1", physdev_out="veth2").verdict == "DROP"
    assert nf.run_hook("FORWARD", p, physdev_in="veth9", physdev_out="veth2").verdict == "ACCEPT"
    assert nf.run_hook("FORWARD", p, src_mac="02:00:00:00:00:01").verdict == "REJECT"
    assert nf.run_hook("FORWARD", p).verdict == "ACCEPT"


@pytest.mark.parametrize(
    ("opts", "pin", "pout", "matches"),
    [
        # no bridge information: only fully negated options match
        ("--physdev-in veth1", None, None, False),
        ("! --physdev-in veth1", None, None, True),
        ("--physdev-is-bridged", None, None, False),
        ("! --physdev-is-bridged", None, None, True),
        # PREROUTING of a bridged frame: an input port, no output port yet
        ("--physdev-in veth1", "veth1", None, True),
        ("--physdev-in veth+", "veth1", None, True),
        ("! --physdev-in veth1", "veth1", None, False),
        ("--physdev-is-bridged", "veth1", None, False),
        ("--physdev-is-in", "veth1", None, True),
        ("--physdev-is-out", "veth1", None, False),
        ("--physdev-out veth2", "veth1", None, False),
        ("! --physdev-out veth2", "veth1", None, False),  # no output port: never
        # FORWARD of a bridged frame: both ports
        ("--physdev-is-bridged", "veth1", "veth2", True),
        ("--physdev-out veth2", "veth1", "veth2", True),
        ("! --physdev-out veth2", "veth1", "veth3", True),
        ("--physdev-in veth1 --physdev-out veth3", "veth1", "veth2", False),
    ],
)
def test_physdev_follows_xt_physdev(
    opts: str, pin: str | None, pout: str | None, matches: bool
) -> None:
    nf = nf_of(f"""*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -m physdev {opts} -j DROP
COMMIT
""")
    res = nf.run_hook("FORWARD", syn("10.0.0.1", "10.0.0.2"), physdev_in=pin, physdev_out=pout)
    assert (res.verdict == "DROP") == matches



def test_run_quick_carries_state_between_hooks_as_run_hook_does() -> None:
    """The fast path keeps a packet's state from one hook to the next (and returns the
    previous skb when a hook changed nothing); whatever runs in between on the same
    host, each hook's outcome is run_hook's."""
    mangle = ("*mangle\n:PREROUTING ACCEPT [0:0]\n"
              "-A PREROUTING -d 10.1.0.0/16 -j MARK --set-xmark 0x8/0x8\nCOMMIT\n")
    quick, full = nf_of(mangle + NAT, rng=Random(5)), nf_of(mangle + NAT, rng=Random(5))
    other = syn("10.0.0.9", "10.9.9.9", sport=999)
    forward = (("PREROUTING", "cni0", None), ("FORWARD", "cni0", "eth0"),
               ("POSTROUTING", None, "eth0"))
    local_in = (("PREROUTING", "eth0", None), ("INPUT", "eth0", None))
    local_out = (("OUTPUT", None, "eth0"), ("POSTROUTING", None, "eth0"))
    reused = 0

    def path(p: Packet, hooks: tuple[tuple[str, str | None, str | None], ...],
             meddle: bool) -> None:
        nonlocal reused
        prev_q: Skb | None = None
        prev_f: Skb | Packet = p
        pkt = p
        for hook, iif, oif in hooks:
            if hook == "FORWARD":  # the walk decrements the TTL before FORWARD
                pkt = pkt.evolve(ttl=pkt.ttl - 1)
                assert isinstance(prev_f, Skb)
                prev_f = Skb(pkt, prev_f.conn, prev_f.direction, prev_f.state,
                             prev_f.untracked, prev_f.masq)
            v, out_q, _ = quick.run_quick(hook, pkt, prev_q, iif, oif, None, None, None)
            res = full.run_hook(hook, prev_f, in_iface=iif, out_iface=oif)
            assert res.skb is not None and out_q is not None
            assert (v, out_q.packet, out_q.state, out_q.direction, out_q.masq) == (
                1, res.skb.packet, res.skb.state, res.skb.direction, res.skb.masq)
            reused += out_q is prev_q
            if meddle:  # another packet through the same host between two hooks
                quick.run_hook("FORWARD", other, in_iface="cni0", out_iface="eth0")
                full.run_hook("FORWARD", other, in_iface="cni0", out_iface="eth0")
            prev_q, prev_f, pkt = out_q, res.skb, out_q.packet

    for i in range(6):
        meddle = i % 2 == 1
        s = syn("10.0.0.5", "172.30.0.1", sport=41000 + i)
        path(s, forward, meddle)
        path(s.evolve(flags=frozenset({"ACK"})), forward, not meddle)
        s = syn("10.0.0.5", NODE, sport=42000 + i)
        path(s, local_in, meddle)
        path(s.evolve(flags=frozenset({"ACK"})), local_in, not meddle)
        s = syn(NODE, "172.30.0.1", sport=43000 + i)
        path(s, local_out, meddle)
        path(s.evolve(flags=frozenset({"ACK"})), local_out, not meddle)
    assert reused > 0
    assert format_conntrack_l(quick.conntrack) == format_conntrack_l(full.conntrack)
