"""Labs 01-05 and 07-11 on real network namespaces (``--real``) pass the same checks as on the
emulator, and leave nothing behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: lab 06 is about the API server (kubectl against svclab serve): it has no --real run;
#: lab 07 (cluster DNS) has its own test below
LABS = [
    p
    for p in sorted((Path(__file__).resolve().parents[2] / "labs").glob("[01][0-9]_*.py"))
    if p.stem not in ("00_control_plane", "06_kubectl", "07_dns")
]


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


@pytest.mark.kernel
def test_lab_07_dns_on_the_kernel() -> None:
    """Real DNS server processes, glibc in the client pod: the same checks as on the
    emulator (the emulator-only trace check aside); nothing left behind, /etc/netns
    included."""
    from dataplane.linux import netns

    lab = Path(__file__).resolve().parents[2] / "labs" / "07_dns.py"
    before = set(netns.list_ours(include_held=True))
    etc = set(Path("/etc/netns").glob("svclab-*")) if Path("/etc/netns").exists() else set()
    proc = subprocess.run(
        [sys.executable, str(lab), "--real"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "lab 07 (real): 12/12 checks passed" in proc.stdout
    assert "example.com  -> ['203.0.113.80'] in 4 questions" in proc.stdout
    # leftovers of the lab (its process is gone); other processes' live clusters aside
    assert set(netns.list_ours()) <= before
    after = set(Path("/etc/netns").glob("svclab-*")) if Path("/etc/netns").exists() else set()
    assert not {p for p in after - etc if not netns.held(p.name)}
