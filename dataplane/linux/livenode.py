"""A realised cluster's nodes followed live: what a node's kube-proxy loads into the
node's namespace, sync after sync, and the record of the pods its kubelet attaches.

:class:`NodeRuleLoader` loads each kube-proxy sync as upstream kube-proxy does on a
node:

* iptables mode: on a full sync, kube-proxy's jump rules from the built-in chains are
  ensured first (``EnsureChain``/``EnsureRule``: :func:`dataplane.linux.rules.ensure_jumps`),
  then the payload goes to ``iptables-{nft,legacy}-restore --noflush`` unchanged: a full
  payload declares (so flushes) and fills every kube-proxy chain and deletes the stale
  ones (``-X``); a partial one only the changed services' chains. Chains of others in
  the same tables (the ``portmap`` plugin's ``CNI-HOSTPORT-*``, svclab's hairpin
  ``SVCLAB-*``) are never named, so they are kept, as on a real node;
* nftables mode: the render's ``cleanup_input`` (when it deletes stale chains) then its
  ``restore_input``, each one ``nft -f`` transaction;
* IPVS mode is refused (no IPVS in this kernel).

:meth:`NodeRuleLoader.existing_chains` is what the kernel holds: read from it on a
node's first sync (kube-proxy restarted over a node that already has rules: the chains
of Services gone meanwhile are deleted by that first sync), then kept from what each
load leaves (the render says it); a failed load makes the next call read the kernel
again.

:class:`NodePolicyLoader` loads each NetworkPolicy agent sync (kube-router's layout) into
the node's namespace: ipsets, then the filter-table payload with ``--noflush`` (stale
policy chains deleted, jumps from the built-in chains ensured once), then stale policy
ipsets destroyed (:func:`dataplane.linux.policyrules.load_policy`), on the cluster's
iptables back end, as kube-proxy's rules are.

:func:`record_pod` / :func:`forget_pod` keep the realised cluster's record
(``/run/svclab/<id>/cluster.json``: namespaces, pods and their nodes) current as pods
come and go, under a lock file, so that exec, logs and traffic commands in other
processes find each pod's namespace.
"""

from __future__ import annotations

import contextlib
import fcntl
import re
import threading
from collections.abc import Collection, Iterator

from dataplane.linux import policyrules, rules
from dataplane.linux.cni import CniResult
from dataplane.linux.names import ClusterNames
from dataplane.linux.netns import run_in
from dataplane.linux.realize import RealCluster, realize_nodes
from dataplane.linux.state import StateDir
from dataplane.netpol.kuberouter import PolicyRules
from dataplane.proxy import IptablesRender
from dataplane.proxy.ipvs import IpvsRender
from dataplane.proxy.naming import is_service_chain
from dataplane.proxy.nftables import TABLE, NftablesRender
from netmodel.errors import BackendError
from netmodel.network import ClusterNetwork

_NFT_OBJECT = re.compile(r'^\s*(?:chain|set|map)\s+("?)([^"\s]+)\1\s*\{', re.M)
_DECLARED = re.compile(r"^:(\S+) ", re.M)


class NodeRuleLoader:
    """Loads kube-proxy syncs into the node namespaces of cluster ``cluster_id`` on
    iptables back end ``backend`` (see the module docstring). Safe for one kube-proxy
    thread per node at once. ``loads`` counts the loads done per node."""

    def __init__(self, cluster_id: str, backend: rules.IptablesBackend = "nft") -> None:
        rules.restore_tool(backend)
        self.names = ClusterNames(cluster_id)
        self.backend: rules.IptablesBackend = backend
        self._chains: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()
        self.loads: dict[str, int] = {}

    def netns(self, node: str) -> str:
        return self.names.netns(f"node/{node}")

    def load(
        self,
        node: str,
        mode: str,
        rendered: IptablesRender | NftablesRender | IpvsRender,
        *,
        full: bool,
    ) -> None:
        """Load one sync of ``node``'s kube-proxy (module docstring). BackendError with
        the tool's first error line when the kernel refuses it."""
        netns = self.netns(node)
        with self._lock:
            self._chains.pop(node, None)  # known again only once this load succeeded
        if isinstance(rendered, IptablesRender):
            if full:
                rules.ensure_jumps(netns, rendered.jump_rules, backend=self.backend)
            if counters := rules.nfacct_names(rendered.restore_input):
                rules.ensure_nfacct(netns, counters)
            run_in(
                netns, [rules.restore_tool(self.backend), "--noflush"], input=rendered.restore_input
            )
            after = frozenset(rendered.active_chains)
        elif isinstance(rendered, NftablesRender):
            if rendered.cleanup_input:
                rules.load_nft(netns, rendered.cleanup_input)
            rules.load_nft(netns, rendered.restore_input)
            after = frozenset(
                [*(c.name for c in rendered.chains), *(s.name for s in rendered.sets)]
            )
        else:
            raise BackendError(
                f"node {node}: kube-proxy's {mode} mode cannot be loaded (IPVS is not in "
                "this kernel); use proxyMode iptables or nftables"
            )
        with self._lock:
            self._chains[node] = after
            self.loads[node] = self.loads.get(node, 0) + 1

    def existing_chains(self, node: str) -> Collection[str]:
        """The kube-proxy chains ``node`` holds: per-service nat chains (iptables), or
        the chains and sets of the ``kube-proxy`` table (nftables); read from the
        kernel unless the last load here said."""
        with self._lock:
            known = self._chains.get(node)
        if known is not None:
            return known
        return kernel_chains(self.netns(node), self.backend)


