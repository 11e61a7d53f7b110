"""The kernel's nodes for the live control plane: :class:`RealNodeHost`, the
:class:`control.nodehost.NodeHost` of the real cluster ``svclab up --real`` built from
a state directory (``svclab serve --real`` hands it to the live control plane).

Each node's kubelet gets :class:`RealPodNetwork`: CNI ADD through the real ``bridge`` +
``host-local`` plugins in the node's namespace (:class:`app.realnet.RealCNI`, its
addresses chosen by the emulated allocator and handed to host-local, so that both
backends agree by construction), then the pod's server started (the real pod server
of :mod:`dataplane.linux.podserver`, on the pod's TCP and UDP containerPorts, in the
node's server process, as ``up --real`` starts them), and the realised cluster's record
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

Limits: nodes are the ones realised when the host was made (a Node created later has
no namespace: its pods' sandboxes fail and are retried); clusters whose pods svclab
lays out itself (``--cni netlink``, Calico) are refused; a DNS pod started live gets a
pod server, not a DNS server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from app.real import NoRealCluster, RealRecord
from app.realnet import RealCNI
from app.realprober import RealProber
from control.agents.kubeproxy import RuleSink
from control.agents.netpolicy import PolicySink
from control.agents.network import NetworkPlugin, PodNetworkResult
from control.agents.probes import Prober
from dataplane.linux.livenode import NodePolicyLoader, NodeRuleLoader, forget_pod, record_pod
from dataplane.linux.realize import RealCluster
from dataplane.linux.servers import PodServers, Proto, ServerSpec
from netmodel import podports
from netmodel.cluster import ClusterSpec
from netmodel.errors import BackendError
from netmodel.objects import Node, Pod


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
                self.servers.start([ServerSpec(pod.key, ports, f"node/{node.name}")])
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


__all__ = ["RealNodeHost", "RealPodNetwork", "pod_ports"]
