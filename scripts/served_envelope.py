"""``scripts/bench_control_plane.py --served``: the workload through a real ``svclab serve``.

Phases, each timed from the previous one's end (all cold: a fresh state directory, a
fresh server):

* ``state``: ``svclab apply`` of the Cluster document (the nodes) into a new state
  directory;
* ``serve_ready``: ``svclab serve`` (the live control plane: controllers, scheduler,
  a kubelet per node and, unless ``--no-kube-proxies``, a kube-proxy per node, all API
  clients of the server in its child process) until ``/readyz`` answers;
* ``nodes_ready``: until every Node reports Ready (the kubelets have started);
* ``apply_http``: every Deployment and Service POSTed over HTTPS (keep-alive, a few
  client threads, the admin certificate): the apiserver pipeline per object;
* ``pods_running``: until every pod is Running with an IP (LISTs with
  ``fieldSelector=status.phase=Running`` and ``limit=1``: the server counts);
* ``slices_written``: until every Service's EndpointSlices list all its pods.

``converge_cold_seconds`` is apply_http + pods_running + slices_written. With
``--served-timeout S`` the run stops S seconds after the apply began if it has not
converged by then: ``converge_cold_seconds`` is then null (not measured, so no verdict),
``converged`` false, ``stopped_in`` names the phase it was in, and ``progress`` what the
server counted at that moment (pods, pods Running, ready endpoints); the phases done
keep their times, and the RSS, CPU and profile figures are taken as usual. Peak RSS is
the sum of the server's and its child processes' VmHWM (each process's own peak: an
upper bound of the peak of the sum). ``--profile DIR`` records the server and the
control-plane process with py-spy (when on PATH) during the converge and reports the
functions with the most samples (self and inclusive) per process.
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def progress(text: str) -> None:
    print(f"[served {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def svclab() -> list[str]:
    script = Path(sys.executable).parent / "svclab"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from app.cli.main import main; sys.exit(main())"]


def _pod_cidr(nodes: int) -> str:
    """A cluster CIDR with a /24 for each node: 10.128.0.0/12 (4,096 of them) up to
    4,096 nodes, 10.128.0.0/9 (32,768; clear of the default Service range 10.96.0.0/12)
    above, as the 5,000-node envelope needs."""
    return "10.128.0.0/12" if nodes <= 4096 else "10.128.0.0/9"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Conn:
    """One keep-alive HTTPS connection with the admin's client certificate."""

    def __init__(self, port: int, state: Path) -> None:
        ctx = ssl.create_default_context(cafile=str(state / "pki" / "ca.crt"))
        ctx.load_cert_chain(str(state / "pki" / "admin.crt"), str(state / "pki" / "admin.key"))
        self.c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=600)
        self.c.connect()
        assert self.c.sock is not None
        self.c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request; a connection the server closed while it sat idle (its keep-alive
        timeout, e.g. through a long apply) is opened again once."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            self.c.request(method, path, body=data, headers=headers)
            r = self.c.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            self.c.close()
            self.c.connect()
            self.c.request(method, path, body=data, headers=headers)
            r = self.c.getresponse()
        raw = r.read()
        if not raw or "json" not in (r.getheader("Content-Type") or ""):
            return r.status, raw
        return r.status, json.loads(raw)


def _count(conn: Conn, path: str) -> int:
    """How many objects a LIST would give (``limit=1`` and remainingItemCount)."""
    sep = "&" if "?" in path else "?"
    status, body = conn.call("GET", f"{path}{sep}limit=1")
    if status != 200:
        raise SystemExit(f"GET {path}: {status} {body}")
    return len(body["items"]) + int(body["metadata"].get("remainingItemCount") or 0)


def _pages(conn: Conn, path: str, size: int = 2000) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        status, body = conn.call("GET", f"{path}?limit={size}{token}")
        if status != 200:
            raise SystemExit(f"GET {path}: {status} {body}")
        items += body["items"]
        cont = body["metadata"].get("continue")
        if not cont:
            return items
        token = f"&continue={cont}"


