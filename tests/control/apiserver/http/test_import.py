"""``svclab import --kubeconfig`` against a real ``svclab serve``: the objects read
through the API (official client) land in another state as recorded (ClusterIPs,
NodePorts, the Nodes), the kubeconfig's context is honoured, and a bad context or an
unreachable server is a one-line error."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from serving import SVCLAB, WEB, Served

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("serve-import") / "state")
    try:
        s.start()
        s.kubectl("apply", "-f", str(WEB))
        yield s
    finally:
        s.stop()


def _svclab(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SVCLAB, *args], capture_output=True, text=True, check=check, timeout=120)


def _services(state: Path) -> dict[str, dict[str, object]]:
    out = _svclab("--state", str(state), "get", "svc", "-A", "-o", "json").stdout
    return {i["metadata"]["name"]: i["spec"] for i in json.loads(out)["items"]}


def test_import_reads_the_served_cluster(srv: Served, tmp_path: Path) -> None:
    mine = tmp_path / "imported"
    r = _svclab("--state", str(mine), "import", "--kubeconfig", str(srv.kubeconfig))
    assert "service/web created" in r.stdout
    theirs = _services(srv.state)
    ours = _services(mine)
    assert ours["web"]["clusterIP"] == theirs["web"]["clusterIP"]
    assert ours["kubernetes"]["clusterIP"] == theirs["kubernetes"]["clusterIP"]
    nodes = json.loads(_svclab("--state", str(mine), "get", "nodes", "-o", "json").stdout)
    served = json.loads(_svclab("--state", str(srv.state), "get", "nodes", "-o", "json").stdout)
    assert sorted(n["metadata"]["name"] for n in nodes["items"]) == sorted(
        n["metadata"]["name"] for n in served["items"]
    )


def test_import_context_and_errors(srv: Served, tmp_path: Path) -> None:
    cfg = yaml.safe_load(srv.kubeconfig.read_text())
    ctx = cfg["current-context"]
    r = _svclab(
        "--state",
        str(tmp_path / "a"),
        "import",
        "--kubeconfig",
        str(srv.kubeconfig),
        "--context",
        ctx,
    )
    assert "service/web created" in r.stdout
    r = _svclab(
        "--state",
        str(tmp_path / "b"),
        "import",
        "--kubeconfig",
        str(srv.kubeconfig),
        "--context",
        "nope",
        check=False,
    )
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(srv.kubeconfig) in r.stderr and "Traceback" not in r.stderr
    for c in cfg["clusters"]:
        c["cluster"]["server"] = "https://127.0.0.1:1"
    bad = tmp_path / "kc"
    bad.write_text(yaml.safe_dump(cfg))
    r = _svclab("--state", str(tmp_path / "c"), "import", "--kubeconfig", str(bad), check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
