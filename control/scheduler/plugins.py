"""kube-scheduler's filter and score plugins, vectorised over the node table.

A filter plugin returns the mask of nodes it rejects (or None: rejects none) and, for a
rejected node, kube-scheduler's reason strings. ``unresolvable`` marks plugins whose
rejection preemption cannot fix (UnschedulableAndUnresolvable upstream). Plugins run
in upstream's order; a node's status is the first plugin that rejects it.

A score plugin returns, for the feasible nodes given, integer scores already
normalised to 0..100; the framework multiplies by the plugin's weight and sums.
Plugins cache what depends only on static node data by (table generation, signature).

What depends on a node's requests too (the fit verdict, the two resource scores) is kept
per pod signature as one value per node (:class:`_PerNodeCache`) and brought up to date
only in the rows whose requests changed since (the table's change log): a bind changes
one row, so the next pod of the same shape pays for one row, not for every node. A row
is recomputed by a scalar twin of the vectorised formula (same integer and IEEE float
operations, so the same value; where a value could leave the range in which the two
agree, by the vectorised formula itself). ``incremental=False`` gives the straightforward
evaluation, every node every time (the tests compare the two).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable

import numpy as np

from control.scheduler.table import BoolArray, IntArray, NodeTable, PodInfo, Term
from netmodel.objects import NodeSelector, NodeSelectorRequirement, Pod, Taint, Toleration

MAX_SCORE = 100
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")


class Filter(ABC):
    name: str = ""
    unresolvable: bool = True

    @abstractmethod
    def fails(self, pod: Pod, info: PodInfo, table: NodeTable) -> BoolArray | None:
        """The nodes this plugin rejects for ``pod`` (None: none)."""

    @abstractmethod
    def reasons(self, pod: Pod, info: PodInfo, table: NodeTable, i: int) -> list[str]:
        """kube-scheduler's reason strings for rejecting node ``i``."""

    def fails_at(
        self, pod: Pod, info: PodInfo, table: NodeTable, nodes: IntArray
    ) -> BoolArray | None:
        """``fails(pod, info, table)[nodes]`` (None: rejects none of ``nodes``); plugins
        whose full mask costs O(nodes) per pod answer for the few nodes asked only."""
        mask = self.fails(pod, info, table)
        if mask is None:
            return None
        sub: BoolArray = mask[nodes]
        return sub if sub.any() else None


class Score(ABC):
    name: str = ""
    weight: int = 1

    @abstractmethod
    def score(self, pod: Pod, info: PodInfo, table: NodeTable, nodes: IntArray) -> IntArray:
        """Scores 0..100 for the node indexes ``nodes``."""


class _SignatureCache:
    def __init__(self) -> None:
        self._gen = -1
        self._data: dict[str, object] = {}

    def get(self, table: NodeTable, sig: str) -> object | None:
        if self._gen != table.generation:
            self._gen = table.generation
            self._data = {}
        return self._data.get(sig)

    def put(self, sig: str, value: object) -> None:
        if len(self._data) > 4096:
            self._data.clear()
        self._data[sig] = value


#: magnitudes below which Python's int and float arithmetic agree with numpy's int64 and
#: float64 arithmetic (no int64 overflow, exact conversion to float)
_SAFE = 2**52


class _PerNodeCache:
    """Per pod signature, one value per node that depends on the table's static data and
    its requests; rows changed since the last use are recomputed by ``row``, everything
    by ``full`` after a new generation, a log gap or many changes. The array returned is
    updated in place later: use it before the table changes again."""

    LIMIT = 64

    def __init__(self) -> None:
        self._gen = -1
        self._data: dict[Hashable, tuple[int, np.ndarray]] = {}

    def get(
        self,
        table: NodeTable,
        sig: Hashable,
        full: Callable[[], np.ndarray],
        row: Callable[[int], object],
    ) -> np.ndarray:
        table.refresh()
        if self._gen != table.generation:
            self._gen = table.generation
            self._data = {}
        pos = table.log_position
        hit = self._data.get(sig)
        arr: np.ndarray | None = None
        if hit is not None:
            at, arr = hit
            if at != pos:
                rows = table.rows_changed_since(at)
                if rows is None or len(rows) > 64:
                    arr = None
                else:
                    for i in set(rows):
                        arr[i] = row(i)
        if arr is None:
            if len(self._data) >= self.LIMIT:
                self._data = {}
            arr = full()
        self._data[sig] = (pos, arr)
        return arr


