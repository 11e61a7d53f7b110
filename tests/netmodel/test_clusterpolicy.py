"""ClusterNetworkPolicy's tiered decision (``netmodel.clusterpolicy``) on the API's own
examples: the ``ClusterNetworkPolicy`` samples of kubernetes-sigs/network-policy-api
(``tests/data/clusternetworkpolicy/user-stories.yaml``, provenance beside it), and the
rules its ``api-overview.md`` and v1alpha2 types state: Admin tier by
priority then NetworkPolicy then Baseline; Accept/Deny final, Pass to the next tier;
NetworkPolicy final for the pods it isolates; hairpin by Pod IP not subject."""

from __future__ import annotations

from ipaddress import ip_address
from pathlib import Path
from typing import Any

import pytest
import yaml

from netmodel import clusterpolicy, netpolicy
from netmodel.clusterpolicy import ClusterNetworkPolicy, decide, policy_from_wire
from netmodel.netpolicy import NetworkPolicy, PolicyPod

NAMESPACES: dict[str, dict[str, str]] = {
    ns: {"kubernetes.io/metadata.name": ns}
    for ns in ("sensitive-ns", "monitoring-ns", "kube-system", "bar-ns-1", "app-ns")
}


def _pod(ns: str, name: str, ip: str, **labels: str) -> PolicyPod:
    ports = {"web-alt": ("TCP", 8081)} if labels.get("app") == "svc-pub" else {}
    return PolicyPod(ns, name, labels, ip_address(ip), node="n1", ports=ports)  # type: ignore[arg-type]


SECRET = _pod("sensitive-ns", "vault", "10.0.1.1", app="vault")
PROM = _pod("monitoring-ns", "prom", "10.0.2.1", app="prom")
DNS = _pod("kube-system", "coredns", "10.0.3.1", app="kube-dns")
PUB = _pod("bar-ns-1", "pub", "10.0.4.1", app="svc-pub")
OTHER = _pod("bar-ns-1", "other", "10.0.4.2", app="other")
APP = _pod("app-ns", "app", "10.0.5.1", app="app")
APP2 = _pod("app-ns", "app2", "10.0.5.2", app="app")

STORIES = (
    Path(__file__).resolve().parents[1] / "data" / "clusternetworkpolicy" / "user-stories.yaml"
)
BY_NAME = {
    d["metadata"]["name"]: policy_from_wire(d)
    for d in yaml.safe_load_all(STORIES.read_text(encoding="utf-8"))
    if d
}
STORY_1 = BY_NAME["cluster-wide-deny-example"]
STORY_2 = BY_NAME["cluster-wide-allow-example"]
STORY_3 = BY_NAME["pub-svc-delegate-example"]
STORY_5 = BY_NAME["default"]


def _wire(name: str, tier: str, priority: int, **spec: Any) -> ClusterNetworkPolicy:
    return policy_from_wire(
        {
            "apiVersion": clusterpolicy.API_VERSION,
            "kind": "ClusterNetworkPolicy",
            "metadata": {"name": name},
            "spec": {"tier": tier, "priority": priority, "subject": {"namespaces": {}}, **spec},
        }
    )


def _np(ns: str, name: str, **spec: Any) -> NetworkPolicy:
    return netpolicy.policy_from_wire({"metadata": {"namespace": ns, "name": name}, "spec": spec})


