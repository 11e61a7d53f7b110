"""``svclab serve --real`` refuses, in one line and before serving anything, a state
directory without a real cluster up (``svclab up --real`` never ran)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLUSTER = "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {nodes: 1}\n"


def test_serve_real_without_a_real_cluster_is_refused_in_one_line(tmp_path: Path) -> None:
    d = tmp_path / "state"
    f = tmp_path / "c.yaml"
    f.write_text(CLUSTER)
    svclab = [str(Path(sys.executable).parent / "svclab"), "--state", str(d)]
    subprocess.run([*svclab, "apply", "-f", str(f)], check=True, capture_output=True)
    r = subprocess.run(
        [*svclab, "serve", "--real", "--listen", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode != 0
    assert r.stderr == f"error: {d}: no real cluster up here (run 'svclab up --real' first)\n"
    assert not (d / "pki").exists(), "nothing served, nothing created"
