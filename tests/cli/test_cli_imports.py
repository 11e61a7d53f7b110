"""What the CLI imports at start-up: ``--help`` and usage errors load click and light
modules only; the heavy ones (the real-kernel backend and pyroute2, scipy, scapy, numpy,
the emulator, the pydantic models, rich) are imported by the commands that use them.

Each case runs in a fresh interpreter (a module imported once stays in sys.modules) and
asserts on ``sys.modules``, not on time: ``scripts/bench_cli.py`` measures the time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "examples" / "web.yaml"

#: never imported by --help or a usage error (the brief: these four above all)
NOT_AT_START = (
    "app.real",
    "pyroute2",
    "scipy",
    "scapy",
    "numpy",
    "rich",
    "kubernetes",
    "pydantic",
    "dataplane.linux",
    "dataplane.emulator",
    "dataplane.backends",
    "app.emulation",
    "control.session",
    "graphviz",
    "matplotlib",
    "app.pictures",
)

#: runs ``app.cli.main`` on argv (JSON in sys.argv[1]) with standalone_mode=False,
#: prints the exit status and every loaded module whose top package or prefix is asked
PROBE = """
import json, sys
import click
from app.cli.main import cli
argv, watched = json.loads(sys.argv[1])
try:
    cli.main(argv, prog_name="svclab", standalone_mode=False)
    status = 0
except click.ClickException as e:
    status = e.exit_code
except SystemExit as e:
    status = e.code
loaded = sorted(
    w for w in watched if any(m == w or m.startswith(w + ".") for m in sys.modules)
)
print(json.dumps({"status": status, "loaded": loaded}), file=sys.stderr)
"""


def probe(argv: list[str], watched: tuple[str, ...], cwd: Path) -> tuple[int, list[str]]:
    """Run the CLI in a fresh interpreter; (exit status, which of ``watched`` it loaded)."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([argv, list(watched)])],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    return report["status"], report["loaded"]


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["--help"], 0),
        (["trace", "--help"], 0),
        (["up", "--help"], 0),
        # (`get bogus` is no usage error any more: whether "bogus" names a resource takes
        # the kind table, the state's CustomResourceDefinitions included, as kubectl's
        # takes discovery)
        (["trace"], 2),  # --from and --to missing
        (["up"], 2),  # without --real
        (["rules"], 2),  # --node missing
        (["describe"], 2),  # kind missing (without a name: every pod, as kubectl)
        (["delete"], 2),  # neither KIND NAME nor -f
        (["no-such-command"], 2),
        (["topology", "--help"], 0),
        (["report"], 2),  # -o missing
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_help_and_usage_errors_import_nothing_heavy(
    argv: list[str], status: int, tmp_path: Path
) -> None:
    got, loaded = probe(argv, NOT_AT_START, tmp_path)
    assert got == status
    assert loaded == [], f"svclab {' '.join(argv)} imported {loaded}"


def test_get_reads_the_store_without_the_control_plane(tmp_path: Path) -> None:
    """``get`` opens the state and prints a table: no runner, scheduler (numpy),
    kube-proxy renderers, emulator or real backend."""
    from control.session import Session
    from netmodel.manifests import load

    session = Session.open(tmp_path / "state", must_exist=False)
    try:
        session.apply(load([str(WEB)]))
    finally:
        session.close()
    heavy = (
        "app.real",
        "pyroute2",
        "scipy",
        "scapy",
        "numpy",
        "rich",
        "control.runner",
        "control.agents.kubeproxy",
        "dataplane.proxy",
        "dataplane.emulator",
    )
    got, loaded = probe(["--state", str(tmp_path / "state"), "get", "pods", "-A"], heavy, tmp_path)
    assert got == 0
    assert loaded == []


def test_a_new_service_on_a_converged_store_loads_no_numpy(tmp_path: Path) -> None:
    """``apply`` of a Service on a converged persistent cluster runs the control plane,
    but its scheduler never works (no pod changes): the scheduler's numpy, plugins and
    node table are not loaded."""
    from control.session import Session
    from netmodel.manifests import load

    session = Session.open(tmp_path / "state", must_exist=False)
    session.proxies_from_store = True
    try:
        session.apply(load([str(WEB)]))
    finally:
        session.close()
    svc = tmp_path / "svc.yaml"
    svc.write_text(
        "apiVersion: v1\nkind: Service\nmetadata: {name: extra}\n"
        "spec:\n  selector: {app: web}\n  ports: [{port: 81, targetPort: 80}]\n"
    )
    watched = ("numpy", "control.scheduler.table", "control.scheduler.plugins", "control.runner")
    got, loaded = probe(
        ["--state", str(tmp_path / "state"), "apply", "-f", str(svc)], watched, tmp_path
    )
    assert got == 0
    assert loaded == ["control.runner"]  # (the control plane did run)


def test_constants_repeated_for_start_up_agree() -> None:
    """The two values the CLI repeats so that --help need not import their modules."""
    from app.cli import main, rules_cmd
    from control.session import DEFAULT_STATE
    from dataplane.proxy import MODES

    assert main.DEFAULT_STATE == DEFAULT_STATE
    assert tuple(rules_cmd.MODES) == MODES


def test_trace_without_cluster_dns_loads_no_dns_library(tmp_path: Path) -> None:
    """A trace between addresses on a cluster without DNS builds no resolver, zone
    answerer or name lookup: dnspython is not imported (a third of a second of a warm
    trace's start-up)."""
    from control.session import Session
    from netmodel.manifests import load

    text = WEB.read_text()
    assert "dns:" not in text
    src = tmp_path / "web.yaml"
    src.write_text(text.replace("nodes: 3", "nodes: 3\n  dns: false"))
    session = Session.open(tmp_path / "state", must_exist=False)
    try:
        session.apply(load([str(src)]))
        pod = next(p.key for p in session.store.list("Pod") if p.key.startswith("default/"))
    finally:
        session.close()
    argv = [
        "--state",
        str(tmp_path / "state"),
        "trace",
        "--from",
        f"pod/{pod}",
        "--to",
        "svc/default/web:80",
    ]
    got, loaded = probe(argv, ("dns", "dataplane.dns", "dataplane.emulator.resolver"), tmp_path)
    assert got == 0
    assert loaded == []
