"""kube-router's NetworkPolicy controller, one per node: watch → render for the node →
load into its sink.

Shape follows kube-router's netpol controller (the one k3s embeds in its agent): it
watches NetworkPolicy, Pod and Namespace objects of the whole cluster (a policy's peers
may be pods of any node and namespaces by label) and its own Node (the node's address,
which kube-router's rules let through to the node's pods); on any change it renders the
node's whole filter-table layout (:func:`dataplane.netpol.clusterpolicy.node_rules`:
the ``KUBE-ROUTER-*`` top chains, ``KUBE-POD-FW-*`` per pod of this node,
``KUBE-NWPLCY-*`` per policy, the ipsets of the peers) and hands it to a
:class:`PolicySink` (the emulated node, or the node's namespace in the kernel).
It also watches ClusterNetworkPolicy (``policy.networking.k8s.io/v1alpha2``), which
kube-router does not support: svclab renders its tiers as its own extension of the
layout (:mod:`dataplane.netpol.clusterpolicy`). While the
cluster holds no NetworkPolicy and no ClusterNetworkPolicy there are no rules (None): the node holds none of
kube-router's chains, as the emulated view has none (its chains would accept all they
see), and the first sync says so to the sink, so that what an earlier run left is
removed. kube-router's every sync is a full sync
(it rewrites its chains and ipsets in one ``iptables-restore`` and deletes stale ones
after), so there is no partial render here.

Pods as policy sees them (:func:`policy_pod`): every pod that holds an address and has
not ended (phase Succeeded or Failed: kube-router leaves finished pods out of its
ipsets), with its labels, node and named container ports; host-network pods carry the
node's address and are never selected (:func:`netmodel.netpolicy.selects`).

Timing (:class:`PolicyPeriods`): with periods (the live planes), a sync never starts
sooner than ``min_sync`` seconds after the previous one (changes arriving meanwhile go
out together), and ``resync`` seconds after the last sync one runs with no change at all
(kube-router's ``--iptables-sync-period``, 5 minutes by default, re-asserts its rules so
that drift in the kernel is repaired). Without periods (the deterministic runner, on its
fake clock) every change is synced at once and nothing is due on time. A render equal
to the one the sink holds is not loaded again, except by the periodic resync.

Every load leaves an Event on the node (reason ``SyncNetworkPolicies``) when the agent
has a recorder.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Protocol

from control.clock import Clock, WallClock
from control.events import Recorder
from dataplane.netpol.clusterpolicy import node_rules
from dataplane.netpol.kuberouter import PolicyRules
from netmodel import clusterpolicy
from netmodel.clusterpolicy import ClusterNetworkPolicy
from netmodel.netpolicy import NetworkPolicy, PolicyPod, named_ports, policy_from_wire
from netmodel.objects import KubeObject, Namespace, Node, Pod

#: the kinds the agent watches (NetworkPolicy, ClusterNetworkPolicy, Pod, Namespace:
#: all of them; Node: its own). ClusterNetworkPolicy by its store kind (the CRD's name).
KINDS = ("NetworkPolicy", clusterpolicy.STORE_KIND, "Pod", "Namespace", "Node")


class PolicySink(Protocol):
    """Where a node's policy agent puts its rules (an emulated node, or the node's
    namespace in the kernel). ``load`` makes the node hold exactly ``rules``: its
    ipsets, then its filter-table chains (a ``--noflush`` restore), the chains and sets
    of an earlier load that ``rules`` no longer has removed; None: none of
    kube-router's chains, jumps and sets at all (the cluster has no policy)."""

    def load(self, node: str, rules: PolicyRules | None) -> None: ...


