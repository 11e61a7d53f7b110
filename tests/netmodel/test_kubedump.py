"""``kubectl get -A -o yaml`` dumps as apply input: List documents, server-set metadata,
kinds svclab does not model (skipped, counted), and the Cluster inferred."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from app.cli.main import cli
from netmodel.errors import InputError
from netmodel.manifests import load, load_text

DUMP = Path(__file__).resolve().parents[1] / "data" / "kubectl-dumps" / "small-list.yaml"


def test_dump_is_read_with_the_cluster_inferred() -> None:
    m = load([DUMP])
    assert dict(m.skipped) == {"ConfigMap": 1, "ServiceAccount": 1}
    assert m.cluster is not None
    spec = m.cluster.spec
    assert spec.service_cidr == "10.8.0.0/20"
    assert spec.pod_cidr == "10.4.1.0/24" and spec.node_cidr_mask_size == 24
    assert spec.proxy_mode == "ipvs" and spec.allocation == "recorded"
    assert spec.kubernetes_service is False and spec.node_count == 0
    assert any("inferred" in w for w in m.warnings)
    assert sorted(o.name for o in m.objects) == ["kubernetes", "web", "worker-1"]


def test_service_cidr_objects_win_over_inference() -> None:
    doc = yaml.safe_load(DUMP.read_text())
    doc["items"].append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "ServiceCIDR",
            "metadata": {"name": "kubernetes", "uid": "x"},
            "spec": {"cidrs": ["10.8.0.0/16"]},
        }
    )
    m = load_text(json.dumps(doc), source="dump.json")  # -o json is YAML too
    assert m.cluster is not None and m.cluster.spec.service_cidr == "10.8.0.0/16"
    assert not m.warnings


def test_hand_written_manifests_still_refuse_unknown_kinds() -> None:
    text = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a}\n"
    with pytest.raises(InputError, match="unknown kind 'ServiceAccount'"):
        load_text(text, source="m.yaml")


def test_apply_keeps_recorded_cluster_ips_and_node_ports(tmp_path: Path) -> None:
    run = CliRunner().invoke
    r = run(cli, ["--state", str(tmp_path / "s"), "apply", "-f", str(DUMP)])
    assert r.exit_code == 0, r.output
    assert "skipped 2 objects of kinds svclab does not model: 1 ConfigMap, 1 ServiceAccount" in (
        r.output
    )
    r = run(cli, ["--state", str(tmp_path / "s"), "get", "svc", "-A", "-o", "json"])
    items = {i["metadata"]["name"]: i for i in json.loads(r.output)["items"]}
    assert items["web"]["spec"]["clusterIP"] == "10.8.12.34"
    assert items["web"]["spec"]["ports"][0]["nodePort"] == 31234
    assert items["kubernetes"]["spec"]["clusterIP"] == "10.8.0.1"
