"""Start, stop and kill the pod servers of a realised cluster (see
:mod:`dataplane.linux.podserver` for the server side and its protocol): one process per
node answers for the node's pods (:attr:`ServerSpec.host`), each pod's sockets in the
pod's own namespace.

Processes are tracked by pid files under ``/run/svclab/<id>/servers/`` (one per host
process, with the list of the pods it answers for beside it), so any later
process (a second CLI call, :func:`dataplane.linux.realize.cleanup` after a crash) can
stop them; :func:`kill_tracked` never signals a pid whose command line is not a pod
server's, so a recycled pid is safe.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psutil

from dataplane.linux.names import ClusterNames
from dataplane.linux.state import StateDir
from netmodel.errors import BackendError

SERVER_SCRIPT = Path(__file__).with_name("podserver.py")
#: the DNS pods' server (:mod:`dataplane.linux.dns`): its pid files live here too
DNS_SERVER_SCRIPT = "dnsserver.py"
Proto = Literal["tcp", "udp"]

# Supervisors started by this process: waited for on shutdown (no zombies).
_children: dict[Path, subprocess.Popen[bytes]] = {}


def start_ready(argv: list[str], log_path: Path, what: str) -> subprocess.Popen[bytes]:
    """Start ARGV in a session of its own (a Ctrl-C of the caller does not reach it),
    its stderr appended to LOG_PATH, and wait for the ``ready`` line it prints on stdout;
    a process that does not say it is killed and reaped, and BackendError names WHAT and
    the log."""
    log = log_path.open("ab")
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        log.close()
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.stdout.close()
    if line.strip() != b"ready":
        proc.kill()
        proc.wait()
        raise BackendError(f"{what} did not start (see {log_path})")
    return proc


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """A pod server: the pod it answers for, its containerPorts, and the logical
    namespace of the process that holds its sockets (``node/N``: one process answers for
    all the pods of node N, from N's namespace; None: a process of its own, in the pod's
    namespace). ``grpc``: the TCP ports (among ``ports``) where it serves gRPC's health
    service, those its pod's ``grpc`` probes target (:func:`netmodel.podports.grpc_ports`)."""

    pod_key: str
    ports: tuple[tuple[int, Proto], ...]
    host: str | None = None
    grpc: tuple[int, ...] = ()


