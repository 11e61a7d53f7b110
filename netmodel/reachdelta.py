"""What adding or deleting NetworkPolicies changes in a computed reach matrix, without
computing the matrix again: only the pairs whose destination a changed policy selects
for ingress, or whose source it selects for egress, can change, and only they are
evaluated (the rest of the cluster is read from the matrix's classes).

:func:`delta` returns exactly what :func:`netmodel.reach.what_if` returns as its
difference (a test holds it to that): the same pairs, the same IP ranges (cut by the
ipBlocks of the stored and the added policies), sorted alike.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence

from netmodel.netpolicy import NetworkPolicy
from netmodel.reach import (
    ALL,
    EMPTY,
    Change,
    Matrix,
    PortSet,
    _blocks,
    _flatten,
    _Rule,
    ip_ranges,
    range_rules,
)
from netmodel.selectors import LabelSelector

__all__ = ["delta"]


class _Entity:
    """A pod, or an IP range of the new cut, as the change sees it."""

    __slots__ = ("key", "new_eg", "new_in", "new_named", "new_peer_of", "node", "range_rules")

    def __init__(
        self,
        node: int,
        new_peer_of: frozenset[int],
        new_in: frozenset[int] = frozenset(),
        new_eg: frozenset[int] = frozenset(),
        new_named: Mapping[str, tuple[str, int]] | None = None,
        range_rules: frozenset[int] | None = None,
    ) -> None:
        self.node = node  # its node in the old matrix (a class or a range)
        self.new_peer_of = new_peer_of  # the added rules whose peers match it
        self.new_in = new_in  # the added policies selecting it, per direction
        self.new_eg = new_eg
        self.new_named = new_named  # its named ports (None: a bare address)
        self.range_rules = range_rules  # a range: the old rules holding it
        named = tuple(sorted(new_named.items())) if new_named else ()
        self.key: Hashable = (node, new_peer_of, new_in, new_eg, named)


def delta(
    matrix: Matrix,
    *,
    add: Sequence[NetworkPolicy] = (),
    delete: Sequence[str] = (),
) -> list[Change]:
    """The pairs whose connections change when ``add`` is applied (replacing stored
    policies of the same ``namespace/name``) and ``delete`` (``namespace/name`` keys)
    removed, over the pods, policies and namespaces ``matrix`` was computed from."""
    replaced = {p.key for p in add} | set(delete)
    kept = {j for j, p in enumerate(matrix.policies) if p.key not in replaced}
    gone = set(range(len(matrix.policies))) - kept
    new_rules = _flatten(add)
    sel = matrix.selection
    pods = matrix.pods
    all_ns = sel.namespaces(matrix.namespaces)

    # the added policies: whom they select, whom their rules' peers match
    new_in: dict[int, set[int]] = defaultdict(set)
    new_eg: dict[int, set[int]] = defaultdict(set)
    for q, pol in enumerate(add):
        for g in sel.pick(pol.pod_selector, pol.namespace):
            for i in sel.members[g]:
                if "ingress" in pol.types:
                    new_in[i].add(q)
                if "egress" in pol.types:
                    new_eg[i].add(q)
    new_peer: dict[int, set[int]] = defaultdict(set)
    for r, rule in enumerate(new_rules):
        for peer in rule.rule.peers:
            if peer.ip_block is not None:
                for i in sel.inside(peer.ip_block):
                    new_peer[i].add(r)
                continue
            if peer.namespace_selector is None:
                candidates = [rule.policy.namespace]
            else:
                ns_sel = peer.namespace_selector
                candidates = [n for n in all_ns if ns_sel.matches(matrix.namespaces.get(n, {}))]
            pod_sel = peer.pod_selector or LabelSelector()
            for ns in candidates:
                for g in sel.pick(pod_sel, ns):
                    for i in sel.members[g]:
                        new_peer[i].add(r)
    names = sorted({n for r in new_rules for _, n in r.named})

    # who is affected: selected by a changed policy, per direction
    hit_in = set(new_in)
    hit_eg = set(new_eg)
    for c, sig in enumerate(matrix.classes):
        if sig.sel_in & gone:
            hit_in.update(matrix.members[c])
        if sig.sel_eg & gone:
            hit_eg.update(matrix.members[c])

    # every end of a pair, grouped by what the change sees of it
    def pod_entity(i: int) -> _Entity:
        p = pods[i]
        return _Entity(
            matrix._pod_class[i],
            frozenset(new_peer.get(i, ())),
            frozenset(new_in.get(i, ())),
            frozenset(new_eg.get(i, ())),
            {n: p.ports[n] for n in names if n in p.ports},
        )

    groups: dict[Hashable, tuple[_Entity, list[int | str]]] = {}
    in_groups: dict[Hashable, _Entity] = {}
    eg_groups: dict[Hashable, _Entity] = {}
    touched = new_peer.keys() | new_in.keys() | new_eg.keys()
    for c, idxs in enumerate(matrix.members):
        plain: _Entity | None = None  # the class's pods the added policies do not see
        for i in idxs:
            if names or i in touched:
                e = pod_entity(i)
            else:
                if plain is None:
                    plain = _Entity(c, frozenset())
                e = plain
            entry = groups.setdefault(e.key, (e, []))
            entry[1].append(i)
            if i in hit_in:
                in_groups[e.key] = entry[0]
            if i in hit_eg:
                eg_groups[e.key] = entry[0]
    versions = {4} | {p.ip.version for p in pods}
    cut = ip_ranges(_blocks([*matrix.policies, *add]), versions)
    for rng in cut:
        old = matrix.node_of(rng.key.split("-", 1)[0])
        new_peer_of = range_rules(rng, new_rules)
        e = _Entity(old, new_peer_of, range_rules=matrix.range_rules[old - len(matrix.classes)])
        groups.setdefault(e.key, (e, []))[1].append(rng.key)
    if not in_groups and not eg_groups:
        return []

    by_policy: dict[tuple[int, str], list[int]] = defaultdict(list)
    pol_index = {id(p): j for j, p in enumerate(matrix.policies)}
    for r, rule in enumerate(matrix._rules):
        by_policy[(pol_index[id(rule.policy)], rule.direction)].append(r)
    new_by_policy: dict[tuple[int, str], list[int]] = defaultdict(list)
    add_index = {id(p): q for q, p in enumerate(add)}
    for r, rule in enumerate(new_rules):
        new_by_policy[(add_index[id(rule.policy)], rule.direction)].append(r)
    n_classes = len(matrix.classes)

    def old_peer_of(e: _Entity) -> frozenset[int]:
        if e.range_rules is not None:
            return e.range_rules
        return matrix.classes[e.node].peer_of

    def allowed(direction: str, subject: _Entity, other: _Entity, dst: _Entity) -> PortSet:
        """What the policies selecting ``subject`` after the change allow towards (or
        from) ``other``; ``dst`` the destination, whose named ports resolve."""
        if subject.range_rules is not None:
            return ALL  # a bare address: no policy selects it
        sig = matrix.classes[subject.node]
        olds = (sig.sel_in if direction == "ingress" else sig.sel_eg) & kept
        news = subject.new_in if direction == "ingress" else subject.new_eg
        if not olds and not news:
            return ALL
        out = EMPTY
        other_old = old_peer_of(other)
        old_named = None if dst.range_rules is not None else matrix._named(dst.node)
        for j in olds:
            for r in by_policy.get((j, direction), ()):
                rule: _Rule = matrix._rules[r]
                if not rule.rule.peers or r in other_old:
                    out = out | rule.ports_for(old_named)
        for q in news:
            for r in new_by_policy.get((q, direction), ()):
                rule = new_rules[r]
                if not rule.rule.peers or r in other.new_peer_of:
                    out = out | rule.ports_for(dst.new_named)
        return out

    def after(s: _Entity, d: _Entity) -> PortSet:
        return allowed("egress", s, d, d) & allowed("ingress", d, s, d)

    out: list[Change] = []
    done: set[tuple[Hashable, Hashable]] = set()
    # a source no policy isolates for egress, before or after: towards ``d`` only the
    # rules of d's ingress policies that its peers match tell it from another such source
    ingress_rules: dict[Hashable, tuple[frozenset[int], frozenset[int]]] = {}
    memo: dict[Hashable, tuple[PortSet, PortSet]] = {}

    def open_source(e: _Entity) -> bool:
        return e.range_rules is not None or (not matrix.classes[e.node].sel_eg and not e.new_eg)

    def rules_into(d: _Entity) -> tuple[frozenset[int], frozenset[int]]:
        hit = ingress_rules.get(d.key)
        if hit is None:
            olds = matrix.classes[d.node].sel_in
            hit = ingress_rules[d.key] = (
                frozenset(r for j in olds for r in by_policy.get((j, "ingress"), ())),
                frozenset(r for q in d.new_in for r in new_by_policy.get((q, "ingress"), ())),
            )
        return hit

    def visit(s: _Entity, d: _Entity) -> None:
        if (s.key, d.key) in done:
            return
        done.add((s.key, d.key))
        if s.node >= n_classes and d.node >= n_classes:
            return  # two bare addresses: no pod involved
        view: Hashable = None
        if d.range_rules is None and open_source(s):
            old_rules, new_rules_in = rules_into(d)
            view = (d.key, old_peer_of(s) & old_rules, s.new_peer_of & new_rules_in)
        if view is not None and view in memo:
            before, now = memo[view]
        else:
            before = matrix._between(s.node, d.node)
            now = after(s, d)
            if view is not None:
                memo[view] = (before, now)
        if now == before:
            return
        added, removed = now - before, before - now
        for x in groups[s.key][1]:
            a = pods[x].key if isinstance(x, int) else x
            for y in groups[d.key][1]:
                b = pods[y].key if isinstance(y, int) else y
                if a != b:
                    out.append(Change(a, b, added, removed))

    for d in in_groups.values():
        for s, _ in groups.values():
            visit(s, d)
    for s in eg_groups.values():
        for d, _ in groups.values():
            visit(s, d)
    out.sort(key=lambda c: (c.src, c.dst))
    return out
