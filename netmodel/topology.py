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

With ``cni="calico"`` the pod network is Calico's instead (its dataplane as Calico's docs
describe it, "Calico networking" and the FAQ on 169.254.1.1 and ``ee:ee:ee:ee:ee:ee``):

* no bridge: each pod's host-side veth is ``cali`` + the first 11 hex digits of the
  SHA-1 of ``NAMESPACE.NAME`` (:func:`calico_veth_name`, the name Calico's CNI plugin
  gives it, so names match a real node's ``ip link``), MAC ``ee:ee:ee:ee:ee:ee``, no
  address, with ``net.ipv4.conf.caliX.proxy_arp=1`` and
  ``net.ipv4.neigh.caliX.proxy_delay=0``; the node routes ``<podIP> dev caliX scope
  link``;
* the pod's ``eth0`` holds ``<podIP>/32`` with ``169.254.1.1 dev eth0 scope link`` and
  ``default via 169.254.1.1 dev eth0``: nobody holds 169.254.1.1, the host veth answers
  the pod's ARP for it by proxy ARP (the node routes it elsewhere), so every packet of
  the pod goes to the node and is routed there;
* between nodes, Calico's BGP mode without encapsulation (as BIRD programs it): each
  node routes every other node's IPAM blocks ``<block> via <nodeIP> dev eth0``, and a
  pod address *borrowed* from a block affine to another node as ``<podIP>/32 via
  <nodeIP>`` (:func:`calico_blocks`). The blackhole route Calico adds for a node's own
  blocks is not modelled (an unused address of a local block goes out by the default
  route and is dropped at the underlay router instead);
* the blocks of a pool with ``vxlanMode: Always`` go through Calico's VXLAN device
  instead: each node's ``vxlan.calico`` (VNI 4096, UDP 4789, ``nolearning``, MTU 1450 as
  the pods' veths) holds its tunnel address (the first address of its first such block
  no pod holds, as Calico's IPAM gives it), and routes ``<block> via <peer tunnel
  address> dev vxlan.calico onlink``, with a permanent neighbour entry for that address
  (the peer's VTEP MAC, :func:`calico_vtep_mac`) and an FDB entry sending that MAC to the
  peer's node address, as Felix programs them. flannel's VXLAN device model serves both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network, ip_address, ip_network
from typing import Literal

from netmodel.cluster import ClusterSpec
from netmodel.ip import IPAddress
from netmodel.lazy import LazyMapping
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


def calico_veth_name(pod_key: str) -> str:
    """The host-side veth Calico's CNI plugin creates for pod ``NS/NAME``: ``cali`` + the
    first 11 hex digits of the SHA-1 of ``NS.NAME`` (the workload's id; a real node's
    ``ip link`` shows the same name, e.g. microk8s' ``dump-workload-endpoints.sh`` lists
    them that way)."""
    ns, _, name = pod_key.partition("/")
    return "cali" + hashlib.sha1(f"{ns}.{name}".encode()).hexdigest()[:11]


#: the MAC Calico gives every host-side veth (the pod only ever talks to the host)
CALICO_HOST_MAC = "ee:ee:ee:ee:ee:ee"
#: the pod's gateway under Calico: an address nobody holds, answered by proxy ARP
CALICO_GATEWAY = IPv4Address("169.254.1.1")
CALICO_NODE_SYSCTLS = (
    ("net.ipv4.ip_forward", "1"),
    ("net.ipv4.conf.all.route_localnet", "1"),
)


@dataclass(frozen=True, slots=True)
class CalicoBlocks:
    """Where Calico's pod addresses are routed: ``blocks`` node -> its affine blocks;
    ``borrowed`` node -> the addresses of its pods that lie in no block of its own."""

    blocks: dict[str, tuple[IPv4Network, ...]]
    borrowed: dict[str, tuple[IPv4Address, ...]]
    #: the pools whose blocks travel through ``vxlan.calico`` (``vxlanMode: Always``)
    vxlan_pools: tuple[IPv4Network, ...] = ()

    def vxlan(self, net: IPv4Network) -> bool:
        """Whether ``net`` (a block, or a /32) lies in a VXLAN pool."""
        return any(net.subnet_of(p) for p in self.vxlan_pools)


def calico_blocks(
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    *,
    block_size: int = 26,
    affinities: Sequence[tuple[str, IPv4Network]] = (),
    vxlan_pools: Sequence[IPv4Network] = (),
) -> CalicoBlocks:
    """Calico's block affinities. Given (``affinities``: ``(node, block)`` as Calico's
    BlockAffinity objects say), they are taken as they are; otherwise each pod's address
    gives the ``/block_size`` block it falls in, affine to the node holding most of the
    block's pods (ties: the first node in ``nodes`` order). A pod whose address lies in
    no block of its node is borrowed (Calico routes it as a ``/32``). Pure."""
    names = [n.name for n in nodes]
    order = {n: i for i, n in enumerate(names)}
    owner: dict[IPv4Network, str] = {}
    if affinities:
        for node, block in affinities:
            owner.setdefault(block, node)
    else:
        count: dict[IPv4Network, dict[str, int]] = {}
        for p in pods:
            if p.node not in order:
                continue
            net = ip_network(f"{p.ip}/{block_size}", strict=False)
            assert isinstance(net, IPv4Network)
            per = count.setdefault(net, {})
            per[p.node] = per.get(p.node, 0) + 1
        for block, per in count.items():
            owner[block] = min(per, key=lambda n: (-per[n], order[n]))
    blocks: dict[str, list[IPv4Network]] = {}
    for block, node in sorted(owner.items(), key=lambda kv: (kv[0].network_address, kv[0].prefixlen)):
        blocks.setdefault(node, []).append(block)
    borrowed: dict[str, list[IPv4Address]] = {}
    for p in sorted(pods, key=lambda p: p.ip):
        if p.node in order and not any(p.ip in b for b in blocks.get(p.node, ())):
            borrowed.setdefault(p.node, []).append(p.ip)
    return CalicoBlocks(
        {n: tuple(v) for n, v in blocks.items()},
        {n: tuple(v) for n, v in borrowed.items()},
        tuple(vxlan_pools),
    )


def spec_blocks(
    spec: ClusterSpec, nodes: Sequence[NodeInfo], pods: Sequence[PodInfo]
) -> CalicoBlocks | None:
    """The Calico blocks of a cluster (None unless ``cni: calico``): the Cluster's
    ``calico.blockAffinities`` when given, else inferred from ``pods``."""
    if spec.cni != "calico":
        return None
    affinities = []
    for a in spec.calico.block_affinities:
        net = ip_network(a.cidr)
        assert isinstance(net, IPv4Network)
        affinities.append((a.node, net))
    vxlan = []
    for pool in spec.calico_ip_pools:
        if pool.vxlan_mode == "Always":
            net = ip_network(pool.cidr)
            assert isinstance(net, IPv4Network)
            vxlan.append(net)
    return calico_blocks(
        nodes, pods, block_size=spec.calico.block_size, affinities=affinities, vxlan_pools=vxlan
    )


def vtep_mac(node: str) -> str:
    return stable_mac("vtep", node)


#: Calico's VXLAN device: ``vxlan.calico``, VNI 4096, UDP 4789 (Felix's defaults,
#: FelixConfiguration ``vxlanVNI``/``vxlanPort``)
CALICO_VXLAN_DEV = "vxlan.calico"
CALICO_VXLAN_VNI = 4096
CALICO_VXLAN_PORT = 4789


def calico_vtep_mac(node: str) -> str:
    """The MAC of ``node``'s ``vxlan.calico`` (Felix picks a random one and records it
    on the Calico Node; svclab derives one)."""
    return stable_mac("calico-vtep", node)


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
    cni: Literal["flannel", "calico"] = "flannel",
    blocks: CalicoBlocks | None = None,
) -> ClusterNetwork:
    """The whole network. Pure: the same inputs give the same value (MACs included).
    ``cni="calico"``: Calico's pod network (module docstring); ``blocks`` its block
    affinities (default: :func:`calico_blocks` of ``nodes`` and ``pods``)."""
    plan = _Plan(node_network, nodes, pods, overlay, external_clients, cni, blocks)
    namespaces = {name: plan.netns(name) for name in plan.names}
    return ClusterNetwork(
        namespaces=namespaces,
        veths=plan.veths(),
        overlay=plan.overlay,
        node_network=node_network,
        cni=cni,
    )


def build_lazy(
    node_network: IPv4Network,
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    *,
    overlay: Literal["vxlan", "host-gw"] = "vxlan",
    external_clients: Sequence[str] = (),
    cni: Literal["flannel", "calico"] = "flannel",
    blocks: CalicoBlocks | None = None,
) -> LazyClusterNetwork:
    """:func:`build`'s network with each namespace derived when first looked up (same
    names in the same order, equal values): a node's routes, neighbours and FDB entries
    name every other node, so building all of them costs the square of the node count;
    a question about one packet needs two or three. :meth:`LazyClusterNetwork.owner_of`
    and :meth:`LazyClusterNetwork.interface` answer from indexes, without building."""
    plan = _Plan(node_network, nodes, pods, overlay, external_clients, cni, blocks)
    return LazyClusterNetwork(
        namespaces=LazyMapping(plan.names, plan.netns),  # type: ignore[arg-type]
        veths=plan.veths(),
        overlay=plan.overlay,
        node_network=node_network,
        cni=cni,
        plan=plan,
    )


@dataclass(frozen=True)
class LazyClusterNetwork(ClusterNetwork):
    """A :class:`ClusterNetwork` whose ``namespaces`` is a :class:`LazyMapping` (see
    :func:`build_lazy`)."""

    plan: _Plan | None = None

    def owner_of(self, ip: IPAddress) -> Netns | None:
        assert self.plan is not None
        name = self.plan.owners().get(ip)
        return self.namespaces[name] if name is not None else None

    def owner_name(self, ip: IPAddress) -> str | None:
        """The name of the namespace holding ``ip`` (loopback excluded), building none."""
        assert self.plan is not None
        return self.plan.owners().get(ip)

    def interface(self, ns: str, name: str) -> Interface:
        """Interface ``name`` of namespace ``ns``, building as little as possible."""
        assert self.plan is not None
        return self.plan.interface(ns, name)


class _Plan:
    """What :func:`build` derives each namespace from, and how (one namespace at a time)."""

    def __init__(
        self,
        node_network: IPv4Network,
        nodes: Sequence[NodeInfo],
        pods: Sequence[PodInfo],
        overlay: Literal["vxlan", "host-gw"],
        external_clients: Sequence[str],
        cni: Literal["flannel", "calico"] = "flannel",
        blocks: CalicoBlocks | None = None,
    ) -> None:
        self.node_network = node_network
        self.nodes = list(nodes)
        self.calico = cni == "calico"
        # Calico (BGP, no encapsulation) routes between nodes as host-gw does
        self.overlay: Literal["vxlan", "host-gw"] = "host-gw" if self.calico else overlay
        self.clients = list(external_clients)
        self.gateway = node_network.network_address + 1
        self.mtu = 1500 - VXLAN_OVERHEAD if self.overlay == "vxlan" else 1500
        pods_by_node: dict[str, list[PodInfo]] = {}
        for p in pods:
            pods_by_node.setdefault(p.node, []).append(p)
        self.pods_by_node = {k: sorted(v, key=lambda p: p.key) for k, v in pods_by_node.items()}
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.blocks = (
            (blocks if blocks is not None else calico_blocks(self.nodes, pods))
            if self.calico
            else CalicoBlocks({}, {})
        )
        #: Calico's VXLAN: each node's tunnel address (Calico's IPAM gives it the first
        #: free address of the node's first block in a VXLAN pool; a node without such a
        #: block has none); pods' and tunnels' MTU 1450, as Calico sets them
        self.calico_vxlan = self.calico and bool(self.blocks.vxlan_pools)
        self.vtep_ip: dict[str, IPv4Address] = {}
        if self.calico_vxlan:
            self.mtu = 1500 - VXLAN_OVERHEAD
            held = {p.ip for p in pods}
            for n in self.nodes:
                for block in self.blocks.blocks.get(n.name, ()):
                    if self.blocks.vxlan(block):
                        free = next((a for a in block if a not in held), None)
                        if free is not None:
                            self.vtep_ip[n.name] = free
                            break
        #: netns name -> what builds it: ("ext", j) | ("router",) | ("pod", node, pod) |
        #: ("node", node), in build()'s order
        self.what: dict[str, tuple[object, ...]] = {}
        for j, client in enumerate(self.clients):
            self.what[ext_ns(client)] = ("ext", j)
        self.what["router"] = ("router",)
        for n in self.nodes:
            if self._has_pods(n):
                for p in self.pods_by_node.get(n.name, []):
                    self.what[pod_ns(p.key)] = ("pod", n, p)
            self.what[node_ns(n.name)] = ("node", n)
        self.names = list(self.what)
        self._owners: dict[IPAddress, str] | None = None

    def _has_pods(self, n: NodeInfo) -> bool:
        """Whether the node's pods are attached: under flannel only on a node with a
        podCIDR (the bridge's subnet); Calico ignores podCIDRs."""
        return self.calico or n.pod_cidr is not None

    def host_veth(self, pod_key: str) -> str:
        return calico_veth_name(pod_key) if self.calico else host_veth_name(pod_key)

    # ---- whole-network facts

    def veths(self) -> tuple[VethPair, ...]:
        out = [VethPair(("router", f"u{i}"), (node_ns(n.name), "eth0")) for i, n in enumerate(self.nodes)]
        out += [VethPair(("router", f"x{j}"), (ext_ns(c), "eth0")) for j, c in enumerate(self.clients)]
        for n in self.nodes:
            if not self._has_pods(n):
                continue
            ns = node_ns(n.name)
            for p in self.pods_by_node.get(n.name, []):
                out.append(VethPair((ns, self.host_veth(p.key)), (pod_ns(p.key), "eth0")))
        return tuple(out)

    def owners(self) -> dict[IPAddress, str]:
        """Every non-loopback address and the namespace holding it (the first one, in
        :attr:`names` order, as :meth:`ClusterNetwork.owner_of` finds it)."""
        if self._owners is None:
            found: dict[IPAddress, str] = {}
            for name in reversed(self.names):  # earlier names win
                for a in self._addresses(name):
                    found[a] = name
            self._owners = found
        return self._owners

    def _addresses(self, name: str) -> list[IPAddress]:
        what = self.what[name]
        if what[0] == "ext":
            j = what[1]
            assert isinstance(j, int)
            return [IPv4Address(self.clients[j])]
        if what[0] == "router":
            return [self.gateway, *([ROUTER_LINK_IP] if self.clients else [])]
        if what[0] == "pod":
            return [what[2].ip]  # type: ignore[attr-defined]
        n: NodeInfo = what[1]  # type: ignore[assignment]
        out: list[IPAddress] = [n.ip]
        if n.pod_cidr is not None and not self.calico:
            out.append(n.pod_cidr.network_address + 1)
            if self.overlay == "vxlan":
                out.append(n.pod_cidr.network_address)
        if n.name in self.vtep_ip:
            out.append(self.vtep_ip[n.name])
        return out

    def interface(self, ns: str, name: str) -> Interface:
        what = self.what.get(ns)
        if what is not None and what[0] == "node" and name == "eth0":
            n: NodeInfo = what[1]  # type: ignore[assignment]
            return self._node_eth0(n)
        if what is not None and what[0] == "pod" and name == "eth0":
            return self._pod_eth0(what[1], what[2])  # type: ignore[arg-type]
        return self.netns(ns).interface(name)

    # ---- one namespace

    def netns(self, name: str) -> Netns:
        what = self.what[name]
        if what[0] == "ext":
            return self._ext(what[1])  # type: ignore[arg-type]
        if what[0] == "router":
            return self._router()
        if what[0] == "pod":
            return self._pod(what[1], what[2])  # type: ignore[arg-type]
        return self._node(what[1])  # type: ignore[arg-type]

    def _ext(self, j: int) -> Netns:
        client = self.clients[j]
        cip = IPv4Address(client)
        return Netns(
            name=ext_ns(client),
            role="external",
            interfaces=(
                Interface("lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),)),
                Interface(
                    "eth0",
                    "veth",
                    stable_mac("ext", client),
                    (IPv4Interface(f"{cip}/32"),),
                    peer=("router", f"x{j}"),
                ),
            ),
            routes=(
                Route(dst=IPv4Network(f"{ROUTER_LINK_IP}/32"), dev="eth0", scope="link"),
                Route(dst=DEFAULT_ROUTE, dev="eth0", via=ROUTER_LINK_IP, onlink=True),
            ),
        )

    def _router(self) -> Netns:
        br_addr = IPv4Interface(f"{self.gateway}/{self.node_network.prefixlen}")
        router_itfs = [
            Interface("lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),)),
            Interface("br0", "bridge", stable_mac("router", "br0"), (br_addr,)),
        ]
        router_routes = [_connected("br0", br_addr)]
        for i, n in enumerate(self.nodes):
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
        for j, client in enumerate(self.clients):
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
        return Netns(
            name="router",
            role="router",
            interfaces=tuple(router_itfs),
            routes=tuple(router_routes),
            sysctls=(("net.ipv4.ip_forward", "1"),),
        )

    def _pod_eth0(self, n: NodeInfo, p: PodInfo) -> Interface:
        if self.calico:
            paddr = IPv4Interface(f"{p.ip}/32")
        else:
            assert n.pod_cidr is not None
            paddr = IPv4Interface(f"{p.ip}/{n.pod_cidr.prefixlen}")
        return Interface(
            "eth0",
            "veth",
            stable_mac("pod", p.key),
            (paddr,),
            mtu=self.mtu,
            peer=(node_ns(n.name), self.host_veth(p.key)),
        )

    def _pod(self, n: NodeInfo, p: PodInfo) -> Netns:
        if self.calico:
            return Netns(
                name=pod_ns(p.key),
                role="pod",
                node=n.name,
                pod=p.key,
                interfaces=(
                    Interface(
                        "lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),)
                    ),
                    self._pod_eth0(n, p),
                ),
                routes=(
                    Route(dst=IPv4Network(f"{CALICO_GATEWAY}/32"), dev="eth0", scope="link"),
                    Route(dst=DEFAULT_ROUTE, dev="eth0", via=CALICO_GATEWAY),
                ),
            )
        assert n.pod_cidr is not None
        gw = n.pod_cidr.network_address + 1
        eth0 = self._pod_eth0(n, p)
        paddr = eth0.addresses[0]
        return Netns(
            name=pod_ns(p.key),
            role="pod",
            node=n.name,
            pod=p.key,
            interfaces=(
                Interface("lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),)),
                eth0,
            ),
            routes=(
                _connected("eth0", paddr),
                Route(dst=DEFAULT_ROUTE, dev="eth0", via=gw),
            ),
        )

    def _node_eth0(self, n: NodeInfo) -> Interface:
        ns = node_ns(n.name)
        eth0 = IPv4Interface(f"{n.ip}/{self.node_network.prefixlen}")
        idx = self.node_index[n.name]
        return Interface("eth0", "veth", stable_mac(ns, "eth0"), (eth0,), peer=("router", f"u{idx}"))

    def _calico_node(self, n: NodeInfo) -> Netns:
        ns = node_ns(n.name)
        eth0_itf = self._node_eth0(n)
        eth0 = eth0_itf.addresses[0]
        itfs = [
            Interface("lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),)),
            eth0_itf,
        ]
        routes = [_connected("eth0", eth0), Route(dst=DEFAULT_ROUTE, dev="eth0", via=self.gateway)]
        sysctls = list(CALICO_NODE_SYSCTLS)
        for p in self.pods_by_node.get(n.name, []):
            hv = calico_veth_name(p.key)
            itfs.append(
                Interface(hv, "veth", CALICO_HOST_MAC, mtu=self.mtu, peer=(pod_ns(p.key), "eth0"))
            )
            routes.append(Route(dst=IPv4Network(f"{p.ip}/32"), dev=hv, scope="link"))
            sysctls += [(f"net.ipv4.conf.{hv}.proxy_arp", "1"), (f"net.ipv4.neigh.{hv}.proxy_delay", "0")]
        neighbors: list[Neighbor] = []
        fdb: list[FdbEntry] = []
        if self.calico_vxlan:
            vtep = self.vtep_ip.get(n.name)
            itfs.append(
                Interface(
                    CALICO_VXLAN_DEV,
                    "vxlan",
                    calico_vtep_mac(n.name),
                    (IPv4Interface(f"{vtep}/32"),) if vtep is not None else (),
                    mtu=self.mtu,
                    vxlan=VxlanParams(
                        vni=CALICO_VXLAN_VNI, local=n.ip, dev="eth0", port=CALICO_VXLAN_PORT
                    ),
                )
            )
        for peer in self.nodes:
            if peer.name == n.name:
                continue
            peer_vtep = self.vtep_ip.get(peer.name)
            nets = [*self.blocks.blocks.get(peer.name, ())]
            nets += [IPv4Network(f"{ip}/32") for ip in self.blocks.borrowed.get(peer.name, ())]
            tunnelled = False
            for net in nets:
                if peer_vtep is not None and self.blocks.vxlan(net):
                    # Felix: <block> via <peer's tunnel address> dev vxlan.calico onlink
                    routes.append(Route(dst=net, dev=CALICO_VXLAN_DEV, via=peer_vtep, onlink=True))
                    tunnelled = True
                else:
                    routes.append(Route(dst=net, dev="eth0", via=peer.ip))
            if tunnelled:
                assert peer_vtep is not None
                mac = calico_vtep_mac(peer.name)
                neighbors.append(Neighbor(ip=peer_vtep, mac=mac, dev=CALICO_VXLAN_DEV))
                fdb.append(FdbEntry(mac=mac, dev=CALICO_VXLAN_DEV, dst=peer.ip))
        return Netns(
            name=ns,
            role="node",
            node=n.name,
            interfaces=tuple(itfs),
            routes=tuple(routes),
            neighbors=tuple(neighbors),
            fdb=tuple(fdb),
            sysctls=tuple(sysctls),
        )

    def _node(self, n: NodeInfo) -> Netns:
        if self.calico:
            return self._calico_node(n)
        ns = node_ns(n.name)
        mtu = self.mtu
        eth0_itf = self._node_eth0(n)
        eth0 = eth0_itf.addresses[0]
        itfs = [
            Interface("lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),)),
            eth0_itf,
        ]
        routes = [_connected("eth0", eth0), Route(dst=DEFAULT_ROUTE, dev="eth0", via=self.gateway)]
        neighbors: list[Neighbor] = []
        fdb: list[FdbEntry] = []
        if n.pod_cidr is not None:
            gw = IPv4Interface(f"{n.pod_cidr.network_address + 1}/{n.pod_cidr.prefixlen}")
            itfs.append(Interface("cni0", "bridge", stable_mac(ns, "cni0"), (gw,), mtu=mtu))
            routes.append(_connected("cni0", gw))
            for p in self.pods_by_node.get(n.name, []):
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
            if self.overlay == "vxlan":
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
        for peer in self.nodes:
            if peer.name == n.name or peer.pod_cidr is None:
                continue
            if self.overlay == "vxlan" and n.pod_cidr is not None:
                peer_gw = peer.pod_cidr.network_address
                routes.append(Route(dst=peer.pod_cidr, dev="flannel.1", via=peer_gw, onlink=True))
                neighbors.append(Neighbor(ip=peer_gw, mac=vtep_mac(peer.name), dev="flannel.1"))
                fdb.append(FdbEntry(mac=vtep_mac(peer.name), dev="flannel.1", dst=peer.ip))
            else:
                routes.append(Route(dst=peer.pod_cidr, dev="eth0", via=peer.ip))
        return Netns(
            name=ns,
            role="node",
            node=n.name,
            interfaces=tuple(itfs),
            routes=tuple(routes),
            neighbors=tuple(neighbors),
            fdb=tuple(fdb),
            sysctls=NODE_SYSCTLS,
        )


def node_info(name: str, ip: str, pod_cidr: str | None) -> NodeInfo:
    net = ip_network(pod_cidr) if pod_cidr else None
    assert net is None or isinstance(net, IPv4Network)
    addr = ip_address(ip)
    assert isinstance(addr, IPv4Address)
    return NodeInfo(name=name, ip=addr, pod_cidr=net)
