"""Fixtures: the TestOverallIPTablesRules dump plus kube-proxy's built-in jump rules."""

from __future__ import annotations

from typing import Any

import pytest
from nf_cases import jump_payload, load_case

from dataplane.netfilter import Ruleset, apply_restore, parse_save


@pytest.fixture(scope="session")
def overall_case() -> dict[str, Any]:
    return load_case("TestOverallIPTablesRules")


@pytest.fixture(scope="session")
def overall_ruleset(overall_case: dict[str, Any]) -> Ruleset:
    base = parse_save(overall_case["expected_iptables_restore"], source="expected_iptables_restore")
    return apply_restore(base, jump_payload(), noflush=True, source="jumps")
