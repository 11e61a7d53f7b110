"""kube-router's layout as :func:`dataplane.netpol.render_policy` renders one node: which
chains exist, the rules' shapes and order, the ipsets, and what each deciding rule is
attributed to."""

from __future__ import annotations

import re
from ipaddress import ip_address
from typing import Any

from dataplane.netpol import render_policy, with_policy
from dataplane.netpol.kuberouter import pod_chain, policy_chain
from netmodel.netpolicy import PolicyPod, policy_from_wire
from netmodel.rulesets import IptablesRules

NAMESPACES = {"shop": {}, "front": {"team": "web"}}
PODS = [
    PolicyPod(
        "shop", "web", {"app": "web"}, ip_address("10.244.1.5"), "node-1", {"http": ("TCP", 8080)}
    ),
    PolicyPod(
        "shop", "web2", {"app": "web"}, ip_address("10.244.2.6"), "node-2", {"http": ("TCP", 9090)}
    ),
    PolicyPod("front", "fe", {"app": "fe"}, ip_address("10.244.2.5"), "node-2"),
    PolicyPod(
        "shop", "exporter", {"app": "web"}, ip_address("172.18.0.2"), "node-1", host_network=True
    ),
]


def policy(name: str, spec: dict[str, Any], ns: str = "shop") -> Any:
    return policy_from_wire({"metadata": {"name": name, "namespace": ns}, "spec": spec})


ALLOW = policy(
    "allow-frontend",
    {
        "podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [
            {
                "from": [
                    {"podSelector": {"matchLabels": {"app": "nothing"}}},
                    {"namespaceSelector": {"matchLabels": {"team": "web"}}},
                ],
                "ports": [{"port": "http"}],
            },
            {"from": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]},
        ],
    },
)
EGRESS = policy(
    "dns-only",
    {
        "podSelector": {"matchLabels": {"app": "fe"}},
        "policyTypes": ["Egress"],
        "egress": [{"ports": [{"protocol": "UDP", "port": 53, "endPort": 60}]}],
    },
    ns="front",
)


def rules_of(text: str, chain: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"-A {chain} ")]


def test_only_the_nodes_own_pods_get_chains_and_policies_follow_them() -> None:
    one = render_policy("node-1", "172.18.0.2", PODS, [ALLOW, EGRESS], NAMESPACES)
    two = render_policy("node-2", "172.18.0.3", PODS, [ALLOW, EGRESS], NAMESPACES)
    web, web2, fe = pod_chain("shop", "web"), pod_chain("shop", "web2"), pod_chain("front", "fe")
    assert [c for c in one.chains if c.startswith("KUBE-POD-FW-")] == [
        web
    ]  # not the host-network pod
    assert [c for c in two.chains if c.startswith("KUBE-POD-FW-")] == [fe, web2]
    # a policy's chain exists where a pod it selects runs
    assert policy_chain(ALLOW, "ingress") in one.chains
    assert policy_chain(EGRESS, "egress") not in one.chains
    assert policy_chain(EGRESS, "egress") in two.chains
    assert one.chains[:4] == (
        "KUBE-ROUTER-INPUT",
        "KUBE-ROUTER-FORWARD",
        "KUBE-ROUTER-OUTPUT",
        "KUBE-NWPLCY-DEFAULT",
    )
    for name in one.chains:
        assert re.fullmatch(
            r"KUBE-(ROUTER-\w+|NWPLCY-DEFAULT|POD-FW-[A-Z2-7]{16}|NWPLCY-[A-Z2-7]{16})", name
        )


def test_the_payload_inserts_the_top_level_jumps_first_and_declares_every_chain() -> None:
    r = render_policy(
        "node-1", "172.18.0.2", PODS, [ALLOW], NAMESPACES, service_cidrs=["10.96.0.0/12"]
    )
    lines = r.filter.splitlines()
    assert lines[0] == "*filter" and lines[-1] == "COMMIT"
    assert [ln for ln in lines if ln.startswith(":")] == [f":{c} - [0:0]" for c in r.chains]
    inserts = [ln for ln in lines if ln.startswith("-I ")]
    assert [ln.split()[1:3] for ln in inserts] == [
        ["INPUT", "1"],
        ["FORWARD", "1"],
        ["OUTPUT", "1"],
    ]
    for ins, jump in zip(inserts, r.jumps, strict=True):
        assert ins.replace("-I ", "-A ", 1).replace(" 1 -m", " -m", 1) == jump
        assert '--comment "kube-router netpol - ' in jump
    inp = rules_of(r.filter, "KUBE-ROUTER-INPUT")
    assert inp[0].startswith("-A KUBE-ROUTER-INPUT -d 10.96.0.0/12 ") and inp[0].endswith(
        "-j RETURN"
    )
    assert "-m addrtype --dst-type LOCAL -m multiport --dports 30000:32767 -j RETURN" in inp[1]
    for top in ("KUBE-ROUTER-INPUT", "KUBE-ROUTER-FORWARD", "KUBE-ROUTER-OUTPUT"):
        assert rules_of(r.filter, top)[-1].endswith("-m mark --mark 0x20000/0x20000 -j ACCEPT")


