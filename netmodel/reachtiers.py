"""The reachability matrix with ClusterNetworkPolicy's tiers around the NetworkPolicies:
:class:`TieredMatrix` composes :class:`netmodel.reach.Matrix` (the NetworkPolicy tier)
with the Admin and Baseline tiers, and agrees with :func:`netmodel.clusterpolicy.decide`
pair by pair and port by port. Pure.

Per direction, for the pod the direction applies to (the source for egress, the
destination for ingress), the ports a tier's rules decide are read first match first
(:func:`netmodel.clusterpolicy.in_order`, rules in order): each matching rule takes the
ports of its ``protocols`` that no earlier rule took. Then::

    direction = admin.accepted | (rest & (np if isolated else ALL - baseline.denied))

where ``rest`` is every port the Admin tier did not accept or deny (its ``Pass`` ports
included), ``np`` the NetworkPolicy tier's ports for that direction (a
:class:`~netmodel.reach.Matrix` of the policies' rules of that direction alone) and
``isolated`` whether a NetworkPolicy selects the pod for it; a Baseline ``Accept`` and
no decision both leave a port allowed, as a non-isolated pod's NetworkPolicy tier
does. A pair allows ``egress & ingress``. A bare address (an IP range node) has no
egress of its own and no ingress; a pod reaching itself is not subject to
ClusterNetworkPolicy (not listed, as in :meth:`Matrix.pairs`).

IP ranges are cut at the ipBlock boundaries and at the ClusterNetworkPolicies'
``networks``. With no ClusterNetworkPolicy the answers are :class:`Matrix`'s, computed
by it alone. With some, the pairs are enumerated one by one (the tiers' part cached
per class of pods the ClusterNetworkPolicies treat alike): quadratic in the pods,
meant for the clusters a user reads, not for the 10,000-pod benchmark.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from ipaddress import IPv4Address, IPv6Address

from netmodel.clusterpolicy import ClusterNetworkPolicy, ClusterRule, Tier, in_order
from netmodel.netpolicy import (
    Address,
    Direction,
    IPBlock,
    NetworkPolicy,
    Peer,
    PolicyPod,
    PolicyRule,
    selects,
)
from netmodel.reach import ALL, EMPTY, PORT_MAX, PORT_MIN, Change, IPRangeNode, Matrix, PortSet
from netmodel.selectors import LabelSelector

__all__ = ["TieredMatrix", "tiered_diff", "tiered_what_if"]


def _one_direction(policies: Sequence[NetworkPolicy], direction: Direction) -> list[NetworkPolicy]:
    """The policies' ``direction`` part only (those not of that type left out)."""
    out = []
    for p in policies:
        if direction not in p.types:
            continue
        if direction == "ingress":
            out.append(replace(p, egress=(), types=frozenset({"ingress"})))
        else:
            out.append(replace(p, ingress=(), types=frozenset({"egress"})))
    return out


def _network_carrier(cnps: Sequence[ClusterNetworkPolicy]) -> list[NetworkPolicy]:
    """A policy that selects nothing and holds every ``networks`` CIDR of ``cnps`` as an
    ipBlock: only to cut the matrix's IP ranges there (never evaluated)."""
    nets = {n for c in cnps for r in (*c.ingress, *c.egress) for p in r.peers for n in p.networks}
    if not nets:
        return []
    peers = tuple(Peer(ip_block=IPBlock(n)) for n in sorted(nets, key=str))
    return [
        NetworkPolicy(
            "",
            "",
            LabelSelector(match_labels={"svclab.dev/none": "none"}),
            ingress=(PolicyRule(peers),),
        )
    ]


def _first(r: IPRangeNode) -> Address:
    return IPv4Address(r.first) if r.version == 4 else IPv6Address(r.first)


def _rule_ports(rule: ClusterRule, dst: PolicyPod | None) -> PortSet:
    """The ports ``rule``'s ``protocols`` match towards ``dst`` (None: a bare address,
    which declares no named port)."""
    if not rule.protocols:
        return ALL
    out = EMPTY
    for m in rule.protocols:
        if m.named_port is not None:
            got = dst.ports.get(m.named_port) if dst is not None else None
            if got is not None:
                out = out | PortSet.of(got[0], got[1], got[1])
        elif m.protocol is not None:
            lo = PORT_MIN if m.start is None else m.start
            hi = PORT_MAX if m.end is None else m.end
            out = out | PortSet.of(m.protocol, lo, hi)
    return out


@dataclass(frozen=True, slots=True)
class _Scan:
    """What a tier decided for one (subject, other) in one direction."""

    accepted: PortSet
    denied: PortSet


