"""A real ``svclab serve`` subprocess on a free port of 127.0.0.1, for end-to-end tests.

The fixture makes a 2-node cluster in a temporary state directory (``svclab apply`` of a
Cluster document), starts the server, waits until it answers ``/readyz`` and always
stops it (SIGTERM, then SIGKILL) however the test ends."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[3]

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: e2e}
spec:
  nodes: 2
"""

T = TypeVar("T")


def svclab_cmd() -> list[str]:
    script = Path(sys.executable).parent / "svclab"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from app.cli.main import main; sys.exit(main())"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    state: Path
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    def svclab(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*svclab_cmd(), "--state", str(self.state), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def wait_for(what: Callable[[], T | None], timeout: float, message: str) -> T:
    """Poll ``what()`` every 0.1 s until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {message}")
        time.sleep(0.1)


@contextmanager
def serve(tmp: Path, *extra: str, manifest: Path | None = None) -> Iterator[Served]:
    """``svclab serve`` on a state made from ``manifest`` (default: a small Cluster)."""
    state = tmp / "state"
    if manifest is None:
        manifest = tmp / "cluster.yaml"
        manifest.write_text(CLUSTER)
    made = subprocess.run(
        [*svclab_cmd(), "--state", str(state), "apply", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert made.returncode == 0, made.stderr
    port = free_port()
    log = tmp / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *svclab_cmd(),
                "--state",
                str(state),
                "serve",
                "--listen",
                f"127.0.0.1:{port}",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    served = Served(state, port, proc, log)
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"svclab serve exited {proc.returncode}: {served.log_text()}")
            return served.kubeconfig.exists() and (
                served.kubectl("get", "--raw", "/readyz").returncode == 0
            )

        wait_for(ready, 30, "svclab serve answers /readyz")
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
