"""Property tests: the indexed first-match search never changes a result."""

from __future__ import annotations

from ipaddress import ip_address
from random import Random

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.netfilter import Netfilter, parse_save
from netmodel.packet import Packet

DSTS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
SRCS = ["1.1.1.1", "1.1.1.2"]


@st.composite
def rule(draw: st.DrawFn, jumps: bool) -> str:
    parts: list[str] = []
    if draw(st.booleans()):
        parts.append(("! " if draw(st.booleans()) else "") + f"-d {draw(st.sampled_from(DSTS))}")
    if draw(st.booleans()):
        parts.append(f"-s {draw(st.sampled_from(SRCS))}")
    mods: list[str] = []
    proto = draw(st.sampled_from([None, "tcp", "udp"]))
    if proto:
        parts.append(f"-p {proto}")
        if draw(st.booleans()):
            mods.append(f"-m {proto} --dport {draw(st.sampled_from([80, 81, '80:81']))}")
    if draw(st.booleans()):
        mods.append(
            f"-m statistic --mode random --probability {draw(st.sampled_from(['0.5', '0.25']))}"
        )
    if draw(st.booleans()):
        mods.append(f"-m statistic --mode nth --every {draw(st.sampled_from([2, 3]))} --packet 0")
    if draw(st.booleans()):
        mods.append("-m mark --mark 0x1/0x1")
    parts += draw(st.permutations(mods))
    targets = ["ACCEPT", "DROP", "RETURN", "MARK --or-mark 0x1", "MARK --xor-mark 0x2", ""]
    if jumps:
        targets += ["SUB", "SUB-GOTO"]
    t = draw(st.sampled_from(targets))
    if t == "SUB-GOTO":
        parts.append("-g SUB")
    elif t:
        parts.append(f"-j {t}")
    return " ".join(parts)


@settings(max_examples=60, deadline=None)
@given(
    main=st.lists(rule(jumps=True), min_size=12, max_size=40),
    sub=st.lists(rule(jumps=False), min_size=0, max_size=16),
    seed=st.integers(0, 1000),
)
def test_indexed_and_linear_evaluation_agree(main: list[str], sub: list[str], seed: int) -> None:
    text = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:SUB - [0:0]\n"
    text += "".join(f"-A FORWARD {r}\n" for r in main)
    text += "".join(f"-A SUB {r}\n" for r in sub)
    text += "COMMIT\n"
    rs = parse_save(text)
    engines = [
        Netfilter(rs, linear=lin, rng=Random(seed), local_addrs=[ip_address("9.9.9.9")])
        for lin in (True, False)
    ]
    for i in range(12):
        p = Packet.make(
            SRCS[i % 2], DSTS[i % 3], ("tcp", "udp", "icmp")[i % 3], 1000 + i, 80 + (i // 3) % 2
        )
        a, b = (e.traverse(p) for e in engines)
        assert (a.verdict, a.packet.mark) == (b.verdict, b.packet.mark)
        assert [(r.chain, r.rule, r.effect) for r in a.records] == [
            (r.chain, r.rule, r.effect) for r in b.records
        ]
        assert a.visited >= b.visited
