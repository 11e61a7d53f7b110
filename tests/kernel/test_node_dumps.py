"""Real nodes' dumps (tests/data/node-dumps/*, each with its SOURCE.md): the kernel and
``trace --node-dump`` agree flow by flow.

For each dump: a namespace shaped like that node is built from the dump
(:mod:`tests.kernel.nodeshape`), ``svclab node-dump collect`` runs inside it, ``svclab
trace --node-dump --all --flows`` answers the dump's flows (``flows.yaml``), and the
kernel answers the same flows (first packets sent into the namespace, outcome read from
its conntrack table): accepted or not, and the set of (destination after DNAT, source
address seen).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from app.cli.main import cli
from dataplane.linux.netns import is_root
from dataplane.nodedump import NodeFlow, NodeTracer, load_node_dump
from tests.kernel.nodeshape import kernel_outcomes, shaped_node

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

DATA = Path(__file__).resolve().parents[1] / "data" / "node-dumps"
KERNEL_DUMPS = sorted(
    p.name
    for p in DATA.iterdir()
    if (p / "flows.yaml").exists()
    and ((p / "ip-addr.json").exists() or (p / "ip-addr.txt").exists())
)


def expected_pairs(answer: dict[str, object]) -> set[tuple[str, str]]:
    """svclab's answer as the set of (destination after DNAT, source seen) accepted."""
    out: set[tuple[str, str]] = set()
    flow = answer["flow"]
    assert isinstance(flow, dict)
    endpoints = answer["endpoints"]
    assert isinstance(endpoints, list)
    for e in endpoints:
        if e["verdict"] != "ACCEPT":
            continue
        srcs = e["source"] if isinstance(e["source"], list) else [e["source"]]
        out |= {(e["endpoint"], s) for s in srcs}
    verdicts = answer["verdicts"]
    assert isinstance(verdicts, dict)
    if not endpoints and "ACCEPT" in verdicts:
        src = answer["source"]
        srcs = src if isinstance(src, list) else [src]
        out |= {(f"{flow['to']}:{flow['port']}", str(s)) for s in srcs}
    return out


def connections_for(endpoints: int) -> int:
    """Enough new connections that the kernel's random choice reaches every one of
    ``endpoints`` endpoints but with odds below one in a million (at least 24)."""
    if endpoints < 2:
        return 24
    return max(24, math.ceil(endpoints * math.log(endpoints * 1e6)))


@pytest.mark.parametrize("name", KERNEL_DUMPS)
def test_trace_node_dump_agrees_with_kernel(name: str, tmp_path: Path) -> None:
    dump = DATA / name
    flows = yaml.safe_load((dump / "flows.yaml").read_text())
    with shaped_node(dump) as shaped:
        collected = tmp_path / "collected"
        svclab = str(Path(sys.executable).with_name("svclab"))
        subprocess.run(
            ["ip", "netns", "exec", shaped.node, svclab, "node-dump", "collect", str(collected)],
            check=True,
            capture_output=True,
            env={**os.environ},
        )
        flows_file = tmp_path / "flows.yaml"
        flows_file.write_text(yaml.safe_dump(flows))
        res = CliRunner().invoke(
            cli, ["trace", "--node-dump", str(collected), "--all", "--flows", str(flows_file)]
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
            want = expected_pairs(answer)
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
            assert kernel == want, (
                f"{name} flow {f.get('name')}: kernel {sorted(kernel)} != svclab {sorted(want)}"
            )
