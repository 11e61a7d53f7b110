"""Conntrack zones (the raw table's ``CT --zone``): a zone is part of a connection's
identity, per direction, as in the kernel; ``conntrack -L`` shows it as the real tool
does. ``tests/kernel/test_conntrack_zones.py`` compares the same cases with the kernel."""

from __future__ import annotations

from ipaddress import ip_address

from dataplane.netfilter import Netfilter, format_conntrack_l, parse_save
from netmodel.packet import Packet

NODE = "192.168.0.2"

ZONES_BY_IFACE = """*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -i eth1 -j CT --zone 1
-A PREROUTING -i eth2 -j CT --zone 2
COMMIT
"""


def router(text: str) -> Netfilter:
    return Netfilter(
        parse_save(text),
        local_addrs=[ip_address(NODE), ip_address("127.0.0.1")],
        iface_addrs={"eth0": [ip_address(NODE)]},
    )


def udp(src: str, dst: str, sport: int, dport: int) -> Packet:
    return Packet.make(src, dst, "udp", sport, dport)


def test_same_tuple_in_two_zones_is_two_connections() -> None:
    nf = router(ZONES_BY_IFACE)
    p = udp("10.0.0.1", "10.9.9.9", 40000, 53)
    first = nf.traverse(p, in_iface="eth1")
    second = nf.traverse(p, in_iface="eth2")
    assert (first.verdict, first.ctstate) == ("ACCEPT", "NEW")
    # zone 2 does not see zone 1's connection: a new one, confirmed beside it (no clash)
    assert (second.verdict, second.ctstate) == ("ACCEPT", "NEW")
    entries = nf.conntrack.entries()
    assert [(c.zone_orig, c.zone_reply) for c in entries] == [(1, 1), (2, 2)]
    assert entries[0].orig == entries[1].orig

    # a reply in zone 1 finds zone 1's connection only; zone 0 finds neither
    reply = udp("10.9.9.9", "10.0.0.1", 53, 40000)
    assert nf.traverse(reply, in_iface="eth1").ctstate == "ESTABLISHED"
    assert [c.seen_reply for c in nf.conntrack.entries()] == [True, False]
    assert nf.traverse(reply, in_iface="eth3").ctstate == "NEW"


def test_without_zones_the_same_tuple_is_one_connection() -> None:
    nf = router(ZONES_BY_IFACE.replace("--zone 1", "--zone 0").replace("--zone 2", "--zone 0"))
    p = udp("10.0.0.1", "10.9.9.9", 40000, 53)
    nf.traverse(p, in_iface="eth1")
    nf.traverse(p, in_iface="eth2")
    assert len(nf.conntrack.entries()) == 1


def test_nat_looks_for_a_free_tuple_in_the_connection_zone() -> None:
    nf = router(
        ZONES_BY_IFACE
        + """*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -o eth0 -j MASQUERADE
COMMIT
"""
    )
    a = nf.traverse(udp("10.0.0.1", "10.9.9.9", 40000, 53), in_iface="eth1")
    b = nf.traverse(udp("10.0.0.2", "10.9.9.9", 40000, 53), in_iface="eth2")
    c = nf.traverse(udp("10.0.0.3", "10.9.9.9", 40000, 53), in_iface="eth1")
    # the same reply tuple (10.9.9.9:53 -> NODE:40000) is free in zone 2, taken in zone 1
    assert a.snat == (ip_address(NODE), 40000)
    assert b.snat == (ip_address(NODE), 40000)
    assert c.snat is not None and c.snat[1] != 40000
    # replies to NODE:40000 are un-NATed by their own zone's connection
    back = udp("10.9.9.9", NODE, 53, 40000)
    r1 = nf.traverse(back, in_iface="eth1")
    r2 = nf.traverse(back, in_iface="eth2")
    assert (r1.ctstate, r1.packet.dst) == ("ESTABLISHED", ip_address("10.0.0.1"))
    assert (r2.ctstate, r2.packet.dst) == ("ESTABLISHED", ip_address("10.0.0.2"))