def test_a_pod_chain_has_kube_routers_shape_in_order() -> None:
    r = render_policy("node-1", "172.18.0.2", PODS, [ALLOW], NAMESPACES)
    chain = pod_chain("shop", "web")
    got = [
        re.sub(r'--comment "[^"]*"', "--comment C", ln.removeprefix(f"-A {chain} "))
        for ln in rules_of(r.filter, chain)
    ]
    assert got == [
        "-m comment --comment C -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        "-m comment --comment C -m conntrack --ctstate INVALID -j DROP",
        "-d 10.244.1.5/32 -m comment --comment C -m addrtype --src-type LOCAL -j ACCEPT",
        "-s 10.244.1.5/32 -m comment --comment C -j KUBE-NWPLCY-DEFAULT",
        f"-d 10.244.1.5/32 -m comment --comment C -j {policy_chain(ALLOW, 'ingress')}",
        "-m comment --comment C -m mark ! --mark 0x10000/0x10000 -m limit --limit 10/min "
        "--limit-burst 10 -j NFLOG --nflog-group 100",
        "-m comment --comment C -m mark ! --mark 0x10000/0x10000 -j REJECT --reject-with "
        "icmp-port-unreachable",
        "-j MARK --set-xmark 0x0/0x10000",
        "-m comment --comment C -j MARK --set-xmark 0x20000/0x20000",
    ]
    fwd = rules_of(r.filter, "KUBE-ROUTER-FORWARD")
    # egress jumps (-s) before ingress jumps (-d); each also for bridged traffic
    assert [ln.split()[2:4] + (["physdev"] if "physdev" in ln else []) for ln in fwd[:-1]] == [
        ["-s", "10.244.1.5/32"],
        ["-s", "10.244.1.5/32", "physdev"],
        ["-d", "10.244.1.5/32"],
        ["-d", "10.244.1.5/32", "physdev"],
    ]
    assert "rule to REJECT traffic destined for POD name:web namespace: shop" in r.filter


def test_policy_rules_mark_then_return_per_peer_and_port_with_their_sets() -> None:
    r = render_policy("node-1", "172.18.0.2", PODS, [ALLOW], NAMESPACES)
    rules = rules_of(r.filter, policy_chain(ALLOW, "ingress"))
    # peer 0 selects no pod, peer 1 the namespace front; the named port resolves per
    # destination (8080 on web, 9090 on web2: two sets); the ipBlock rule has no port
    assert len(rules) == 2 * (2 * 2 + 1)
    marks, returns = rules[0::2], rules[1::2]
    assert all(m.endswith("-j MARK --set-xmark 0x10000/0x10000") for m in marks)
    assert [
        m.replace(
            " -j MARK --set-xmark 0x10000/0x10000", " -m mark --mark 0x10000/0x10000 -j RETURN"
        )
        for m in marks
    ] == returns
    assert [re.search(r"--dport (\d+)", m).group(1) if "--dport" in m else None for m in marks] == [  # type: ignore[union-attr]
        "8080",
        "9090",
        "8080",
        "9090",
        None,
    ]
    sets = dict(_sets(r.ipsets))
    src_sets = [re.search(r"--match-set (\S+) src", m).group(1) for m in marks]  # type: ignore[union-attr]
    dst_sets = [re.search(r"--match-set (\S+) dst", m).group(1) for m in marks]  # type: ignore[union-attr]
    assert sets[src_sets[0]] == ("hash:ip", [], [])  # app=nothing
    assert sets[src_sets[2]] == ("hash:ip", ["10.244.2.5"], [])  # namespace team=web: fe
    assert sets[dst_sets[0]] == ("hash:ip", ["10.244.1.5"], [])  # web has http=8080
    assert sets[dst_sets[1]] == ("hash:ip", ["10.244.2.6"], [])  # web2 has http=9090
    # a hash:net set takes no /0: two halves, and the except as nomatch
    assert sets[src_sets[4]] == ("hash:net", ["0.0.0.0/1", "128.0.0.0/1"], ["10.0.0.0/8"])
    assert sets[dst_sets[4]] == ("hash:ip", ["10.244.1.5", "10.244.2.6"], [])  # the selected pods
    assert all(n.startswith(("KUBE-SRC-", "KUBE-DST-")) for n in sets)


