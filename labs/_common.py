"""Helpers shared by the labs: a check that counts, and a clean exit code."""

from __future__ import annotations

import sys
from pathlib import Path

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
