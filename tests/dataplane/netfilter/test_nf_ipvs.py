"""IPVS scheduling (rr, wrr, lc, sh, persistence) and its place in the packet path."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from dataplane.netfilter import Netfilter, SimClock, parse_save
from dataplane.netfilter.ipvs import IpvsEngine, IpvsState, sh_bucket, virtual_server
from netmodel.packet import Packet

VIP = "10.96.0.10"
RS = [("10.244.1.2", 8080), ("10.244.2.3", 8080), ("10.244.3.4", 8080)]


def host(*vss: object, clock: SimClock | None = None) -> Netfilter:
    state = IpvsState.of(vss)  # type: ignore[arg-type]
    return Netfilter(
        parse_save(""),
        ipvs=IpvsEngine(state),
        clock=clock,
        local_addrs=[ip_address("192.168.0.2"), ip_address(VIP)],
        iface_addrs={"eth0": [ip_address("192.168.0.2")]},
    )


def syn(src: str, sport: int, dst: str = VIP, dport: int = 80) -> Packet:
    return Packet.make(src, dst, "tcp", sport, dport, flags=frozenset({"SYN"}))


def dest(nf: Netfilter, src: str, sport: int) -> str:
    t = nf.traverse(syn(src, sport))
    assert t.verdict == "ACCEPT" and t.dnat is not None
    return f"{t.dnat[0]}:{t.dnat[1]}"


def test_rr_cycles_per_virtual_server_and_path() -> None:
    nf = host(virtual_server(VIP, "tcp", 80, RS))
    got = [dest(nf, "203.0.113.2", 1000 + i) for i in range(6)]
    assert got == [f"{a}:{p}" for a, p in RS] * 2
    t = nf.traverse(syn("203.0.113.2", 2000))
    assert t.hooks == ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING")
    assert t.delivery == "forward"
    ipvs = [r for r in t.records if r.table == "ipvs"]
    assert ipvs and ipvs[0].effect.startswith("schedule rr -> ")
    # the reply is un-NATed back to the virtual address
    back = nf.traverse(
        Packet.make(
            str(t.packet.dst), "203.0.113.2", "tcp", 8080, 2000, flags=frozenset({"SYN", "ACK"})
        )
    )
    assert (str(back.packet.src), back.packet.sport) == (VIP, 80)


def test_enumeration_gives_each_real_server_equally() -> None:
    nf = host(virtual_server(VIP, "tcp", 80, RS))
    branches = nf.enumerate(syn("203.0.113.2", 1000))
    assert [f"{b.result.dnat[0]}" for b in branches if b.result.dnat] == [a for a, _ in RS]
    assert [b.probability for b in branches] == pytest.approx([1 / 3] * 3)
    wrr = host(
        virtual_server(
            VIP, "tcp", 80, [(a, p, w) for (a, p), w in zip(RS, (3, 1, 0), strict=True)], "wrr"
        )
    )
    probs = {
        str(b.result.dnat[0]): b.probability
        for b in wrr.enumerate(syn("1.1.1.1", 1))
        if b.result.dnat
    }
    assert probs == pytest.approx({"10.244.1.2": 0.75, "10.244.2.3": 0.25})


def test_wrr_sequence_follows_weights() -> None:
    nf = host(virtual_server(VIP, "tcp", 80, [("10.0.0.1", 80, 3), ("10.0.0.2", 80, 1)], "wrr"))
    seq = [dest(nf, "1.1.1.1", 100 + i).split(":")[0] for i in range(8)]
    assert seq.count("10.0.0.1") == 6 and seq.count("10.0.0.2") == 2
    assert seq[:4] == ["10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2"]


def test_lc_prefers_the_least_loaded() -> None:
    nf = host(virtual_server(VIP, "tcp", 80, RS[:2], "lc"))
    first = dest(nf, "1.1.1.1", 1)
    second = dest(nf, "1.1.1.1", 2)
    assert first != second
    third = dest(nf, "1.1.1.1", 3)
    assert third == first  # tie again: first in list


def test_sh_is_a_function_of_the_client() -> None:
    nf = host(virtual_server(VIP, "tcp", 80, RS, "sh"))
    for c in ("1.1.1.1", "8.8.4.4", "203.0.113.77"):
        picks = {dest(nf, c, 1000 + i) for i in range(5)}
        assert len(picks) == 1
        assert nf.enumerate(syn(c, 5))[0].probability == 1.0
    spread = {dest(nf, f"10.9.{i}.{i * 7 % 255}", 1) for i in range(60)}
    assert len(spread) == 3
    assert 0 <= sh_bucket(ip_address("1.2.3.4")) < 256


def test_persistence_pins_until_idle_timeout() -> None:
    clock = SimClock()
    nf = host(virtual_server(VIP, "tcp", 80, RS, "rr", persistent_timeout=300), clock=clock)
    pinned = dest(nf, "1.1.1.1", 1)
    for i in range(5):
        clock.advance(200)
        assert dest(nf, "1.1.1.1", 10 + i) == pinned
    other = dest(nf, "2.2.2.2", 1)
    assert other != pinned
    clock.advance(301)
    assert dest(nf, "1.1.1.1", 99) != pinned  # template expired; rr moved on


def test_no_real_server_drops() -> None:
    nf = host(virtual_server(VIP, "tcp", 80, [("10.0.0.1", 80, 0)]))
    t = nf.traverse(syn("1.1.1.1", 1))
    assert t.verdict == "DROP"
    assert any(r.effect == "no real server: DROP" for r in t.records)


def test_ipvsadm_save_text_parses_into_virtual_servers() -> None:
    from dataplane.netfilter import parse_ipvsadm
    from netmodel.errors import InputError

    text = (
        "-A -t 10.96.0.10:80 -s rr -p 10800\n"
        "-a -t 10.96.0.10:80 -r 10.244.1.2:8080 -m -w 1\n"
        "-a -t 10.96.0.10:80 -r 10.244.2.3:8080 -m -w 3\n"
        "-A -u [fd00::a]:53 -s sh\n"
    )
    tcp, udp = parse_ipvsadm(text)
    assert (str(tcp.address), tcp.protocol, tcp.port, tcp.scheduler) == (VIP, "tcp", 80, "rr")
    assert tcp.persistent_timeout == 10800
    assert [(str(r.address), r.port, r.weight) for r in tcp.real_servers] == [
        ("10.244.1.2", 8080, 1),
        ("10.244.2.3", 8080, 3),
    ]
    assert (str(udp.address), udp.port, udp.real_servers) == ("fd00::a", 53, ())
    with pytest.raises(InputError, match=r"<x>:1: -a -t 1.2.3.4:80"):
        parse_ipvsadm("-a -t 1.2.3.4:80 -r 10.0.0.1:80\n", source="<x>")


def test_snapshot_restore_covers_scheduler_positions_and_templates() -> None:
    vip2 = "10.96.0.11"
    nf = host(
        virtual_server(VIP, "tcp", 80, RS, "rr"),
        virtual_server(vip2, "tcp", 80, RS, "rr", persistent_timeout=300),
    )
    nf.local_addrs = nf.local_addrs | {int(ip_address(vip2))}
    assert dest(nf, "1.1.1.1", 1) == "10.244.1.2:8080"
    state = nf.snapshot()
    ahead = [dest(nf, "1.1.1.1", 2), dest(nf, "1.1.1.1", 3)]
    assert nf.traverse(syn("9.9.9.9", 5, vip2)).dnat == (ip_address(RS[0][0]), 8080)
    nf.restore(state)
    assert [dest(nf, "1.1.1.1", 2), dest(nf, "1.1.1.1", 3)] == ahead  # rr position
    # 9.9.9.9's template is gone: another client takes the first server, 9.9.9.9 the next
    assert nf.traverse(syn("8.8.8.8", 6, vip2)).dnat == (ip_address(RS[0][0]), 8080)
    assert nf.traverse(syn("9.9.9.9", 7, vip2)).dnat == (ip_address(RS[1][0]), 8080)


def test_ipvs_steals_in_input_and_owns_the_connection_translation() -> None:
    from dataplane.netfilter.conntrack import DST_NAT, IPVS

    nf = host(virtual_server(VIP, "tcp", 80, RS[:1]))
    first = syn("203.0.113.2", 4000)
    pre = nf.run_hook("PREROUTING", first, in_iface="eth0")
    assert pre.skb is not None
    res = nf.run_hook("INPUT", pre.skb, in_iface="eth0")
    assert res.verdict == "STOLEN" and res.skb is not None
    assert (str(res.skb.packet.dst), res.skb.packet.dport) == RS[0]
    assert any(r.table == "ipvs" and "schedule rr" in r.effect for r in res.records)
    out = nf.run_hook("OUTPUT", res.skb, out_iface="eth0")
    assert out.skb is not None
    nf.run_hook("POSTROUTING", out.skb, out_iface="eth0")
    (conn,) = nf.conntrack.entries()
    assert conn.status & IPVS and not conn.status & DST_NAT  # nf_nat leaves it alone
    # the reply is forwarded; IPVS rewrites its source in FORWARD
    reply = Packet.make(RS[0][0], "203.0.113.2", "tcp", 8080, 4000, flags=frozenset({"SYN", "ACK"}))
    back = nf.traverse(reply, in_iface="eth0")
    assert back.hooks == ("PREROUTING", "FORWARD", "POSTROUTING")
    assert (str(back.packet.src), back.packet.sport) == (VIP, 80)
    # a later packet still arrives for the virtual address: INPUT, then IPVS sends it on
    ack = Packet.make("203.0.113.2", VIP, "tcp", 4000, 80, flags=frozenset({"ACK"}))
    later = nf.traverse(ack, in_iface="eth0")
    assert later.hooks == ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING")
    assert (str(later.packet.dst), later.packet.dport) == RS[0] and later.ctstate == "ESTABLISHED"


def test_ipvs_to_a_local_real_server_goes_on_to_local_delivery() -> None:
    nf = host(virtual_server(VIP, "tcp", 80, [("192.168.0.2", 8080)]))
    t = nf.traverse(syn("203.0.113.2", 4001))
    assert t.hooks == ("PREROUTING", "INPUT") and t.delivery == "local"
    assert t.dnat == (ip_address("192.168.0.2"), 8080)
