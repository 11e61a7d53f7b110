"""Calico's pod network in the emulator: the pod's gateway 169.254.1.1 is nobody's
address and is answered by proxy ARP on the host's ``cali…`` veth; every packet of a
pod, even to a pod of the same node, is routed by the node (TTL decremented); other
nodes' blocks are reached by their routes; without ``proxy_arp`` nothing leaves the pod."""

from __future__ import annotations

from ipaddress import IPv4Address, ip_network

from dataplane.emulator import EmulatedCluster
from netmodel.network import ClusterNetwork
from netmodel.topology import PodInfo, build, calico_veth_name, node_info

A, B, C = "192.168.10.65", "192.168.10.66", "192.168.77.130"
LISTENERS = {f"pod/default/{p}": {("tcp", 8080)} for p in "abc"}


def network() -> ClusterNetwork:
    nodes = [
        node_info("n1", "172.18.0.2", "10.244.0.0/24"),
        node_info("n2", "172.18.0.3", "10.244.1.0/24"),
    ]
    pods = [
        PodInfo("default/a", "n1", IPv4Address(A)),
        PodInfo("default/b", "n1", IPv4Address(B)),
        PodInfo("default/c", "n2", IPv4Address(C)),
    ]
    return build(ip_network("172.18.0.0/16"), nodes, pods, cni="calico")  # type: ignore[arg-type]


def test_same_node_pods_are_routed_through_the_host_after_proxy_arp() -> None:
    c = EmulatedCluster(network(), listeners=LISTENERS)
    t = c.trace("pod/default/a", B, "tcp", 8080)
    assert t.verdict == "delivered" and t.delivered_to is not None
    assert t.delivered_to.pod == "default/b" and t.source_seen == A and not t.masquerade
    arp = [h.arp for h in t.hops_of("arp") if h.arp]
    assert "who-has 169.254.1.1 tell 192.168.10.65" in arp
    assert "169.254.1.1 is-at ee:ee:ee:ee:ee:ee (proxy ARP)" in arp
    (fwd,) = t.hops_of("forward")
    assert fwd.dev_in == calico_veth_name("default/a")
    assert fwd.dev_out == calico_veth_name("default/b")
    assert not t.hops_of("bridge")
    assert t.reply is not None and t.reply.verdict == "delivered"


def test_other_nodes_blocks_are_routed_by_their_node_ip() -> None:
    c = EmulatedCluster(network(), listeners=LISTENERS)
    t = c.trace("pod/default/a", C, "tcp", 8080)
    assert t.verdict == "delivered" and t.delivered_to is not None
    assert t.delivered_to.node == "n2" and t.source_seen == A
    routes = [h.route or "" for h in t.hops_of("route")]
    assert any("(route: 192.168.77.128/26 via 172.18.0.3 dev eth0)" in r for r in routes)
    back = c.trace("node/n2", A, "tcp", 8080)
    assert back.verdict == "delivered" and back.source_seen == "172.18.0.3"


def test_without_proxy_arp_the_pod_cannot_reach_its_gateway() -> None:
    net = network()
    n1 = net.namespaces["node/n1"]
    stripped = n1.with_(sysctls=tuple(kv for kv in n1.sysctls if "proxy_arp" not in kv[0]))
    net = ClusterNetwork(
        namespaces={**net.namespaces, "node/n1": stripped},
        veths=net.veths,
        overlay=net.overlay,
        node_network=net.node_network,
        cni=net.cni,
    )
    t = EmulatedCluster(net, listeners=LISTENERS).trace("pod/default/a", B, "tcp", 8080)
    assert t.verdict == "unreachable"
    assert "no ARP reply for 169.254.1.1 on eth0" in t.reason
