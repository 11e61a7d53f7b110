"""Under ``CI=true`` a kernel test that would skip fails the run, and as root so does any
skip not in ``CI_ALLOWED_SKIPS``; a test without the kernel marker may not make network
namespaces (tests/conftest.py). ``scripts/test`` refuses to run kernel tests without
root unless they are excluded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane.linux import netns as ns
from dataplane.linux.netns import is_root

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

MAKES_NAMESPACES = """
import subprocess
import pytest
from dataplane.linux import netns as ns

def test_in_this_process():
    try:
        ns.create(ns.unique_name("t"))
    except AssertionError:
        pass  # caught: the run fails all the same

def test_in_a_child():
    subprocess.run(["ip", "netns", "add", ns.unique_name("t")], check=True)

@pytest.mark.kernel
def test_marked():
    with ns.temporary("t"):
        pass
"""

ALLOWED = 'CI_ALLOWED_SKIPS: dict[str, str] = {"not a kernel": "a test of the allow-list"}'


def _run(
    where: Path,
    ci: str | None,
    module: str = SKIPPING,
    *,
    conftest: str | None = None,
    as_root: bool = True,
) -> subprocess.CompletedProcess[str]:
    text = (ROOT / "tests" / "conftest.py").read_text()
    if conftest is not None:
        assert "CI_ALLOWED_SKIPS: dict[str, str] = {}" in text
        text = text.replace("CI_ALLOWED_SKIPS: dict[str, str] = {}", conftest)
    if not as_root:
        # the conftest's one question about privilege, answered "not root": dropping to
        # another user instead needs the checkout's .venv readable by that user, which a
        # clone under a private directory (mktemp -d) is not
        assert text.count("os.geteuid() == 0") == 2, "the conftest asks about root elsewhere"
        text = text.replace("os.geteuid() == 0", "False")
    (where / "conftest.py").write_text(text)
    (where / "test_module.py").write_text(module)
    (where / "pytest.ini").write_text("[pytest]\nmarkers =\n    kernel: kernel\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(where)]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=where, timeout=120, check=False
    )


def test_a_skipping_kernel_test_fails_under_ci(tmp_path: Path) -> None:
    res = _run(tmp_path, "true")
    assert res.returncode != 0, res.stdout
    assert "kernel test skipped under CI=true" in res.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_as_root_under_ci_any_skip_fails(tmp_path: Path) -> None:
    res = _run(tmp_path, "true")
    assert "test skipped under CI=true as root (not in CI_ALLOWED_SKIPS): not a kernel test" in (
        res.stdout
    )
    assert "2 errors" in res.stdout, res.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_as_root_under_ci_an_allowed_skip_stays_a_skip(tmp_path: Path) -> None:
    res = _run(tmp_path, "true", conftest=ALLOWED)
    assert "1 skipped, 1 error" in res.stdout, res.stdout
    assert "kernel test skipped under CI=true" in res.stdout  # the kernel one never is


def test_without_root_under_ci_only_kernel_skips_fail(tmp_path: Path) -> None:
    res = _run(tmp_path, "true", as_root=False)
    assert "1 skipped, 1 error" in res.stdout, res.stdout + res.stderr
    assert "kernel test skipped under CI=true" in res.stdout


def test_outside_ci_a_kernel_skip_is_a_skip(tmp_path: Path) -> None:
    res = _run(tmp_path, None)
    assert res.returncode == 0, res.stdout
    assert "2 skipped" in res.stdout


def test_a_test_asking_for_netns_without_the_kernel_marker_is_refused_at_collection(
    tmp_path: Path,
) -> None:
    module = "import pytest\n\ndef test_bare(netns):\n    pass\n"
    module += "\n@pytest.mark.kernel\ndef test_marked(netns):\n    pass\n"
    res = _run(tmp_path, None, module + "\ndef test_other():\n    pass\n")
    assert res.returncode == 4, res.stdout + res.stderr  # usage error: nothing ran
    assert (
        "tests use the netns fixture without pytest.mark.kernel: test_module.py::test_bare\n"
        in res.stderr
    ), res.stderr


@pytest.mark.kernel
@pytest.mark.skipif(not is_root(), reason="needs root")
def test_a_test_without_the_kernel_marker_may_not_make_namespaces(tmp_path: Path) -> None:
    """In this process (even when the test catches the refusal) and, as root, in a
    child process; a kernel-marked test may. (The session's leak check removes what
    the child left.)"""
    before = set(ns.list_ours(include_held=True))
    res = _run(tmp_path, None, MAKES_NAMESPACES)
    left = set(ns.list_ours(include_held=True)) - before
    assert not [n for n in left if n.startswith("svclab-t-")]  # (others may be anyone's)
    out = res.stdout
    # the two fail after their call; the session fails for what the child left
    assert "3 passed, 3 errors" in out, out
    assert "test_in_this_process makes network namespaces ['svclab-t-" in out
    assert "test_in_a_child made network namespaces ['svclab-t-" in out
    assert "(in a child process) but has no pytest.mark.kernel marker" in out
    assert "tests left svclab namespaces behind: ['svclab-t-" in out


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
