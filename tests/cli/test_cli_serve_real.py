"""``svclab serve --real`` follows the cluster through the live control plane's kubelets
and kube-proxies, so it refuses, in one line and before serving or realising anything,
any other control plane (the deterministic runner inside the server, or none)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLUSTER = "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {nodes: 1}\n"


@pytest.mark.parametrize("plane", ["runner", "none"])
def test_serve_real_needs_the_live_control_plane(tmp_path: Path, plane: str) -> None:
    d = tmp_path / "state"
    f = tmp_path / "c.yaml"
    f.write_text(CLUSTER)
    svclab = [str(Path(sys.executable).parent / "svclab"), "--state", str(d)]
    subprocess.run([*svclab, "apply", "-f", str(f)], check=True, capture_output=True)
    r = subprocess.run(
        [*svclab, "serve", "--real", "--control-plane", plane, "--listen", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "--real: the kernel's nodes follow the cluster through the live control plane" in last
    assert not (d / "pki").exists(), "nothing served, nothing created"
    assert not (d / "real.json").exists(), "nothing realised"
