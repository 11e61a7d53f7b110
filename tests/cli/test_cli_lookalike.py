"""The CLI looks like the tools it imitates: kubectl's verbs, columns and lists,
iptables-save's comment lines, iputils ping's lines; and the rules a trace shows are the
very lines ``svclab rules`` prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from app.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "examples" / "web.yaml"

#: web.yaml's Deployment with 5 replicas (describe svc truncates after 3 endpoints)
SCALED = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 5
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: registry.k8s.io/e2e-test-images/agnhost:2.47
        args: [netexec, --http-port=8080]
        ports: [{name: http, containerPort: 8080}]
        resources: {requests: {cpu: 100m, memory: 64Mi}}
"""


def run(state: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--state", str(state), *args])


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = tmp_path_factory.mktemp("lookalike") / "state"
    res = run(s, "apply", "-f", str(WEB))
    assert res.exit_code == 0, res.output
    return s


def pods(state: Path) -> list[str]:
    res = run(state, "get", "pods", "-o", "name")
    return sorted(line.split("/", 1)[1] for line in res.stdout.split())


def test_apply_says_created_then_unchanged_then_configured(tmp_path: Path) -> None:
    s = tmp_path / "s"
    first = run(s, "apply", "-f", str(WEB)).stdout.splitlines()
    assert first == [
        "cluster.svclab.dev/lab created",
        "deployment/web created",
        "service/web created",
    ]
    before = revision(s)
    again = run(s, "apply", "-f", str(WEB)).stdout.splitlines()
    assert revision(s) == before  # nothing changed: nothing recorded (no kube-proxy syncs)
    assert again == [
        "cluster.svclab.dev/lab unchanged",
        "deployment/web unchanged",
        "service/web unchanged",
    ]
    (tmp_path / "scaled.yaml").write_text(SCALED)
    assert run(s, "apply", "-f", str(tmp_path / "scaled.yaml")).stdout == (
        "deployment/web configured\n"
    )
    syncs = [
        e["message"]
        for e in json.loads(run(s, "events", "-o", "json").stdout)["items"]
        if e["reason"] == "SyncProxyRules" and int(e["metadata"]["resourceVersion"]) > before
    ]
    # one record for all nodes (their rules are rendered from the store when asked for)
    assert syncs and all(m.startswith("all 3 nodes: ") for m in syncs), syncs


def revision(state: Path) -> int:
    from control.store.sqlite import SqliteStore

    with SqliteStore(state / "state.db") as store:
        return store.revision


def test_get_nodes_wide_has_kubectls_columns(state: Path) -> None:
    header, *rows = run(state, "get", "nodes", "-o", "wide").stdout.splitlines()
    assert re.split(r"\s{2,}", header) == [
        "NAME",
        "STATUS",
        "ROLES",
        "AGE",
        "VERSION",
        "INTERNAL-IP",
        "EXTERNAL-IP",
        "OS-IMAGE",
        "KERNEL-VERSION",
        "CONTAINER-RUNTIME",
    ]
    assert len(rows) == 3
    assert all(len(r.split()) == 10 for r in rows)
    assert "PodCIDR:" in run(state, "describe", "node", "node-1").stdout


def test_get_all_groups_pods_services_deployments_replicasets(state: Path) -> None:
    out = run(state, "get", "all").stdout
    blocks = out.strip().split("\n\n")
    assert [b.splitlines()[1].split("/")[0] for b in blocks] == [
        "pod",
        "service",
        "deployment.apps",
        "replicaset.apps",
    ]
    assert [b.split()[0] for b in blocks] == ["NAME"] * 4
    names = run(state, "get", "all", "-o", "name").stdout.split()
    assert "deployment.apps/web" in names and "service/web" in names


def test_describe_matches_by_prefix_as_kubectl(state: Path) -> None:
    out = run(state, "describe", "pod", "web").stdout
    assert sorted(re.findall(r"^Name:\s+(\S+)", out, re.M)) == pods(state)
    one = pods(state)[0]
    exact = run(state, "describe", "pod", one).stdout
    assert re.findall(r"^Name:\s+(\S+)", exact, re.M) == [one]
    every = run(state, "describe", "nodes").stdout
    assert re.findall(r"^Name:\s+(\S+)", every, re.M) == ["node-1", "node-2", "node-3"]


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_events_as_one_v1_list(state: Path, fmt: str) -> None:
    out = run(state, "events", "-o", fmt).stdout
    data = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    assert data["apiVersion"] == "v1" and data["kind"] == "List"
    assert data["items"] and all(e["kind"] == "Event" for e in data["items"])
    assert any(e["reason"] == "Scheduled" for e in data["items"])


def test_describe_svc_endpoints_as_kubectl(tmp_path: Path) -> None:
    s = tmp_path / "s"
    run(s, "apply", "-f", str(WEB))
    three = run(s, "describe", "svc", "web").stdout
    [line] = [x for x in three.splitlines() if x.startswith("Endpoints:")]
    assert re.fullmatch(r"Endpoints:\s+(10\.244\.\d+\.\d+:8080,){2}10\.244\.\d+\.\d+:8080", line)
    (tmp_path / "scaled.yaml").write_text(SCALED)
    run(s, "apply", "-f", str(tmp_path / "scaled.yaml"))
    five = run(s, "describe", "svc", "web").stdout
    [line] = [x for x in five.splitlines() if x.startswith("Endpoints:")]
    assert re.fullmatch(
        r"Endpoints:\s+(10\.244\.\d+\.\d+:8080,){2}10\.244\.\d+\.\d+:8080 \+ 2 more\.\.\.", line
    )


def test_score_table_total_is_the_sum_of_weighted_scores(state: Path) -> None:
    out = run(state, "describe", "pod", pods(state)[0]).stdout
    table = out.split("Scheduling:\n", 1)[1].split("Events:", 1)[0].splitlines()
    assert table[1].strip().startswith("Weights: ")
    header, *rows = (line.split() for line in table[2:])
    assert header[:2] == ["NODE", "FILTER"] and header[-1] == "TOTAL"
    assert rows
    for row in rows:
        cells = row[2:-1]
        weighted = []
        for cell in cells:
            m = re.fullmatch(r"(\d+)x(\d+)=(\d+)", cell)
            assert m, cell
            raw, weight, product = map(int, m.groups())
            assert raw * weight == product
            weighted.append(product)
        assert sum(weighted) == int(row[-1])


def test_rules_have_iptables_save_comment_lines_but_restore_input_not(state: Path) -> None:
    lines = run(state, "rules", "--node", "node-1").stdout.splitlines()
    stamp = r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}"
    for i, line in enumerate(lines):
        if line.startswith("*"):
            assert re.fullmatch(
                rf"# Generated by iptables-save v1\.8\.\d+ \(.+\) on {stamp}", lines[i - 1]
            )
        if line == "COMMIT":
            assert re.fullmatch(rf"# Completed on {stamp}", lines[i + 1])
    assert sum(line.startswith("*") for line in lines) == 2
    restore = run(state, "rules", "--node", "node-1", "--restore-input").stdout
    assert "#" not in "".join(x[:1] for x in restore.splitlines())


