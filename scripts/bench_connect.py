#!/usr/bin/env python3
"""Benchmark ``svclab connect``: a 2-node cluster, a 3-replica Deployment behind a
Service, a client pod; prints one JSON object.

* ``connect_100k_cold_seconds`` and ``connect_100k_cold_peak_rss_bytes`` — ``svclab
  connect -f CLUSTER pod/default/client svc/default/web:80 -n 100000 -o jsonl`` in a
  fresh process (wall time, and the peak RSS of that process alone, from ``os.wait4``);
* ``connect_1m_cold_seconds`` — the same with ``-n 1000000`` when ``--million`` is
  given; otherwise null, and ``connect_1m_cold_seconds_extrapolated`` from the 100k run
  (the cost per connection is flat: ``rss_flat`` compares the peak RSS of a run of N/10
  with N's);
* ``cli_to_bench_per_connection_warm_ratio`` — the CLI path's CPU time per connection
  (its connection loop and its formatter, ``ConnectReport`` writing ``-o jsonl`` to
  /dev/null, measured in this process with the emulator built as the CLI builds it)
  over the CPU time per connection of ``scripts/bench_packets.py``'s full path (SYN and
  SYN-ACK walked end to end, untraced) on the same cluster, interleaved rounds in one
  run after a warm-up (chains compiled), so that the machine's load cancels out.

Targets (beside their figures, for ``--n 100000``): connect_100k_cold_seconds <= 20,
connect_100k_cold_peak_rss_bytes <= 300 MB, cli_to_bench_per_connection_warm_ratio
<= 1.5. Usage: ``python3 scripts/bench_connect.py [--n 100000] [--million]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchjson import emit, target

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: bench}
spec: {serviceCIDR: 10.96.0.0/12, podCIDR: 10.244.0.0/16, nodes: 2}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: agnhost, ports: [{name: http, containerPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  containers: [{name: c, image: busybox}]
"""
SVCLAB = Path(sys.executable).with_name("svclab")


CPU: dict[int, float] = {}


def cli_run(path: str, n: int) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes, ``ru_maxrss`` of that child alone, from
    ``os.wait4``) of one ``svclab connect -n N -o jsonl`` in a fresh process; its CPU
    seconds go to :data:`CPU`."""
    cmd = [str(SVCLAB), "connect", "-f", path, "pod/default/client", "svc/default/web:80"]
    with tempfile.TemporaryFile() as out:
        t = time.perf_counter()
        proc = subprocess.Popen([*cmd, "-n", str(n), "-o", "jsonl"], stdout=out)
        _, status, ru = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"svclab connect -n {n}: exit {proc.returncode}")
        out.seek(max(0, out.seek(0, os.SEEK_END) - 65536))
        last = out.read().rsplit(b"\n", 2)[-2]
    CPU[n] = ru.ru_utime + ru.ru_stime
    summary = json.loads(last)["summary"]
    if sum(summary["counts"].values()) != n:
        raise SystemExit(f"svclab connect -n {n}: counts {summary['counts']}")
    return seconds, ru.ru_maxrss * 1024


def per_connection_ratio(path: str, n: int, rounds: int) -> dict[str, float]:
    """CPU time per connection: the CLI's loop over the bench's full path."""
    from app import emulation
    from control.session import Session

    session = Session.from_files([path])
    emu = emulation.emulator(session, external_clients=[], rules_override={})
    src = emulation.resolve_endpoint(session, "pod/default/client")
    host, port = emulation.resolve_endpoint(session, "svc/default/web:80").rsplit(":", 1)
    from app.cli.traffic_cmd import ConnectReport

    def cli_loop() -> None:  # the CLI's loop and its formatter, -o jsonl to /dev/null
        conns = emu.iter_connect(
            src,
            host,
            "tcp",
            int(port),
            n,
            record=False,
            choice=True,
            complete=False,
            release=True,
        )
        stdout = sys.stdout
        with open(os.devnull, "w") as sys.stdout:
            try:
                ConnectReport("src", "dst", n, "jsonl", None, kernel=False).run(conns)
            finally:
                sys.stdout = stdout

    def bench_loop() -> None:  # bench_packets' full path: SYN and SYN-ACK, untraced
        for _ in emu.iter_connect(
            src, host, "tcp", int(port), n, record=False, complete=False, release=True
        ):
            pass

    cli: list[float] = []
    bench: list[float] = []
    bench_loop()  # warm-up: chains compiled
    for _ in range(rounds):
        for loop, out in ((cli_loop, cli), (bench_loop, bench)):
            t = time.process_time()
            loop()
            out.append((time.process_time() - t) / n)
    session.close()
    return {"cli_cpu_per_connection": min(cli), "bench_cpu_per_connection": min(bench)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--million", action="store_true", help="also run -n 1000000")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cluster.yaml")
        Path(path).write_text(CLUSTER)
        small_s, small_rss = cli_run(path, max(args.n // 10, 1))
        big_s, big_rss = cli_run(path, args.n)
        million = cli_run(path, 1_000_000) if args.million else None
        ratio = per_connection_ratio(path, 2000, args.rounds)
    per_conn = (big_s - small_s) / (args.n - max(args.n // 10, 1))
    big, small = f"connect_{args.n // 1000}k", f"connect_{args.n // 10000}k"
    hundred_k = args.n == 100_000  # the targets are for -n 100000
    out = {
        "n": args.n,
        f"{big}_cold_seconds": target(round(big_s, 3), at_most=20)
        if hundred_k
        else round(big_s, 3),
        f"{big}_cold_peak_rss_bytes": (
            target(big_rss, at_most=300_000_000) if hundred_k else big_rss
        ),
        f"{small}_cold_peak_rss_bytes": small_rss,
        "rss_flat": big_rss <= small_rss * 1.1,
        f"{big}_cold_cpu_seconds": round(CPU[args.n], 3),
        "connect_1m_cold_seconds": None if million is None else round(million[0], 3),
        "connect_1m_cold_peak_rss_bytes": None if million is None else million[1],
        "connect_1m_cold_seconds_extrapolated": round(big_s + per_conn * (1_000_000 - args.n), 1),
        "cli_to_bench_per_connection_warm_ratio": target(
            round(ratio["cli_cpu_per_connection"] / ratio["bench_cpu_per_connection"], 3),
            at_most=1.5,
        ),
        "cli_warm_cpu_seconds_per_connection": round(ratio["cli_cpu_per_connection"], 7),
        "bench_warm_cpu_seconds_per_connection": round(ratio["bench_cpu_per_connection"], 7),
        "load_average": os.getloadavg()[0],
    }
    emit(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
