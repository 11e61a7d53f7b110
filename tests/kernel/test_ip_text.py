"""``ip addr`` / ``ip route`` / ``ip rule`` text (what people paste into a node dump)
reads as the ``ip -j`` output of the same namespace: both forms printed by the real
``ip`` on a namespace shaped like a real node (cilium-kpr-gke-dpv2: a fwmark rule to a
table with a ``local default`` route, the local rule moved; eks-branch-eni-policy-routing:
rules by ``iif`` and ``to``), and read through :mod:`dataplane.nodedump.routing`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataplane.linux.netns import is_root
from dataplane.nodedump.iptext import addr_text, route_text, rule_text
from dataplane.nodedump.routing import parse_addrs, parse_routes, parse_rules
from tests.kernel.nodeshape import run, shaped_node

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

DATA = Path(__file__).resolve().parents[1] / "data" / "node-dumps"


def _routes(rs: list) -> list:  # type: ignore[type-arg]
    return sorted(
        (r.table, r.type, str(r.dst), r.dev, str(r.gateway), str(r.prefsrc), r.metric)
        for r in rs
    )


@pytest.mark.parametrize(
    "name", ["cilium-kpr-gke-dpv2", "eks-branch-eni-policy-routing", "flannel-nftables"]
)
def test_text_reads_as_json(name: str) -> None:
    with shaped_node(DATA / name) as shaped:
        node = shaped.node
        run(node, "ip", "rule", "add", "not", "fwmark", "0x1/0x1", "priority", "7", "table", "100")
        run(node, "ip", "addr", "add", "10.99.0.5/24", "dev", "lo", "label", "lo:k")
        run(node, "ip", "addr", "add", "10.99.0.6/24", "dev", "lo")  # a secondary
        a_txt, a_js = run(node, "ip", "addr"), json.loads(run(node, "ip", "-j", "addr"))
        assert parse_addrs(addr_text(a_txt, "a"), "a") == parse_addrs(a_js, "a")
        assert any(a.secondary for a in parse_addrs(a_js, "a"))
        r_txt = run(node, "ip", "route", "show", "table", "all")
        r_js = json.loads(run(node, "ip", "-j", "route", "show", "table", "all"))
        assert _routes(parse_routes(route_text(r_txt, "r"), "r")) == _routes(
            parse_routes(r_js, "r")
        )
        u_txt, u_js = run(node, "ip", "rule"), json.loads(run(node, "ip", "-j", "rule"))
        assert parse_rules(rule_text(u_txt, "u"), "u") == parse_rules(u_js, "u")
        assert any(r.invert for r in parse_rules(u_js, "u"))
