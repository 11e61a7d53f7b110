"""nftables: kube-proxy's transaction parsed and evaluated in the same engine."""

from __future__ import annotations

from random import Random
from typing import Any

import pytest

from dataplane.netfilter import Flow, FlowTracer, Netfilter, SimClock, parse_save
from dataplane.netfilter.nft import NftEngine, NftError, parse_nft
from netmodel.errors import UnsupportedRuleError
from netmodel.packet import Packet


@pytest.fixture(scope="module")
def nft_tracer(overall_case: dict[str, Any]) -> FlowTracer:
    rs = parse_nft(overall_case["nftables"]["expected_nft_transaction"])
    return FlowTracer(parse_save(""), overall_case["node"]["localIPs"], nft=NftEngine(rs))


def test_transaction_is_parsed(overall_case: dict[str, Any]) -> None:
    rs = parse_nft(overall_case["nftables"]["expected_nft_transaction"])
    t = rs.tables[("ip", "kube-proxy")]
    assert t.comment == "rules for kube-proxy"
    pre = t.chains["filter-prerouting-pre-dnat"]
    assert (pre.type, pre.hook, pre.priority) == ("filter", "prerouting", -110)
    assert t.chains["nat-postrouting"].priority == 100
    sips = t.sets["service-ips"]
    assert sips.key == ("addr", "inet_proto", "inet_service") and sips.value == "verdict"
    assert len(sips.elements) == 9
    aff = t.sets["affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80"]
    assert aff.timeout == 10800 and aff.flags == ("dynamic", "timeout")
    assert len(t.chains["service-LAUZTJTB-ns4/svc4/tcp/p80"].rules) == 2


@pytest.mark.parametrize(
    ("src", "dst", "port", "output", "masq"),
    [
        ("10.0.0.2", "172.30.0.41", 80, "10.180.0.1:80", False),
        ("10.180.0.1", "172.30.0.41", 80, "10.180.0.1:80", True),
        ("192.168.0.2", "172.30.0.44", 80, "10.180.0.4:80, 10.180.0.5:80", True),
        ("203.0.113.2", "5.6.7.8", 80, "10.180.0.3:80", True),
        ("203.0.113.130", "5.6.7.8", 80, "DROP", False),
        ("10.0.0.2", "172.30.0.46", 80, "REJECT", False),
        ("203.0.113.2", "192.168.0.2", 3003, "10.180.0.3:80", True),
        ("203.0.113.2", "192.168.0.2", 3001, "DROP", False),
        ("203.0.113.2", "1.2.3.4", 80, "DROP", False),
        ("10.0.0.2", "1.2.3.4", 80, "10.180.0.2:80", False),
        ("192.168.0.2", "1.2.3.4", 80, "10.180.0.2:80", True),
        # nftables-only behaviour: unknown ClusterIP port rejected, unallocated IP dropped
        ("10.0.0.2", "172.30.0.41", 81, "REJECT", False),
        ("10.0.0.2", "172.30.0.99", 80, "DROP", False),
    ],
)
def test_nft_flows(
    nft_tracer: FlowTracer, src: str, dst: str, port: int, output: str, masq: bool
) -> None:
    r = nft_tracer.trace(Flow(src, dst, port))
    assert (r.upstream_output(), r.masquerade) == (output, masq)


def test_nft_trace_and_masquerade(nft_tracer: FlowTracer) -> None:
    t = nft_tracer.trace(Flow("203.0.113.2", "5.6.7.8", 80)).branches[0].result
    chains = [(r.table, r.chain, r.effect) for r in t.records if r.rule]
    assert (
        "nft:ip kube-proxy",
        "firewall-check",
        "goto firewall-HVFWP5L3-ns5/svc5/tcp/p80",
    ) in chains
    assert chains[-1][2] == "masquerade"
    assert str(t.packet.src) == "192.168.0.2" and t.packet.sport != 40000  # fully-random


def test_numgen_enumerates_each_endpoint(nft_tracer: FlowTracer) -> None:
    r = nft_tracer.trace(Flow("10.0.0.2", "172.30.0.44", 80))
    assert [(e.endpoint, e.probability) for e in r.endpoints] == [
        ("10.180.0.4:80", 0.5),
        ("10.180.0.5:80", 0.5),
    ]


