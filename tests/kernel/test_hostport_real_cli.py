"""hostPort through the CLI on the real kernel (mark.kernel): ``apply`` a pod with a
``hostPort`` + ``up --real`` + ``trace --real`` / ``connect --real`` + ``down``. The
kernel's trace names the same ``CNI-DN-…`` chain and DNAT rule as the emulator's
``trace`` of the same flow (one container id on both backends), the real ``portmap``
plugin wrote it (the CNI result of the pod records the mappings it was given), a node
without the pod refuses, and a second ``up`` leaves the plugin's rules alone."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app import real
from app.cli.main import cli
from dataplane.linux import rules
from dataplane.linux.netns import is_root
from dataplane.linux.realize import RealCluster
from dataplane.linux.testing import leftovers

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

EXT = "203.0.113.31"
APP = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: hostportcli}
spec: {nodes: 2, dns: false}
---
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  nodeName: node-2
  containers: [{name: c, image: nginx, ports: [{containerPort: 8080, hostPort: 30080}]}]
"""


def run(state: Path, *args: str) -> Result:
    res = CliRunner().invoke(cli, ["--state", str(state), *args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """A state dir with the app applied; its real cluster is always removed."""
    d = tmp_path / "state"
    app = tmp_path / "app.yaml"
    app.write_text(APP)
    run(d, "apply", "-f", str(app))
    try:
        yield d
    finally:
        record = real.RealRecord.read(d)
        real.down(d)
        if record is not None:
            assert leftovers(record.cluster_id) == []


def _node_ip(state: Path, node: str) -> str:
    rows = run(state, "get", "nodes", "-o", "wide").output.splitlines()[1:]
    return {r.split()[0]: r.split()[5] for r in rows}[node]


def test_trace_and_connect_real_to_a_host_port(state: Path) -> None:
    node1, node2 = _node_ip(state, "node-1"), _node_ip(state, "node-2")
    emu = run(state, "trace", "--from", EXT, "--to", f"{node2}:30080").output
    [emu_chain] = set(re.findall(r"nat/(CNI-DN-[0-9a-f]{21})", emu))

    run(state, "up", "--real", "--external-client", EXT)
    record = real.RealRecord.read(state)
    assert record is not None
    cluster = RealCluster.load(record.cluster_id)
    cached = cluster.state.read_json(cluster.state.cni_result("default/web"))
    assert cached["port_mappings"] == [
        {"hostPort": 30080, "containerPort": 8080, "protocol": "tcp", "hostIP": ""}
    ]
    pod_ip = str(cluster.pods["default/web"].ip)

    t = json.loads(
        run(state, "trace", "--real", "--from", EXT, "--to", f"{node2}:30080", "-o", "json").output
    )
    assert t["delivered"] and t["pod"] == "default/web" and t["source_seen"] == EXT
    dnat = [r for r in t["rules"] if r["table"] == "nat" and "-j DNAT" in r["rule"]]
    assert [(r["node"], r["chain"], r["packets"]) for r in dnat] == [("node-2", emu_chain, 1)]
    assert f"--to-destination {pod_ip}:8080" in dnat[0]["rule"]
    assert dnat[0]["rule"] in emu  # the emulator's trace shows the very rule

    out = json.loads(
        run(state, "connect", "--real", EXT, f"{node1}:30080", "-n", "2", "-o", "json").output
    )
    assert {c["verdict"] for c in out["connections"]} != {"delivered"}  # node-1: no pod

    # up again: nothing to do, the plugin's rules keep their counters
    netns = cluster.node_netns("node-2")
    before = [r for r in rules.rule_counters(netns, table="nat") if r.chain == emu_chain]
    assert any(r.packets for r in before)
    run(state, "up", "--real", "--external-client", EXT)
    assert [r for r in rules.rule_counters(netns, table="nat") if r.chain == emu_chain] == before
