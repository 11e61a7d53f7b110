"""Which NetworkPolicy rule the kernel applied: a real node's counters mapped back to the
policy and rule that made each counted rule.

:func:`node_policy_rules` renders a node's policy rules from the stored cluster, exactly
as the node's policy agent (:class:`control.agents.netpolicy.NetworkPolicyAgent`) does;
:func:`real_policy_hits` reads the node namespace's filter-table counters
(:func:`dataplane.linux.policyrules.policy_hits`) and keeps the rules with packets that
the rendering's ``origins`` name, each with its :class:`~dataplane.netpol.kuberouter.RuleOrigin`
(``shop/allow-frontend ingress[0].from[1] (namespaceSelector team=web) → ACCEPT``).
Counters only grow: a caller that wants one connection's rules reads before and after
(:func:`new_hits`).

The real cluster is the one ``svclab up --real`` realised for the session's state
directory (followed live by ``svclab serve --real`` or not): its rules must be the
store's, which both keep current.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.netpolview import cluster_policy_objects
from app.real import NoRealCluster, RealRecord
from control.agents.netpolicy import NetworkPolicyAgent
from control.session import Session
from dataplane.linux.policyrules import PolicyHit, policy_hits
from dataplane.linux.realize import RealCluster
from dataplane.netpol.kuberouter import PolicyRules, RuleOrigin
from netmodel.errors import BackendError, NotFoundError
from netmodel.objects import KubeObject

Hit = PolicyHit[RuleOrigin]


def node_policy_rules(session: Session, node: str) -> PolicyRules | None:
    """``node``'s policy rules rendered from the session's store as its agent renders
    them (None: the cluster holds no NetworkPolicy nor ClusterNetworkPolicy). NotFoundError for an unknown
    node."""
    store = session.store
    try:
        node_obj = store.get("Node", node)
    except NotFoundError:
        names = ", ".join(n.name for n in store.list("Node"))
        raise NotFoundError(f'node "{node}" not found (nodes: {names or "none"})') from None
    agent = NetworkPolicyAgent(node, _NoSink(), service_cidrs=(session.cluster.spec.service_cidr,))
    objs: list[KubeObject] = [node_obj]
    for kind in ("NetworkPolicy", "Pod", "Namespace"):
        objs += store.list(kind)
    objs += cluster_policy_objects(store)
    agent.resync(objs)
    if agent.node_ip is None:
        raise BackendError(f"node {node}: no InternalIP address yet")
    return agent.render()


class _NoSink:
    def load(self, node: str, rules: PolicyRules | None) -> None:  # pragma: no cover
        raise AssertionError("rendering only")


def _real_cluster(session: Session) -> RealCluster:
    if session.state_dir is None:
        raise NoRealCluster("the kernel's counters need a real cluster: --state DIR, 'up --real'")
    record = RealRecord.read(session.state_dir)
    if record is None or record.status != "up":
        raise NoRealCluster(
            f"{session.state_dir}: no real cluster up here (run 'svclab up --real' first)"
        )
    try:
        return RealCluster.load(record.cluster_id)
    except BackendError as e:
        raise NoRealCluster(f"{session.state_dir}: {e} (run 'svclab up --real' again)") from None


def real_policy_hits(session: Session, node: str) -> list[Hit]:
    """The policy rules of ``node`` in the real cluster whose kernel counters are not
    zero, each with the policy and rule it stands for, in ``iptables-save`` order. []
    when the cluster has no policy."""
    rules = node_policy_rules(session, node)
    if rules is None:
        return []
    cluster = _real_cluster(session)
    return policy_hits(cluster.node_netns(node), rules.origins, backend=cluster.iptables_backend)


def new_hits(before: Sequence[Hit], after: Sequence[Hit]) -> list[Hit]:
    """The rules of ``after`` that counted packets since ``before`` (their packet and
    byte counts the difference)."""
    seen = {(h.chain, h.rule): h for h in before}
    out: list[Hit] = []
    for h in after:
        old = seen.get((h.chain, h.rule))
        packets = h.packets - (old.packets if old else 0)
        if packets > 0:
            out.append(
                PolicyHit(h.chain, h.rule, packets, h.bytes - (old.bytes if old else 0), h.origin)
            )
    return out


def describe(hit: Hit) -> str:
    """What a hit stands for: each decision the rule makes
    (``shop/allow-frontend ingress[0].from[1] (namespaceSelector team=web) → ACCEPT``),
    with the pod it guards for a pod chain's rule."""
    text = "; ".join(d.describe() for d in hit.origin.decisions)
    return f"{text} [pod {hit.origin.pod}]" if hit.origin.pod else text


__all__ = ["Hit", "describe", "new_hits", "node_policy_rules", "real_policy_hits"]
