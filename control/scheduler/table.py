"""The scheduler's cache: every node as a row of numpy arrays, and the pods assigned.

Static per-node data (allocatable, unschedulable, taints, labels) is rebuilt only when
the node set or a node's scheduling-relevant fields change (``generation`` then
increases, which invalidates the plugins' per-signature caches). What assigned pods
request (cpu, memory, pod count, the non-zero requests used for scoring, per-owner pod
counts, anti-affinity term counts) is updated incrementally on every add/remove: a bind
costs O(1) array updates, never a recount. Each update also notes the node's row in a
change log (:meth:`NodeTable.rows_changed_since`), so what a plugin derives per node from
those requests can be brought up to date row by row instead of recomputed for every node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from control.scheduler.quantity import int_value, milli_value
from netmodel.objects import Node, Pod, PodAffinityTerm, Taint
from netmodel.selectors import LabelSelector

#: kube-scheduler's defaults for containers without requests (scoring only).
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024
HOSTNAME_LABEL = "kubernetes.io/hostname"

#: how many row changes the log keeps (then it drops its older half)
LOG_LIMIT = 8192

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Term:
    """A required (anti-)affinity term, parsed: namespaces, selector, topology key."""

    namespaces: tuple[str, ...]
    selector: LabelSelector
    topology_key: str
    signature: str

    def matches(self, namespace: str, labels: dict[str, str]) -> bool:
        return namespace in self.namespaces and self.selector.matches(labels)


def parse_terms(pod: Pod, terms: Iterable[PodAffinityTerm]) -> tuple[Term, ...]:
    out = []
    for t in terms:
        sel = t.label_selector or LabelSelector()
        if t.label_selector is None:
            continue  # a nil selector matches no pods
        namespaces = tuple(sorted(t.namespaces)) or (pod.namespace,)
        sig = json.dumps([namespaces, sel.model_dump(mode="json")], sort_keys=True)
        out.append(Term(namespaces, sel, t.topology_key or HOSTNAME_LABEL, sig))
    return tuple(out)


@dataclass(slots=True)
class PodInfo:
    """What scheduling needs of one pod, computed once per pod."""

    key: str
    namespace: str
    labels: dict[str, str]
    cpu: int
    memory: int
    nz_cpu: int
    nz_memory: int
    owner: str | None
    anti_terms: tuple[Term, ...] = ()
    node: str | None = None


def pod_info(pod: Pod) -> PodInfo:
    cpu = mem = nz_cpu = nz_mem = 0
    for c in pod.spec.containers:
        req = c.resources.requests
        c_cpu = milli_value(req["cpu"]) if "cpu" in req else 0
        c_mem = int_value(req["memory"]) if "memory" in req else 0
        cpu += c_cpu
        mem += c_mem
        nz_cpu += c_cpu if "cpu" in req else DEFAULT_MILLI_CPU
        nz_mem += c_mem if "memory" in req else DEFAULT_MEMORY
    ref = pod.metadata.controller_ref()
    owner = (ref.uid or f"{ref.kind}/{pod.namespace}/{ref.name}") if ref else None
    aff = pod.spec.affinity
    anti = aff.pod_anti_affinity if aff else None
    terms = (
        parse_terms(pod, anti.required_during_scheduling_ignored_during_execution) if anti else ()
    )
    return PodInfo(
        key=pod.key,
        namespace=pod.namespace,
        labels=dict(pod.labels),
        cpu=cpu,
        memory=mem,
        nz_cpu=nz_cpu,
        nz_memory=nz_mem,
        owner=owner,
        anti_terms=terms,
        node=pod.spec.node_name,
    )


def _relevant(node: Node) -> tuple[object, ...]:
    """The fields of a node scheduling depends on."""
    return (
        node.labels,
        node.spec.unschedulable,
        node.spec.taints,
        node.status.allocatable or node.status.capacity,
    )


@dataclass
class NodeTable:
    """Nodes (sorted by name) as array rows, and the pods assigned to them."""

    generation: int = 0
    names: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    pods: dict[str, PodInfo] = field(default_factory=dict)
    anti_pods: dict[str, PodInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_name: dict[str, Node] = {}
        self._dirty = True
        empty = np.zeros(0, dtype=np.int64)
        self.alloc_cpu = self.alloc_mem = self.alloc_pods = empty
        self.req_cpu = self.req_mem = self.req_pods = empty
        self.nz_cpu = self.nz_mem = empty
        self.safe_cpu = self.safe_mem = empty
        self.sized: BoolArray = np.zeros(0, dtype=bool)
        self.all_sized = True
        self.any_unschedulable = False
        self.unschedulable: BoolArray = np.zeros(0, dtype=bool)
        self.taints: list[list[Taint]] = []
        self.labels: list[dict[str, str]] = []
        self._owner_counts: dict[str, IntArray] = {}
        self._term_counts: dict[str, tuple[Term, IntArray]] = {}
        self._domains: dict[str, tuple[NDArray[np.int64], int]] = {}
        #: rows whose requests changed, in order; entry k is change number _log_base + k
        self._log: list[int] = []
        self._log_base = 0

    def __len__(self) -> int:
        self.refresh()
        return len(self.names)

    # ---- nodes

    def set_node(self, node: Node) -> bool:
        """Add or replace a node; True if scheduling-relevant data changed."""
        old = self._by_name.get(node.name)
        self._by_name[node.name] = node
        if old is not None and _relevant(old) == _relevant(node):
            i = self.index.get(node.name)
            if i is not None and not self._dirty:
                self.nodes[i] = node
            return False
        self._dirty = True
        return True

    def remove_node(self, name: str) -> bool:
        if self._by_name.pop(name, None) is None:
            return False
        self._dirty = True
        return True

    def refresh(self) -> None:
        """Rebuild the arrays if the node set or a node's static data changed."""
        if not self._dirty:
            return
        self._dirty = False
        self.generation += 1
        self.names = sorted(self._by_name)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.nodes = [self._by_name[n] for n in self.names]
        n = len(self.names)
        alloc = [nd.status.allocatable or nd.status.capacity for nd in self.nodes]
        self.alloc_cpu = np.array([milli_value(a.get("cpu", "0")) for a in alloc], dtype=np.int64)
        self.alloc_mem = np.array([int_value(a.get("memory", "0")) for a in alloc], dtype=np.int64)
        self.alloc_pods = np.array([int_value(a.get("pods", "110")) for a in alloc], dtype=np.int64)
        self.safe_cpu = np.maximum(self.alloc_cpu, 1)
        self.safe_mem = np.maximum(self.alloc_mem, 1)
        self.sized = (self.alloc_cpu > 0) & (self.alloc_mem > 0)
        self.all_sized = bool(self.sized.all())
        self.unschedulable = np.array([nd.spec.unschedulable for nd in self.nodes], dtype=bool)
        self.any_unschedulable = bool(self.unschedulable.any())
        self.taints = [
            [t for t in nd.spec.taints if t.effect in ("NoSchedule", "NoExecute")]
            for nd in self.nodes
        ]
        self.labels = [dict(nd.labels) for nd in self.nodes]
        for arr in ("req_cpu", "req_mem", "req_pods", "nz_cpu", "nz_mem"):
            setattr(self, arr, np.zeros(n, dtype=np.int64))
        self._owner_counts = {}
        self._term_counts = {}
        self._domains = {}
        self._log_base += len(self._log)
        self._log = []
        for info in self.pods.values():
            self._account(info, +1)

    # ---- pods

    def add_pod(self, info: PodInfo) -> None:
        """Account a pod assigned to ``info.node`` (idempotent per pod key)."""
        if info.key in self.pods:
            self.remove_pod(info.key)
        self.pods[info.key] = info
        if info.anti_terms:
            self.anti_pods[info.key] = info
        if not self._dirty:
            self._account(info, +1)

    def remove_pod(self, key: str) -> PodInfo | None:
        info = self.pods.pop(key, None)
        if info is None:
            return None
        self.anti_pods.pop(key, None)
        if not self._dirty:
            self._account(info, -1)
        return info

    def _account(self, info: PodInfo, sign: int) -> None:
        i = self.index.get(info.node or "")
        if i is None:
            return
        self.req_cpu[i] += sign * info.cpu
        self.req_mem[i] += sign * info.memory
        self.req_pods[i] += sign
        self.nz_cpu[i] += sign * info.nz_cpu
        self.nz_mem[i] += sign * info.nz_memory
        log = self._log
        log.append(i)
        if len(log) > LOG_LIMIT:  # readers this far behind recompute every row
            del log[: LOG_LIMIT // 2]
            self._log_base += LOG_LIMIT // 2
        if info.owner is not None:
            counts = self._owner_counts.get(info.owner)
            if counts is None:
                counts = self._owner_counts[info.owner] = np.zeros(len(self.names), np.int64)
            counts[i] += sign
        for term, tc in self._term_counts.values():
            if term.matches(info.namespace, info.labels):
                tc[i] += sign

    @property
    def log_position(self) -> int:
        """How many request changes were made so far (in this generation or before)."""
        return self._log_base + len(self._log)

    def rows_changed_since(self, position: int) -> list[int] | None:
        """The rows whose requests (cpu, memory, pods and their non-zero forms) changed
        after :attr:`log_position` was ``position`` (a row may repeat); None when the log
        no longer reaches back that far: everything must be recomputed. Only meaningful
        within one :attr:`generation`."""
        self.refresh()
        k = position - self._log_base
        if k < 0:
            return None
        return self._log[k:]

    def owner_counts(self, owner: str) -> IntArray | None:
        self.refresh()
        return self._owner_counts.get(owner)

    def term_counts(self, term: Term) -> IntArray:
        """Per node, how many assigned pods ``term`` matches (kept up to date once asked)."""
        self.refresh()
        hit = self._term_counts.get(term.signature)
        if hit is not None:
            return hit[1]
        counts = np.zeros(len(self.names), dtype=np.int64)
        for info in self.pods.values():
            i = self.index.get(info.node or "")
            if i is not None and term.matches(info.namespace, info.labels):
                counts[i] += 1
        self._term_counts[term.signature] = (term, counts)
        return counts

    def domains(self, topology_key: str) -> tuple[NDArray[np.int64], int]:
        """Per node the id of its value of ``topology_key`` (-1 without the label)."""
        self.refresh()
        hit = self._domains.get(topology_key)
        if hit is None:
            ids: dict[str, int] = {}
            arr = np.array(
                [
                    ids.setdefault(lb[topology_key], len(ids)) if topology_key in lb else -1
                    for lb in self.labels
                ],
                dtype=np.int64,
            )
            hit = self._domains[topology_key] = (arr, len(ids))
        return hit
