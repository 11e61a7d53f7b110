"""``trace --at``: flows over kube-proxy rulesets, compared with upstream's expectations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dataplane.netfilter import Flow, FlowTracer, Ruleset, apply_restore, parse_save


@pytest.fixture(scope="module")
def tracer(overall_ruleset: Ruleset, overall_case: dict[str, Any]) -> FlowTracer:
    return FlowTracer(overall_ruleset, overall_case["node"]["localIPs"])


@pytest.mark.parametrize(
    ("src", "dst", "port", "output", "masq"),
    [
        ("10.0.0.2", "172.30.0.41", 80, "10.180.0.1:80", False),  # pod -> ClusterIP
        ("10.180.0.1", "172.30.0.41", 80, "10.180.0.1:80", True),  # hairpin
        ("192.168.0.2", "172.30.0.41", 80, "10.180.0.1:80", True),  # node -> ClusterIP
        ("10.0.0.2", "172.30.0.44", 80, "10.180.0.4:80, 10.180.0.5:80", False),
        ("203.0.113.2", "5.6.7.8", 80, "10.180.0.3:80", True),  # LB, allowed source
        ("203.0.113.130", "5.6.7.8", 80, "DROP", False),  # LB, blocked source
        ("10.0.0.2", "172.30.0.46", 80, "REJECT", False),  # no endpoints
        ("203.0.113.2", "192.168.0.2", 3003, "10.180.0.3:80", True),  # NodePort
        ("127.0.0.1", "127.0.0.1", 3003, "10.180.0.3:80", True),  # localhost NodePort
        ("203.0.113.2", "192.168.0.2", 3001, "DROP", False),  # eTP Local, no local eps
        ("203.0.113.2", "1.2.3.4", 80, "DROP", False),
        ("203.0.113.2", "192.168.99.22", 80, "DROP", False),
        ("10.0.0.2", "1.2.3.4", 80, "10.180.0.2:80", False),  # pod short-circuit
        ("192.168.0.2", "1.2.3.4", 80, "10.180.0.2:80", True),  # node: masq + route
        ("203.0.113.2", "192.168.99.33", 80, "10.180.0.4:80, 10.180.0.5:80", True),
        ("203.0.113.2", "192.168.0.2", 30000, "ACCEPT", False),  # health check port
        ("10.0.0.2", "172.30.0.41", 81, "", False),  # unknown port
    ],
)
def test_flows_over_overall_dump(
    tracer: FlowTracer, src: str, dst: str, port: int, output: str, masq: bool
) -> None:
    r = tracer.trace(Flow(src, dst, port))
    assert r.upstream_output() == output
    assert r.masquerade is masq
    assert sum(p for _, p in r.verdicts) == pytest.approx(1.0)


def test_flow_details(tracer: FlowTracer) -> None:
    r = tracer.trace(Flow("10.0.0.2", "172.30.0.44", 80))
    assert [(e.endpoint, e.probability) for e in r.endpoints] == [
        ("10.180.0.4:80", 0.5),
        ("10.180.0.5:80", 0.5),
    ]
    assert r.origin == "in" and r.verdict == "ACCEPT"
    blocked = tracer.trace(Flow("203.0.113.130", "5.6.7.8", 80))
    (b,) = blocked.branches
    last = b.result.records[-1]
    assert (last.hook, last.table, last.chain, last.effect) == (
        "FORWARD",
        "filter",
        "KUBE-PROXY-FIREWALL",
        "DROP",
    )
    assert "traffic not accepted by KUBE-FW-NUKIZ6OKUXPJNT4C" in last.text
    node = tracer.trace(Flow("192.168.0.2", "172.30.0.41", 80))
    assert node.origin == "out"
    assert node.branches[0].result.hooks == ("OUTPUT", "POSTROUTING")
    # the masqueraded packet leaves with the node's address
    lb = tracer.trace(Flow("203.0.113.2", "5.6.7.8", 80)).branches[0].result
    assert str(lb.packet.src) == "192.168.0.2" and str(lb.packet.dst) == "10.180.0.3"


def test_sample_is_one_branch(tracer: FlowTracer) -> None:
    from random import Random

    seen = {tracer.sample(Flow("10.0.0.2", "172.30.0.44", 80), Random(i)).dnat for i in range(30)}
    assert {str(d[0]) for d in seen if d} == {"10.180.0.4", "10.180.0.5"}


# TestExternalTrafficPolicyLocal: the ruleset written by hand from STRUCTURE.md §1.4 for
# its service (LB + externalIP + NodePort, eTP Local, endpoints 10.180.0.1 remote and
# 10.180.2.1 local); the flows and expected outputs come from the case file.
ETP_LOCAL = """*filter
:KUBE-NODEPORTS - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
-A KUBE-NODEPORTS -m comment --comment "ns1/svc1:p80 health check node port" -m tcp -p tcp --dport 30000 -j ACCEPT
-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
*nat
:KUBE-NODEPORTS - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXT-XPGD46QRK7WJZT7O - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
:KUBE-SEP-ZX7GRIZKSNUQ3LAJ - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
:KUBE-SVL-XPGD46QRK7WJZT7O - [0:0]
-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-XPGD46QRK7WJZT7O
-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 external IP" -m tcp -p tcp -d 192.168.99.11 --dport 80 -j KUBE-EXT-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j KUBE-EXT-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-EXT-XPGD46QRK7WJZT7O -m comment --comment "pod traffic for ns1/svc1:p80 external destinations" -s 10.0.0.0/8 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-EXT-XPGD46QRK7WJZT7O -m comment --comment "masquerade LOCAL traffic for ns1/svc1:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
-A KUBE-EXT-XPGD46QRK7WJZT7O -m comment --comment "route LOCAL traffic for ns1/svc1:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-EXT-XPGD46QRK7WJZT7O -j KUBE-SVL-XPGD46QRK7WJZT7O
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
-A KUBE-SEP-ZX7GRIZKSNUQ3LAJ -m comment --comment ns1/svc1:p80 -s 10.180.2.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-ZX7GRIZKSNUQ3LAJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.2.1:80
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-SXIVWICOYRO3J4NJ
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.2.1:80" -j KUBE-SEP-ZX7GRIZKSNUQ3LAJ
-A KUBE-SVL-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.2.1:80" -j KUBE-SEP-ZX7GRIZKSNUQ3LAJ
COMMIT
"""


def test_external_traffic_policy_local_case_flows(
    case: Callable[[str], dict[str, Any]], jumps: str
) -> None:
    data = case("TestExternalTrafficPolicyLocal")
    rs = apply_restore(parse_save(ETP_LOCAL), jumps)
    tracer = FlowTracer(rs, data["node"]["localIPs"])
    assert data["flows"]
    for f in data["flows"]:
        r = tracer.trace(Flow(f["sourceIP"], f["destIP"], f["destPort"], f["protocol"]))
        assert (r.upstream_output(), r.masquerade) == (f["output"], f["masq"]), f["name"]


def test_flow_init_is_the_dataclass_one() -> None:
    """Flow's __init__ is written out (for speed): every field in order with its
    default, a frozen value that equals, hashes and pickles like one."""
    import dataclasses
    import inspect
    import pickle

    params = list(inspect.signature(Flow.__init__).parameters.values())[1:]
    fields = dataclasses.fields(Flow)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        want = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        assert p.default == want, f.name
    a = Flow("10.0.0.1", "10.96.0.1", 80)
    assert a == Flow(source="10.0.0.1", dest="10.96.0.1", dport=80, protocol="tcp")
    assert hash(a) == hash(Flow("10.0.0.1", "10.96.0.1", 80))
    assert a != Flow("10.0.0.1", "10.96.0.1", 80, "udp")
    assert pickle.loads(pickle.dumps(a)) == a
    assert dataclasses.replace(a, dport=53).dport == 53
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.dport = 1  # type: ignore[misc]
