"""Labs 00-03 draw their picture next to their text output with ``--pictures DIR``."""

from __future__ import annotations

import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

LABS = Path(__file__).resolve().parents[2] / "labs"
SVG = "{http://www.w3.org/2000/svg}"

CASES = {
    "00_control_plane": {"00_control_plane.svg": ["kubectl", "default-scheduler", "store"]},
    "01_ping_across_nodes": {
        "01_ping_across_nodes_vxlan.svg": ["pod default/a", "pod default/b", "flannel.1 (VXLAN)"],
        "01_ping_across_nodes_host-gw.svg": ["pod default/a", "pod default/b", "host-gw routes"],
    },
    "02_service_load_balancing": {"02_service_load_balancing.png": []},
    "03_nodeport_source_ip": {
        "03_nodeport_source_ip.svg": ["client 203.0.113.5", "pod default/web"]
    },
}


@pytest.mark.parametrize("lab", sorted(CASES))
def test_lab_draws_its_picture(lab: str, tmp_path: Path) -> None:
    out = tmp_path / "pictures"
    proc = subprocess.run(
        [sys.executable, str(LABS / f"{lab}.py"), "--pictures", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "checks passed" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == sorted(CASES[lab])
    for name, labels in CASES[lab].items():
        assert f"picture: {out / name}" in proc.stdout
        data = (out / name).read_bytes()
        if name.endswith(".png"):
            assert struct.unpack(">II", data[16:24]) == (800, 450)
            continue
        texts = {t.text for t in ET.fromstring(data).iter(f"{SVG}text")}
        assert set(labels) <= texts, labels


def test_without_the_option_no_picture_is_drawn(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(LABS / "00_control_plane.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and "picture:" not in proc.stdout
    assert not any(tmp_path.iterdir())
