#!/usr/bin/env python3
"""Benchmark the picture commands: wall-clock time of each, in a fresh interpreter
(subprocess): the first run (``cold_s``), then the best and median of ``--repeat`` more
(default 3; ``warm_best_s``, ``warm_median_s``: page cache and the state's own cache
filled by the runs before). Prints one JSON object.

Two clusters, each applied once to a persistent state in a temporary directory:

* ``nodes_1000``: 1,000 nodes, a 30-replica Deployment and its Service.
  ``topology_whole`` is ``svclab topology FILE.svg`` (refused: too many nodes, exit 1,
  with the hint to use ``--node``); ``topology_node`` is ``svclab topology FILE.svg
  --node NAME`` for a node with a pod. The target, beside its ``cold_s``: at most 10 s.
* ``nodes_20``: tests/app/pictures/cluster20.yaml. ``topology_svg``,
  ``topology_png``, ``events_svg`` (the whole timeline), ``events_for_svg``
  (``--for deploy/web``), ``trace_svg`` (``trace --diagram``), ``connect_png``
  (``connect -n 1000 --plot``), ``report`` (``report -o``).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from benchjson import emit, target  # noqa: E402

BIG = """apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: big}
spec: {nodes: 1000, podCIDR: 10.128.0.0/9, nodeNetwork: 172.16.0.0/12}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 30
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: x, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
"""


def svclab() -> list[str]:
    exe = shutil.which("svclab", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "app.cli.main"]


def run(args: list[str], *, ok: tuple[int, ...] = (0,)) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return elapsed, proc.stdout + proc.stderr


def timed(
    args: list[str], repeat: int, *, ok: tuple[int, ...] = (0,), at_most: float | None = None
) -> dict[str, object]:
    """``cold_s``: the command's first run (a fresh process; with ``at_most``, beside
    that target); ``warm_best_s``, ``warm_median_s``: ``repeat`` more after it."""
    cold = run(args, ok=ok)[0]
    warm = [run(args, ok=ok)[0] for _ in range(repeat)]
    return {
        "cold_s": round(cold, 3) if at_most is None else target(round(cold, 3), at_most=at_most),
        "warm_best_s": round(min(warm), 3),
        "warm_median_s": round(statistics.median(warm), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    cli = svclab()
    out: dict[str, object] = {"repeat": repeat}
    with tempfile.TemporaryDirectory(prefix="svclab-bench-pictures-") as tmp:
        t = Path(tmp)
        (t / "big.yaml").write_text(BIG)
        big = [*cli, "--state", str(t / "big")]
        setup, _ = run([*big, "apply", "-f", str(t / "big.yaml")])
        _, pods = run([*big, "get", "pods", "-o", "wide"])
        node = pods.splitlines()[1].split()[6]
        out["nodes_1000"] = {
            "apply_cold_s": round(setup, 1),
            "topology_whole": timed([*big, "topology", str(t / "big.svg")], repeat, ok=(1,)),
            "topology_node": timed(
                [*big, "topology", str(t / "node.svg"), "--node", node], repeat, at_most=10.0
            ),
        }
        small = [*cli, "--state", str(t / "small")]
        run([*small, "apply", "-f", str(ROOT / "tests/app/pictures/cluster20.yaml")])
        _, names = run([*small, "get", "pods", "-o", "name"])
        pod = "pod/default/" + sorted(names.split())[0].split("/", 1)[1]
        cases = {
            "topology_svg": ["topology", str(t / "t.svg")],
            "topology_png": ["topology", str(t / "t.png")],
            "events_svg": ["events", "--diagram", str(t / "e.svg")],
            "events_for_svg": ["events", "--diagram", str(t / "f.svg"), "--for", "deploy/web"],
            "trace_svg": [
                "trace",
                "--from",
                pod,
                "--to",
                "svc/default/web:80",
                "--diagram",
                str(t / "tr.svg"),
            ],
            "connect_png": [
                "connect",
                pod,
                "svc/default/web:80",
                "-n",
                "1000",
                "--plot",
                str(t / "c.png"),
            ],
            "report": ["report", "-o", str(t / "r.html")],
        }
        out["nodes_20"] = {k: timed([*small, *args], repeat) for k, args in cases.items()}
    emit(out)


if __name__ == "__main__":
    main()
