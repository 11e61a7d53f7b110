"""What the kernel tests of a cluster under ``svclab serve --real`` share: the CLI on
a state directory, polling, and the served cluster's life (started on a fresh state,
stopped, brought down, and checked to leave no namespace behind, also on failure)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "control" / "apiserver" / "http"))
from serving import Served

from app import real
from dataplane.linux.testing import leftovers

SVCLAB = str(Path(sys.executable).parent / "svclab")


def svclab(state: Path, *args: str) -> str:
    """``svclab --state STATE ARGS``'s stdout; its stderr in the failure when it fails."""
    out = subprocess.run(
        [SVCLAB, "--state", str(state), *args], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def wait_until(what: str, check: Callable[[], object], timeout: float = 90.0) -> None:
    """Poll ``check`` until it is true; fail with ``never: WHAT`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


@contextmanager
def served_real(
    tmp_path_factory: pytest.TempPathFactory, name: str, cluster: str
) -> Iterator[Served]:
    """``cluster`` (a Cluster manifest) applied to a fresh state and served with
    ``--real``; afterwards stopped, brought down, and no namespace of it left."""
    d = tmp_path_factory.mktemp(name)
    state = d / "state"
    (d / "cluster.yaml").write_text(cluster)
    svclab(state, "apply", "-f", str(d / "cluster.yaml"))
    s = Served(state, "--real")
    try:
        s.start()
        yield s
    finally:
        s.stop()
        record = real.RealRecord.read(state)
        real.down(state)
        if record is not None:
            assert leftovers(record.cluster_id) == []
