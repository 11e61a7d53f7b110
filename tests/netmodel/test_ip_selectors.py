"""IP helpers (strict and kube-proxy's sloppy parsing) and label selectors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netmodel.ip import (
    join_host_port,
    parse_cidr_sloppy,
    parse_ip_sloppy,
    split_host_port,
)
from netmodel.selectors import LabelSelector, parse_selector


def test_sloppy_ip_drops_leading_zeros() -> None:
    assert str(parse_ip_sloppy("172.30.0.041")) == "172.30.0.41"
    assert str(parse_ip_sloppy("10.180.00.001")) == "10.180.0.1"
    assert parse_ip_sloppy("not-an-ip") is None
    assert str(parse_cidr_sloppy(" 203.0.113.000/025")) == "203.0.113.0/25"
    assert parse_cidr_sloppy("203.0.113.0") is None


def test_join_host_port() -> None:
    assert join_host_port("10.0.0.1", 80) == "10.0.0.1:80"
    assert join_host_port("fd00::1", 80) == "[fd00::1]:80"
    assert split_host_port("[fd00::1]:80") == ("fd00::1", 80)


@given(st.ip_addresses(), st.integers(min_value=0, max_value=65535))
def test_host_port_roundtrip(ip, port) -> None:  # type: ignore[no-untyped-def]
    host, p = split_host_port(join_host_port(ip, port))
    assert (host, p) == (str(ip), port)


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("app=web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app!=web", {}, True),
        ("tier in (a, b),app", {"tier": "b", "app": "x"}, True),
        ("tier notin (a)", {"tier": "a"}, False),
        ("!canary", {"canary": "1"}, False),
        ("", {"x": "y"}, True),
    ],
)
def test_selector_text(text: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_selector(text).matches(labels) is matches


def test_empty_selector_matches_everything() -> None:
    assert LabelSelector().matches({"a": "b"})
