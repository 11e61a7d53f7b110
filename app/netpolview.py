"""NetworkPolicy in the emulated cluster: the policy agent's rules on every node, read
from the store, and the hops that name a policy verdict in a trace.

* :func:`policy_agent` reads the stored NetworkPolicies, ClusterNetworkPolicies,
  Namespaces and Pods once and answers each node's kube-router rules, with svclab's
  ClusterNetworkPolicy tiers (:func:`dataplane.netpol.clusterpolicy.node_rules`), when
  first asked (so the lazy per-node path stays lazy); None when the cluster holds
  neither kind of policy.
* :func:`attribute` adds, after each rule of a trace that decides a policy verdict, a
  ``netpol`` hop naming the policy and rule: the text
  :meth:`netmodel.netpolicy.Decision.describe` gives, so a trace agrees with
  :func:`netmodel.netpolicy.decide` word for word.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from control.agents.netpolicy import policy_pod
from control.apiserver import crds
from dataplane.emulator.trace import Hop, Trace
from dataplane.netpol import PolicyRules, RuleOrigin
from dataplane.netpol.clusterpolicy import node_rules
from netmodel import clusterpolicy, kinds
from netmodel.clusterpolicy import ClusterNetworkPolicy
from netmodel.customresources import CRD_KIND
from netmodel.netpolicy import (
    Direction,
    NetworkPolicy,
    PolicyPod,
    policy_from_wire,
    selects,
)
from netmodel.objects import KubeObject

#: the rule that closes one pod chain's pass (the verdict's rules come before it)
_RESET = "-j MARK --set-xmark 0x0/0x10000"


class PolicyAgent:
    """kube-router on every node of one cluster state: ``rules(node)`` rendered when
    first asked and kept; ``origin(node, chain, rule)`` what a rendered rule stands
    for."""

    def __init__(
        self,
        pods: Sequence[PolicyPod],
        policies: Sequence[NetworkPolicy],
        namespaces: Mapping[str, Mapping[str, str]],
        service_cidrs: Sequence[str],
        node_ips: Mapping[str, str],
        cluster_policies: Sequence[ClusterNetworkPolicy] = (),
    ) -> None:
        self.pods = pods
        self.policies = policies
        self.cluster_policies = cluster_policies
        self.namespaces = namespaces
        self.service_cidrs = tuple(service_cidrs)
        self.node_ips = node_ips
        self._rules: dict[str, PolicyRules] = {}

    def rules(self, node: str) -> PolicyRules:
        got = self._rules.get(node)
        if got is None:
            rendered = node_rules(
                node,
                self.node_ips.get(node, ""),
                self.pods,
                self.policies,
                self.cluster_policies,
                self.namespaces,
                service_cidrs=self.service_cidrs,
            )
            assert rendered is not None, "an agent is made only for a cluster with policies"
            got = self._rules[node] = rendered
        return got

    def guarded(self) -> frozenset[str]:
        """The addresses of the pods some policy isolates for ingress, or some
        ClusterNetworkPolicy with ingress rules applies to (for
        :attr:`netmodel.view.ClusterView.guarded`)."""
        ingress: dict[str, list[NetworkPolicy]] = {}
        for pol in self.policies:  # a policy selects pods of its own namespace only
            if "ingress" in pol.types:
                ingress.setdefault(pol.namespace, []).append(pol)
        cnps = [c for c in self.cluster_policies if c.ingress]
        return frozenset(
            str(pod.ip)
            for pod in self.pods
            if any(selects(pol, pod) for pol in ingress.get(pod.namespace, ()))
            or any(c.subject.selects(pod, self.namespaces) for c in cnps)
        )

    def origin(self, node: str, chain: str, rule: str) -> RuleOrigin | None:
        """What ``rule`` (``-A CHAIN ...`` or the text after it) of ``chain`` on
        ``node`` stands for; None for a rule that decides nothing (or no such node)."""
        if node not in self.node_ips:
            return None
        spec = rule.removeprefix(f"-A {chain} ")
        return self.rules(node).origins.get((chain, spec))


def read_policies(store: Any) -> list[NetworkPolicy]:
    """Every stored NetworkPolicy, as a value."""
    return [policy_from_wire(o.to_dict()) for o in store.list("NetworkPolicy")]


def cluster_policy_objects(store: Any) -> list[KubeObject]:
    """Every stored ClusterNetworkPolicy object ([] while its CRD is not stored; the
    CRD's kind is registered first when this process has not read it yet)."""
    if clusterpolicy.STORE_KIND not in kinds.KINDS:
        if not any(c.name == clusterpolicy.STORE_KIND for c in store.list(CRD_KIND)):
            return []
        crds.sync(store)
    return list(store.list(clusterpolicy.STORE_KIND))


def read_cluster_policies(store: Any) -> list[ClusterNetworkPolicy]:
    """Every stored ClusterNetworkPolicy, as a value (by name)."""
    return [clusterpolicy.policy_from_wire(o.to_dict()) for o in cluster_policy_objects(store)]


def read_policy_pods(store: Any) -> tuple[list[PolicyPod], dict[str, dict[str, str]]]:
    """Every placed, unfinished pod as policy sees it (the node agent's own reading,
    :func:`control.agents.netpolicy.policy_pod`, so the emulated view and the agents
    render the same), and every namespace's labels."""
    namespaces = {n.name: dict(n.metadata.labels or {}) for n in store.list("Namespace")}
    pods = [pp for p in store.list("Pod") if (pp := policy_pod(p)) is not None]
    return pods, namespaces


def policy_agent(
    store: Any,
    service_cidrs: Sequence[str],
    node_ips: Mapping[str, str],
    derived: Callable[[str, Callable[[], Any]], Any] | None = None,
) -> PolicyAgent | None:
    """The cluster's policy agent, or None when no NetworkPolicy and no
    ClusterNetworkPolicy is stored (then no Pod is read). ``derived``: a cache of values derived from the store while it is
    unchanged (:meth:`control.rulecache.RuleCache.derived`, bound to the store), for
    the pods and namespaces."""
    policies = read_policies(store)
    cluster_policies = read_cluster_policies(store)
    if not policies and not cluster_policies:
        return None
    pods, namespaces = (
        derived("netpol-pods/1", lambda: read_policy_pods(store))
        if derived is not None
        else read_policy_pods(store)
    )
    return PolicyAgent(pods, policies, namespaces, service_cidrs, node_ips, cluster_policies)


# --------------------------------------------------------------------------- traces


def attribute(
    trace: Trace, agent: PolicyAgent | None, node_of: Callable[[str], str | None]
) -> Trace:
    """``trace`` with a ``netpol`` hop after each rule that decides a policy verdict:
    per pod chain pass (from the top-level chain's jump into a ``KUBE-POD-FW-`` chain to
    that chain's mark reset), the first such rule, named as
    :meth:`~netmodel.netpolicy.Decision.describe` names it (with the ClusterNetworkPolicy
    ``Pass`` rules met before it, "passed by", as :func:`netmodel.clusterpolicy.decide`
    names them). The pass's direction is the
    jump's: ``-d POD`` ingress, ``-s POD`` egress. ``node_of``: the node a hop's network
    namespace is (None: not a node). The reply and branches likewise."""
    if agent is None:
        return trace
    hops: list[Hop] = []
    direction: Direction | None = None
    decided = False
    passed: list[str] = []  # ClusterNetworkPolicy Pass rules met in this pass
    for h in trace.hops:
        hops.append(h)
        if h.kind != "rule" or not h.chain or not h.rule:
            continue
        spec = h.rule.removeprefix(f"-A {h.chain} ")
        if h.chain.startswith("KUBE-ROUTER-") and (h.verdict or "").startswith("jump KUBE-POD-FW-"):
            direction = "ingress" if spec.startswith("-d ") else "egress"
            decided = False
            passed = []
            continue
        if direction is None or decided:
            continue
        if h.chain.startswith("KUBE-POD-FW-") and spec == _RESET:
            direction = None
            continue
        node = node_of(h.netns)
        origin = agent.origin(node, h.chain, h.rule) if node else None
        decision = origin.for_direction(direction) if origin is not None else None
        if decision is None:
            continue
        if origin is not None and origin.passes:
            passed.append(f"passed by {decision.policy} {decision.rule}")
            continue
        if passed:
            note = "; ".join(passed)
            decision = replace(decision, reason=f"{decision.reason}; {note}")
        decided = True
        hops.append(
            Hop(
                "netpol",
                h.netns,
                hook=h.hook,
                table=h.table,
                chain=h.chain,
                verdict="ACCEPT" if decision.allowed else "REJECT",
                note=decision.describe(),
            )
        )
    reply = attribute(trace.reply, agent, node_of) if trace.reply is not None else None
    branches = tuple((p, attribute(t, agent, node_of)) for p, t in trace.branches)
    return replace(trace, hops=tuple(hops), reply=reply, branches=branches)


def node_of(netns: str) -> str | None:
    """The node a network namespace of the emulated cluster is (``node/NAME``)."""
    return netns[5:] if netns.startswith("node/") else None


__all__ = [
    "PolicyAgent",
    "attribute",
    "cluster_policy_objects",
    "node_of",
    "policy_agent",
    "read_cluster_policies",
    "read_policies",
    "read_policy_pods",
]