class PodServers:
    """The pod servers of one cluster, behind its supervisor process."""

    def __init__(self, cluster_id: str) -> None:
        self.names = ClusterNames(cluster_id)
        self.state = StateDir.of(cluster_id)
        self.dir = self.state.servers_dir

    # ------------------------------------------------------------------ supervisor
    def supervisor_pid(self) -> int | None:
        pid = read_pid(self.state.supervisor_pid)
        return pid if pid is not None and is_ours(pid) else None

    def ensure_supervisor(self) -> int:
        """Start the cluster's supervisor unless it runs; returns its pid. Callers in
        several processes at once (a served cluster's kubelets) start one: the check
        and the start hold ``supervisor.lock`` (a second supervisor would be an orphan
        that teardown, which knows one pid, leaves running)."""
        self.state.ensure()
        with (self.dir / "supervisor.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            pid = self.supervisor_pid()
            if pid is not None and self.state.supervisor_sock.exists():
                return pid
            proc = start_ready(
                [sys.executable, "-I", str(SERVER_SCRIPT), str(self.dir)],
                self.dir / "supervisor.log",
                "pod server supervisor",
            )
        _children[self.dir] = proc
        return proc.pid

    def _request(self, req: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            try:
                s.connect(str(self.state.supervisor_sock))
                s.sendall(json.dumps(req).encode() + b"\n")
                data = b""
                while not data.endswith(b"\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError as e:
                raise BackendError(f"pod server supervisor: {e}") from e
        reply: dict[str, Any] = json.loads(data)
        return reply

    # ------------------------------------------------------------------ API
    def start(self, specs: Sequence[ServerSpec]) -> dict[str, int]:
        """Start (or keep) a server for each pod, listening when this returns; returns
        pod -> pid (pods of one host share it). Raises BackendError naming every pod
        whose server failed (the others are served)."""
        if not specs:
            return {}
        self.ensure_supervisor()
        pods = [
            {
                "pod": s.pod_key,
                "netns": self.names.netns(f"pod/{s.pod_key}"),
                "host": s.host,
                "host_netns": None if s.host is None else self.names.netns(s.host),
                "tcp": sorted({p for p, proto in s.ports if proto == "tcp"}),
                "udp": sorted({p for p, proto in s.ports if proto == "udp"}),
                "grpc": sorted(set(s.grpc)),
                "log": str(self.state.pod_log(s.pod_key)),
            }
            for s in specs
        ]
        reply = self._request({"op": "start", "pods": pods})
        if not reply.get("ok"):
            errs = "; ".join(f"{k}: {v}" for k, v in reply.get("errors", {}).items())
            raise BackendError(f"pod servers: {errs}")
        return {str(k): int(v) for k, v in reply["pids"].items()}

    def stop(self, pod_keys: Iterable[str]) -> None:
        """Stop the servers of these pods: their sockets are closed, and a host process
        left without pods exits (no error for a pod without a server). Without a
        supervisor (it was killed) the processes that answer for these pods
        (:func:`served`) are killed, with every pod they answer for."""
        if self.supervisor_pid() is None:
            by_pod = served(self.dir)
            kill_pids(by_pod.get(k) for k in pod_keys)
            return
        self._request({"op": "stop", "pods": list(pod_keys)})

    def running(self) -> Mapping[str, int]:
        if self.supervisor_pid() is None:
            return {}
        return {str(k): int(v) for k, v in self._request({"op": "list"})["pids"].items()}

    def shutdown(self) -> None:
        """Stop every server and the supervisor; works also if the supervisor is gone
        (then the pid files are used)."""
        shutdown_dir(self.dir)


def shutdown_dir(servers_dir: Path) -> None:
    """:func:`kill_tracked`, then reap the supervisor if this process started it."""
    kill_tracked(servers_dir)
    proc = _children.pop(servers_dir, None)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def served(servers_dir: Path) -> dict[str, int]:
    """pod -> pid of the live process answering for it, from the host processes' files
    (whether or not the supervisor runs)."""
    out: dict[str, int] = {}
    for pods_file in servers_dir.glob("host-*.pods"):
        pid = read_pid(pods_file.with_suffix(".pid"))
        if pid is None or not is_ours(pid):
            continue
        try:
            pods = json.loads(pods_file.read_text())
        except (OSError, ValueError):
            continue
        out.update({str(p): pid for p in pods})
    return out


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _ours(pid: int) -> psutil.Process | None:
    """The live (not zombie) pod server, supervisor or DNS server process ``pid``, or
    None."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if not any(SERVER_SCRIPT.name in arg or DNS_SERVER_SCRIPT in arg for arg in proc.cmdline()):
            return None
    except psutil.Error:  # gone, or not ours to read
        return None
    return proc


def is_ours(pid: int) -> bool:
    """Is ``pid`` a live (not zombie) pod server, supervisor or DNS server
    (:mod:`dataplane.linux.dnsserver`) process?"""
    return _ours(pid) is not None


def kill_pids(pids: Iterable[int | None], *, timeout: float = 5) -> None:
    """SIGKILL each pid that :func:`is_ours`, and wait until they are gone (psutil
    checks a pid against its start time, so a recycled pid is never killed)."""
    victims = [p for p in (_ours(pid) for pid in pids if pid is not None) if p is not None]
    for proc in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    # a killed server that is not our child stays a zombie until its parent (the
    # supervisor) reaps it: gone for our purposes once it is a zombie
    deadline = time.monotonic() + timeout
    while victims and time.monotonic() < deadline:
        _, victims = psutil.wait_procs(victims, timeout=0.05)
        victims = [p for p in victims if _alive(p)]
    if victims:
        raise BackendError(f"pod servers {[p.pid for p in victims]} did not exit")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_tracked(servers_dir: Path) -> None:
    """Kill the supervisor and every pod server (host process) with a pid file in
    ``servers_dir``, and
    remove the pid files and the control socket."""
    if not servers_dir.is_dir():
        return
    supervisor = read_pid(servers_dir / "supervisor.pid")
    if supervisor is not None and is_ours(supervisor):
        # SIGTERM first: the supervisor kills and reaps its children (no zombies).
        with contextlib.suppress(ProcessLookupError):
            os.kill(supervisor, signal.SIGTERM)
        deadline = time.monotonic() + 3
        while is_ours(supervisor) and time.monotonic() < deadline:
            time.sleep(0.01)
    pid_files = list(servers_dir.glob("*.pid"))
    kill_pids(read_pid(p) for p in pid_files)
    for p in [*pid_files, *servers_dir.glob("host-*.pods")]:
        p.unlink(missing_ok=True)
    (servers_dir / "supervisor.sock").unlink(missing_ok=True)
