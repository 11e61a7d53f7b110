#!/usr/bin/env python3
"""``kubectl exec client -- curl -s web`` through ``svclab serve`` on the emulator (issue 24).

A real ``svclab serve`` subprocess on a fresh state directory with examples/web.yaml
(3 nodes, Deployment ``web`` x3, Service ``web``) and a pod ``client``; the real kubectl
on PATH runs the exec (a v5.channel.k8s.io WebSocket). The server-side time of one exec
is the server's own measurement: the growth of
``apiserver_request_duration_seconds_sum{verb="CONNECT",subresource="exec"}`` in its
``/metrics`` across that exec alone (from the handshake to the socket's close; scraped
before and after each exec). Prints one JSON object (scripts/benchjson.py):

    exec_curl_cold_server_ms      the first exec of the server (its emulated world not
                                  built yet), server side
    exec_curl_cold_client_ms      the same exec as kubectl's caller sees it (process
                                  start, TLS, discovery, the exec)
    exec_curl_warm_server_p50_ms  the next N execs, server side, median (target <= 20)
    exec_curl_warm_server_p99_ms  ... 99th percentile
    exec_curl_warm_client_p50_ms  ... the caller's wall time, median
    setup                         start, apply and ready seconds (cold); N; curl's answer

Usage: scripts/bench_exec.py [--samples N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchjson import emit, target

ROOT = Path(__file__).resolve().parents[1]
SVCLAB = str(Path(sys.executable).parent / "svclab")
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
CLIENT = """\
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  containers:
  - {name: client, image: registry.k8s.io/e2e-test-images/agnhost:2.47, args: [pause]}
"""
SUM = re.compile(
    r'^apiserver_request_duration_seconds_sum\{(?=[^}]*verb="CONNECT")'
    r'(?=[^}]*subresource="exec")[^}]*\} (\S+)$',
    re.M,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``svclab serve`` on STATE (``extra``: more of its options, e.g. ``--real``)."""

    def __init__(self, state: Path, *extra: str) -> None:
        self.state = state
        self.port = _free_port()
        self.log = (state.parent / "serve.log").open("wb")
        self.proc = subprocess.Popen(
            [SVCLAB, "--state", str(state), "serve", "--listen", f"127.0.0.1:{self.port}", *extra],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        self.ctx: ssl.SSLContext | None = None

    def ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (self.state / "kubeconfig").exists():
                try:
                    self.metrics_text()
                    return
                except OSError:
                    pass
            if self.proc.poll() is not None:
                raise SystemExit("svclab serve exited")
            time.sleep(0.2)
        raise SystemExit("svclab serve did not come up")

    def metrics_text(self) -> str:
        if self.ctx is None:
            ctx = ssl.create_default_context(cafile=str(self.state / "pki" / "ca.crt"))
            pki = self.state / "pki"
            ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
            self.ctx = ctx
        url = f"https://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, context=self.ctx, timeout=30) as r:
            return str(r.read().decode())

    def exec_seconds(self) -> float:
        """The server's summed exec time so far."""
        return sum(float(v) for v in SUM.findall(self.metrics_text()))

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [KUBECTL, "--kubeconfig", str(self.state / "kubeconfig"), *args]
        out = subprocess.run(cmd, capture_output=True, text=True, input=input, timeout=120)
        if out.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)}: {out.stderr}")
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _exec(srv: Server) -> tuple[float, float, str]:
    """One exec: (server seconds, client seconds, what curl printed)."""
    before = srv.exec_seconds()
    t0 = time.perf_counter()
    out = srv.kubectl("exec", "client", "--", "curl", "-s", "web")
    client = time.perf_counter() - t0
    return srv.exec_seconds() - before, client, out.stdout.strip()


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--keep", type=Path, help="state directory to use and keep")
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="svclab-bench-exec-"))
    state = base / "state"
    if state.exists():
        raise SystemExit(f"{state} exists: the bench needs a fresh state directory")
    setup: dict[str, object] = {"samples": args.samples}
    t0 = time.perf_counter()
    srv = Server(state)
    try:
        srv.ready()
        setup["serve_start_cold_seconds"] = round(time.perf_counter() - t0, 3)
        t1 = time.perf_counter()
        srv.kubectl("apply", "-f", str(ROOT / "examples" / "web.yaml"))
        srv.kubectl("apply", "-f", "-", input=CLIENT)
        deadline = time.monotonic() + 60
        while len(srv.kubectl("get", "pods", "-o", "name").stdout.split()) < 4:
            if time.monotonic() > deadline:
                raise SystemExit("the pods never came")
            time.sleep(0.2)
        srv.kubectl("wait", "--for=condition=Ready", "pod", "--all", "--timeout=60s")
        setup["apply_ready_cold_seconds"] = round(time.perf_counter() - t1, 3)
        cold_server, cold_client, answer = _exec(srv)
        setup["curl_answer"] = answer
        server, client = [], []
        for _ in range(args.samples):
            s, c, _ = _exec(srv)
            server.append(s)
            client.append(c)
    finally:
        srv.stop()
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    setup["load_average_1m"] = round(os.getloadavg()[0], 2)
    emit(
        {
            "exec_curl_cold_server_ms": round(cold_server * 1000, 2),
            "exec_curl_cold_client_ms": round(cold_client * 1000, 1),
            "exec_curl_warm_server_p50_ms": target(
                round(statistics.median(server) * 1000, 2), at_most=20
            ),
            "exec_curl_warm_server_p99_ms": round(_pct(server, 0.99) * 1000, 2),
            "exec_curl_warm_client_p50_ms": round(statistics.median(client) * 1000, 1),
            "setup": setup,
        }
    )


if __name__ == "__main__":
    main()
