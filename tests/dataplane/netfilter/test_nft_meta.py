"""nft metadata statements in the engine alone (the kernel comparisons are in
tests/kernel/test_nft_meta_*.py): the values they store, where the stored values go
(the next hook, a follow-up hook call, the trace) and the quoted interface names
``nft list`` prints."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from dataplane.netfilter.evaluate import Netfilter
from dataplane.netfilter.nft import NftEngine, NftError, parse_nft
from dataplane.netfilter.nftmeta import format_tc_handle, parse_tc_handle
from netmodel.packet import Packet

SYN = frozenset({"SYN"})


def host(text: str) -> Netfilter:
    return Netfilter(nft=NftEngine(parse_nft(text, source="r.nft")), local_addrs=[])


def walk(nf: Netfilter) -> list[tuple[str, str, int, str]]:
    t = nf.traverse(Packet.make("10.0.0.1", "10.0.0.2", "tcp", 1000, 80, flags=SYN))
    return [(r.hook, r.chain, r.rule, r.effect) for r in t.records if r.table.startswith("nft:")]


def test_quoted_interface_names_match() -> None:
    nf = host(
        """table ip t {
        chain c { type filter hook prerouting priority 0; iifname "eth0" counter; iifname "eth*" counter; iifname "lo" counter; }
        }"""
    )
    assert [r[2] for r in walk(nf) if r[2]] == [1, 2]


@pytest.mark.parametrize(
    ("text", "value", "shown"),
    [
        ("none", 0, "none"),
        ("root", 0xFFFFFFFF, "root"),
        ("1:2", 0x10002, "1:2"),
        ("abcd:1", 0xABCD0001, "abcd:1"),
        ("10", 10, "0:a"),
        ("0x1ffff", 0x1FFFF, "1:ffff"),
        ("65536", 0x10000, "1:0"),
        # nft 1.0.6 reads a number with strtoull and keeps 32 bits; a word reads as 0
        ("0x100000000", 0, "none"),
        ("foo", 0, "none"),
    ],
)
def test_tc_handles_read_and_print_as_nft_does(text: str, value: int, shown: str) -> None:
    assert parse_tc_handle(text) == value
    assert format_tc_handle(value) == shown


def test_priority_and_mark_stay_with_the_packet_across_hooks_and_reset_on_forward() -> None:
    """Set in PREROUTING: INPUT still sees both; FORWARD sees the mark, but the priority
    ``ip_forward`` recomputed from the TOS (0: svclab packets carry TOS 0)."""
    text = """table ip t {
      chain pre { type filter hook prerouting priority 0; meta priority set 1:2 meta mark set 9; }
      chain fw { type filter hook forward priority 0; meta priority none meta mark 9 counter; meta priority 1:2 counter; }
      chain inp { type filter hook input priority 0; meta priority 1:2 meta mark 9 counter; }
    }"""
    fwd = host(text)
    assert [(h, r) for h, _c, r, _e in walk(fwd) if r] == [("PREROUTING", 1), ("FORWARD", 1)]
    local = host(text)
    local.local_addrs = frozenset({int(ip_address("10.0.0.2"))})
    t = local.traverse(Packet.make("10.0.0.1", "10.0.0.2", "tcp", 1000, 80, flags=SYN))
    assert [(r.hook, r.rule) for r in t.records if r.table.startswith("nft:") and r.rule] == [
        ("PREROUTING", 1),
        ("INPUT", 1),
    ]
    skb = t.skb
    assert skb is not None and skb.priority == 0x10002 and not skb.nftrace


def test_run_hook_carries_nftrace_and_priority_to_the_next_hook() -> None:
    nf = host(
        """table ip t {
      chain pre { type filter hook prerouting priority -301; meta nftrace set 1 meta priority set 3:4; }
      chain post { type filter hook postrouting priority 0; meta priority 3:4 counter; }
    }"""
    )
    pre = nf.run_hook("PREROUTING", Packet.make("10.0.0.1", "10.0.0.2", "udp", 1, 2), in_iface="a")
    assert pre.skb is not None and pre.skb.nftrace and pre.skb.priority == 0x30004
    post = nf.run_hook("POSTROUTING", pre.skb, out_iface="b")
    assert [(r.rule, r.effect) for r in post.records if r.table.startswith("nft:")] == [
        (1, "match"),
        (0, "policy accept"),
    ]


def test_the_trace_names_what_a_statement_set() -> None:
    nf = host(
        """table ip t {
      chain pre { type filter hook prerouting priority -301; meta nftrace set 1; meta mark set mark or 0x4000 ct mark set meta mark; }
    }"""
    )
    assert walk(nf) == [
        ("PREROUTING", "pre", 1, "nftrace set 1"),
        ("PREROUTING", "pre", 2, "mark set meta mark | 0x4000, ct mark set meta mark"),
        ("PREROUTING", "pre", 0, "policy accept"),
    ]


def test_reading_ct_mark_without_a_connection_ends_the_rule() -> None:
    """At priority -300 conntrack has not run: ``meta mark set ct mark`` breaks the rule
    (its counter and verdict do not run); ``ct mark set 1`` does nothing and goes on."""
    nf = host(
        """table ip t {
      chain raw { type filter hook prerouting priority -300; meta mark set ct mark drop; ct mark set 1 counter; }
    }"""
    )
    assert walk(nf) == [
        ("PREROUTING", "raw", 2, "ct mark set 0x1"),
        ("PREROUTING", "raw", 0, "policy accept"),
    ]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("meta nftrace set 2", "Value 2 exceeds valid range 0-1"),
        ("meta nftrace 1", "Operation not supported"),
        ("meta mark set 0x100000000", "Value 4294967296 exceeds valid range 0-4294967295"),
        ("meta mark set foo", "Could not parse packet mark"),
        ("meta priority set meta mark", "expected TC classid, expression has type packet mark"),
        ("ct mark set mark or ct mark", "Right hand side of binary operation must be constant"),
        ("priority set 1:2", "syntax error, unexpected priority"),
        ("meta priority set 10000:1", "syntax error, unexpected colon"),
    ],
)
def test_refused_with_the_line(statement: str, message: str) -> None:
    with pytest.raises(NftError) as e:
        parse_nft(f"add table ip x\nadd chain ip x c\nadd rule ip x c {statement}\n", source="f")
    assert str(e.value).startswith(f"f:3: add rule ip x c {statement}: ")
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_a_refusal_in_the_nested_form_names_the_line_of_the_file() -> None:
    """``nft list ruleset`` text is read through a flat form; the error names the line
    the statement has in the text given (here 10), as ``nft -f`` does."""
    text = """table ip t {
        set s {
                type ipv4_addr
                elements = { 10.0.0.1,
                             10.0.0.2 }
        }
        chain c {
                type filter hook prerouting priority 0; policy accept;
                ip saddr @s counter
                meta nftrace set 7
        }
}
"""
    with pytest.raises(NftError) as e:
        parse_nft(text, source="ruleset.txt")
    assert str(e.value) == (
        "ruleset.txt:10: add rule ip t c meta nftrace set 7: Value 7 exceeds valid range 0-1"
    )