class NodePolicyLoader:
    """Loads NetworkPolicy agent syncs into the node namespaces of cluster
    ``cluster_id`` on iptables back end ``backend`` (module docstring). Safe for one
    agent thread per node at once. ``loads`` counts the loads done per node, and
    ``last`` keeps each node's last rules loaded (what :func:`policy_hits` maps
    counters through)."""

    def __init__(self, cluster_id: str, backend: rules.IptablesBackend = "nft") -> None:
        rules.restore_tool(backend)
        self.names = ClusterNames(cluster_id)
        self.backend: rules.IptablesBackend = backend
        self._lock = threading.Lock()
        self.loads: dict[str, int] = {}
        self.last: dict[str, PolicyRules] = {}

    def netns(self, node: str) -> str:
        return self.names.netns(f"node/{node}")

    def load(self, node: str, rules_: PolicyRules | None) -> None:
        """Load one sync of ``node``'s policy agent (None: no policy rules at all).
        BackendError with the tool's first error line when the kernel refuses it."""
        with self._lock:
            self.last.pop(node, None)  # known again only once this load succeeded
        if rules_ is None:
            policyrules.load_policy(self.netns(node), None, backend=self.backend)
        else:
            policyrules.load_policy(
                self.netns(node), rules_.filter, rules_.ipsets, backend=self.backend
            )
        with self._lock:
            if rules_ is not None:
                self.last[node] = rules_
            self.loads[node] = self.loads.get(node, 0) + 1

    def release(self, node: str) -> None:
        with self._lock:
            self.loads.pop(node, None)
            self.last.pop(node, None)


def kernel_chains(netns: str, backend: rules.IptablesBackend = "nft") -> frozenset[str]:
    """The kube-proxy chains ``netns`` holds: the per-service chains (``KUBE-SVC-``,
    ``KUBE-SEP-``, ...) of its nat table, and the chains and sets of its nftables
    ``kube-proxy`` table (either may be absent)."""
    save = rules.iptables_save(netns, counters=False, table="nat", backend=backend)
    out = {c for c in _DECLARED.findall(save) if is_service_chain(c)}
    if backend == "nft":
        listing = run_in(netns, ["nft", "list", "table", "ip", TABLE], check=False)
        if listing.returncode == 0:
            out.update(m.group(2) for m in _NFT_OBJECT.finditer(listing.stdout))
    return frozenset(out)


# ---------------------------------------------------------------------------- pods


@contextlib.contextmanager
def _cluster_record(cluster_id: str) -> Iterator[RealCluster]:
    """The cluster's record, loaded under its lock file and saved on exit."""
    st = StateDir.of(cluster_id)
    if not st.root.is_dir():
        raise BackendError(f"cluster {cluster_id}: not realised (no state)")
    with (st.root / "cluster.lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        cluster = RealCluster.load(cluster_id)
        yield cluster
        cluster.save()


def realise_nodes(cluster_id: str, network: ClusterNetwork) -> tuple[list[str], list[str]]:
    """:func:`dataplane.linux.realize.realize_nodes` of ``network`` (no pods) for the
    realised cluster ``cluster_id``, under its record's lock, the record saved after.
    Returns (node namespaces added, released)."""
    with _cluster_record(cluster_id) as c:
        return realize_nodes(network, c)


def record_pod(cluster_id: str, node: str, pod_key: str, result: CniResult) -> None:
    """Note in the cluster's record that pod ``pod_key`` runs on ``node`` with
    ``result`` (its namespace named as the CNI runner made it)."""
    with _cluster_record(cluster_id) as c:
        c.namespaces[f"pod/{pod_key}"] = c.names.netns(f"pod/{pod_key}")
        c.pods[pod_key] = result
        c.pod_nodes[pod_key] = node


def forget_pod(cluster_id: str, pod_key: str) -> None:
    """Drop pod ``pod_key`` from the cluster's record (no error if it is not there)."""
    with _cluster_record(cluster_id) as c:
        c.namespaces.pop(f"pod/{pod_key}", None)
        c.pods.pop(pod_key, None)
        c.pod_nodes.pop(pod_key, None)


__all__ = [
    "NodePolicyLoader",
    "NodeRuleLoader",
    "forget_pod",
    "kernel_chains",
    "realise_nodes",
    "record_pod",
]
