"""Calico's VXLAN overlay (an IP pool with ``vxlanMode: Always``) on the kernel and in
the emulator, compared flow by flow.

Each node gets ``vxlan.calico`` (VNI 4096, UDP 4789, no learning, MTU 1450) holding its
tunnel address (the first free address of its block), and reaches the other node's
block by ``<block> via <peer tunnel address> dev vxlan.calico onlink`` with a permanent
neighbour and FDB entry for the peer's VTEP, as Felix programs them. Pods, a ClusterIP, a
NodePort reached from the other node (masqueraded), the node itself (seen as its tunnel
address) and natOutgoing to the other node's address must agree on both backends. The
cluster's namespaces are this test's own and are always removed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from app import emulation
from control.session import Session
from dataplane.backends import EmulatorBackend, RealBackend, emulator_backend, real_backend
from dataplane.backends.realise import kernel_holds
from dataplane.linux import inspect
from dataplane.linux.netns import is_root, run_in
from netmodel.manifests import load_text
from netmodel.objects import Pod, Service
from netmodel.rulesets import IptablesRules

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

NODE1, NODE2 = "172.18.0.2", "172.18.0.3"
N = 32  # both endpoints reached, p > 1 - 1e-9

SCENARIO = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: calico-vxlan}
spec:
  nodes: 2
  cni: calico
  calico:
    ipPools: [{cidr: 10.244.0.0/16, natOutgoing: true, vxlanMode: Always}]
    blockSize: 28
    blockAffinities:
    - {node: node-1, cidr: 10.244.0.0/28}
    - {node: node-2, cidr: 10.244.1.0/28}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeName: node-1
  containers: [{name: c, image: x}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-a, labels: {app: web}}
spec:
  nodeName: node-1
  containers: [{name: c, image: x, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-b, labels: {app: web}}
spec:
  nodeName: node-2
  containers: [{name: c, image: x, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, nodePort: 30080}]
"""


@dataclass
class Pair:
    emu: EmulatorBackend
    pristine: EmulatorBackend
    real: RealBackend
    ips: dict[str, str]  # pod name -> address
    vip: str


@pytest.fixture(scope="module", params=["nft", "legacy"])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    session = Session.ephemeral(load_text(SCENARIO, source="calico-vxlan"))
    ips = {p.name: str(p.status.pod_ip) for p in session.store.list("Pod") if isinstance(p, Pod)}
    [vip] = [s.spec.cluster_ip for s in session.store.list("Service")
             if isinstance(s, Service) and s.name == "web"]
    view = emulation.view(session)
    with (
        emulator_backend(view, seed=6) as emu,
        emulator_backend(view, seed=6) as pristine,
        real_backend(view, iptables_backend=request.param) as real,
    ):
        yield Pair(emu, pristine, real, ips, str(vip))


def test_the_kernel_holds_calicos_vxlan_device_routes_and_fdb(pair: Pair) -> None:
    cluster = pair.real.cluster
    assert cluster.overlay == "calico-vxlan"
    netns = cluster.node_netns("node-1")
    node1 = inspect.dump(netns)
    assert "10.244.1.0/28 via 10.244.1.0 dev vxlan.calico onlink" in node1.routes
    link = run_in(netns, ["ip", "-d", "link", "show", "vxlan.calico"]).stdout
    assert "vxlan id 4096" in link and "dstport 4789" in link and "nolearning" in link
    assert "mtu 1450" in link
    addr = run_in(netns, ["ip", "-4", "addr", "show", "vxlan.calico"]).stdout
    assert "10.244.0.0/32" in addr
    fdb = run_in(netns, ["bridge", "fdb", "show", "dev", "vxlan.calico"]).stdout
    assert f"dst {NODE2}" in fdb
    pod = run_in(cluster.pod_netns("default/client"), ["ip", "link", "show", "eth0"]).stdout
    assert "mtu 1450" in pod


def agree(pair: Pair, src: str, dst: str, port: int, n: int) -> list[tuple[str | None, str | None]]:
    possible = {o.key() for _, o in pair.pristine.possible(src, dst, port, "tcp")}
    e = pair.emu.connect(src, dst, port, "tcp", n)
    r = pair.real.connect(src, dst, port, "tcp", n, sports=[o.sport or 0 for o in e])
    for o in e + r:
        assert o.key() in possible, f"{src} -> {dst}:{port}: {o} not among {possible}"
    seen_e = {(o.pod, o.source_seen) for o in e}
    assert seen_e == {(o.pod, o.source_seen) for o in r}
    return sorted(seen_e, key=str)


def test_a_pod_reaches_a_pod_of_the_other_node_through_the_tunnel(pair: Pair) -> None:
    got = agree(pair, "pod/default/client", pair.ips["web-b"], 8080, 2)
    assert got == [("default/web-b", pair.ips["client"])]


def test_the_cluster_ip_reaches_both_pods_unmasqueraded(pair: Pair) -> None:
    got = agree(pair, "pod/default/client", pair.vip, 80, N)
    assert got == sorted([("default/web-a", pair.ips["client"]),
                          ("default/web-b", pair.ips["client"])], key=str)


def test_a_node_reaches_a_remote_pod_from_its_tunnel_address(pair: Pair) -> None:
    got = agree(pair, "node/node-1", pair.ips["web-b"], 8080, 2)
    assert got == [("default/web-b", "10.244.0.0")]


def test_a_node_port_from_the_other_node_is_masqueraded(pair: Pair) -> None:
    got = agree(pair, "node/node-2", NODE1, 30080, N)
    assert {pod for pod, _ in got} == {"default/web-a", "default/web-b"}


def test_nat_outgoing_still_applies_to_the_underlay(pair: Pair) -> None:
    e = pair.emu.ping("pod/default/client", NODE2, 1)
    r = pair.real.ping("pod/default/client", NODE2, 1)
    assert e == r and e[0].ok


def test_felixs_vxlan_masquerade_is_loaded_and_a_node_reaches_the_service(pair: Pair) -> None:
    """Felix's ``-o vxlan.calico ... --limit-iface-out ... -j MASQUERADE`` is in the kernel
    as rendered (both iptables back ends take it); a node's connection to the ClusterIP,
    DNATed to the remote pod, leaves the tunnel from the tunnel address."""
    cluster = pair.real.cluster
    netns = cluster.node_netns("node-1")
    rules = pair.real.view.rulesets["node-1"]
    assert isinstance(rules, IptablesRules) and "-o vxlan.calico" in rules.text
    assert kernel_holds(netns, rules.text, cluster.iptables_backend)
    got = agree(pair, "node/node-1", pair.vip, 80, N)
    assert ("default/web-b", "10.244.0.0") in got