ALLOW_ALL_IN = {"podSelector": {}, "ingress": [{}]}
DENY_ALL = {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_story_1_an_admin_deny_wins_over_a_networkpolicy_that_allows() -> None:
    cnps = [STORY_1]
    allow = [_np("sensitive-ns", "allow-all", **ALLOW_ALL_IN)]
    got = decide(APP, SECRET, "TCP", 443, allow, NAMESPACES, cluster_policies=cnps)
    assert not got.allowed
    assert got.deciding.describe() == (
        'ClusterNetworkPolicy/cluster-wide-deny-example ingress[0].from[0] "select-all-deny-all"'
        " (Admin tier, priority 10: Deny namespaces {}) → DROP"
    )
    # its subject is sensitive-ns only: the other way is untouched
    assert decide(SECRET, APP, "TCP", 443, allow, NAMESPACES, cluster_policies=cnps).allowed


def test_story_2_admin_accepts_override_a_default_deny_networkpolicy() -> None:
    cnps = [STORY_2]
    deny = [_np("app-ns", "deny-all", **DENY_ALL)]
    inn = decide(PROM, APP, "TCP", 9090, deny, NAMESPACES, cluster_policies=cnps)
    assert inn.allowed
    assert inn.ingress.policy == "ClusterNetworkPolicy/cluster-wide-allow-example"
    assert inn.ingress.rule == 'ingress[0].from[0] "allow-monitoring-ns-ingress"'
    out = decide(APP, DNS, "UDP", 53, deny, NAMESPACES, cluster_policies=cnps)
    assert out.allowed
    assert out.egress.describe() == (
        'ClusterNetworkPolicy/cluster-wide-allow-example egress[0].to[0] "allow-kube-dns-egress"'
        " (Admin tier, priority 30: Accept pods namespaceSelector "
        "kubernetes.io/metadata.name=kube-system, podSelector app=kube-dns) → ACCEPT"
    )
    # what the CNP does not accept, the NetworkPolicy still denies
    other = decide(APP, APP2, "TCP", 80, deny, NAMESPACES, cluster_policies=cnps)
    assert not other.allowed
    assert other.deciding.policy == "app-ns/deny-all"


DENY_BAR = _wire(
    "deny-bar",
    "Admin",
    50,
    egress=[
        {
            "action": "Deny",
            "to": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "bar-ns-1"}}}],
        }
    ],
)


@pytest.mark.parametrize(
    ("protocol", "port", "passed"),
    [("TCP", 8080, True), ("TCP", 8081, True), ("UDP", 53, True), ("TCP", 9090, False)],
)
def test_story_3_pass_skips_the_admin_tier_and_hands_the_traffic_to_networkpolicy(
    protocol: str, port: int, passed: bool
) -> None:
    cnps = [STORY_3, DENY_BAR]
    got = decide(APP, PUB, protocol, port, [], NAMESPACES, cluster_policies=cnps)
    # passed: no NetworkPolicy and no Baseline policy: the Kubernetes default allows
    assert got.allowed is passed
    if passed:
        assert got.egress.reason.endswith(
            "; passed by ClusterNetworkPolicy/pub-svc-delegate-example egress[0].to[0]"
        )
    else:
        assert got.egress.policy == "ClusterNetworkPolicy/deny-bar"
    # the Pass only selects svc-pub: the other pod of bar-ns-1 meets the Deny
    assert not decide(APP, OTHER, "TCP", 8080, [], NAMESPACES, cluster_policies=cnps).allowed


def test_story_3_after_a_pass_the_networkpolicy_of_the_source_decides() -> None:
    cnps = [STORY_3, DENY_BAR]
    deny = [_np("app-ns", "deny-all", **DENY_ALL)]
    got = decide(APP, PUB, "TCP", 8080, deny, NAMESPACES, cluster_policies=cnps)
    assert not got.allowed
    assert got.egress.policy == "app-ns/deny-all"
    assert got.egress.describe() == (
        "app-ns/deny-all (egress, no rule matched; passed by "
        "ClusterNetworkPolicy/pub-svc-delegate-example egress[0].to[0]) → DROP"
    )