# --------------------------------------------------------------------------- filters


class NodeUnschedulable(Filter):
    name = "NodeUnschedulable"

    def fails(self, pod: Pod, info: PodInfo, table: NodeTable) -> BoolArray | None:
        if not table.any_unschedulable:
            return None
        if any(t.tolerates(UNSCHEDULABLE_TAINT) for t in pod.spec.tolerations):
            return None
        return table.unschedulable

    def reasons(self, pod: Pod, info: PodInfo, table: NodeTable, i: int) -> list[str]:
        return ["node(s) were unschedulable"]


class NodeName(Filter):
    name = "NodeName"

    def fails(self, pod: Pod, info: PodInfo, table: NodeTable) -> BoolArray | None:
        want = pod.spec.node_name
        if not want:
            return None
        mask = np.ones(len(table.names), dtype=bool)
        i = table.index.get(want)
        if i is not None:
            mask[i] = False
        return mask

    def fails_at(
        self, pod: Pod, info: PodInfo, table: NodeTable, nodes: IntArray
    ) -> BoolArray | None:
        want = pod.spec.node_name
        if not want:
            return None
        sub = np.array([table.names[i] != want for i in nodes.tolist()], dtype=bool)
        return sub if sub.any() else None

    def reasons(self, pod: Pod, info: PodInfo, table: NodeTable, i: int) -> list[str]:
        return ["node(s) didn't match the requested node name"]


