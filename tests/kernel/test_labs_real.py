"""Labs 01-05 on real network namespaces (``--real``) pass the same checks as on the
emulator, and leave nothing behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LABS = sorted((Path(__file__).resolve().parents[2] / "labs").glob("0[1-9]_*.py"))


@pytest.mark.kernel
@pytest.mark.parametrize("lab", LABS, ids=lambda p: p.stem)
def test_lab_passes_on_the_kernel(lab: Path) -> None:
    from dataplane.linux import netns

    before = set(netns.list_ours(include_held=True))
    proc = subprocess.run(
        [sys.executable, str(lab), "--real"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "(real)" in proc.stdout and "FAIL" not in proc.stdout
    # what the lab (gone now) left: not held by a live process; other test runs' own
    # namespaces, created meanwhile, are held by them and not counted
    assert set(netns.list_ours()) <= before