def test_story_5_baseline_deny_applies_where_no_networkpolicy_isolates() -> None:
    cnps = [STORY_5]
    got = decide(APP, APP2, "TCP", 80, [], NAMESPACES, cluster_policies=cnps)
    assert not got.allowed
    assert got.ingress.describe() == (
        "ClusterNetworkPolicy/default ingress[0].from[0] (Baseline tier, priority 10: "
        "Deny namespaces {}) → DROP"
    )
    # a NetworkPolicy that isolates the destination overrides the Baseline tier
    allow = [_np("app-ns", "allow-app", podSelector={}, ingress=[{"from": [{"podSelector": {}}]}])]
    ok = decide(APP, APP2, "TCP", 80, allow, NAMESPACES, cluster_policies=cnps)
    assert ok.allowed and ok.ingress.policy == "app-ns/allow-app"
    # ... and when it isolates without allowing, the NetworkPolicy names the drop
    only_web = [_np("app-ns", "only-web", podSelector={}, ingress=[{"ports": [{"port": 8080}]}])]
    no = decide(APP, APP2, "TCP", 80, only_web, NAMESPACES, cluster_policies=cnps)
    assert not no.allowed and no.ingress.policy == "app-ns/only-web"


def test_a_node_or_an_outside_address_is_no_namespaces_peer() -> None:
    cnps = [STORY_5]
    node = ip_address("192.168.0.1")
    got = decide(node, APP, "TCP", 80, [], NAMESPACES, cluster_policies=cnps, src_is_dst_node=True)
    assert got.allowed
    outside = decide(
        ip_address("203.0.113.7"), APP, "TCP", 80, [], NAMESPACES, cluster_policies=cnps
    )
    assert outside.allowed and outside.ingress.reason == "not isolated for ingress"


def _one_rule(name: str, tier: str, priority: int, action: str) -> ClusterNetworkPolicy:
    return _wire(name, tier, priority, ingress=[{"action": action, "from": [{"namespaces": {}}]}])


@pytest.mark.parametrize(
    ("policies", "allowed", "by"),
    [
        ([("a", 20, "Accept"), ("b", 10, "Deny")], False, "b"),  # lower number first
        ([("a", 10, "Accept"), ("b", 20, "Deny")], True, "a"),
        ([("b", 10, "Accept"), ("a", 10, "Deny")], False, "a"),  # equal: by name
        ([("a", 10, "Pass"), ("b", 20, "Accept")], True, None),  # Pass skips the tier
    ],
)
def test_admin_policies_go_by_priority_then_name(
    policies: list[tuple[str, int, str]], allowed: bool, by: str | None
) -> None:
    cnps = [_one_rule(n, "Admin", p, a) for n, p, a in policies]
    got = decide(APP, APP2, "TCP", 80, [], NAMESPACES, cluster_policies=cnps)
    assert got.allowed is allowed
    assert got.ingress.policy == (None if by is None else f"ClusterNetworkPolicy/{by}")


def test_rules_of_one_policy_go_in_order_and_protocols_narrow_them() -> None:
    pol = _wire(
        "ordered",
        "Admin",
        5,
        ingress=[
            {
                "name": "web",
                "action": "Accept",
                "from": [{"namespaces": {}}],
                "protocols": [{"tcp": {"destinationPort": {"range": {"start": 80, "end": 90}}}}],
            },
            {"name": "rest", "action": "Deny", "from": [{"namespaces": {}}]},
        ],
    )
    for port, allowed, rule in ((80, True, 0), (90, True, 0), (91, False, 1)):
        got = decide(APP, APP2, "TCP", port, [], NAMESPACES, cluster_policies=[pol])
        assert got.allowed is allowed
        assert got.ingress.rule is not None and got.ingress.rule.startswith(f"ingress[{rule}]")
    assert not decide(APP, APP2, "UDP", 80, [], NAMESPACES, cluster_policies=[pol]).allowed


def test_baseline_pass_leaves_the_kubernetes_default() -> None:
    cnps = [_one_rule("p", "Baseline", 1, "Pass"), _one_rule("d", "Baseline", 2, "Deny")]
    got = decide(APP, APP2, "TCP", 80, [], NAMESPACES, cluster_policies=cnps)
    assert got.allowed
    assert got.ingress.reason == (
        "not isolated for ingress; passed by ClusterNetworkPolicy/p ingress[0].from[0]"
    )


