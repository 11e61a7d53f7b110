"""Connection tracking: tuples, states, TCP/UDP/ICMP, timeouts, NAT port choice,
``conntrack -L`` output."""

from __future__ import annotations

from ipaddress import ip_address
from random import Random

from dataplane.netfilter import ConntrackTable, Netfilter, SimClock, format_conntrack_l, parse_save
from dataplane.netfilter.conntrack import (
    ASSURED,
    SEEN_REPLY,
    CtTuple,
    addr_int,
    int_addr,
    tcp_next,
)
from netmodel.packet import Packet


def t(src: str, dst: str, sport: int, dport: int, proto: str = "tcp") -> CtTuple:
    return CtTuple(proto, addr_int(ip_address(src)), addr_int(ip_address(dst)), sport, dport)


def flags(*f: str) -> frozenset[str]:
    return frozenset(f)


def test_addr_int_round_trip_keeps_families_apart() -> None:
    for a in ("10.1.2.3", "0.0.0.1", "::1", "fd00::5", "::ffff:10.1.2.3"):
        assert int_addr(addr_int(ip_address(a))) == ip_address(a)
    assert addr_int(ip_address("::1")) != addr_int(ip_address("0.0.0.1"))


def test_tcp_handshake_close_and_conntrack_l_format() -> None:
    clock = SimClock()
    ct = ConntrackTable(clock)
    orig = t("10.244.1.2", "10.96.0.10", 40000, 80)
    ps = ct.classify(orig, flags("SYN"), None, None)
    assert ps.state == "NEW" and ps.conn is not None and ps.conn.tcp_state == "SYN_SENT"
    ct.bind_dnat(ps.conn, addr_int(ip_address("10.244.2.3")), 8080)
    assert ct.confirm(ps.conn)
    reply = t("10.244.2.3", "10.244.1.2", 8080, 40000)
    assert format_conntrack_l(ct) == (
        "tcp      6 120 SYN_SENT src=10.244.1.2 dst=10.96.0.10 sport=40000 dport=80 [UNREPLIED] "
        "src=10.244.2.3 dst=10.244.1.2 sport=8080 dport=40000 mark=0 use=1\n"
    )
    ps = ct.classify(reply, flags("SYN", "ACK"), None, None)
    assert (ps.state, ps.direction, ps.conn.tcp_state) == ("ESTABLISHED", 1, "SYN_RECV")  # type: ignore[union-attr]
    ps = ct.classify(orig, flags("ACK"), None, None)
    conn = ps.conn
    assert conn is not None and conn.tcp_state == "ESTABLISHED" and conn.status & ASSURED
    clock.advance(1)
    assert format_conntrack_l(ct) == (
        "tcp      6 431999 ESTABLISHED src=10.244.1.2 dst=10.96.0.10 sport=40000 dport=80 "
        "src=10.244.2.3 dst=10.244.1.2 sport=8080 dport=40000 [ASSURED] mark=0 use=1\n"
    )
    ct.classify(orig, flags("FIN", "ACK"), None, None)
    assert conn.tcp_state == "FIN_WAIT"
    ct.classify(reply, flags("ACK"), None, None)
    assert conn.tcp_state == "CLOSE_WAIT"
    ct.classify(reply, flags("FIN", "ACK"), None, None)
    assert conn.tcp_state == "LAST_ACK"
    ct.classify(orig, flags("ACK"), None, None)
    assert conn.tcp_state == "TIME_WAIT"
    clock.advance(119)
    assert len(ct) == 1
    clock.advance(2)
    assert len(ct) == 0 and ct.lookup(orig) is None


