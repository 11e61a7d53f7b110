"""kube-router's NetworkPolicy rules on one node, rendered from the policies, pure.

Modelled: the network policy controller of **kube-router v2.x** as k3s embeds it
(k3s bumped to kube-router v2.1.x in 2024 and to v2.6.3-k3s1 in 2025). Every fact of the
layout below comes from kube-router's documentation, pull requests and the
``iptables-save`` dumps users posted in kube-router's and k3s's issues (the dump kept in
``tests/data/kuberouter/`` names its source); the code is ours.

The layout, in the filter table (every rule carries kube-router's comment)::

    INPUT   -> KUBE-ROUTER-INPUT     (inserted first: "kube-router netpol - <hash>")
    FORWARD -> KUBE-ROUTER-FORWARD
    OUTPUT  -> KUBE-ROUTER-OUTPUT

* ``KUBE-ROUTER-INPUT`` first RETURNs traffic to the Service cluster IP range and to
  the node's NodePort range (an IPVS node sees those before the DNAT), then, like the
  other two, jumps a local pod's traffic to its ``KUBE-POD-FW-<hash>`` chain: INPUT
  ``-s pod``; FORWARD ``-d pod``, ``-d pod -m physdev --physdev-is-bridged``, ``-s pod``,
  ``-s pod -m physdev --physdev-is-bridged``; OUTPUT ``-d pod``, ``-s pod``; and ends
  with ``-m mark --mark 0x20000/0x20000 -j ACCEPT``.
* ``KUBE-POD-FW-<hash>`` (one per pod **on this node**, host-network pods excluded):
  conntrack RELATED,ESTABLISHED → ACCEPT; INVALID → DROP; ``-d pod -m addrtype
  --src-type LOCAL`` → ACCEPT (the pod's own node); one jump per policy selecting the
  pod (``-s pod`` for egress, ``-d pod`` for ingress, by policy name) to its
  ``KUBE-NWPLCY-<hash>``, or, for a direction no policy isolates, to
  ``KUBE-NWPLCY-DEFAULT`` (which marks ``0x10000``); then packets without the
  ``0x10000`` mark are logged (NFLOG group 100, limited 10/min) and REJECTed
  (``icmp-port-unreachable``); then the mark is cleared and ``0x20000`` set, which the
  top-level chain ACCEPTs.
* ``KUBE-NWPLCY-<hash>``: per rule, per peer, per port, a MARK ``0x10000/0x10000`` then
  a RETURN of marked packets, matching ipsets: ``KUBE-DST-<hash>`` the policy's selected
  pods (ingress) or a peer (egress), ``KUBE-SRC-<hash>`` a peer (ingress) or the selected
  pods (egress); pods as ``hash:ip``, ipBlocks as ``hash:net`` with ``nomatch`` for each
  ``except`` (``0.0.0.0/0`` as two ``/1`` halves: a ``hash:net`` set takes no ``/0``).
  A named port becomes, per number it resolves to, a set of the pods that define it.

Where svclab departs from kube-router (each so that the rules decide exactly as
:func:`netmodel.netpolicy.decide` does, and traces can name the rule):

* kube-router hashes a sync version (a timestamp) into chain names, so its names change
  on every sync; svclab hashes the stable inputs only (pod chain: namespace + pod
  name; policy chain: namespace + policy name), so a node's rendering is a pure
  function of the cluster. Hashes are the first 16 characters of the base32 SHA-256.
* One ipset per peer (kube-router merges a rule's pod peers into one set), so the
  first marking rule is the peer :func:`decide` names (``ingress[0].from[1]``).
* The top-level chains jump every local pod's egress (``-s pod``) before any pod's
  ingress (``-d pod``; kube-router goes pod by pod, ``-d`` first): a packet between two
  pods of one node meets its source's egress verdict first, so the first REJECT is the
  direction :func:`decide` names when both deny (the verdict is the same either way).
* A policy of both types keeps its egress rules in a chain of their own
  (``KUBE-NWPLCY-<hash(… + "egress")>``): a pod's egress pass never meets an ingress rule.
* Rendered only when the cluster holds at least one NetworkPolicy
  (:func:`node_policy_rules`); with none, kube-router's chains would accept all they see.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Network, ip_network
from typing import Protocol

from netmodel.netpolicy import (
    Decision,
    Direction,
    NetworkPolicy,
    Peer,
    PolicyPod,
    PortSpec,
    peer_matches,
    selects,
)
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules, RulesetInput

#: the bit a policy rule sets when it allows a packet (``--set-xmark 0x10000/0x10000``)
MARK_MATCHED = 0x10000
#: the bit a pod chain sets for the top-level chains to ACCEPT
MARK_ACCEPT = 0x20000
NFLOG_GROUP = 100
DEFAULT_CHAIN = "KUBE-NWPLCY-DEFAULT"
TOP_CHAINS = {
    "INPUT": "KUBE-ROUTER-INPUT",
    "FORWARD": "KUBE-ROUTER-FORWARD",
    "OUTPUT": "KUBE-ROUTER-OUTPUT",
}
NODE_PORT_RANGE = (30000, 32767)

_MATCHED = "0x10000/0x10000"
#: ``--set-xmark`` / ``--mark`` text of :data:`MARK_MATCHED`
MATCHED_TEXT = _MATCHED
LOCAL_COMMENT = "rule to permit the traffic to pods when source is the pod's local node"
_ACCEPTED = "0x20000/0x20000"


def name_hash(text: str) -> str:
    """kube-router's name hash: base32 of SHA-256, first 16 characters."""
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()[:16]


