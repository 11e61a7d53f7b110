"""A ``--noflush`` restore onto a table the parser built reads only what the payload
touched (``dataplane/netfilter/restorefacts.py``); it must give exactly what checking
the whole table gives.

The reference is the same restore onto the same table with its check facts dropped (a
table built any other way: every rule is read at COMMIT). Sequences of random kube-proxy
like payloads (chains redeclared with jumps, DNAT and plain targets; new chains; ``-X``;
jumps added to built-in chains, from hooks where DNAT may or may not run) must end in
equal rulesets, or fail with the same error, step after step; and the facts a chain of
incremental restores leaves are those a whole check of the result learns (the hooks
kept may be more than reach a chain, never fewer)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.netfilter import RestoreError, Ruleset, apply_restore, format_save, parse_save
from dataplane.netfilter import rules as R
from dataplane.netfilter.restorefacts import TableFacts

BASE = """*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-SVC-B - [0:0]
:KUBE-SEP-A1 - [0:0]
:KUBE-SEP-A2 - [0:0]
:KUBE-SEP-B1 - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A OUTPUT -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
-A KUBE-SERVICES -d 10.96.0.2/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-B
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-SVC-A -m statistic --mode random --probability 0.5 -j KUBE-SEP-A1
-A KUBE-SVC-A -j KUBE-SEP-A2
-A KUBE-SVC-B -j KUBE-SEP-B1
-A KUBE-SEP-A1 -s 10.244.1.2/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-A1 -p tcp -m tcp -j DNAT --to-destination 10.244.1.2:8080
-A KUBE-SEP-A2 -p tcp -m tcp -j DNAT --to-destination 10.244.2.2:8080
-A KUBE-SEP-B1 -p tcp -m tcp -j DNAT --to-destination 10.244.1.3:8080
COMMIT
"""

NAMES = [
    "KUBE-SERVICES",
    "KUBE-MARK-MASQ",
    "KUBE-SVC-A",
    "KUBE-SVC-B",
    "KUBE-SVC-C",
    "KUBE-SEP-A1",
    "KUBE-SEP-A2",
    "KUBE-SEP-B1",
    "KUBE-SEP-C1",
    "KUBE-SEP-C2",
]


def _without_facts(rs: Ruleset) -> Ruleset:
    """The same tables, built without the parser: a restore onto them checks them whole."""
    return Ruleset({n: R.Table(t.name, dict(t.chains)) for n, t in rs.tables.items()}, rs.family)


def _facts(rs: Ruleset) -> TableFacts:
    facts = rs.tables["nat"].checked
    assert isinstance(facts, TableFacts)
    return facts


@st.composite
def payloads(draw: st.DrawFn) -> str:
    """A nat ``--noflush`` payload over :data:`NAMES` (valid or not)."""
    lines = ["*nat"]
    declared = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    lines += [f":{c} - [0:0]" for c in declared]
    for c in declared:
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["jump", "jump", "dnat", "accept", "return"]))
            if kind == "jump":
                lines.append(f"-A {c} -j {draw(st.sampled_from(NAMES))}")
            elif kind == "dnat":
                lines.append(f"-A {c} -p tcp -m tcp -j DNAT --to-destination 10.244.9.9:80")
            else:
                lines.append(f"-A {c} -j {kind.upper()}")
    for _ in range(draw(st.integers(0, 2))):
        hook = draw(st.sampled_from(["PREROUTING", "OUTPUT", "INPUT", "POSTROUTING"]))
        op = draw(st.sampled_from(["-A", "-I"]))
        lines.append(f"{op} {hook} -j {draw(st.sampled_from(NAMES))}")
    if draw(st.booleans()):
        lines.append(f"-D {draw(st.sampled_from(['PREROUTING', 'OUTPUT']))} 1")
    lines += [f"-X {c}" for c in draw(st.lists(st.sampled_from(NAMES), max_size=2, unique=True))]
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def _restore(rs: Ruleset, payload: str) -> Ruleset | str:
    try:
        return apply_restore(rs, payload, source="p")
    except RestoreError as e:
        return f"RestoreError: {e}"


@settings(max_examples=400, deadline=None)
@given(st.lists(payloads(), min_size=1, max_size=8))
def test_incremental_restores_equal_whole_checks(steps: list[str]) -> None:
    inc = ref = parse_save(BASE)
    for payload in steps:
        got = _restore(inc, payload)
        want = _restore(_without_facts(ref), payload)
        if isinstance(want, str):
            assert got == want, payload
            continue
        assert isinstance(got, Ruleset), (got, payload)
        assert got == want, payload
        assert format_save(got) == format_save(want)
        inc, ref = got, want
        # what the chain of incremental checks kept is what a whole check learns
        kept, whole = _facts(inc), _facts(want)
        assert kept.succ == whole.succ
        assert kept.callers == whole.callers
        assert kept.restricted == whole.restricted
        for chain, bits in whole.reach.items():
            assert kept.reach.get(chain, 0) & bits == bits, chain


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        # a loop through a chain the payload left alone (KUBE-SEP-A1 -> KUBE-MARK-MASQ)
        (
            "*nat\n:KUBE-MARK-MASQ - [0:0]\n-A KUBE-MARK-MASQ -j KUBE-SVC-A\nCOMMIT\n",
            "*nat: loop through chain KUBE-SVC-A",
        ),
        # DNAT in a chain left alone, newly reached from INPUT
        (
            "*nat\n-A INPUT -j KUBE-SVC-B\nCOMMIT\n",
            "target DNAT in chain KUBE-SEP-B1 is reached from INPUT, where it is not valid",
        ),
        # a chain still referred to by one left alone
        ("*nat\n-X KUBE-SEP-B1\nCOMMIT\n", "chain KUBE-SEP-B1 is not empty"),
        (
            "*nat\n-F KUBE-SEP-B1\n-X KUBE-SEP-B1\nCOMMIT\n",
            "p:3: -X KUBE-SEP-B1: chain KUBE-SEP-B1 is still referenced from KUBE-SVC-B",
        ),
    ],
)
def test_incremental_restore_refuses_what_a_whole_check_refuses(payload: str, error: str) -> None:
    base = parse_save(BASE)
    with pytest.raises(RestoreError) as whole:
        apply_restore(_without_facts(base), payload, source="p")
    with pytest.raises(RestoreError) as got:
        apply_restore(base, payload, source="p")
    assert str(got.value) == str(whole.value)
    assert error in str(got.value)


def test_a_partial_restore_shares_the_chains_it_leaves_alone() -> None:
    base = parse_save(BASE)
    out = apply_restore(base, "*nat\n:KUBE-SVC-B - [0:0]\n-A KUBE-SVC-B -j KUBE-SEP-B1\nCOMMIT\n")
    old, new = base.tables["nat"].chains, out.tables["nat"].chains
    assert new["KUBE-SVC-B"] is not old["KUBE-SVC-B"]
    assert [n for n in new if new[n] is not old[n]] == ["KUBE-SVC-B"]
