"""The component registry (control.components) names each component as the agent it
builds names itself, and the runner runs exactly the registry's cluster-wide components
in its order; leader-election settings that client-go refuses are refused."""

from __future__ import annotations

import pytest

from control.components import COMPONENTS, KUBELET_GROUP, BuildContext
from control.leaderelection import LeaderElectionConfig
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.errors import InputError


def test_the_runner_runs_the_registry_in_its_order() -> None:
    cp = ControlPlane(MemoryStore(), ClusterSpec(nodes=2))
    want = [c.name for c in COMPONENTS if not c.per_node or c.group == KUBELET_GROUP]
    assert [str(getattr(a, "name", "")) for a in cp.components] == want
    ctx = BuildContext(cp.apiserver, cp.recorder, cp.clock, 0, cp.cluster)
    for spec in COMPONENTS:
        if not spec.per_node:
            assert spec.build(ctx, None).name == spec.name  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "message"),
    [
        (10.0, 10.0, 2.0, "leaseDuration (10.0s) must be greater than renewDeadline (10.0s)"),
        (15.0, 2.0, 2.0, "renewDeadline (2.0s) must be greater than retryPeriod (2.0s)"),
        (15.0, 10.0, 0.0, "renewDeadline (10.0s) must be greater than retryPeriod (0.0s)"),
    ],
)
def test_leader_election_settings_client_go_refuses_are_refused(
    lease: float, renew: float, retry: float, message: str
) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LeaderElectionConfig(lease_duration=lease, renew_deadline=renew, retry_period=retry)
