"""The three-way reach property, kernel side: on a few generated small clusters and
policies (tests/reachprops.py), the matrix :func:`netmodel.netpolicy.decide` computes,
the one probed through the emulator and the one probed through the kernel
(``svclab up --real``, then :func:`app.reachprobe.probe_matrix` with ``real=True``) are
the same. Each generated cluster is torn down (``svclab down``) after its example,
also when it fails."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from app.reachprobe import probe_matrix
from dataplane.linux.netns import is_root
from tests.reachprops import PORTS, Scenario, computed, scenarios, svclab, without_self

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]


@settings(
    max_examples=3,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # a failure is reported as found: no shrinking
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_computed_equals_emulated_and_kernel_probes(s: Scenario) -> None:
    with tempfile.TemporaryDirectory(prefix="reachprop-real-") as tmp:
        state = Path(tmp) / "state"
        svclab(state, "apply", "-f", "-", stdin=s.manifest())
        want = without_self(computed(state))
        emulated = without_self(probe_matrix(state, ports=PORTS))
        try:
            svclab(state, "up", "--real")
            kernel = without_self(probe_matrix(state, ports=PORTS, real=True))
        finally:
            svclab(state, "down")
        for what, got in (("emulated", emulated), ("kernel", kernel)):
            diff = {k: (want[k], got.get(k)) for k in want if want[k] != got.get(k)}
            assert not diff, f"computed vs {what} probe differ on {diff}\n{s.manifest()}"
