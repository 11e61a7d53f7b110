"""Options svclab accepts are evaluated with the kernel's semantics: ``-m limit`` as a
token bucket on the simulated clock, ipset ``nomatch`` entries as holes, IPVS forwarding
methods other than masquerading refused naming the line."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from dataplane.netfilter import Netfilter, parse_ipvsadm, parse_save
from dataplane.netfilter.conntrack import SimClock
from dataplane.netfilter.ipset import parse_ipset_save
from dataplane.netfilter.limit import TokenBucket
from netmodel.errors import UnsupportedRuleError
from netmodel.packet import Packet

LIMIT = """*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -p udp -m limit --limit 2/second --limit-burst 3 -j ACCEPT
-A FORWARD -p udp -j DROP
COMMIT
"""


def _udp(sport: int) -> Packet:
    return Packet.make("10.0.0.1", "10.9.9.9", "udp", sport, 53)


def test_limit_is_a_token_bucket_on_the_simulated_clock() -> None:
    clock = SimClock()
    nf = Netfilter(parse_save(LIMIT), clock=clock, local_addrs=[ip_address("192.168.0.2")])
    # the bucket starts full: a burst of 3, then the rate (2 per second) holds
    got = [nf.traverse(_udp(1000 + i)).verdict for i in range(5)]
    assert got == ["ACCEPT", "ACCEPT", "ACCEPT", "DROP", "DROP"]
    clock.advance(0.5)  # one token back
    assert [nf.traverse(_udp(2000 + i)).verdict for i in range(2)] == ["ACCEPT", "DROP"]
    clock.advance(10)  # refilled, but never above the burst
    got = [nf.traverse(_udp(3000 + i)).verdict for i in range(4)]
    assert got == ["ACCEPT", "ACCEPT", "ACCEPT", "DROP"]


def test_probing_does_not_drain_the_bucket() -> None:
    clock = SimClock()
    nf = Netfilter(parse_save(LIMIT), clock=clock, local_addrs=[ip_address("192.168.0.2")])
    for i in range(10):
        assert nf.traverse(_udp(1000 + i), commit=False).verdict == "ACCEPT"
    assert [nf.traverse(_udp(2000 + i)).verdict for i in range(4)] == ["ACCEPT"] * 3 + ["DROP"]


def test_token_bucket_rates() -> None:
    b = TokenBucket(rate=1 / 60, burst=1)  # 1/minute
    assert b.take(0.0) and not b.take(30.0) and b.take(60.0) and not b.take(60.0)


@pytest.mark.parametrize(
    ("text", "per_second"),
    [("3/hour", 3 / 3600), ("10/s", 10.0), ("5/min", 5 / 60), ("1/d", 1 / 86400), ("7", 7.0)],
)
def test_limit_rates_parse_like_iptables(text: str, per_second: float) -> None:
    rs = parse_save(f"*filter\n-A INPUT -m limit --limit {text} -j ACCEPT\nCOMMIT\n")
    (m,) = rs.tables["filter"].chains["INPUT"].rules[0].matches
    assert m.per_second == pytest.approx(per_second)  # type: ignore[union-attr]


def test_ipset_nomatch_entries_are_holes() -> None:
    sets = parse_ipset_save(
        "create N hash:net family inet hashsize 1024 maxelem 65536\n"
        "add N 10.0.0.0/8\n"
        "add N 10.1.0.0/16 nomatch\n"
        "add N 10.1.2.0/24\n"
    )
    n = sets["N"]

    def has(a: str) -> bool:
        return n.contains((int(ip_address(a)),))

    assert has("10.2.0.1")  # in the /8
    assert not has("10.1.0.1")  # the most specific entry is the nomatch /16
    assert has("10.1.2.3")  # a more specific entry inside the hole
    assert not has("11.0.0.1")


def test_ipset_options_that_change_lookups_are_refused() -> None:
    with pytest.raises(UnsupportedRuleError, match=r"<s>:2: .*timeout"):
        parse_ipset_save("create N hash:ip\nadd N 10.0.0.1 timeout 5\n", source="<s>")
    with pytest.raises(Exception, match=r"<s>:2: .*nomatch needs a set type with a net"):
        parse_ipset_save("create N hash:ip\nadd N 10.0.0.1 nomatch\n", source="<s>")


@pytest.mark.parametrize(
    ("flag", "name"), [("-g", "direct routing"), ("-i", "tunnelling"), ("", "direct routing")]
)
def test_ipvs_forwarding_other_than_masquerading_is_refused_naming_the_line(
    flag: str, name: str
) -> None:
    text = f"-A -t 10.96.0.10:80 -s rr\n-a -t 10.96.0.10:80 -r 10.244.1.2:8080 {flag} -w 1\n"
    with pytest.raises(UnsupportedRuleError, match=rf"<x>:2: .*\({name}\) is not emulated"):
        parse_ipvsadm(text, source="<x>")
    (vs,) = parse_ipvsadm(text.replace(f" {flag} -w", " -m -w").replace("  ", " "), source="<x>")
    assert len(vs.real_servers) == 1


def _nat(rules: str) -> Netfilter:
    text = (
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
        f":POSTROUTING ACCEPT [0:0]\n{rules}\nCOMMIT\n"
    )
    return Netfilter(parse_save(text), local_addrs=[ip_address("192.168.0.2")])


def _tcp(src: str, dst: str, sport: int = 40000, dport: int = 80) -> Packet:
    return Packet.make(src, dst, "tcp", sport, dport, flags=frozenset({"SYN"}))


@pytest.mark.parametrize("persistent", [False, True])
def test_snat_address_range_hashes_source_and_destination_unless_persistent(
    persistent: bool,
) -> None:
    flag = " --persistent" if persistent else ""
    nf = _nat(f"-A POSTROUTING -p tcp -j SNAT --to-source 10.0.0.1-10.0.0.8{flag}")
    chosen = {
        str(nf.traverse(_tcp("172.16.0.5", f"198.51.100.{d}")).snat[0])  # type: ignore[index]
        for d in range(1, 40)
    }
    if persistent:  # the same mapping for a source, whatever the destination
        assert len(chosen) == 1
    else:
        assert len(chosen) > 1
    assert all(c.startswith("10.0.0.") for c in chosen)


@pytest.mark.parametrize("persistent", [False, True])
def test_dnat_address_range_is_persistent_per_source_with_persistent(persistent: bool) -> None:
    flag = " --persistent" if persistent else ""
    nf = _nat(f"-A PREROUTING -p tcp -j DNAT --to-destination 10.1.0.1-10.1.0.8{flag}")
    chosen = {
        str(nf.traverse(_tcp("172.16.0.5", f"192.0.2.{d}")).dnat[0])  # type: ignore[index]
        for d in range(1, 40)
    }
    assert (len(chosen) == 1) == persistent


@pytest.mark.parametrize("flag", ["", " --random", " --random-fully"])
def test_snat_random_never_keeps_the_source_port(flag: str) -> None:
    nf = _nat(f"-A POSTROUTING -p tcp -j SNAT --to-source 10.0.0.9:1000-1999{flag}")
    ports = {
        nf.traverse(_tcp("172.16.0.1", f"198.51.100.{i}", sport=1500)).snat[1]  # type: ignore[index]
        for i in range(1, 30)
    }
    if flag:
        assert len(ports) > 1 and all(1000 <= p <= 1999 for p in ports)
    else:  # the original port is kept while the tuple stays unique (each destination differs)
        assert ports == {1500}


def test_dnat_random_picks_a_random_port_of_the_range() -> None:
    nf = _nat("-A PREROUTING -p tcp -j DNAT --to-destination 10.1.0.1:8000-8099 --random")
    ports = {
        nf.traverse(_tcp(f"172.16.0.{i}", "192.0.2.1", dport=8050)).dnat[1]  # type: ignore[index]
        for i in range(1, 30)
    }
    assert len(ports) > 1 and all(8000 <= p <= 8099 for p in ports)
    plain = _nat("-A PREROUTING -p tcp -j DNAT --to-destination 10.1.0.1:8000-8099")
    assert plain.traverse(_tcp("172.16.0.1", "192.0.2.1", dport=8050)).dnat[1] == 8050  # type: ignore[index]


def test_ct_options_not_evaluated_are_refused_naming_the_line() -> None:
    # zones are evaluated (test_nf_zones.py); helpers, events and timeouts are not
    text = "*raw\n-A PREROUTING -i eth1 -j CT --zone 7 --ctevents new\nCOMMIT\n"
    with pytest.raises(UnsupportedRuleError, match=r"^<r>:2: .*conntrack events are not emulated"):
        parse_save(text, source="<r>")
    parse_save(text.replace(" --ctevents new", ""))