class EmulatedPolicies:
    """The emulator's sink: the last :class:`PolicyRules` loaded per node (``nodes``; a
    node whose last load was None has no entry), and how many loads each node had
    (``loads``). Safe for one agent thread per node."""

    def __init__(self) -> None:
        self.nodes: dict[str, PolicyRules] = {}
        self.loads: dict[str, int] = {}
        self._lock = threading.Lock()

    def load(self, node: str, rules: PolicyRules | None) -> None:
        with self._lock:
            if rules is None:
                self.nodes.pop(node, None)
            else:
                self.nodes[node] = rules
            self.loads[node] = self.loads.get(node, 0) + 1

    def release(self, node: str) -> None:
        """The node is gone: forget what it held."""
        with self._lock:
            self.nodes.pop(node, None)
            self.loads.pop(node, None)


@dataclass(frozen=True, slots=True)
class PolicyPeriods:
    """The agent's sync timing in seconds (module docstring): ``min_sync`` between two
    syncs, ``resync`` after the last sync with no change (None: never)."""

    min_sync: float = 1.0
    resync: float | None = 300.0


#: the live planes' timing: kube-router's default ``--iptables-sync-period`` (5m) as the
#: periodic resync, and kube-proxy's default minSyncPeriod (1s) between two syncs
LIVE_PERIODS = PolicyPeriods()


def policy_pod(pod: Pod) -> PolicyPod | None:
    """``pod`` as policy sees it, or None when it holds no address (or no node) or has
    ended."""
    ip = pod.status.pod_ip
    if not ip or not pod.spec.node_name or pod.status.phase in ("Succeeded", "Failed"):
        return None
    return PolicyPod(
        namespace=pod.namespace,
        name=pod.name,
        labels=dict(pod.labels),
        ip=ip_address(ip),
        node=pod.spec.node_name or "",
        ports=named_ports(pod.spec.containers),
        host_network=pod.spec.host_network,
    )