def test_ping_prints_time_and_the_rtt_summary(state: Path) -> None:
    a, b = pods(state)[:2]
    out = run(state, "ping", f"pod/{a}", f"pod/{b}", "-c", "2").stdout.splitlines()
    assert re.fullmatch(r"PING pod/\S+ \(10\.244\.\d+\.\d+\) 56\(84\) bytes of data\.", out[0])
    replies = [x for x in out if x.startswith("64 bytes from")]
    assert len(replies) == 2
    assert all(re.search(r"icmp_seq=\d ttl=\d+ time=\d+\.\d{3} ms", x) for x in replies)
    assert re.fullmatch(r"rtt min/avg/max/mdev = [\d.]+/[\d.]+/[\d.]+/[\d.]+ ms", out[-1])
    assert "simulated" in run(state, "ping", "--help").stdout


def test_version_completion_and_state_variable_in_help() -> None:
    from importlib.metadata import version

    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0 and res.stdout == f"svclab {version('svclab')}\n"
    out = CliRunner().invoke(cli, ["--help"]).stdout
    assert "SVCLAB_STATE" in out and "env var: SVCLAB_STATE" in out
    assert "_SVCLAB_COMPLETE=bash_source svclab" in out


def test_every_rule_a_trace_shows_is_a_line_of_rules(state: Path) -> None:
    """The form is the node's iptables-save form (probabilities with 11 decimals, marks
    as iptables-save prints them, options in its order), in text and JSON alike."""
    a = pods(state)[0]
    rules = {
        node: set(run(state, "rules", "--node", node).stdout.splitlines())
        for node in ("node-1", "node-2", "node-3")
    }
    t = json.loads(
        run(state, "trace", "--from", f"pod/{a}", "--to", "svc/default/web:80", "-o", "json").stdout
    )
    shown = []
    for part in (t, t.get("reply") or {}):
        for h in part.get("hops", []):
            if h["kind"] == "rule" and h.get("rule"):
                node = h["netns"].split("/", 1)[1]
                assert h["rule"] in rules[node], h["rule"]
                shown.append(h["rule"])
    assert any("--probability" in r for r in shown)
    assert any("--mark 0x4000/0x4000" in r for r in shown)
    text = run(state, "trace", "--from", f"pod/{a}", "--to", "svc/default/web:80").stdout
    every = set().union(*rules.values())
    in_text = [r for r in every if r.startswith("-A ") and r in text]
    assert set(shown) <= set(in_text)
    conns = json.loads(
        run(state, "connect", f"pod/{a}", "svc/default/web:80", "-n", "5", "-o", "json").stdout
    )
    for c in conns["connections"]:
        assert c["chosen_by"] in every, c["chosen_by"]
