"""ClusterNetworkPolicy (``policy.networking.k8s.io/v1alpha2``, the network-policy-api)
as values, and its tiered decision around :func:`netmodel.netpolicy.decide`: pure, no
I/O.

The kind is a CustomResourceDefinition, as on a real cluster: svclab ships the
project's standard-channel CRD (``netmodel/crddata``, provenance in its
``PROVENANCE.md``), whose OpenAPI schema and CEL rules the API server evaluates. Stored
objects are therefore valid; :func:`policy_from_wire` reads one.

The semantics, from the API's own text (``apis/v1alpha2/clusternetworkpolicy_types.go``
and the site's "API Object Overview", kubernetes-sigs/network-policy-api v0.2.0):

* **Tiers**, evaluated in order: the ``Admin`` tier, then the NetworkPolicy tier
  (namespaced ``networking.k8s.io/v1`` policies), then the ``Baseline`` tier; a
  connection no tier decides is allowed (the Kubernetes default).
* Within a tier, policies by ``priority``, lower first; the API leaves the order of
  equal priorities to the implementation: svclab takes them by name. Within a policy,
  rules in the order written. The first rule that matches decides:
  ``Accept`` allows (no further ClusterNetworkPolicy or NetworkPolicy rule of that
  direction is read), ``Deny`` drops, ``Pass`` skips the rest of its tier.
* The NetworkPolicy tier decides for a pod it isolates in that direction (``v1``
  "always makes a final decision for selected pods"); the Baseline tier is read only
  for pods no NetworkPolicy isolates. So an Admin ``Pass`` reaches the NetworkPolicies
  and, when none isolates the pod, the Baseline tier.
* Each direction on its own, as for NetworkPolicy: the source's egress rules and the
  destination's ingress rules (an egress ``Accept`` "but any ingress rules at the
  destination do apply").
* ``subject``: ``namespaces`` (every pod of the namespaces the selector picks) or
  ``pods`` (``namespaceSelector`` AND ``podSelector``); host-network pods are never
  subjects, nor matched by ``namespaces``/``pods`` peers.
* Peers: ``namespaces``, ``pods``; for egress also ``networks`` (CIDRs, matched on the
  destination address, pod addresses included: "cluster-internal traffic will be
  checked against the rule as well").
* ``protocols`` absent: every protocol and port; else one entry matches: ``tcp`` /
  ``udp`` / ``sctp`` with a ``destinationPort`` ``number`` or ``range`` (inclusive),
  or ``destinationNamedPort``, a container port name of the destination pod (its
  protocol and number; a name no container declares matches nothing).
* Hairpin: "A Pod connecting to its own Pod IP is not subject to CNP", but through a
  Service back to itself it is (``through_service``).
* **Fail closed.** A peer svclab cannot evaluate (``nodes`` or ``domainNames`` of the
  experimental channel, a selector that is not a valid label selector) follows the
  API's rule for peers an implementation does not know: in an ``Accept`` rule it
  matches nothing; a ``Deny`` or ``Pass`` rule holding one is a "Deny all" rule.

:func:`decide` has :func:`netmodel.netpolicy.decide`'s shape and answer: with no
ClusterNetworkPolicy it returns exactly what ``netpolicy.decide`` returns. A decision
of a ClusterNetworkPolicy names it ``ClusterNetworkPolicy/NAME`` with the rule path
``ingress[0].from[1]`` and the rule's name in quotes when it has one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import ip_network
from typing import Any, Literal, cast

from netmodel.netpolicy import (
    Address,
    ConnectionDecision,
    Decision,
    Direction,
    Network,
    NetworkPolicy,
    PolicyPod,
    Protocol,
    selector_text,
    selects,
)
from netmodel.netpolicy import decide as decide_networkpolicy
from netmodel.selectors import LabelSelector

GROUP = "policy.networking.k8s.io"
API_VERSION = f"{GROUP}/v1alpha2"
KIND = "ClusterNetworkPolicy"
#: the store kind (the CRD's name) under which svclab keeps the objects
STORE_KIND = f"clusternetworkpolicies.{GROUP}"

Tier = Literal["Admin", "Baseline"]
Action = Literal["Accept", "Deny", "Pass"]
_PROTOCOL_FIELDS: tuple[tuple[str, Protocol], ...] = (
    ("tcp", "TCP"),
    ("udp", "UDP"),
    ("sctp", "SCTP"),
)


def _valid_selector(d: Any) -> LabelSelector | None:
    """``d`` as a label selector, None when kube's ``LabelSelectorAsSelector`` would
    refuse it (an unknown operator; In/NotIn without values; Exists/DoesNotExist with
    values). The CRD's schema does not check these."""
    try:
        sel = LabelSelector.model_validate(d or {})
    except ValueError:
        return None
    for req in sel.match_expressions:
        if req.operator in ("In", "NotIn"):
            if not req.values:
                return None
        elif req.operator in ("Exists", "DoesNotExist"):
            if req.values:
                return None
        else:
            return None
    return sel