def test_affinity_set_pins_client(overall_case: dict[str, Any]) -> None:
    text = overall_case["nftables"]["expected_nft_transaction"] + (
        "add element ip kube-proxy service-ips { 172.30.0.47 . tcp . 80 : goto svc7 }\n"
    )
    text = text.replace(
        "add chain ip kube-proxy services\n",
        """add chain ip kube-proxy services
add set ip kube-proxy aff-a { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }
add set ip kube-proxy aff-b { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; }
add chain ip kube-proxy ep-a
add chain ip kube-proxy ep-b
add chain ip kube-proxy svc7
add rule ip kube-proxy ep-a update @aff-a { ip saddr }
add rule ip kube-proxy ep-a meta l4proto tcp dnat to 10.1.0.1:80
add rule ip kube-proxy ep-b update @aff-b { ip saddr }
add rule ip kube-proxy ep-b meta l4proto tcp dnat to 10.1.0.2:80
add rule ip kube-proxy svc7 ip saddr @aff-a goto ep-a
add rule ip kube-proxy svc7 ip saddr @aff-b goto ep-b
add rule ip kube-proxy svc7 numgen random mod 2 vmap { 0 : goto ep-a , 1 : goto ep-b }
""",
    )
    clock = SimClock()
    nf = Netfilter(parse_save(""), nft=NftEngine(parse_nft(text)), clock=clock, rng=Random(9))

    def go(sport: int, client: str = "10.0.0.9") -> tuple[str, int]:
        p = Packet.make(client, "172.30.0.47", "tcp", sport, 80, flags=frozenset({"SYN"}))
        t = nf.traverse(p)
        assert t.dnat is not None
        svc7 = [r.rule for r in t.records if r.chain == "svc7"]
        return str(t.dnat[0]), svc7[-1]

    first, rule = go(1000)
    assert rule == 3  # numgen chose
    again = [go(1001 + i) for i in range(20)]
    assert {ep for ep, _ in again} == {first} and {r for _, r in again} <= {1, 2}
    clock.advance(61)  # the affinity element expired: numgen chooses again
    assert go(3000)[1] == 3
    others = {go(4000, f"10.0.1.{i}")[0] for i in range(1, 40)}
    assert others == {"10.1.0.1", "10.1.0.2"}


def test_nested_list_ruleset_form() -> None:
    text = """table ip t {
	set s {
		type ipv4_addr
		elements = { 10.0.0.1, 10.0.0.2 }
	}
	map m {
		type inet_proto . inet_service : verdict
		elements = { tcp . 80 : drop, udp . 53 : accept }
	}
	chain fwd {
		type filter hook forward priority 0; policy accept;
		ip saddr @s meta l4proto . th dport vmap @m
		ip daddr 10.9.0.0/16 reject with tcp reset comment "no"
	}
}
"""
    nf = Netfilter(parse_save(""), nft=NftEngine(parse_nft(text)))
    assert nf.traverse(Packet.make("10.0.0.1", "10.5.0.1", "tcp", 1, 80)).verdict == "DROP"
    assert nf.traverse(Packet.make("10.0.0.3", "10.5.0.1", "tcp", 1, 80)).verdict == "ACCEPT"
    t = nf.traverse(Packet.make("10.0.0.3", "10.9.0.1", "tcp", 1, 80))
    assert (t.verdict, t.reject_with) == ("REJECT", "tcp-reset")


def test_bitwise_symbols_as_nft_list_prints_them() -> None:
    """``nft list`` prints kube-proxy's ``and``/``xor`` as ``&``/``^`` (and ``or`` as
    ``|``): both spellings mean the same (the masquerading chain of a real node)."""
    text = """table ip t {
	chain mark-for-masquerade {
		meta mark set meta mark | 0x00004000
	}
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip saddr 10.0.0.1 jump mark-for-masquerade
	}
	chain post {
		type nat hook postrouting priority srcnat; policy accept;
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark ^ 0x00004000
		masquerade fully-random
	}
}
"""
    words = text.replace(" | ", " or ").replace(" & ", " and ").replace(" ^ ", " xor ")
    for t in (text, words):
        nf = Netfilter(parse_save(""), nft=NftEngine(parse_nft(t)))
        marked = nf.traverse(Packet.make("10.0.0.1", "10.5.0.1", "udp", 1, 53))
        plain = nf.traverse(Packet.make("10.0.0.2", "10.5.0.1", "udp", 1, 53))
        assert (marked.masquerade, plain.masquerade) == (True, False), t


@pytest.mark.parametrize(
    ("text", "err"),
    [
        (
            "add table ip t\nadd chain ip t c\nadd rule ip t c osf name Linux accept\n",
            UnsupportedRuleError,
        ),
        ("add table ip t\nadd chain ip t c\nadd rule ip t c jump nowhere\n", NftError),
        ("add table ip t\nadd rule ip t c accept\n", NftError),
        ("add table ip t\nadd chain ip t c\nadd rule ip t c ip daddr @nope accept\n", NftError),
        ("add table arp t\n", UnsupportedRuleError),
    ],
)
def test_nft_errors_name_the_line(text: str, err: type[Exception]) -> None:
    with pytest.raises(err, match=r"<nft>:\d+: "):
        parse_nft(text)


def test_transaction_applies_onto_existing_state(overall_case: dict[str, Any]) -> None:
    base = parse_nft(overall_case["nftables"]["expected_nft_transaction"])
    upd = parse_nft(
        "delete element ip kube-proxy no-endpoint-services { 172.30.0.46 . tcp . 80 }\n"
        "flush chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80\n",
        base=base,
    )
    t = upd.tables[("ip", "kube-proxy")]
    assert len(t.sets["no-endpoint-services"].elements) == 2
    assert t.chains["service-ULMVA6XW-ns1/svc1/tcp/p80"].rules == []
    assert len(base.tables[("ip", "kube-proxy")].sets["no-endpoint-services"].elements) == 3
