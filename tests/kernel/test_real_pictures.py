"""``connect --real --plot``: the shares of connections the real kernel balanced, drawn."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from dataplane.linux.netns import is_root

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: plot}
spec: {nodes: 2}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: x, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeName: node-1
  containers: [{name: c, image: x}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
"""


def test_connect_real_plot(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    plot = tmp_path / "shares.png"
    res = CliRunner().invoke(
        cli,
        [
            "--state",
            str(tmp_path / "unused"),
            "connect",
            "--real",
            "-f",
            str(manifest),
            "pod/client",
            "svc/default/web:80",
            "-n",
            "20",
            "-o",
            "json",
            "--plot",
            str(plot),
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    counts = json.loads(res.output)["counts"]
    assert sum(counts.values()) == 20 and len(counts) == 2
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (800, 450)
