"""Every command the README shows runs as written against the shipped examples
(tests/readme_blocks.py says how): the "Using it" commands and the upstream-case replay
here, on the emulator, one after the other on one state directory; the ``--real`` block
in tests/kernel/test_readme_real.py; the labs in tests/labs/test_labs.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from readme_blocks import LINKED, ROOT, Block, bare, blocks, failure, of_kind, run, workdir

#: what some commands must print besides exiting 0 (the line, exactly as in the README)
EXPECTED = {
    "svclab describe pod a": "TOTAL",
    "svclab describe pod client": "NodeAffinity",
    "svclab ping pod/default/a pod/default/b -c 3": " 0% packet loss",
    "svclab describe svc web-headless": "None",
    # cluster DNS with no setting in examples/ (on by default, as kubeadm installs it)
    "svclab get svc -A": "kube-dns",
    "svclab dig pod/default/client web --search": "ANSWERED BY: pod/kube-system/coredns-",
    "svclab exec client -- curl -s web": "default/web-",
    "svclab exec client -- nslookup web": "Name:\tweb.default.svc.cluster.local\nAddress: 10.96.",
}


def test_the_readme_has_each_kind_of_block() -> None:
    kinds = [b.kind for b in blocks()]
    assert kinds.count("install") == 2
    assert {"commands", "real", "labs"} <= set(kinds)


#: object references (KIND/NAME), not paths
OBJECTS = ("pod/", "svc/", "node/", "deploy/", "deployment/", "service/", "ext/")


def test_the_readme_commands_use_what_the_repository_has() -> None:
    """Relative paths in the commands are the linked directories or files they write."""
    for command in of_kind("commands") + of_kind("real") + of_kind("labs"):
        for word in bare(command).split():
            if "/" in word and not word.startswith(OBJECTS):
                top = word.split("/", 1)[0]
                assert top in LINKED, f"{command!r}: {word} is not in {LINKED}"
                assert (ROOT / word).exists(), f"{command!r}: {word} does not exist"


def test_every_readme_command_runs_as_written(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    commands = of_kind("commands")
    assert set(EXPECTED) <= set(map(bare, commands)), "EXPECTED names a line no longer there"
    web_ip = ""
    for command in commands:
        proc = run(command, cwd)
        assert not failure(command, proc), failure(command, proc)
        want = EXPECTED.get(bare(command))
        assert want is None or want in proc.stdout, f"{command!r}: no {want!r} in\n{proc.stdout}"
        if bare(command) == "svclab get svc web -o json":
            web_ip = json.loads(proc.stdout)["spec"]["clusterIP"]
        if bare(command) == "svclab dig pod/default/client web --search":
            # the search list finds web's ClusterIP, answered through kube-dns
            assert web_ip and "status: NOERROR" in proc.stdout, proc.stdout
            assert f"web.default.svc.cluster.local.\t\t30\tIN\tA\t{web_ip}\n" in proc.stdout
        if bare(command) == "svclab get svc -A":
            assert re.search(r"^kube-system +kube-dns +ClusterIP +10\.96\.0\.10 ", proc.stdout, re.M)
        if "--at node/node-1 --all -o json" in command:
            # web-local (externalTrafficPolicy Local) on a node with a web pod: kept source
            out = json.loads(proc.stdout)
            assert out["verdict"] == "ACCEPT" and out["masquerade"] is False, out
    assert (cwd / "trace.pcap").stat().st_size > 0 and (cwd / "m.yaml").exists()


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("```sh\nbash scripts/install && x\n```\n", ["install"]),
        ("```sh\nsvclab up --real\nsvclab down\n```\n", ["real"]),
        (
            "```sh\npython labs/00_a.py   # c\n```\n```sh\nsvclab get pods\n```\n",
            ["labs", "commands"],
        ),
        (
            "```yaml\nkind: Cluster\n```\n```sh\n# only a comment\n\nsvclab events\n```\n",
            ["commands"],
        ),
    ],
)
def test_blocks_are_told_apart(text: str, kinds: list[str]) -> None:
    assert [b.kind for b in blocks(text)] == kinds


def test_a_failing_line_is_reported(tmp_path: Path) -> None:
    proc = run("svclab describe pod no-such-pod", workdir(tmp_path))
    assert "exited 1" in failure("svclab describe pod no-such-pod", proc)
    assert Block(1, ("svclab events",)).kind == "commands"
    assert bare("svclab events    # the timeline") == "svclab events"


def test_ci_runs_the_readme_test_command() -> None:
    install, test = (b.commands for b in blocks() if b.kind == "install")
    assert install == ("bash scripts/install && .venv/bin/python labs/00_control_plane.py",)
    assert test == ("bash scripts/test",)
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and ln[0] != "#"]
    assert ci[-1] == "bash scripts/test"


def test_install_puts_python_packages_only_into_the_project_environment() -> None:
    """scripts/install never runs pip with the machine's Python: every pip call is
    .venv's, and .venv is made with ``-m venv``."""
    text = (ROOT / "scripts" / "install").read_text()
    pips = [
        ln.strip()
        for ln in text.splitlines()
        if re.search(r"\bpip\b", ln) and not ln.lstrip().startswith("#")
    ]
    assert pips and all(ln.startswith(".venv/bin/python -m pip install") for ln in pips), pips
    assert '"$python" -m venv .venv' in text
    assert (ROOT / ".gitignore").read_text().count(".venv") >= 1
