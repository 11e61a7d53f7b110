#!/usr/bin/env python3
"""Benchmark the kernel's pod runtime (``app.realruntime.RealRuntime``, what ``svclab
serve --real`` hands ``kubectl exec`` and ``kubectl port-forward``); prints one JSON
object. Needs root (network namespaces).

A 2-node cluster with cluster DNS, a Deployment ``web`` (two pod servers on port 80)
behind Service ``web`` and a ``client`` pod is applied to a temporary state directory and
brought up with ``svclab up --real``; then, in this process:

* ``exec_curl_cold_ms`` — the first ``exec client -- curl -s http://web/`` of this fresh
  process, the runtime built from the session first: ``RealRuntime(session)`` and
  ``exec`` (fork, enter the pod's namespace with kubelet's resolv.conf and hosts, real
  curl resolving ``web`` through the real DNS pods and connecting through the kernel's
  kube-proxy rules, its output streamed back);
* ``exec_curl_warm_p50_ms`` / ``..._p90_ms`` — the same exec ``--runs`` times after it:
  the server side of ``kubectl exec client -- curl -s web`` (the streaming protocol's
  framing is not included);
* ``exec_true_warm_p50_ms`` — ``exec client -- true``: the runtime's own share (fork,
  namespaces, mounts, exec, wait) of the exec above;
* ``port_forward_upload_warm_megabytes_per_s`` / ``..._download_...`` — ``--megabytes``
  MiB through one ``runtime.port_forward`` connection (asyncio streams over a socket made
  in the pod's namespace, connected to ``127.0.0.1``), written to / read from a sink or
  source process listening in the ``web`` pod's namespace (``ip netns exec``), best of
  ``--rounds``. The bench brings its own sink rather than a bulk mode of the pod server:
  the pod server's behaviour is the pod server model's (a one-line answer), and a mode
  nothing but this bench would use has no place in that specification.

Then the same through the path a user takes: ``svclab serve --real`` on that state
directory and the real kubectl on PATH:

* ``kubectl_exec_curl_warm_server_p50_ms`` — ``kubectl exec client -- curl -s
  http://web/`` (a v5.channel.k8s.io WebSocket), the server's own time for it: the growth
  of ``apiserver_request_duration_seconds_sum{verb="CONNECT",subresource="exec"}`` across
  each exec (the first one is ``..._cold_server_ms``);
* ``kubectl_port_forward_upload_warm_megabytes_per_s`` / ``..._download_...`` —
  ``kubectl port-forward pod/WEB :PORT`` (SPDY/3.1 streams; kubectl's WebSocket tunnel is
  refused), ``--megabytes`` MiB sent into the local port and counted by the sink in the
  pod (upload: until the sink has read them all after the local side's end of file), or
  read from the source in the pod until its end (download); best of ``--rounds``.

Usage: ``python3 scripts/bench_realpod.py [--runs N] [--megabytes M] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_exec import KUBECTL, Server
from benchjson import emit, target

MANIFEST = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 2, dns: true}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 80}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec: {containers: [{name: c, image: busybox}]}
"""

#: a sink (``sink``: reads until end of file) or source (``source N``: writes N bytes)
#: on 127.0.0.1:PORT; prints ``ready``, then the byte count when done
PEER = r"""
import socket, sys
mode, port = sys.argv[1], int(sys.argv[2])
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", port)); ls.listen(1)
print("ready", flush=True)
c, _ = ls.accept()
n = 0
if mode == "sink":
    buf = bytearray(1 << 20)
    while (k := c.recv_into(buf)):
        n += k
else:
    total = int(sys.argv[3]); chunk = b"x" * (1 << 20)
    while n < total:
        n += c.send(chunk[: total - n])
    c.close()
print(n, flush=True)
"""
PORT = 9099