class TieredMatrix:
    """The matrix of ``policies`` (NetworkPolicies) and ``cluster_policies``: the same
    questions as :class:`netmodel.reach.Matrix` (``connections``, ``allows``,
    ``pairs``). ``range_policies`` / ``range_cluster_policies``: the policies whose
    ipBlocks and networks cut the address space (the given ones when None)."""

    def __init__(
        self,
        pods: Sequence[PolicyPod],
        policies: Sequence[NetworkPolicy],
        cluster_policies: Sequence[ClusterNetworkPolicy],
        namespaces: Mapping[str, Mapping[str, str]],
        *,
        range_policies: Sequence[NetworkPolicy] | None = None,
        range_cluster_policies: Sequence[ClusterNetworkPolicy] | None = None,
    ) -> None:
        self.pods = list(pods)
        self.policies = list(policies)
        self.cluster_policies = in_order(cluster_policies)
        self.namespaces = namespaces
        cut = list(policies if range_policies is None else range_policies)
        cut += _network_carrier(
            cluster_policies if range_cluster_policies is None else range_cluster_policies
        )
        self.whole = Matrix(pods, policies, namespaces, range_policies=cut)
        self.ranges: list[IPRangeNode] = self.whole.ranges
        self._pod = {p.key: p for p in self.pods}
        if not self.cluster_policies:
            return
        self.egress = Matrix(
            pods, _one_direction(policies, "egress"), namespaces, range_policies=cut
        )
        self.ingress = Matrix(
            pods, _one_direction(policies, "ingress"), namespaces, range_policies=cut
        )
        self._isolated: dict[tuple[str, Direction], bool] = {}
        for pod in self.pods:
            for d in ("ingress", "egress"):
                direction: Direction = "ingress" if d == "ingress" else "egress"
                self._isolated[(pod.key, direction)] = any(
                    direction in p.types and selects(p, pod) for p in self.policies
                )
        self._subject_sig: dict[str, tuple[int, ...]] = {}
        self._peer_sig: dict[str, tuple[tuple[int, int, int, int], ...]] = {}
        for pod in self.pods:
            self._subject_sig[pod.key] = self._subjects(pod)
            self._peer_sig[pod.key] = self._peers(pod, pod.ip)
        self._range_sig = [self._peers(None, _first(r)) for r in self.ranges]
        named = sorted(
            {
                m.named_port
                for c in self.cluster_policies
                for r in (*c.ingress, *c.egress)
                for m in r.protocols
                if m.named_port is not None
            }
        )
        self._named = {p.key: tuple(p.ports.get(n) for n in named) for p in self.pods}
        self._scans: dict[tuple[object, ...], _Scan] = {}

    # ---- signatures: what makes two pods alike to the ClusterNetworkPolicies

    def _subjects(self, pod: PolicyPod) -> tuple[int, ...]:
        return tuple(
            i
            for i, c in enumerate(self.cluster_policies)
            if c.subject.selects(pod, self.namespaces)
        )

    def _peers(self, pod: PolicyPod | None, ip: Address) -> tuple[tuple[int, int, int, int], ...]:
        out = []
        for i, c in enumerate(self.cluster_policies):
            for di, rules in enumerate((c.ingress, c.egress)):
                for ri, rule in enumerate(rules):
                    for pj, peer in enumerate(rule.peers):
                        if peer.matches(pod, ip, self.namespaces):
                            out.append((i, di, ri, pj))
        return tuple(out)

    # ---- the tiers

    def _scan(
        self,
        tier: Tier,
        direction: Direction,
        subject: tuple[int, ...],
        other: tuple[tuple[int, int, int, int], ...],
        dst: PolicyPod | None,
        dst_sig: object,
    ) -> _Scan:
        key = (tier, direction, subject, other, dst_sig)
        got = self._scans.get(key)
        if got is not None:
            return got
        di = 0 if direction == "ingress" else 1
        matched = set(other)
        remaining, accepted, denied = ALL, EMPTY, EMPTY
        for i in subject:
            pol = self.cluster_policies[i]
            if pol.tier != tier:
                continue
            for ri, rule in enumerate(pol.rules(direction)):
                if rule.fails_closed:
                    denied, remaining = denied | remaining, EMPTY
                    break
                if not any((i, di, ri, pj) in matched for pj in range(len(rule.peers))):
                    continue
                took = _rule_ports(rule, dst) & remaining
                if rule.action == "Accept":
                    accepted = accepted | took
                elif rule.action == "Deny":
                    denied = denied | took
                remaining = remaining - took
            if remaining.empty:
                break
        got = self._scans[key] = _Scan(accepted, denied)
        return got

    def _direction(
        self,
        direction: Direction,
        subject: PolicyPod,
        other_sig: tuple[tuple[int, int, int, int], ...],
        dst: PolicyPod | None,
        np: PortSet,
    ) -> PortSet:
        sig = self._subject_sig[subject.key]
        if not sig:
            return np
        dst_sig = self._named[dst.key] if dst is not None else None
        admin = self._scan("Admin", direction, sig, other_sig, dst, dst_sig)
        rest = ALL - admin.accepted - admin.denied
        if self._isolated[(subject.key, direction)]:
            later = np
        else:
            later = ALL - self._scan("Baseline", direction, sig, other_sig, dst, dst_sig).denied
        return admin.accepted | (rest & later)

    # ---- asking

    def _sig_of(self, key: str) -> tuple[tuple[int, int, int, int], ...]:
        got = self._peer_sig.get(key)
        if got is not None:
            return got
        return self._range_sig[self.whole.node_of(key) - len(self.whole.classes)]

    def connections(self, src_key: str, dst_key: str) -> PortSet:
        """What a new connection from ``src_key`` to ``dst_key`` may use (a pod key, a
        range key or an address), as :meth:`Matrix.connections`."""
        if not self.cluster_policies or src_key == dst_key:
            return self.whole.connections(src_key, dst_key)
        src, dst = self._pod.get(src_key), self._pod.get(dst_key)
        if src is None and dst is None:
            self.whole.node_of(src_key), self.whole.node_of(dst_key)  # KeyError if unknown
            return EMPTY
        eg = self.egress.connections(src_key, dst_key)
        ing = self.ingress.connections(src_key, dst_key)
        if src is not None:
            eg = self._direction("egress", src, self._sig_of(dst_key), dst, eg)
        if dst is not None:
            ing = self._direction("ingress", dst, self._sig_of(src_key), dst, ing)
        return eg & ing

    def allows(self, src_key: str, dst_key: str, protocol: str, port: int) -> bool:
        """:func:`netmodel.clusterpolicy.decide`'s verdict on a new connection."""
        if not PORT_MIN <= port <= PORT_MAX:
            raise ValueError(f"port {port} is outside {PORT_MIN}..{PORT_MAX}")
        return self.connections(src_key, dst_key).contains(protocol, port)

    def pairs(self) -> Iterator[tuple[str, str, PortSet]]:
        """Every allowed pair, as :meth:`Matrix.pairs` lists them."""
        if not self.cluster_policies:
            return self.whole.pairs()
        pods = [p.key for p in self.pods]
        ranges = [r.key for r in self.ranges]
        out: list[tuple[str, str, PortSet]] = []
        for a in pods:
            for b in (*pods, *ranges):
                if a != b:
                    ports = self.connections(a, b)
                    if not ports.empty:
                        out.append((a, b, ports))
        for a in ranges:
            for b in pods:
                ports = self.connections(a, b)
                if not ports.empty:
                    out.append((a, b, ports))
        out.sort(key=lambda t: (t[0], t[1]))
        return iter(out)


