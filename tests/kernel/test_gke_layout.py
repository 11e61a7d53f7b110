"""A replayed ``kubectl get -A -o yaml`` dump of a GKE routes-based cluster on the kernel:
the services range lies inside the pod range, the pods keep their recorded addresses,
and a ClusterIP (an address of the pod range that no node's pod subnet holds) is DNATed
before routing on both backends, from a pod and from a node, to the same endpoints."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app import emulation
from control.session import Session
from dataplane.backends import EmulatorBackend, RealBackend, emulator_backend, real_backend
from dataplane.linux.netns import is_root
from netmodel.manifests import load

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

DUMP = Path(__file__).resolve().parents[1] / "data" / "kubectl-dumps" / "gke-routes-list.yaml"
VIP = "10.7.245.17"  # default/web, inside the pod range 10.4.0.0/14
N = 24  # both endpoints reached with p > 1 - 1e-6


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[EmulatorBackend, EmulatorBackend, RealBackend]]:
    session = Session.ephemeral(load([DUMP]))
    view = emulation.view(session)
    with (
        emulator_backend(view, seed=3) as emu,
        emulator_backend(view, seed=3) as pristine,
        real_backend(view, cni="bridge-plugin") as real,
    ):
        yield emu, pristine, real


@pytest.mark.parametrize("src", ["pod/default/client", "node/gke-pool-1-b"])
def test_cluster_ip_inside_the_pod_range_reaches_both_endpoints(
    pair: tuple[EmulatorBackend, EmulatorBackend, RealBackend], src: str
) -> None:
    emu, pristine, real = pair
    possible = {o.key() for _, o in pristine.possible(src, VIP, 80, "tcp")}
    e = emu.connect(src, VIP, 80, "tcp", N)
    r = real.connect(src, VIP, 80, "tcp", N, sports=[o.sport or 0 for o in e])
    for o in e + r:
        assert o.key() in possible, f"{src} -> {VIP}:80: {o} not among {possible}"
    want = {"default/web-0", "default/web-1"}
    assert {o.pod for o in e} == {o.pod for o in r} == want
