"""The kernel's nodes for the live control plane: :class:`RealNodeHost`, the
:class:`control.nodehost.NodeHost` of the real cluster ``svclab up --real`` built from
a state directory (``svclab serve --real`` hands it to the live control plane).

Each node's kubelet gets :class:`RealPodNetwork`: CNI ADD through the real ``bridge`` +
``host-local`` plugins in the node's namespace (:class:`app.realnet.RealCNI`, its
addresses chosen by the emulated allocator and handed to host-local, so that both
backends agree by construction), then the pod's server started (the real pod server
of :mod:`dataplane.linux.podserver`, on the pod's TCP and UDP containerPorts, gRPC's
health service on its ``grpc`` probes' ports, in the node's server process, as ``up --real`` starts them), and the realised cluster's record
updated (so exec, logs and ``connect --real`` find the pod); on delete, the server
stopped, CNI DEL, the record updated.

Each node's kube-proxy gets the cluster's :class:`dataplane.linux.livenode.NodeRuleLoader`:
partial ``iptables-restore --noflush`` syncs (jump rules ensured on full syncs) or
nft transactions, into the node's namespace.

Each node's NetworkPolicy agent gets the cluster's
:class:`dataplane.linux.livenode.NodePolicyLoader`: kube-router's ipsets and filter
chains, loaded into the node's namespace on every sync.

Adoption (what ``serve --real`` finds in the kernel): pods ``up --real`` realised keep
their namespace and address — the kubelet re-learns running pods from their
``status.podIP`` (CNI ``restore``: the allocator learns them, no plugin runs) and only
ADDs pods that have no sandbox yet; and each kube-proxy's first sync is a full sync
over the rules ``up`` loaded (the same text: chains rewritten in place, conntrack
entries and pods untouched), as upstream kube-proxy does when it restarts on a node.

Nodes follow the cluster (:class:`RealNodeFollower`, run by ``svclab serve --real``
beside the components): a Node created later gets its namespace, links and routes
once it has an InternalIP and a podCIDR (its pods' sandboxes fail and are retried
until then); a deleted Node's namespace and its pods are removed.

Limits: a Node added after a lower-named one was deleted is refused (the router's
port names follow the nodes' order); clusters whose pods svclab
lays out itself (``--cni netlink``, Calico) are refused; a DNS pod started live gets a
pod server, not a DNS server.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable
from ipaddress import IPv4Network
from pathlib import Path

from app.real import NoRealCluster, RealRecord
from app.realnet import RealCNI
from app.realprober import RealProber
from control.agents.kubeproxy import RuleSink
from control.agents.netpolicy import PolicySink
from control.agents.network import NetworkPlugin, PodNetworkResult
from control.agents.probes import Prober
from dataplane.linux.livenode import (
    NodePolicyLoader,
    NodeRuleLoader,
    forget_pod,
    realise_nodes,
    record_pod,
)
from dataplane.linux.realize import RealCluster
from dataplane.linux.servers import PodServers, Proto, ServerSpec
from netmodel import podports
from netmodel.cluster import ClusterSpec
from netmodel.errors import BackendError
from netmodel.network import ClusterNetwork
from netmodel.objects import Node, Pod
from netmodel.topology import build, node_info, spec_blocks


def pod_ports(pod: Pod) -> tuple[tuple[int, Proto], ...]:
    """The TCP and UDP ports the pod's server listens on (:func:`netmodel.podports.listening`:
    its containerPorts and its probes' ports; SCTP has no real server, as with
    ``up --real``)."""
    out: set[tuple[int, Proto]] = set()
    for proto, port in podports.listening(pod):
        if proto == "tcp":
            out.add((port, "tcp"))
        elif proto == "udp":
            out.add((port, "udp"))
    return tuple(sorted(out))


class RealPodNetwork:
    """One cluster's kubelet network plugin on the kernel (module docstring): CNI ADD/DEL
    through :class:`RealCNI` plus the pod's server and the cluster's record."""

    def __init__(self, cluster: RealCluster) -> None:
        self.cluster_id = cluster.cluster_id
        self.cni = RealCNI(cluster.cluster_id, ipam="emulated", mtu=cluster.mtu)
        self.servers = PodServers(cluster.cluster_id)
        #: the kubelet runs evaluated commands for real, in the pod's namespace
        self.container_runtime = self.cni.container_runtime

    def add(self, node: Node, pod: Pod) -> PodNetworkResult:
        res = self.cni.add(node, pod)
        try:
            cached = self.cni.runner.cached(pod.key)
            if cached is None:  # pragma: no cover - the runner caches every ADD
                raise BackendError(f"pod {pod.key}: CNI ADD left no result")
            record_pod(self.cluster_id, node.name, pod.key, cached)
            ports = pod_ports(pod)
            if ports:
                grpc = tuple(sorted(podports.grpc_ports(pod)))
                self.servers.start([ServerSpec(pod.key, ports, f"node/{node.name}", grpc)])
        except BaseException:
            self.delete(node, pod)
            raise
        return res

    def delete(self, node: Node, pod: Pod) -> None:
        self.servers.stop([pod.key])
        self.cni.delete(node, pod)
        forget_pod(self.cluster_id, pod.key)

    def restore(self, node: Node, pods: Iterable[Pod]) -> None:
        self.cni.restore(node, pods)

    def remove_orphans(self, node: Node, keep: Collection[str]) -> list[str]:
        """Tear down every sandbox held on ``node`` whose pod key is not in ``keep``
        (:class:`control.agents.network.SandboxCollector`): the pods CNI ADD attached
        there (the runner's cached results, what the kernel holds) and the pods the
        cluster's record places there; each one's server stopped, CNI DEL (host-local's
        reservation freed, the namespace removed), the record updated."""
        attached = {
            k: cidr for k, (n, cidr) in self.cni.runner.attached().items() if n == node.name
        }
        recorded = {
            k for k, n in RealCluster.load(self.cluster_id).pod_nodes.items() if n == node.name
        }
        orphans = sorted((set(attached) | recorded) - set(keep))
        if not orphans:
            return []
        self.servers.stop(orphans)
        for key in orphans:
            if key in attached:
                self.cni.runner.delete(node.name, key, attached[key])
            forget_pod(self.cluster_id, key)
        return orphans


class RealNodeHost:
    """The :class:`~control.nodehost.NodeHost` of the real cluster of ``state_dir``
    (``svclab up --real`` must have built it: :class:`app.real.NoRealCluster`
    otherwise; ``BackendError`` for a cluster whose pods the real plugins do not
    attach). One network plugin for all nodes (the address model is per node inside
    it), one rule loader and one policy loader; ``release`` forgets nothing the kernel keeps."""

    #: LiveControlPlane feeds a cluster-wide IPAM table only for Calico (refused here)
    calico = None

    def __init__(self, state_dir: Path, cluster: ClusterSpec) -> None:
        record = RealRecord.read(state_dir)
        if record is None or record.status != "up":
            raise NoRealCluster(
                f"{state_dir}: no real cluster up here (run 'svclab up --real' first)"
            )
        if cluster.cni == "calico" or record.cni != "bridge-plugin":
            raise BackendError(
                f"real cluster {record.cluster_id}: live nodes attach pods through the real "
                f"CNI bridge plugin; this cluster's pods are laid out by svclab itself "
                f"(cni {'calico' if cluster.cni == 'calico' else record.cni})"
            )
        try:
            real = RealCluster.load(record.cluster_id)
        except BackendError as e:
            raise NoRealCluster(f"{state_dir}: {e} (run 'svclab up --real' again)") from None
        self.cluster_id = record.cluster_id
        self.plugin = RealPodNetwork(real)
        self.rules = NodeRuleLoader(record.cluster_id, real.iptables_backend)
        self.policies = NodePolicyLoader(record.cluster_id, real.iptables_backend)
        self._lock = threading.Lock()
        #: probes are real connections from the node's namespace (app.realprober)
        self._prober = RealProber(state_dir, cluster)

    def network_plugin(self, node: str) -> NetworkPlugin:
        return self.plugin

    def rule_sink(self, node: str) -> RuleSink:
        return self.rules

    def policy_sink(self, node: str) -> PolicySink:
        return self.policies

    def prober(self, node: str) -> Prober:
        return self._prober

    def release(self, node: str) -> None:
        with self._lock:
            self.rules.loads.pop(node, None)
        self.policies.release(node)


def nodes_network(
    spec: ClusterSpec, nodes: Iterable[Node], external_clients: Iterable[str] = ()
) -> ClusterNetwork:
    """The network :func:`app.emulation.view` builds for these Nodes, without pods (the
    kubelets attach those): every Node with an InternalIP, in name order (the store's,
    which ``up --real`` followed)."""
    infos = [
        node_info(n.name, n.internal_ips[0], n.spec.pod_cidr)
        for n in sorted(nodes, key=lambda n: n.name)
        if n.internal_ips
    ]
    owned = {str(i.ip) for i in infos}
    node_net = spec.node_net
    if not isinstance(node_net, IPv4Network):
        raise BackendError("real nodes: the node network must be IPv4")
    return build(
        node_net,
        infos,
        [],
        overlay=spec.overlay,
        external_clients=sorted({c for c in external_clients if c not in owned}),
        cni=spec.cni,
        blocks=spec_blocks(spec, infos, []),
    )


class RealNodeFollower:
    """The kernel's nodes follow the cluster's Nodes while ``svclab serve --real`` runs
    (one per server, beside the supervisor or the threads): a Node that appears gets its
    namespace, links and routes (and the other nodes their routes to it), as ``up --real``
    builds them, once it has an InternalIP and a podCIDR; a deleted Node's namespace and
    the pods recorded on it are removed (:func:`dataplane.linux.realize.realize_nodes`).
    Until then its kubelet's sandboxes and kube-proxy's loads fail and are retried."""

    def __init__(self, state_dir: Path, spec: ClusterSpec) -> None:
        record = RealRecord.read(state_dir)
        if record is None:
            raise NoRealCluster(f"{state_dir}: no real cluster up here")
        self.cluster_id = record.cluster_id
        self.external_clients = record.external_clients
        self.spec = spec
        self._lock = threading.Lock()

    def follow(self, nodes: Iterable[Node]) -> tuple[list[str], list[str]]:
        """Make the kernel's nodes those of ``nodes`` (every Node the API holds); a new
        Node without a podCIDR yet waits for the next call. Returns (node namespaces
        added, released)."""
        with self._lock:
            realised = set(RealCluster.load(self.cluster_id).namespaces)
            ready = [
                n
                for n in nodes
                if f"node/{n.name}" in realised or (n.spec.pod_cidr and n.internal_ips)
            ]
            network = nodes_network(self.spec, ready, self.external_clients)
            return realise_nodes(self.cluster_id, network)


__all__ = ["RealNodeFollower", "RealNodeHost", "RealPodNetwork", "nodes_network", "pod_ports"]
