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
  :func:`netmodel.netpolicy.decide` word for word. :func:`decisions` gives the same
  verdicts as :class:`~netmodel.netpolicy.Decision` values (what ``connect`` and the
  pod tools report).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from control.agents.netpolicy import policy_pod
from control.apiserver import crds
from control.store.base import scan
from dataplane.emulator.trace import Hop, Trace
from dataplane.netpol import PolicyRules, RuleOrigin
from dataplane.netpol.clusterpolicy import node_rules
from netmodel import clusterpolicy, kinds
from netmodel.clusterpolicy import ClusterNetworkPolicy
from netmodel.customresources import CRD_KIND
from netmodel.netpolicy import (
    Decision,
    Direction,
    NetworkPolicy,
    PolicyPod,
    policy_from_wire,
    selects,
)
from netmodel.objects import KubeObject

#: the rule that closes one pod chain's pass (the verdict's rules come before it)
_RESET = "-j MARK --set-xmark 0x0/0x10000"


#: a cache of values derived from the store while it is unchanged: (name, compute) ->
#: the value (:meth:`control.rulecache.RuleCache.derived`, bound to the store)
Derived = Callable[[str, Callable[[], Any]], Any]
#: the agent's inputs: every pod as policy sees it, every NetworkPolicy, every
#: namespace's labels, every ClusterNetworkPolicy
Inputs = tuple[
    Sequence[PolicyPod],
    Sequence[NetworkPolicy],
    Mapping[str, Mapping[str, str]],
    Sequence[ClusterNetworkPolicy],
]
#: the version of what :class:`PolicyAgent` keeps in a ``derived`` cache (raise it when
#: the form of a kept value changes; a change to the code that renders it is caught by
#: the cache's own fingerprint of the renderers' sources)
_DERIVED = "netpol/2"


class PolicyAgent:
    """kube-router on every node of one cluster state: ``rules(node)`` rendered when
    first asked and kept; ``origin(node, chain, rule)`` what a rendered rule stands
    for.

    ``derived`` (optional): a cache of values derived from the store while it is
    unchanged; each node's rendering and the guarded set are kept there (keyed by the
    node, its address and the Service ranges as well), so a question on an unchanged
    cluster renders nothing and reads no policy: it pays for the nodes its packets
    reach. The inputs of an agent made by :meth:`lazy` are read when a value is not
    kept, once."""

    def __init__(
        self,
        pods: Sequence[PolicyPod],
        policies: Sequence[NetworkPolicy],
        namespaces: Mapping[str, Mapping[str, str]],
        service_cidrs: Sequence[str],
        node_ips: Mapping[str, str],
        derived: Derived | None = None,
        cluster_policies: Sequence[ClusterNetworkPolicy] = (),
    ) -> None:
        self._inputs: Inputs | None = (pods, policies, namespaces, tuple(cluster_policies))
        self._read: Callable[[], Inputs] | None = None
        self.service_cidrs = tuple(service_cidrs)
        self.node_ips = node_ips
        self._derived = derived
        self._rules: dict[str, PolicyRules] = {}
        self._guarded: frozenset[str] | None = None

    @classmethod
    def lazy(
        cls,
        read: Callable[[], Inputs],
        service_cidrs: Sequence[str],
        node_ips: Mapping[str, str],
        derived: Derived | None = None,
    ) -> PolicyAgent:
        """An agent whose inputs ``read()`` gives, called once, when first needed."""
        agent = cls((), (), {}, service_cidrs, node_ips, derived)
        agent._inputs, agent._read = None, read
        return agent

    def _got(self) -> Inputs:
        if self._inputs is None:
            assert self._read is not None
            self._inputs = self._read()
        return self._inputs

    @property
    def pods(self) -> Sequence[PolicyPod]:
        return self._got()[0]

    @property
    def policies(self) -> Sequence[NetworkPolicy]:
        return self._got()[1]

    @property
    def namespaces(self) -> Mapping[str, Mapping[str, str]]:
        return self._got()[2]

    @property
    def cluster_policies(self) -> Sequence[ClusterNetworkPolicy]:
        return self._got()[3]

    def _kept(self, name: str, compute: Callable[[], Any]) -> Any:
        if self._derived is None:
            return compute()
        return self._derived(f"{_DERIVED}/{name}", compute)

    def rules(self, node: str) -> PolicyRules:
        got = self._rules.get(node)
        if got is None:
            ip = self.node_ips.get(node, "")
            rendered = self._kept(
                f"rules/{node}/{ip}/{self.service_cidrs!r}",
                lambda: node_rules(
                    node,
                    ip,
                    self.pods,
                    self.policies,
                    self.cluster_policies,
                    self.namespaces,
                    service_cidrs=self.service_cidrs,
                ),
            )
            assert rendered is not None, "an agent is made only for a cluster with policies"
            got = self._rules[node] = rendered
        return got

    def guarded(self) -> frozenset[str]:
        """The addresses of the pods some policy isolates for ingress, or some
        ClusterNetworkPolicy with ingress rules applies to (for
        :attr:`netmodel.view.ClusterView.guarded`)."""
        if self._guarded is None:
            self._guarded = self._kept("guarded", self._compute_guarded)
        return self._guarded

    def _compute_guarded(self) -> frozenset[str]:
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
    derived: Derived | None = None,
) -> PolicyAgent | None:
    """The cluster's policy agent, or None when no NetworkPolicy and no
    ClusterNetworkPolicy is stored (then no Pod is read). ``derived``: a cache of values
    derived from the store while it is unchanged
    (:meth:`control.rulecache.RuleCache.derived`, bound to the store): with it, the
    agent keeps its renderings there, and reads the policies, pods and namespaces (pods
    and namespaces kept too) only when a rendering is not kept; without it, they are
    read now."""
    if derived is None:
        policies = read_policies(store)
        cluster_policies = read_cluster_policies(store)
        if not policies and not cluster_policies:
            return None
        pods, namespaces = read_policy_pods(store)
        return PolicyAgent(
            pods, policies, namespaces, service_cidrs, node_ips, cluster_policies=cluster_policies
        )
    if not scan(store, "NetworkPolicy", ()) and not cluster_policy_objects(store):
        return None  # NetworkPolicies by their keys only, none decoded

    def read() -> Inputs:
        pods, namespaces = derived("netpol-pods/1", lambda: read_policy_pods(store))
        return pods, read_policies(store), namespaces, tuple(read_cluster_policies(store))

    return PolicyAgent.lazy(read, service_cidrs, node_ips, derived)