class Sink:
    """ExecIO: no stdin, output kept."""

    def __init__(self) -> None:
        self.out = b""

    async def read_stdin(self) -> bytes | None:
        return None

    async def write_stdout(self, data: bytes) -> None:
        self.out += data

    async def write_stderr(self, data: bytes) -> None:
        self.out += data


def svclab(state: Path, *args: str) -> None:
    exe = Path(sys.executable).parent / "svclab"
    subprocess.run([str(exe), "--state", str(state), *args], check=True, capture_output=True)


def forward_round(rt: object, netns: str, pod: str, mode: str, size: int) -> float:
    """Seconds to move ``size`` bytes through one port-forward connection."""
    from app.realruntime import RealRuntime

    assert isinstance(rt, RealRuntime)
    argv = ["ip", "netns", "exec", netns, sys.executable, "-c", PEER, mode, str(PORT), str(size)]
    peer = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert peer.stdout is not None and peer.stdout.readline().strip() == "ready"

        async def run() -> float:
            conn = await rt.port_forward("default", pod, PORT)
            chunk = b"x" * (1 << 16)
            start = time.perf_counter()
            moved = 0
            if mode == "sink":
                while moved < size:
                    await conn.write(chunk)
                    moved += len(chunk)
                await conn.write_eof()
            while data := await conn.read(1 << 20):
                moved += len(data)
            await conn.close()
            return time.perf_counter() - start

        seconds = asyncio.run(run())
        assert int(peer.stdout.readline()) == size
        return seconds
    finally:
        peer.kill()
        peer.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--megabytes", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from app import real

    with tempfile.TemporaryDirectory(prefix="svclab-bench-realpod-") as tmp:
        state = Path(tmp) / "state"
        manifest = Path(tmp) / "cluster.yaml"
        manifest.write_text(MANIFEST)
        svclab(state, "apply", "-f", str(manifest))
        try:
            svclab(state, "up", "--real")
            result = measure(state, args)
            result.update(through_serve(state, args, result))
        finally:
            real.down(state)
    emit(result)
    return 0 if all(v.get("met") for v in result.values() if isinstance(v, dict)) else 1


def measure(state: Path, args: argparse.Namespace) -> dict[str, object]:
    from control.apiserver.podruntime import ExecSpec
    from control.session import Session

    session = Session.open(state)
    try:
        spec = ExecSpec("default", "client", "c", ("curl", "-s", "http://web/"))

        def exec_once(rt: object, what: ExecSpec = spec) -> tuple[float, bytes, int]:
            from app.realruntime import RealRuntime

            assert isinstance(rt, RealRuntime)
            io = Sink()
            start = time.perf_counter()
            code = asyncio.run(rt.exec(what, io))
            return time.perf_counter() - start, io.out, code

        start = time.perf_counter()
        from app.realruntime import RealRuntime

        rt = RealRuntime(session)
        _, out, code = exec_once(rt)
        cold = time.perf_counter() - start
        if code != 0 or not out.startswith(b"default/web-"):
            raise SystemExit(f"exec curl failed: {code} {out!r}")
        warm = []
        for _ in range(args.runs):
            seconds, out, code = exec_once(rt)
            assert code == 0 and out.startswith(b"default/web-"), out
            warm.append(seconds)
        warm.sort()
        true = ExecSpec("default", "client", "c", ("true",))
        bare = sorted(exec_once(rt, true)[0] for _ in range(args.runs))
        web = next(
            p for p in session.store.list("Pod", namespace="default") if p.name.startswith("web-")
        )
        netns = rt.cluster.pod_netns(web.key)
        size = args.megabytes << 20
        rates = {}
        for mode in ("sink", "source"):
            best = min(forward_round(rt, netns, web.name, mode, size) for _ in range(args.rounds))
            rates[mode] = size / best / 1e6
    finally:
        session.close()
    return {
        "web_pod": web.name,
        "web_netns": netns,
        "exec_curl_cold_ms": round(cold * 1e3, 2),
        "exec_curl_warm_p50_ms": target(round(statistics.median(warm) * 1e3, 2), at_most=50),
        "exec_curl_warm_p90_ms": round(warm[int(0.9 * (len(warm) - 1))] * 1e3, 2),
        "exec_true_warm_p50_ms": round(statistics.median(bare) * 1e3, 2),
        "port_forward_upload_warm_megabytes_per_s": target(round(rates["sink"], 1), at_least=100),
        "port_forward_download_warm_megabytes_per_s": target(
            round(rates["source"], 1), at_least=100
        ),
        "runs": args.runs,
        "megabytes": args.megabytes,
    }


