"""A replayed ``kubectl get -A -o yaml`` dump of a kubeadm cluster running Calico, on the
kernel and on the emulator, compared flow by flow.

The pods keep their recorded addresses from Calico's /26 blocks, outside their nodes'
podCIDRs (``web-2`` even borrows one from the worker's block: a /32 route); the network
is Calico's (``cni: calico``, inferred from the dump): ``cali…`` veths with proxy ARP,
169.254.1.1 as every pod's gateway, ``<block> via <nodeIP>`` between nodes. For each
flow both backends must agree on reachability, the set of endpoints reached and the
source address each endpoint sees; every kernel outcome must be one the emulator can
produce. The cluster's namespaces are this test's own and are always removed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app import emulation
from control.session import Session
from dataplane.backends import EmulatorBackend, RealBackend, emulator_backend, real_backend
from dataplane.linux import inspect
from dataplane.linux.netns import is_root
from netmodel.manifests import load, load_text
from netmodel.objects import Pod, Service
from netmodel.topology import calico_veth_name

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

DUMP = Path(__file__).resolve().parents[1] / "data" / "kubectl-dumps" / "calico-kubeadm-list.yaml"
VIP = "10.96.120.15"  # default/web: web-0, web-2 on calico-cp, web-1 on calico-worker
WEB = {"default/web-0", "default/web-1", "default/web-2"}
N = 48  # every endpoint (three here, four in the hand-written cluster) reached, p > 1 - 1e-5


@pytest.fixture(scope="module", params=["nft", "legacy"])
def pair(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[EmulatorBackend, EmulatorBackend, RealBackend]]:
    """The dump on the emulator (twice: one kept pristine for ``possible``) and on the
    kernel, kube-proxy's rules on iptables-nft and on iptables-legacy."""
    session = Session.ephemeral(load([DUMP]))
    assert session.cluster.spec.cni == "calico"
    view = emulation.view(session)
    with (
        emulator_backend(view, seed=3) as emu,
        emulator_backend(view, seed=3) as pristine,
        real_backend(view, iptables_backend=request.param) as real,
    ):
        yield emu, pristine, real


def test_the_kernel_holds_calicos_layout(
    pair: tuple[EmulatorBackend, EmulatorBackend, RealBackend],
) -> None:
    real = pair[2]
    cluster = real.cluster
    assert cluster.cni == "netlink"
    cp = inspect.dump(cluster.node_netns("calico-cp"))
    worker = inspect.dump(cluster.node_netns("calico-worker"))
    veth = calico_veth_name("default/web-0")
    assert f"192.168.171.66/32 dev {veth} scope link" in cp.routes
    assert "192.168.35.128/26 via 10.0.0.11 dev eth0" in cp.routes
    assert "192.168.171.64/26 via 10.0.0.10 dev eth0" in worker.routes
    assert "192.168.35.140/32 via 10.0.0.10 dev eth0" in worker.routes  # borrowed address
    assert not any("cni0" in x for x in cp.links)
    pod = inspect.dump(cluster.pod_netns("default/web-0"))
    assert "default via 169.254.1.1 dev eth0" in pod.routes
    assert "eth0 192.168.171.66/32" in pod.addresses
    from dataplane.linux.nsenter import read_sysctl

    assert read_sysctl(cluster.node_netns("calico-cp"), f"net.ipv4.conf.{veth}.proxy_arp") == "1"


