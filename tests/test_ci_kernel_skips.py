"""Under ``CI=true`` a kernel test that would skip fails the run (tests/conftest.py), and
``scripts/test`` refuses to run kernel tests without root unless they are excluded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SKIPPING = """
import pytest

@pytest.mark.kernel
@pytest.mark.skipif(True, reason="needs root")
def test_kernel_thing():
    pass

@pytest.mark.skipif(True, reason="not a kernel test")
def test_other_thing():
    pass
"""


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skips.py").write_text(SKIPPING)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    kernel: kernel\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_a_skipping_kernel_test_fails_under_ci(tmp_path: Path) -> None:
    res = _run(tmp_path, "true")
    assert res.returncode != 0, res.stdout
    assert "kernel test skipped under CI=true" in res.stdout
    assert "1 skipped" in res.stdout  # the non-kernel skip stays a skip


def test_outside_ci_a_kernel_skip_is_a_skip(tmp_path: Path) -> None:
    res = _run(tmp_path, None)
    assert res.returncode == 0, res.stdout
    assert "2 skipped" in res.stdout


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_scripts_test_refuses_kernel_tests_without_root() -> None:
    """Run as an unprivileged user (``setpriv``), the test command fails before running
    anything unless ``-m "not kernel"`` is given. Only the part before the install step
    runs (the script read from stdin, cut at its ``# --- install`` marker)."""
    script = (ROOT / "scripts" / "test").read_text()
    head, marker, _ = script.partition("# --- install")
    assert marker, "scripts/test has no '# --- install' marker"
    probe = head + "\necho PASSED-THE-ROOT-CHECK\n"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "setpriv",
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "bash",
                "-s",
                "--",
                *args,
            ],
            input=probe,
            capture_output=True,
            text=True,
            check=False,
            cwd="/",
            timeout=60,
        )

    res = run()
    assert res.returncode == 1 and "need root" in res.stderr, res.stderr
    assert "PASSED-THE-ROOT-CHECK" in run("-m", "not kernel").stdout
    assert "PASSED-THE-ROOT-CHECK" in run("-q", "-m", "not kernel and not slow").stdout
    assert run("-m", "kernel").returncode == 1
    assert run("-k", "not kernel").returncode == 1  # -k names tests, it excludes no marker
