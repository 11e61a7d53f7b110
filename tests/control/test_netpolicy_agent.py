"""The per-node NetworkPolicy agent (control.agents.netpolicy) in the deterministic runner.

Each node's agent loads, into its sink, kube-router's rules for the pods of that node:
a pod chain for every local pod a policy isolates, a policy chain per policy, the peers'
ipsets drawn from every pod of the cluster; nothing while the cluster holds no
NetworkPolicy. Changes to policies, pods and namespace labels reach the rules on the
next sync; a sync that changes nothing loads nothing; a failed load is tried again.
With periods (the live planes) a change waits out ``min_sync`` and a resync comes with
no change at all. The registry runs it as its own group, under kube-router's
ServiceAccount, whose role reads exactly what it watches."""

from __future__ import annotations

import pytest

from control.agents.netpolicy import (
    EmulatedPolicies,
    NetworkPolicyAgent,
    PolicyPeriods,
)
from control.apiserver.http.rbac import bootstrap_policy
from control.clock import FakeClock
from control.components import (
    GROUPS,
    KUBE_ROUTER,
    KUBE_ROUTER_GROUP,
    NODE_GROUPS,
    component,
    identity_of,
)
from control.session import Session
from control.store.base import WatchEvent
from dataplane.netpol.kuberouter import PolicyRules, pod_chain, policy_chain
from netmodel import clusterpolicy
from netmodel.errors import BackendError
from netmodel.manifests import load_text
from netmodel.netpolicy import policy_from_wire
from netmodel.objects import ClusterRole, ClusterRoleBinding, KubeObject, Namespace, Pod

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 2, dns: false}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: shop}}
---
apiVersion: v1
kind: Namespace
metadata: {name: web, labels: {team: web}}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: shop, labels: {app: db}}
spec:
  nodeName: node-1
  containers: [{name: db, image: db, ports: [{name: sql, containerPort: 5432}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: front, namespace: web, labels: {app: front}}
spec:
  nodeName: node-2
  containers: [{name: front, image: front}]
"""
POLICY = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-from-web, namespace: shop}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {team: web}}
    ports: [{port: sql}]
"""


def _session(*extra: str) -> Session:
    s = Session.ephemeral(load_text("---\n".join([CLUSTER, *extra]), source="t.yaml"))
    s.converge()
    return s


def _pod_ip(s: Session, key: str) -> str:
    pod = s.store.get("Pod", key)
    assert isinstance(pod, Pod) and pod.status.pod_ip
    return pod.status.pod_ip


def _members(rules: PolicyRules) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in rules.ipsets.splitlines():
        words = line.split()
        if words[0] == "create":
            out[words[1]] = set()
        elif words[0] == "add":
            out[words[1]].add(words[2])
    return out


def test_each_node_loads_the_rules_of_its_own_pods() -> None:
    s = _session(POLICY)
    pol = policy_from_wire(s.store.get("NetworkPolicy", "shop/db-from-web").to_dict())
    one, two = s.policies.nodes["node-1"], s.policies.nodes["node-2"]
    # node-1 runs db, which the policy isolates: its pod chain and the policy's chain
    assert pod_chain("shop", "db") in one.chains
    assert policy_chain(pol, "ingress") in one.chains
    assert pod_chain("web", "front") in two.chains
    assert policy_chain(pol, "ingress") not in two.chains  # no pod of node-2 is selected
    # the peer set holds the web namespace's pod, wherever it runs
    assert {_pod_ip(s, "web/front")} in _members(one).values()
    # the rule that marks front's packets to db's sql port names the policy rule
    named = [o for o in one.origins.values() if any(d.policy == pol.key for d in o.decisions)]
    assert any(d.rule == "ingress[0].from[0]" for o in named for d in o.decisions)
    # the agents ran in the runner: one load each, an Event on each node
    assert s.policies.loads == {"node-1": 1, "node-2": 1}
    reasons = [
        e for e in s.store.list("Event") if getattr(e, "reason", "") == "SyncNetworkPolicies"
    ]
    assert len(reasons) == 2


def test_no_policy_no_rules_and_a_policy_comes_and_goes() -> None:
    s = _session()
    assert s.policies.nodes == {}
    assert s.policies.loads == {"node-1": 1, "node-2": 1}  # the start says "none"
    (pol,) = load_text(POLICY, source="p.yaml").objects
    s.plane.apply([pol])
    s.converge()
    assert pod_chain("shop", "db") in s.policies.nodes["node-1"].chains
    s.plane.delete("NetworkPolicy", "shop/db-from-web")
    s.converge()
    assert s.policies.nodes == {}
    assert s.policies.loads == {"node-1": 3, "node-2": 3}


def test_a_namespace_label_change_reaches_the_peer_set() -> None:
    s = _session(POLICY)
    front = _pod_ip(s, "web/front")
    assert {front} in _members(s.policies.nodes["node-1"]).values()
    ns = s.store.get("Namespace", "web")
    assert isinstance(ns, Namespace)
    s.plane.apply([ns.with_meta(labels={"team": "other"}, resource_version=None)])
    s.converge()
    assert {front} not in _members(s.policies.nodes["node-1"]).values()
    loads = dict(s.policies.loads)
    s.converge()  # nothing changed: nothing loaded
    assert s.policies.loads == loads


class FailingOnce(EmulatedPolicies):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def load(self, node: str, rules: PolicyRules | None) -> None:
        if self.fail:
            self.fail = False
            raise BackendError("iptables-restore: line 3 failed")
        super().load(node, rules)


def _agent(
    periods: PolicyPeriods | None,
) -> tuple[NetworkPolicyAgent, FakeClock, Session, FailingOnce]:
    s = _session(POLICY)
    clock = FakeClock()
    sink = FailingOnce()
    agent = NetworkPolicyAgent(
        "node-1", sink, service_cidrs=(s.cluster.spec.service_cidr,), clock=clock, periods=periods
    )
    objs: list[KubeObject] = []
    for kind in ("Node", "Pod", "Namespace", "NetworkPolicy"):
        objs += s.store.list(kind)
    agent.resync(objs)
    return agent, clock, s, sink


def _relabel(agent: NetworkPolicyAgent, s: Session, labels: dict[str, str]) -> None:
    ns = s.store.get("Namespace", "web")
    agent.handle([WatchEvent("MODIFIED", ns.with_meta(labels=labels), 1)])


def test_min_sync_holds_changes_back_and_the_resync_comes_unasked() -> None:
    agent, clock, s, sink = _agent(PolicyPeriods(min_sync=1.0, resync=300.0))
    assert agent.next_due() is None
    assert agent.sync() == 1
    t0 = clock.now()
    assert agent.next_due() == t0 + 300.0
    clock.advance(0.5)
    _relabel(agent, s, {"team": "other"})
    assert agent.sync() == 0  # held off
    assert agent.next_due() == t0 + 1.0
    clock.advance(0.5)
    assert agent.sync() == 1 and sink.loads["node-1"] == 2
    clock.advance(299.9)
    assert agent.sync() == 0
    clock.advance(0.1)
    assert agent.sync() == 1 and sink.loads["node-1"] == 3  # the same rules, loaded again


def test_a_failed_load_is_tried_again() -> None:
    agent, _, _, sink = _agent(None)
    sink.fail = True
    with pytest.raises(BackendError):
        agent.sync()
    assert agent.sync() == 1  # the same rules: the node does not hold them yet
    assert sink.loads["node-1"] == 1 and "node-1" in sink.nodes
    assert agent.sync() == 0


def test_the_registry_runs_it_as_kube_routers_own_group_with_its_role() -> None:
    spec = component("kube-router")
    assert spec.per_node and spec.group == KUBE_ROUTER_GROUP
    assert KUBE_ROUTER_GROUP in GROUPS and KUBE_ROUTER_GROUP in NODE_GROUPS
    assert identity_of(KUBE_ROUTER_GROUP) == KUBE_ROUTER
    assert spec.informers is not None
    watched = {k for k, _ in spec.informers("node-1")}
    # what it watches is what its ClusterRole lets it read, and only that
    objs = bootstrap_policy()
    (binding,) = [
        o
        for o in objs
        if isinstance(o, ClusterRoleBinding)
        and any(sub.name == KUBE_ROUTER.user for sub in o.subjects)
    ]
    (role,) = [
        o
        for o in objs
        if isinstance(o, ClusterRole) and binding.role_ref and o.name == binding.role_ref.name
    ]
    readable = {res for r in role.rules if {"list", "watch"} <= set(r.verbs) for res in r.resources}
    plural = {
        "NetworkPolicy": "networkpolicies",
        clusterpolicy.STORE_KIND: "clusternetworkpolicies",
        "Pod": "pods",
        "Namespace": "namespaces",
        "Node": "nodes",
    }
    # the role reads what the agent watches (ClusterNetworkPolicy included), and only
    # that; the live planes' informers are a part of it (they do not watch
    # ClusterNetworkPolicy yet: a custom kind they cannot list before its CRD exists)
    assert {plural[k] for k in NetworkPolicyAgent.kinds} == readable
    assert {plural[k] for k in watched} == readable - {"clusternetworkpolicies"}


CNP = """\
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: deny-web-into-shop}
spec:
  tier: Admin
  priority: 10
  subject: {namespaces: {matchLabels: {team: shop}}}
  ingress:
  - action: Deny
    from: [{namespaces: {matchLabels: {team: web}}}]
"""


def test_a_cluster_network_policy_comes_and_goes_through_the_agents() -> None:
    # the agents watch ClusterNetworkPolicy by its store kind (the CRD's name): with
    # one and no NetworkPolicy they load rules (svclab's tier chains), without, none
    s = Session.ephemeral(load_text(CLUSTER + "---\n" + CNP, source="c.yaml"))
    one = s.policies.nodes["node-1"]
    (admin,) = [c for c in one.chains if c.startswith("KUBE-CNP-AD-")]
    assert any(r.startswith(f"-A {admin} ") and "-j REJECT" in r for r in one.rules)
    assert any(
        f"-j {admin}" in r for r in one.rules if r.startswith(f"-A {pod_chain('shop', 'db')} ")
    )
    # node-2 runs no shop pod: kube-router's chains, no tier chain
    assert not [c for c in s.policies.nodes["node-2"].chains if c.startswith("KUBE-CNP-")]
    s.plane.delete(clusterpolicy.STORE_KIND, "deny-web-into-shop")
    s.converge()
    assert s.policies.nodes == {}