@pytest.mark.parametrize(
    "src", ["pod/default/client", "pod/default/web-0", "node/calico-cp", "node/calico-worker"]
)
def test_cluster_ip_reaches_the_same_endpoints_with_the_same_sources(
    pair: tuple[EmulatorBackend, EmulatorBackend, RealBackend], src: str
) -> None:
    emu, pristine, real = pair
    possible = {o.key() for _, o in pristine.possible(src, VIP, 80, "tcp")}
    e = emu.connect(src, VIP, 80, "tcp", N)
    r = real.connect(src, VIP, 80, "tcp", N, sports=[o.sport or 0 for o in e])
    for o in e + r:
        assert o.key() in possible, f"{src} -> {VIP}:80: {o} not among {possible}"
    assert {o.pod for o in e} == {o.pod for o in r} == WEB
    assert {(o.pod, o.source_seen) for o in e} == {(o.pod, o.source_seen) for o in r}


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("pod/default/client", "192.168.171.66"),  # across nodes, the /26 route
        ("pod/default/client", "192.168.35.140"),  # the borrowed address: a /32 route
        ("pod/default/client", "192.168.35.130"),  # same node: through the host, proxy ARP
        ("node/calico-worker", "192.168.171.66"),
        ("pod/default/web-0", "192.168.35.130"),
    ],
)
def test_pod_addresses_answer_directly_on_both(
    pair: tuple[EmulatorBackend, EmulatorBackend, RealBackend], src: str, dst: str
) -> None:
    emu, _, real = pair
    e = emu.connect(src, dst, 8080, "tcp", 2)
    r = real.connect(src, dst, 8080, "tcp", 2, sports=[o.sport or 0 for o in e])
    assert [o.key() for o in e] == [o.key() for o in r]
    assert all(o.verdict == "delivered" and not o.masquerade for o in e)


def test_an_unused_block_address_is_unreachable_on_both(
    pair: tuple[EmulatorBackend, EmulatorBackend, RealBackend],
) -> None:
    emu, _, real = pair
    e = emu.connect("pod/default/client", "192.168.171.70", 8080, "tcp", 1)
    r = real.connect("pod/default/client", "192.168.171.70", 8080, "tcp", 1)
    assert e[0].verdict != "delivered" and r[0].verdict != "delivered"


SCENARIO = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: calico}
spec:
  nodes: 2
  cni: calico
  calico:
    ipPools: [10.244.0.0/16]
    blockSize: 28
    blockAffinities:
    - {node: node-1, cidr: 10.244.0.0/28}
    - {node: node-2, cidr: 10.244.1.0/28}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: x, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeName: node-1
  containers: [{name: c, image: x}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]
"""


def test_a_calico_cluster_written_by_hand_agrees_on_both() -> None:
    """A Cluster document with ``cni: calico`` and its block affinities: new pods get
    addresses, the nodes route each other's /28 blocks, and a ClusterIP and a NodePort
    (from the other node: masqueraded) agree flow by flow on both backends."""
    session = Session.ephemeral(load_text(SCENARIO, source="calico"))
    view = emulation.view(session)
    routes = [r.describe() for r in view.network.namespaces["node/node-1"].routes]
    assert "10.244.1.0/28 via 172.18.0.3 dev eth0" in routes
    vip = next(
        s.spec.cluster_ip
        for s in session.store.list("Service")
        if isinstance(s, Service) and s.name == "web"
    )
    assert vip is not None
    web = {
        p.key
        for p in session.store.list("Pod")
        if isinstance(p, Pod) and p.namespace == "default" and p.name != "client"
    }
    with (
        emulator_backend(view, seed=5) as emu,
        emulator_backend(view, seed=5) as pristine,
        real_backend(view) as real,
    ):
        for src, dst, port in [
            ("pod/default/client", vip, 80),
            ("node/node-2", "172.18.0.2", 30080),
        ]:
            possible = {o.key() for _, o in pristine.possible(src, dst, port, "tcp")}
            e = emu.connect(src, dst, port, "tcp", N)
            r = real.connect(src, dst, port, "tcp", N, sports=[o.sport or 0 for o in e])
            for o in e + r:
                assert o.key() in possible, f"{src} -> {dst}:{port}: {o} not in {possible}"
            assert {o.pod for o in e} == {o.pod for o in r} == web
            assert {(o.pod, o.source_seen) for o in e} == {(o.pod, o.source_seen) for o in r}


def test_up_refuses_the_bridge_plugin_for_a_calico_cluster(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from app.cli.main import cli

    state = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(state), "apply", "-f", str(DUMP)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["--state", str(state), "up", "--real", "--cni", "bridge-plugin"])
    assert r.exit_code == 1
    assert "--cni: the CNI bridge plugin is flannel's" in r.output
    assert not (state / "real.json").exists()
