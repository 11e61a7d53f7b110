"""``connect --node-dump DIR --iif NAME`` against the kernel: a node whose answer depends
on the interface a connection arrives on (``-i cni0`` picks the pod endpoint, other
interfaces the host one, masqueraded; ``-i wg0`` is dropped in FORWARD), built in real
namespaces (:mod:`tests.kernel.nodeshape`), collected with ``node-dump collect``, then
the same connections sent into the namespace on each interface and read back from its
conntrack table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from dataplane.linux.netns import is_root
from tests.dataplane.nodedump.test_nodedump import iif_node
from tests.kernel.nodeshape import kernel_outcomes, shaped_node

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

N = 24


@pytest.mark.parametrize("iif", ["cni0", "eth0", "wg0"])
def test_connect_iif_agrees_with_kernel(iif: str, tmp_path: Path) -> None:
    dump = iif_node(tmp_path / "dump")
    with shaped_node(dump) as shaped:
        collected = tmp_path / "collected"
        svclab = str(Path(sys.executable).with_name("svclab"))
        subprocess.run(
            ["ip", "netns", "exec", shaped.node, svclab, "node-dump", "collect", str(collected)],
            check=True,
            capture_output=True,
            env={**os.environ},
        )
        argv = ["connect", "10.244.1.5", "10.96.0.5:80", "-n", str(N), "-o", "json"]
        r = CliRunner().invoke(cli, [*argv, "--node-dump", str(collected), "--iif", iif])
        assert r.exit_code == 0, r.output
        conns = json.loads(r.output)["connections"]
        svclab_says = {(c["endpoint"], c["source"]) for c in conns if c["verdict"] == "ACCEPT"}
        kernel = kernel_outcomes(
            shaped, "10.244.1.5", "10.96.0.5", 80, "tcp", local=False, in_iface=iif, count=N
        )
        assert kernel == svclab_says, f"--iif {iif}: kernel {kernel} != svclab {svclab_says}"
    want = {
        "cni0": {("10.244.1.7:80", "10.244.1.5")},
        "eth0": {("192.0.2.20:8080", "192.0.2.10")},
        "wg0": set(),
    }
    assert svclab_says == want[iif]
