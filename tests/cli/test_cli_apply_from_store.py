"""A persistent cluster's apply (and delete) runs the control plane without one
kube-proxy per node: every node's rules follow from the store, one SyncProxyRules Event
per change stands for all nodes, and what ``svclab rules`` and ``trace`` show right
after is what a kube-proxy that ran all along on that node holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner, Result

from app.cli.main import cli
from control.agents.kubeproxy import EmulatedRules
from control.events import timeline
from control.noderules import converged_revision
from control.session import Session
from control.store.sqlite import SqliteStore
from dataplane.netfilter.parse import format_save, parse_save
from dataplane.netfilter.rules import Ruleset
from dataplane.proxy.savefmt import saved_rule
from netmodel.manifests import load_text

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "examples" / "web.yaml"

MORE = """\
apiVersion: v1
kind: Service
metadata: {name: more}
spec: {type: NodePort, selector: {app: web}, ports: [{port: 81, targetPort: 8080}]}
"""


def run(state: Path, *args: str) -> Result:
    res = CliRunner().invoke(cli, ["--state", str(state), *args])
    assert res.exit_code == 0, res.output
    return res


def revision(state: Path) -> int:
    with SqliteStore(state / "state.db") as store:
        return store.revision


def nat(ruleset: Ruleset) -> dict[str, list[str]]:
    """The nat table's chains, each with its rules in order, in the form iptables-save
    prints (the order chains were made in is not kept)."""
    chains: dict[str, list[str]] = {}
    for line in format_save(ruleset, tables=("nat",)).splitlines():
        if line.startswith(":"):
            chains.setdefault(line[1:].split(" ", 1)[0], [])
        elif line.startswith("-A "):
            chains[line.split(" ", 2)[1]].append(saved_rule(line))
    return chains


def test_apply_records_one_sync_for_all_nodes_and_rules_show_the_new_service(
    tmp_path: Path,
) -> None:
    state, twin = tmp_path / "state", tmp_path / "twin"
    run(state, "apply", "-f", str(WEB))
    shutil.copytree(state, twin)
    before = revision(state)
    (tmp_path / "more.yaml").write_text(MORE)
    assert run(state, "apply", "-f", str(tmp_path / "more.yaml")).stdout == (
        "service/more created\n"
    )
    # converged: the next question renders from the store, nothing left to run
    assert converged_revision(state) == revision(state)
    with SqliteStore(state / "state.db") as store:
        new = [e for e in timeline(store) if e.sequence > before]
    syncs = [e for e in new if e.reason == "SyncProxyRules"]
    assert syncs, [e.reason for e in new]
    assert all(e.source_component == "kube-proxy" for e in syncs)
    assert all(e.involved_object.kind != "Node" for e in syncs)  # not per node
    assert all(e.message.startswith("all 3 nodes: ") for e in syncs), syncs
    assert any("service/more" in e.message for e in syncs)
    shown = json.loads(run(state, "events", "-o", "json").stdout)["items"]
    assert any(
        e["reason"] == "SyncProxyRules" and e["message"].startswith("all 3 nodes: ") for e in shown
    )
    # the same apply with one kube-proxy per node running all along (the reference)
    eager = Session.open(twin)
    eager.eager_rules = True
    try:
        eager.apply(load_text(MORE, source="more.yaml"))
        assert isinstance(eager.rules, EmulatedRules)
        reference = {n: eager.rules.nodes[n].ruleset for n in ("node-1", "node-2", "node-3")}
    finally:
        eager.close()
    for node, ref in reference.items():
        text = run(state, "rules", "--node", node).stdout
        assert "default/more" in text  # the new Service's chains and rules
        assert nat(parse_save(text)) == nat(ref), node
    # a trace through the new Service, right after the apply, from the store
    pod = run(state, "get", "pods", "-o", "name").stdout.split()[0].split("/", 1)[1]
    rev = revision(state)
    t = json.loads(
        run(
            state,
            "trace",
            "--from",
            f"pod/default/{pod}",
            "--to",
            "svc/default/more:81",
            "-o",
            "json",
        ).stdout
    )
    assert any("KUBE-SVC-" in (h.get("rule") or "") for h in t["hops"]), t["hops"]
    assert revision(state) == rev  # reading records nothing


def test_an_apply_that_changes_nothing_records_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run(state, "apply", "-f", str(WEB))
    before = revision(state)
    run(state, "apply", "-f", str(WEB))
    assert revision(state) == before


def test_delete_records_one_sync_for_all_nodes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run(state, "apply", "-f", str(WEB))
    before = revision(state)
    run(state, "delete", "svc", "web")
    with SqliteStore(state / "state.db") as store:
        syncs = [e for e in timeline(store) if e.sequence > before and e.reason == "SyncProxyRules"]
    assert syncs and all(e.message.startswith("all 3 nodes: ") for e in syncs)
    assert converged_revision(state) == revision(state)
    assert "default/web" not in run(state, "rules", "--node", "node-1").stdout
