"""Shared by the real pod runtime tests: a state directory with a small cluster brought
up on the kernel (``svclab apply`` + ``svclab up --real``: two nodes, cluster DNS, a
Deployment ``web`` of two pod servers on port 80 behind Service ``web``, a ``client``
pod and a host-network pod ``hostpod``), torn down afterwards with a leak check; and an :class:`ExecIO` that records."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner

from app import real
from app.cli.main import cli
from dataplane.linux.testing import leftovers
from tests.dnscluster import app, manifest

HOST_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: hostpod}
spec: {hostNetwork: true, containers: [{name: c, image: busybox}]}
"""
MANIFEST = manifest(app("web", "nginx", 80), HOST_POD)


def svclab(state: Path, *args: str) -> str:
    r = CliRunner().invoke(cli, ["--state", str(state), *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


@contextmanager
def real_cluster(d: Path, text: str = MANIFEST) -> Iterator[Path]:
    """``text`` applied in state dir ``d`` and brought up on the kernel; always torn
    down (nothing of it left in the kernel)."""
    f = d.parent / f"{d.name}.yaml"
    f.write_text(text)
    svclab(d, "apply", "-f", str(f))
    try:
        svclab(d, "up", "--real")
        yield d
    finally:
        record = real.RealRecord.read(d)
        real.down(d)
        if record is not None:
            assert leftovers(record.cluster_id) == []


class Recorded:
    """An :class:`control.apiserver.podruntime.ExecIO` fed from ``stdin`` chunks (then
    closed), recording what the command wrote."""

    def __init__(self, stdin: list[bytes] | None = None) -> None:
        self.stdin = list(stdin or [])
        self.stdout = b""
        self.stderr = b""

    async def read_stdin(self) -> bytes | None:
        return self.stdin.pop(0) if self.stdin else None

    async def write_stdout(self, data: bytes) -> None:
        self.stdout += data

    async def write_stderr(self, data: bytes) -> None:
        self.stderr += data
