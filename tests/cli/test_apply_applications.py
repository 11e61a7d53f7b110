"""Applications as people ship them apply with nothing refused or skipped, and their
Services reach their pods: ``examples/shop.yaml`` (every everyday kind: ConfigMap,
Secret, ServiceAccount, RBAC, Deployment, StatefulSet with its headless Service,
DaemonSet, CronJob, Ingress, PDB, HPA, NetworkPolicy) and a chart rendered by ``helm
template`` (ingress-nginx's own rendering: tests/data/helm/ingress-nginx/PROVENANCE.md)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from app.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
SHOP = ROOT / "examples" / "shop.yaml"
CHART = ROOT / "tests" / "data" / "helm" / "ingress-nginx" / "deploy.yaml"


def run(state: Path, *args: str) -> Result:
    res = CliRunner().invoke(cli, ["--state", str(state), *args])
    assert res.exit_code == 0, res.output
    return res


def _kinds(path: Path) -> set[str]:
    import yaml

    return {d["kind"] for d in yaml.safe_load_all(path.read_text()) if d}


def _pods(state: Path, ns: str) -> dict[str, dict]:  # type: ignore[type-arg]
    items = json.loads(run(state, "get", "pods", "-n", ns, "-o", "json").output)["items"]
    return {i["metadata"]["name"]: i for i in items}


def test_the_shop_example_applies_whole_and_its_services_work(tmp_path: Path) -> None:
    s = tmp_path / "s"
    out = run(s, "apply", "-f", str(SHOP)).output
    assert "skipped" not in out and "error" not in out.lower()
    for kind in _kinds(SHOP):  # every object was created, whatever its kind
        assert f"{kind.lower()}/" in out, kind
    pods = _pods(s, "shop")
    assert {"db-0", "db-1"} <= set(pods)
    running = [n for n, p in pods.items() if p["status"]["phase"] == "Running"]
    assert len([n for n in running if n.startswith("web-")]) == 3
    nodes = json.loads(run(s, "get", "nodes", "-o", "json").output)["items"]
    exporters = [n for n in running if n.startswith("node-exporter-")]
    assert len(exporters) == len(nodes) >= 1  # one per node
    web = next(n for n in running if n.startswith("web-"))
    # the web Service reaches a web pod; the database answers by its pod's own name
    trace = run(s, "trace", "--from", f"pod/shop/{web}", "--to", "svc/shop/web:80").output
    assert "delivered" in trace and "shop/web-" in trace
    dig = run(s, "dig", f"pod/shop/{web}", "db-0.db.shop.svc.cluster.local").output
    assert pods["db-0"]["status"]["podIP"] in dig
    # the DaemonSet's pods use the node's own address (hostNetwork)
    node_ips = {a["address"] for n in nodes for a in n["status"]["addresses"]}
    assert {p["status"]["podIP"] for n, p in pods.items() if n.startswith("node-exporter-")} <= (
        node_ips
    )


def test_a_helm_rendered_chart_applies_whole_and_its_services_work(tmp_path: Path) -> None:
    s = tmp_path / "s"
    out = run(s, "apply", "-f", str(CHART)).output
    assert "skipped" not in out and "error" not in out.lower()
    for kind in _kinds(CHART):
        assert f"{kind.lower()}/" in out, kind
    pods = _pods(s, "ingress-nginx")
    (controller,) = [n for n in pods if n.startswith("ingress-nginx-controller-")]
    assert pods[controller]["status"]["phase"] == "Running"
    svc = json.loads(
        run(s, "get", "svc", "-n", "ingress-nginx", "ingress-nginx-controller", "-o", "json").output
    )
    node_port = svc["spec"]["ports"][0]["nodePort"]
    node = json.loads(run(s, "get", "nodes", "-o", "json").output)["items"][0]
    node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    # from a client outside the cluster, through the NodePort, to the controller pod
    trace = run(s, "trace", "--from", "203.0.113.7", "--to", f"{node_ip}:{node_port}").output
    assert "delivered" in trace and f"ingress-nginx/{controller}" in trace, trace
