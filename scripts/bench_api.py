#!/usr/bin/env python3
"""HTTP API benchmark: ``svclab serve`` over HTTPS with keep-alive, on a stored cluster.

Default workload (issue 12): 1,000 nodes, 30,000 pods (200 Deployments), 1,000 Services,
built once into a state directory (``--state``, reused when it already holds a
cluster) with the deterministic runner, then served by a real ``svclab serve``
subprocess. Prints one JSON object:

    get_pod_p99_ms            GET of one pod (random pods, one keep-alive connection)
    mutating_p99_ms           create, patch and delete of a pod (validated and stored)
    list_pods_seconds         LIST of every pod as JSON
    list_pods_table_seconds   the same LIST as a server-side Table
    writes_per_second         pod annotation patches, 8 concurrent keep-alive clients
    watch_event_p99_ms        a write reaching, among N watchers (one per node,
                              fieldSelector spec.nodeName), the watcher it concerns
    peak_rss_bytes            the server's peak resident set size (VmHWM)
    setup                     build / start seconds, counts

Targets: get_pod_p99_ms <= 10, mutating_p99_ms <= 50, list_pods_seconds <= 1,
list_pods_table_seconds <= 1.5, writes_per_second >= 1000, watch_event_p99_ms <= 100.
Usage: scripts/bench_api.py [--nodes N] [--pods P] [--services S] [--deployments D]
       [--state DIR] [--watchers W] [--samples K]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import h11
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def build(state: Path, nodes: int, deployments: int, pods: int, services: int) -> float:
    """Store the cluster in ``state`` (the runner converges it); returns seconds."""
    from bench_control_plane import workload

    from control.clock import WallClock
    from control.runner import ControlPlane
    from control.store.sqlite import SqliteStore
    from netmodel.cluster import Cluster, ClusterSpec

    t0 = time.perf_counter()
    state.mkdir(parents=True, exist_ok=True)
    spec = ClusterSpec.model_validate({"nodes": nodes, "podCIDR": "10.128.0.0/12", "seed": 0})
    store = SqliteStore(state / "state.db")
    plane = ControlPlane(store, spec, seed=0, clock=WallClock())
    plane.start()
    plane.run_until_idle()
    plane.apply(workload(deployments, pods, services), source="bench")
    plane.run_until_idle(max_steps=10_000_000)
    store.close()
    cluster = Cluster(metadata={"name": "bench"}, spec=spec)
    (state / "cluster.yaml").write_text(yaml.safe_dump(cluster.to_dict(), sort_keys=False))
    return time.perf_counter() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def context(state: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(state / "pki" / "ca.crt"))
    ctx.load_cert_chain(str(state / "pki" / "admin.crt"), str(state / "pki" / "admin.key"))
    return ctx


class Conn:
    """One keep-alive HTTPS connection."""

    def __init__(self, port: int, ctx: ssl.SSLContext) -> None:
        self.c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=300)
        self.c.connect()
        # as kubectl and urllib3 do: http.client writes headers and body separately,
        # which Nagle + delayed ACK would stall for 40 ms
        self.c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        ctype: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = ctype
        self.c.request(method, path, body=data, headers=headers)
        r = self.c.getresponse()
        return r.status, r.read()


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def p99(samples: list[float]) -> float:
    s = sorted(samples)
    return round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1000, 2)


def pod_body(name: str, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "api"}},
        "spec": spec,
    }


async def watchers(
    port: int,
    ctx: ssl.SSLContext,
    nodes: list[str],
    ready: threading.Event,
    marks: dict[str, float],
    seen: dict[str, float],
    stop: asyncio.Event,
) -> None:
    connected: set[str] = set()

    async def one(node: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        conn = h11.Connection(h11.CLIENT)
        path = f"/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3D{node}&resourceVersion=0&timeoutSeconds=3600"
        writer.write(
            conn.send(
                h11.Request(
                    method="GET",
                    target=path,
                    headers=[("Host", "127.0.0.1"), ("Accept", "application/json")],
                )
            )
        )
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        buf = b""
        while not stop.is_set():
            ev = conn.next_event()
            if ev is h11.NEED_DATA:
                data = await reader.read(65536)
                if not data:
                    return
                conn.receive_data(data)
                continue
            if isinstance(ev, h11.Response):
                connected.add(node)
            if isinstance(ev, h11.Data):
                buf += bytes(ev.data)
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if b'"bench-mark"' in line:
                        obj = json.loads(line)["object"]
                        mark = obj["metadata"].get("annotations", {}).get("bench-mark")
                        if mark and mark not in seen:
                            seen[mark] = time.perf_counter()
            elif isinstance(ev, h11.EndOfMessage | h11.ConnectionClosed):
                return

    tasks = []
    for i, n in enumerate(nodes):
        tasks.append(asyncio.create_task(one(n)))
        if i % 50 == 49:
            await asyncio.sleep(0.05)
    deadline = time.monotonic() + 600
    while len(connected) < len(nodes) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    ready.set()
    await stop.wait()
    for t in tasks:
        t.cancel()


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = None
    if args.state:
        state = Path(args.state)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="svclab-bench-api-"))
        state = tmp / "state"
    built = 0.0
    if not (state / "cluster.yaml").exists():
        progress("building the stored cluster")
        built = build(state, args.nodes, args.deployments, args.pods, args.services)
    port = free_port()
    svclab = str(Path(sys.executable).parent / "svclab")
    log = open(state.parent / "bench-serve.log", "ab")  # noqa: SIM115
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            svclab,
            "--state",
            str(state),
            "serve",
            "--no-kube-proxies",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    out: dict[str, Any] = {}
    try:
        ctx = None
        while time.perf_counter() - t0 < 1800:
            if proc.poll() is not None:
                raise RuntimeError(
                    "svclab serve exited; see " + str(state.parent / "bench-serve.log")
                )
            try:
                ctx = context(state)
                if Conn(port, ctx).call("GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert ctx is not None
        started = time.perf_counter() - t0
        c = Conn(port, ctx)
        # wait until the control plane is idle (the first round lists everything)
        code, body = c.call("GET", "/api/v1/pods?limit=1")
        pods = json.loads(c.call("GET", "/api/v1/pods")[1])["items"]
        names = [
            (p["metadata"]["namespace"], p["metadata"]["name"], p["spec"].get("nodeName"))
            for p in pods
        ]
        rnd = random.Random(1)
        # GET one pod
        progress(f"listed {len(names)} pods; GET one pod")
        samples = []
        for _ in range(args.samples):
            ns, name, _ = rnd.choice(names)
            t = time.perf_counter()
            code, _ = c.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
            samples.append(time.perf_counter() - t)
            assert code == 200
        out["get_pod_p99_ms"] = p99(samples)
        # create, patch, delete
        progress("create, patch, delete")
        samples = []
        nodes = sorted({n for _, _, n in names if n})
        for i in range(args.samples // 2):
            name = f"bench-m-{i}"
            t = time.perf_counter()
            code, _ = c.call(
                "POST", "/api/v1/namespaces/default/pods", pod_body(name, nodes[i % len(nodes)])
            )
            samples.append(time.perf_counter() - t)
            assert code == 201, code
            t = time.perf_counter()
            code, _ = c.call(
                "PATCH",
                f"/api/v1/namespaces/default/pods/{name}",
                {"metadata": {"labels": {"m": str(i)}}},
                ctype="application/merge-patch+json",
            )
            samples.append(time.perf_counter() - t)
            assert code == 200, code
            t = time.perf_counter()
            code, _ = c.call(
                "DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0"
            )
            samples.append(time.perf_counter() - t)
            assert code == 200, code
        out["mutating_p99_ms"] = p99(samples)
        # LIST as JSON and as a Table
        progress("LIST as JSON and as a Table")
        t = time.perf_counter()
        code, body = c.call("GET", "/api/v1/pods")
        out["list_pods_seconds"] = round(time.perf_counter() - t, 3)
        out["list_pods_bytes"] = len(body)
        t = time.perf_counter()
        code, body = c.call(
            "GET", "/api/v1/pods", accept="application/json;as=Table;v=v1;g=meta.k8s.io"
        )
        out["list_pods_table_seconds"] = round(time.perf_counter() - t, 3)
        assert json.loads(body)["kind"] == "Table"
        # writes/s with 8 concurrent clients (annotation patches)
        progress("writes with 8 clients")
        count = [0]
        lock = threading.Lock()
        deadline = time.perf_counter() + args.write_seconds

        def writer(k: int) -> None:
            cc = Conn(port, ctx)
            r = random.Random(k)
            n = 0
            while time.perf_counter() < deadline:
                ns, name, _ = r.choice(names)
                code, _ = cc.call(
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/pods/{name}",
                    {"metadata": {"annotations": {"w": str(n)}}},
                    ctype="application/merge-patch+json",
                )
                assert code == 200, code
                n += 1
            with lock:
                count[0] += n

        t = time.perf_counter()
        threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        out["writes_per_second"] = round(count[0] / (time.perf_counter() - t), 1)
        # watch fan-out: one watcher per node
        progress("watch fan-out")
        watch_nodes = nodes[: args.watchers]
        marks: dict[str, float] = {}
        seen: dict[str, float] = {}
        ready = threading.Event()
        loop = asyncio.new_event_loop()
        stop = asyncio.Event()
        th = threading.Thread(
            target=lambda: loop.run_until_complete(
                watchers(port, ctx, watch_nodes, ready, marks, seen, stop)
            )
        )
        th.start()
        ready.wait(600)
        progress(f"{len(watch_nodes)} watchers connected")
        by_node: dict[str, list[tuple[str, str]]] = {}
        for ns, name, node in names:
            if node in watch_nodes:
                by_node.setdefault(node, []).append((ns, name))
        samples = []
        for i in range(args.samples // 2):
            node = rnd.choice(watch_nodes)
            ns, name = rnd.choice(by_node[node])
            mark = f"m{i}"
            t = time.perf_counter()
            code, _ = c.call(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/{name}",
                {"metadata": {"annotations": {"bench-mark": mark}}},
                ctype="application/merge-patch+json",
            )
            assert code == 200
            while mark not in seen and time.perf_counter() - t < 10:
                time.sleep(0.0005)
            if mark in seen:
                samples.append(seen[mark] - t)
        loop.call_soon_threadsafe(stop.set)
        th.join(30)
        out["watch_event_p99_ms"] = p99(samples) if samples else None
        out["watch_events_seen"] = f"{len(samples)}/{args.samples // 2}"
        status = Path(f"/proc/{proc.pid}/status").read_text()
        hwm = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
        out["peak_rss_bytes"] = int(hwm.split()[1]) * 1024
        out["setup"] = {
            "build_seconds": round(built, 1),
            "serve_ready_seconds": round(started, 1),
            "nodes": len(nodes),
            "pods": len(names),
            "watchers": len(watch_nodes),
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--deployments", type=int, default=200)
    ap.add_argument("--pods", type=int, default=30_000)
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--watchers", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--write-seconds", type=float, default=5.0)
    ap.add_argument("--state", default=None, help="state directory to build into / reuse")
    args = ap.parse_args()
    out = run(args)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
