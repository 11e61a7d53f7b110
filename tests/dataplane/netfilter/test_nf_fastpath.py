"""The rule parser's path for common rules (``ruleparse._common_rule``) gives exactly
what the general parser gives: equal rules, or the same error, for every corpus entry
and for random rules built from the options it handles and their near misses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nfcorpus import load

import dataplane.netfilter.ruleparse as rp
from dataplane.netfilter import parse_save


def _both(fn: object, *args: object, **kw: object) -> tuple[object, object]:
    out = []
    for fast in (True, False):
        old = rp.FAST_PATH
        rp.FAST_PATH = fast
        try:
            out.append(fn(*args, **kw))  # type: ignore[operator]
        except Exception as e:  # the same error on both paths, whatever it is
            out.append((type(e).__name__, str(e)))
        finally:
            rp.FAST_PATH = old
    return out[0], out[1]


@pytest.mark.parametrize("entry", [e for e in load("iptables")], ids=lambda e: e.id)
def test_corpus_parses_the_same_on_both_paths(entry: object) -> None:
    fast, general = _both(parse_save, entry.text, family=entry.family)  # type: ignore[attr-defined]
    assert fast == general


WORDS = st.sampled_from(
    [
        "!", "-s", "-d", "10.0.0.1", "10.244.0.0/16", "::1", "300.1.1.1", "-p", "tcp", "udp",
        "TCP", "6", "icmp", "all", "-m", "comment", "--comment", "a b", "tcp", "udp", "sctp",
        "--dport", "--sport", "80", "1000:2000", "70000", "-j", "-g", "KUBE-X", "ACCEPT",
        "DNAT", "--to-destination", "10.1.1.1:8080", "10.1.1.1", "MARK", "REJECT", "-i",
        "eth0", "--syn", "--destination-port",
    ]
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(WORDS, max_size=12), st.sampled_from(["filter", "nat"]))
def test_random_rules_parse_the_same_on_both_paths(words: list[str], table: str) -> None:
    def parse() -> object:
        return rp.parse_rule("KUBE-X" if "-j" in words else "PREROUTING", list(words),
                             table=table, family=4, line=3, source="<t>")

    fast, general = _both(parse)
    assert fast == general


CHUNKS = st.sampled_from(
    [
        ["-s", "10.0.0.1"], ["!", "-s", "10.244.0.0/16"], ["-d", "10.96.0.10/32"],
        ["-d", "fd00::1"], ["-p", "tcp"], ["-p", "udp"], ["!", "-p", "tcp"], ["-p", "icmp"],
        ["-m", "comment", "--comment", "ns/svc:p cluster IP"], ["-m", "tcp"], ["-m", "udp"],
        ["--dport", "80"], ["!", "--dport", "80"], ["--sport", "1024:65535"],
        ["--dport", "99999"], ["-j", "KUBE-MARK-MASQ"], ["-j", "ACCEPT"], ["-j", "DNAT"],
        ["--to-destination", "10.244.1.2:8080"], ["--to-destination", "10.244.1.2"],
        ["-j", "RETURN"], ["!", "--comment", "x"], ["-g", "KUBE-X"],
    ]
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(CHUNKS, max_size=7), st.sampled_from(["filter", "nat"]),
       st.sampled_from(["PREROUTING", "OUTPUT", "KUBE-SEP-X"]))
def test_rules_of_common_pieces_parse_the_same_on_both_paths(
    chunks: list[list[str]], table: str, chain: str
) -> None:
    words = [w for c in chunks for w in c]

    def parse() -> object:
        return rp.parse_rule(chain, words, table=table, family=4, line=3, source="<t>")

    fast, general = _both(parse)
    assert fast == general
