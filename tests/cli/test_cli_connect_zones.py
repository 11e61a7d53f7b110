"""Zones end to end through the CLI: kube-proxy's rules on a zoned node keep the
endpoints hinted for its zone (or node), in every mode, and ``svclab connect`` shows
the per-zone shares (text and ``-o json``); a cluster without zones shows nothing new."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import cli

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: lab}}
spec:
  serviceCIDR: 10.96.0.0/12
  podCIDR: 10.244.0.0/16
  nodes:
  - {{name: node-1{z1}}}
  - {{name: node-2{z1}}}
  - {{name: node-3{z2}}}
  - {{name: node-4{z2}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, labels: {{app: web}}}}
spec:
  replicas: 4
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: registry.k8s.io/e2e-test-images/agnhost:2.47
        args: [netexec, --http-port=8080]
        ports: [{{name: http, containerPort: 8080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  selector: {{app: web}}
{td}  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  nodeName: node-1
  containers: [{{name: c, image: busybox}}]
"""


def _file(tmp: Path, name: str, *, zones: bool, td: str | None) -> str:
    z1, z2 = (", zone: zone-a", ", zone: zone-b") if zones else ("", "")
    text = CLUSTER.format(z1=z1, z2=z2, td=f"  trafficDistribution: {td}\n" if td else "")
    path = tmp / name
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("zones")


def run(*args: str) -> Result:
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return res


def _svc_jumps(text: str) -> int:
    """How many endpoints the ClusterIP chain of default/web:http chooses among."""
    return len(re.findall(r"-A KUBE-SVC-\S+ -m comment --comment \"default/web:http -> ", text))


def test_rules_keep_the_zone_or_node_endpoints(tmp: Path) -> None:
    zoned = _file(tmp, "zone.yaml", zones=True, td="PreferSameZone")
    plain = _file(tmp, "plain.yaml", zones=False, td="PreferSameZone")
    node = _file(tmp, "node.yaml", zones=True, td="PreferSameNode")
    assert _svc_jumps(run("rules", "-f", plain, "--node", "node-3").output) == 4
    assert _svc_jumps(run("rules", "-f", zoned, "--node", "node-3").output) == 2
    assert _svc_jumps(run("rules", "-f", node, "--node", "node-3").output) == 1
    # the other renderers share the model: nftables and IPVS keep the same endpoints
    nft = run("rules", "-f", zoned, "--node", "node-3", "--mode", "nftables").output
    assert len(re.findall(r"goto endpoint-\S+default/web/tcp/http__", nft)) == 2, nft
    ipvs = run("rules", "-f", zoned, "--node", "node-3", "--mode", "ipvs").output
    assert len(re.findall(r"^-a -t \S+:80 -r ", ipvs, re.M)) == 2, ipvs


def test_connect_shows_zone_shares(tmp: Path) -> None:
    zoned = _file(tmp, "zone.yaml", zones=True, td="PreferSameZone")
    doc = json.loads(
        run(
            "connect",
            "-f",
            zoned,
            "pod/default/client",
            "svc/default/web:80",
            "-n",
            "20",
            "-o",
            "json",
        ).output
    )
    assert doc["zones"] == {"zone-a": {"count": 20, "share": 1.0}}
    text = run("connect", "-f", zoned, "pod/default/client", "svc/default/web:80", "-n", "8")
    assert re.search(r"^ZONE\s+COUNT\s+SHARE\n^zone-a \(source\)\s+8\s+1\.000$", text.output, re.M)
    # no trafficDistribution: connections reach both zones, and both are listed
    spread = _file(tmp, "spread.yaml", zones=True, td=None)
    doc = json.loads(
        run(
            "connect",
            "-f",
            spread,
            "pod/default/client",
            "svc/default/web:80",
            "-n",
            "60",
            "-o",
            "json",
        ).output
    )
    assert set(doc["zones"]) == {"zone-a", "zone-b"}
    assert sum(z["count"] for z in doc["zones"].values()) == 60


def test_connect_without_zones_is_unchanged(tmp: Path) -> None:
    plain = _file(tmp, "plain.yaml", zones=False, td="PreferSameZone")
    doc = json.loads(
        run(
            "connect",
            "-f",
            plain,
            "pod/default/client",
            "svc/default/web:80",
            "-n",
            "4",
            "-o",
            "json",
        ).output
    )
    assert "zones" not in doc
    text = run("connect", "-f", plain, "pod/default/client", "svc/default/web:80", "-n", "4")
    assert "ZONE" not in text.output
