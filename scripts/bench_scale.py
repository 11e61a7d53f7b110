#!/usr/bin/env python3
"""Benchmark questions and changes on a large cluster built as a user builds it: does a
question pay only for what it touches?

The cluster (default: 1,000 nodes, 20,000 pods in 500 Deployments, 500 Services, and a
client pod; ``--nodes/--pods/--deployments/--services`` for a smaller run; cluster DNS
off, said explicitly in the manifest) is written to a file and applied to a fresh state
directory with the installed CLI, ``svclab --state DIR apply -f cluster.yaml``. Every
command measured is then ``svclab`` in a fresh interpreter (a child process), in order:

    trace   svclab --state DIR trace --from pod/default/client --to svc/default/s3:80
            cold: the first trace after the apply (the state as the apply left it);
            warm: ``--repeat`` more, each in a fresh process, with what the first one
            cached (``--repeat 0``: the cold one only)
    apply   svclab --state DIR apply -f ONE_NEW_SERVICE.yaml   (one more Service, after
            the traces; a fresh process, so cold; ``--no-apply`` skips it)

Each command's wall-clock and CPU (user + system) seconds, and its peak RSS (ru_maxrss
of that child alone, from ``os.wait4``), with targets beside them (issue 28: the first
trace <= 1 s and <= 300 MB, one more Service <= 1 s). A command that runs past
``--timeout`` seconds or ``--max-rss-gb`` resident is stopped and reported as null with
a note. The interpreter's bytecode cache (PYTHONPYCACHEPREFIX in a temporary directory)
is warmed by ``svclab --help`` first, as an installed svclab has one: "cold" means a
fresh process on a state no earlier svclab question has touched, not a fresh disk.
``--state DIR`` keeps the state (DIR must hold no cluster yet: a reused state is not
cold); the load average before and after puts the figures in context on a shared
machine. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from benchjson import emit, target  # noqa: E402

TRACE_COLD_TARGET_SECONDS = 1.0  # issue 28
TRACE_COLD_TARGET_PEAK_RSS_BYTES = 300_000_000  # issue 28
APPLY_ONE_SERVICE_TARGET_SECONDS = 1.0  # issue 28


def manifest(nodes: int, deployments: int, pods: int, services: int) -> str:
    """The cluster: ``deployments`` Deployments d0.. sharing ``pods`` pods (port 8080;
    the first ``pods mod deployments`` get one more), ``services`` Services s0.. (port
    80, Service i selects Deployment i mod ``deployments``) and a bare pod ``client``."""
    out = [
        "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nmetadata: {name: big}\nspec:\n"
        f"  serviceCIDR: 10.96.0.0/12\n  podCIDR: 10.128.0.0/9\n  nodes: {nodes}\n"
        "  dns: false\n"
    ]
    for d in range(deployments):
        replicas = pods // deployments + (1 if d < pods % deployments else 0)
        out.append(
            f"apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d{d}}}\nspec:\n"
            f"  replicas: {replicas}\n  selector: {{matchLabels: {{app: d{d}}}}}\n"
            f"  template:\n    metadata: {{labels: {{app: d{d}}}}}\n    spec:\n"
            "      containers:\n      - name: c\n        image: x\n"
            "        ports: [{containerPort: 8080}]\n"
        )
    for s in range(services):
        out.append(service(f"s{s}", f"d{s % deployments}"))
    out.append(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: client}\nspec:\n"
        "  containers: [{name: c, image: x}]\n"
    )
    return "---\n".join(out)


def service(name: str, app: str) -> str:
    return (
        f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec:\n"
        f"  selector: {{app: {app}}}\n  ports: [{{port: 80, targetPort: 8080}}]\n"
    )


def svclab_script() -> list[str]:
    script = Path(sys.executable).parent / "svclab"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from app.cli.main import main; main()"]


class Run:
    """One command in a child process: wall and CPU (user + system) seconds and the peak
    RSS of that child (``ru_maxrss`` from ``os.wait4`` on its pid); ``stopped`` says why
    it was killed (past the timeout or the RSS cap), with the figures then None."""

    def __init__(self, argv: list[str], env: dict[str, str], timeout: float, max_rss: int) -> None:
        self.seconds: float | None = None
        self.cpu_seconds: float | None = None
        self.peak_rss_bytes: int | None = None
        self.stopped: str | None = None
        with tempfile.TemporaryFile() as err:
            self._run(argv, env, timeout, max_rss, err)

    def _run(
        self, argv: list[str], env: dict[str, str], timeout: float, max_rss: int, err: IO[bytes]
    ) -> None:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if _rss(proc.pid) > max_rss or time.perf_counter() - t0 > timeout:
                proc.kill()
                os.wait4(proc.pid, 0)
                self.stopped = f"stopped: past {timeout:g} s or {max_rss / 1e9:g} GB resident"
                return
            time.sleep(0.01)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)}: exit {code}\n{err.read().decode()}")
        self.seconds = round(time.perf_counter() - t0, 3)
        self.cpu_seconds = round(usage.ru_utime + usage.ru_stime, 3)
        self.peak_rss_bytes = usage.ru_maxrss * 1024


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=20_000, help="pods of the Deployments")
    ap.add_argument("--deployments", type=int, default=500)
    ap.add_argument("--services", type=int, default=500)
    ap.add_argument("--state", help="build the cluster here and keep it (must hold none)")
    ap.add_argument("--repeat", type=int, default=5, help="warm traces after the cold one")
    ap.add_argument("--no-apply", action="store_true", help="skip one more Service's apply")
    ap.add_argument("--timeout", type=float, default=1800.0, help="stop a command past this")
    ap.add_argument("--max-rss-gb", type=float, default=6.0, help="stop a command past this RSS")
    args = ap.parse_args()
    if args.deployments < 1 or args.services < 4 or args.pods < args.deployments:
        ap.error("need --deployments >= 1, --pods >= --deployments, --services >= 4 (s3)")

    tmp = tempfile.mkdtemp(prefix="svclab-bench-scale-")
    try:
        state = Path(args.state) if args.state else Path(tmp) / "state"
        if (state / "cluster.yaml").exists():
            raise SystemExit(f"{state}: holds a cluster already; cold figures need a fresh state")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        svclab = svclab_script()
        limits = (env, args.timeout, int(args.max_rss_gb * 1e9))
        Run([*svclab, "--help"], *limits)  # warms the bytecode cache

        def runs(name: str, rs: list[Run], label: str) -> dict[str, object]:
            """Wall, CPU seconds and peak RSS of one run (cold) or of repeats (warm)."""
            stopped = [r.stopped for r in rs if r.stopped]
            if stopped:
                return {f"{name}_note": stopped[0]}
            wall = [r.seconds for r in rs if r.seconds is not None]
            cpu = [r.cpu_seconds for r in rs if r.cpu_seconds is not None]
            rss = [r.peak_rss_bytes for r in rs if r.peak_rss_bytes is not None]
            if label == "cold":
                return {
                    f"{name}_cold_seconds": wall[0],
                    f"{name}_cold_cpu_seconds": cpu[0],
                    f"{name}_cold_peak_rss_bytes": rss[0],
                }
            return {
                f"{name}_warm_median_seconds": round(statistics.median(wall), 3),
                f"{name}_warm_min_seconds": min(wall),
                f"{name}_warm_median_cpu_seconds": round(statistics.median(cpu), 3),
                f"{name}_warm_peak_rss_bytes": max(rss),
                f"{name}_warm_runs": len(rs),
            }

        result: dict[str, object] = {
            "nodes": args.nodes,
            "pods": args.pods + 1,
            "deployments": args.deployments,
            "services": args.services,
            "load_average_before": os.getloadavg(),
        }
        cluster = Path(tmp) / "cluster.yaml"
        cluster.write_text(manifest(args.nodes, args.deployments, args.pods, args.services))
        build = Run([*svclab, "--state", str(state), "apply", "-f", str(cluster)], *limits)
        result.update(runs("apply_cluster", [build], "cold"))
        if build.stopped:
            emit(result)
            return
        trace = [*svclab, "--state", str(state), "trace"]
        trace += ["--from", "pod/default/client", "--to", "svc/default/s3:80"]
        first = Run(trace, *limits)
        cold = runs("trace", [first], "cold")
        cold["trace_cold_seconds"] = target(
            cold.get("trace_cold_seconds"), at_most=TRACE_COLD_TARGET_SECONDS
        )
        cold["trace_cold_peak_rss_bytes"] = target(
            cold.get("trace_cold_peak_rss_bytes"), at_most=TRACE_COLD_TARGET_PEAK_RSS_BYTES
        )
        result.update(cold)
        if args.repeat > 0:
            result.update(runs("trace", [Run(trace, *limits) for _ in range(args.repeat)], "warm"))
        if not args.no_apply:
            more = Path(tmp) / "one-service.yaml"
            more.write_text(service("bench-one-more", "d0"))
            one = Run([*svclab, "--state", str(state), "apply", "-f", str(more)], *limits)
            applied = runs("apply_one_service", [one], "cold")
            applied["apply_one_service_cold_seconds"] = target(
                applied.get("apply_one_service_cold_seconds"),
                at_most=APPLY_ONE_SERVICE_TARGET_SECONDS,
            )
            result.update(applied)
        result["load_average_after"] = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit(result)


if __name__ == "__main__":
    main()
