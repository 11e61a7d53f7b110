"""``scripts/test`` runs the suite on one worker per core (pytest-xdist); tests/conftest.py
schedules every module with kernel tests to one worker as one unit, so kernel tests run
one at a time, and the other tests a module at a time. Checked by a nested run of the
real conftest over a module of kernel and plain tests, each recording its worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

N = 8

MODULE = f"""
import os
import time
from pathlib import Path

import pytest

OUT = Path(os.environ["WORKER_LOG"])


def record(what):
    with OUT.open("a") as f:
        f.write(f"{{what}} {{os.environ['PYTEST_XDIST_WORKER']}} {{time.monotonic()}}\\n")


@pytest.mark.kernel
@pytest.mark.parametrize("i", range({N}))
def test_kernel(i):
    record("kernel-start")
    time.sleep(0.2)
    record("kernel-end")
"""

PLAIN = f"""
import time

import pytest


@pytest.mark.parametrize("i", range({N}))
def test_plain(i):
    time.sleep(0.2)
"""


def test_kernel_tests_share_one_worker_and_run_in_turn(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_kernel_module.py").write_text(MODULE)
    (tmp_path / "test_kernel_module_2.py").write_text(MODULE)
    (tmp_path / "test_plain_module.py").write_text(PLAIN)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    kernel: kernel\n")
    log = tmp_path / "workers.log"
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"WORKER_LOG": str(log)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    cmd += ["-n", "2", str(tmp_path)]
    res = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{3 * N} passed" in res.stdout, res.stdout
    rows = [line.split() for line in log.read_text().splitlines()]
    assert len(rows) == 4 * N
    assert len({w for _, w, _ in rows}) == 1, rows  # one worker ran every kernel test
    # and one at a time: every start follows the previous test's end
    kinds = [k for k, _, _ in sorted(rows, key=lambda r: float(r[2]))]
    assert kinds == ["kernel-start", "kernel-end"] * 2 * N, kinds
