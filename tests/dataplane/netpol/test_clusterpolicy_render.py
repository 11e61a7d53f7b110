"""svclab's ClusterNetworkPolicy extension of kube-router's layout
(:mod:`dataplane.netpol.clusterpolicy`), as rendered text: the Admin tier's jumps come
before a pod's NetworkPolicy jumps, the Baseline tier's only for a direction no
NetworkPolicy isolates (guarded by the allowed mark), the tier chains hold the rules in
priority order with the right targets, sets and origins (the decisions
:func:`netmodel.clusterpolicy.decide` gives), and with no ClusterNetworkPolicy the
rendering is kube-router's alone."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any

from dataplane.netpol.clusterpolicy import ADMIN_PREFIX, BASELINE_PREFIX, node_rules, tier_chain
from dataplane.netpol.kuberouter import PolicyRules, pod_chain, render_policy
from netmodel import clusterpolicy
from netmodel.netpolicy import PolicyPod
from netmodel.netpolicy import policy_from_wire as np_from_wire

NAMESPACES = {n: {"kubernetes.io/metadata.name": n} for n in ("x", "y", "z")}
PODS = [
    PolicyPod("x", "a", {"app": "a"}, ip_address("10.244.0.2"), "n1", {"web": ("TCP", 8080)}),
    PolicyPod("x", "b", {"app": "b"}, ip_address("10.244.0.3"), "n1"),
    PolicyPod("y", "a", {"app": "a"}, ip_address("10.244.1.2"), "n2", {"web": ("TCP", 9090)}),
    PolicyPod("z", "c", {"app": "c"}, ip_address("10.244.1.3"), "n2"),
]


def ns(name: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": name}}


def cnp(name: str, tier: str, priority: int, subject: dict[str, Any], **rules: Any) -> Any:
    return clusterpolicy.policy_from_wire(
        {
            "metadata": {"name": name},
            "spec": {"tier": tier, "priority": priority, "subject": subject, **rules},
        }
    )


ADMIN_DENY = cnp(
    "deny-y-80",
    "Admin",
    10,
    {"namespaces": ns("x")},
    ingress=[
        {
            "name": "no-y",
            "action": "Deny",
            "from": [{"namespaces": ns("y")}],
            "protocols": [{"tcp": {"destinationPort": {"number": 80}}}],
        },
        {"action": "Pass", "from": [{"namespaces": ns("z")}]},
    ],
)
ADMIN_ACCEPT = cnp(
    "accept-web",
    "Admin",
    5,
    {"namespaces": {}},
    ingress=[
        {
            "action": "Accept",
            "from": [{"pods": {"namespaceSelector": {}, "podSelector": {}}}],
            "protocols": [{"destinationNamedPort": "web"}],
        }
    ],
)
BASELINE = cnp(
    "baseline-deny",
    "Baseline",
    1,
    {"namespaces": ns("x")},
    ingress=[{"action": "Deny", "from": [{"namespaces": {}}]}],
    egress=[{"action": "Deny", "to": [{"networks": ["0.0.0.0/0"]}]}],
)
FAILS_CLOSED = cnp(
    "bad-selector",
    "Admin",
    50,
    {"namespaces": ns("z")},
    ingress=[
        {
            "action": "Deny",
            "from": [{"namespaces": {"matchExpressions": [{"key": "k", "operator": "In"}]}}],
        }
    ],
)
NP_ISOLATES_XB = np_from_wire(
    {
        "metadata": {"name": "b-from-a", "namespace": "x"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "b"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "a"}}}]}],
        },
    }
)
CNPS = [BASELINE, ADMIN_DENY, FAILS_CLOSED, ADMIN_ACCEPT]


def render(node: str, cnps: list[Any], nps: list[Any] | None = None) -> PolicyRules:
    got = node_rules(node, "172.18.0.2", PODS, nps or [], cnps, NAMESPACES)
    assert got is not None
    return got


def chain_rules(rules: PolicyRules, chain: str) -> list[str]:
    return [r.removeprefix(f"-A {chain} ") for r in rules.rules if r.startswith(f"-A {chain} ")]


def test_without_cluster_network_policies_the_rendering_is_kube_routers() -> None:
    assert node_rules("n1", "172.18.0.2", PODS, [], [], NAMESPACES) is None
    plain = render_policy("n1", "172.18.0.2", PODS, [NP_ISOLATES_XB], NAMESPACES)
    assert render("n1", [], [NP_ISOLATES_XB]) == plain
    assert not any("KUBE-CNP-" in r for r in plain.rules)


def test_admin_jumps_come_first_and_baseline_only_where_no_policy_isolates() -> None:
    rules = render("n1", CNPS, [NP_ISOLATES_XB])
    admin = tier_chain("Admin", "ingress", [ADMIN_ACCEPT, ADMIN_DENY])
    baseline_in = tier_chain("Baseline", "ingress", [BASELINE])
    baseline_eg = tier_chain("Baseline", "egress", [BASELINE])
    assert admin.startswith(ADMIN_PREFIX) and baseline_in.startswith(BASELINE_PREFIX)
    assert all(len(c) <= 28 for c in rules.chains)
    # x/a: no NetworkPolicy; ingress Admin, then Baseline (guarded), then the default
    a = [r for r in chain_rules(rules, pod_chain("x", "a")) if "-j KUBE-" in r]
    targets = [r.rsplit("-j ", 1)[1] for r in a]
    assert targets == [
        baseline_eg,
        baseline_eg,
        "KUBE-NWPLCY-DEFAULT",
        admin,
        admin,
        baseline_in,
        baseline_in,
        "KUBE-NWPLCY-DEFAULT",
    ]
    assert a[3].startswith("! -s 10.244.0.2/32 -d 10.244.0.2/32 ")
    assert "-m conntrack --ctstate DNAT" in a[4]  # a pod through a Service to itself
    assert all("-m mark ! --mark 0x10000/0x10000" in r for r in (a[0], a[1], a[5], a[6]))
    assert not any("-m mark" in r for r in (a[3], a[4]))
    # x/b: a NetworkPolicy isolates it for ingress: Admin, then the policy, no Baseline
    b = [r.rsplit("-j ", 1)[1] for r in chain_rules(rules, pod_chain("x", "b")) if "-j KUBE-" in r]
    assert b[3:] == [admin, admin, "KUBE-NWPLCY-" + b[5].removeprefix("KUBE-NWPLCY-")]
    assert b[5] != "KUBE-NWPLCY-DEFAULT" and baseline_in not in b[3:]
    # the pods the same policies select share the tier chain: declared once
    assert rules.chains.count(admin) == 1


def test_tier_chains_hold_the_rules_in_priority_order_with_their_decisions() -> None:
    rules = render("n1", CNPS)
    admin = tier_chain("Admin", "ingress", [ADMIN_ACCEPT, ADMIN_DENY])
    lines = chain_rules(rules, admin)
    # priority 5 (Accept on the named port, per number it resolves to), then 10 (Deny,
    # then Pass)
    assert [line.rsplit(" -j ", 1)[1] for line in lines] == [
        "MARK --set-xmark 0x10000/0x10000",
        "RETURN",
        "MARK --set-xmark 0x10000/0x10000",
        "RETURN",
        "REJECT --reject-with icmp-port-unreachable",
        "RETURN",
    ]
    assert "-m tcp --dport 8080" in lines[0] and "-m tcp --dport 9090" in lines[2]
    assert lines[4].startswith("-p tcp -m comment --comment ")
    assert lines[4].endswith("src -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable")
    deny = rules.origins[(admin, lines[4])].decisions[0]
    # what decide says of y/a -> x/a TCP 80
    want = clusterpolicy.decide(
        PODS[2], PODS[0], "TCP", 80, [], NAMESPACES, cluster_policies=CNPS
    ).ingress
    assert deny == want
    assert deny.describe() == (
        'ClusterNetworkPolicy/deny-y-80 ingress[0].from[0] "no-y" (Admin tier, priority 10: '
        "Deny namespaces kubernetes.io/metadata.name=y, TCP 80) → DROP"
    )
    accept = rules.origins[(admin, lines[2])].decisions[0]
    assert (
        accept
        == clusterpolicy.decide(
            PODS[2],
            PODS[2],
            "TCP",
            9090,
            [],
            NAMESPACES,
            cluster_policies=CNPS,
            through_service=True,
        ).ingress
    )
    assert rules.origins[(admin, lines[5])].passes
    assert (admin, lines[1]) not in rules.origins  # the RETURN after a MARK decides nothing
    # the sets: the peer's pods, the named port's pods per number
    sets = dict(
        line.split(" ", 2)[1:] for line in rules.ipsets.splitlines() if line.startswith("add ")
    )
    src = lines[4].split("--match-set ")[1].split()[0]
    assert sets[src] == "10.244.1.2"


def test_networks_fail_closed_rules_and_the_other_node() -> None:
    rules = render("n1", CNPS)
    eg = chain_rules(rules, tier_chain("Baseline", "egress", [BASELINE]))
    assert len(eg) == 1 and eg[0].endswith("dst -j REJECT --reject-with icmp-port-unreachable")
    name = eg[0].split("--match-set ")[1].split()[0]
    members = [line for line in rules.ipsets.splitlines() if line.startswith(f"add {name} ")]
    assert members == [f"add {name} 0.0.0.0/1", f"add {name} 128.0.0.0/1"]
    assert f"create {name} hash:net" in rules.ipsets
    # z/c runs on n2: the fail-closed Deny is one unconditional REJECT, after priority 5
    n2 = render("n2", CNPS)
    z = chain_rules(n2, tier_chain("Admin", "ingress", [ADMIN_ACCEPT, FAILS_CLOSED]))
    assert z[-1].endswith('bad-selector ingress[0]" -j REJECT --reject-with icmp-port-unreachable')
    assert "--match-set" not in z[-1]
    assert (
        n2.origins[(tier_chain("Admin", "ingress", [ADMIN_ACCEPT, FAILS_CLOSED]), z[-1])]
        .decisions[0]
        .describe()
        .startswith("ClusterNetworkPolicy/bad-selector ingress[0] (Admin tier, priority 50")
    )