@dataclass(frozen=True, slots=True)
class Subject:
    """The pods a policy applies to: those of the namespaces ``namespaces`` selects
    and, for the ``pods`` form, that ``pods`` selects. ``valid`` False: a selector kube
    could not use, which selects nothing."""

    namespaces: LabelSelector
    pods: LabelSelector | None = None
    valid: bool = True

    def selects(self, pod: PolicyPod, namespaces: Mapping[str, Mapping[str, str]]) -> bool:
        if not self.valid or pod.host_network:
            return False
        if not self.namespaces.matches(namespaces.get(pod.namespace, {})):
            return False
        return self.pods is None or self.pods.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class ClusterPeer:
    """One entry of a rule's ``from``/``to``: exactly one of ``namespaces`` (with
    ``pods`` for the ``pods`` form) or ``networks``; ``unknown`` names a peer svclab
    does not evaluate (it fails closed, see the module docstring)."""

    namespaces: LabelSelector | None = None
    pods: LabelSelector | None = None
    networks: tuple[Network, ...] = ()
    unknown: str = ""

    def matches(
        self,
        other: PolicyPod | None,
        other_ip: Address,
        namespaces: Mapping[str, Mapping[str, str]],
    ) -> bool:
        """The peer matches the other end: a pod (``other``, at ``other_ip``) or a bare
        address. An unknown peer matches nothing here."""
        if self.unknown:
            return False
        if self.networks:
            return any(other_ip.version == n.version and other_ip in n for n in self.networks)
        if other is None or other.host_network or self.namespaces is None:
            return False
        if not self.namespaces.matches(namespaces.get(other.namespace, {})):
            return False
        return self.pods is None or self.pods.matches(other.labels)

    def describe(self) -> str:
        if self.unknown:
            return f"{self.unknown} (not evaluated: fails closed)"
        if self.networks:
            return f"networks {','.join(map(str, self.networks))}"
        ns = selector_text(self.namespaces or LabelSelector())
        if self.pods is None:
            return f"namespaces {ns}"
        return f"pods namespaceSelector {ns}, podSelector {selector_text(self.pods)}"


@dataclass(frozen=True, slots=True)
class ProtocolMatch:
    """One entry of ``protocols``: ``protocol`` with ports ``start``..``end``
    (inclusive; both None: every port), or ``named_port`` (protocol None)."""

    protocol: Protocol | None = None
    start: int | None = None
    end: int | None = None
    named_port: str | None = None

    def matches(self, protocol: str, port: int, destination: PolicyPod | None) -> bool:
        if self.named_port is not None:
            if destination is None:
                return False
            return destination.ports.get(self.named_port) == (protocol, port)
        if self.protocol != protocol:
            return False
        if self.start is None or self.end is None:
            return True
        return self.start <= port <= self.end

    def describe(self) -> str:
        if self.named_port is not None:
            return f"destinationNamedPort {self.named_port}"
        if self.start is None:
            return str(self.protocol)
        if self.start == self.end:
            return f"{self.protocol} {self.start}"
        return f"{self.protocol} {self.start}-{self.end}"


@dataclass(frozen=True, slots=True)
class ClusterRule:
    """One ingress or egress rule. ``protocols`` empty: every protocol and port."""

    action: Action
    peers: tuple[ClusterPeer, ...]
    protocols: tuple[ProtocolMatch, ...] = ()
    name: str = ""

    @property
    def fails_closed(self) -> bool:
        """A Deny or Pass rule holding a peer svclab cannot evaluate: a Deny-all rule."""
        return self.action != "Accept" and any(p.unknown for p in self.peers)


@dataclass(frozen=True, slots=True)
class ClusterNetworkPolicy:
    name: str
    tier: Tier
    priority: int
    subject: Subject
    ingress: tuple[ClusterRule, ...] = ()
    egress: tuple[ClusterRule, ...] = ()

    @property
    def key(self) -> str:
        """How decisions and traces name it: ``ClusterNetworkPolicy/NAME``."""
        return f"{KIND}/{self.name}"

    def rules(self, direction: Direction) -> tuple[ClusterRule, ...]:
        return self.ingress if direction == "ingress" else self.egress


# --------------------------------------------------------------------------- reading


