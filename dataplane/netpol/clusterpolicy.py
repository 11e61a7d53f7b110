"""ClusterNetworkPolicy (``policy.networking.k8s.io/v1alpha2``) in kube-router's
NetworkPolicy layout: **svclab's own extension**, rendered per node, pure.

kube-router has no ClusterNetworkPolicy support (nor AdminNetworkPolicy); nothing here
reproduces a real implementation's rules. The extension keeps kube-router's shape
(:mod:`dataplane.netpol.kuberouter`: a ``KUBE-POD-FW-<hash>`` chain per local pod, the
``0x10000`` "allowed" mark, REJECT ``icmp-port-unreachable``) and adds, per pod and
direction, two tier chains that decide exactly as :func:`netmodel.clusterpolicy.decide`
does::

    KUBE-POD-FW-<pod>  (per direction: egress with -s POD, then ingress with -d POD)
      -s POD ! -d POD                             -j KUBE-CNP-AD-<h>   the Admin tier
                                                  (ingress: ! -s POD -d POD)
      -s POD -d POD -m conntrack --ctstate DNAT   -j KUBE-CNP-AD-<h>   (hairpin via a Service)
      -s POD -j KUBE-NWPLCY-<policy> ...          the NetworkPolicy tier, as kube-router
      (no NetworkPolicy isolates the pod in this direction:)
      -s POD ! -d POD -m mark ! --mark 0x10000/0x10000 -j KUBE-CNP-BL-<h>   the Baseline tier
      -s POD -j KUBE-NWPLCY-DEFAULT
      ... kube-router's NFLOG, REJECT of unmarked packets, mark reset, 0x20000

* ``KUBE-CNP-AD-<h>`` / ``KUBE-CNP-BL-<h>``: one chain per tier, direction and list of
  ClusterNetworkPolicies that select a pod (the subject) and have rules in that
  direction, ``<h>`` the kube-router name hash of that list (pods the same policies
  select share the chain). It holds the policies' rules in the order they are read
  (:func:`netmodel.clusterpolicy.in_order`: by priority, then name), each rule as one
  line per peer, per ``protocols`` entry (per resolved number for a named port):
  ``Accept`` → ``MARK --set-xmark 0x10000/0x10000`` then ``RETURN``; ``Deny`` →
  ``REJECT --reject-with icmp-port-unreachable``; ``Pass`` → ``RETURN`` unmarked (the
  rest of the tier is skipped, the next tier decides). First match wins, as the API's
  "first rule that matches decides". A rule that fails closed (a Deny or Pass holding
  a peer svclab does not evaluate) is one unconditional REJECT.
* Admin ``Accept`` is final: its mark makes every later NetworkPolicy verdict moot (the
  pod chain REJECTs only unmarked packets) and skips the Baseline jump. Admin ``Deny``
  REJECTs before any NetworkPolicy is read. The Baseline chain runs only for a
  direction no NetworkPolicy isolates, after the Admin tier left the packet unmarked;
  a Baseline ``Deny`` REJECTs, anything else falls to ``KUBE-NWPLCY-DEFAULT`` (allowed).
* Peers as ipsets (kube-router's naming, ``KUBE-SRC-``/``KUBE-DST-`` and a hash of the
  policy, direction, rule and peer): ``namespaces`` and ``pods`` as ``hash:ip`` sets of
  the (non host-network) pods they match, matched on the source for ingress and on the
  destination for egress; ``networks`` as a ``hash:net`` set on the destination (IPv4,
  as kube-router's sets are ``family inet``; ``0.0.0.0/0`` as two ``/1`` halves). A
  ``destinationNamedPort`` becomes, per (protocol, number) it resolves to, a ``hash:ip``
  set of the pods declaring it, matched on the destination with that port.
* A pod reaching its own address is not subject to ClusterNetworkPolicy (the API's
  hairpin rule), unless through a Service (conntrack's DNAT state): the tier jumps
  say so.
* Every deciding rule carries a comment naming the policy and rule
  (``... cluster network policy NAME ingress[0]``) and a
  :class:`~dataplane.netpol.kuberouter.RuleOrigin` whose decision is
  :func:`netmodel.clusterpolicy.decide`'s word for word (``ClusterNetworkPolicy/NAME``,
  ``ingress[0].from[1]``, ``Admin tier, priority 10: Deny namespaces ...``), so traces
  and the kernel's counters name it; a ``Pass`` rule's origin says it passes, and the
  verdict reached after it is named "passed by" it, as ``decide`` names it.

:func:`node_rules` is the node agent's entry point: kube-router's rules with the tiers,
rendered when the cluster holds a NetworkPolicy or a ClusterNetworkPolicy (None when
it holds neither).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from ipaddress import ip_network

from dataplane.netpol.kuberouter import (
    MATCHED_TEXT,
    PolicyRules,
    RuleOrigin,
    RuleWriter,
    comment_match,
    name_hash,
    render_policy,
)
from netmodel.clusterpolicy import (
    ClusterNetworkPolicy,
    ClusterPeer,
    ClusterRule,
    ProtocolMatch,
    Tier,
    in_order,
)
from netmodel.netpolicy import Decision, Direction, NetworkPolicy, PolicyPod

#: tier chain prefixes (12 characters + a 16-character hash: iptables' 28-character limit)
ADMIN_PREFIX = "KUBE-CNP-AD-"
BASELINE_PREFIX = "KUBE-CNP-BL-"
_REJECT = "-j REJECT --reject-with icmp-port-unreachable"


def tier_chain(tier: Tier, direction: Direction, policies: Sequence[ClusterNetworkPolicy]) -> str:
    """The chain of ``tier`` for ``direction`` holding ``policies``' rules (in order)."""
    prefix = ADMIN_PREFIX if tier == "Admin" else BASELINE_PREFIX
    return prefix + name_hash(f"{tier}{direction}" + ",".join(p.name for p in policies))


