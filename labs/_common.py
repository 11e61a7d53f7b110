"""Helpers shared by the labs: a check that counts, and a clean exit code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


class Checks:
    """Collects named checks; ``finish()`` prints a summary and exits non-zero on failure."""

    def __init__(self, lab: str) -> None:
        self.lab = lab
        self.failed: list[str] = []
        self.passed = 0

    def check(self, ok: bool, what: str) -> None:
        mark = "ok  " if ok else "FAIL"
        print(f"  [{mark}] {what}")
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)

    def finish(self) -> None:
        total = self.passed + len(self.failed)
        print(f"\n{self.lab}: {self.passed}/{total} checks passed")
        sys.exit(1 if self.failed else 0)


def backend(session, *, real: bool, external_clients=(), seed: int = 0):  # type: ignore[no-untyped-def]
    """A context manager yielding the emulator (default) or the real kernel (``--real``)
    for ``session``'s converged cluster: both realise the same ClusterView."""
    from control import backends, emulation

    view = emulation.view(session, external_clients=external_clients)
    if real:
        return backends.real_backend(view)
    return backends.emulator_backend(view, seed=seed)


class LabArguments(argparse.ArgumentParser):
    """A lab's command line: a usage error is one line on stderr and exit code 2."""

    def __init__(self, doc: str, *, real: bool = True, hint: str = "see --help") -> None:
        super().__init__(description=doc.splitlines()[0] if doc else None)
        self.hint = hint
        if real:
            self.add_argument("--real", action="store_true", help="use real network namespaces")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({self.hint})\n")


def parse_real_flag(doc: str) -> bool:
    """``--real`` on the command line: run on real network namespaces (root needed)."""
    return bool(LabArguments(doc).parse_args().real)


def parse_no_arguments(doc: str, why: str) -> None:
    """For a lab without options (no ``--real`` mode either): refuse any argument,
    saying ``why`` it has none."""
    LabArguments(doc, real=False, hint=why).parse_args()