_hash = name_hash


def pod_chain(namespace: str, name: str) -> str:
    return "KUBE-POD-FW-" + _hash(namespace + name)


def policy_chain(policy: NetworkPolicy, direction: Direction) -> str:
    """The policy's chain for ``direction`` (one chain, unless it has both types)."""
    both = policy.types == {"ingress", "egress"}
    extra = "egress" if both and direction == "egress" else ""
    return "KUBE-NWPLCY-" + _hash(policy.namespace + policy.name + extra)


def _quote(text: str) -> str:
    """A comment as iptables-save prints it (double quotes; ``"`` ``\\`` ``'`` escaped)."""
    escaped = "".join("\\" + c if c in "\"\\'" else c for c in text)
    return f'"{escaped}"'


def comment_match(text: str) -> str:
    """``-m comment --comment "TEXT"`` as iptables-save prints it."""
    return f"-m comment --comment {_quote(text)}"


_comment = comment_match


@dataclass(frozen=True, slots=True)
class RuleOrigin:
    """Which policy verdict one rendered rule stands for.

    ``decisions``: a policy chain's MARK rule → the allowing :class:`Decision` (policy,
    rule path, reason as :func:`netmodel.netpolicy.decide` gives them); a pod chain's
    ``KUBE-NWPLCY-DEFAULT`` jump → "not isolated for <direction>"; its LOCAL-source
    ACCEPT → "from the pod's own node"; its NFLOG and REJECT → one denying decision per
    direction the pod is isolated in (naming the first isolating policy by key).
    ``pod``/``pod_ip``: the pod a pod-chain rule guards ("" for policy-chain rules).
    ``passes``: the rule decides nothing but hands the packet on (a ClusterNetworkPolicy
    ``Pass``, :mod:`dataplane.netpol.clusterpolicy`); its decision names the rule, and
    the verdict reached later says it was passed by it."""

    decisions: tuple[Decision, ...]
    pod: str = ""
    pod_ip: str = ""
    passes: bool = False

    def decision(self, src: str, dst: str) -> Decision | None:
        """The decision the rule stands for, for a packet from ``src`` to ``dst``: a pod
        chain's rule picks the direction by which end is its pod (the destination:
        ingress); None when the rule stands for nothing in that direction."""
        if not self.pod_ip:
            return self.decisions[0] if self.decisions else None
        want: Direction = "ingress" if dst == self.pod_ip else "egress"
        if src != self.pod_ip and dst != self.pod_ip:
            return None
        return self.for_direction(want)

    def for_direction(self, direction: Direction) -> Decision | None:
        """The decision the rule stands for in ``direction`` (a policy chain's rule has
        one direction; None when it stands for nothing in that one)."""
        return next((d for d in self.decisions if d.direction == direction), None)