def _halves(net: str) -> list[str]:
    n = ip_network(net, strict=False)
    return [str(s) for s in n.subnets(prefixlen_diff=1)] if n.prefixlen == 0 else [str(n)]


class ClusterTiers:
    """The Admin and Baseline tiers of one node's rendering
    (:class:`~dataplane.netpol.kuberouter.PodTiers`): ``cluster_policies`` every
    ClusterNetworkPolicy of the cluster, ``namespaces`` every namespace's labels."""

    def __init__(
        self,
        cluster_policies: Sequence[ClusterNetworkPolicy],
        namespaces: Mapping[str, Mapping[str, str]],
    ) -> None:
        self.ordered = in_order(cluster_policies)
        self.namespaces = namespaces
        self._done: set[str] = set()

    # -- PodTiers
    def before(self, writer: RuleWriter, pod: PolicyPod, direction: Direction) -> list[str]:
        return self._jumps(writer, pod, direction, "Admin")

    def unisolated(self, writer: RuleWriter, pod: PolicyPod, direction: Direction) -> list[str]:
        return self._jumps(writer, pod, direction, "Baseline")

    # -- rendering
    def _jumps(
        self, writer: RuleWriter, pod: PolicyPod, direction: Direction, tier: Tier
    ) -> list[str]:
        mine = [
            p
            for p in self.ordered
            if p.tier == tier and p.rules(direction) and p.subject.selects(pod, self.namespaces)
        ]
        if not mine:
            return []
        chain = tier_chain(tier, direction, mine)
        if chain not in self._done:
            self._done.add(chain)
            writer.chain(chain)
            for pol in mine:
                self._policy(writer, chain, pol, direction)
        ip = f"{pod.ip}/32"
        # iptables-save's order: -s before -d
        ends = f"-s {ip} ! -d {ip}" if direction == "egress" else f"! -s {ip} -d {ip}"
        text = comment_match(f"run through {tier.lower()} cluster network policies {direction}")
        guard = f" -m mark ! --mark {MATCHED_TEXT}" if tier == "Baseline" else ""
        return [
            f"{ends} {text}{guard} -j {chain}",
            f"-s {ip} -d {ip} {text}{guard} -m conntrack --ctstate DNAT -j {chain}",
        ]

    def _policy(
        self, w: RuleWriter, chain: str, pol: ClusterNetworkPolicy, direction: Direction
    ) -> None:
        peers_field = "from" if direction == "ingress" else "to"
        head = f"{pol.tier} tier, priority {pol.priority}"
        for i, rule in enumerate(pol.rules(direction)):
            where = f"{direction}[{i}]"
            named = f' "{rule.name}"' if rule.name else ""
            verb = {"Accept": "ACCEPT", "Deny": "REJECT", "Pass": "PASS"}[rule.action]
            text = comment_match(
                f"rule to {verb} traffic by cluster network policy {pol.name} {where}"
            )
            if rule.fails_closed:
                bad = next(p for p in rule.peers if p.unknown)
                decision = Decision(
                    direction,
                    False,
                    pol.key,
                    where + named,
                    f"{head}: {rule.action} {bad.describe()}",
                )
                w.add(chain, f"{text} {_REJECT}", RuleOrigin((decision,)))
                continue
            for j, peer in enumerate(rule.peers):
                if peer.unknown:
                    continue  # an Accept rule's unknown peer matches nothing
                peer_match = self._peer_match(w, pol, direction, i, j, peer)
                reason = f"{head}: {rule.action} {peer.describe()}"
                path = f"{where}.{peers_field}[{j}]{named}"
                entries: list[ProtocolMatch | None] = list(rule.protocols) or [None]
                for k, proto in enumerate(entries):
                    why = reason if proto is None else f"{reason}, {proto.describe()}"
                    decision = Decision(direction, rule.action == "Accept", pol.key, path, why)
                    for lead, tail in self._proto_matches(w, pol, direction, i, k, proto):
                        match = f"{lead}{text} {peer_match}{tail}"
                        self._action(w, chain, rule, match, decision)

    def _action(
        self, w: RuleWriter, chain: str, rule: ClusterRule, match: str, decision: Decision
    ) -> None:
        if rule.action == "Accept":
            w.add(chain, f"{match} -j MARK --set-xmark {MATCHED_TEXT}", RuleOrigin((decision,)))
            w.add(chain, f"{match} -j RETURN")
        elif rule.action == "Deny":
            w.add(chain, f"{match} {_REJECT}", RuleOrigin((decision,)))
        else:
            w.add(chain, f"{match} -j RETURN", RuleOrigin((decision,), passes=True))

    def _peer_match(
        self,
        w: RuleWriter,
        pol: ClusterNetworkPolicy,
        direction: Direction,
        i: int,
        j: int,
        peer: ClusterPeer,
    ) -> str:
        base = f"cnp{pol.name}{direction}rule{i}peer{j}"
        if peer.networks:
            nets = [h for n in peer.networks if n.version == 4 for h in _halves(str(n))]
            name = w.ipset("KUBE-DST-" + name_hash(base + "networks"), "hash:net", nets)
            return f"-m set --match-set {name} dst"
        pods = [p for p in w.pods if peer.matches(p, p.ip, self.namespaces)]
        prefix, end = ("KUBE-SRC-", "src") if direction == "ingress" else ("KUBE-DST-", "dst")
        name = w.pod_set(prefix + name_hash(base + "pods"), pods)
        return f"-m set --match-set {name} {end}"

    def _proto_matches(
        self,
        w: RuleWriter,
        pol: ClusterNetworkPolicy,
        direction: Direction,
        i: int,
        k: int,
        proto: ProtocolMatch | None,
    ) -> list[tuple[str, str]]:
        """(text before the comment, text after the peer's set match) per rule line."""
        if proto is None:
            return [("", "")]
        if proto.named_port is None:
            p = str(proto.protocol).lower()
            if proto.start is None or proto.end is None:
                return [(f"-p {p} ", "")]
            port = str(proto.start) if proto.start == proto.end else f"{proto.start}:{proto.end}"
            return [(f"-p {p} ", f" -m {p} --dport {port}")]
        by_port: dict[tuple[str, int], list[PolicyPod]] = {}
        for pod in w.pods:
            got = pod.ports.get(proto.named_port)
            if got is not None:
                by_port.setdefault(got, []).append(pod)
        out = []
        for (protocol, number), pods in sorted(by_port.items()):
            p = protocol.lower()
            base = f"cnp{pol.name}{direction}rule{i}namedport{k}{protocol}{number}"
            name = w.pod_set("KUBE-DST-" + name_hash(base), pods)
            out.append((f"-p {p} ", f" -m set --match-set {name} dst -m {p} --dport {number}"))
        return out


def node_rules(
    node: str,
    node_ip: str,
    pods: Sequence[PolicyPod],
    policies: Sequence[NetworkPolicy],
    cluster_policies: Sequence[ClusterNetworkPolicy],
    namespaces: Mapping[str, Mapping[str, str]],
    *,
    service_cidrs: Sequence[str] = (),
) -> PolicyRules | None:
    """``node``'s policy rules: kube-router's layout for ``policies`` with the
    ClusterNetworkPolicy tiers (module docstring) for ``cluster_policies``; None when
    the cluster holds neither kind (nothing for the agent to load)."""
    if not policies and not cluster_policies:
        return None
    tiers = ClusterTiers(cluster_policies, namespaces) if cluster_policies else None
    return render_policy(
        node, node_ip, pods, policies, namespaces, service_cidrs=service_cidrs, tiers=tiers
    )


__all__ = ["ADMIN_PREFIX", "BASELINE_PREFIX", "ClusterTiers", "node_rules", "tier_chain"]
