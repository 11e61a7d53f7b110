"""``svclab dig --real`` and names as destinations of ``connect --real``: the question
from the real pod's namespace, the name resolved by the pod's own libc."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from dataplane.linux.netns import is_root

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 2, dns: true}
---
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 80}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec: {containers: [{name: c, image: busybox}]}
"""


def test_dig_and_connect_by_name_on_the_kernel(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(MANIFEST)
    runner = CliRunner()
    r = runner.invoke(
        cli,
        [
            "dig",
            "pod/client",
            "web.default.svc.cluster.local",
            "-o",
            "json",
            "--real",
            "-f",
            str(f),
        ],
    )
    assert r.exit_code == 0, r.output
    j = json.loads(r.stdout)
    assert j["status"] == "NOERROR" and j["answer"][0].startswith(
        "web.default.svc.cluster.local. 30 IN A "
    )
    assert j["server_pod"].startswith("kube-system/coredns-")
    r = runner.invoke(
        cli,
        [
            "connect",
            "pod/default/client",
            "web:80",
            "-n",
            "2",
            "-o",
            "json",
            "--real",
            "-f",
            str(f),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "web resolved to " in r.stderr
    conns = json.loads(r.stdout)["connections"]
    assert [c["pod"] for c in conns] == ["default/web", "default/web"]
    r = runner.invoke(
        cli, ["connect", "pod/default/client", "nope:80", "-n", "1", "--real", "-f", str(f)]
    )
    assert r.exit_code == 1 and "cannot resolve 'nope'" in r.stderr