def test_tcp_invalid_and_rst() -> None:
    ct = ConntrackTable()
    assert ct.classify(t("1.1.1.1", "2.2.2.2", 1, 2), flags("RST"), None, None).state == "INVALID"
    assert (
        ct.classify(t("1.1.1.1", "2.2.2.2", 1, 2), flags("SYN", "ACK"), None, None).state
        == "INVALID"
    )
    ps = ct.classify(t("1.1.1.1", "2.2.2.2", 1, 2), flags("ACK"), None, None)  # loose pickup
    assert ps.state == "NEW" and ps.conn is not None and ps.conn.tcp_state == "ESTABLISHED"
    ct.confirm(ps.conn)
    ct.classify(t("2.2.2.2", "1.1.1.1", 2, 1), flags("RST"), None, None)
    assert ps.conn.tcp_state == "CLOSE" and ps.conn.expires == 10
    assert tcp_next("SYN_SENT", 0, "syn", -1) == "SYN_SENT"
    assert tcp_next("TIME_WAIT", 0, "syn", 0) == "SYN_SENT"


def test_udp_unreplied_then_assured_timeouts() -> None:
    clock = SimClock()
    ct = ConntrackTable(clock)
    q = t("10.0.0.1", "10.0.0.53", 5353, 53, "udp")
    ps = ct.classify(q, flags(), None, None)
    assert ps.state == "NEW" and ps.conn is not None
    ct.confirm(ps.conn)
    assert "[UNREPLIED]" in format_conntrack_l(ct)
    assert format_conntrack_l(ct).startswith("udp      17 30 src=10.0.0.1")
    clock.advance(10)
    assert ct.classify(q, flags(), None, None).state == "NEW"  # still no reply
    r = ct.classify(q.inverted(), flags(), None, None)
    assert r.state == "ESTABLISHED" and ps.conn.status & SEEN_REPLY
    assert ct.classify(q, flags(), None, None).state == "ESTABLISHED"
    assert ps.conn.status & ASSURED
    clock.advance(119)
    assert len(ct) == 1
    clock.advance(2)
    assert len(ct) == 0


def test_icmp_echo_and_related_error() -> None:
    ct = ConntrackTable()
    echo = CtTuple("icmp", addr_int(ip_address("10.0.0.1")), addr_int(ip_address("10.0.0.2")), 7, 7)
    ps = ct.classify(echo, flags(), 8, None)
    assert ps.state == "NEW" and ps.conn is not None
    ct.confirm(ps.conn)
    assert (
        "type=8 code=0 id=7 [UNREPLIED] src=10.0.0.2 dst=10.0.0.1 type=0 code=0 id=7"
        in format_conntrack_l(ct)
    )
    assert ct.classify(echo.inverted(), flags(), 0, None).state == "ESTABLISHED"
    # an echo reply nobody asked for is INVALID
    stray = CtTuple("icmp", echo.dst, echo.src, 99, 99)
    assert ct.classify(stray, flags(), 0, None).state == "INVALID"
    # an ICMP error quoting a tracked TCP connection is RELATED
    tcp = t("10.0.0.1", "10.0.0.9", 1234, 80)
    p2 = ct.classify(tcp, flags("SYN"), None, None)
    assert p2.conn is not None
    ct.confirm(p2.conn)
    err = CtTuple("icmp", addr_int(ip_address("10.0.0.9")), addr_int(ip_address("10.0.0.1")), 0, 0)
    rel = ct.classify(err, flags(), 3, tcp)
    assert rel.state == "RELATED" and rel.conn is p2.conn and rel.direction == 1
    assert ct.classify(err, flags(), 3, t("9.9.9.9", "8.8.8.8", 1, 1)).state == "INVALID"


