"""Real etcd processes for tests (and benchmarks): Debian's /usr/bin/etcd on free
127.0.0.1 ports, each member with its own temporary data directory (on /dev/shm when
there is one: etcd fsyncs every write, and tmpfs makes that free).

``with etcd_cluster(members=3) as c:`` starts the members, waits until the cluster
answers, and always kills them and removes the data (also when the block raises).
:meth:`EtcdCluster.kill` / :meth:`EtcdCluster.restart` stop and start one member (same
data directory, same ports) for fault tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EtcdCluster:
    def __init__(self, members: int, root: Path) -> None:
        self.root = root
        self.names = [f"m{i}" for i in range(members)]
        self.client_ports = [free_port() for _ in self.names]
        self.peer_ports = [free_port() for _ in self.names]
        self.token = f"svclab-test-{uuid.uuid4().hex[:8]}"
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * members

    @property
    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    @property
    def url(self) -> str:
        return "etcd://" + self.endpoints

    def endpoint(self, i: int) -> str:
        return f"127.0.0.1:{self.client_ports[i]}"

    def _args(self, i: int) -> list[str]:
        peers = ",".join(
            f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, self.peer_ports, strict=True)
        )
        client = f"http://127.0.0.1:{self.client_ports[i]}"
        peer = f"http://127.0.0.1:{self.peer_ports[i]}"
        return [
            ETCD,
            "--name", self.names[i],
            "--data-dir", str(self.root / self.names[i]),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", peers,
            "--initial-cluster-token", self.token,
            "--initial-cluster-state", "new",
            "--heartbeat-interval", "50",
            "--election-timeout", "500",
            "--log-level", "error",
        ]  # fmt: skip

    def start(self, i: int) -> None:
        log = open(self.root / f"{self.names[i]}.log", "ab")  # noqa: SIM115 - owned by the child
        try:
            self.procs[i] = subprocess.Popen(
                self._args(i), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        self.procs[i] = None

    def restart(self, i: int) -> None:
        self.kill(i)
        self.start(i)
        self.wait_healthy([i])

    def healthy(self, i: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint(i)}/health", timeout=1) as resp:
                return b'"true"' in resp.read()
        except OSError:
            return False

    def wait_healthy(self, members: list[int] | None = None, timeout: float = 30.0) -> None:
        members = list(range(len(self.names))) if members is None else members
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(self.healthy(i) for i in members):
                return
            for i in members:
                proc = self.procs[i]
                if proc is not None and proc.poll() is not None:
                    log = (self.root / f"{self.names[i]}.log").read_text(errors="replace")
                    raise RuntimeError(f"etcd {self.names[i]} exited: {log[-2000:]}")
            time.sleep(0.1)
        raise TimeoutError(f"etcd members {members} not healthy after {timeout} s")

    def stop(self) -> None:
        for i in range(len(self.names)):
            self.kill(i)

    def wipe(self) -> None:
        """Delete every key (the revision keeps growing: etcd never goes back)."""
        self.etcdctl("del", "--prefix", "")

    def etcdctl(self, *args: str, member: int | None = None) -> str:
        """Run etcdctl (API 3) against the cluster; returns stdout."""
        eps = self.endpoints if member is None else self.endpoint(member)
        out = subprocess.run(
            ["etcdctl", "--endpoints", eps, *args],
            env={**os.environ, "ETCDCTL_API": "3"},
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return out.stdout


@contextmanager
def etcd_cluster(members: int = 1) -> Iterator[EtcdCluster]:
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="svclab-etcd-", dir=shm if shm.is_dir() else None))
    cluster = EtcdCluster(members, root)
    try:
        for i in range(members):
            cluster.start(i)
        cluster.wait_healthy()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
