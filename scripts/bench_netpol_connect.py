#!/usr/bin/env python3
"""Benchmark what NetworkPolicy costs a new connection through the emulator: ``svclab
connect`` through a Service to a policy-protected pod, cold (a fresh process, the CLI
path), in a cluster holding ``2 x --namespaces`` NetworkPolicies against the same cluster
with none. Prints one JSON object.

The cluster is :mod:`bench_reach`'s (``--namespaces`` namespaces of ``--pods`` pods,
a default deny and an allow per namespace) plus a Service ``ns-001/web`` (port 80 to
the ``http`` port of ``app=a0``); the client is ``ns-001/p01`` (``app=a1``, which the
allow lets in). Both states are applied once, untimed. Then ``--repeat`` rounds, each
timing one cold ``connect`` on each state, in alternating order; the ratio is the
median of the rounds' ratios (one machine, one moment: the load cancels out).

Figures: ``connect_cold_seconds_with_policies`` / ``..._without_policies`` (medians),
``connect_cold_ratio`` (target ≤ 1.2, issue 26), and the connect's exit status on each
state (0: the connection was delivered, as the allow says).
Exit 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from bench_reach import cluster_docs, cold, svclab  # noqa: E402
from benchjson import emit, target  # noqa: E402

SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "web", "namespace": "ns-001"},
    "spec": {"selector": {"app": "a0"}, "ports": [{"port": 80, "targetPort": "http"}]},
}
CONNECT = ["connect", "pod/ns-001/p01", "svc/ns-001/web:80", "-n", "1"]


def apply(state: Path, docs: list[dict[str, Any]], manifest: Path) -> float:
    import yaml

    manifest.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    t0 = time.perf_counter()
    done = subprocess.run(
        [*svclab(), "--state", str(state), "apply", "-f", str(manifest)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"apply failed: {done.stderr.decode()[-2000:]}")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--namespaces", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2, help="pods per namespace")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of the cold figures")
    args = parser.parse_args()
    if args.namespaces < 2 or args.pods < 2:
        sys.exit("--namespaces and --pods must be at least 2 (the client is ns-001/p01)")
    with tempfile.TemporaryDirectory(prefix="svclab-bench-npconnect-") as tmp:
        d = Path(tmp)
        docs = [*cluster_docs(args.namespaces, args.pods), SERVICE]
        bare = [doc for doc in docs if doc["kind"] != "NetworkPolicy"]
        with_pol, without = d / "with", d / "without"
        setup = apply(with_pol, docs, d / "with.yaml") + apply(without, bare, d / "bare.yaml")
        times: dict[str, list[float]] = {"with": [], "without": []}
        codes: dict[str, int] = {}
        ratios = []
        for r in range(args.repeat):
            order = [("with", with_pol), ("without", without)]
            for name, state in order if r % 2 == 0 else reversed(order):
                wall, _, code, _ = cold(["--state", str(state), *CONNECT], d / f"{name}.out")
                times[name].append(wall)
                codes[name] = code
            ratios.append(times["with"][-1] / times["without"][-1])
        out: dict[str, Any] = {
            "pods": args.namespaces * args.pods,
            "policies": 2 * args.namespaces,
            "command": f"svclab --state STATE {' '.join(CONNECT)}",
            "setup_apply_cold_seconds": round(setup, 1),
            "connect_cold_seconds_with_policies": round(statistics.median(times["with"]), 3),
            "connect_cold_seconds_without_policies": round(
                statistics.median(times["without"]), 3
            ),
            "connect_cold_ratio": target(round(statistics.median(ratios), 3), at_most=1.2),
            "connect_exit_status_with_policies": codes["with"],
            "connect_exit_status_without_policies": codes["without"],
            "load_average": list(os.getloadavg()),
        }
    emit(out)
    missed = [v for v in out.values() if isinstance(v, dict) and v.get("met") is not True]
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