def untolerated(taints: list[Taint], tolerations: list[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration tolerates."""
    for taint in taints:
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


class TaintToleration(Filter):
    name = "TaintToleration"

    def __init__(self) -> None:
        self._cache = _SignatureCache()

    def _table(self, pod: Pod, table: NodeTable) -> tuple[BoolArray | None, list[Taint | None]]:
        tols = pod.spec.tolerations
        sig = repr(tols)
        hit = self._cache.get(table, sig)
        if hit is None:
            per_node = [untolerated(ts, tols) if ts else None for ts in table.taints]
            mask = np.array([t is not None for t in per_node], dtype=bool)
            hit = (mask if mask.any() else None, per_node)
            self._cache.put(sig, hit)
        return hit  # type: ignore[return-value]

    def fails(self, pod: Pod, info: PodInfo, table: NodeTable) -> BoolArray | None:
        return self._table(pod, table)[0]

    def reasons(self, pod: Pod, info: PodInfo, table: NodeTable, i: int) -> list[str]:
        t = self._table(pod, table)[1][i]
        assert t is not None
        return [f"node(s) had untolerated taint {{{t.key}: {t.value or ''}}}"]


def requirement_matches(req: NodeSelectorRequirement, labels: dict[str, str]) -> bool:
    op, key, values = req.operator, req.key, req.values
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels or len(values) != 1:
            return False
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _fits(sel: dict[str, str], req: NodeSelector | None, name: str, labels: dict[str, str]) -> bool:
    """A node (``name``, ``labels``) fits nodeSelector ``sel`` and required terms ``req``."""
    if not all(labels.get(k) == v for k, v in sel.items()):
        return False
    if req is None:
        return True
    return any(
        (term.match_expressions or term.match_fields)
        and all(requirement_matches(r, labels) for r in term.match_expressions)
        and all(requirement_matches(r, {"metadata.name": name}) for r in term.match_fields)
        for term in req.node_selector_terms
    )


def _named_nodes(req: NodeSelector | None) -> set[str] | None:
    """The only nodes ``req`` can match when each of its terms has a ``matchFields
    metadata.name In`` requirement (as the DaemonSet controller binds its pods), else
    None (every node must be looked at)."""
    if req is None or not req.node_selector_terms:
        return None
    out: set[str] = set()
    for term in req.node_selector_terms:
        names = [
            set(r.values)
            for r in term.match_fields
            if r.key == "metadata.name" and r.operator == "In"
        ]
        if not names:
            return None
        out |= set.intersection(*names)
    return out


def pinned_nodes(pod: Pod) -> set[str] | None:
    """The only nodes ``pod`` may run on when every term of its required node affinity
    names them (``matchFields metadata.name In``, as a DaemonSet's pods are pinned),
    else None. kube-scheduler's NodeAffinity PreFilter narrows the search to them."""
    aff = pod.spec.affinity.node_affinity if pod.spec.affinity else None
    return _named_nodes(aff.required_during_scheduling_ignored_during_execution if aff else None)


class NodeAffinity(Filter):
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node affinity."""

    name = "NodeAffinity"

    def __init__(self) -> None:
        self._cache = _SignatureCache()

    def fails(self, pod: Pod, info: PodInfo, table: NodeTable) -> BoolArray | None:
        sel = pod.spec.node_selector
        aff = pod.spec.affinity.node_affinity if pod.spec.affinity else None
        req = aff.required_during_scheduling_ignored_during_execution if aff else None
        if not sel and req is None:
            return None
        named = _named_nodes(req)
        if named is not None:  # every term names its nodes (a daemon pod's): look them up
            table.refresh()
            mask = np.ones(len(table.names), dtype=bool)
            for name in named:
                i = table.index.get(name)
                if i is not None and _fits(sel, req, name, table.labels[i]):
                    mask[i] = False
            return mask if mask.any() else None
        sig = json.dumps([sel, req.model_dump(mode="json") if req else None], sort_keys=True)
        hit = self._cache.get(table, sig)
        if hit is None:
            ok = [
                _fits(sel, req, name, labels)
                for name, labels in zip(table.names, table.labels, strict=True)
            ]
            mask = ~np.array(ok, dtype=bool)
            hit = mask if mask.any() else False
            self._cache.put(sig, hit)
        return None if hit is False else hit  # type: ignore[return-value]

    def fails_at(
        self, pod: Pod, info: PodInfo, table: NodeTable, nodes: IntArray
    ) -> BoolArray | None:
        sel = pod.spec.node_selector
        aff = pod.spec.affinity.node_affinity if pod.spec.affinity else None
        req = aff.required_during_scheduling_ignored_during_execution if aff else None
        if _named_nodes(req) is None:
            return super().fails_at(pod, info, table, nodes)
        table.refresh()
        sub = np.array(
            [not _fits(sel, req, table.names[i], table.labels[i]) for i in nodes.tolist()],
            dtype=bool,
        )
        return sub if sub.any() else None

    def reasons(self, pod: Pod, info: PodInfo, table: NodeTable, i: int) -> list[str]:
        return ["node(s) didn't match Pod's node affinity/selector"]


class NodeResourcesFit(Filter):
    name = "NodeResourcesFit"
    unresolvable = False

    def __init__(self, incremental: bool = True) -> None:
        self._cache = _PerNodeCache() if incremental else None

    @staticmethod
    def _mask(info: PodInfo, table: NodeTable, nodes: IntArray | None = None) -> BoolArray:
        """The nodes the pod does not fit (of ``nodes``, when given)."""
        at = slice(None) if nodes is None else nodes
        mask: BoolArray = table.req_pods[at] + 1 > table.alloc_pods[at]
        if info.cpu > 0:
            mask = mask | (info.cpu > table.alloc_cpu[at] - table.req_cpu[at])
        if info.memory > 0:
            mask = mask | (info.memory > table.alloc_mem[at] - table.req_mem[at])
        return mask

    @staticmethod
    def _row(info: PodInfo, table: NodeTable, i: int) -> bool:
        """``_mask(info, table)[i]`` in scalars."""
        rp, ap = int(table.req_pods[i]), int(table.alloc_pods[i])
        ac, rc = int(table.alloc_cpu[i]), int(table.req_cpu[i])
        am, rm = int(table.alloc_mem[i]), int(table.req_mem[i])
        if max(abs(rp), abs(ap), abs(ac), abs(rc), abs(am), abs(rm)) >= _SAFE:
            return bool(NodeResourcesFit._mask(info, table)[i])
        if rp + 1 > ap:
            return True
        if info.cpu > 0 and info.cpu > ac - rc:
            return True
        return info.memory > 0 and info.memory > am - rm

    def fails(self, pod: Pod, info: PodInfo, table: NodeTable) -> BoolArray | None:
        if self._cache is None or max(abs(info.cpu), abs(info.memory)) >= _SAFE:
            mask = self._mask(info, table)
        else:
            mask = self._cache.get(
                table,
                (info.cpu, info.memory),
                lambda: self._mask(info, table),
                lambda i: self._row(info, table, i),
            )
        return mask if mask.any() else None

    def fails_at(
        self, pod: Pod, info: PodInfo, table: NodeTable, nodes: IntArray
    ) -> BoolArray | None:
        table.refresh()
        sub = self._mask(info, table, nodes)
        return sub if sub.any() else None

    def reasons(self, pod: Pod, info: PodInfo, table: NodeTable, i: int) -> list[str]:
        out = []
        if table.req_pods[i] + 1 > table.alloc_pods[i]:
            out.append("Too many pods")
        if info.cpu > 0 and info.cpu > table.alloc_cpu[i] - table.req_cpu[i]:
            out.append("Insufficient cpu")
        if info.memory > 0 and info.memory > table.alloc_mem[i] - table.req_mem[i]:
            out.append("Insufficient memory")
        return out


class InterPodAntiAffinity(Filter):
    """Required pod anti-affinity: the pod's own terms, and existing pods' terms."""

    name = "InterPodAffinity"
    unresolvable = False
    EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"
    OWN = "node(s) didn't match pod anti-affinity rules"

    def _domain_mask(self, table: NodeTable, key: str, per_node: IntArray) -> BoolArray:
        dom, n = table.domains(key)
        has = dom >= 0
        if n == 0:
            return np.zeros(len(table.names), dtype=bool)
        per_domain = np.bincount(dom[has], weights=per_node[has], minlength=n)
        return has & (per_domain[np.where(has, dom, 0)] > 0)

    def _existing(self, info: PodInfo, table: NodeTable) -> BoolArray | None:
        mask: BoolArray | None = None
        for other in table.anti_pods.values():
            i = table.index.get(other.node or "")
            if i is None:
                continue
            for term in other.anti_terms:
                if term.matches(info.namespace, info.labels):
                    one = np.zeros(len(table.names), dtype=np.int64)
                    one[i] = 1
                    m = self._domain_mask(table, term.topology_key, one)
                    mask = m if mask is None else (mask | m)
        return mask

    def _own(self, info: PodInfo, table: NodeTable) -> BoolArray | None:
        mask: BoolArray | None = None
        for term in info.anti_terms:
            m = self._domain_mask(table, term.topology_key, table.term_counts(term))
            mask = m if mask is None else (mask | m)
        return mask

    def fails(self, pod: Pod, info: PodInfo, table: NodeTable) -> BoolArray | None:
        if not info.anti_terms and not table.anti_pods:
            return None
        a, b = self._existing(info, table), self._own(info, table)
        mask = a if b is None else (b if a is None else a | b)
        return mask if mask is not None and mask.any() else None

    def reasons(self, pod: Pod, info: PodInfo, table: NodeTable, i: int) -> list[str]:
        # upstream checks the pod's own terms before existing pods' terms
        own = self._own(info, table)
        if own is not None and own[i]:
            return [self.OWN]
        return [self.EXISTING]


def default_filters(incremental: bool = True) -> list[Filter]:
    """Upstream's default filter order (``incremental``: see the module docstring)."""
    return [
        NodeUnschedulable(),
        NodeName(),
        TaintToleration(),
        NodeAffinity(),
        NodeResourcesFit(incremental),
        InterPodAntiAffinity(),
    ]


# --------------------------------------------------------------------------- scores


class LeastAllocated(Score):
    """NodeResourcesFit's LeastAllocated strategy: free share after placing the pod,
    cpu and memory weighted equally (non-zero requests, as upstream)."""

    name = "NodeResourcesLeastAllocated"
    weight = 1

    def __init__(self, incremental: bool = True) -> None:
        self._cache = _PerNodeCache() if incremental else None

    def score(self, pod: Pod, info: PodInfo, table: NodeTable, nodes: IntArray) -> IntArray:
        if self._cache is None or max(abs(info.nz_cpu), abs(info.nz_memory)) >= _SAFE:
            return self._scores(info, table, nodes)
        every = self._cache.get(
            table,
            (info.nz_cpu, info.nz_memory),
            lambda: self._scores(info, table, np.arange(len(table.names))),
            lambda i: self._row(info, table, i),
        )
        return every[nodes]

    @staticmethod
    def _scores(info: PodInfo, table: NodeTable, nodes: IntArray) -> IntArray:
        # (capacity - requested) * 100 / capacity, 0 when over capacity or capacity is 0
        # (a zero capacity is stored as 1 in safe_*: its free share is negative too)
        free_cpu = table.alloc_cpu[nodes] - (table.nz_cpu[nodes] + info.nz_cpu)
        free_mem = table.alloc_mem[nodes] - (table.nz_mem[nodes] + info.nz_memory)
        cpu = np.maximum(free_cpu * MAX_SCORE // table.safe_cpu[nodes], 0)
        mem = np.maximum(free_mem * MAX_SCORE // table.safe_mem[nodes], 0)
        return (cpu + mem) // 2

    @staticmethod
    def _row(info: PodInfo, table: NodeTable, i: int) -> int:
        """``_scores(info, table, [i])[0]`` in scalars (floor division, as numpy's)."""
        free_cpu = int(table.alloc_cpu[i]) - (int(table.nz_cpu[i]) + info.nz_cpu)
        free_mem = int(table.alloc_mem[i]) - (int(table.nz_mem[i]) + info.nz_memory)
        if max(abs(free_cpu), abs(free_mem)) * MAX_SCORE >= _SAFE:
            return int(LeastAllocated._scores(info, table, np.array([i]))[0])
        cpu = max(free_cpu * MAX_SCORE // int(table.safe_cpu[i]), 0)
        mem = max(free_mem * MAX_SCORE // int(table.safe_mem[i]), 0)
        return (cpu + mem) // 2


class BalancedAllocation(Score):
    """NodeResourcesBalancedAllocation: 100 * (1 - std of the cpu and memory fractions)."""

    name = "NodeResourcesBalancedAllocation"
    weight = 1

    def __init__(self, incremental: bool = True) -> None:
        self._cache = _PerNodeCache() if incremental else None

    def score(self, pod: Pod, info: PodInfo, table: NodeTable, nodes: IntArray) -> IntArray:
        if self._cache is None or max(abs(info.cpu), abs(info.memory)) >= _SAFE:
            return self._scores(info, table, nodes)
        every = self._cache.get(
            table,
            (info.cpu, info.memory),
            lambda: self._scores(info, table, np.arange(len(table.names))),
            lambda i: self._row(info, table, i),
        )
        return every[nodes]

    @staticmethod
    def _scores(info: PodInfo, table: NodeTable, nodes: IntArray) -> IntArray:
        fc = np.minimum(1.0, (table.req_cpu[nodes] + info.cpu) / table.safe_cpu[nodes])
        fm = np.minimum(1.0, (table.req_mem[nodes] + info.memory) / table.safe_mem[nodes])
        std = np.abs(fc - fm) / 2
        if not table.all_sized:  # a resource without capacity leaves one fraction: std 0
            std = np.where(table.sized[nodes], std, 0.0)
        return ((1.0 - std) * MAX_SCORE).astype(np.int64)

    @staticmethod
    def _row(info: PodInfo, table: NodeTable, i: int) -> int:
        """``_scores(info, table, [i])[0]`` in scalars: numpy divides the float64 forms
        of two int64s, as ``float(a) / float(b)`` does; ``int`` truncates as astype."""
        rc, sc = int(table.req_cpu[i]) + info.cpu, int(table.safe_cpu[i])
        rm, sm = int(table.req_mem[i]) + info.memory, int(table.safe_mem[i])
        if max(abs(rc), abs(rm), sc, sm) >= _SAFE:
            return int(BalancedAllocation._scores(info, table, np.array([i]))[0])
        fc = min(1.0, float(rc) / float(sc))
        fm = min(1.0, float(rm) / float(sm))
        std = abs(fc - fm) / 2
        if not table.all_sized and not table.sized[i]:
            std = 0.0
        return int((1.0 - std) * MAX_SCORE)


class SelectorSpread(Score):
    """Spreads one owner's pods over nodes: 100 * (max - count) / max over the feasible
    nodes, where count is how many pods of the same controller a node runs."""

    name = "SelectorSpread"
    weight = 2

    def score(self, pod: Pod, info: PodInfo, table: NodeTable, nodes: IntArray) -> IntArray:
        counts = table.owner_counts(info.owner) if info.owner else None
        if counts is None:
            return np.full(len(nodes), MAX_SCORE if info.owner else 0, dtype=np.int64)
        c = counts[nodes]
        top = int(c.max()) if len(c) else 0
        if top == 0:
            return np.full(len(nodes), MAX_SCORE, dtype=np.int64)
        return (MAX_SCORE * (top - c)) // top


def default_scores(incremental: bool = True) -> list[Score]:
    """The default profile's scores (``incremental``: see the module docstring)."""
    return [LeastAllocated(incremental), BalancedAllocation(incremental), SelectorSpread()]


__all__ = [
    "BalancedAllocation",
    "Filter",
    "InterPodAntiAffinity",
    "LeastAllocated",
    "NodeAffinity",
    "NodeName",
    "NodeResourcesFit",
    "NodeUnschedulable",
    "Score",
    "SelectorSpread",
    "TaintToleration",
    "Term",
    "default_filters",
    "default_scores",
    "pinned_nodes",
]
