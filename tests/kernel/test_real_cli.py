"""The real kernel through the CLI: ``apply`` + ``up --real`` + ``connect``/``trace``/
``ping --real`` + ``down`` on a persistent state dir, ``up`` twice changing nothing,
``--real -f`` throw-away clusters, and Ctrl-C in the middle of ``up`` leaving nothing that
``cleanup`` cannot remove."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app import real
from app.cli.main import cli
from control.session import Session
from dataplane.linux import rules
from dataplane.linux.netns import is_root, list_ours
from dataplane.linux.realize import RealCluster
from dataplane.linux.servers import is_ours, read_pid
from dataplane.linux.testing import leftovers, processes_in

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

ROOT = Path(__file__).resolve().parents[2]
EXT = "203.0.113.9"
EXPIRES = re.compile(r" expires \S+")  # an nft set element's countdown
COUNTERS = re.compile(r"counter packets \d+ bytes \d+")  # compared apart (see below)

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: cli}}
spec: {{nodes: 2, proxyMode: {mode}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: c, image: x, ports: [{{containerPort: 8080}}]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  nodeName: node-1
  containers: [{{name: c, image: x}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  type: NodePort
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: sticky}}
spec:
  selector: {{app: web}}
  sessionAffinity: ClientIP
  ports: [{{name: http, port: 80, targetPort: 8080}}]
"""


