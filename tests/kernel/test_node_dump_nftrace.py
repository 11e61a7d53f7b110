"""A real k3s node's dump with the trace rule people add when they debug (``meta nftrace
set 1``, tests/data/node-dumps/kube-proxy-nftables-k3s-nftrace): realised in a namespace
(:mod:`tests.kernel.nodeshape`, the trace table loaded with the rest by ``nft -f``),
collected there with ``svclab node-dump collect``, and ``svclab trace --node-dump --all``
answers each flow as the kernel does (accepted or not, the destination after DNAT and
the source address it sees)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from app.cli.main import cli
from dataplane.linux import netns as ns
from dataplane.nodedump import NodeFlow, NodeTracer, load_node_dump
from tests.kernel.nodeshape import kernel_outcomes, run, shaped_node
from tests.kernel.test_node_dumps import connections_for, expected_pairs

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not ns.is_root(), reason="needs root"),
]

DUMP = (
    Path(__file__).resolve().parents[1] / "data" / "node-dumps" / "kube-proxy-nftables-k3s-nftrace"
)


def test_trace_node_dump_with_nftrace_agrees_with_kernel(tmp_path: Path) -> None:
    flows = yaml.safe_load((DUMP / "flows.yaml").read_text())
    with shaped_node(DUMP) as shaped:
        # the kernel took the trace rule
        assert "meta nftrace set 1" in run(shaped.node, "nft", "list", "table", "ip", "trace")
        collected = tmp_path / "collected"
        svclab = str(Path(sys.executable).with_name("svclab"))
        subprocess.run(
            ["ip", "netns", "exec", shaped.node, svclab, "node-dump", "collect", str(collected)],
            check=True,
            capture_output=True,
            env={**os.environ},
        )
        assert "meta nftrace set 1" in (collected / "nft-ruleset.txt").read_text()
        res = CliRunner().invoke(
            cli,
            ["trace", "--node-dump", str(collected), "--all", "--flows", str(DUMP / "flows.yaml")],
        )
        assert res.exit_code == 0, res.output
        answers = [json.loads(line) for line in res.output.splitlines()]
        assert len(answers) == len(flows)
        tracer = NodeTracer(load_node_dump(str(collected)))
        for f, answer in zip(flows, answers, strict=True):
            host, _, port = str(f["to"]).rpartition(":")
            proto = f.get("proto", "tcp")
            flow = NodeFlow(str(f["from"]), host, int(port), proto, iif=f.get("iif"))
            local = tracer.origin(flow) == "out"
            kernel = kernel_outcomes(
                shaped,
                str(f["from"]),
                host,
                int(port),
                proto,
                local=local,
                in_iface=None if local else tracer.in_iface(flow),
                count=connections_for(len(answer["endpoints"])),
            )
            want = expected_pairs(answer)
            assert kernel == want, (
                f"flow {f['name']}: kernel {sorted(kernel)} != svclab {sorted(want)}"
            )
