"""The cluster network both backends realise."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, ip_address, ip_network

from netmodel.network import DEFAULT_ROUTE
from netmodel.topology import PodInfo, build, node_info, vtep_mac


def two_nodes(overlay: str = "vxlan"):  # type: ignore[no-untyped-def]
    nodes = [
        node_info("node-1", "172.18.0.2", "10.244.0.0/24"),
        node_info("node-2", "172.18.0.3", "10.244.1.0/24"),
    ]
    pods = [
        PodInfo("default/a", "node-1", IPv4Address("10.244.0.2")),
        PodInfo("default/b", "node-2", IPv4Address("10.244.1.2")),
    ]
    return build(
        IPv4Network("172.18.0.0/16"),
        nodes,
        pods,
        overlay=overlay,  # type: ignore[arg-type]
        external_clients=["203.0.113.5"],
    )


def test_vxlan_node_has_flannel_routes_neighbours_and_fdb() -> None:
    net = two_nodes("vxlan")
    n1 = net.namespaces["node/node-1"]
    vx = n1.interface("flannel.1")
    assert vx.vxlan is not None and vx.vxlan.vni == 1 and vx.vxlan.port == 8472
    assert vx.mac == vtep_mac("node-1") and vx.mtu == 1450
    route = next(r for r in n1.routes if r.dst == ip_network("10.244.1.0/24"))
    assert (route.dev, route.via, route.onlink) == ("flannel.1", ip_address("10.244.1.0"), True)
    assert n1.neighbors[0].mac == vtep_mac("node-2")
    assert n1.fdb[0].dst == ip_address("172.18.0.3")


def test_host_gw_routes_via_peer_node() -> None:
    n1 = two_nodes("host-gw").namespaces["node/node-1"]
    route = next(r for r in n1.routes if r.dst == ip_network("10.244.1.0/24"))
    assert (route.dev, route.via) == ("eth0", ip_address("172.18.0.3"))
    assert not any(i.kind == "vxlan" for i in n1.interfaces)


def test_pods_hang_off_cni0_with_default_via_gateway() -> None:
    net = two_nodes()
    pod = net.namespaces["pod/default/a"]
    assert pod.node == "node-1"
    default = next(r for r in pod.routes if r.dst == DEFAULT_ROUTE)
    assert default.via == ip_address("10.244.0.1")
    host_side = pod.interface("eth0").peer
    assert host_side is not None
    port = net.namespaces[host_side[0]].interface(host_side[1])
    assert port.master == "cni0" and port.hairpin
    assert len(port.name) <= 15


def test_veth_peers_are_symmetric_and_owner_lookup() -> None:
    net = two_nodes()
    for pair in net.veths:
        a = net.namespaces[pair.a[0]].interface(pair.a[1])
        b = net.namespaces[pair.b[0]].interface(pair.b[1])
        assert a.peer == pair.b and b.peer == pair.a
    owner = net.owner_of(ip_address("203.0.113.5"))
    assert owner is not None and owner.role == "external"


def test_deterministic() -> None:
    assert two_nodes() == two_nodes()
