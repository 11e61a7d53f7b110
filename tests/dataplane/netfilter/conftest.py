"""Fixtures for the netfilter tests: the case files, kube-proxy's built-in jump rules
(STRUCTURE.md §1.2, applied the way kube-proxy ensures them: ``-I`` in list order, so
the last one listed ends up first) and the TestOverallIPTablesRules ruleset."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dataplane.netfilter import Ruleset, apply_restore, parse_save

CASES = Path(__file__).resolve().parents[2] / "data" / "kube-proxy" / "cases"

JUMPS = [
    (
        "filter",
        "INPUT",
        '-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
    ),
    (
        "filter",
        "FORWARD",
        '-m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
    ),
    (
        "filter",
        "INPUT",
        '-m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
    ),
    (
        "filter",
        "FORWARD",
        '-m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    ),
    (
        "filter",
        "OUTPUT",
        '-m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    ),
    ("filter", "FORWARD", '-m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD'),
    (
        "filter",
        "INPUT",
        '-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
    ),
    (
        "filter",
        "OUTPUT",
        '-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
    ),
    (
        "filter",
        "FORWARD",
        '-m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL',
    ),
    ("nat", "OUTPUT", '-m comment --comment "kubernetes service portals" -j KUBE-SERVICES'),
    ("nat", "PREROUTING", '-m comment --comment "kubernetes service portals" -j KUBE-SERVICES'),
    (
        "nat",
        "POSTROUTING",
        '-m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    ),
    ("filter", "INPUT", "-j KUBE-FIREWALL"),
    ("filter", "OUTPUT", "-j KUBE-FIREWALL"),
]


def jump_payload() -> str:
    """A restore payload inserting the jump rules (tables in first-use order)."""
    lines: list[str] = []
    for table in ("filter", "nat"):
        lines.append(f"*{table}")
        lines += [f"-I {chain} {spec}" for t, chain, spec in JUMPS if t == table]
        lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def load_case(name: str) -> dict[str, Any]:
    with open(CASES / f"{name}.yaml") as f:
        data: dict[str, Any] = yaml.safe_load(f)
    return data


@pytest.fixture(scope="session")
def jumps() -> str:
    """The restore payload that inserts kube-proxy's jumps from the built-in chains."""
    return jump_payload()


@pytest.fixture(scope="session")
def case() -> Callable[[str], dict[str, Any]]:
    """Load a case file by name."""
    return load_case


@pytest.fixture(scope="session")
def overall_case() -> dict[str, Any]:
    return load_case("TestOverallIPTablesRules")


@pytest.fixture(scope="session")
def overall_ruleset(overall_case: dict[str, Any]) -> Ruleset:
    base = parse_save(overall_case["expected_iptables_restore"], source="expected_iptables_restore")
    return apply_restore(base, jump_payload(), noflush=True, source="jumps")