def test_egress_port_ranges_and_a_rule_without_peers() -> None:
    r = render_policy("node-2", "172.18.0.3", PODS, [EGRESS], NAMESPACES)
    [mark, ret] = rules_of(r.filter, policy_chain(EGRESS, "egress"))
    assert mark.startswith(f"-A {policy_chain(EGRESS, 'egress')} -p udp -m comment")
    assert "-m udp --dport 53:60 -j MARK" in mark and " dst " not in mark
    assert ret.endswith("-m mark --mark 0x10000/0x10000 -j RETURN")


def test_origins_name_the_policy_and_rule_as_decide_does() -> None:
    r = render_policy("node-1", "172.18.0.2", PODS, [ALLOW], NAMESPACES)
    chain = policy_chain(ALLOW, "ingress")
    texts = [
        r.origins[(chain, ln.removeprefix(f"-A {chain} "))].decisions[0].describe()
        for ln in rules_of(r.filter, chain)
        if ln.endswith("-j MARK --set-xmark 0x10000/0x10000")
    ]
    assert texts == [
        "shop/allow-frontend ingress[0].from[0] (podSelector app=nothing) → ACCEPT",
        "shop/allow-frontend ingress[0].from[0] (podSelector app=nothing) → ACCEPT",
        "shop/allow-frontend ingress[0].from[1] (namespaceSelector team=web) → ACCEPT",
        "shop/allow-frontend ingress[0].from[1] (namespaceSelector team=web) → ACCEPT",
        "shop/allow-frontend ingress[1].from[0] (ipBlock 0.0.0.0/0 except 10.0.0.0/8) → ACCEPT",
    ]
    pod = pod_chain("shop", "web")
    reject = next(ln for ln in rules_of(r.filter, pod) if "-j REJECT" in ln)
    origin = r.origins[(pod, reject.removeprefix(f"-A {pod} "))]
    assert origin.decision("10.244.2.5", "10.244.1.5") is not None
    assert origin.decision("10.244.2.5", "10.244.1.5").describe() == (  # type: ignore[union-attr]
        "shop/allow-frontend (ingress, no rule matched) → DROP"
    )
    assert origin.decision("10.244.1.5", "10.244.2.5") is None  # not isolated for egress
    # rules that decide nothing have no origin
    assert all(
        (pod, ln.removeprefix(f"-A {pod} ")) not in r.origins
        for ln in rules_of(r.filter, pod)
        if "conntrack" in ln or "set-xmark 0x" in ln
    )


def test_rendering_is_a_pure_function_of_its_inputs() -> None:
    a = render_policy("node-1", "172.18.0.2", PODS, [ALLOW, EGRESS], NAMESPACES)
    b = render_policy("node-1", "172.18.0.2", list(reversed(PODS)), [EGRESS, ALLOW], NAMESPACES)
    assert a.filter == b.filter and a.ipsets == b.ipsets
    renamed = [
        *PODS[:1],
        PolicyPod("shop", "web-new", {"app": "web"}, ip_address("10.244.1.5"), "node-1"),
    ]
    assert (
        pod_chain("shop", "web-new")
        in render_policy("node-1", "", renamed, [ALLOW], NAMESPACES).chains
    )


def test_with_policy_puts_the_jumps_at_the_head_of_the_builtin_chains() -> None:
    kube_proxy = (
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
        ":KUBE-FORWARD - [0:0]\n-A FORWARD -j KUBE-FORWARD\nCOMMIT\n"
        "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"
    )
    r = render_policy("node-1", "172.18.0.2", PODS, [ALLOW], NAMESPACES)
    joined = with_policy(IptablesRules(kube_proxy, ipsets="create X hash:ip\n"), r)
    assert isinstance(joined, IptablesRules)
    fwd = [ln for ln in joined.text.splitlines() if ln.startswith("-A FORWARD ")]
    assert fwd == [r.jumps[1], "-A FORWARD -j KUBE-FORWARD"]
    assert joined.text.count("*nat") == 1 and joined.text.count("*filter") == 1
    assert joined.ipsets.startswith("create X hash:ip\ncreate KUBE-")
    assert "flush " not in joined.ipsets and " -exist" not in joined.ipsets
    assert with_policy(IptablesRules(kube_proxy), None) == IptablesRules(kube_proxy)


def _sets(text: str) -> list[tuple[str, tuple[str, list[str], list[str]]]]:
    out: dict[str, tuple[str, list[str], list[str]]] = {}
    for line in text.splitlines():
        words = line.split()
        if words[0] == "create":
            out[words[1]] = (words[2], [], [])
        elif words[0] == "add":
            out[words[1]][2 if words[-1] == "nomatch" else 1].append(words[2])
    return list(out.items())
