"""The three-way reach property, emulated side: on generated small clusters and
policies (tests/reachprops.py), the matrix :func:`netmodel.netpolicy.decide` computes
from the stored objects equals the one probed through the emulated dataplane
(:func:`app.reachprobe.probe_matrix`). The kernel side:
tests/kernel/test_reach_property_real.py. (The computed matrix of netmodel.reach joins
this comparison once it lands; decide is the reference it is checked against.)"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings

from app.reachprobe import probe_matrix
from tests.reachprops import PORTS, Scenario, computed, scenarios, svclab, without_self


@settings(
    max_examples=25,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # reported as found: shrinking costs minutes
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_computed_equals_emulated_probe(s: Scenario) -> None:
    with tempfile.TemporaryDirectory(prefix="reachprop-") as tmp:
        state = Path(tmp) / "state"
        svclab(state, "apply", "-f", "-", stdin=s.manifest())
        want = without_self(computed(state))
        got = without_self(probe_matrix(state, ports=PORTS))
        diff = {k: (want[k], got.get(k)) for k in want if want[k] != got.get(k)}
        assert not diff, f"computed vs probed differ on {diff}\n{s.manifest()}"