def tiered_diff(before: TieredMatrix, after: TieredMatrix) -> list[Change]:
    """The pairs whose connections differ (both matrices over the same pods and cut
    alike), sorted by (from, to), as :func:`netmodel.reach.diff`."""
    old = {(a, b): p for a, b, p in before.pairs()}
    new = {(a, b): p for a, b, p in after.pairs()}
    out = []
    for key in sorted(old.keys() | new.keys()):
        o, n = old.get(key, EMPTY), new.get(key, EMPTY)
        if o != n:
            out.append(Change(key[0], key[1], n - o, o - n))
    return out


def tiered_what_if(
    pods: Sequence[PolicyPod],
    policies: Sequence[NetworkPolicy],
    cluster_policies: Sequence[ClusterNetworkPolicy],
    namespaces: Mapping[str, Mapping[str, str]],
    *,
    add: Sequence[NetworkPolicy] = (),
    add_cluster: Sequence[ClusterNetworkPolicy] = (),
    delete: Sequence[str] = (),
    delete_cluster: Sequence[str] = (),
) -> tuple[TieredMatrix, TieredMatrix, list[Change]]:
    """Both matrices and their difference, as :func:`netmodel.reach.what_if`, with
    ClusterNetworkPolicies added (replacing stored ones of the same name) and deleted
    (by name)."""
    replaced = {p.key for p in add} | set(delete)
    after_pols = [p for p in policies if p.key not in replaced] + list(add)
    gone = {c.name for c in add_cluster} | set(delete_cluster)
    after_cnps = [c for c in cluster_policies if c.name not in gone] + list(add_cluster)
    cut = list(policies) + list(add)
    cut_cnps = list(cluster_policies) + list(add_cluster)
    before = TieredMatrix(
        pods,
        policies,
        cluster_policies,
        namespaces,
        range_policies=cut,
        range_cluster_policies=cut_cnps,
    )
    after = TieredMatrix(
        pods,
        after_pols,
        after_cnps,
        namespaces,
        range_policies=cut,
        range_cluster_policies=cut_cnps,
    )
    return before, after, tiered_diff(before, after)
