"""netmodel.netpolicy: the reference semantics of NetworkPolicy, on the docs' cases."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any

from netmodel.netpolicy import PolicyPod, decide, policy_from_wire

NS = {
    "shop": {"kubernetes.io/metadata.name": "shop"},
    "web": {"kubernetes.io/metadata.name": "web", "team": "web"},
    "other": {"kubernetes.io/metadata.name": "other"},
}
API = PolicyPod(
    "shop", "api", {"app": "api"}, ip_address("10.244.1.5"), "node-1", {"http": ("TCP", 8080)}
)
FRONT = PolicyPod("web", "front", {"app": "front"}, ip_address("10.244.2.7"), "node-2")
STRAY = PolicyPod("other", "stray", {"app": "front"}, ip_address("10.244.2.9"), "node-2")


def _np(ns: str, name: str, spec: dict[str, Any]) -> Any:
    spec = {"podSelector": {}, **spec}
    if "policyTypes" not in spec:
        spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]
    return policy_from_wire({"metadata": {"namespace": ns, "name": name}, "spec": spec})


DENY = _np("shop", "deny-all", {})
ALLOW_FRONT = _np(
    "shop",
    "allow-frontend",
    {
        "podSelector": {"matchLabels": {"app": "api"}},
        "ingress": [
            {
                "from": [
                    {"podSelector": {"matchLabels": {"app": "x"}}},
                    {"namespaceSelector": {"matchLabels": {"team": "web"}}},
                ],
                "ports": [{"protocol": "TCP", "port": "http"}],
            }
        ],
    },
)


def test_no_policy_allows_everything() -> None:
    d = decide(FRONT, API, "TCP", 8080, [], NS)
    assert d.allowed and d.ingress.policy is None


def test_default_deny_drops_and_names_the_policy() -> None:
    d = decide(FRONT, API, "TCP", 8080, [DENY], NS)
    assert not d.allowed
    assert d.deciding.describe() == "shop/deny-all (ingress, no rule matched) → DROP"


def test_allowing_rule_is_named_with_its_peer() -> None:
    d = decide(FRONT, API, "TCP", 8080, [DENY, ALLOW_FRONT], NS)
    assert d.allowed
    assert d.ingress.describe() == (
        "shop/allow-frontend ingress[0].from[1] (namespaceSelector team=web) → ACCEPT"
    )


def test_named_port_resolves_on_the_destination_only() -> None:
    assert not decide(FRONT, API, "TCP", 80, [ALLOW_FRONT], NS).allowed
    assert not decide(FRONT, API, "UDP", 8080, [ALLOW_FRONT], NS).allowed


def test_namespace_selector_does_not_match_other_namespaces() -> None:
    assert not decide(STRAY, API, "TCP", 8080, [ALLOW_FRONT], NS).allowed


def test_own_node_is_always_let_in() -> None:
    node_ip = ip_address("192.168.0.11")
    d = decide(node_ip, API, "TCP", 8080, [DENY], NS, src_is_dst_node=True)
    assert d.allowed


def test_egress_isolation_and_ip_block_except() -> None:
    pol = _np(
        "web",
        "egress-out",
        {
            "egress": [
                {"to": [{"ipBlock": {"cidr": "10.244.0.0/16", "except": ["10.244.1.0/24"]}}]}
            ],
        },
    )
    assert pol.types == frozenset({"ingress", "egress"})
    assert not decide(FRONT, API, "TCP", 8080, [pol], NS).allowed
    other = ip_address("10.244.3.3")
    d = decide(FRONT, other, "TCP", 443, [pol], NS)
    assert d.allowed and d.egress.rule == "egress[0].to[0]"


def test_end_port_range() -> None:
    pol = _np(
        "shop",
        "range",
        {"ingress": [{"ports": [{"protocol": "TCP", "port": 8000, "endPort": 8100}]}]},
    )
    assert decide(FRONT, API, "TCP", 8080, [pol], NS).allowed
    assert not decide(FRONT, API, "TCP", 8101, [pol], NS).allowed
    assert decide(FRONT, API, "TCP", 8100, [pol], NS).ingress.rule == "ingress[0].ports[0]"