def _peer(d: Mapping[str, Any]) -> ClusterPeer:
    if "networks" in d:
        return ClusterPeer(networks=tuple(ip_network(n, strict=False) for n in d["networks"]))
    if "namespaces" in d:
        ns = _valid_selector(d["namespaces"])
        return ClusterPeer(namespaces=ns) if ns is not None else ClusterPeer(unknown="namespaces")
    if "pods" in d:
        pods = d["pods"] or {}
        ns, pod = (
            _valid_selector(pods.get("namespaceSelector")),
            _valid_selector(pods.get("podSelector")),
        )
        if ns is None or pod is None:
            return ClusterPeer(unknown="pods")
        return ClusterPeer(namespaces=ns, pods=pod)
    return ClusterPeer(unknown=",".join(sorted(d)) or "an empty peer")


def _protocol(d: Mapping[str, Any]) -> ProtocolMatch:
    if d.get("destinationNamedPort"):
        return ProtocolMatch(named_port=str(d["destinationNamedPort"]))
    for key, proto in _PROTOCOL_FIELDS:
        if key in d:
            port = (d[key] or {}).get("destinationPort") or {}
            if "range" in port:
                return ProtocolMatch(proto, int(port["range"]["start"]), int(port["range"]["end"]))
            if "number" in port:
                return ProtocolMatch(proto, int(port["number"]), int(port["number"]))
            return ProtocolMatch(proto)
    raise ValueError(f"protocols entry with none of tcp, udp, sctp, destinationNamedPort: {d}")


def _rules(items: Iterable[Mapping[str, Any]] | None, peers: str) -> tuple[ClusterRule, ...]:
    return tuple(
        ClusterRule(
            action=cast(Action, r["action"]),
            peers=tuple(_peer(p) for p in r.get(peers) or ()),
            protocols=tuple(_protocol(p) for p in r.get("protocols") or ()),
            name=str(r.get("name") or ""),
        )
        for r in items or ()
    )


def _subject(d: Mapping[str, Any]) -> Subject:
    if "pods" in d:
        pods = d["pods"] or {}
        ns, pod = (
            _valid_selector(pods.get("namespaceSelector")),
            _valid_selector(pods.get("podSelector")),
        )
        if ns is None or pod is None:
            return Subject(LabelSelector(), valid=False)
        return Subject(ns, pod)
    ns = _valid_selector(d.get("namespaces"))
    return Subject(ns, None) if ns is not None else Subject(LabelSelector(), valid=False)


def policy_from_wire(d: Mapping[str, Any]) -> ClusterNetworkPolicy:
    """A stored ClusterNetworkPolicy (wire form, pruned and validated by the API server
    against the shipped CRD) as a value. Input that did not pass that validation is
    not this function's to judge."""
    meta, spec = d.get("metadata") or {}, d.get("spec") or {}
    return ClusterNetworkPolicy(
        name=str(meta["name"]),
        tier=cast(Tier, spec["tier"]),
        priority=int(spec["priority"]),
        subject=_subject(spec.get("subject") or {}),
        ingress=_rules(spec.get("ingress"), "from"),
        egress=_rules(spec.get("egress"), "to"),
    )


# --------------------------------------------------------------------------- deciding


@dataclass(frozen=True, slots=True)
class _Hit:
    """The rule of a tier that matched: which policy, where, what it does."""

    policy: ClusterNetworkPolicy
    action: Action
    path: str
    reason: str


def in_order(cnps: Iterable[ClusterNetworkPolicy]) -> list[ClusterNetworkPolicy]:
    """The order policies are read in: Admin before Baseline, then by priority (lower
    first), then by name (the API leaves equal priorities to the implementation)."""
    return sorted(cnps, key=lambda p: (p.tier != "Admin", p.priority, p.name))


def _first_hit(
    tier: Tier,
    direction: Direction,
    subject: PolicyPod,
    other: PolicyPod | None,
    other_ip: Address,
    protocol: str,
    port: int,
    destination: PolicyPod | None,
    cnps: Sequence[ClusterNetworkPolicy],
    namespaces: Mapping[str, Mapping[str, str]],
) -> _Hit | None:
    """The first rule of ``tier`` (``cnps`` in :func:`in_order`, rules in order) that
    matches the connection in ``direction`` for ``subject``, None when none does."""
    peers_field = "from" if direction == "ingress" else "to"
    for pol in cnps:
        if pol.tier != tier or not pol.subject.selects(subject, namespaces):
            continue
        for i, rule in enumerate(pol.rules(direction)):
            where = f"{direction}[{i}]"
            named = f' "{rule.name}"' if rule.name else ""
            head = f"{tier} tier, priority {pol.priority}"
            if rule.fails_closed:
                bad = next(p for p in rule.peers if p.unknown)
                return _Hit(pol, "Deny", where + named, f"{head}: {rule.action} {bad.describe()}")
            at = next(
                (j for j, p in enumerate(rule.peers) if p.matches(other, other_ip, namespaces)),
                None,
            )
            if at is None:
                continue
            reason = f"{head}: {rule.action} {rule.peers[at].describe()}"
            if rule.protocols:
                proto = next(
                    (m for m in rule.protocols if m.matches(protocol, port, destination)), None
                )
                if proto is None:
                    continue
                reason += f", {proto.describe()}"
            return _Hit(pol, rule.action, f"{where}.{peers_field}[{at}]{named}", reason)
    return None