def kubectl_forward_round(srv: Server, netns: str, pod: str, mode: str, size: int) -> float:
    """Seconds to move ``size`` bytes through ``kubectl port-forward`` into (``sink``) or
    out of (``source``) a peer in the pod's namespace."""
    argv = ["ip", "netns", "exec", netns, sys.executable, "-c", PEER, mode, str(PORT), str(size)]
    peer = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    kubeconfig = str(srv.state / "kubeconfig")
    fwd = subprocess.Popen(
        [KUBECTL, "--kubeconfig", kubeconfig, "port-forward", f"pod/{pod}", f":{PORT}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert peer.stdout is not None and peer.stdout.readline().strip() == "ready"
        assert fwd.stdout is not None
        line = fwd.stdout.readline()
        m = re.search(r"127\.0\.0\.1:(\d+) -> ", line)
        if m is None:
            raise SystemExit(f"kubectl port-forward: {line!r}")
        with socket.create_connection(("127.0.0.1", int(m.group(1)))) as sock:
            start = time.perf_counter()
            if mode == "sink":
                chunk = b"x" * (1 << 20)
                moved = 0
                while moved < size:
                    sock.sendall(chunk)
                    moved += len(chunk)
                sock.shutdown(socket.SHUT_WR)
                got = int(peer.stdout.readline())
            else:
                got = 0
                buf = bytearray(1 << 20)
                while got < size and (k := sock.recv_into(buf)):
                    got += k
            seconds = time.perf_counter() - start
        if got != size:
            raise SystemExit(f"port-forward {mode}: {got} of {size} bytes")
        return seconds
    finally:
        for p in (fwd, peer):
            p.kill()
            p.wait()


def through_serve(
    state: Path, args: argparse.Namespace, figures: dict[str, object]
) -> dict[str, object]:
    """The user's path: ``svclab serve --real`` and the real kubectl (module docstring)."""
    srv = Server(state, "--real")
    try:
        srv.ready()
        before = srv.exec_seconds()
        out = srv.kubectl("exec", "client", "--", "curl", "-s", "http://web/").stdout
        if not out.startswith("default/web-"):
            raise SystemExit(f"kubectl exec curl: {out!r}")
        cold = srv.exec_seconds() - before
        warm = []
        for _ in range(args.runs):
            before = srv.exec_seconds()
            srv.kubectl("exec", "client", "--", "curl", "-s", "http://web/")
            warm.append(srv.exec_seconds() - before)
        pod, netns = str(figures["web_pod"]), str(figures["web_netns"])
        size = args.megabytes << 20
        rates = {}
        for mode in ("sink", "source"):
            best = min(
                kubectl_forward_round(srv, netns, pod, mode, size) for _ in range(args.rounds)
            )
            rates[mode] = size / best / 1e6
    finally:
        srv.stop()
    return {
        "kubectl_exec_curl_cold_server_ms": round(cold * 1e3, 2),
        "kubectl_exec_curl_warm_server_p50_ms": target(
            round(statistics.median(warm) * 1e3, 2), at_most=50
        ),
        "kubectl_port_forward_upload_warm_megabytes_per_s": target(
            round(rates["sink"], 1), at_least=100
        ),
        "kubectl_port_forward_download_warm_megabytes_per_s": target(
            round(rates["source"], 1), at_least=100
        ),
    }


if __name__ == "__main__":
    sys.exit(main())
