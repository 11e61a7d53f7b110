"""A compiled ruleset restored from its pickle (``CompiledRuleset.__reduce__``, what the
state directory's compiled-rule cache keeps), or made ``lazy``, loads a chain's rules only
when the chain runs (or a chain being built jumps to it), and answers exactly as the
ruleset compiled at once: same verdicts, marks, NAT, trace records and rule counts,
packet after packet."""

from __future__ import annotations

import pickle
from ipaddress import ip_address
from random import Random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_nf_properties import DSTS, SRCS, rule

from dataplane.netfilter import CompiledRuleset, Netfilter, Ruleset, parse_save
from dataplane.netfilter.evaluate import Traversal
from netmodel.packet import Packet


def _restored(rs: Ruleset, **kw: Any) -> CompiledRuleset:
    return pickle.loads(pickle.dumps(CompiledRuleset(rs, **kw)))


def _seen(t: Traversal) -> tuple[object, ...]:
    return (t.verdict, t.packet, t.visited, t.records)


def _loaded(cr: CompiledRuleset) -> set[tuple[str, str]]:
    return {(t, c) for t, names in cr.loaded_chains().items() for c in names}


@settings(max_examples=60, deadline=None)
@given(
    main=st.lists(rule(jumps=True), min_size=1, max_size=30),
    sub=st.lists(rule(jumps=False), min_size=0, max_size=16),
    seed=st.integers(0, 1000),
    linear=st.booleans(),
)
def test_restored_and_compiled_rulesets_agree(
    main: list[str], sub: list[str], seed: int, linear: bool
) -> None:
    text = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:SUB - [0:0]\n"
    text += "".join(f"-A FORWARD {r}\n" for r in main)
    text += "".join(f"-A SUB {r}\n" for r in sub)
    text += "COMMIT\n"
    rs = parse_save(text)
    restored = _restored(rs, linear=linear)
    assert not _loaded(restored)
    lazy = CompiledRuleset(rs, linear=linear, lazy=True)
    engines = [
        Netfilter(rs, rng=Random(seed), local_addrs=[ip_address("9.9.9.9")],
                  compiled=cr, linear=linear)
        for cr in (CompiledRuleset(rs, linear=linear), restored, lazy)
    ]
    for i in range(12):
        p = Packet.make(
            SRCS[i % 2], DSTS[i % 3], ("tcp", "udp", "icmp")[i % 3], 1000 + i, 80 + (i // 3) % 2
        )
        a, b, c = (e.traverse(p) for e in engines)
        assert _seen(a) == _seen(b) == _seen(c)
    assert restored.ruleset == rs == lazy.ruleset
    assert pickle.loads(pickle.dumps(lazy)).ruleset == rs


def test_kube_proxy_rules_load_only_the_chains_a_packet_runs(
    overall_ruleset: Ruleset, overall_case: dict[str, Any]
) -> None:
    """kube-proxy's rules (its TestOverallIPTablesRules): every flow (each Service
    port, a node port, traffic to nowhere; arriving and sent) gives what the ruleset
    compiled at once gives, records included."""
    local = [ip_address(a) for a in overall_case["node"]["localIPs"]]
    node = local[0]
    flows: list[tuple[str, str, str, int]] = []
    for svc in overall_case["services"]:
        spec = svc["spec"]
        for ip in [spec.get("clusterIP"), *spec.get("externalIPs", [])]:
            if ip and ip != "None":
                for port in spec.get("ports", []):
                    flows.append(("10.0.0.2", ip, port.get("protocol", "TCP").lower(),
                                  port["port"]))
        for port in spec.get("ports", []):
            if port.get("nodePort"):
                flows.append(("203.0.113.7", str(node), port.get("protocol", "TCP").lower(),
                              port["nodePort"]))
    flows.append(("10.0.0.2", "192.0.2.99", "tcp", 80))
    assert len(flows) > 5
    restored = _restored(overall_ruleset)
    eager = Netfilter(overall_ruleset, local_addrs=local, rng=Random(3))
    lazy = Netfilter(overall_ruleset, local_addrs=local, rng=Random(3), compiled=restored)
    for i, (src, dst, proto, port) in enumerate(flows):
        p = Packet.make(src, dst, proto, 40000 + i, port,  # type: ignore[arg-type]
                        flags=frozenset({"SYN"}) if proto == "tcp" else frozenset())
        for origin in ("in", "out"):
            a, b = eager.traverse(p, origin=origin), lazy.traverse(p, origin=origin)
            assert _seen(a) == _seen(b), (src, dst, proto, port, origin)
    assert restored.ruleset == overall_ruleset


def test_a_restored_ruleset_pickles_again_without_loading() -> None:
    rs = parse_save(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
        ":POSTROUTING ACCEPT [0:0]\n:A - [0:0]\n:B - [0:0]\n"
        "-A PREROUTING -d 10.0.0.1/32 -j A\n-A A -j B\n-A B -p tcp -j DNAT --to-destination 10.1.1.1:80\n"
        "COMMIT\n"
    )
    once = _restored(rs)
    twice = pickle.loads(pickle.dumps(once))
    assert not _loaded(once) and not _loaded(twice)
    p = Packet.make("10.0.0.2", "10.0.0.1", "tcp", 1234, 80, flags=frozenset({"SYN"}))
    a = Netfilter(rs).traverse(p)
    b = Netfilter(rs, compiled=twice).traverse(p)
    assert _seen(a) == _seen(b) and a.packet.dst == ip_address("10.1.1.1")
    # the chains the forwarded packet ran
    assert _loaded(twice) == {("nat", c) for c in ("PREROUTING", "A", "B", "POSTROUTING")}


def _services(n: int, endpoints: int) -> str:
    """kube-proxy's shape: KUBE-SERVICES dispatches on ClusterIP:port to a KUBE-SVC
    chain per Service, which picks one of its KUBE-SEP chains at random."""
    lines = ["*nat"] + [f":{c} ACCEPT [0:0]" for c in ("PREROUTING", "INPUT", "OUTPUT",
                                                        "POSTROUTING")]
    lines += [":KUBE-SERVICES - [0:0]", ":KUBE-MARK-MASQ - [0:0]", ":KUBE-POSTROUTING - [0:0]"]
    for i in range(n):
        lines.append(f":KUBE-SVC-{i} - [0:0]")
        lines += [f":KUBE-SEP-{i}-{j} - [0:0]" for j in range(endpoints)]
    lines += [
        "-A PREROUTING -j KUBE-SERVICES",
        "-A OUTPUT -j KUBE-SERVICES",
        "-A POSTROUTING -j KUBE-POSTROUTING",
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
        "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000",
        "-A KUBE-POSTROUTING -j MASQUERADE",
        "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000",
    ]
    for i in range(n):
        lines.append(f"-A KUBE-SERVICES -d 10.96.0.{i}/32 -p tcp -m tcp --dport 80 "
                     f"-j KUBE-SVC-{i}")
        for j in range(endpoints):
            left = endpoints - j
            prob = f"-m statistic --mode random --probability {1 / left:.11f} " if left > 1 else ""
            lines.append(f"-A KUBE-SVC-{i} {prob}-j KUBE-SEP-{i}-{j}")
            ep = f"10.244.{j}.{i}"
            lines += [f"-A KUBE-SEP-{i}-{j} -s {ep}/32 -j KUBE-MARK-MASQ",
                      f"-A KUBE-SEP-{i}-{j} -p tcp -m tcp -j DNAT --to-destination {ep}:8080"]
    return "\n".join([*lines, "COMMIT", ""])


def test_a_packet_to_one_service_loads_that_service_s_chains() -> None:
    """Of 40 Services, a packet to one loads the built-in chains, the dispatch
    (KUBE-SERVICES, indexed), that Service's KUBE-SVC chain and, built with it, its
    endpoints' chains and what they jump to: no other Service's."""
    rs = parse_save(_services(40, 3))
    restored = _restored(rs)
    made = CompiledRuleset(rs, lazy=True)
    eager = Netfilter(rs, rng=Random(1))
    lazy = Netfilter(rs, rng=Random(1), compiled=restored)
    lazy_made = Netfilter(rs, rng=Random(1), compiled=made)
    assert not _loaded(restored) and not _loaded(made)
    for i, dst in enumerate(["10.96.0.7", "10.96.0.7", "10.96.0.9", "10.1.2.3"]):
        p = Packet.make("10.0.0.2", dst, "tcp", 1000 + i, 80, flags=frozenset({"SYN"}))
        a, b, c = eager.traverse(p), lazy.traverse(p), lazy_made.traverse(p)
        assert _seen(a) == _seen(b) == _seen(c)
        assert _loaded(made) == _loaded(restored)
        if i == 0:
            assert _loaded(restored) == {
                ("nat", c) for c in ("PREROUTING", "POSTROUTING", "KUBE-SERVICES",
                                     "KUBE-SVC-7", "KUBE-SEP-7-0",
                                     "KUBE-SEP-7-1", "KUBE-SEP-7-2", "KUBE-MARK-MASQ",
                                     "KUBE-POSTROUTING")
            }
    assert {c for _, c in _loaded(restored) if c.startswith("KUBE-SVC-")} == {
        "KUBE-SVC-7", "KUBE-SVC-9"}
