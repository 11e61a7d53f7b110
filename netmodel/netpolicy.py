"""NetworkPolicy (networking.k8s.io/v1) as values, and what it lets through: the one
reference statement of the semantics, pure, no I/O.

Everything that reasons about policies (the reach matrix, the per-node policy agent's
rendering, a trace's attribution) agrees with :func:`decide`; tests compare them with it.

The semantics, from the Kubernetes docs ("Network Policies") and the API reference:

* A pod is **isolated for ingress** when some policy in its namespace selects it
  (``spec.podSelector``) and lists ``Ingress`` in ``policyTypes``; likewise egress.
  Policies are additive: a connection is allowed in a direction when the pod is not
  isolated in it, or when **some** rule of **some** policy selecting it allows it.
* A rule allows a peer when its ``from``/``to`` list is empty (every peer) or one of
  its peers matches, **and** its ``ports`` list is empty (every port) or one port
  matches. A rule with neither allows everything.
* A peer: ``podSelector`` alone selects pods of the policy's namespace;
  ``namespaceSelector`` alone every pod of the namespaces it selects; both, the pods
  ``podSelector`` selects in those namespaces; ``ipBlock`` an address in ``cidr`` and in
  no ``except``, whatever owns it (pod IPs included, as iptables-based agents match
  them).
* A port: ``protocol`` (TCP when absent), ``port`` a number (with ``endPort``, a range)
  or a name, resolved against the **destination** pod's container ports (a name that
  no container of the destination declares matches nothing, never an error); no
  ``port``: every port of the protocol.
* A connection from a pod to a pod is allowed when the source's egress **and** the
  destination's ingress allow it. Replies of an allowed connection always pass.
* Traffic from the node a pod runs on to that pod is always allowed (the docs: "traffic
  to and from the node where a Pod is running is always allowed"); host-network pods
  are never selected (their address is the node's).
* Through a Service, policy sees the packet after kube-proxy's DNAT: the backend pod's
  address and target port.

Named contract for the rest of the code:

* :func:`policy_from_wire` reads one stored (defaulted, validated) object;
* :class:`PolicyPod` is a pod as policy sees it;
* :func:`decide` answers one connection with its :class:`Decision` per direction,
  naming the policy and rule that decided (``ingress[0].from[1]``) for traces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network
from typing import Any, Literal, cast

from netmodel.selectors import LabelSelector

Protocol = Literal["TCP", "UDP", "SCTP"]
Direction = Literal["ingress", "egress"]
PROTOCOLS: tuple[Protocol, ...] = ("TCP", "UDP", "SCTP")
Address = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network


@dataclass(frozen=True, slots=True)
class IPBlock:
    cidr: Network
    excepts: tuple[Network, ...] = ()

    def contains(self, ip: Address) -> bool:
        if ip.version != self.cidr.version or ip not in self.cidr:
            return False
        return not any(ip in ex for ex in self.excepts)

    def __str__(self) -> str:
        if not self.excepts:
            return f"ipBlock {self.cidr}"
        return f"ipBlock {self.cidr} except {','.join(map(str, self.excepts))}"


@dataclass(frozen=True, slots=True)
class Peer:
    """One entry of a rule's ``from``/``to``. Exactly one of the three shapes: selectors
    (either or both set) or an ``ip_block``."""

    pod_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    ip_block: IPBlock | None = None

    def describe(self) -> str:
        """How a trace names the peer: ``namespaceSelector team=web``."""
        if self.ip_block is not None:
            return str(self.ip_block)
        parts = []
        if self.namespace_selector is not None:
            parts.append(f"namespaceSelector {selector_text(self.namespace_selector)}")
        if self.pod_selector is not None:
            parts.append(f"podSelector {selector_text(self.pod_selector)}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class PortSpec:
    """One entry of a rule's ``ports``: ``port`` None is every port of ``protocol``."""

    protocol: Protocol = "TCP"
    port: int | str | None = None
    end_port: int | None = None

    def describe(self) -> str:
        if self.port is None:
            return self.protocol
        if self.end_port is not None:
            return f"{self.protocol} {self.port}-{self.end_port}"
        return f"{self.protocol} {self.port}"


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One ingress or egress rule: ``peers`` empty is every peer, ``ports`` empty every
    port."""

    peers: tuple[Peer, ...] = ()
    ports: tuple[PortSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class NetworkPolicy:
    namespace: str
    name: str
    pod_selector: LabelSelector
    ingress: tuple[PolicyRule, ...] = ()
    egress: tuple[PolicyRule, ...] = ()
    #: ``spec.policyTypes`` as defaulted by the API server
    types: frozenset[Direction] = frozenset({"ingress"})

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def rules(self, direction: Direction) -> tuple[PolicyRule, ...]:
        return self.ingress if direction == "ingress" else self.egress


@dataclass(frozen=True, slots=True)
class PolicyPod:
    """A pod as policy sees it. ``ports``: its containers' named ports, name →
    (protocol, number)."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    ip: Address
    node: str = ""
    ports: Mapping[str, tuple[Protocol, int]] = field(default_factory=dict)
    host_network: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Decision:
    """One direction's verdict on a connection.

    ``policy`` None: no policy isolates the pod in that direction (allowed), or the
    traffic comes from the pod's own node. ``rule``: the path of the rule part that
    allowed it (``ingress[0].from[1]``, ``egress[2].ports[0]``, ``ingress[0]`` for a
    rule with neither peers nor ports); None when denied. ``reason``: the text a trace
    prints after the policy's name."""

    direction: Direction
    allowed: bool
    policy: str | None = None
    rule: str | None = None
    reason: str = ""

    def describe(self) -> str:
        """``shop/allow-frontend ingress[0].from[1] (namespaceSelector team=web) →
        ACCEPT``, ``default/deny-all (ingress, no rule matched) → DROP``, ``not isolated
        for ingress → ACCEPT``."""
        verdict = "ACCEPT" if self.allowed else "DROP"
        if self.policy is None:
            return f"{self.reason} → {verdict}"
        where = f" {self.rule}" if self.rule else ""
        return f"{self.policy}{where} ({self.reason}) → {verdict}"


