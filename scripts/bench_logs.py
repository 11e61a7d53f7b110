#!/usr/bin/env python3
"""pods/log follow benchmark: how soon ``kubectl logs -f`` shows a pod server's new
access record, through a real ``svclab serve`` (issue 24's target: a new request's line
<= 100 ms after the request).

A fresh state directory gets examples/web.yaml and a ``svclab serve`` of its own; a
``kubectl logs -f`` (the kubectl on PATH) follows one web pod. Each sample appends one
access record to the pod's CRI log file exactly as the emulated runtime does when its
pod server answers a request (``app.podruntime.cri_record``, at the path the runtime
names, ``STATE/pods/<ns>_<pod>_<uid>/<container>/0.log``), then times how long until
kubectl prints that line. The wait between samples is random (0-50 ms) so that the
samples fall anywhere in the server's poll period. Prints one JSON object:

    follow_first_line_cold_ms   the first record after kubectl started following, on a
                                server that has followed nothing before
    follow_line_warm_p50_ms     the following records (also _p95_ms, _max_ms)
    request_to_follow_line_warm_p95_ms  a real request to the pod (GET through the
                                apiserver's pods/POD:8080/proxy/, answered by the
                                emulated pod server, which writes its record), from the
                                moment it is sent to kubectl printing its record (also _p50_ms)
    python_follow_line_warm_p50_ms  the same through the official Python client's
                                ``read_namespaced_pod_log(follow=True,
                                _preload_content=False)``
    setup                       samples, server start seconds, load average

Target (issue 24): request_to_follow_line_warm_p95_ms, follow_line_warm_p95_ms and
follow_first_line_cold_ms <= 100.
Usage: scripts/bench_logs.py [--samples N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "control" / "apiserver" / "http"))

from benchjson import emit, target  # noqa: E402
from serving import KUBECTL, WEB, Served  # noqa: E402

from app.podruntime import cri_record  # noqa: E402

TARGET_MS = 100.0


def _log_file(srv: Served) -> tuple[str, Path]:
    out = srv.kubectl("get", "pods", "-l", "app=web", "-o", "json").stdout
    pod = sorted(json.loads(out)["items"], key=lambda p: p["metadata"]["name"])[0]
    m = pod["metadata"]
    d = srv.state / "pods" / f"{m['namespace']}_{m['name']}_{m['uid']}" / "web"
    d.mkdir(parents=True, exist_ok=True)
    return m["name"], d / "0.log"


def _append(path: Path, text: str) -> float:
    """Append one record as the runtime does; the time it was written."""
    with path.open("a", encoding="utf-8") as f:
        f.write(cri_record(text))
    return time.perf_counter()


class _Lines:
    """Reads a stream's bytes as they come; :meth:`until` the one holding a marker."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""

    def until(self, marker: bytes, timeout: float = 10) -> float:
        deadline = time.monotonic() + timeout
        while marker not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SystemExit(f"bench_logs: {marker!r} never reached the follower")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    raise SystemExit("bench_logs: the follow stream ended")
                self.buf += chunk
        at = time.perf_counter()
        self.buf = self.buf.split(marker, 1)[1]
        return at


def _kubectl_follow(srv: Served, pod: str, path: Path, samples: int) -> tuple[float, list[float]]:
    _append(path, "bench-start")
    cmd = [KUBECTL, "--kubeconfig", str(srv.kubeconfig), "logs", "-f", pod]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        lines = _Lines(proc.stdout.fileno())
        lines.until(b"bench-start\n", 30)
        t0 = _append(path, "bench-cold")
        cold = (lines.until(b"bench-cold\n") - t0) * 1000
        warm = []
        for i in range(samples):
            time.sleep(random.uniform(0, 0.05))
            t0 = _append(path, f"bench-{i}")
            warm.append((lines.until(f"bench-{i}\n".encode()) - t0) * 1000)
        return cold, warm
    finally:
        proc.terminate()
        proc.wait(10)


