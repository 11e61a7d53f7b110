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


def calico_pair():  # type: ignore[no-untyped-def]
    """Calico: podCIDRs 10.244.x.0/24, pods at block addresses outside them; c on node-1
    borrows an address from node-2's block."""
    nodes = [
        node_info("node-1", "172.18.0.2", "10.244.0.0/24"),
        node_info("node-2", "172.18.0.3", "10.244.1.0/24"),
    ]
    pods = [
        PodInfo("default/web-0", "node-1", IPv4Address("192.168.171.66")),
        PodInfo("default/a", "node-2", IPv4Address("192.168.35.130")),
        PodInfo("default/b", "node-2", IPv4Address("192.168.35.131")),
        PodInfo("default/c", "node-1", IPv4Address("192.168.35.140")),
    ]
    return nodes, pods


def test_calico_layout_has_cali_veths_proxy_arp_and_block_routes() -> None:
    from netmodel.topology import CALICO_HOST_MAC, calico_veth_name

    nodes, pods = calico_pair()
    net = build(IPv4Network("172.18.0.0/16"), nodes, pods, cni="calico")
    assert net.cni == "calico" and net.overlay == "host-gw"
    # Calico's name: cali + the first 11 hex digits of sha1("default.web-0")
    veth = calico_veth_name("default/web-0")
    assert veth == "cali0d7763386da"
    n1 = net.namespaces["node/node-1"]
    assert "cni0" not in [i.name for i in n1.interfaces]
    itf = n1.interface(veth)
    assert itf.mac == CALICO_HOST_MAC and not itf.addresses and itf.master is None
    assert itf.peer == ("pod/default/web-0", "eth0")
    routes = [r.describe() for r in n1.routes]
    assert f"192.168.171.66/32 dev {veth} scope link" in routes
    assert "192.168.35.128/26 via 172.18.0.3 dev eth0" in routes
    assert not any("10.244." in r for r in routes)  # podCIDRs are not Calico's
    assert (f"net.ipv4.conf.{veth}.proxy_arp", "1") in n1.sysctls
    assert (f"net.ipv4.neigh.{veth}.proxy_delay", "0") in n1.sysctls
    assert ("net.bridge.bridge-nf-call-iptables", "1") not in n1.sysctls
    n2 = [r.describe() for r in net.namespaces["node/node-2"].routes]
    assert "192.168.171.64/26 via 172.18.0.2 dev eth0" in n2
    assert "192.168.35.140/32 via 172.18.0.2 dev eth0" in n2  # borrowed: a /32
    pod = net.namespaces["pod/default/web-0"]
    assert [str(a) for a in pod.interface("eth0").addresses] == ["192.168.171.66/32"]
    assert [r.describe() for r in pod.routes] == [
        "169.254.1.1/32 dev eth0 scope link",
        "default via 169.254.1.1 dev eth0",
    ]


def test_calico_vxlan_pools_go_through_vxlan_calico() -> None:
    """A VXLAN pool's blocks (and borrowed addresses) are routed through vxlan.calico via
    the peer's tunnel address (the first free address of its block), with the peer
    VTEP's neighbour and FDB entry; a pool without VXLAN keeps BGP routes."""
    from netmodel.topology import calico_blocks, calico_vtep_mac

    nodes, pods = calico_pair()
    blocks = calico_blocks(nodes, pods, vxlan_pools=[IPv4Network("192.168.0.0/16")])
    net = build(IPv4Network("172.18.0.0/16"), nodes, pods, cni="calico", blocks=blocks)
    n1 = net.namespaces["node/node-1"]
    vx = n1.interface("vxlan.calico")
    assert vx.vxlan is not None and (vx.vxlan.vni, vx.vxlan.port) == (4096, 4789)
    assert not vx.vxlan.learning and str(vx.vxlan.local) == "172.18.0.2"
    assert [str(a) for a in vx.addresses] == ["192.168.171.64/32"] and vx.mtu == 1450
    routes = [r.describe() for r in n1.routes]
    assert "192.168.35.128/26 via 192.168.35.128 dev vxlan.calico onlink" in routes
    [nb] = n1.neighbors
    assert (str(nb.ip), nb.mac, nb.dev) == ("192.168.35.128", calico_vtep_mac("node-2"), "vxlan.calico")
    [fdb] = n1.fdb
    assert (fdb.mac, str(fdb.dst)) == (calico_vtep_mac("node-2"), "172.18.0.3")
    n2 = [r.describe() for r in net.namespaces["node/node-2"].routes]
    assert "192.168.35.140/32 via 192.168.171.64 dev vxlan.calico onlink" in n2  # borrowed
    assert net.namespaces["pod/default/web-0"].interface("eth0").mtu == 1450
    assert net.owner_of(IPv4Address("192.168.171.64")) is n1  # the tunnel address
    # the first free address: node-2's block base is free, a pod holding it moves it on
    taken = [*pods, PodInfo("default/d", "node-2", IPv4Address("192.168.35.128"))]
    again = build(IPv4Network("172.18.0.0/16"), nodes, taken, cni="calico",
                  blocks=calico_blocks(nodes, taken, vxlan_pools=[IPv4Network("192.168.0.0/16")]))
    vx2 = again.namespaces["node/node-2"].interface("vxlan.calico")
    assert [str(a) for a in vx2.addresses] == ["192.168.35.129/32"]
    # a pool without VXLAN: no device, BGP routes
    plain = build(IPv4Network("172.18.0.0/16"), nodes, pods, cni="calico")
    assert "vxlan.calico" not in [i.name for i in plain.namespaces["node/node-1"].interfaces]


def test_calico_blocks_follow_block_affinities_when_given() -> None:
    from netmodel.topology import calico_blocks

    nodes, pods = calico_pair()
    inferred = calico_blocks(nodes, pods)
    assert inferred.blocks == {
        "node-1": (IPv4Network("192.168.171.64/26"),),
        "node-2": (IPv4Network("192.168.35.128/26"),),
    }
    assert inferred.borrowed == {"node-1": (IPv4Address("192.168.35.140"),)}
    given = calico_blocks(
        nodes,
        pods,
        affinities=[
            ("node-1", IPv4Network("192.168.171.64/26")),
            ("node-1", IPv4Network("192.168.35.128/28")),  # as BlockAffinity objects say
            ("node-2", IPv4Network("192.168.35.192/26")),
        ],
    )
    assert given.blocks == {
        "node-1": (IPv4Network("192.168.35.128/28"), IPv4Network("192.168.171.64/26")),
        "node-2": (IPv4Network("192.168.35.192/26"),),
    }
    # node-2's pods lie in no block of node-2's: borrowed, routed as /32s
    assert given.borrowed == {
        "node-2": (IPv4Address("192.168.35.130"), IPv4Address("192.168.35.131"))
    }
    net = build(IPv4Network("172.18.0.0/16"), nodes, pods, cni="calico", blocks=given)
    n1 = [r.describe() for r in net.namespaces["node/node-1"].routes]
    assert "192.168.35.192/26 via 172.18.0.3 dev eth0" in n1
    assert "192.168.35.130/32 via 172.18.0.3 dev eth0" in n1
    assert "192.168.35.128/26 via 172.18.0.3 dev eth0" not in n1