@dataclass(frozen=True, slots=True)
class ConnectionDecision:
    """Both directions of one connection: ``allowed`` when both allow."""

    egress: Decision
    ingress: Decision

    @property
    def allowed(self) -> bool:
        return self.egress.allowed and self.ingress.allowed

    @property
    def deciding(self) -> Decision:
        """The direction a trace names: the one that dropped, else ingress."""
        return self.egress if not self.egress.allowed else self.ingress


# --------------------------------------------------------------------------- reading


def selector_text(sel: LabelSelector) -> str:
    """kubectl's selector text (``{}`` for the empty selector, which selects all)."""
    parts = [f"{k}={v}" for k, v in sel.match_labels.items()]
    for req in sel.match_expressions:
        if req.operator in ("In", "NotIn"):
            op = "in" if req.operator == "In" else "notin"
            parts.append(f"{req.key} {op} ({','.join(req.values)})")
        else:
            parts.append(req.key if req.operator == "Exists" else f"!{req.key}")
    return ",".join(parts) if parts else "{}"


def _selector(d: Any) -> LabelSelector | None:
    return None if d is None else LabelSelector.model_validate(d)


def _peer(d: Mapping[str, Any]) -> Peer:
    block = d.get("ipBlock")
    if block is not None:
        return Peer(
            ip_block=IPBlock(
                ip_network(block["cidr"], strict=False),
                tuple(ip_network(e, strict=False) for e in block.get("except") or ()),
            )
        )
    return Peer(_selector(d.get("podSelector")), _selector(d.get("namespaceSelector")))


def _port(d: Mapping[str, Any]) -> PortSpec:
    return PortSpec(d.get("protocol") or "TCP", d.get("port"), d.get("endPort"))


def _rules(items: Iterable[Mapping[str, Any]] | None, peers: str) -> tuple[PolicyRule, ...]:
    return tuple(
        PolicyRule(
            tuple(_peer(p) for p in r.get(peers) or ()),
            tuple(_port(p) for p in r.get("ports") or ()),
        )
        for r in items or ()
    )


def policy_from_wire(d: Mapping[str, Any]) -> NetworkPolicy:
    """A stored NetworkPolicy (wire form, defaulted and validated by the API server:
    see :mod:`control.apiserver.kinds_networking`) as a value. Input that did not pass
    the API server's validation is not this function's to judge."""
    meta, spec = d.get("metadata") or {}, d.get("spec") or {}
    types = spec.get("policyTypes") or (
        ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]
    )
    return NetworkPolicy(
        namespace=meta.get("namespace") or "default",
        name=meta["name"],
        pod_selector=LabelSelector.model_validate(spec.get("podSelector") or {}),
        ingress=_rules(spec.get("ingress"), "from"),
        egress=_rules(spec.get("egress"), "to"),
        types=frozenset("ingress" if t == "Ingress" else "egress" for t in types),
    )


def named_ports(containers: Iterable[Any]) -> dict[str, tuple[Protocol, int]]:
    """Container ports with a name, from pod spec containers (objects with ``ports`` of
    :class:`~netmodel.objects.ContainerPort`, or wire dicts)."""
    out: dict[str, tuple[Protocol, int]] = {}
    for c in containers:
        ports = c.get("ports") if isinstance(c, Mapping) else getattr(c, "ports", None)
        for p in ports or ():
            if isinstance(p, Mapping):
                name, proto, num = p.get("name"), p.get("protocol") or "TCP", p.get("containerPort")
            else:
                name, proto, num = p.name, p.protocol or "TCP", p.container_port
            if name and num is not None:
                out.setdefault(name, (cast(Protocol, proto), int(num)))
    return out


# --------------------------------------------------------------------------- deciding


def selects(policy: NetworkPolicy, pod: PolicyPod) -> bool:
    """The policy applies to ``pod`` (same namespace, podSelector matches, not
    host-network)."""
    return (
        not pod.host_network
        and pod.namespace == policy.namespace
        and policy.pod_selector.matches(pod.labels)
    )


