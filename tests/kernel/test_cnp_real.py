"""ClusterNetworkPolicy on the real kernel (mark.kernel): the tier scenarios of
tests/data/clusternetworkpolicy/tiers.yaml over the upstream e2e cluster, realised with
``svclab up --real`` (each node's namespace loaded with kube-router's layout and
svclab's ClusterNetworkPolicy tier chains), probed through real sockets
(:func:`app.reachprobe.probe_matrix` with ``real=True``). The kernel's table equals
:func:`netmodel.clusterpolicy.decide`'s; an Admin Deny is enforced by the kernel
against a NetworkPolicy that allows the connection (x/a -> x/b TCP 80 refused, 81
through), and the kernel's counters, read back through the render's origins
(``svclab rules --policy-hits``), name the ClusterNetworkPolicy rule that refused it.
The cluster is always torn down (``svclab down`` in the fixture's ``finally``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.reachprobe import probe_matrix
from dataplane.linux.netns import is_root
from tests.cnptiers import PORTS, TIERS, computed, differences, without_self
from tests.netpol_e2e import Harness

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]


@pytest.fixture(scope="module")
def realised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(tmp_path_factory.mktemp("cnp-real") / "state")
    h.create()
    h.svclab("apply", "-f", str(TIERS))
    try:
        h.svclab("up", "--real")
        yield h
    finally:
        h.svclab("down")


def test_the_kernel_enforces_the_tiers_as_decide_says(realised: Harness) -> None:
    want, _ = computed(realised.state)
    kernel = without_self(probe_matrix(realised.state, ports=PORTS, real=True))
    assert not differences(want, kernel), "kernel:\n" + "\n".join(differences(want, kernel))
    # the Admin Deny beats allow-a-to-b on the kernel: 80 refused, 81 through
    assert kernel[("x/a", "x/b")] == {("TCP", 81), ("UDP", 80)}


def test_the_kernel_counters_name_the_denying_cluster_network_policy(realised: Harness) -> None:
    probe_matrix(realised.state, ports=[("TCP", 80)], namespaces=["x"], real=True)
    hits = "".join(
        realised.svclab("rules", "--node", node, "--policy-hits") for node in ("node-1", "node-2")
    )
    assert (
        'ClusterNetworkPolicy/deny-a-to-b-80 ingress[0].from[0] "no-a-on-80" '
        "(Admin tier, priority 10: Deny pods namespaceSelector {}, podSelector pod=a, TCP 80)"
    ) in hits, hits
