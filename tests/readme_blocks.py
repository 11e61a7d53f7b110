"""The README's ``sh`` command blocks, and a way to run their lines as a user would.

Blocks are told apart by what they hold: the install and test commands (checked by a
fresh clone, not from inside the suite), the ``--real`` block (tests/kernel), the labs
(tests/labs) and the rest, which tests/test_readme.py runs on the emulator.

A line runs with ``bash -c`` exactly as written, in a scratch directory that shows the
checkout's ``examples/``, ``labs/``, ``scripts/`` and ``tests/`` (so relative paths work
and nothing is written into the checkout), with the environment the README tells users
to activate: the running Python's ``bin/`` (the project's ``.venv/bin``, holding
``svclab`` and ``python``) first on PATH and ``SVCLAB_STATE`` in the scratch directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: what a README line may use from the checkout
LINKED = ("examples", "labs", "scripts", "tests")

_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One ``sh`` block: its first line's number in README.md and its command lines."""

    line: int
    commands: tuple[str, ...]

    @property
    def kind(self) -> str:
        """``install``, ``real``, ``labs`` or ``commands``."""
        text = "\n".join(self.commands)
        if "scripts/install" in text or "scripts/test" in text:
            return "install"
        if "--real" in text:
            return "real"
        if all(c.startswith("python labs/") for c in self.commands):
            return "labs"
        return "commands"


def blocks(text: str | None = None) -> list[Block]:
    """Every ``sh`` block of the README (or of ``text``), in order; comment-only and
    blank lines left out."""
    text = README.read_text() if text is None else text
    out = []
    for m in _BLOCK.finditer(text):
        lines = [ln.strip() for ln in m.group(1).splitlines()]
        commands = tuple(ln for ln in lines if ln and not ln.startswith("#"))
        out.append(Block(text.count("\n", 0, m.start()) + 2, commands))
    return out


def bare(command: str) -> str:
    """``command`` without its trailing shell comment."""
    return re.sub(r"\s+#.*$", "", command)


def of_kind(kind: str) -> list[str]:
    return [c for b in blocks() if b.kind == kind for c in b.commands]


def bin_dir() -> Path:
    """The directory of the running Python's scripts: ``.venv/bin`` under scripts/test."""
    d = Path(sys.executable).parent
    assert (d / "svclab").exists(), f"no svclab beside {sys.executable}: run bash scripts/install"
    return d


def workdir(tmp: Path) -> Path:
    """A scratch directory that shows the checkout's :data:`LINKED` directories."""
    for name in LINKED:
        (tmp / name).symlink_to(ROOT / name, target_is_directory=True)
    return tmp


def run(command: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``command`` with ``bash -c`` in ``cwd``, as a user with the environment active."""
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir()}{os.pathsep}{env.get('PATH', '')}"
    env["SVCLAB_STATE"] = str(cwd / ".svclab")
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def failure(command: str, proc: subprocess.CompletedProcess[str]) -> str:
    """Why ``proc`` (of ``command``) did not do what a README line must: exit 0 and no
    traceback; empty when it did."""
    if proc.returncode == 0 and "Traceback" not in proc.stderr + proc.stdout:
        return ""
    return f"{command!r} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
