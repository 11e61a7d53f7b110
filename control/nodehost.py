"""Where a node's agents act: the seam between a node's kubelet and kube-proxy and the
dataplane they program.

A :class:`NodeHost` hands each node's agents what they act on:

- ``network_plugin(node)``: the kubelet's CNI (:class:`~control.agents.network.NetworkPlugin`):
  ADD when it creates a pod's sandbox, DEL when it tears it down;
- ``rule_sink(node)``: the kube-proxy's :class:`~control.agents.kubeproxy.RuleSink`,
  where every sync's rules are loaded;
- ``policy_sink(node)``: the NetworkPolicy agent's
  :class:`~control.agents.netpolicy.PolicySink`, where every sync's policy rules are
  loaded;
- ``prober(node)``: the kubelet's :class:`~control.agents.probes.Prober`, which runs
  its containers' probes against the pods;
- ``release(node)``: the node's agents stopped (its Node was deleted, or its process is
  going away): what the host keeps for that node may go.

:class:`EmulatedNodeHost` is the emulator's: the emulated CNI (one table for the whole
cluster with Calico, whose IPAM is cluster-wide; one per node for bridge + host-local)
and one :class:`~control.agents.kubeproxy.EmulatedRules` and one
:class:`~control.agents.netpolicy.EmulatedPolicies` (the last policy rules each node
loaded) for every node. The kernel's
host lives in the application layer (the control plane drives no backend), and is
given to the live control plane by whoever composes it.

Contract: the same ``node`` always gets the same plugin and sinks until ``release``;
calls may come from several threads at once.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from control.agents.emulatedprober import EmulatedProber
from control.agents.kubeproxy import EmulatedRules, RuleSink
from control.agents.netpolicy import EmulatedPolicies, PolicySink
from control.agents.network import EmulatedCNI, NetworkPlugin
from control.agents.probes import Prober
from netmodel.cluster import ClusterSpec


class NodeHost(Protocol):
    """What one node's kubelet, kube-proxy and policy agent act on (see the module
    docstring)."""

    def network_plugin(self, node: str) -> NetworkPlugin: ...

    def rule_sink(self, node: str) -> RuleSink: ...

    def policy_sink(self, node: str) -> PolicySink: ...

    def prober(self, node: str) -> Prober: ...

    def release(self, node: str) -> None: ...


class EmulatedNodeHost:
    """The emulator's nodes, in this process's memory. ``health_root``: where the pods'
    health flags are kept (:mod:`netmodel.podhealth`; a served cluster's
    ``DIR/pods/health``, shared with the CLI and the API server; None: the process's
    configured root)."""

    def __init__(self, cluster: ClusterSpec, *, health_root: Path | None = None) -> None:
        self.rules = EmulatedRules()
        self.policies = EmulatedPolicies()
        self._prober = EmulatedProber(health_root)
        #: Calico's IPAM is cluster-wide: one table of every pod's address, which the
        #: owner feeds with the pods it sees (:meth:`EmulatedCNI.note`)
        self.calico: EmulatedCNI | None = (
            EmulatedCNI(calico=True) if cluster.cni == "calico" else None
        )
        self._plugins: dict[str, EmulatedCNI] = {}
        self._lock = threading.Lock()

    def network_plugin(self, node: str) -> NetworkPlugin:
        if self.calico is not None:
            return self.calico
        with self._lock:
            plugin = self._plugins.get(node)
            if plugin is None:
                plugin = self._plugins[node] = EmulatedCNI()
            return plugin

    def rule_sink(self, node: str) -> RuleSink:
        return self.rules

    def policy_sink(self, node: str) -> PolicySink:
        return self.policies

    def prober(self, node: str) -> Prober:
        return self._prober

    def release(self, node: str) -> None:
        with self._lock:
            self._plugins.pop(node, None)
        self.rules.nodes.pop(node, None)
        self.policies.release(node)


__all__ = ["EmulatedNodeHost", "NodeHost"]