@dataclass(frozen=True, slots=True)
class PolicyRules:
    """One node's kube-router rules.

    ``filter``: an ``iptables-restore --noflush`` payload for table filter: every chain
    declared (so flushed) and refilled, and the top-level jumps inserted at position 1
    of INPUT, FORWARD and OUTPUT. ``ipsets``: ``ipset restore`` text (``create`` with
    ``-exist``, ``flush``, ``add``). ``origins``: (chain, rule text after ``-A CHAIN `` as
    iptables-save prints it) → :class:`RuleOrigin`, for each rule that decides.
    ``chains``: the user chains, in the order declared; ``jumps``: the top-level jump
    rules in save form (``-A INPUT ...``); ``rules``: every user-chain rule in save form,
    in order."""

    filter: str
    ipsets: str
    origins: Mapping[tuple[str, str], RuleOrigin]
    chains: tuple[str, ...] = ()
    jumps: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    set_names: tuple[str, ...] = field(default=())


# --------------------------------------------------------------------------- rendering


class PodTiers(Protocol):
    """What a pod chain runs around its NetworkPolicy jumps (svclab's ClusterNetworkPolicy
    extension, :mod:`dataplane.netpol.clusterpolicy`): per pod and direction, the jump
    rules (text after ``-A CHAIN ``) that run before the NetworkPolicy jumps
    (``before``: the Admin tier) and, for a direction no NetworkPolicy isolates, before
    the ``KUBE-NWPLCY-DEFAULT`` jump (``unisolated``: the Baseline tier). It declares
    the chains and sets those jumps reach through ``writer``."""

    def before(self, writer: RuleWriter, pod: PolicyPod, direction: Direction) -> list[str]: ...

    def unisolated(self, writer: RuleWriter, pod: PolicyPod, direction: Direction) -> list[str]: ...


class RuleWriter(Protocol):
    """The part of a node's rendering a :class:`PodTiers` writes through: declare a
    chain, append a rule (with what it stands for), declare an ipset."""

    pods: list[PolicyPod]

    def chain(self, name: str) -> None: ...

    def add(self, chain: str, spec: str, origin: RuleOrigin | None = None) -> None: ...

    def ipset(
        self, name: str, kind: str, members: Iterable[str], nomatch: Iterable[str] = ()
    ) -> str: ...

    def pod_set(self, name: str, pods: Iterable[PolicyPod]) -> str: ...


