"""Misuse of every command: one line on stderr, a non-zero exit (2 for usage — click's
types check counts, ports, endpoints, files, choices — 1 for bad input), no traceback,
and not a byte of the state directory changed (every file's bytes and mtime compared).

Each case runs ``svclab`` as a user does (a subprocess: stderr apart from stdout, the
real exit status)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "examples" / "web.yaml"

#: a pod of examples/web.yaml (pod names are generated: resolved per run)
POD = "{pod}"

#: (argv, exit code, a text the one line must contain)
CASES: dict[str, tuple[list[str], int, str]] = {
    "connect -n 0": (["connect", POD, "svc/default/web:80", "-n", "0"], 2, "-n"),
    "connect -n -5": (["connect", POD, "svc/default/web:80", "-n", "-5"], 2, "-n"),
    "ping -c -1": (["ping", POD, "node/node-1", "-c", "-1"], 2, "--count"),
    "ping -c 0": (["ping", POD, "node/node-1", "-c", "0"], 2, "--count"),
    "trace --to IP:70000": (["trace", "--from", POD, "--to", "10.96.0.2:70000"], 2, "70000"),
    "trace --to IP:0": (["trace", "--from", POD, "--to", "10.96.0.2:0"], 2, "port 0"),
    "trace --to svc:70000": (
        ["trace", "--from", POD, "--to", "svc/default/web:70000"],
        2,
        "70000",
    ),
    "trace --from IP:99999": (
        ["trace", "--from", "10.244.0.9:99999", "--to", "10.96.0.2:80"],
        2,
        "99999",
    ),
    "trace --sport 70000": (
        ["trace", "--from", POD, "--to", "10.96.0.2:80", "--sport", "70000"],
        2,
        "--sport",
    ),
    "trace --sport 0": (
        ["trace", "--from", POD, "--to", "10.96.0.2:80", "--sport", "0"],
        2,
        "--sport",
    ),
    # (a DNS name such as web:80 is a destination: cluster DNS resolves it)
    "trace --to not-an-address": (["trace", "--from", POD, "--to", "web@x:80"], 2, "web@x"),
    "trace --to deploy/web": (["trace", "--from", POD, "--to", "deploy/web"], 2, "deploy/web"),
    "trace --at pod": (
        ["trace", "--at", "pod/x", "--from", "10.1.1.1", "--to", "10.96.0.2:80"],
        2,
        "node/NAME",
    ),
    "trace --iptables-save missing": (
        [
            "trace",
            "--at",
            "node/node-1",
            "--from",
            "10.1.1.1",
            "--to",
            "10.96.0.2:80",
            "--iptables-save",
            "{tmp}/missing.txt",
        ],
        2,
        "missing.txt",
    ),
    "trace --iptables-save directory": (
        [
            "trace",
            "--at",
            "node/node-1",
            "--from",
            "10.1.1.1",
            "--to",
            "10.96.0.2:80",
            "--iptables-save",
            "{tmp}",
        ],
        2,
        "is a directory",
    ),
    "trace --flows missing": (["trace", "--flows", "{tmp}/missing.yaml"], 2, "missing.yaml"),
    "trace --flows bad port": (["trace", "--flows", "{tmp}/flows.yaml"], 1, "[0].to"),
    "trace --at unknown node": (
        ["trace", "--at", "node/nope", "--from", "10.1.1.1", "--to", "10.96.0.2:80"],
        1,
        "nope",
    ),
    "pcap -w into a missing directory": (
        ["pcap", "--from", POD, "--to", "10.96.0.2:80", "-w", "{tmp}/no/such/dir/t.pcap"],
        2,
        "does not exist",
    ),
    "pcap -w a directory": (
        ["pcap", "--from", POD, "--to", "10.96.0.2:80", "-w", "{tmp}"],
        2,
        "is a directory",
    ),
    "conntrack --from without --to": (
        ["conntrack", "--node", "node-1", "--from", POD],
        2,
        "--to",
    ),
    "conntrack unknown node": (["conntrack", "--node", "nope"], 1, "nope"),
    "rules unknown node": (["rules", "--node", "nope"], 1, "nope"),
    "rules bad --mode": (["rules", "--node", "node-1", "--mode", "userspace"], 2, "--mode"),
    "get unknown -o": (["get", "pods", "-o", "toml"], 2, "toml"),
    "get unknown kind": (["get", "widgets"], 2, "widgets"),
    "get bad selector": (["get", "pods", "-l", "a,,b"], 2, "label selector"),
    "get bad selector value": (["get", "pods", "-l", "a=b=c"], 2, "label value"),
    "get bad selector key": (["get", "pods", "-l", "!!"], 2, "label key"),
    "get all -o json": (["get", "all", "-o", "json"], 2, "get all"),
    "get missing pod": (["get", "pod", "nope"], 1, "nope"),
    "describe missing pod": (["describe", "pod", "nope"], 1, "nope"),
    "events --for without a name": (["events", "--for", "pod"], 2, "--for"),
    "events --for unknown kind": (["events", "--for", "widget/x"], 2, "--for"),
    "events unknown -o": (["events", "-o", "csv"], 2, "csv"),
    "delete missing pod": (["delete", "pod", "nope"], 1, "nope"),
    "delete without a name": (["delete", "pod"], 2, "name"),
    "apply an empty file": (["apply", "-f", "{tmp}/empty.yaml"], 1, "no objects passed to apply"),
    "apply only ---": (["apply", "-f", "{tmp}/dashes.yaml"], 1, "no objects passed to apply"),
    "apply a binary file": (["apply", "-f", "{tmp}/binary.yaml"], 1, "binary.yaml"),
    "apply a missing file": (["apply", "-f", "{tmp}/missing.yaml"], 1, "missing.yaml"),
    "up --real bad cluster id": (["up", "--real", "--cluster-id", "BAD_ID!"], 2, "BAD_ID!"),
    "up without --real": (["up"], 2, "--real"),
    "up --real bad --cni": (["up", "--real", "--cni", "calico"], 2, "--cni"),
    "trace --flows with --from": (
        ["trace", "--flows", "{tmp}/flows.yaml", "--from", "10.1.1.1"],
        2,
        "--flows",
    ),
    "trace --linear without --at": (
        ["trace", "--linear", "--from", POD, "--to", "10.96.0.2:80"],
        2,
        "--linear",
    ),
    "trace --at with --sport": (
        [
            "trace",
            "--at",
            "node/node-1",
            "--from",
            "10.1.1.1",
            "--to",
            "10.96.0.2:80",
            "--sport",
            "40000",
        ],
        2,
        "--sport",
    ),
    "get NAME with a selector": (["get", "pods", "web", "-l", "app=web"], 2, "selector"),
    "delete KIND NAME and -f": (["delete", "pod", "x", "-f", str(WEB)], 2, "not both"),
    "ping to a port": (["ping", POD, "10.96.0.2:80"], 2, "no port"),
    "ping to a Service port": (["ping", POD, "svc/default/web:80"], 2, "no port"),
    "trace icmp to a port": (
        ["trace", "--proto", "icmp", "--from", POD, "--to", "10.96.0.2:80"],
        2,
        "ICMP has no ports",
    ),
    "pcap icmp to a port": (
        ["pcap", "--proto", "icmp", "--from", POD, "--to", "10.96.0.2:80", "-w", "{tmp}/x.pcap"],
        2,
        "ICMP has no ports",
    ),
    "conntrack --to without a port": (
        ["conntrack", "--node", "node-1", "--from", POD, "--to", "10.96.0.2"],
        2,
        "give a port",
    ),
    "up --real bad --external-client": (
        ["up", "--real", "--external-client", "999.1.1.1"],
        2,
        "999.1.1.1",
    ),
    "unknown command": (["frobnicate"], 2, "frobnicate"),
    "unknown option": (["get", "pods", "--frob"], 2, "--frob"),
}


def svclab(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from app.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def snapshot(state: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``state``: its bytes and mtime (ns); not ``cache/``, whose
    entries are derived from the rest (control/rulecache.py: any may be deleted, only
    speed changes), and which a question that fails after building its view may fill."""
    return {
        str(p.relative_to(state)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(state.rglob("*"))
        if p.is_file() and p.relative_to(state).parts[0] != "cache"
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A state directory with examples/web.yaml applied, and one of its pods."""
    tmp = tmp_path_factory.mktemp("misuse")
    state = tmp / "state"
    res = svclab("--state", str(state), "apply", "-f", str(WEB), cwd=tmp)
    assert res.returncode == 0, res.stderr
    res = svclab("--state", str(state), "get", "pods", "-o", "name", cwd=tmp)
    pod = "pod/default/" + res.stdout.split()[0].split("/", 1)[1]
    (tmp / "empty.yaml").write_text("")
    (tmp / "dashes.yaml").write_text("---\n---\n")
    (tmp / "binary.yaml").write_bytes(bytes(range(256)))
    (tmp / "flows.yaml").write_text(json.dumps([{"from": "10.1.1.1", "to": "10.96.0.2:65536"}]))
    return state, pod


@pytest.mark.parametrize("case", sorted(CASES))
def test_misuse_is_one_line_and_changes_nothing(case: str, cluster: tuple[Path, str]) -> None:
    state, pod = cluster
    tmp = state.parent
    argv, code, needle = CASES[case]
    args = [a.format(pod=pod, tmp=tmp) for a in argv]
    before = snapshot(state)
    res = svclab("--state", str(state), *args, cwd=tmp)
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and needle.format(tmp=tmp) in lines[0], lines[0]
    assert snapshot(state) == before, f"{case} changed the state directory"


def test_a_refused_cluster_id_leaves_no_real_json_and_a_damaged_one_bricks_nothing(
    cluster: tuple[Path, str],
) -> None:
    """The id is checked before real.json is written; a real.json holding an invalid id
    (as older versions wrote) names no cluster: down and cleanup work, and remove it."""
    state, _ = cluster
    res = svclab("--state", str(state), "up", "--real", "--cluster-id", "BAD_ID!", cwd=state.parent)
    assert res.returncode == 2
    assert not (state / "real.json").exists()
    (state / "real.json").write_text(json.dumps({"cluster_id": "BAD_ID!", "status": "realising"}))
    try:
        res = svclab("--state", str(state), "down", cwd=state.parent)
        assert res.returncode == 0, res.stderr
        assert "no real cluster" in res.stdout
        assert not (state / "real.json").exists()
    finally:
        (state / "real.json").unlink(missing_ok=True)


def test_the_cluster_id_pattern_agrees_with_the_real_backend() -> None:
    from app.cli.types import CLUSTER_ID_PATTERN
    from dataplane.linux.names import CLUSTER_ID_RE

    assert CLUSTER_ID_RE.pattern == CLUSTER_ID_PATTERN


def test_a_duplicate_node_port_in_one_apply_names_the_other_service_of_that_apply(
    tmp_path: Path,
) -> None:
    """kube-apiserver's words; the holder is the Service earlier in the same apply, which
    the refused apply does not store."""
    svc = (
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {n}}}\n"
        "spec: {{type: NodePort, ports: [{{port: 80, nodePort: 30500}}]}}\n"
    )
    (tmp_path / "dup.yaml").write_text(svc.format(n="x") + "---\n" + svc.format(n="y"))
    res = svclab("--state", str(tmp_path / "s"), "apply", "-f", "dup.yaml", cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip() == (
        "error: dup.yaml (document 2): Service/default/y: spec.ports[0].nodePort: Invalid "
        "value: 30500: provided port is already allocated (to Service/default/x, earlier "
        "in this apply)"
    )
