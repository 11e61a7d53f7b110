"""Calico's pod network in the emulator: the pod's gateway 169.254.1.1 is nobody's
address and is answered by proxy ARP on the host's ``cali…`` veth; every packet of a
pod, even to a pod of the same node, is routed by the node (TTL decremented); other
nodes' blocks are reached by their routes; without ``proxy_arp`` nothing leaves the pod."""

from __future__ import annotations

from ipaddress import IPv4Address, ip_network

import pytest

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


NAT_SCENARIO = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: calico-nat}}
spec:
  nodes: 2
  cni: calico
  proxyMode: {mode}
  calico: {{ipPools: [{{cidr: 10.244.0.0/16, natOutgoing: {nat}}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  nodeName: node-1
  containers: [{{name: c, image: x}}]
"""


@pytest.mark.parametrize("mode", ["iptables", "ipvs", "nftables"])
def test_nat_outgoing_masquerades_a_pod_leaving_the_pools_in_every_proxy_mode(mode: str) -> None:
    """Felix's cali-nat-outgoing rule, evaluated from the very text the kernel loads: the
    other node sees node-1's address, and the trace names the rule (kube-proxy's IPVS
    and nftables modes too: the rules join its glue or sit in iptables beside nft)."""
    from app import emulation
    from control.session import Session
    from netmodel.manifests import load_text

    for nat in (True, False):
        text = NAT_SCENARIO.format(mode=mode, nat="true" if nat else "false")
        session = Session.ephemeral(load_text(text, source="nat"))
        emu = emulation.emulator(session)
        t = emu.trace("pod/default/client", "172.18.0.3", "icmp")
        assert t.verdict == "delivered"
        seen = "172.18.0.2" if nat else str(session.store.get("Pod", "default/client").status.pod_ip)  # type: ignore[attr-defined]
        assert t.source_seen == seen
        rules = [h.rule or "" for h in t.hops_of("rule")]
        assert any("cali40masq-ipam-pools" in r and "MASQUERADE" in r for r in rules) is nat


def test_a_vxlan_pool_encapsulates_between_nodes_with_calicos_vni_and_port() -> None:
    from netmodel.topology import calico_blocks

    net0 = network()
    nodes = [
        node_info("n1", "172.18.0.2", "10.244.0.0/24"),
        node_info("n2", "172.18.0.3", "10.244.1.0/24"),
    ]
    pods = [
        PodInfo("default/a", "n1", IPv4Address(A)),
        PodInfo("default/b", "n1", IPv4Address(B)),
        PodInfo("default/c", "n2", IPv4Address(C)),
    ]
    blocks = calico_blocks(nodes, pods, vxlan_pools=[ip_network("192.168.0.0/16")])  # type: ignore[list-item]
    net = build(ip_network("172.18.0.0/16"), nodes, pods, cni="calico", blocks=blocks)  # type: ignore[arg-type]
    assert net != net0
    c = EmulatedCluster(net, listeners=LISTENERS)
    t = c.trace("pod/default/a", C, "tcp", 8080)
    assert t.verdict == "delivered" and t.source_seen == A
    vx = [h.vxlan or "" for h in t.hops if h.vxlan]
    assert vx[0].startswith("encap VNI 4096: 172.18.0.2:") and "> 172.18.0.3:4789" in vx[0]
    assert vx[1].startswith("decap VNI 4096 from 172.18.0.2:")
    # the node's own traffic leaves from its tunnel address (the route's device's)
    t = c.trace("node/n1", C, "tcp", 8080)
    assert t.verdict == "delivered" and t.source_seen == "192.168.10.64"