def _cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hwm(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(k) for k in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


_OWN = ("control/", "app/", "netmodel/", "dataplane/")


def _frame(text: str) -> tuple[str, bool]:
    """``func (/x/control/live.py:12)`` -> (``func (control/live.py)``, svclab's own?):
    one entry per function; library frames keep only the file name."""
    name, _, where = text.partition(" (")
    path = where.rsplit(":", 1)[0]
    for pkg in _OWN:  # py-spy names svclab's files from the package (control/live.py)
        if path.startswith(pkg) or f"/{pkg}" in path:
            return f"{name} ({pkg}{path.split(pkg, 1)[1]})", True
    return (f"{name} ({path.rsplit('/', 1)[-1]})" if where else name), False


def _top(collapsed: Path, n: int = 15) -> dict[str, Any]:
    """py-spy's raw (collapsed) samples: the functions with the most samples of their
    own (any code), and svclab's functions by samples in them or below (inclusive)."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        k = int(count)
        total += k
        frames = [_frame(f) for f in stack.split(";")]
        if frames:
            own[frames[-1][0]] += k
        for f in {name for name, mine in frames if mine}:
            incl[f] += k

    def pct(c: int) -> float:
        return round(100.0 * c / total, 1) if total else 0.0

    return {
        "samples": total,
        "self_percent": {f: pct(c) for f, c in own.most_common(n)},
        "svclab_inclusive_percent": {f: pct(c) for f, c in incl.most_common(n)},
    }


class _Stopped(Exception):
    """The converge did not finish by the deadline (``--served-timeout``)."""

    def __init__(self, phase: str, progress: dict[str, int]) -> None:
        super().__init__(phase)
        self.phase = phase
        self.progress = progress


class _Deadline:
    """When the converge gives up (None: never), and a progress line every 30 s."""

    def __init__(self, seconds: float | None) -> None:
        self.at = None if seconds is None else time.monotonic() + seconds
        self._said = time.monotonic()

    def check(self, phase: str, progress: dict[str, int]) -> None:
        now = time.monotonic()
        if now - self._said >= 30.0:
            self._said = now
            progress_line = " ".join(f"{k}={v}" for k, v in progress.items())
            print(f"[served {time.strftime('%H:%M:%S')}] {phase}: {progress_line}",
                  file=sys.stderr, flush=True)  # fmt: skip
        if self.at is not None and now >= self.at:
            raise _Stopped(phase, progress)


def served_run(args: Any, objects: list[Any], tmp: Path) -> dict[str, Any]:
    """The phases above for ``objects`` (Deployments and Services) on ``args.nodes``."""
    t: dict[str, float] = {}
    state = tmp / "state"
    cfile = tmp / "cluster.yaml"
    cfile.write_text(
        "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nmetadata: {name: envelope}\n"
        f"spec: {{nodes: {args.nodes}, podCIDR: {_pod_cidr(args.nodes)}, seed: {args.seed}, "
        "dns: false}\n"
    )
    t0 = time.monotonic()
    made = subprocess.run(
        [*svclab(), "--state", str(state), "apply", "-f", str(cfile)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    if made.returncode != 0:
        raise SystemExit(f"svclab apply: {made.stderr.strip()}")
    t["state"] = time.monotonic() - t0
    port = _free_port()
    log = tmp / "serve.log"
    cmd = [*svclab(), "--state", str(state), "serve", "--listen", f"127.0.0.1:{port}"]
    if not args.served_kube_proxies:
        cmd.append("--no-kube-proxies")
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    spies: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"svclab serve exited: {log.read_text()[-2000:]}")
            try:
                conn = Conn(port, state)
                if conn.call("GET", "/readyz")[0] == 200:
                    break
            except (OSError, ssl.SSLError, http.client.HTTPException):
                pass
            time.sleep(0.2)
        t["serve_ready"] = time.monotonic() - t0
        progress(f"serving ({t['serve_ready']:.1f} s); waiting for {args.nodes} Ready nodes")
        t0 = time.monotonic()
        while True:
            nodes = _pages(conn, "/api/v1/nodes")
            ready = sum(
                1
                for n in nodes
                if any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in n.get("status", {}).get("conditions") or []
                )
            )
            if ready >= args.nodes:
                break
            time.sleep(2.0)
        t["nodes_ready"] = time.monotonic() - t0
        kids = _children(proc.pid)
        cpu0 = {"server": _cpu(proc.pid), "control_plane": sum(_cpu(k) for k in kids)}
        if args.profile:
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            if Path(spy).exists():
                for name, pid in [("server", proc.pid), *(("control_plane", k) for k in kids)]:
                    out_file = Path(args.profile) / f"{name}-{pid}.txt"
                    spies.append((name, subprocess.Popen(
                        [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "50", "--gil",
                         "--nonblocking", "--output", str(out_file)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    ), out_file))  # fmt: skip
        progress(f"nodes ready ({t['nodes_ready']:.1f} s); POSTing {len(objects)} objects")
        t0 = time.monotonic()
        deadline = _Deadline(getattr(args, "served_timeout", None))
        stopped: _Stopped | None = None
        pods_wanted = sum(o.spec.replicas for o in objects if o.kind == "Deployment")
        want = {
            o.name: next(d.spec.replicas for d in objects if d.kind == "Deployment"
                         and d.spec.selector.match_labels == o.spec.selector)
            for o in objects if o.kind == "Service"
        }  # fmt: skip
        pods: list[dict[str, Any]] = []
        try:
            _post_all(port, state, objects, args.clients, deadline)
            t["apply_http"] = time.monotonic() - t0
            progress(f"applied ({t['apply_http']:.1f} s); waiting for {pods_wanted} running pods")
            t0 = time.monotonic()
            while True:
                total = _count(conn, "/api/v1/pods")
                running = _count(conn, "/api/v1/pods?fieldSelector=status.phase%3DRunning")
                if total >= pods_wanted and running >= pods_wanted:
                    break
                deadline.check("pods_running", {"pods": total, "pods_running": running})
                time.sleep(3.0)
            t["pods_running"] = time.monotonic() - t0
            progress(f"pods running ({t['pods_running']:.1f} s); waiting for the slices")
            t0 = time.monotonic()
            while True:
                pods = _pages(conn, "/api/v1/pods")
                no_ip = sum(1 for p in pods if not p.get("status", {}).get("podIP"))
                have: collections.Counter[str] = collections.Counter()
                for sl in _pages(conn, "/apis/discovery.k8s.io/v1/endpointslices"):
                    svc = (sl["metadata"].get("labels") or {}).get("kubernetes.io/service-name")
                    have[svc] += sum(
                        1 for e in sl.get("endpoints") or []
                        if (e.get("conditions") or {}).get("ready")
                    )  # fmt: skip
                if no_ip == 0 and all(have[s] == n for s, n in want.items()):
                    break
                deadline.check(
                    "slices_written",
                    {"pods_without_ip": no_ip, "ready_endpoints": sum(have.values()),
                     "ready_endpoints_wanted": sum(want.values())},
                )  # fmt: skip
                time.sleep(5.0)
            t["slices_written"] = time.monotonic() - t0
        except _Stopped as e:
            stopped = e
            t[f"{e.phase}_unfinished"] = time.monotonic() - t0
            progress(f"stopped in {e.phase} after {t[f'{e.phase}_unfinished']:.1f} s: {e.progress}")
        kids = _children(proc.pid)
        cpu1 = {"server": _cpu(proc.pid), "control_plane": sum(_cpu(k) for k in kids)}
        rss = {"server": _hwm(proc.pid), "control_plane": sum(_hwm(k) for k in kids)}
        profile: dict[str, Any] = {}
        for name, spy_proc, out_file in spies:
            spy_proc.send_signal(signal.SIGINT)
            try:
                spy_proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy_proc.kill()
            if out_file.exists():
                profile[name] = _top(out_file)
        if args.profile and not spies:
            profile["missing"] = "py-spy is not on PATH"
        converge = [t[k] for k in t if k not in ("state", "serve_ready", "nodes_ready")]
        out: dict[str, Any] = {
            "phases_cold_seconds": {k: round(v, 2) for k, v in t.items()},
            "converged": stopped is None,
            "converge_cold_seconds": round(sum(converge), 2) if stopped is None else None,
            "converge_cold_cpu_seconds": {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0},
            "peak_rss_bytes": rss["server"] + rss["control_plane"],
            "peak_rss_by_process_bytes": rss,
            "kube_proxies": bool(args.served_kube_proxies),
            "profile": profile,
            "counts": {
                "pods_running": (
                    len(pods) if stopped is None
                    else pods_wanted if stopped.phase == "slices_written"
                    else stopped.progress.get("pods_running", 0)
                ),
                "services": len(want),
                "nodes": args.nodes,
            },
        }
        if stopped is not None:
            out["stopped_in"] = stopped.phase
            out["stopped_after_cold_seconds"] = round(sum(converge), 2)
            out["progress"] = stopped.progress
        return out
    finally:
        for _, spy_proc, _ in spies:
            if spy_proc.poll() is None:
                spy_proc.kill()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _post_all(
    port: int, state: Path, objects: list[Any], clients: int, deadline: _Deadline
) -> None:
    """POST every object (Deployments first), ``clients`` connections at once; raises
    :class:`_Stopped` when ``deadline`` passes first."""
    todo = sorted(objects, key=lambda o: o.kind != "Deployment")
    errors: list[str] = []
    lock = threading.Lock()
    it = iter(todo)
    posted = [0]
    late: list[_Stopped] = []

    def worker() -> None:
        conn = Conn(port, state)
        while True:
            with lock:
                obj = next(it, None)
                try:
                    deadline.check("apply_http", {"posted": posted[0], "objects": len(todo)})
                except _Stopped as e:
                    late.append(e)
                posted[0] += 1
            if obj is None or errors or late:
                return
            group = "/apis/apps/v1" if obj.kind == "Deployment" else "/api/v1"
            plural = "deployments" if obj.kind == "Deployment" else "services"
            status, body = conn.call(
                "POST", f"{group}/namespaces/{obj.namespace}/{plural}", obj.to_dict()
            )
            if status != 201:
                with lock:
                    errors.append(f"POST {obj.kind} {obj.name}: {status} {body}")

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise SystemExit(errors[0])
    if late:
        raise late[0]