def peer_matches(
    peer: Peer,
    policy_namespace: str,
    other: PolicyPod | None,
    other_ip: Address,
    namespaces: Mapping[str, Mapping[str, str]],
) -> bool:
    """``peer`` (of a policy in ``policy_namespace``) matches the other end: a pod
    (``other``, whose address is ``other_ip``) or a bare address (``other`` None).
    ``namespaces``: every namespace's labels."""
    if peer.ip_block is not None:
        return peer.ip_block.contains(other_ip)
    if other is None or other.host_network:
        return False
    if peer.namespace_selector is None:
        if other.namespace != policy_namespace:
            return False
    elif not peer.namespace_selector.matches(namespaces.get(other.namespace, {})):
        return False
    return peer.pod_selector is None or peer.pod_selector.matches(other.labels)


def port_matches(spec: PortSpec, protocol: str, port: int, destination: PolicyPod | None) -> bool:
    """``spec`` matches a connection to ``port``/``protocol``; a named port is looked
    up in ``destination``'s container ports (None, a bare address: never)."""
    if spec.protocol != protocol:
        return False
    if spec.port is None:
        return True
    if isinstance(spec.port, str):
        if destination is None:
            return False
        named = destination.ports.get(spec.port)
        return named is not None and named == (protocol, port)
    if spec.end_port is not None:
        return spec.port <= port <= spec.end_port
    return spec.port == port


def _direction(
    direction: Direction,
    subject: PolicyPod,
    other: PolicyPod | None,
    other_ip: Address,
    protocol: str,
    port: int,
    destination: PolicyPod | None,
    policies: Sequence[NetworkPolicy],
    namespaces: Mapping[str, Mapping[str, str]],
) -> Decision:
    peers_field = "from" if direction == "ingress" else "to"
    isolating = [p for p in policies if direction in p.types and selects(p, subject)]
    if not isolating:
        return Decision(direction, True, reason=f"not isolated for {direction}")
    for pol in sorted(isolating, key=lambda p: p.key):
        for i, rule in enumerate(pol.rules(direction)):
            peer_at: int | None = None
            if rule.peers:
                peer_at = next(
                    (
                        j
                        for j, peer in enumerate(rule.peers)
                        if peer_matches(peer, pol.namespace, other, other_ip, namespaces)
                    ),
                    None,
                )
                if peer_at is None:
                    continue
            port_at: int | None = None
            if rule.ports:
                port_at = next(
                    (
                        j
                        for j, spec in enumerate(rule.ports)
                        if port_matches(spec, protocol, port, destination)
                    ),
                    None,
                )
                if port_at is None:
                    continue
            path = f"{direction}[{i}]"
            if peer_at is not None:
                path += f".{peers_field}[{peer_at}]"
                reason = rule.peers[peer_at].describe()
            elif port_at is not None:
                path += f".ports[{port_at}]"
                reason = rule.ports[port_at].describe()
            else:
                reason = "every peer, every port"
            return Decision(direction, True, pol.key, path, reason)
    # denied: name the first isolating policy (sorted), as a trace's drop is attributed
    first = sorted(isolating, key=lambda p: p.key)[0]
    return Decision(direction, False, first.key, None, f"{direction}, no rule matched")


def decide(
    src: PolicyPod | Address,
    dst: PolicyPod | Address,
    protocol: str,
    port: int,
    policies: Sequence[NetworkPolicy],
    namespaces: Mapping[str, Mapping[str, str]],
    *,
    src_is_dst_node: bool = False,
) -> ConnectionDecision:
    """What the policies say of a new connection from ``src`` to ``dst`` (a pod or a
    bare address) on ``protocol``/``port`` (after any DNAT). ``src_is_dst_node``: the
    source is the node the destination pod runs on (always allowed in)."""
    src_pod = src if isinstance(src, PolicyPod) else None
    dst_pod = dst if isinstance(dst, PolicyPod) else None
    src_ip = src.ip if isinstance(src, PolicyPod) else src
    dst_ip = dst.ip if isinstance(dst, PolicyPod) else dst
    if src_pod is not None:
        egress = _direction(
            "egress", src_pod, dst_pod, dst_ip, protocol, port, dst_pod, policies, namespaces
        )
    else:
        egress = Decision("egress", True, reason="source is not a pod")
    if dst_pod is None:
        ingress = Decision("ingress", True, reason="destination is not a pod")
    elif src_is_dst_node:
        ingress = Decision("ingress", True, reason="from the pod's own node")
    else:
        ingress = _direction(
            "ingress", dst_pod, src_pod, src_ip, protocol, port, dst_pod, policies, namespaces
        )
    return ConnectionDecision(egress, ingress)


__all__ = [
    "PROTOCOLS",
    "ConnectionDecision",
    "Decision",
    "IPBlock",
    "NetworkPolicy",
    "Peer",
    "PolicyPod",
    "PolicyRule",
    "PortSpec",
    "decide",
    "named_ports",
    "peer_matches",
    "policy_from_wire",
    "port_matches",
    "selector_text",
    "selects",
]
