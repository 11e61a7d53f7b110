"""The README's ``--real`` block runs as written (tests/readme_blocks.py): the examples
applied as "Using it" does, then ``up --real``, traffic on the kernel, ``down`` and
``cleanup``; nothing of the cluster is left, also when a line fails."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from readme_blocks import failure, of_kind, run, workdir

from dataplane.linux.testing import leftovers

pytestmark = pytest.mark.kernel

UP = re.compile(r"^cluster (\w+) up: ", re.M)


def test_the_readme_real_block_runs_as_written(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    apply, *_ = of_kind("commands")
    assert apply.startswith("svclab apply -f examples/")
    real = of_kind("real")
    assert real[0].startswith("svclab up --real") and "svclab down" in real
    assert not failure(apply, run(apply, cwd))
    cluster: str | None = None
    try:
        for command in real:
            proc = run(command, cwd)
            m = UP.search(proc.stdout)
            cluster = cluster or (m.group(1) if m else None)
            assert not failure(command, proc), failure(command, proc)
            if "--real" in command and command != real[0]:
                assert "kernel" in proc.stdout or "ENDPOINT" in proc.stdout, proc.stdout
        assert cluster is not None
    finally:
        run("svclab down", cwd)  # a no-op after the block's own down
    assert leftovers(cluster) == []