def _request_follow(srv: Served, pod: str, samples: int) -> list[float]:
    """A real request to the pod (through the apiserver's ``pods/POD:8080/proxy/``, so
    the emulated runtime's pod server answers it and writes its record), timed from the
    moment it is sent to the moment ``kubectl logs -f`` prints its record."""
    cmd = [KUBECTL, "--kubeconfig", str(srv.kubeconfig), "logs", "-f", "--tail=0", pod]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    base = f"/api/v1/namespaces/default/pods/{pod}:8080/proxy"
    try:
        assert proc.stdout is not None
        lines = _Lines(proc.stdout.fileno())
        # the follower is live once a request made after it started shows up
        for k in range(60):
            srv.raw("GET", f"{base}/req-start")
            try:
                lines.until(b"/req-start HTTP/1.1", 0.5)
                break
            except SystemExit:
                if k == 59:
                    raise
        out = []
        for i in range(samples):
            time.sleep(random.uniform(0, 0.05))
            t0 = time.perf_counter()
            code, body, _ = srv.raw("GET", f"{base}/req-{i}")
            if code != 200 or not str(body).startswith(f"default/{pod} "):
                raise SystemExit(f"bench_logs: the request was answered {code} {body!r}")
            out.append((lines.until(f"/req-{i} HTTP/1.1".encode()) - t0) * 1000)
        return out
    finally:
        proc.terminate()
        proc.wait(10)


def _python_follow(srv: Served, pod: str, path: Path, samples: int) -> list[float]:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(srv.kubeconfig)))
    resp = api.read_namespaced_pod_log(
        pod, "default", follow=True, tail_lines=0, _preload_content=False
    )
    try:
        chunks = resp.stream(amt=None, decode_content=False)  # one per HTTP chunk
        out = []
        for i in range(samples):
            time.sleep(random.uniform(0, 0.05))
            t0 = _append(path, f"py-{i}")
            got = b""
            while f"py-{i}\n".encode() not in got:
                got += next(chunks)
            out.append((time.perf_counter() - t0) * 1000)
        return out
    finally:
        resp.release_conn()


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--samples", type=int, default=100)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="svclab-bench-logs-"))
    srv = Served(tmp / "state")
    try:
        t = time.perf_counter()
        srv.start()
        started = time.perf_counter() - t
        srv.kubectl("apply", "-f", str(WEB))
        deadline = time.monotonic() + 60
        while len(srv.kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout.split()) < 3:
            if time.monotonic() > deadline:
                raise SystemExit("bench_logs: the web pods never came")
            time.sleep(0.2)
        srv.kubectl("wait", "--for=condition=Ready", "pod", "-l", "app=web", "--timeout=60s")
        pod, path = _log_file(srv)
        cold, warm = _kubectl_follow(srv, pod, path, args.samples)
        py = _python_follow(srv, pod, path, args.samples)
        requests = _request_follow(srv, pod, args.samples)
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    out: dict[str, Any] = {
        "follow_first_line_cold_ms": target(round(cold, 2), at_most=TARGET_MS),
        "follow_line_warm_p50_ms": _pct(warm, 0.5),
        "follow_line_warm_p95_ms": target(_pct(warm, 0.95), at_most=TARGET_MS),
        "follow_line_warm_max_ms": round(max(warm), 2),
        "request_to_follow_line_warm_p50_ms": _pct(requests, 0.5),
        "request_to_follow_line_warm_p95_ms": target(_pct(requests, 0.95), at_most=TARGET_MS),
        "python_follow_line_warm_p50_ms": _pct(py, 0.5),
        "python_follow_line_warm_p95_ms": _pct(py, 0.95),
        "setup": {
            "samples": args.samples,
            "serve_start_cold_seconds": round(started, 2),
            "mean_warm_ms": round(statistics.fmean(warm), 2),
            "loadavg_1m": os.getloadavg()[0],
        },
    }
    emit(out)


if __name__ == "__main__":
    main()
