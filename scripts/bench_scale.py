#!/usr/bin/env python3
"""Benchmark questions and changes on a large persistent cluster: does a question pay
only for what it touches?

The cluster (default: 1,000 nodes, 500 Deployments x 40 replicas = 20,000 pods, 500
Services, and a client pod) is made once under ``--state DIR`` (kept and reused when
given, else a temporary directory). It is built through the Python API with
``Session.with_proxies`` off (the control plane alone: the CLI's first apply would also
run one kube-proxy per node, which only records their Events); every command measured
below is the installed ``svclab`` in a fresh interpreter:

    trace   svclab --state DIR trace --from pod/default/client --to svc/default/s3:80
            (first with DIR/cache/ emptied, then ``--repeat`` times with it warm;
            ``--repeat 0`` skips the trace)
    apply   svclab --state DIR apply -f ONE_NEW_SERVICE.yaml   (``--apply-repeat`` times,
            a new Service each time; skipped with --apply-repeat 0; a run that takes
            longer than --apply-timeout, or that grows past --apply-max-rss-gb, is
            stopped and reported as null)

Wall-clock and CPU (user + system) seconds (medians; on a loaded machine the CPU
figure is the steadier one) and peak RSS (of the command's own process) are reported
beside their targets, with the load average before and after. Runs with a bytecode
cache (PYTHONPYCACHEPREFIX in a temporary directory, warmed first), as an installed
svclab has. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(ROOT))

TARGETS = {
    "trace_1k_nodes_target_seconds": 1.0,
    "trace_1k_nodes_peak_rss_target_bytes": 300_000_000,
    "apply_one_service_1k_nodes_target_seconds": 1.0,
}


def manifest(nodes: int, deployments: int, replicas: int, services: int) -> str:
    """The cluster: ``deployments`` Deployments d0.. of ``replicas`` pods (port 8080),
    ``services`` Services s0.. (port 80, Service i selects Deployment i mod
    ``deployments``) and a bare pod ``client``."""
    out = [
        "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nmetadata: {name: big}\nspec:\n"
        f"  serviceCIDR: 10.96.0.0/12\n  podCIDR: 10.128.0.0/9\n  nodes: {nodes}\n"
    ]
    for d in range(deployments):
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


def run(
    argv: list[str],
    env: dict[str, str],
    timeout: float | None = None,
    max_rss: int | None = None,
) -> tuple[float, int, int, float]:
    """(wall seconds, peak RSS bytes of the process, exit code, CPU seconds user+system);
    stopped after ``timeout`` seconds or past ``max_rss`` bytes resident (the machine
    may be shared): (inf, 0, -9, inf)."""
    with tempfile.TemporaryFile() as err:
        return _run(argv, env, timeout, max_rss, err)


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _run(
    argv: list[str],
    env: dict[str, str],
    timeout: float | None,
    max_rss: int | None,
    err: IO[bytes],
) -> tuple[float, int, int, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
    deadline = None if timeout is None else t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        over = max_rss is not None and _rss(proc.pid) > max_rss
        if over or (deadline is not None and time.perf_counter() > deadline):
            proc.kill()
            os.wait4(proc.pid, 0)
            return float("inf"), 0, -9, float("inf")
        time.sleep(0.01)
    dt = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        err.seek(0)
        raise SystemExit(f"{' '.join(argv)}: exit {code}\n{err.read().decode()}")
    return dt, usage.ru_maxrss * 1024, code, usage.ru_utime + usage.ru_stime


def build(state: Path, text: str) -> float:
    from control.session import Session
    from netmodel.manifests import load_text

    t0 = time.perf_counter()
    s = Session.open(state, must_exist=False)
    s.with_proxies = False
    try:
        s.apply(load_text(text, source="bench_scale.yaml"))
    finally:
        s.close()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--deployments", type=int, default=500)
    ap.add_argument("--replicas", type=int, default=40)
    ap.add_argument("--services", type=int, default=500)
    ap.add_argument("--state", help="keep the cluster here (reused when it exists)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--apply-repeat", type=int, default=1)
    ap.add_argument("--apply-timeout", type=float, default=600.0)
    ap.add_argument(
        "--apply-max-rss-gb", type=float, default=6.0, help="stop an apply past this RSS"
    )
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="svclab-bench-scale-")
    try:
        state = Path(args.state) if args.state else Path(tmp) / "state"
        result: dict[str, object] = {
            "nodes": args.nodes,
            "pods": args.deployments * args.replicas + 1,
            "services": args.services,
            "load_average_before": os.getloadavg(),
        }
        if not (state / "cluster.yaml").exists():
            text = manifest(args.nodes, args.deployments, args.replicas, args.services)
            result["build_seconds"] = round(build(state, text), 2)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        svclab = svclab_script()
        run([*svclab, "--help"], env)  # warms the bytecode cache
        trace = [
            *svclab,
            "--state",
            str(state),
            "trace",
            "--from",
            "pod/default/client",
            "--to",
            "svc/default/s3:80",
        ]
        if args.repeat > 0:  # --repeat 0: no trace at all (the apply alone)
            shutil.rmtree(state / "cache", ignore_errors=True)
            first, first_rss, _, first_cpu = run(trace, env)
            runs = [run(trace, env) for _ in range(args.repeat)]
            result["trace_first_seconds"] = round(first, 3)
            result["trace_first_cpu_seconds"] = round(first_cpu, 3)
            result["trace_1k_nodes_seconds"] = round(statistics.median(r[0] for r in runs), 3)
            result["trace_1k_nodes_cpu_seconds"] = round(statistics.median(r[3] for r in runs), 3)
            result["trace_1k_nodes_peak_rss_bytes"] = max([first_rss, *(r[1] for r in runs)])
        applies, apply_cpu = [], []
        for i in range(args.apply_repeat):
            f = Path(tmp) / f"more-{i}.yaml"
            f.write_text(service(f"bench-more-{time.time_ns()}", "d0"))
            dt, _, code, cpu = run(
                [*svclab, "--state", str(state), "apply", "-f", str(f)],
                env,
                timeout=args.apply_timeout,
                max_rss=int(args.apply_max_rss_gb * 1e9),
            )
            applies.append(dt)
            apply_cpu.append(cpu)
            if code != 0:
                break
        if applies:
            med = statistics.median(applies)
            result["apply_one_service_1k_nodes_seconds"] = (
                round(med, 3) if med != float("inf") else None
            )
            if med != float("inf"):
                result["apply_one_service_1k_nodes_cpu_seconds"] = round(
                    statistics.median(apply_cpu), 3
                )
            else:
                result["apply_note"] = (
                    f"stopped (past {args.apply_timeout:.0f} s or "
                    f"{args.apply_max_rss_gb:g} GB resident)"
                )
        result.update(TARGETS)
        result["load_average_after"] = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