def test_egress_networks_match_pod_addresses_too() -> None:
    pol = _wire(
        "no-10", "Admin", 1, egress=[{"action": "Deny", "to": [{"networks": ["10.0.4.0/24"]}]}]
    )
    assert not decide(APP, PUB, "TCP", 80, [], NAMESPACES, cluster_policies=[pol]).allowed
    assert decide(APP, APP2, "TCP", 80, [], NAMESPACES, cluster_policies=[pol]).allowed
    outside = ip_address("10.0.4.200")
    got = decide(APP, outside, "TCP", 80, [], NAMESPACES, cluster_policies=[pol])
    assert got.egress.rule == "egress[0].to[0]" and not got.allowed


def test_a_pod_reaching_itself_is_subject_only_through_a_service() -> None:
    cnps = [STORY_5]
    assert decide(APP, APP, "TCP", 80, [], NAMESPACES, cluster_policies=cnps).allowed
    via = decide(APP, APP, "TCP", 80, [], NAMESPACES, cluster_policies=cnps, through_service=True)
    assert not via.allowed


def test_host_network_pods_are_neither_subjects_nor_peers() -> None:
    host = PolicyPod("app-ns", "h", {"app": "app"}, ip_address("192.168.0.9"), host_network=True)
    cnps = [STORY_5]
    assert decide(APP, host, "TCP", 80, [], NAMESPACES, cluster_policies=cnps).allowed
    assert decide(host, APP, "TCP", 80, [], NAMESPACES, cluster_policies=cnps).allowed


def test_peers_svclab_cannot_evaluate_fail_closed_as_the_api_says() -> None:
    nodes_peer = [{"nodes": {}}]
    accept = _wire("a", "Admin", 1, egress=[{"action": "Accept", "to": nodes_peer}])
    deny = _wire("b", "Admin", 2, egress=[{"action": "Pass", "to": nodes_peer}])
    bad = _wire(
        "c",
        "Admin",
        3,
        ingress=[
            {
                "action": "Deny",
                "from": [{"namespaces": {"matchExpressions": [{"key": "x", "operator": "In"}]}}],
            }
        ],
    )
    # Accept with an unknown peer matches nothing: the Pass-turned-Deny-all decides
    got = decide(APP, APP2, "TCP", 80, [], NAMESPACES, cluster_policies=[accept, deny])
    assert not got.allowed
    assert got.egress.policy == "ClusterNetworkPolicy/b"
    assert "(not evaluated: fails closed)" in got.egress.reason
    assert decide(APP, APP2, "TCP", 80, [], NAMESPACES, cluster_policies=[accept]).allowed
    assert not decide(APP, APP2, "TCP", 80, [], NAMESPACES, cluster_policies=[bad]).allowed


def test_with_no_cluster_policy_the_answer_is_netpolicy_decide() -> None:
    nps = [
        _np("app-ns", "deny-all", **DENY_ALL),
        _np("bar-ns-1", "web", podSelector={}, ingress=[{"ports": [{"port": "web-alt"}]}]),
    ]
    pods = [SECRET, PROM, DNS, PUB, OTHER, APP, APP2]
    for src in pods:
        for dst in pods:
            for proto, port in (("TCP", 8081), ("UDP", 53)):
                assert decide(src, dst, proto, port, nps, NAMESPACES) == netpolicy.decide(
                    src, dst, proto, port, nps, NAMESPACES
                )


def test_the_wire_form_reads_every_field() -> None:
    pol = STORY_3
    assert (pol.key, pol.tier, pol.priority) == (
        "ClusterNetworkPolicy/pub-svc-delegate-example",
        "Admin",
        20,
    )
    [rule] = pol.egress
    assert rule.action == "Pass" and rule.name == ""
    assert [m.describe() for m in rule.protocols] == [
        "TCP 8080",
        "destinationNamedPort web-alt",
        "UDP 53",
    ]
    assert rule.peers[0].describe() == (
        "pods namespaceSelector kubernetes.io/metadata.name=bar-ns-1, podSelector app=svc-pub"
    )
