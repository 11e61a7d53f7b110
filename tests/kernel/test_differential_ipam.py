"""Differential test of the kubelet's network plugin: the same control plane driven once
with the emulated CNI and once with the real one (:class:`app.realnet.RealCNI`:
the real bridge + host-local plugins in realised node namespaces). Through creations,
deletions and re-creations (host-local's round-robin), every pod gets the same address
from both, and the pod's ``eth0`` in the kernel carries the network model's MAC."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Network

import pytest

from app.realnet import RealCNI
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from dataplane.linux import inspect
from dataplane.linux.netns import is_root
from dataplane.linux.realize import realize, teardown
from dataplane.linux.testing import leftovers, unique_cluster_id
from netmodel import topology
from netmodel.manifests import load_text
from netmodel.network import stable_mac
from netmodel.objects import Node, Pod

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

CLUSTER = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: ipam}
spec: {nodes: 2, podCIDR: 10.244.0.0/16, nodeCIDRMaskSize: 28, dns: false}
"""
# dns: false: the real plane starts before its nodes are realised, with no pods yet;
# coredns's pods would need CNI ADD on nodes that do not exist yet

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: c, image: x, ports: [{{containerPort: 8080}}]}}]
"""


def _addresses(plane: ControlPlane) -> dict[str, str]:
    return {
        p.key: p.status.pod_ip or ""
        for p in plane.store.list("Pod")
        if isinstance(p, Pod) and p.status.pod_ip
    }


@pytest.fixture(params=["host-local", "emulated"])
def planes(request: pytest.FixtureRequest) -> Iterator[tuple[ControlPlane, ControlPlane, str]]:
    """An emulated-CNI plane and a real-CNI plane over the same cluster; the real one's
    nodes realised (no pods yet) before any pod exists."""
    spec = load_text(CLUSTER, source="ipam").cluster
    assert spec is not None
    cid = unique_cluster_id("i")
    emulated = ControlPlane(MemoryStore(), spec.spec, seed=3)
    real = ControlPlane(
        MemoryStore(),
        spec.spec,
        seed=3,
        network_plugin=RealCNI(cid, ipam=request.param, mtu=1450),
    )
    try:
        for plane in (emulated, real):
            plane.start()
            plane.run_until_idle()
        nodes = [n for n in real.store.list("Node") if isinstance(n, Node)]
        infos = [topology.node_info(n.name, n.internal_ips[0], n.spec.pod_cidr) for n in nodes]
        net = topology.build(IPv4Network("172.18.0.0/16"), infos, [], overlay="vxlan")
        realize(net, cluster_id=cid)
        yield emulated, real, cid
    finally:
        teardown(cid)
        assert leftovers(cid) == []


def _scale(planes: tuple[ControlPlane, ControlPlane, str], replicas: int) -> None:
    objs = load_text(DEPLOYMENT.format(replicas=replicas), source="web").objects
    for plane in planes[:2]:
        plane.apply(objs)  # type: ignore[union-attr]
        plane.run_until_idle()  # type: ignore[union-attr]


def test_real_cni_gives_every_pod_the_emulated_address(
    planes: tuple[ControlPlane, ControlPlane, str],
) -> None:
    emulated, real, cid = planes
    seen: set[str] = set()
    for replicas in (6, 2, 9, 3, 12):  # shrink and grow: freed addresses come round again
        _scale(planes, replicas)
        want, got = _addresses(emulated), _addresses(real)
        assert got == want, f"after scaling to {replicas}"
        assert len(got) == replicas
        seen |= set(got.values())
    assert len(seen) > 20, "host-local's round robin: freed addresses wait their turn"
    for key in _addresses(real):
        pod = real.store.get("Pod", key)
        assert isinstance(pod, Pod) and pod.spec.node_name
        dump = inspect.dump(f"svclab-{cid}-pod-{topology_hash(key)}")
        eth0 = dump.link("eth0")
        assert eth0 is not None and stable_mac("pod", key) in eth0
        assert f"eth0 {pod.status.pod_ip}/28" in dump.addresses


def topology_hash(pod_key: str) -> str:
    from dataplane.linux.names import short_hash

    return short_hash(f"pod/{pod_key}")
