"""Shared by the podtools tests: the recorded outputs of the real tools
(tests/data/podtools/, made by record.py there) and an emulated cluster from the
README's examples, with a pod shell on it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from app import podexec
from control.session import Session
from dataplane.podtools import Emulated, PodTarget, run

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "podtools"
EXAMPLES = [str(ROOT / "examples" / f) for f in ("web.yaml", "pods.yaml", "services.yaml")]


@dataclass(frozen=True)
class Recorded:
    """One recorded run: the command, its exit code, stdout and stderr (bytes)."""

    command: str
    exit_code: int
    stdout: bytes
    stderr: bytes


def recorded(name: str) -> Recorded:
    data = (DATA / f"{name}.out").read_bytes()
    head, rest = data.split(b"#---- stdout\n", 1)
    stdout, stderr = rest.split(b"#---- stderr\n", 1)
    lines = head.decode().splitlines()
    return Recorded(lines[0][2:], int(lines[1].split()[-1]), stdout, stderr)


def mask(data: bytes, *pairs: tuple[bytes, bytes]) -> bytes:
    """``data`` with each ``(old, new)`` replaced, then every number (an address, a
    port, ``IP:PORT``, an id, a timing, a speed like ``112k``) with the spaces around it as ``N``: what differs
    between two runs of a real tool is masked, with the padding that depends on its
    width (the columns are checked by the formatter tests); the rest of the layout
    (words, tabs, CRs, line order) is kept."""
    for old, new in pairs:
        data = data.replace(old, new)
    return re.sub(rb" *\d+(?:[.:]\d+)*[kM]? *", b"N", data)


class Shell:
    """The examples' cluster on the emulator and a pod shell on it."""

    def __init__(self, files: list[str] | None = None) -> None:
        self.session = Session.from_files(files or EXAMPLES)
        self.world: Emulated = podexec.world(self.session)

    def pod(self, name: str, namespace: str = "default") -> PodTarget:
        return podexec.target(self.session, self.world, namespace, name, None)

    def run(
        self, pod: str, argv: list[str], env: dict[str, str] | None = None
    ) -> tuple[int, bytes, bytes]:
        return run(self.world, self.pod(pod), argv, env)
