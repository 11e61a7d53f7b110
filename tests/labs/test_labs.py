"""Every lab runs and passes its own checks (on the emulator), run as the README's labs
block writes it (tests/readme_blocks.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from readme_blocks import bare, of_kind, run, workdir

ALL_LABS = sorted((Path(__file__).resolve().parents[2] / "labs").glob("[0-9][0-9]_*.py"))
README_LABS = {bare(c).split()[1]: c for c in of_kind("labs")}
#: lab 07 (cluster DNS) has its own test below (which runs the README's line too)
LABS = [p for p in ALL_LABS if p.stem != "07_dns"]


def test_there_are_labs() -> None:
    assert len(LABS) >= 6


def test_the_readme_lists_every_lab() -> None:
    assert sorted(README_LABS) == [f"labs/{p.name}" for p in ALL_LABS]


@pytest.mark.parametrize(
    "command",
    [c for lab, c in README_LABS.items() if lab != "labs/07_dns.py"],
    ids=lambda c: c.split()[1][5:-3],
)
def test_lab_passes(command: str, tmp_path: Path) -> None:
    proc = run(command, workdir(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "checks passed" in proc.stdout
    assert "FAIL" not in proc.stdout


def test_lab_00_has_no_real_mode() -> None:
    """Lab 00 runs the control plane only: ``--real`` (or anything else) is a usage error
    in one line, not ignored."""
    for args in (["--real"], ["--examples", "3"]):
        proc = run_lab("00_control_plane", *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "00_control_plane.py: error: " in proc.stderr and args[0] in proc.stderr


def run_lab(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    (lab,) = (p for p in ALL_LABS if p.stem == name)
    return subprocess.run(
        [sys.executable, str(lab), *args], capture_output=True, text=True, timeout=300
    )


def test_lab_04_generates_as_many_scenarios_as_asked() -> None:
    proc = run_lab("04_pod_to_pod_property", "--examples", "3")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 explicit + 3 generated scenarios" in proc.stdout
    assert "[ok  ] 5 scenarios checked" in proc.stdout
    # the cross-node example traces show encapsulation and host-gw's route via the peer
    assert "vxlan    encap VNI 1" in proc.stdout and "vxlan    decap VNI 1" in proc.stdout
    assert "via 172.18.0.3 dev eth0" in proc.stdout


def test_lab_04_is_reproducible() -> None:
    runs = [run_lab("04_pod_to_pod_property", "--examples", "8").stdout for _ in range(2)]
    scenarios = [[line for line in out.splitlines() if line.endswith(" ok")] for out in runs]
    assert scenarios[0] == scenarios[1] and len(scenarios[0]) == 10


def test_lab_04_refuses_fewer_than_one_example() -> None:
    proc = run_lab("04_pod_to_pod_property", "--examples", "0")
    assert proc.returncode == 2 and "--examples must be at least 1" in proc.stderr


def test_lab_04_exits_non_zero_with_the_counterexample_when_the_property_fails() -> None:
    """A pod network that breaks the property between a pod on node-3 or node-4 and a pod
    on another node (injected): the explicit 2-node scenarios pass, a generated one fails;
    the lab prints the falsifying example hypothesis shrank it to and its manifest, and
    exits 1. The report is the lab's own (the scenario of the last failing call, the one
    hypothesis replays to report), so it does not depend on how a hypothesis version
    formats or attaches its messages."""
    (lab,) = (p for p in LABS if p.stem == "04_pod_to_pod_property")
    script = f"""
import importlib.util, sys
sys.argv = ["lab04", "--examples", "10"]
spec = importlib.util.spec_from_file_location("lab04", {str(lab)!r})
lab = importlib.util.module_from_spec(spec)
sys.modules["lab04"] = lab
spec.loader.exec_module(lab)
check_pair = lab.check_pair

def broken(be, client, server, ip, node):
    out = check_pair(be, client, server, ip, node)
    far = {{node[client], node[server]}} - {{"node-1", "node-2"}}
    assert node[client] == node[server] or not far, f"{{client}} -> {{server}}: injected NAT"
    return out

lab.check_pair = broken
lab.main()
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "AssertionError: " in proc.stdout and "injected NAT" in proc.stdout
    assert proc.stdout.count("2 pairs ok") >= 2  # the explicit scenarios held
    # the lab's own report of the example hypothesis ended on (shrunk: 3 nodes are needed
    # for a pod on node-3, 2 pods and 1 pair for a pair), then its manifest
    shrunk = re.search(
        r"^Falsifying example \(shrunk by hypothesis\): 3 nodes, (vxlan|host-gw): "
        r"p0@node-\d p1@node-\d; pairs p\d -> p\d$",
        proc.stdout,
        re.M,
    )
    assert shrunk, proc.stdout
    assert "\n  spec: {nodes: 3, overlay: " in proc.stdout
    assert "[FAIL] every pair" in proc.stdout and "[FAIL] 12 scenarios checked" in proc.stdout


def test_lab_05_prints_the_rules_it_walks_through() -> None:
    proc = run_lab("05_dump_rules")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert out.startswith("== svclab rules --node node-1: the nat table (iptables-save form)")
    for text in (
        "*nat",
        "--probability 0.50000000000 -j KUBE-SEP-",
        "-j DNAT --to-destination 10.244.0.2:8080",
        "-A KUBE-EXT-",
        "-A KUBE-SVL-",
        "-m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-",
        "map service-ips { ... 10.96.0.2 . tcp . 80 : goto service-",
        "-A -t 10.96.0.4:80 -s rr -p 10800",
    ):
        assert text in out, text


def test_lab_07_dns(tmp_path: Path) -> None:
    """Lab 07 resolves every kind of name, counts ndots:5's questions and shows the
    REJECT of a kube-dns without endpoints, in the trace (run as the README writes it)."""
    proc = run(README_LABS["labs/07_dns.py"], workdir(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "lab 07: 13/13 checks passed" in out and "FAIL" not in out
    assert "example.com  -> ['203.0.113.80'] in 4 questions" in out
    assert ";; ->>HEADER<<- opcode: QUERY, status: NOERROR" in out
    assert "kube-system/kube-dns:dns has no endpoints" in out and "=> REJECT" in out


# --------------------------------------------------------------------------- lab 06 (kubectl)


def test_lab_06_checks_every_step_against_a_live_server() -> None:
    proc = run_lab("06_kubectl")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for step in (
        "rollout status: 2 pods scheduled and Running, no CLI step driving them",
        "core/v1 Endpoints web lists the same addresses",
        "node-1's nat table has 2 KUBE-SEP chains for web",
        "the rules gained one KUBE-SEP chain",
        "trace --all reaches the new endpoint",
        "jane is Forbidden to list pods (kube-apiserver's RBAC wording)",
        "after the RoleBinding jane lists the pods",
        "SIGTERM stops the server cleanly (exit 0)",
    ):
        assert f"[ok  ] {step}" in proc.stdout, step


def test_lab_06_fails_without_kubectl() -> None:
    (lab,) = (p for p in LABS if p.stem == "06_kubectl")
    env = {"PATH": str(Path(sys.executable).parent), "HOME": "/nonexistent"}
    proc = subprocess.run(
        [sys.executable, str(lab)], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 1
    assert "[FAIL] kubectl is on PATH" in proc.stdout
