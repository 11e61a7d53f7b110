"""Derive the cluster's network (as :class:`~netmodel.network.ClusterNetwork`) from the
control plane's state: nodes with addresses and podCIDRs, pods with IPs.

The layout is what a kind-like cluster with flannel and the CNI ``bridge`` plugin has:

* ``router``: the underlay. Bridge ``br0`` carries the nodeNetwork's first address
  (the gateway); one veth port per node. External clients hang off the router on
  point-to-point veths (client ``eth0`` = ``IP/32``, default via 169.254.0.1 onlink).
* ``node/NAME``: ``eth0`` (node IP on nodeNetwork, default via the gateway), ``cni0``
  bridge (first address of the node's podCIDR), one ``veth…`` port per pod (hairpin
  on), and for the overlay either ``flannel.1`` (VXLAN VNI 1, UDP 8472, address
  ``podCIDR.network/32``, per peer: onlink route via the peer's ``podCIDR.network``,
  a permanent neighbour with the peer's VTEP MAC and an FDB entry to the peer's node IP)
  or, for host-gw, a route to each peer podCIDR via the peer's node IP.
  Sysctls: ``net.ipv4.ip_forward=1`` (route pod traffic), ``net.ipv4.conf.all.route_localnet=1``
  (kube-proxy's localhost NodePorts), ``net.bridge.bridge-nf-call-iptables=1`` (bridged
  pod-to-pod traffic crosses iptables, so hairpin Service traffic is NATed).
* ``pod/NS/NAME``: ``eth0`` (pod IP with the podCIDR's prefix, MTU 1450 under VXLAN),
  default via the cni0 address.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network, ip_address, ip_network
from typing import Literal

from netmodel.network import (
    DEFAULT_ROUTE,
    ClusterNetwork,
    FdbEntry,
    Interface,
    Neighbor,
    Netns,
    Route,
    VethPair,
    VxlanParams,
    stable_mac,
)

VXLAN_OVERHEAD = 50
ROUTER_LINK_IP = IPv4Address("169.254.0.1")
NODE_SYSCTLS = (
    ("net.ipv4.ip_forward", "1"),
    ("net.ipv4.conf.all.route_localnet", "1"),
    ("net.bridge.bridge-nf-call-iptables", "1"),
)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    ip: IPv4Address
    pod_cidr: IPv4Network | None


@dataclass(frozen=True, slots=True)
class PodInfo:
    key: str  # ns/name
    node: str
    ip: IPv4Address


def host_veth_name(pod_key: str) -> str:
    """The node-side veth of a pod: ``veth`` + 8 hex chars (15-char limit kept)."""
    return "veth" + hashlib.sha256(pod_key.encode()).hexdigest()[:8]


def vtep_mac(node: str) -> str:
    return stable_mac("vtep", node)


def node_ns(node: str) -> str:
    return f"node/{node}"


def pod_ns(pod_key: str) -> str:
    return f"pod/{pod_key}"


def ext_ns(ip: str) -> str:
    return f"ext/{ip}"


def _connected(itf: str, addr: IPv4Interface) -> Route:
    return Route(dst=addr.network, dev=itf, src=addr.ip, scope="link", proto="kernel")


def build(
    node_network: IPv4Network,
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    *,
    overlay: Literal["vxlan", "host-gw"] = "vxlan",
    external_clients: Sequence[str] = (),
) -> ClusterNetwork:
    """The whole network. Pure: the same inputs give the same value (MACs included)."""
    gateway = node_network.network_address + 1
    mtu = 1500 - VXLAN_OVERHEAD if overlay == "vxlan" else 1500
    namespaces: dict[str, Netns] = {}
    veths: list[VethPair] = []

    # ---- router (underlay)
    br_addr = IPv4Interface(f"{gateway}/{node_network.prefixlen}")
    router_itfs = [
        Interface("lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),)),
        Interface("br0", "bridge", stable_mac("router", "br0"), (br_addr,)),
    ]
    router_routes = [_connected("br0", br_addr)]
    for i, n in enumerate(nodes):
        port = f"u{i}"
        router_itfs.append(
            Interface(
                port,
                "veth",
                stable_mac("router", port),
                master="br0",
                peer=(node_ns(n.name), "eth0"),
            )
        )
        veths.append(VethPair(("router", port), (node_ns(n.name), "eth0")))
    for j, client in enumerate(external_clients):
        port = f"x{j}"
        cip = IPv4Address(client)
        router_itfs.append(
            Interface(
                port,
                "veth",
                stable_mac("router", port),
                (IPv4Interface(f"{ROUTER_LINK_IP}/32"),),
                peer=(ext_ns(client), "eth0"),
            )
        )
        router_routes.append(Route(dst=IPv4Network(f"{cip}/32"), dev=port, scope="link"))
        veths.append(VethPair(("router", port), (ext_ns(client), "eth0")))
        namespaces[ext_ns(client)] = Netns(
            name=ext_ns(client),
            role="external",
            interfaces=(
                Interface("lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),)),
                Interface(
                    "eth0",
                    "veth",
                    stable_mac("ext", client),
                    (IPv4Interface(f"{cip}/32"),),
                    peer=("router", port),
                ),
            ),
            routes=(
                Route(dst=IPv4Network(f"{ROUTER_LINK_IP}/32"), dev="eth0", scope="link"),
                Route(dst=DEFAULT_ROUTE, dev="eth0", via=ROUTER_LINK_IP, onlink=True),
            ),
        )
    namespaces["router"] = Netns(
        name="router",
        role="router",
        interfaces=tuple(router_itfs),
        routes=tuple(router_routes),
        sysctls=(("net.ipv4.ip_forward", "1"),),
    )

    # ---- nodes
    pods_by_node: dict[str, list[PodInfo]] = {}
    for p in pods:
        pods_by_node.setdefault(p.node, []).append(p)
    for idx, n in enumerate(nodes):
        ns = node_ns(n.name)
        eth0 = IPv4Interface(f"{n.ip}/{node_network.prefixlen}")
        itfs = [
            Interface("lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),)),
            Interface("eth0", "veth", stable_mac(ns, "eth0"), (eth0,), peer=("router", f"u{idx}")),
        ]
        routes = [_connected("eth0", eth0), Route(dst=DEFAULT_ROUTE, dev="eth0", via=gateway)]
        neighbors: list[Neighbor] = []
        fdb: list[FdbEntry] = []
        if n.pod_cidr is not None:
            gw = IPv4Interface(f"{n.pod_cidr.network_address + 1}/{n.pod_cidr.prefixlen}")
            itfs.append(Interface("cni0", "bridge", stable_mac(ns, "cni0"), (gw,), mtu=mtu))
            routes.append(_connected("cni0", gw))
            for p in sorted(pods_by_node.get(n.name, []), key=lambda p: p.key):
                hv = host_veth_name(p.key)
                itfs.append(
                    Interface(
                        hv,
                        "veth",
                        stable_mac(ns, hv),
                        mtu=mtu,
                        master="cni0",
                        peer=(pod_ns(p.key), "eth0"),
                        hairpin=True,
                    )
                )
                veths.append(VethPair((ns, hv), (pod_ns(p.key), "eth0")))
                paddr = IPv4Interface(f"{p.ip}/{n.pod_cidr.prefixlen}")
                namespaces[pod_ns(p.key)] = Netns(
                    name=pod_ns(p.key),
                    role="pod",
                    node=n.name,
                    pod=p.key,
                    interfaces=(
                        Interface(
                            "lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),)
                        ),
                        Interface(
                            "eth0",
                            "veth",
                            stable_mac("pod", p.key),
                            (paddr,),
                            mtu=mtu,
                            peer=(ns, hv),
                        ),
                    ),
                    routes=(
                        _connected("eth0", paddr),
                        Route(dst=DEFAULT_ROUTE, dev="eth0", via=gw.ip),
                    ),
                )
            if overlay == "vxlan":
                vx_addr = IPv4Interface(f"{n.pod_cidr.network_address}/32")
                itfs.append(
                    Interface(
                        "flannel.1",
                        "vxlan",
                        vtep_mac(n.name),
                        (vx_addr,),
                        mtu=mtu,
                        vxlan=VxlanParams(vni=1, local=n.ip, dev="eth0"),
                    )
                )
        for peer in nodes:
            if peer.name == n.name or peer.pod_cidr is None:
                continue
            if overlay == "vxlan" and n.pod_cidr is not None:
                peer_gw = peer.pod_cidr.network_address
                routes.append(Route(dst=peer.pod_cidr, dev="flannel.1", via=peer_gw, onlink=True))
                neighbors.append(Neighbor(ip=peer_gw, mac=vtep_mac(peer.name), dev="flannel.1"))
                fdb.append(FdbEntry(mac=vtep_mac(peer.name), dev="flannel.1", dst=peer.ip))
            else:
                routes.append(Route(dst=peer.pod_cidr, dev="eth0", via=peer.ip))
        namespaces[ns] = Netns(
            name=ns,
            role="node",
            node=n.name,
            interfaces=tuple(itfs),
            routes=tuple(routes),
            neighbors=tuple(neighbors),
            fdb=tuple(fdb),
            sysctls=NODE_SYSCTLS,
        )
    return ClusterNetwork(
        namespaces=namespaces, veths=tuple(veths), overlay=overlay, node_network=node_network
    )


def node_info(name: str, ip: str, pod_cidr: str | None) -> NodeInfo:
    net = ip_network(pod_cidr) if pod_cidr else None
    assert net is None or isinstance(net, IPv4Network)
    addr = ip_address(ip)
    assert isinstance(addr, IPv4Address)
    return NodeInfo(name=name, ip=addr, pod_cidr=net)
