"""A node dumped while someone traced it (``meta nftrace set 1`` in a prerouting chain at
-301 and an output chain, tests/data/node-dumps/kube-proxy-nftables-k3s-nftrace): ``svclab
trace --node-dump`` answers it, and since the rule only marks packets for ``nft monitor
trace``, every flow goes where it goes on the same node without it. (The kernel agrees:
tests/kernel/test_node_dump_nftrace.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from app.cli.main import cli
from dataplane.nodedump import NodeFlow, NodeTracer, load_node_dump

DATA = Path(__file__).resolve().parents[2] / "data" / "node-dumps"
TRACED = DATA / "kube-proxy-nftables-k3s-nftrace"
PLAIN = DATA / "kube-proxy-nftables-k3s"


def answers(dump: Path) -> list[dict[str, object]]:
    res = CliRunner().invoke(
        cli, ["trace", "--node-dump", str(dump), "--all", "--flows", str(TRACED / "flows.yaml")]
    )
    assert res.exit_code == 0, res.output
    out = [json.loads(line) for line in res.output.splitlines()]
    for a in out:  # the outcome, without the walk (the traced one walks the trace rule too)
        for key in ("at", "hops", "rules_visited"):
            a.pop(key, None)
    return out


def test_trace_answers_a_node_with_an_nftrace_rule_as_without_it() -> None:
    assert "meta nftrace set 1" in (TRACED / "nft-ruleset.txt").read_text()
    traced = answers(TRACED)
    assert len(traced) == len((TRACED / "flows.yaml").read_text().split("- {name:")) - 1
    assert traced == answers(PLAIN)


def test_the_trace_shows_the_packet_marked_for_nft_monitor_trace() -> None:
    tracer = NodeTracer(load_node_dump(str(TRACED)))
    for flow, hook, chain in (
        (NodeFlow("10.42.4.9", "10.43.0.1", 443), "PREROUTING", "trace_chain"),
        (NodeFlow("10.34.4.246", "10.43.0.10", 53, "udp"), "OUTPUT", "trace_out"),
    ):
        (branch,) = tracer.trace(flow)
        first = next(r for r in branch.records if r.table.startswith("nft:"))
        assert (first.hook, first.table, first.chain, first.effect) == (
            hook,
            "nft:ip trace",
            chain,
            "nftrace set 1",
        )