def run(state: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--state", str(state), *args], catch_exceptions=False)


def write(
    tmp_path: Path, replicas: int, name: str = "cluster.yaml", mode: str = "iptables"
) -> Path:
    path = tmp_path / name
    path.write_text(MANIFEST.format(replicas=replicas, mode=mode))
    return path


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """A state dir with the cluster applied; its real cluster is always removed."""
    yield from _state(tmp_path, "iptables")


@pytest.fixture(params=["iptables", "nftables"])
def any_state(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """:func:`state` in each kube-proxy mode that can be realised."""
    yield from _state(tmp_path, request.param)


def _state(tmp_path: Path, mode: str) -> Iterator[Path]:
    d = tmp_path / "state"
    res = run(d, "apply", "-f", str(write(tmp_path, 3, mode=mode)))
    assert res.exit_code == 0, res.output
    try:
        yield d
    finally:
        record = real.RealRecord.read(d)
        real.down(d)
        if record is not None:
            assert leftovers(record.cluster_id) == []


def _cluster(state: Path) -> RealCluster:
    record = real.RealRecord.read(state)
    assert record is not None and record.status == "up"
    return RealCluster.load(record.cluster_id)


def _kernel_state(c: RealCluster) -> tuple[object, ...]:
    """What an idempotent ``up`` must leave untouched: namespaces (with their inodes),
    CNI results, pod-server pids, every iptables rule, the nft ruleset with the affinity
    sets' dynamic elements. (Counters are checked apart: late packets of the connections
    before may still move them, but a reload would reset them.)"""
    from dataplane.linux.nsenter import inode

    return (
        {n: inode(n) for n in sorted(c.namespaces.values())},
        c.pods,
        dict(c.servers.running()),
        {
            n: [(r.table, r.chain, r.rule) for r in rules.rule_counters(c.node_netns(n))]
            for n in ("node-1", "node-2")
        },
        {
            n: COUNTERS.sub("", EXPIRES.sub("", rules.nft_ruleset(c.node_netns(n))))
            for n in ("node-1", "node-2")
        },
    )


def test_up_connect_trace_ping_down(state: Path) -> None:
    res = run(state, "up")
    assert res.exit_code == 2 and "the emulator needs no 'up'" in res.output

    res = run(state, "up", "--real", "--external-client", EXT)
    assert res.exit_code == 0, res.output
    c = _cluster(state)
    # web's 2 pods, client, and cluster DNS's 2 coredns pods (on by default, as on kubeadm)
    assert res.output.startswith(f"cluster {c.cluster_id} up: 2 nodes, 6 pods, 1 external")
    web = {k for k in c.pods if k.startswith("default/web-")}
    assert len(web) == 3

    res = run(
        state, "connect", "--real", "pod/client", "svc/default/web:80", "-n", "30", "-o", "json"
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert {x["pod"] for x in out["connections"]} == web
    client_ip = str(c.pods["default/client"].ip)
    assert {x["source_seen"] for x in out["connections"]} == {client_ip}
    assert sum(out["counts"].values()) == 30
    assert out["backend"] == "kernel" and set(out["shares"]) == set(out["counts"])

    # -o jsonl streams on the kernel too: a record per connection, then the summary
    res = run(
        state, "connect", "--real", "pod/client", "svc/default/web:80", "-n", "20", "-o", "jsonl"
    )
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) == 21
    records = [json.loads(x) for x in lines[:-1]]
    assert [set(r) for r in records] == [set(out["connections"][0])] * 20
    assert {r["pod"] for r in records} <= web and {r["verdict"] for r in records} == {"delivered"}
    summary = json.loads(lines[-1])["summary"]
    assert sum(summary["counts"].values()) == 20
    for ep, (lo, hi) in summary["confidence_intervals"].items():
        assert lo <= summary["shares"][ep] <= hi

    res = run(
        state, "trace", "--real", "--from", "pod/client", "--to", "svc/default/web:80", "-o", "json"
    )
    assert res.exit_code == 0, res.output
    t = json.loads(res.output)
    assert t["delivered"] and t["pod"] in web and t["source_seen"] == client_ip
    assert any("TIME_WAIT" in e for e in t["conntrack"]["node-1"])
    dnat = [r for r in t["rules"] if r["table"] == "nat" and "DNAT" in r["rule"]]
    assert len(dnat) == 1 and dnat[0]["node"] == "node-1" and dnat[0]["packets"] == 1
    # every rule the kernel counted names the object that made it, a stored one; the
    # DNAT names the Service port, the EndpointSlice endpoint and the pod that answered
    assert t["rules"] and all("object" in r for r in t["rules"])
    made = dnat[0]["object"]
    assert [o["kind"] for o in made] == ["Service", "EndpointSlice", "Pod"]
    assert (made[0]["name"], made[0]["field"]) == ("web", "spec.ports[0]")
    assert f"{made[2]['namespace']}/{made[2]['name']}" == t["pod"]
    s = Session.open(state)
    try:
        for r in t["rules"]:
            for o in r["object"] if isinstance(r["object"], list) else [r["object"]]:
                key = f"{o['namespace']}/{o['name']}" if o["namespace"] else o["name"]
                assert s.store.get(o["kind"], key) is not None
    finally:
        s.close()
    text = run(state, "trace", "--real", "--from", "pod/client", "--to", "svc/default/web:80")
    assert "made by:" in text.output and "Service default/web spec.ports[0]" in text.output

    # external client to the NodePort: masqueraded when the endpoint is on another node
    res = run(state, "connect", "--real", EXT, "172.18.0.3:30080", "-n", "10", "-o", "json")
    assert res.exit_code == 0, res.output
    conns = json.loads(res.output)["connections"]
    assert {x["verdict"] for x in conns} == {"delivered"} and all(x["masquerade"] for x in conns)

    # conntrack --real: the node's table after one connection, closed by the client
    res = run(
        state, "conntrack", "--real", "--node", "node-1", "--from", "pod/client",
        "--to", "svc/default/web:80",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert any(
        "TIME_WAIT" in line and f"src={client_ip}" in line for line in res.output.splitlines()
    )
    res = run(state, "conntrack", "--real", "--node", "nope")
    assert res.exit_code == 1 and "no such node 'nope'" in res.output

    res = run(state, "ping", "--real", "pod/client", "node/node-2", "-c", "2")
    assert res.exit_code == 0 and "2 received" in res.output and "ttl=63" in res.output
    assert " ms" in res.output.split("time=")[1]  # measured, as ping prints it
    assert "rtt min/avg/max/mdev = " in res.output

    res = run(
        state, "trace", "--real", "--all", "--from", "pod/client", "--to", "svc/default/web:80"
    )
    assert res.exit_code == 2 and "--real cannot be combined with --all" in res.output

    res = run(state, "down")
    assert res.exit_code == 0 and f"cluster {c.cluster_id} removed" in res.output
    assert leftovers(c.cluster_id) == []
    assert run(state, "down").output.strip() == f"no real cluster in {state}"


def test_up_twice_changes_nothing_and_a_change_converges(any_state: Path, tmp_path: Path) -> None:
    state = any_state
    assert run(state, "up", "--real").exit_code == 0
    c = _cluster(state)
    for svc in ("web", "sticky"):  # counters move, an affinity entry is recorded
        res = run(state, "connect", "--real", "pod/client", f"svc/default/{svc}:80", "-n", "3")
        assert res.exit_code == 0, res.output
    before = _kernel_state(c)
    counters = {n: rules.rule_counters(c.node_netns(n)) for n in ("node-1", "node-2")}
    res = run(state, "up", "--real")
    assert res.exit_code == 0, res.output
    assert _kernel_state(_cluster(state)) == before
    for n, old in counters.items():  # nothing reloaded: no counter went back
        new = rules.rule_counters(c.node_netns(n))
        assert [r.packets >= o.packets for r, o in zip(new, old, strict=True)] == [True] * len(old)

    # scale up: the next --real command brings the kernel up to date first
    nft = "table ip kube-proxy" in rules.nft_ruleset(c.node_netns("node-1"))
    more = write(tmp_path, 5, "more.yaml", mode="nftables" if nft else "iptables")
    assert run(state, "apply", "-f", str(more)).exit_code == 0
    res = run(
        state, "connect", "--real", "pod/client", "svc/default/web:80", "-n", "40", "-o", "json"
    )
    assert res.exit_code == 0, res.output
    c = _cluster(state)
    web = {k for k in c.pods if k.startswith("default/web-")}
    assert len(web) == 5
    assert {x["pod"] for x in json.loads(res.output)["connections"]} == web


def test_real_with_files_is_a_throw_away_cluster(tmp_path: Path) -> None:
    before = set(list_ours(include_held=True))
    res = run(
        tmp_path / "unused",
        "connect",
        "--real",
        "-f",
        str(write(tmp_path, 2)),
        EXT,
        "172.18.0.2:30080",
        "-n",
        "8",
        "-o",
        "json",
    )
    assert res.exit_code == 0, res.output
    assert {x["verdict"] for x in json.loads(res.output)["connections"]} == {"delivered"}
    # the throw-away cluster's namespaces (this process's) are gone; clusters that other
    # processes brought up meanwhile are held by them and not counted
    assert set(list_ours()) <= before
    assert not (tmp_path / "unused").exists()


def test_sigint_during_up_leaves_nothing_cleanup_cannot_remove(tmp_path: Path) -> None:
    d = tmp_path / "state"
    assert run(d, "apply", "-f", str(write(tmp_path, 60))).exit_code == 0
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from app.cli.main import main; main()",
            "--state",
            str(d),
            "up",
            "--real",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    cid = None
    try:
        deadline = time.monotonic() + 60
        while (
            cid is None
            or sum(n.startswith(f"svclab-{cid}-pod-") for n in list_ours(include_held=True)) < 10
        ):
            assert child.poll() is None, (
                f"up ended before it could be interrupted: {child.communicate()}"
            )
            assert time.monotonic() < deadline, "up never got to the pods"
            record = real.RealRecord.read(d)
            cid = record.cluster_id if record else None
            time.sleep(0.005)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
        assert child.returncode == 130, (out, err)
        assert f"interrupted: cluster {cid} is partly realised" in err
        assert leftovers(cid), "the interrupted up left a partial cluster"
        record = real.RealRecord.read(d)
        assert record is not None and record.status == "realising"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if cid is not None:
            namespaces = [n for n in list_ours(include_held=True) if n.startswith(f"svclab-{cid}-")]
            pids = [read_pid(p) for p in Path(f"/run/svclab/{cid}/servers").glob("*.pid")]
            res = run(d, "cleanup")
            assert res.exit_code == 0, res.output
    assert cid is not None
    assert namespaces and all(f"removed netns {n}" in res.output for n in namespaces)
    assert leftovers(cid) == []
    assert not [n for n in list_ours(include_held=True) if n.startswith(f"svclab-{cid}-")]
    assert not processes_in(namespaces)
    assert not any(p and is_ours(p) for p in pids)
    assert real.RealRecord.read(d) is None


def test_up_on_the_iptables_legacy_back_end(state: Path) -> None:
    """``--iptables-backend legacy``: kube-proxy's rules go to x_tables (nf_tables stays
    empty), the record and the report say so, ``trace --real`` reads the counters through
    libiptc, and the back end of a realised cluster cannot change under it."""
    from dataplane.linux import legacy

    res = run(state, "up", "--real", "--iptables-backend", "legacy")
    assert res.exit_code == 0, res.output
    assert res.output.rstrip().endswith("rules on iptables-legacy")
    record = real.RealRecord.read(state)
    assert record is not None and record.iptables_backend == "legacy"
    c = _cluster(state)
    assert c.iptables_backend == "legacy"
    for n in ("node-1", "node-2"):
        assert "-A KUBE-SERVICES" in legacy.save_text(c.node_netns(n))
        assert "-A " not in rules.iptables_save(c.node_netns(n), backend="nft")

    res = run(
        state, "trace", "--real", "--from", "pod/client", "--to", "svc/default/web:80", "-o", "json"
    )
    assert res.exit_code == 0, res.output
    t = json.loads(res.output)
    dnat = [r for r in t["rules"] if r["table"] == "nat" and "DNAT" in r["rule"]]
    assert len(dnat) == 1 and dnat[0]["node"] == "node-1" and dnat[0]["packets"] == 1

    before = real.RealRecord.path(state).read_bytes()
    counted = rules.rule_counters(c.node_netns("node-1"), backend="legacy")
    assert sum(r.packets for r in counted) > 0
    res = run(state, "up", "--real")  # the recorded back end: nothing to do
    assert res.exit_code == 0 and "rules on iptables-legacy" in res.output
    # the kernel held the rules already (compared through libiptc): nothing was reloaded,
    # so no counter went back (up's readiness probes may move some)
    again = rules.rule_counters(c.node_netns("node-1"), backend="legacy")
    assert [(r.chain, r.rule) for r in again] == [(r.chain, r.rule) for r in counted]
    assert all(r.packets >= o.packets for r, o in zip(again, counted, strict=True))
    res = run(state, "up", "--real", "--iptables-backend", "nft")
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        f"error: cluster {c.cluster_id} was realised on the iptables legacy back end; "
        "run 'svclab down' first to change it"
    ]
    assert real.RealRecord.path(state).read_bytes() == before


def test_nftables_mode_on_the_legacy_back_end_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "state"
    assert run(d, "apply", "-f", str(write(tmp_path, 1, mode="nftables"))).exit_code == 0
    before = set(list_ours(include_held=True))
    res = run(d, "up", "--real", "--iptables-backend", "legacy")
    assert res.exit_code == 1
    [line] = res.output.strip().splitlines()
    assert "nftables mode cannot run on the iptables legacy back end" in line
    assert not real.RealRecord.path(d).exists()  # refused before anything was recorded
    assert set(list_ours(include_held=True)) == before  # ... or created