class _Render:
    def __init__(
        self,
        pods: Sequence[PolicyPod],
        namespaces: Mapping[str, Mapping[str, str]],
        tiers: PodTiers | None = None,
    ) -> None:
        self.tiers = tiers
        self.pods = [p for p in pods if not p.host_network]
        self.namespaces = namespaces
        #: the pods of each namespace (a policy selects, and a peer without a
        #: namespaceSelector matches, pods of one namespace only)
        self.by_ns: dict[str, list[PolicyPod]] = {}
        for p in self.pods:
            self.by_ns.setdefault(p.namespace, []).append(p)
        self._ns_of_selector: dict[str, list[str]] = {}
        self.chains: list[str] = []
        self.rules: list[str] = []
        self.origins: dict[tuple[str, str], RuleOrigin] = {}
        self.sets: dict[str, tuple[str, list[str], list[str]]] = {}

    # -- building blocks
    def chain(self, name: str) -> None:
        if name not in self.chains:
            self.chains.append(name)

    def add(self, chain: str, spec: str, origin: RuleOrigin | None = None) -> None:
        self.rules.append(f"-A {chain} {spec}")
        if origin is not None:
            self.origins.setdefault((chain, spec), origin)

    def ipset(
        self, name: str, kind: str, members: Iterable[str], nomatch: Iterable[str] = ()
    ) -> str:
        if name not in self.sets:
            self.sets[name] = (
                kind,
                sorted(set(members), key=_sort_key),
                sorted(set(nomatch), key=_sort_key),
            )
        return name

    def pod_set(self, name: str, pods: Iterable[PolicyPod]) -> str:
        return self.ipset(name, "hash:ip", (str(p.ip) for p in pods))

    # -- policies
    def targets(self, policy: NetworkPolicy) -> list[PolicyPod]:
        return [p for p in self.by_ns.get(policy.namespace, ()) if selects(policy, p)]

    def peer_pods(self, peer: Peer, policy: NetworkPolicy) -> list[PolicyPod]:
        """The pods ``peer`` (a selector peer) matches, drawn from the namespaces it can
        match only (the answer is :func:`peer_matches`' over every pod)."""
        if peer.namespace_selector is None:
            spaces = [policy.namespace]
        else:
            sel = peer.namespace_selector
            key = json.dumps(sel.model_dump(), sort_keys=True)
            cached = self._ns_of_selector.get(key)
            if cached is None:
                cached = self._ns_of_selector[key] = [
                    ns for ns in self.by_ns if sel.matches(self.namespaces.get(ns, {}))
                ]
            spaces = cached
        return [
            p
            for ns in spaces
            for p in self.by_ns.get(ns, ())
            if peer_matches(peer, policy.namespace, p, p.ip, self.namespaces)
        ]

    def peer_set(
        self, policy: NetworkPolicy, direction: Direction, i: int, j: int, peer: Peer
    ) -> str:
        prefix = "KUBE-SRC-" if direction == "ingress" else "KUBE-DST-"
        base = f"{policy.namespace}{policy.name}{direction}rule{i}peer{j}"
        if peer.ip_block is not None:
            block = peer.ip_block
            cidrs = _halves(block.cidr)
            return self.ipset(
                prefix + _hash(base + "ipblock"), "hash:net", cidrs, (str(e) for e in block.excepts)
            )
        return self.pod_set(prefix + _hash(base + "pod"), self.peer_pods(peer, policy))

    def policy(self, policy: NetworkPolicy, direction: Direction) -> None:
        chain = policy_chain(policy, direction)
        self.chain(chain)
        targets = self.targets(policy)
        own = self.pod_set(
            ("KUBE-DST-" if direction == "ingress" else "KUBE-SRC-")
            + _hash(policy.namespace + policy.name + ("" if direction == "ingress" else "egress")),
            targets,
        )
        what = f"policy name {policy.name} namespace {policy.namespace}"
        peers_field = "from" if direction == "ingress" else "to"
        for i, rule in enumerate(policy.rules(direction)):
            peers: list[tuple[int | None, Peer | None]] = (
                [(j, p) for j, p in enumerate(rule.peers)] if rule.peers else [(None, None)]
            )
            for j, peer in peers:
                other = None if peer is None else self.peer_set(policy, direction, i, j or 0, peer)
                comment = _allow_comment(direction, peer, what)
                if j is not None:
                    assert peer is not None
                    path, reason = f"{direction}[{i}].{peers_field}[{j}]", peer.describe()
                ports: list[tuple[int | None, PortSpec | None]] = (
                    [(k, s) for k, s in enumerate(rule.ports)] if rule.ports else [(None, None)]
                )
                for k, spec in ports:
                    if j is None:
                        if k is not None:
                            assert spec is not None
                            path, reason = f"{direction}[{i}].ports[{k}]", spec.describe()
                        else:
                            path, reason = f"{direction}[{i}]", "every peer, every port"
                    decision = Decision(direction, True, policy.key, path, reason)
                    for src, dst, proto in self.port_matches(
                        policy, direction, i, j, peer, k, spec, own, other, targets
                    ):
                        match = (
                            f"-m set --match-set {src} src -m set --match-set {dst} dst"
                            if src and dst
                            else (
                                f"-m set --match-set {src} src"
                                if src
                                else f"-m set --match-set {dst} dst"
                            )
                        )
                        head = f"{_comment(comment)} {match}"
                        if proto:
                            head = (
                                f"-p {proto[0]} {_comment(comment)} {match} {proto[1]}"
                                if proto[1]
                                else f"-p {proto[0]} {_comment(comment)} {match}"
                            )
                        self.add(
                            chain, f"{head} -j MARK --set-xmark {_MATCHED}", RuleOrigin((decision,))
                        )
                        self.add(chain, f"{head} -m mark --mark {_MATCHED} -j RETURN")

    def port_matches(
        self,
        policy: NetworkPolicy,
        direction: Direction,
        i: int,
        j: int | None,
        peer: Peer | None,
        k: int | None,
        spec: PortSpec | None,
        own: str,
        other: str | None,
        targets: Sequence[PolicyPod],
    ) -> list[tuple[str | None, str | None, tuple[str, str] | None]]:
        """(src set, dst set, (protocol, port match text)) per rule line."""
        src, dst = (other, own) if direction == "ingress" else (own, other)
        if spec is None:
            return [(src, dst, None)]
        proto = spec.protocol.lower()
        if spec.port is None:
            return [(src, dst, (proto, ""))]
        if isinstance(spec.port, int):
            port = f"{spec.port}:{spec.end_port}" if spec.end_port is not None else str(spec.port)
            return [(src, dst, (proto, f"-m {proto} --dport {port}"))]
        # a named port: resolved against each destination pod that defines it
        if direction == "ingress":
            candidates = list(targets)
        elif peer is None:
            candidates = list(self.pods)
        elif peer.ip_block is not None:
            candidates = [p for p in self.pods if peer.ip_block.contains(p.ip)]
        else:
            candidates = self.peer_pods(peer, policy)
        by_number: dict[int, list[PolicyPod]] = {}
        for p in candidates:
            named = p.ports.get(spec.port)
            if named is not None and named[0] == spec.protocol:
                by_number.setdefault(named[1], []).append(p)
        out: list[tuple[str | None, str | None, tuple[str, str] | None]] = []
        for number, pods in sorted(by_number.items()):
            base = f"{policy.namespace}{policy.name}{direction}rule{i}peer{j}namedport{k}{number}"
            named_set = self.pod_set("KUBE-DST-" + _hash(base), pods)
            if direction == "ingress":
                out.append((src, named_set, (proto, f"-m {proto} --dport {number}")))
            else:
                out.append((src, named_set, (proto, f"-m {proto} --dport {number}")))
        return out

    # -- pods
    def pod(
        self, pod: PolicyPod, ingress: Sequence[NetworkPolicy], egress: Sequence[NetworkPolicy]
    ) -> str:
        chain = pod_chain(pod.namespace, pod.name)
        self.chain(chain)
        ip = f"{pod.ip}/32"
        key, sip = pod.key, str(pod.ip)
        self.add(
            chain,
            f"{_comment('rule for stateful firewall for pod')} "
            "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        )
        self.add(
            chain,
            f"{_comment('rule to drop invalid state for pod')} "
            "-m conntrack --ctstate INVALID -j DROP",
        )
        self.add(
            chain,
            f"-d {ip} {_comment(LOCAL_COMMENT)} -m addrtype --src-type LOCAL -j ACCEPT",
            RuleOrigin((Decision("ingress", True, reason="from the pod's own node"),), key, sip),
        )
        denials: list[Decision] = []
        for direction, pols, flag in (("egress", egress, "-s"), ("ingress", ingress, "-d")):
            d: Direction = "egress" if direction == "egress" else "ingress"
            if self.tiers is not None:
                for spec in self.tiers.before(self, pod, d):
                    self.add(chain, spec)
            if not pols:
                if self.tiers is not None:
                    for spec in self.tiers.unisolated(self, pod, d):
                        self.add(chain, spec)
                self.add(
                    chain,
                    f"{flag} {ip} {_comment(f'run through default {d} network policy  chain')} "
                    f"-j {DEFAULT_CHAIN}",
                    RuleOrigin((Decision(d, True, reason=f"not isolated for {d}"),), key, sip),
                )
                continue
            for pol in sorted(pols, key=lambda p: p.key):
                self.add(
                    chain,
                    f"{flag} {ip} {_comment('run through nw policy ' + pol.name)} "
                    f"-j {policy_chain(pol, d)}",
                )
            first = min(pols, key=lambda p: p.key)
            denials.append(Decision(d, False, first.key, None, f"{d}, no rule matched"))
        deny = RuleOrigin(tuple(denials), key, sip) if denials else None
        who = f"POD name:{pod.name} namespace: {pod.namespace}"
        self.add(
            chain,
            f"{_comment('rule to log dropped traffic ' + who)} "
            f"-m mark ! --mark {_MATCHED} -m limit --limit 10/min --limit-burst 10 "
            f"-j NFLOG --nflog-group {NFLOG_GROUP}",
            deny,
        )
        self.add(
            chain,
            f"{_comment('rule to REJECT traffic destined for ' + who)} "
            f"-m mark ! --mark {_MATCHED} -j REJECT --reject-with icmp-port-unreachable",
            deny,
        )
        self.add(chain, "-j MARK --set-xmark 0x0/0x10000")
        self.add(
            chain,
            f"{_comment('set mark to ACCEPT traffic that comply to network policies')} "
            f"-j MARK --set-xmark {_ACCEPTED}",
        )
        return chain


def _allow_comment(direction: Direction, peer: Peer | None, what: str) -> str:
    if peer is None:
        ends = (
            ("all sources", "dest pods")
            if direction == "ingress"
            else ("source pods", "all destinations")
        )
    elif peer.ip_block is not None:
        ends = (
            ("specified ipBlocks", "dest pods")
            if direction == "ingress"
            else ("source pods", "specified ipBlocks")
        )
    else:
        ends = ("source pods", "dest pods")
    return f"rule to ACCEPT traffic from {ends[0]} to {ends[1]} selected by {what}"


def _sort_key(member: str) -> tuple[int, int, str]:
    net = ip_network(member, strict=False)
    return (net.version, int(net.network_address), member)


def _halves(cidr: IPv4Network | object) -> list[str]:
    net = ip_network(str(cidr), strict=False)
    if net.prefixlen == 0:
        return [str(s) for s in net.subnets(prefixlen_diff=1)]
    return [str(net)]


def render_policy(
    node: str,
    node_ip: str,
    pods: Sequence[PolicyPod],
    policies: Sequence[NetworkPolicy],
    namespaces: Mapping[str, Mapping[str, str]],
    *,
    service_cidrs: Sequence[str] = (),
    node_port_range: tuple[int, int] = NODE_PORT_RANGE,
    tiers: PodTiers | None = None,
) -> PolicyRules:
    """kube-router's rules on ``node`` (whose address is ``node_ip``): pod chains for the
    pods of ``pods`` running on it (``PolicyPod.node``), a chain for every policy that
    selects one of them, and the ipsets those use (members drawn from every pod of the
    cluster). ``namespaces``: every namespace's labels. ``service_cidrs``: the cluster's
    Service ranges (RETURNed in ``KUBE-ROUTER-INPUT``). ``tiers``: rules each pod chain
    runs around its NetworkPolicy jumps (:class:`PodTiers`; None: kube-router's layout
    alone). Pure and deterministic: the same inputs give the same text."""
    del node_ip  # kube-router's node address only filters its pod list, which ``node`` does
    r = _Render(pods, namespaces, tiers)
    for c in (*TOP_CHAINS.values(), DEFAULT_CHAIN):
        r.chain(c)
    local = sorted((p for p in r.pods if p.node == node), key=lambda p: (p.namespace, p.name))
    inp, fwd, out = TOP_CHAINS["INPUT"], TOP_CHAINS["FORWARD"], TOP_CHAINS["OUTPUT"]
    for cidr in service_cidrs:
        net = ip_network(cidr, strict=False)
        r.add(
            inp,
            f"-d {net} {_comment('allow traffic to primary/secondary cluster IP range - ' + _hash(inp + str(net)))} -j RETURN",
        )
    lo, hi = node_port_range
    for proto in ("tcp", "udp"):
        text = f"allow LOCAL {proto.upper()} traffic to node ports - {_hash(inp + proto + str(lo) + str(hi))}"
        r.add(
            inp,
            f"-p {proto} {_comment(text)} -m addrtype --dst-type LOCAL "
            f"-m multiport --dports {lo}:{hi} -j RETURN",
        )
    r.add(
        DEFAULT_CHAIN,
        f"{_comment('rule to mark traffic matching a network policy')} "
        f"-j MARK --set-xmark {_MATCHED}",
    )
    used: dict[tuple[str, str], tuple[NetworkPolicy, Direction]] = {}
    egress_jumps: list[tuple[str, str]] = []
    ingress_jumps: list[tuple[str, str]] = []
    policies_of: dict[str, list[NetworkPolicy]] = {}
    for pol in policies:  # a policy selects pods of its own namespace only
        policies_of.setdefault(pol.namespace, []).append(pol)
    for pod in local:
        mine = policies_of.get(pod.namespace, ())
        ingress = [p for p in mine if "ingress" in p.types and selects(p, pod)]
        egress = [p for p in mine if "egress" in p.types and selects(p, pod)]
        for p in ingress:
            used.setdefault((p.key, "ingress"), (p, "ingress"))
        for p in egress:
            used.setdefault((p.key, "egress"), (p, "egress"))
        chain = r.pod(pod, ingress, egress)
        ip = f"{pod.ip}/32"
        to = f"to chain {chain}"
        dst = _comment(
            f"rule to jump traffic destined to POD name:{pod.name} namespace: {pod.namespace} {to}"
        )
        src = _comment(
            f"rule to jump traffic from POD name:{pod.name} namespace: {pod.namespace} {to}"
        )
        bridged = "-m physdev --physdev-is-bridged"
        egress_jumps += [
            (inp, f"-s {ip} {src} -j {chain}"),
            (fwd, f"-s {ip} {src} -j {chain}"),
            (fwd, f"-s {ip} {bridged} {src} -j {chain}"),
            (out, f"-s {ip} {src} -j {chain}"),
        ]
        ingress_jumps += [
            (fwd, f"-d {ip} {dst} -j {chain}"),
            (fwd, f"-d {ip} {bridged} {dst} -j {chain}"),
            (out, f"-d {ip} {dst} -j {chain}"),
        ]
    for c, spec in (*egress_jumps, *ingress_jumps):
        r.add(c, spec)
    for key in sorted(used):
        pol, direction = used[key]
        r.policy(pol, direction)
    accept = _comment("rule to explicitly ACCEPT traffic that comply to network policies")
    for c in TOP_CHAINS.values():
        r.add(c, f"{accept} -m mark --mark {_ACCEPTED} -j ACCEPT")
    jumps = tuple(
        f"-A {builtin} {_comment('kube-router netpol - ' + _hash(builtin + chain))} -j {chain}"
        for builtin, chain in TOP_CHAINS.items()
    )
    lines = ["*filter", *(f":{c} - [0:0]" for c in r.chains)]
    lines += [j.replace("-A ", "-I ", 1).replace(" -m comment", " 1 -m comment", 1) for j in jumps]
    lines += r.rules
    lines.append("COMMIT")
    sets: list[str] = []
    for name, (kind, members, nomatch) in r.sets.items():
        sets.append(f"create {name} {kind} family inet hashsize 1024 maxelem 65536 -exist")
        sets.append(f"flush {name}")
        sets += [f"add {name} {m}" for m in members]
        sets += [f"add {name} {m} nomatch" for m in nomatch]
    return PolicyRules(
        filter="\n".join(lines) + "\n",
        ipsets="\n".join(sets) + "\n" if sets else "",
        origins=r.origins,
        chains=tuple(r.chains),
        jumps=jumps,
        rules=tuple(r.rules),
        set_names=tuple(r.sets),
    )


def node_policy_rules(
    node: str,
    node_ip: str,
    pods: Sequence[PolicyPod],
    policies: Sequence[NetworkPolicy],
    namespaces: Mapping[str, Mapping[str, str]],
    *,
    service_cidrs: Sequence[str] = (),
) -> PolicyRules | None:
    """:func:`render_policy`, or None when the cluster has no NetworkPolicy (the agent's
    rules then change nothing svclab models, and are left out)."""
    if not policies:
        return None
    return render_policy(node, node_ip, pods, policies, namespaces, service_cidrs=service_cidrs)


# --------------------------------------------------------------------------- joining


def _save_set_text(pol: PolicyRules) -> str:
    """The sets in ``ipset save`` form (what the emulator reads): create/add lines."""
    out = []
    for line in pol.ipsets.splitlines():
        if line.startswith("flush "):
            continue
        out.append(line.removesuffix(" -exist"))
    return "\n".join(out) + ("\n" if out else "")


def merge_filter(text: str, pol: PolicyRules) -> str:
    """``text`` (iptables-save or restore text) with kube-router's filter chains: the
    chains declared after the filter table's declarations, the top-level jumps heading
    INPUT, FORWARD and OUTPUT (as kube-router inserts them at position 1), the chains'
    rules before the table's ``COMMIT``; a text without a filter table gets one."""
    lines = text.splitlines()
    out: list[str] = []
    in_filter = placed = done = False
    for line in lines:
        s = line.strip()
        if s == "*filter" and not done:
            in_filter = True
            out.append(line)
            continue
        if in_filter:
            if s.startswith(":"):
                out.append(line)
                continue
            if s and not s.startswith("#") and not placed:
                out += [f":{c} - [0:0]" for c in pol.chains]
                out += pol.jumps
                placed = True
            if s == "COMMIT":
                out += pol.rules
                in_filter, done = False, True
        out.append(line)
    merged = "\n".join(out) + "\n"
    if not done:
        table = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
        table += [f":{c} - [0:0]" for c in pol.chains]
        table += [*pol.jumps, *pol.rules, "COMMIT"]
        merged += "\n".join(table) + "\n"
    return merged


def _join_sets(a: str, b: str) -> str:
    return a + (b if not a or a.endswith("\n") else "\n" + b)


def with_policy(rules: RulesetInput, pol: PolicyRules | None) -> RulesetInput:
    """A node's rules with kube-router's beside kube-proxy's (``pol`` None: unchanged):
    iptables mode — merged into the same filter table, the sets beside; IPVS mode —
    into the iptables glue, the sets with kube-proxy's; nftables mode — kube-proxy's nft
    ruleset plus kube-router's iptables filter table and sets (iptables-nft tables of
    their own, as on a real node)."""
    if pol is None:
        return rules
    sets = _save_set_text(pol)
    if isinstance(rules, IptablesRules):
        return replace(
            rules, text=merge_filter(rules.text, pol), ipsets=_join_sets(rules.ipsets, sets)
        )
    if isinstance(rules, IpvsRules):
        return replace(
            rules, iptables=merge_filter(rules.iptables, pol), ipset=_join_sets(rules.ipset, sets)
        )
    assert isinstance(rules, NftRules)
    return replace(
        rules, iptables=merge_filter(rules.iptables, pol), ipsets=_join_sets(rules.ipsets, sets)
    )


__all__ = [
    "DEFAULT_CHAIN",
    "MARK_ACCEPT",
    "MARK_MATCHED",
    "MATCHED_TEXT",
    "NFLOG_GROUP",
    "PodTiers",
    "PolicyRules",
    "RuleOrigin",
    "RuleWriter",
    "comment_match",
    "merge_filter",
    "name_hash",
    "node_policy_rules",
    "pod_chain",
    "policy_chain",
    "render_policy",
    "with_policy",
]
