"""Every lab runs and passes its own checks (on the emulator)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LABS = sorted((Path(__file__).resolve().parents[2] / "labs").glob("[0-9][0-9]_*.py"))


def test_there_are_labs() -> None:
    assert len(LABS) >= 4


@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_lab_passes(lab: Path) -> None:
    proc = subprocess.run([sys.executable, str(lab)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "checks passed" in proc.stdout
    assert "FAIL" not in proc.stdout