def test_zone_orig_leaves_replies_in_zone_0() -> None:
    text = ZONES_BY_IFACE.replace("-i eth1 -j CT --zone 1", "-i eth1 -j CT --zone-orig 7")
    nf = router(text)
    nf.traverse(udp("10.0.0.1", "10.9.9.9", 40000, 53), in_iface="eth1")
    # a reply arriving without a template (zone 0) finds the connection's reply tuple
    r = nf.traverse(udp("10.9.9.9", "10.0.0.1", 53, 40000), in_iface="eth0")
    assert r.ctstate == "ESTABLISHED"
    # the original direction without the template is another connection
    assert nf.traverse(udp("10.0.0.1", "10.9.9.9", 40000, 53), in_iface="eth0").ctstate == "NEW"

    both = router(ZONES_BY_IFACE.replace("--zone 1", "--zone 7"))
    both.traverse(udp("10.0.0.1", "10.9.9.9", 40000, 53), in_iface="eth1")
    # --zone 7 covers both directions: a zone-0 reply does not belong to it
    r = both.traverse(udp("10.9.9.9", "10.0.0.1", 53, 40000), in_iface="eth0")
    assert r.ctstate == "NEW"


def test_first_template_wins_and_mark_zones() -> None:
    nf = router(
        """*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -i eth1 -j CT --zone 7
-A PREROUTING -i eth1 -j CT --zone 8
-A PREROUTING -i eth1 -j NOTRACK
-A PREROUTING -i eth2 -j MARK --set-mark 0x10005
-A PREROUTING -i eth2 -j CT --zone mark
COMMIT
"""
    )
    t1 = nf.traverse(udp("10.0.0.1", "10.9.9.9", 40000, 53), in_iface="eth1")
    t2 = nf.traverse(udp("10.0.0.1", "10.9.9.9", 40000, 53), in_iface="eth2")
    assert (t1.ctstate, t2.ctstate) == ("NEW", "NEW")
    zones = [(c.zone_orig, c.zone_reply) for c in nf.conntrack.entries()]
    assert zones == [(7, 7), (5, 5)]  # the mark's low 16 bits


# ``conntrack -L`` lines of the kernel (conntrack v1.4.7) for these connections, made in a
# namespace over lo with OUTPUT rules; timeouts read 29 s after one second
KERNEL_LINES = {
    "--zone 7": "udp      17 29 src=127.0.0.1 dst=127.0.0.1 sport=32859 dport=4444 [UNREPLIED]"
    " src=127.0.0.1 dst=127.0.0.1 sport=4444 dport=32859 mark=0 zone=7 use=1",
    "--zone-orig 9": "udp      17 29 src=127.0.0.1 dst=127.0.0.1 sport=39957 dport=1111"
    " zone-orig=9 [UNREPLIED] src=127.0.0.1 dst=127.0.0.1 sport=1111 dport=39957 mark=0 use=1",
    "--zone-reply 5": "udp      17 29 src=127.0.0.1 dst=127.0.0.1 sport=53897 dport=2222"
    " [UNREPLIED] src=127.0.0.1 dst=127.0.0.1 sport=2222 dport=53897 zone-reply=5 mark=0 use=1",
}


def test_conntrack_l_prints_zones_as_the_tool_does() -> None:
    from dataplane.netfilter import SimClock

    for option, want in KERNEL_LINES.items():
        words = want.split()
        sport, dport = int(words[5].split("=")[1]), int(words[6].split("=")[1])
        clock = SimClock()
        nf = Netfilter(
            parse_save(f"*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
                       f"-A OUTPUT -p udp -j CT {option}\nCOMMIT\n"),
            local_addrs=[ip_address("127.0.0.1")],
            clock=clock,
        )
        nf.traverse(udp("127.0.0.1", "127.0.0.1", sport, dport), origin="out")
        clock.advance(1)
        assert format_conntrack_l(nf.conntrack) == want + "\n", option
