#!/usr/bin/env python3
"""Benchmark the CLI's start-up: wall-clock time of typical ``svclab`` commands.

Each command runs in a fresh interpreter (subprocess), once cold (``cold_s``: the
first run in the round, the state just applied) and then ``--repeat`` times warm
(default 5; ``warm_best_s`` and ``warm_median_s``: the page cache, the bytecode cache
and the state's own cache filled by the runs before). The commands work on a small persistent state
made in a temporary directory, one per round (``svclab --state DIR apply -f examples/web.yaml``):

    help       svclab --help
    get_pods   svclab --state DIR get pods -A
    rules      svclab --state DIR rules --node NODE        (the first node)
    trace      svclab --state DIR trace --from pod/POD --to svc/default/web:80

Also reported: ``python -c pass`` (the interpreter's own start-up, the floor) and the
cumulative ``-X importtime`` of ``app.cli.main`` (best and median, seconds).

Two rounds: ``no_bytecode_cache`` runs in the caller's environment as it is (where
``PYTHONDONTWRITEBYTECODE`` is set, svclab's own modules are compiled from source on every
start), ``bytecode_cache`` with ``PYTHONPYCACHEPREFIX`` pointing at a temporary
directory, warmed by one run first (what an installed svclab sees; nothing is written
into the checkout). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from benchjson import emit  # noqa: E402


def svclab_script() -> list[str]:
    """The installed console script, run directly (not through a pyenv shim, which adds
    a shell start-up of its own); ``python -c`` on main() when it is not installed."""
    script = Path(sys.executable).parent / "svclab"
    if script.exists():
        return [str(script)]
    found = shutil.which("svclab")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from app.cli.main import main; main()"]


def run(
    argv: list[str], env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False, env=env)
    return time.perf_counter() - t0, proc


def timed(argv: list[str], repeat: int, env: dict[str, str] | None = None) -> dict[str, float]:
    """``cold_s``: the first run (in the round: on a state just applied, the bytecode
    cache as the round's earlier commands left it); ``warm_best_s``, ``warm_median_s``:
    ``repeat`` more, each a fresh process after that one (page cache, bytecode cache and
    the state's own cache filled)."""
    times = []
    for _ in range(repeat + 1):
        dt, proc = run(argv, env)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}\n{proc.stderr}")
        times.append(dt)
    cold, warm = times[0], times[1:]
    return {
        "cold_s": round(cold, 4),
        "warm_best_s": round(min(warm), 4),
        "warm_median_s": round(statistics.median(warm), 4),
    }


def import_time(module: str, repeat: int, env: dict[str, str] | None = None) -> dict[str, float]:
    """Cumulative ``-X importtime`` of ``module`` (microseconds in the report → seconds)."""
    pattern = re.compile(rf"^import time:\s+\d+\s+\|\s+(\d+)\s+\|\s*{re.escape(module)}$")
    times = []
    for _ in range(repeat + 1):
        _, proc = run([sys.executable, "-X", "importtime", "-c", f"import {module}"], env)
        if proc.returncode != 0:
            raise SystemExit(f"import {module}: exit {proc.returncode}\n{proc.stderr}")
        hits = [m for line in proc.stderr.splitlines() if (m := pattern.match(line))]
        if not hits:
            raise SystemExit(f"no importtime line for {module}")
        times.append(int(hits[-1].group(1)) / 1e6)
    cold, warm = times[0], times[1:]
    return {
        "cold_s": round(cold, 4),
        "warm_best_s": round(min(warm), 4),
        "warm_median_s": round(statistics.median(warm), 4),
    }


def first_name(svclab: list[str], state: str, kind: str) -> str:
    _, proc = run([*svclab, "--state", state, "get", kind, "-o", "name"])
    names = proc.stdout.split()
    if proc.returncode != 0 or not names:
        raise SystemExit(f"get {kind}: exit {proc.returncode}\n{proc.stderr}")
    return names[0].split("/", 1)[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--manifest", default=str(ROOT / "examples" / "web.yaml"))
    args = ap.parse_args()

    svclab = svclab_script()
    with tempfile.TemporaryDirectory(prefix="svclab-bench-cli-") as tmp:
        cache = os.path.join(tmp, "pycache")
        rounds = {
            "no_bytecode_cache": dict(os.environ),
            "bytecode_cache": {
                k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"
            }
            | {"PYTHONPYCACHEPREFIX": cache},
        }
        result: dict[str, object] = {"svclab": " ".join(svclab), "repeat": args.repeat}
        for label, env in rounds.items():
            # a state of the round's own, so that its first trace is the first after
            # the apply (cold)
            state = os.path.join(tmp, f"state-{label}")
            _, proc = run([*svclab, "--state", state, "apply", "-f", args.manifest], env)
            if proc.returncode != 0:
                raise SystemExit(f"apply: exit {proc.returncode}\n{proc.stderr}")
            node = first_name(svclab, state, "nodes")
            pod = first_name(svclab, state, "pods")
            commands = {
                "help": ["--help"],
                "get_pods": ["--state", state, "get", "pods", "-A"],
                "rules": ["--state", state, "rules", "--node", node],
                "trace": [
                    *("--state", state, "trace", "--from", f"pod/{pod}"),
                    *("--to", "svc/default/web:80"),
                ],
            }
            figures: dict[str, object] = {
                "python_startup": timed([sys.executable, "-c", "pass"], args.repeat, env)
            }
            for name, argv in commands.items():
                figures[name] = timed([*svclab, *argv], args.repeat, env)
            figures["importtime_app_cli_main"] = import_time("app.cli.main", args.repeat, env)
            result[label] = figures
    emit(result)


if __name__ == "__main__":
    main()