def _from_hit(direction: Direction, hit: _Hit) -> Decision:
    return Decision(direction, hit.action == "Accept", hit.policy.key, hit.path, hit.reason)


def _after_pass(d: Decision, passed: list[_Hit]) -> Decision:
    """``d`` with the Pass rules that led to it named at the end of its reason."""
    if not passed:
        return d
    note = "; ".join(f"passed by {h.policy.key} {h.path}" for h in passed)
    return Decision(d.direction, d.allowed, d.policy, d.rule, f"{d.reason}; {note}")


def _direction(
    direction: Direction,
    subject: PolicyPod,
    other: PolicyPod | None,
    other_ip: Address,
    protocol: str,
    port: int,
    destination: PolicyPod | None,
    networkpolicy: Decision,
    np_final: bool,
    cnps: Sequence[ClusterNetworkPolicy],
    namespaces: Mapping[str, Mapping[str, str]],
) -> Decision:
    """One direction through the three tiers; ``networkpolicy``: the NetworkPolicy
    tier's decision, final when ``np_final`` (the pod is isolated in ``direction``)."""
    passed: list[_Hit] = []
    args = (direction, subject, other, other_ip, protocol, port, destination, cnps, namespaces)
    hit = _first_hit("Admin", *args)
    if hit is not None:
        if hit.action != "Pass":
            return _from_hit(direction, hit)
        passed.append(hit)
    if np_final:
        return _after_pass(networkpolicy, passed)
    hit = _first_hit("Baseline", *args)
    if hit is not None:
        if hit.action != "Pass":
            return _after_pass(_from_hit(direction, hit), passed)
        passed.append(hit)
    return _after_pass(networkpolicy, passed)


def _isolated(pod: PolicyPod, direction: Direction, policies: Sequence[NetworkPolicy]) -> bool:
    return any(direction in p.types and selects(p, pod) for p in policies)


def decide(
    src: PolicyPod | Address,
    dst: PolicyPod | Address,
    protocol: str,
    port: int,
    policies: Sequence[NetworkPolicy],
    namespaces: Mapping[str, Mapping[str, str]],
    *,
    cluster_policies: Sequence[ClusterNetworkPolicy] = (),
    src_is_dst_node: bool = False,
    through_service: bool = False,
) -> ConnectionDecision:
    """What the ClusterNetworkPolicies and NetworkPolicies say of a new connection from
    ``src`` to ``dst`` (a pod or a bare address) on ``protocol``/``port`` (after any
    DNAT), tier by tier (see the module docstring). The arguments are
    :func:`netmodel.netpolicy.decide`'s, plus ``cluster_policies`` and
    ``through_service`` (the connection went through a Service's DNAT: a pod reaching
    itself that way is subject to ClusterNetworkPolicy, by its own address it is not).
    With no ``cluster_policies`` the answer is ``netpolicy.decide``'s."""
    np = decide_networkpolicy(
        src, dst, protocol, port, policies, namespaces, src_is_dst_node=src_is_dst_node
    )
    src_pod = src if isinstance(src, PolicyPod) else None
    dst_pod = dst if isinstance(dst, PolicyPod) else None
    if not cluster_policies:
        return np
    hairpin = src_pod is not None and dst_pod is not None and src_pod.key == dst_pod.key
    if hairpin and not through_service:
        return np
    src_ip = src.ip if isinstance(src, PolicyPod) else src
    dst_ip = dst.ip if isinstance(dst, PolicyPod) else dst
    ordered = in_order(cluster_policies)
    egress = np.egress
    if src_pod is not None:
        egress = _direction(
            "egress",
            src_pod,
            dst_pod,
            dst_ip,
            protocol,
            port,
            dst_pod,
            np.egress,
            _isolated(src_pod, "egress", policies),
            ordered,
            namespaces,
        )
    ingress = np.ingress
    if dst_pod is not None:
        ingress = _direction(
            "ingress",
            dst_pod,
            src_pod,
            src_ip,
            protocol,
            port,
            dst_pod,
            np.ingress,
            _isolated(dst_pod, "ingress", policies),
            ordered,
            namespaces,
        )
    return ConnectionDecision(egress, ingress)


__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "STORE_KIND",
    "ClusterNetworkPolicy",
    "ClusterPeer",
    "ClusterRule",
    "ProtocolMatch",
    "Subject",
    "decide",
    "in_order",
    "policy_from_wire",
]
