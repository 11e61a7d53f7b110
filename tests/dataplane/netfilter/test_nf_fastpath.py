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


# whole lines for the line path (ruleparse.parse_common_line, taken by parse_save):
# canonical iptables-save spellings and near misses (escapes, bare words, odd spaces)
LINE_CHUNKS = st.sampled_from(
    [
        "-s 10.0.0.1/32", "! -s 10.244.0.0/16", "-d 10.96.0.10/32", "-d fd00::1/128",
        "-s 300.1.1.1", "-p tcp", "-p udp", "-p sctp", "! -p tcp", "-p TCP", "-p icmp",
        '-m comment --comment "ns/svc:p cluster IP"', "-m comment --comment bare",
        '-m comment --comment "a \\"q\\" b"', '-m comment --comment ""', "-m tcp",
        "-m udp", "-m sctp", "--dport 80", "! --dport 80", "--sport 1024:65535",
        "--dport 99999", "--dport 2000:1000", "-j KUBE-MARK-MASQ", "-j KUBE-SVC-X",
        "-j ACCEPT", "-j DNAT", "--to-destination 10.244.1.2:8080",
        "--to-destination 10.244.1.2", "-j RETURN", "-j REJECT", "-j MASQUERADE",
        "-j NOCHAIN", "-j REDIRECT", "-g KUBE-SVC-X", " ", "!",
        # whitespace str.split splits at, inside and between words
        "-s\t10.0.0.1/32", "\x1c", "\xa0", "-j\xa0ACCEPT", "--dport\x0b80",
    ]
)


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(LINE_CHUNKS, max_size=8),
    st.sampled_from(["filter", "nat"]),
    st.sampled_from(["PREROUTING", "OUTPUT", "POSTROUTING", "KUBE-SVC-X", "NOCHAIN"]),
    st.sampled_from(["", "[3:180] ", "[x:1] "]),
    st.lists(
        st.sampled_from(
            [
                ":KUBE-SVC-X - [0:0]", ":KUBE-SVC-X - [0:0]", ":KUBE-SVC-X - [5:7]",
                ":KUBE-MARK-MASQ - [0:0]", ":OUTPUT - [0:0]", ":OUTPUT ACCEPT [0:0]",
                ":KUBE-X-" + "A" * 21 + " - [0:0]", ":KUBE-X-" + "A" * 20 + " - [0:0]",
                ":KUBE-SVC-X  -  [0:0]", ":KUBE-SVC-X ACCEPT [0:0]", ":KUBE-SVC-X -",
            ]
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_whole_lines_parse_the_same_on_both_paths(
    chunks: list[str], table: str, chain: str, counters: str, decls: list[str]
) -> None:
    text = (
        f"*{table}\n{chr(10).join(decls)}\n:KUBE-MARK-MASQ - [0:0]\n"
        f"{counters}-A {chain} {' '.join(chunks)}\nCOMMIT\n"
    )
    fast, general = _both(parse_save, text, source="<t>")
    assert fast == general


KUBE_PROXY_LINES = [
    '-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment "kube-system/kube-dns:dns'
    ' cluster IP" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU',
    '-A KUBE-SVC-TCOU7JCQXEZGVUNU ! -s 10.244.0.0/16 -d 10.96.0.10/32 -p udp -m comment'
    ' --comment "kube-system/kube-dns:dns cluster IP" -m udp --dport 53 -j KUBE-MARK-MASQ',
    '-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment "kube-system/kube-dns:dns ->'
    ' 10.244.0.3:53" -j KUBE-SEP-YIL6JZP7A3QYXJU2',
    '-A KUBE-SEP-YIL6JZP7A3QYXJU2 -s 10.244.0.3/32 -m comment --comment'
    ' "kube-system/kube-dns:dns" -j KUBE-MARK-MASQ',
    '-A KUBE-SEP-YIL6JZP7A3QYXJU2 -p udp -m comment --comment "kube-system/kube-dns:dns"'
    " -m udp -j DNAT --to-destination 10.244.0.3:53",
    '[5:300] -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports;'
    ' NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL'
    " -j KUBE-NODEPORTS",
]


@pytest.mark.parametrize("line", KUBE_PROXY_LINES)
def test_the_line_path_takes_kube_proxys_rules_and_equals_the_general_parser(
    line: str,
) -> None:
    """The rules kube-proxy writes most take the line path (so the checks above
    compare it with something), with the general parser's result; a rule it does
    not cover (-m addrtype) is left to the general path."""
    chain, spec = line.split("-A ", 1)[1].split(" ", 1)
    got = rp.parse_common_line(line, 7, "nat", 4)
    if "addrtype" in line:
        assert got is None
        return
    want = rp._parse_rule(chain, rp.tokenize(spec), spec, 7, "nat", 4, None)
    assert got == want
