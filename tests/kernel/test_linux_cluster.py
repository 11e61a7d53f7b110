"""A 2-node cluster with 2 pods per node realised on real namespaces through the real
CNI plugins, under both overlays: devices match the model, and traffic (ICMP, TCP, UDP)
reaches the right pod with the right source address."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Address

import pytest

from dataplane.linux import inspect, nsenter
from dataplane.linux.netns import is_root
from dataplane.linux.realize import RealCluster
from dataplane.linux.testing import Sample, realized, sample_network
from dataplane.linux.traffic import ConnectFailed

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

EXT = "203.0.113.5"


@pytest.fixture(scope="module", params=["vxlan", "host-gw"])
def cluster(request: pytest.FixtureRequest) -> Iterator[tuple[Sample, RealCluster]]:
    sample = sample_network(2, 2, overlay=request.param, external_clients=[EXT])
    with realized(sample.network, cni="bridge-plugin") as c:
        c.serve({p.key: [(8080, "tcp"), (5353, "udp")] for p in sample.pods})
        yield sample, c


def test_pods_get_the_models_address_and_mac_from_the_real_plugins(
    cluster: tuple[Sample, RealCluster],
) -> None:
    sample, c = cluster
    for p in sample.pods:
        model = sample.network.namespaces[f"pod/{p.key}"].interface("eth0")
        got = c.pods[p.key]
        assert got.ip == p.ip and got.prefixlen == 24
        assert got.mac == model.mac
        assert got.gateway == IPv4Address(f"10.244.{p.node[1:]}.1")
        pod_dump = inspect.dump(c.pod_netns(p.key))
        assert f"eth0 {p.ip}/24" in pod_dump.addresses
        assert pod_dump.link("eth0") is not None and model.mac in str(pod_dump.link("eth0"))
        assert any(r.startswith(f"default via {got.gateway} dev eth0") for r in pod_dump.routes)
        node_dump = inspect.dump(c.node_netns(p.node))
        port = node_dump.link(got.host_veth)
        assert port is not None and " cni0 up " in port and port.endswith("hairpin")


def test_nodes_carry_the_models_overlay(cluster: tuple[Sample, RealCluster]) -> None:
    sample, c = cluster
    for ns in (sample.network.namespaces[f"node/{n.name}"] for n in sample.nodes):
        d = inspect.dump(c.node_netns(str(ns.node)))
        cni0 = ns.interface("cni0")
        assert d.link("cni0") == f"cni0 bridge {cni0.mac} {cni0.mtu} - up"
        for route in ns.routes:
            assert route.describe() in d.routes
        if sample.network.overlay == "vxlan":
            vx = ns.interface("flannel.1")
            assert d.link("flannel.1") == (
                f"flannel.1 vxlan {vx.mac} 1450 - up id=1 local={vx.vxlan.local if vx.vxlan else ''}"
                " port=8472 learning=0 dev=eth0"
            )
            assert d.neighbours == tuple(sorted(f"{n.ip} {n.mac} {n.dev}" for n in ns.neighbors))
            assert d.fdb == tuple(sorted(f"{f.mac} {f.dev} {f.dst}" for f in ns.fdb))
        else:
            assert d.link("flannel.1") is None and not d.fdb
        for key, value in ns.sysctls:
            assert nsenter.read_sysctl(c.node_netns(str(ns.node)), key) == value


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("default/p0-0", "default/p0-1"),
        ("default/p0-0", "default/p1-1"),
        ("default/p1-0", "default/p0-0"),
    ],
    ids=["same-node", "cross-node", "cross-node-back"],
)
def test_pod_to_pod(cluster: tuple[Sample, RealCluster], src: str, dst: str) -> None:
    sample, c = cluster
    dst_ip = sample.pod(dst).ip
    assert c.ping(f"pod/{src}", dst_ip, 2).ok
    tcp = c.connect(f"pod/{src}", dst_ip, 8080)
    assert tcp.pod == dst
    assert tcp.seen_src == (sample.pod(src).ip, tcp.local[1])
    udp = c.connect(f"pod/{src}", dst_ip, 5353, "udp", sport=40053)
    assert udp.pod == dst and udp.seen_src == (sample.pod(src).ip, 40053)


def test_node_to_pod(cluster: tuple[Sample, RealCluster]) -> None:
    sample, c = cluster
    local, remote = sample.pod("default/p0-1"), sample.pod("default/p1-0")
    r = c.connect("node/n0", local.ip, 8080)
    assert r.pod == local.key and r.seen_src[0] == IPv4Address("10.244.0.1")  # cni0
    r = c.connect("node/n0", remote.ip, 8080)
    # the node's source for the other podCIDR: flannel.1's address, or eth0 under host-gw
    expected = "10.244.0.0" if sample.network.overlay == "vxlan" else "172.18.0.2"
    assert r.pod == remote.key and r.seen_src[0] == IPv4Address(expected)


def test_external_client_reaches_nodes_but_not_pods(cluster: tuple[Sample, RealCluster]) -> None:
    sample, c = cluster
    assert c.ping(f"ext/{EXT}", "172.18.0.3", 1).ok
    # pod CIDRs are not routed by the underlay: only Services (NodePorts) expose pods
    assert not c.ping(f"ext/{EXT}", sample.pod("default/p1-0").ip, 1, timeout=0.3).ok


def test_a_closed_port_is_refused_not_answered(cluster: tuple[Sample, RealCluster]) -> None:
    sample, c = cluster
    with pytest.raises(ConnectFailed) as e:
        c.connect("pod/default/p0-0", sample.pod("default/p1-0").ip, 9999)
    assert e.value.reason == "refused"


def test_the_cluster_reloads_from_its_state_dir(cluster: tuple[Sample, RealCluster]) -> None:
    _, c = cluster
    again = RealCluster.load(c.cluster_id)
    assert again == c


def test_netlink_mode_builds_the_model_exactly_and_carries_traffic() -> None:
    sample = sample_network(2, 2, overlay="vxlan")
    with realized(sample.network, cni="netlink") as c:
        for p in sample.pods:
            model = sample.network.namespaces[f"pod/{p.key}"].interface("eth0")
            assert model.peer is not None and c.pods[p.key].host_veth == model.peer[1]
            node = sample.network.namespaces[f"node/{p.node}"]
            port = node.interface(model.peer[1])
            assert inspect.dump(c.node_netns(p.node)).link(port.name) == (
                f"{port.name} veth {port.mac} {port.mtu} cni0 up peer hairpin"
            )
        c.serve({p.key: [(8080, "tcp")] for p in sample.pods})
        r = c.connect("pod/default/p0-1", sample.pod("default/p1-1").ip, 8080)
        assert r.pod == "default/p1-1" and r.seen_src[0] == sample.pod("default/p0-1").ip