def test_snat_picks_another_port_when_the_tuple_is_taken() -> None:
    ct = ConntrackTable()
    node = addr_int(ip_address("192.168.0.2"))
    ports = []
    for client in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        ps = ct.classify(t(client, "10.1.0.1", 40000, 80), flags("SYN"), None, None)
        assert ps.conn is not None
        ports.append(ct.bind_snat(ps.conn, node, None))
        assert ct.confirm(ps.conn)
    assert ports[0] == 40000 and len(set(ports)) == 3
    assert all(1024 <= p <= 65535 for p in ports)  # type: ignore[operator]
    # a port range and random-fully: never the original port, always inside the range
    rnd = Random(4)
    for i in range(20):
        ps = ct.classify(t("10.0.0.9", "10.1.0.1", 30000 + i, 80), flags("SYN"), None, None)
        assert ps.conn is not None
        p = ct.bind_snat(ps.conn, node, (2000, 2005), random_fully=True, rng=rnd)
        if i < 6:
            assert p is not None and 2000 <= p <= 2005
            assert ct.confirm(ps.conn)
        else:
            assert p is None  # range exhausted


def test_masquerade_collision_through_the_engine() -> None:
    text = """*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -o eth0 -j MASQUERADE
COMMIT
"""
    nf = Netfilter(
        parse_save(text),
        local_addrs=[ip_address("192.168.0.2")],
        iface_addrs={"eth0": [ip_address("192.168.0.2")]},
    )
    a = nf.traverse(Packet.make("10.0.0.1", "8.8.8.8", "udp", 5000, 53))
    b = nf.traverse(Packet.make("10.0.0.2", "8.8.8.8", "udp", 5000, 53))
    assert a.snat == (ip_address("192.168.0.2"), 5000)
    assert b.snat is not None and b.snat[1] != 5000
    # the reply to b reaches 10.0.0.2 again
    back = nf.traverse(Packet.make("8.8.8.8", "192.168.0.2", "udp", 53, b.snat[1]))
    assert (str(back.packet.dst), back.packet.dport) == ("10.0.0.2", 5000)
    assert back.delivery == "forward"


def test_delete_where_and_copy() -> None:
    ct = ConntrackTable()
    for i in range(3):
        ps = ct.classify(t("10.0.0.1", "10.96.0.10", 1000 + i, 53, "udp"), flags(), None, None)
        assert ps.conn is not None
        ct.confirm(ps.conn)
    snap = ct.copy()
    assert ct.delete_where(lambda c: c.orig.sport == 1001) == 1
    assert len(ct) == 2 and len(snap) == 3


_NAT_AND_REJECT = """*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d 10.96.0.10/32 -p tcp --dport 80 -j DNAT --to-destination 10.244.2.5:8080
-A OUTPUT -p icmp -j DNAT --to-destination 10.9.9.9
-A POSTROUTING -j MASQUERADE
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -s 192.168.1.66/32 -j REJECT
COMMIT
"""


def _router() -> Netfilter:
    return Netfilter(
        parse_save(_NAT_AND_REJECT),
        local_addrs=[ip_address("192.168.1.1")],
        iface_addrs={"eth0": [ip_address("192.168.1.1")], "eth1": [ip_address("10.244.0.1")]},
    )


def _error_about(pkt: Packet, src: str) -> Packet:
    return Packet.make(src, str(pkt.src), "icmp", icmp_type=3, icmp_code=3, inner=pkt)


def test_error_about_an_unconfirmed_connection_is_translated_never_natted_nor_confirmed() -> None:
    from dataplane.netfilter import Skb

    nf = _router()
    syn = Packet.make("192.168.1.66", "10.96.0.10", "tcp", 40000, 80, flags=flags("SYN"))
    pre = nf.run_hook("PREROUTING", syn, in_iface="eth0")
    assert pre.skb is not None and pre.skb.packet.dst == ip_address("10.244.2.5")
    assert nf.run_hook("FORWARD", pre.skb, in_iface="eth0", out_iface="eth1").verdict == "REJECT"
    # REJECT's answer carries the connection, reply direction (nf_ct_attach)
    err = _error_about(pre.skb.packet, "192.168.1.1")
    skb = Skb(err, pre.skb.conn, 1, "RELATED")
    out = nf.run_hook("OUTPUT", skb, out_iface="eth0")
    post = nf.run_hook("POSTROUTING", out.skb, out_iface="eth0")  # type: ignore[arg-type]
    assert post.verdict == "ACCEPT" and post.skb is not None
    sent = post.skb.packet
    # nat chains never ran (no DNAT to 10.9.9.9, no MASQUERADE); the error looks like it
    # came from the Service and quotes the packet as the client sent it
    assert (str(sent.src), str(sent.dst)) == ("10.96.0.10", "192.168.1.66")
    assert sent.inner is not None
    assert (str(sent.inner.dst), sent.inner.dport) == ("10.96.0.10", 80)
    assert not any(r.table == "nat" and r.rule for r in out.records + post.records)
    assert len(nf.conntrack) == 0  # the reply-direction error confirmed nothing