class NetworkPolicyAgent:
    """kube-router's netpol controller of ``node_name`` (the runner's Agent protocol:
    kinds / resync / handle / sync; see the module docstring)."""

    kinds = KINDS

    def __init__(
        self,
        node_name: str,
        sink: PolicySink,
        recorder: Recorder | None = None,
        *,
        service_cidrs: Sequence[str] = (),
        clock: Clock | None = None,
        periods: PolicyPeriods | None = None,
    ) -> None:
        self.node_name = node_name
        #: the cluster's Service ranges (kube-router RETURNs traffic to them on INPUT)
        self.service_cidrs = tuple(service_cidrs)
        self.name = f"kube-router/{node_name}"
        self.sink = sink
        self.recorder = recorder
        self.clock: Clock = clock or WallClock()
        #: sync timing (module docstring); None: every change at once, nothing on time
        self.periods = periods
        self._node: Node | None = None
        self._pods: dict[str, PolicyPod] = {}
        self._policies: dict[str, NetworkPolicy] = {}
        self._cluster_policies: dict[str, ClusterNetworkPolicy] = {}
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self._dirty = True
        #: the rules the sink holds from this agent (None: none; see ``loaded``)
        self.last: PolicyRules | None = None
        #: whether the sink holds what ``last`` says (False: nothing loaded yet, or the
        #: last load failed)
        self.loaded = False
        #: clock time of the last sync (None: none yet)
        self.last_sync: float | None = None
        self.syncs = 0
        self.loads = 0

    # ---- Agent protocol

    def resync(self, objs: Iterable[KubeObject]) -> None:
        self._pods.clear()
        self._policies.clear()
        self._cluster_policies.clear()
        self._namespaces.clear()
        self._node = None
        for o in objs:
            self._take(o, deleted=False)
        self._dirty = True

    def handle(self, events: Sequence[object]) -> None:
        for ev in events:
            obj: KubeObject = ev.object  # type: ignore[attr-defined]
            if self._take(obj, deleted=ev.type == "DELETED"):  # type: ignore[attr-defined]
                self._dirty = True

    def _take(self, obj: KubeObject, *, deleted: bool) -> bool:
        """Note one object's new state; whether what the render reads changed."""
        if isinstance(obj, Pod):
            before = self._pods.pop(obj.key, None)
            now = None if deleted else policy_pod(obj)
            if now is not None:
                self._pods[obj.key] = now
            return before != now
        if isinstance(obj, Namespace):
            before_ns = self._namespaces.pop(obj.name, None)
            if not deleted:
                self._namespaces[obj.name] = dict(obj.labels)
            return before_ns != self._namespaces.get(obj.name)
        if isinstance(obj, Node):
            if obj.name != self.node_name:
                return False
            before_ip = self.node_ip
            self._node = None if deleted else obj
            return before_ip != self.node_ip
        if obj.kind == "NetworkPolicy":
            before_pol = self._policies.pop(obj.key, None)
            if not deleted:
                self._policies[obj.key] = policy_from_wire(obj.to_dict())
            return before_pol != self._policies.get(obj.key)
        if obj.store_kind == clusterpolicy.STORE_KIND:
            before_cnp = self._cluster_policies.pop(obj.key, None)
            if not deleted:
                self._cluster_policies[obj.key] = clusterpolicy.policy_from_wire(obj.to_dict())
            return before_cnp != self._cluster_policies.get(obj.key)
        return False

    @property
    def node_ip(self) -> str | None:
        """The node's first InternalIP (None: its Node is not known yet)."""
        if self._node is None:
            return None
        ips = self._node.internal_ips
        return ips[0] if ips else None

    def next_due(self) -> float | None:
        """Clock time at which the agent must sync with no further event (the
        ``min_sync`` hold-off of waiting changes, or the periodic resync); None without
        periods, before the first sync, or with nothing to wait for."""
        p, last = self.periods, self.last_sync
        if p is None or last is None:
            return None
        due = None if p.resync is None else last + p.resync
        if self._dirty:
            held = last + p.min_sync
            due = held if due is None else min(due, held)
        return due

    def render(self) -> PolicyRules | None:
        """The node's rules from what the agent has seen (None: the cluster holds no
        NetworkPolicy and no ClusterNetworkPolicy). The Node must be known
        (:attr:`node_ip`)."""
        node_ip = self.node_ip
        assert node_ip is not None, f"{self.name}: no address for the node yet"
        return node_rules(
            self.node_name,
            node_ip,
            [self._pods[k] for k in sorted(self._pods)],
            [self._policies[k] for k in sorted(self._policies)],
            [self._cluster_policies[k] for k in sorted(self._cluster_policies)],
            self._namespaces,
            service_cidrs=self.service_cidrs,
        )

    def sync(self) -> int:
        """Render and load if anything changed (or the periodic resync is due), unless
        ``min_sync`` holds it off: 1 when it loaded, else 0."""
        now = self.clock.now()
        p, last = self.periods, self.last_sync
        periodic = (
            p is not None and last is not None and p.resync is not None and now >= last + p.resync
        )
        if not self._dirty and not periodic:
            return 0
        if p is not None and last is not None and not periodic and now < last + p.min_sync:
            return 0  # held off: next_due says when
        if self.node_ip is None:
            return 0  # no Node yet: its event makes the agent dirty again
        rules = self.render()
        self._dirty = False
        self.last_sync = now
        self.syncs += 1
        if self.loaded and rules == self.last and not periodic:
            return 0  # the node holds exactly this already
        self.loaded = False
        try:
            self.sink.load(self.node_name, rules)
        except BaseException:
            self._dirty = True  # the next sync tries again
            raise
        self.last, self.loaded = rules, True
        self.loads += 1
        if self.recorder is not None and self._node is not None:
            what = "no rules" if rules is None else f"{len(rules.chains)} chains"
            self.recorder.record(
                "kube-router",
                self._node,
                "SyncNetworkPolicies",
                f"{len(self._policies)} network policies, "
                f"{len(self._cluster_policies)} cluster network policies, "
                f"{len(self._pods)} pods: {what}",
            )
        return 1


__all__ = [
    "KINDS",
    "LIVE_PERIODS",
    "EmulatedPolicies",
    "NetworkPolicyAgent",
    "PolicyPeriods",
    "PolicySink",
    "policy_pod",
]