# --------------------------------------------------------------------------- traces


def _decided(
    hops: Sequence[Hop], agent: PolicyAgent, node_of: Callable[[str], str | None]
) -> Iterator[tuple[int, Decision]]:
    """Each rule of ``hops`` that decides a policy verdict, by position, with the
    :class:`~netmodel.netpolicy.Decision` it stands for: per pod chain pass (from the
    top-level chain's jump into a ``KUBE-POD-FW-`` chain to that chain's mark reset),
    the first such rule (with the ClusterNetworkPolicy ``Pass`` rules met before it,
    "passed by", as :func:`netmodel.clusterpolicy.decide` names them). The pass's
    direction is the jump's: ``-d POD`` ingress, ``-s POD`` egress."""
    direction: Direction | None = None
    decided = False
    passed: list[str] = []  # ClusterNetworkPolicy Pass rules met in this pass
    for i, h in enumerate(hops):
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
        yield i, decision


def decisions(
    trace: Trace, agent: PolicyAgent | None, node_of: Callable[[str], str | None]
) -> tuple[Decision, ...]:
    """The policy verdicts met by ``trace``'s own walk (not its reply's or branches'),
    in walk order: the decisions :func:`attribute`'s ``netpol`` hops name, as values.
    Empty without an agent (no policy in the cluster)."""
    if agent is None:
        return ()
    return tuple(d for _, d in _decided(trace.hops, agent, node_of))


def attribute(
    trace: Trace, agent: PolicyAgent | None, node_of: Callable[[str], str | None]
) -> Trace:
    """``trace`` with a ``netpol`` hop after each rule that decides a policy verdict
    (per pod chain pass the first such rule, see :func:`decisions`), named as
    :meth:`~netmodel.netpolicy.Decision.describe` names it. ``node_of``: the node a
    hop's network namespace is (None: not a node). The reply and branches likewise."""
    if agent is None:
        return trace
    hops = list(trace.hops)
    for i, decision in reversed(list(_decided(trace.hops, agent, node_of))):
        h = trace.hops[i]
        hops.insert(
            i + 1,
            Hop(
                "netpol",
                h.netns,
                hook=h.hook,
                table=h.table,
                chain=h.chain,
                verdict="ACCEPT" if decision.allowed else "REJECT",
                note=decision.describe(),
            ),
        )
    reply = attribute(trace.reply, agent, node_of) if trace.reply is not None else None
    branches = tuple((p, attribute(t, agent, node_of)) for p, t in trace.branches)
    return replace(trace, hops=tuple(hops), reply=reply, branches=branches)


def named(ds: Sequence[Decision]) -> tuple[Decision, ...]:
    """The decisions that name a policy, each once, in order (``not isolated for
    ingress`` and ``from the pod's own node`` name none)."""
    out: list[Decision] = []
    for d in ds:
        if d.policy is not None and d not in out:
            out.append(d)
    return tuple(out)


class Verdicts:
    """A walk's policy verdicts in ``agent``'s cluster, as the pod tools ask for them
    (:class:`dataplane.podtools.net.PolicyVerdicts`)."""

    def __init__(self, agent: PolicyAgent) -> None:
        self.agent = agent

    def attribute(self, trace: Trace) -> Trace:
        return attribute(trace, self.agent, node_of)

    def decisions(self, trace: Trace) -> tuple[Decision, ...]:
        return named(decisions(trace, self.agent, node_of))


def node_of(netns: str) -> str | None:
    """The node a network namespace of the emulated cluster is (``node/NAME``)."""
    return netns[5:] if netns.startswith("node/") else None


__all__ = [
    "PolicyAgent",
    "Verdicts",
    "attribute",
    "cluster_policy_objects",
    "decisions",
    "named",
    "node_of",
    "policy_agent",
    "read_cluster_policies",
    "read_policies",
    "read_policy_pods",
]