def test_error_from_a_router_on_the_way_shows_the_connection_address() -> None:
    nf = _router()
    syn = Packet.make("192.168.1.10", "10.96.0.10", "tcp", 40000, 80, flags=flags("SYN"))
    t1 = nf.traverse(syn, in_iface="eth0", out_iface="eth1")
    assert t1.verdict == "ACCEPT" and str(t1.packet.src) == "10.244.0.1"  # masqueraded
    # a router between this host and the endpoint: TTL exceeded, sent to 10.244.0.1
    err = _error_about(t1.packet, "10.244.7.7")
    t2 = nf.traverse(err, in_iface="eth1", out_iface="eth0")
    assert t2.verdict == "ACCEPT" and t2.ctstate == "RELATED"
    got = t2.packet
    assert (str(got.src), str(got.dst)) == ("10.96.0.10", "192.168.1.10")
    assert got.inner is not None
    assert (str(got.inner.src), got.inner.sport) == ("192.168.1.10", 40000)
    assert (str(got.inner.dst), got.inner.dport) == ("10.96.0.10", 80)
    assert len(nf.conntrack) == 1


def test_refresh_updates_a_held_connection_exactly_as_classify_does() -> None:
    rng = Random(7)
    choices = [
        flags("ACK"),
        flags("PSH", "ACK"),
        flags("FIN", "ACK"),
        flags("RST"),
        flags("SYN"),
        flags("SYN", "ACK"),
        flags(),
    ]
    for trial in range(300):
        proto = rng.choice(["tcp", "udp"])
        clocks = (SimClock(), SimClock())
        a, b = ConntrackTable(clocks[0]), ConntrackTable(clocks[1])
        fwd = t("10.0.0.1", "10.0.0.2", 1000 + trial, 80, proto)
        first = flags("SYN") if proto == "tcp" else flags()
        conns = []
        for table in (a, b):
            ps = table.classify(fwd, first, None, None)
            assert ps.conn is not None and table.confirm(ps.conn)
            conns.append(ps.conn)
        for _ in range(12):
            step = rng.choice([0.0, 1.0, 50.0, 200.0])
            for c in clocks:
                c.advance(step)
            direction = rng.randrange(2)
            f = rng.choice(choices) if proto == "tcp" else flags()
            ps = a.classify(fwd if direction == 0 else fwd.inverted(), f, None, None)
            want = None if ps.conn is None or ps.state == "INVALID" else ps.state
            if want is not None and ps.conn is not conns[0]:
                break  # a new connection took the tuple: refresh has nothing to say
            got = b.refresh(conns[1], direction, f)
            assert got == want, (trial, f, direction)
            ca, cb = conns
            assert (ca.status, ca.tcp_state, ca.expires) == (cb.status, cb.tcp_state, cb.expires)
            assert len(a) == len(b)


def test_refresh_never_revives_a_removed_connection() -> None:
    ct = ConntrackTable()
    ps = ct.classify(t("10.0.0.1", "10.0.0.2", 5, 6, "udp"), flags(), None, None)
    assert ps.conn is not None and ct.confirm(ps.conn)
    assert ct.refresh(ps.conn, 1, flags()) == "ESTABLISHED"
    ct.delete(ps.conn)
    assert ct.refresh(ps.conn, 0, flags()) is None and len(ct) == 0
