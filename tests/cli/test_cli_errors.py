"""Bad input through the CLI: one line on stderr naming file, document, object and field;
exit code 1 (2 for bad usage); the stored cluster unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from control.store.sqlite import SqliteStore

GOOD = Path(__file__).resolve().parents[2] / "examples" / "web.yaml"

SVC = "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec: {spec}\n"

BAD: dict[str, tuple[str, str]] = {
    "malformed YAML": ("apiVersion: v1\nkind: [", "bad.yaml: malformed YAML: line 2"),
    "unknown kind": (
        "apiVersion: v1\nkind: Servise\nmetadata: {name: x}\n",
        "bad.yaml (document 1): Servise/x: kind: unknown kind 'Servise'",
    ),
    "unknown field": (
        SVC.format(name="x", spec="{ports: [{port: 80}], selectr: {a: b}}"),
        "bad.yaml (document 1): Service/x: spec.selectr: unknown field",
    ),
    "clusterIP out of range": (
        SVC.format(name="x", spec="{clusterIP: 10.200.0.1, ports: [{port: 80}]}"),
        "Service/default/x: spec.clusterIPs",
    ),
    "clusterIP taken": (
        SVC.format(name="x", spec="{clusterIP: 10.96.0.1, ports: [{port: 80}]}"),
        "Service/default/x: spec.clusterIPs",
    ),
    "duplicate nodePort": (
        SVC.format(name="x", spec="{type: NodePort, ports: [{port: 80, nodePort: 30500}]}")
        + "---\n"
        + SVC.format(name="y", spec="{type: NodePort, ports: [{port: 80, nodePort: 30500}]}"),
        "Service/default/y: spec.ports[0].nodePort",
    ),
    "bad KubeProxyConfiguration mode": (
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: userspace\n",
        "bad.yaml (document 1): KubeProxyConfiguration: mode:",
    ),
    "unknown KubeProxyConfiguration field": (
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\niptables: {masqueradeBits: 3}\n",
        "bad.yaml (document 1): KubeProxyConfiguration: iptables.masqueradeBits: unknown field",
    ),
}


def _state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    res = CliRunner().invoke(cli, ["--state", str(state), "apply", "-f", str(GOOD)])
    assert res.exit_code == 0, res.output
    return state


def _revision(state: Path) -> int:
    with SqliteStore(state / "state.db") as store:
        return store.revision


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_refused_and_changes_nothing(case: str, tmp_path: Path) -> None:
    text, expected = BAD[case]
    state = _state(tmp_path)
    before = _revision(state)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = CliRunner().invoke(cli, ["--state", str(state), "apply", "-f", "bad.yaml"])
    finally:
        os.chdir(cwd)
    assert res.exit_code == 1, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1, res.output
    assert lines[0].startswith("error: "), lines[0]
    assert expected in lines[0], lines[0]
    assert _revision(state) == before


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        (
            "{serviceCIDR: 10.240.0.0/12}",
            "serviceCIDR 10.240.0.0/12 overlaps podCIDR 10.244.0.0/16",
        ),
        ("{podCIDR: 10.244.0.0/99}", "spec.podCIDR: invalid CIDR"),
        (
            "{nodes: 300}",
            "300 nodes need 300 podCIDRs of /24 but podCIDR 10.244.0.0/16 holds only 256",
        ),
    ],
)
def test_bad_cluster_creates_no_state(cluster: str, expected: str, tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(f"apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {cluster}\n")
    state = tmp_path / "state"
    res = CliRunner().invoke(cli, ["--state", str(state), "apply", "-f", str(f)])
    assert res.exit_code == 1
    assert expected in res.output and res.output.count("\n") == 1
    assert not (state / "cluster.yaml").exists()


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    state = _state(tmp_path)
    res = CliRunner().invoke(cli, ["--state", str(state), "get", "widgets"])
    assert res.exit_code == 2
    res = CliRunner().invoke(cli, ["--state", str(state), "rules"])
    assert res.exit_code == 2


def test_get_missing_object_and_missing_state(tmp_path: Path) -> None:
    state = _state(tmp_path)
    res = CliRunner().invoke(cli, ["--state", str(state), "get", "svc", "nope"])
    assert res.exit_code == 1 and 'services "nope" not found' in res.output
    res = CliRunner().invoke(cli, ["--state", str(tmp_path / "empty"), "get", "pods"])
    assert res.exit_code == 1 and "no cluster here yet" in res.output


def test_get_after_restart_and_kubectl_like_tables(tmp_path: Path) -> None:
    state = _state(tmp_path)
    res = CliRunner().invoke(cli, ["--state", str(state), "get", "pods", "-o", "wide"])
    assert res.exit_code == 0
    header, *rows = res.output.splitlines()
    assert header.split()[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert len(rows) == 3 and all("Running" in r for r in rows)
    assert len({r.split()[6] for r in rows}) == 3  # three different nodes
    res = CliRunner().invoke(cli, ["--state", str(state), "get", "svc", "-A"])
    assert res.output.splitlines()[0].startswith("NAMESPACE")
    res = CliRunner().invoke(cli, ["--state", str(state), "events", "-o", "json"])
    assert res.exit_code == 0 and '"reason": "Scheduled"' in res.output


def test_reading_a_cluster_adds_no_events(tmp_path: Path) -> None:
    """rules/trace/get converge a fresh control plane (kube-proxies included) but leave
    the stored timeline as it was; apply and delete record their steps."""
    state = _state(tmp_path)
    before = _revision(state)
    pods = CliRunner().invoke(cli, ["--state", str(state), "get", "pods", "-o", "name"])
    pod = pods.output.split()[0].split("/")[1]
    for args in (
        ["rules", "--node", "node-1"],
        ["get", "events"],
        ["trace", "--from", f"pod/default/{pod}", "--to", "svc/default/web:80", "-o", "json"],
    ):
        res = CliRunner().invoke(cli, ["--state", str(state), *args])
        assert res.exit_code == 0, res.output
    assert _revision(state) == before
    res = CliRunner().invoke(cli, ["--state", str(state), "delete", "svc", "web"])
    assert res.exit_code == 0, res.output
    assert _revision(state) > before
