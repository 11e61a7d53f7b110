"""Realise a :class:`~netmodel.network.ClusterNetwork` on real network namespaces, tear
it down, and clean up after crashes.

What :func:`realize` creates (names from :mod:`dataplane.linux.names`):

* one namespace per logical namespace of the model (pods' in ``bridge-plugin`` mode are
  created as the runtime's sandbox by :class:`~dataplane.linux.cni.CniRunner`);
* the router's ``br0`` and one veth per node (``u<i>`` in the router, ``eth0`` in the
  node), external clients' point-to-point veths, every address and static route;
* per node: ``cni0`` (MAC, MTU and gateway address from the model, created before any
  pod so concurrent CNI calls never race to create it), and either ``flannel.1``
  (VXLAN VNI 1, UDP 8472, ``nolearning``, the model's VTEP MAC; per peer node an onlink
  route, a permanent neighbour and an FDB entry to the peer's node IP) or host-gw routes;
* pods: through the real CNI plugins (``bridge-plugin``) with the model's IP and MAC
  (and, for a pod with ``hostPort`` mappings, the real ``portmap`` plugin chained after
  ``bridge``: it writes the pod's nat rules in the node, :mod:`netmodel.hostports`), or
  directly with pyroute2 (``netlink``, veth names and MACs exactly as the model; one
  node's pods one after the other, nodes concurrently, as kubelets would);
  a Calico network (``network.cni == "calico"``) is always realised by ``netlink``: no
  ``cni0``; each pod's ``cali…`` veth (MAC ``ee:ee:ee:ee:ee:ee``) with its ``/32``
  route, ``proxy_arp=1`` and ``proxy_delay=0`` (the model's sysctls), the pod's
  ``169.254.1.1`` gateway, and a route per other node's block (see
  :mod:`netmodel.topology`);
* sysctls (the model lists them per namespace):

  - ``net.ipv4.ip_forward=1`` on the router and nodes: they route pod and Service
    traffic between interfaces (the bridge plugin sets it too, as ``isGateway``);
  - ``net.ipv4.conf.all.route_localnet=1`` on nodes: kube-proxy's localhost NodePorts
    (``127.0.0.1:NODEPORT``) DNAT loopback-sourced packets to pod IPs, which the kernel
    only routes off-host with route_localnet;
  - ``net.bridge.bridge-nf-call-iptables=1`` on nodes: see *hairpin* below;
  - on the host, ``net.ipv4.neigh.default.gc_thresh2/3`` are raised when the cluster
    needs more ARP entries than they allow (the table is shared by all namespaces):
    see :func:`ensure_neighbour_room`.

Hairpin. A pod reaching a Service whose chosen endpoint is on the same node sends the
packet to the ``cni0`` gateway (routed, so PREROUTING DNATs it), but the endpoint's
reply goes straight back to the client across the bridge. Unless bridged frames cross
iptables (``br_netfilter``: ``net.bridge.bridge-nf-call-iptables``), conntrack never sees
the reply, does not undo the DNAT, and the client drops it. On this kernel br_netfilter is
built in and its sysctls exist per namespace (``modprobe`` is not even installed), so
``hairpin="auto"`` picks ``br-netfilter``. Without br_netfilter, ``auto`` falls back to
``masquerade``: a nat POSTROUTING rule ``-s podCIDR -d podCIDR -o cni0 -m conntrack
--ctstate DNAT -j MASQUERADE`` makes such replies go to the ``cni0`` address (routed,
so conntrack un-NATs them); the price is that the endpoint sees the node's ``cni0``
address instead of the client pod's. A pod reaching itself through a Service works in
both modes: kube-proxy masquerades that case itself and the CNI sets ``hairpin`` on
every bridge port.

iptables back end. A cluster's nodes all use one (``iptables_backend``, recorded in the
cluster's state): ``nft`` (iptables-nft, nf_tables) or ``legacy`` (iptables-legacy,
x_tables through libiptc): see :mod:`dataplane.linux.rules`. svclab's own rules (the
hairpin fallback) go to the same back end as kube-proxy's.

Everything is ensure-style, so calling :func:`realize` again on a realised cluster
changes nothing, and a half-realised cluster (crash, Ctrl-C) is completed. Realising a
changed model converges: new namespaces and pods are added; pods the model dropped are
CNI-DELeted and namespaces it no longer names are removed. (Changed attributes of an
existing interface are re-applied; an interface dropped from a kept namespace stays.)
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path
from typing import Any, Literal

from pyroute2 import IPRoute

from dataplane.linux import dnspods, nsenter, rules, servers, state, traffic
from dataplane.linux.cni import CniMode, CniResult, CniRunner, PodAttach
from dataplane.linux.links import NsLink, ensure_tables, tolerate
from dataplane.linux.names import PREFIX, ClusterNames, check_ifname
from dataplane.linux.netns import list_ours
from dataplane.linux.phases import Phases, maybe
from dataplane.linux.servers import PodServers, Proto, ServerSpec
from dataplane.linux.state import StateDir
from dataplane.proxy.iptables import JumpRule
from netmodel.errors import BackendError
from netmodel.hostports import PortMapping
from netmodel.network import DEFAULT_ROUTE, ClusterNetwork, Interface, Netns, VethPair

HairpinMode = Literal["auto", "br-netfilter", "masquerade"]
BRIDGE_NF = "net.bridge.bridge-nf-call-iptables"
HAIRPIN_CHAIN = "SVCLAB-HAIRPIN"
HAIRPIN_JUMP = JumpRule(
    "nat", "POSTROUTING", f'-m comment --comment "svclab hairpin fallback" -j {HAIRPIN_CHAIN}'
)
_KIND_ORDER = {"loopback": 0, "bridge": 1, "dummy": 2, "veth": 3, "vxlan": 4, "ethernet": 5}


@dataclass
class RealCluster:
    """A realised cluster: how to find its namespaces and what its pods got.

    ``namespaces`` maps logical names (``node/n1``) to kernel names; ``pods`` maps pod
    keys (``ns/name``) to their attachment (IP, host veth, MAC), ``pod_nodes`` to the
    node each runs on. It is saved in the state dir, so another process can :meth:`load`
    it by cluster id."""

    cluster_id: str
    namespaces: dict[str, str]
    cni: CniMode
    hairpin: Literal["br-netfilter", "masquerade"]
    overlay: str
    pods: dict[str, CniResult] = field(default_factory=dict)
    mtu: int = 1500
    iptables_backend: rules.IptablesBackend = "nft"
    pod_nodes: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> ClusterNames:
        return ClusterNames(self.cluster_id)

    @property
    def state(self) -> StateDir:
        return StateDir.of(self.cluster_id)

    @property
    def persistent(self) -> bool:
        return self.state.persistent_marker.exists()

    def netns(self, logical: str) -> str:
        """Kernel namespace of a logical one (``router``, ``node/N``, ``pod/NS/N``,
        ``ext/IP``); a kernel name (``svclab-...``) is returned unchanged."""
        if logical.startswith(PREFIX):
            return logical
        return self.names.netns(logical)

    def node_netns(self, node: str) -> str:
        return self.netns(f"node/{node}")

    def pod_netns(self, pod_key: str) -> str:
        return self.netns(f"pod/{pod_key}")

    # ---------------------------------------------------------------- helpers
    def cni_runner(self) -> CniRunner:
        """The CNI runner for this cluster (the kubelet's real network plugin)."""
        return CniRunner(self.cluster_id, mtu=self.mtu, iptables_backend=self.iptables_backend)

    @property
    def servers(self) -> PodServers:
        return PodServers(self.cluster_id)

    def serve(
        self,
        ports: Mapping[str, Sequence[tuple[int, Proto]]],
        grpc: Mapping[str, Collection[int]] | None = None,
    ) -> dict[str, int]:
        """Start a pod server for each pod key with its (port, proto) containerPorts;
        they listen when this returns. One process per node answers for the node's pods
        (a pod whose node is unknown gets one of its own). ``grpc``: pod key -> the TCP
        ports where its server speaks gRPC's health service. Returns pod -> pid."""
        grpc = grpc or {}
        return self.servers.start(
            [
                ServerSpec(k, tuple(v), self._host(k), tuple(sorted(grpc.get(k, ()))))
                for k, v in ports.items()
            ]
        )

    def _host(self, pod_key: str) -> str | None:
        node = self.pod_nodes.get(pod_key)
        return None if node is None else f"node/{node}"

    def connect(
        self,
        src: str,
        dst_ip: IPv4Address | str,
        dport: int,
        proto: traffic.Proto = "tcp",
        *,
        sport: int | None = None,
        timeout: float = 2.0,
    ) -> traffic.ConnectResult:
        """:func:`dataplane.linux.traffic.connect` from a logical namespace."""
        return traffic.connect(self.netns(src), dst_ip, dport, proto, sport=sport, timeout=timeout)

    def ping(
        self, src: str, dst: IPv4Address | str, count: int = 1, *, timeout: float = 1.0
    ) -> traffic.PingResult:
        return traffic.ping(self.netns(src), dst, count, timeout=timeout)

    # ---------------------------------------------------------------- persistence
    def to_json(self) -> dict[str, Any]:
        return {
            "cluster_id": self.cluster_id,
            "namespaces": self.namespaces,
            "cni": self.cni,
            "hairpin": self.hairpin,
            "overlay": self.overlay,
            "mtu": self.mtu,
            "iptables_backend": self.iptables_backend,
            "pods": {k: v.to_json() for k, v in sorted(self.pods.items())},
            "pod_nodes": dict(sorted(self.pod_nodes.items())),
        }

    def save(self) -> None:
        st = self.state.ensure()
        st.write_json(st.cluster_file, self.to_json())

    @classmethod
    def load(cls, cluster_id: str) -> RealCluster:
        """The cluster realised earlier under ``cluster_id`` (by any process)."""
        d = StateDir.of(cluster_id).read_json(StateDir.of(cluster_id).cluster_file)
        if not d:
            raise BackendError(f"cluster {cluster_id}: not realised (no state)")
        return cls(
            cluster_id=d["cluster_id"],
            namespaces=dict(d["namespaces"]),
            cni=d["cni"],
            hairpin=d["hairpin"],
            overlay=d["overlay"],
            mtu=int(d["mtu"]),
            pods={k: CniResult.from_json(v) for k, v in d["pods"].items()},
            iptables_backend=d.get("iptables_backend", "nft"),
            pod_nodes=dict(d.get("pod_nodes", {})),
        )


# ---------------------------------------------------------------------------- realize
def validate(network: ClusterNetwork) -> None:
    """Reject, before touching the kernel, what the kernel would reject half-way:
    bad interface names, veths whose ends are missing, pods without a node/podCIDR."""
    for ns in network.namespaces.values():
        seen: set[str] = set()
        for itf in ns.interfaces:
            check_ifname(itf.name)
            if itf.name in seen:
                raise BackendError(f"{ns.name}: interface {itf.name} twice")
            seen.add(itf.name)
            if itf.kind == "ethernet":
                raise BackendError(f"{ns.name}/{itf.name}: physical interfaces are not realised")
        if ns.role == "pod" and (ns.node is None or ns.pod is None):
            raise BackendError(f"{ns.name}: pod namespace without node or pod key")
    for pair in network.veths:
        for nsname, ifname in (pair.a, pair.b):
            if nsname not in network.namespaces:
                raise BackendError(f"veth end {nsname}/{ifname}: no such namespace")
            network.namespaces[nsname].interface(ifname)


def _pod_cidr(node: Netns) -> IPv4Network:
    cni0 = node.interface("cni0")
    if not cni0.addresses:
        raise BackendError(f"{node.name}: cni0 has no address")
    return cni0.addresses[0].network


def _calico_overlay(network: ClusterNetwork) -> str:
    """``calico-vxlan`` when a node has Calico's VXLAN device, else ``calico-bgp``."""
    for ns in network.namespaces.values():
        if ns.role == "node":
            return "calico-vxlan" if any(i.kind == "vxlan" for i in ns.interfaces) else "calico-bgp"
    return "calico-bgp"


def realize(
    network: ClusterNetwork,
    *,
    cluster_id: str,
    cni: CniMode = "bridge-plugin",
    hairpin: HairpinMode = "auto",
    workers: int = 8,
    persistent: bool = False,
    iptables_backend: rules.IptablesBackend = "nft",
    phases: Phases | None = None,
    port_mappings: Mapping[str, Sequence[PortMapping]] | None = None,
) -> RealCluster:
    """Create ``network`` in the kernel under ``cluster_id`` and return its handle.

    ``cni``: pods through the real plugins (``bridge-plugin``) or by svclab itself
    (``netlink``). ``hairpin``: see the module docstring; ``masquerade`` also turns
    ``bridge-nf-call-iptables`` off so that the fallback is what is exercised.
    ``workers``: concurrent CNI plugin calls. ``persistent``: a kept cluster (a dev
    cluster): global cleanups and other sessions' leak checks leave it alone; only
    :func:`teardown` / ``cleanup(cluster_id)`` (or ``force``) remove it; the mark stays
    until then. ``iptables_backend``: where svclab's own iptables rules go (module
    docstring); a cluster realised on the other back end is refused (tear it down first).
    ``phases``: where the time goes (:mod:`dataplane.linux.phases`), for benchmarks.
    ``port_mappings``: pod key -> its ``hostPort`` mappings, handed to the real
    ``portmap`` plugin chained after ``bridge`` (``bridge-plugin`` only: with
    ``netlink`` no plugin runs, and the caller loads the plugin's rules itself); a node's
    pods with mappings are attached one after the other in this mapping's order, the
    order of the plugin's rules on that node (:func:`attach_rounds`).

    Idempotent (a second call changes nothing) and resumable (a call after an interrupted
    one completes the cluster). On error the partial cluster stays for inspection;
    :func:`teardown` or :func:`cleanup` removes it. Pod servers are not started here (the
    model has no containerPorts): call :meth:`RealCluster.serve`."""
    validate(network)
    mappings = dict(port_mappings or {})
    if network.cni == "calico":
        # Calico's CNI plugin is not installed here: svclab lays the pods out itself,
        # exactly as the model (and Calico's plugin) does
        cni = "netlink"
    rules.restore_tool(iptables_backend)
    names = ClusterNames(cluster_id)
    earlier = StateDir.of(cluster_id).read_json(StateDir.of(cluster_id).cluster_file)
    was = earlier.get("iptables_backend", "nft") if isinstance(earlier, dict) else None
    if was is not None and was != iptables_backend:
        raise BackendError(
            f"cluster {cluster_id} was realised on the iptables {was} back end, not "
            f"{iptables_backend}; tear it down first"
        )
    st = StateDir.of(cluster_id).ensure()
    if persistent:
        st.persistent_marker.touch()
    kernel = {logical: names.netns(logical) for logical in network.namespaces}
    nss = network.namespaces
    pods = {k: ns for k, ns in nss.items() if ns.role == "pod"}
    by_plugin = cni == "bridge-plugin"
    mtu = min(
        (i.mtu for ns in nss.values() for i in ns.interfaces if i.name == "cni0"), default=1500
    )

    with maybe(phases, "stale"):
        _remove_stale(
            cluster_id,
            set(kernel.values()),
            {str(ns.pod) for ns in pods.values()},
            iptables_backend,
        )
    _infrastructure(network, kernel, phases)

    def node_tables() -> None:
        _node_tables(network, kernel, workers, phases)

    # the CNI plugins find the nodes' routes in place, as on a node whose network is up;
    # by netlink the nodes' tables come after the pods, because a node may route into a
    # pod's veth (Calico's /32 routes to its cali… devices), which the pod brings
    if by_plugin:
        node_tables()

    # 3. pods
    results: dict[str, CniResult] = {}
    if by_plugin:
        attach = [
            PodAttach(
                node=str(ns.node),
                pod_key=str(ns.pod),
                pod_cidr=_pod_cidr(nss[f"node/{ns.node}"]),
                requested_ip=_addr(ns.interface("eth0")).ip,
                mac=ns.interface("eth0").mac,
                port_mappings=tuple(mappings.get(str(ns.pod), ())),
            )
            for ns in pods.values()
        ]
        runner = CniRunner(cluster_id, mtu=mtu, phases=phases, iptables_backend=iptables_backend)
        with maybe(phases, "cni"):
            for batch in attach_rounds(attach, list(mappings)):
                added = runner.add_many(batch, workers=workers)
                for a, res in zip(batch, added, strict=True):
                    results[a.pod_key] = res
    else:
        per_node: dict[str, list[str]] = {}
        for logical, ns in pods.items():
            per_node.setdefault(f"node/{ns.node}", []).append(logical)
        pod_veths: dict[str, list[VethPair]] = {}
        for pair in network.veths:
            for end in {pair.a[0], pair.b[0]}:
                if nss[end].role == "pod":
                    pod_veths.setdefault(end, []).append(pair)
        with (
            maybe(phases, "pods_netlink"),
            ThreadPoolExecutor(max_workers=max(1, min(workers, len(per_node)))) as pool,
        ):
            list(
                pool.map(
                    lambda item: _attach_by_netlink(network, kernel, item[0], item[1], pod_veths),
                    per_node.items(),
                )
            )
        for ns in pods.values():
            results[str(ns.pod)] = _model_result(ns)
        node_tables()

    ensure_neighbour_room(neighbour_entries(network))

    # 4. sysctls and the hairpin mode
    with maybe(phases, "sysctls"):
        chosen = _sysctls_and_hairpin(network, kernel, hairpin, iptables_backend)

    cluster = RealCluster(
        cluster_id=cluster_id,
        namespaces=kernel,
        cni=cni,
        hairpin=chosen,
        # what joins the nodes' pod networks: flannel's backend, or Calico's BGP routes
        # (with its VXLAN device when a pool asks for it)
        overlay=_calico_overlay(network) if network.cni == "calico" else network.overlay,
        pods=results,
        mtu=mtu,
        iptables_backend=iptables_backend,
        pod_nodes={str(ns.pod): str(ns.node) for ns in pods.values()},
    )
    with maybe(phases, "save"):
        cluster.save()
    return cluster


def _infrastructure(
    network: ClusterNetwork, kernel: Mapping[str, str], phases: Phases | None = None
) -> None:
    """Every namespace of ``network`` but the pods', with its devices (the pods' veths
    are made with the pods), addresses and links up; ensure-style."""
    nss = network.namespaces
    with maybe(phases, "netns"):
        for logical, ns in nss.items():
            if ns.role != "pod":  # pods' are made by the CNI plugins or _attach_by_netlink
                nsenter.create_netns(kernel[logical])

    def by_pod(itf: Interface) -> bool:
        """Is this the node end of a pod's veth (created with the pod, not here)?"""
        return itf.peer is not None and nss[itf.peer[0]].role == "pod"

    links: dict[str, NsLink] = {}

    def link(logical: str) -> NsLink:
        if logical not in links:
            links[logical] = NsLink(kernel[logical])
        return links[logical]

    try:
        # 1. devices: bridges first (veths name them as master), then veth pairs (from
        #    side a, the peer born in side b's namespace), VXLAN last (needs eth0).
        with maybe(phases, "devices"):
            for logical, ns in nss.items():
                for itf in ns.interfaces:
                    if itf.kind in ("bridge", "dummy") and ns.role != "pod":
                        _ensure_device(link(logical), itf)
            for pair in network.veths:
                a_ns, b_ns = nss[pair.a[0]], nss[pair.b[0]]
                a_itf, b_itf = a_ns.interface(pair.a[1]), b_ns.interface(pair.b[1])
                if "pod" not in (a_ns.role, b_ns.role):
                    link(pair.a[0]).ensure_veth(a_itf, kernel[pair.b[0]], b_itf)
        # 2. attributes, addresses, up; then routes, neighbours, FDB (need links up).
        with maybe(phases, "configure"):
            for logical, ns in nss.items():
                if ns.role == "pod":
                    continue
                for itf in sorted(ns.interfaces, key=lambda i: _KIND_ORDER[i.kind]):
                    if by_pod(itf):
                        continue
                    if itf.kind == "vxlan":
                        link(logical).ensure_vxlan(itf)
                    link(logical).configure(itf)
    finally:
        for lk in links.values():
            lk.close()


def _node_tables(
    network: ClusterNetwork,
    kernel: Mapping[str, str],
    workers: int = 8,
    phases: Phases | None = None,
) -> None:
    """The routes, neighbours and FDB entries of every namespace but the pods': one
    ip/bridge -batch pair per namespace, several namespaces at once."""
    tables = [
        (kernel[logical], ns)
        for logical, ns in network.namespaces.items()
        if ns.role != "pod" and (ns.routes or ns.neighbors or ns.fdb)
    ]
    with (
        maybe(phases, "tables"),
        ThreadPoolExecutor(max_workers=max(1, min(workers, len(tables)))) as pool,
    ):
        list(pool.map(lambda t: ensure_tables(t[0], t[1].routes, t[1].neighbors, t[1].fdb), tables))


def realize_nodes(
    network: ClusterNetwork, cluster: RealCluster, *, workers: int = 8
) -> tuple[list[str], list[str]]:
    """Make the kernel hold the nodes of ``network`` (a model without pods: the live
    kubelets attach those) for the realised ``cluster``, as :func:`realize` builds them:
    each node's namespace with its devices, addresses, routes, neighbours and FDB
    entries (every node's, so the others reach a new one), its sysctls and the cluster's
    hairpin mode. A node namespace of the cluster that ``network`` no longer names is
    released: the pods recorded on it are stopped and their namespaces removed, then
    the node's namespace (its veth to the router goes with it). Ensure-style: nothing
    changes for nodes already there. Updates ``cluster`` (``namespaces``, ``pods``,
    ``pod_nodes``); the caller saves it. Returns (node namespaces added, released).

    A model that renames an existing node's router port (``u<i>`` follows the nodes'
    order: a node added after a lower one was deleted) is refused with BackendError
    before anything is changed."""
    if any(ns.role == "pod" for ns in network.namespaces.values()):
        raise BackendError("realize_nodes: the model must hold no pods (the kubelets attach them)")
    names = cluster.names
    kernel = {logical: names.netns(logical) for logical in network.namespaces}
    wanted_nodes = {k for k, ns in network.namespaces.items() if ns.role == "node"}
    had_nodes = {k for k in cluster.namespaces if k.startswith("node/")}
    for pair in network.veths:
        for (side, port), (other, _) in ((pair.a, pair.b), (pair.b, pair.a)):
            if side == "router" and other in had_nodes and not _on_port(kernel, port, other):
                raise BackendError(
                    f"cluster {cluster.cluster_id}: the nodes' order now puts {other} on "
                    f"router port {port}, which another node holds (a node was deleted "
                    "before this one was added); stop serving and run 'svclab up --real'"
                )
    released: list[str] = []
    for logical in sorted(had_nodes - wanted_nodes):
        node = logical.removeprefix("node/")
        gone = [k for k, n in cluster.pod_nodes.items() if n == node]
        PodServers(cluster.cluster_id).stop(gone)
        pod_ns = [names.netns(f"pod/{k}") for k in gone]
        kill_processes_in([*pod_ns, kernel.get(logical, names.netns(logical))])
        for k, n in zip(gone, pod_ns, strict=True):
            nsenter.remove_netns(n)
            cluster.namespaces.pop(f"pod/{k}", None)
            cluster.pods.pop(k, None)
            cluster.pod_nodes.pop(k, None)
            StateDir.of(cluster.cluster_id).cni_result(k).unlink(missing_ok=True)
        nsenter.remove_netns(names.netns(logical))
        cluster.namespaces.pop(logical, None)
        released.append(logical)
    added = sorted(wanted_nodes - had_nodes)
    _infrastructure(network, kernel)
    _node_tables(network, kernel, workers)
    ensure_neighbour_room(neighbour_entries(network))
    _sysctls_and_hairpin(network, kernel, cluster.hairpin, cluster.iptables_backend)
    for logical in network.namespaces:
        cluster.namespaces[logical] = kernel[logical]
    return added, released


def _on_port(kernel: Mapping[str, str], port: str, node: str) -> bool:
    """Whether ``node``'s ``eth0`` is the peer of the router's ``port`` (True when the
    node's namespace is gone: it is made again on that port)."""
    if nsenter.inode(kernel[node]) is None:
        return True
    with NsLink(kernel[node]) as nl:
        peer = nl.peer_index("eth0")
    with NsLink(kernel["router"]) as rl:
        return peer is None or rl.index(port) == peer


NEIGH_DEFAULTS = Path("/proc/sys/net/ipv4/neigh/default")
ARP_STATS = Path("/proc/net/stat/arp_cache")


def neighbour_entries(network: ClusterNetwork) -> int:
    """How many IPv4 neighbour (ARP) entries the realised cluster may hold at once, at
    most: every pod its gateway; every node its pods, the other nodes and the router;
    the router every node; external clients the router. Pure."""
    nodes = sum(1 for ns in network.namespaces.values() if ns.role == "node")
    pods = sum(1 for ns in network.namespaces.values() if ns.role == "pod")
    others = len(network.namespaces) - nodes - pods
    return pods + (pods + nodes * nodes) + nodes + others


def ensure_neighbour_room(needed: int) -> None:
    """Make room for ``needed`` more neighbour entries in the kernel's ARP table.

    That table is one for the whole host, namespaces included: its limits
    (``net.ipv4.neigh.default.gc_thresh2``/``gc_thresh3``, 512/1024 by default) count
    the dynamic entries of every namespace. Past ``gc_thresh3`` the kernel refuses new
    entries ("neighbour table overflow", ``table_fulls`` in ``/proc/net/stat/arp_cache``)
    and drops the packets waiting for them: from ~30 nodes x 25 pods on, pods stopped
    answering. So when the entries in use plus twice ``needed`` exceed ``gc_thresh3``,
    both limits are raised to that (never lowered; permanent entries do not count).
    This is a host-wide setting, the one large Kubernetes nodes raise too; it is only
    written from the host's own namespace, where it lives."""
    try:
        in_use = int(ARP_STATS.read_text().splitlines()[1].split()[0], 16)
        thresh = {k: int((NEIGH_DEFAULTS / k).read_text()) for k in ("gc_thresh2", "gc_thresh3")}
    except (OSError, ValueError, IndexError):
        return  # not the host's namespace (no defaults there): nothing to raise
    want = in_use + 2 * needed
    for key, value in thresh.items():
        if value < want:
            try:
                (NEIGH_DEFAULTS / key).write_text(str(want))
            except OSError as e:
                raise BackendError(
                    f"the cluster needs up to {needed} ARP entries but "
                    f"net.ipv4.neigh.default.{key} is {value} and cannot be raised: {e}"
                ) from e


def attach_rounds(attach: Sequence[PodAttach], order: Sequence[str]) -> list[list[PodAttach]]:
    """``attach`` split into rounds for :meth:`CniRunner.add_many`: the first holds every
    pod without port mappings and each node's first pod with some; round ``i`` each
    node's ``i``-th pod with mappings, in ``order`` (pod keys). The ``portmap`` plugin
    appends a pod's ``CNI-HOSTPORT-DNAT`` rules, so a node's rules follow the order its
    pods' ADDs ran in; concurrent ADDs on one node would make that order random."""
    rank = {k: i for i, k in enumerate(order)}
    mapped = sorted((a for a in attach if a.port_mappings), key=lambda a: rank.get(a.pod_key, -1))
    rounds: list[list[PodAttach]] = [[a for a in attach if not a.port_mappings]]
    seen: dict[str, int] = {}
    for a in mapped:
        i = seen.get(a.node, 0)
        seen[a.node] = i + 1
        while len(rounds) <= i:
            rounds.append([])
        rounds[i].append(a)
    return [r for r in rounds if r]


def _remove_stale(
    cluster_id: str, wanted: set[str], pods: set[str], backend: rules.IptablesBackend = "nft"
) -> None:
    """Make a re-realise converge: pods the model no longer has are CNI-DELeted (their
    servers stopped), then namespaces of the cluster the model does not name are removed."""
    names = ClusterNames(cluster_id)
    runner = CniRunner(cluster_id, iptables_backend=backend)
    gone = {k: v for k, v in runner.attached().items() if k not in pods}
    if gone:
        PodServers(cluster_id).stop(gone)
        for pod_key, (node, cidr) in gone.items():
            if nsenter.inode(names.netns(f"node/{node}")) is not None:
                runner.delete(node, pod_key, cidr)
    stale = [n for n in list_ours(include_held=True) if names.owns(n) and n not in wanted]
    kill_processes_in(stale)
    for n in stale:
        nsenter.remove_netns(n)
        dnspods.remove_resolv_conf(n)
    for pod_key in gone:
        StateDir.of(cluster_id).cni_result(pod_key).unlink(missing_ok=True)


def _attach_by_netlink(
    network: ClusterNetwork,
    kernel: Mapping[str, str],
    node: str,
    pods: Sequence[str],
    veths: Mapping[str, Sequence[VethPair]],
) -> None:
    """``cni="netlink"``: create the pods of one node as the model has them, one pod
    after the other through one netlink session in the node (nodes run concurrently, as
    their kubelets would): the pod's namespace, its devices and veths (``veths``: per
    pod, each joining it to its node; made from side a, the peer born in side b), the
    host ends' attributes (master ``cni0``, hairpin), the pod's ``lo`` and ``eth0``,
    then its routes, neighbours and FDB entries by netlink (a pod has a route or two:
    no ``ip -batch`` process per pod)."""
    nss = network.namespaces
    with NsLink(kernel[node]) as nl:
        for logical in pods:
            ns = nss[logical]
            nsenter.create_netns(kernel[logical])
            with NsLink(kernel[logical]) as pl:
                for itf in ns.interfaces:
                    if itf.kind in ("bridge", "dummy"):
                        _ensure_device(pl, itf)
                for pair in veths.get(logical, ()):
                    if {pair.a[0], pair.b[0]} != {node, logical}:
                        raise BackendError(
                            f"{logical}: veth {'/'.join(pair.a)} <-> {'/'.join(pair.b)} "
                            f"does not join the pod to its node {node}"
                        )
                    (nl if pair.a[0] == node else pl).ensure_veth(
                        nss[pair.a[0]].interface(pair.a[1]),
                        kernel[pair.b[0]],
                        nss[pair.b[0]].interface(pair.b[1]),
                    )
                for pair in veths.get(logical, ()):
                    nl.configure(nss[node].interface(pair.a[1] if pair.a[0] == node else pair.b[1]))
                for itf in sorted(ns.interfaces, key=lambda i: _KIND_ORDER[i.kind]):
                    pl.configure(itf)
                for route in ns.routes:
                    pl.ensure_route(route)
                for neigh in ns.neighbors:
                    pl.ensure_neigh(neigh)
                for fdb in ns.fdb:
                    pl.ensure_fdb(fdb)


def _ensure_device(lk: NsLink, itf: Interface) -> None:
    if itf.kind == "bridge":
        lk.ensure_bridge(itf)
    elif itf.kind == "dummy":
        lk.ensure_dummy(itf)


def _addr(itf: Interface) -> IPv4Interface:
    if not itf.addresses:
        raise BackendError(f"{itf.name}: no address")
    return itf.addresses[0]


def _model_result(pod: Netns) -> CniResult:
    eth0 = pod.interface("eth0")
    gw = next((r.via for r in pod.routes if r.dst == DEFAULT_ROUTE and r.via), None)
    if gw is None or eth0.peer is None:
        raise BackendError(f"{pod.name}: no default route or host veth in the model")
    addr = _addr(eth0)
    return CniResult(
        ip=addr.ip,
        prefixlen=addr.network.prefixlen,
        gateway=IPv4Address(str(gw)),
        host_veth=eth0.peer[1],
        mac=eth0.mac,
    )


def _sysctls_and_hairpin(
    network: ClusterNetwork,
    kernel: Mapping[str, str],
    mode: HairpinMode,
    backend: rules.IptablesBackend = "nft",
) -> Literal["br-netfilter", "masquerade"]:
    nodes = [ns for ns in network.namespaces.values() if ns.role == "node"]
    have_brnf = all(nsenter.read_sysctl(kernel[n.name], BRIDGE_NF) is not None for n in nodes)
    if mode == "br-netfilter" and not have_brnf:
        raise BackendError(f"hairpin=br-netfilter: {BRIDGE_NF} missing (br_netfilter not loaded)")
    chosen: Literal["br-netfilter", "masquerade"] = (
        "br-netfilter" if mode == "br-netfilter" or (mode == "auto" and have_brnf) else "masquerade"
    )
    for logical, ns in network.namespaces.items():
        for key, value in ns.sysctls:
            if key == BRIDGE_NF:
                if nsenter.read_sysctl(kernel[logical], key) is None:
                    continue
                value = "1" if chosen == "br-netfilter" else "0"
            nsenter.write_sysctl(kernel[logical], key, value)
    if chosen == "masquerade":
        for n in nodes:
            if any(i.name == "cni0" for i in n.interfaces):
                install_hairpin_masquerade(kernel[n.name], _pod_cidr(n), backend)
    return chosen


def install_hairpin_masquerade(
    netns: str, pod_cidr: IPv4Network, backend: rules.IptablesBackend = "nft"
) -> None:
    """The no-br_netfilter fallback (module docstring): masquerade DNATed pod-to-pod
    traffic leaving through ``cni0``, in svclab's own nat chain on ``backend``.
    Idempotent."""
    rules.ensure_jumps(netns, [HAIRPIN_JUMP], backend=backend)
    rules.load_iptables(
        netns,
        f"*nat\n:{HAIRPIN_CHAIN} - [0:0]\n"
        f"-A {HAIRPIN_CHAIN} -s {pod_cidr} -d {pod_cidr} -o cni0 -m conntrack --ctstate DNAT"
        " -j MASQUERADE\nCOMMIT\n",
        jumps=None,
        backend=backend,
    )


# ---------------------------------------------------------------------------- teardown
@dataclass(frozen=True, slots=True)
class Removed:
    """What a teardown or cleanup removed."""

    namespaces: tuple[str, ...]
    processes: tuple[int, ...]
    root_links: tuple[str, ...]
    state_dirs: tuple[str, ...]


def teardown(cluster: RealCluster | str) -> Removed:
    """Remove a realised cluster: its pod servers, every namespace with its prefix (the
    kernel deletes the veths, bridges and VXLAN devices in them), its state dir (CNI
    results, host-local's IPAM data, pid files). Pods are not CNI-DELeted one by one: the
    IPAM store goes with the state dir, as when a node is destroyed. Tolerates a
    partially realised or already removed cluster."""
    cid = cluster if isinstance(cluster, str) else cluster.cluster_id
    return cleanup(cid)


@dataclass(frozen=True, slots=True)
class CleanupPlan:
    """What :func:`cleanup` would remove: namespaces and cluster state dirs."""

    namespaces: tuple[str, ...]
    state_dirs: tuple[Path, ...]


def cleanup_plan(cluster_id: str | None = None, *, force: bool = False) -> CleanupPlan:
    """Decide what :func:`cleanup` removes, without removing anything.

    A named cluster: all its namespaces and its state dir. Every cluster (``None``):
    every ``svclab-`` namespace and state dir, except (unless ``force``) persistent
    clusters and what another process that is still alive created (a parallel test
    session, a running lab): see :func:`dataplane.linux.netns.held`."""
    if cluster_id is not None:
        prefix = ClusterNames(cluster_id).prefix
        names = [n for n in list_ours(include_held=True) if n.startswith(prefix)]
        return CleanupPlan(tuple(names), (StateDir.of(cluster_id).root,))
    names = list_ours(include_held=force)
    held = set() if force else set(list_ours(include_held=True)) - set(names)
    dirs = [
        d
        for d in state.all_state_dirs()
        if force
        or not (
            StateDir(d).persistent_marker.exists()
            or any(n.startswith(f"{PREFIX}{d.name}-") for n in held)
        )
    ]
    return CleanupPlan(tuple(names), tuple(dirs))


def cleanup(cluster_id: str | None = None, *, force: bool = False) -> Removed:
    """Remove what :func:`cleanup_plan` lists, in this order: pod servers (by pid file);
    any other process still inside one of the namespaces; interfaces of this process's
    namespace whose veth peer is in one of them; the namespaces; the state dirs (CNI
    results, host-local's IPAM data). Tolerates anything already gone."""
    plan = cleanup_plan(cluster_id, force=force)
    for d in plan.state_dirs:
        servers.shutdown_dir(d / "servers")
    killed = kill_processes_in(plan.namespaces)
    root_links = remove_root_peers(plan.namespaces)
    for n in plan.namespaces:
        nsenter.remove_netns(n)
        dnspods.remove_resolv_conf(n)  # /etc/netns/<n>: the pod's resolv.conf
    removed_dirs = []
    for d in plan.state_dirs:
        if d.exists():
            shutil.rmtree(d, ignore_errors=True)
            removed_dirs.append(str(d))
    return Removed(plan.namespaces, tuple(killed), tuple(root_links), tuple(removed_dirs))


def kill_processes_in(namespaces: Iterable[str], *, timeout: float = 5) -> list[int]:
    """SIGKILL every process (except this one) whose network namespace is one of
    ``namespaces``; wait until they are gone. Returns their pids."""
    inodes = {i for i in (nsenter.inode(n) for n in namespaces) if i is not None}
    if not inodes:
        return []
    victims = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                os.kill(int(entry), signal.SIGKILL)
                victims.append(int(entry))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    deadline = time.monotonic() + timeout
    pending = list(victims)
    while pending and time.monotonic() < deadline:
        pending = [p for p in pending if _running(p)]
        if pending:
            time.sleep(0.01)
    return victims


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def remove_root_peers(namespaces: Sequence[str]) -> list[str]:
    """Delete the interfaces of *this* process's namespace whose veth peer lives in one
    of ``namespaces`` (svclab never creates such a thing; a crashed tool might have).
    Returns their names."""
    if not namespaces:
        return []
    gone = []
    with IPRoute() as ipr:
        nsids = set()
        for n in namespaces:
            try:
                fd = os.open(nsenter.netns_path(n), os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                info = ipr.get_netnsid(fd=fd)
            finally:
                os.close(fd)
            if info and info.get("nsid") is not None and info["nsid"] >= 0:
                nsids.add(info["nsid"])
        if not nsids:
            return []
        for lk in ipr.get_links():
            if lk.get_attr("IFLA_LINK_NETNSID") in nsids:
                with tolerate(errno.ENODEV, errno.ENOENT):
                    ipr.link("del", index=lk["index"])
                gone.append(str(lk.get_attr("IFLA_IFNAME")))
    return gone
