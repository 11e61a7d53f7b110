"""The scheduler: places unbound pods on nodes, as kube-scheduler's default profile does.

One attempt (:meth:`Scheduler.schedule`):

1. **Filter** every node with the filter plugins in upstream order (a node's status is
   the first plugin that rejects it). Like kube-scheduler, the search stops once
   :func:`num_feasible_nodes_to_find` feasible nodes are found, walking the nodes from
   a start index that rotates from one attempt to the next.
2. **Score** the feasible nodes (0..100 per plugin, times its weight, summed); with a
   single feasible node there is nothing to score.
3. **Select** the highest total; ties are broken by a random generator seeded from the
   control plane's seed (deterministic).
4. **Bind**: through the apiserver's ``pods/binding`` subresource (it sets
   ``spec.nodeName`` and the PodScheduled condition, nothing else), with the decision in
   the ``svclab.dev/scheduling`` annotation, and an Event ``Scheduled``
   ("Successfully assigned ns/pod to node"). The pod is *assumed* on the node in the
   cache at once, so the next attempt sees its requests.

A pod that fits nowhere gets ``PodScheduled=False`` reason ``Unschedulable`` with
kube-scheduler's message (``0/3 nodes are available: 1 Insufficient cpu, ...
preemption: 0/3 nodes are available: ...``), a Warning Event ``FailedScheduling``, and
is parked until something that could make it fit happens: a node is added or changes
its labels, taints, schedulability or allocatable, or an assigned pod is deleted.
Preemption is not performed: pods have no priorities in svclab, so where preemption
could help upstream reports "No preemption victims found for incoming pod".
"""

from __future__ import annotations

import random
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from control.agents import PodSummary
from control.apiclient import APIClient
from control.apiserver.server import APIServer
from control.clock import Clock, rfc3339
from control.events import Recorder
from control.scheduler.decision import SCHEDULING_ANNOTATION, Decision, NodeRow
from control.store.base import Store, WatchEvent
from netmodel.errors import NotFoundError, SvclabError
from netmodel.objects import Condition, KubeObject, Node, Pod

if TYPE_CHECKING:  # numpy is imported when the scheduler first works (see Scheduler)
    from control.scheduler.plugins import Filter, Score
    from control.scheduler.table import BoolArray, IntArray, NodeTable, PodInfo

SCHEDULER_NAME = "default-scheduler"
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
NO_PREEMPTION_HELP = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def num_feasible_nodes_to_find(num_all: int, percentage: int = 0) -> int:
    """kube-scheduler's numFeasibleNodesToFind: every node below 100 nodes, else
    ``percentage`` of them (adaptive when 0: 50 - nodes/125, at least 5) but >= 100.
    Above 100 it acts as 100 (the Kubernetes documentation, "Scheduler Performance
    Tuning", https://kubernetes.io/docs/concepts/scheduling-eviction/scheduler-perf-tuning/:
    50% at 100 nodes, 10% at 5,000, never below 5%, and at least 100 feasible nodes)."""
    if num_all < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all
    if percentage <= 0:
        percentage = max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND, 50 - num_all // 125)
    percentage = min(percentage, 100)
    return max(MIN_FEASIBLE_NODES_TO_FIND, num_all * percentage // 100)


def _histogram(reasons: Iterable[str]) -> str:
    return ", ".join(sorted(f"{n} {r}" for r, n in Counter(reasons).items()))


@dataclass
class SchedulerStats:
    scheduled: int = 0
    failed: int = 0
    seconds: float = 0.0
    #: decisions made looking at a pinned pod's named nodes only (:meth:`Scheduler._schedule_pinned`)
    pinned: int = 0

    @property
    def pods_per_second(self) -> float:
        return self.scheduled / self.seconds if self.seconds else 0.0


class Scheduler:
    """The scheduling agent: ``kinds``/``handle``/``sync`` like every component."""

    name = SCHEDULER_NAME
    kinds = frozenset({"Pod", "Node"})
    max_retries = 5

    def __init__(
        self,
        api: APIClient,
        recorder: Recorder,
        clock: Clock,
        *,
        seed: int = 0,
        filters: Sequence[Filter] | None = None,
        scores: Sequence[Score] | None = None,
        percentage_of_nodes_to_score: int = 0,
        record_limit: int = 10,
        pinned_fast_path: bool = True,
    ) -> None:
        self.api = api
        self.store = api.store
        self.recorder = recorder
        self.clock = clock
        self._given = (filters, scores)
        self.percentage = percentage_of_nodes_to_score
        self.record_limit = record_limit
        self.pinned_fast_path = pinned_fast_path
        self.stats = SchedulerStats()
        self.decisions: OrderedDict[str, Decision] = OrderedDict()
        self._seed = seed
        self._rng = random.Random(f"{seed}/scheduler")
        self._active: deque[str] = deque()
        self._active_set: set[str] = set()
        self._parked: dict[str, tuple[object, object]] = {}
        self._failures: dict[str, int] = {}
        self._next_start = 0

    # ---- made on first use: the plugins, the node table and their numpy arrays (numpy
    # and the plugins are imported then, not by a control plane whose scheduler never
    # works, e.g. a converged start that changes no pod)

    @cached_property
    def filters(self) -> list[Filter]:
        from control.scheduler.plugins import default_filters

        given = self._given[0]
        return list(given) if given is not None else default_filters()

    @cached_property
    def scores(self) -> list[Score]:
        from control.scheduler.plugins import default_scores

        given = self._given[1]
        return list(given) if given is not None else default_scores()

    @cached_property
    def table(self) -> NodeTable:
        from control.scheduler.table import NodeTable

        return NodeTable()

    @cached_property
    def _weights(self) -> dict[str, int]:
        return {sp.name: sp.weight for sp in self.scores}

    @cached_property
    def _walk_cache(self) -> IntArray:
        import numpy as np

        return np.zeros(0, dtype=np.int64)

    @cached_property
    def _no_status(self) -> IntArray:
        import numpy as np

        return np.zeros(0, dtype=np.int64)

    # ---- queue

    def _activate(self, key: str) -> None:
        if key not in self._active_set:
            self._active_set.add(key)
            self._active.append(key)

    def _forget(self, key: str) -> None:
        self._active_set.discard(key)  # a stale deque entry is skipped when popped
        self._parked.pop(key, None)
        self._failures.pop(key, None)

    def _unpark_all(self) -> None:
        for key in list(self._parked):
            self._activate(key)
        self._parked.clear()

    @staticmethod
    def responsible_for(pod: Pod) -> bool:
        return (pod.spec.scheduler_name or SCHEDULER_NAME) == SCHEDULER_NAME

    # ---- informer side

    def handle(self, events: Sequence[WatchEvent]) -> None:
        for ev in events:
            obj = ev.object
            if isinstance(obj, Pod):
                self._on_pod(ev.type, obj)
            elif isinstance(obj, Node):
                if ev.type == "DELETED":
                    self.table.remove_node(obj.name)
                elif self.table.set_node(obj):
                    self._unpark_all()

    def _on_pod(self, type_: str, pod: Pod) -> None:
        from control.scheduler.table import pod_info

        key = pod.key
        if type_ == "DELETED":
            self._forget(key)
            self.decisions.pop(key, None)
            if self.table.remove_pod(key) is not None:
                self._unpark_all()
            return
        if pod.spec.node_name:
            self._forget(key)
            cur = self.table.pods.get(key)
            if cur is None or cur.node != pod.spec.node_name or cur.labels != pod.labels:
                self.table.add_pod(pod_info(pod))
            return
        if pod.metadata.deletion_timestamp is not None or not self.responsible_for(pod):
            self._forget(key)
            return
        parked = self._parked.get(key)
        if parked is not None:
            if parked == (pod.spec, pod.labels):
                return  # only our own status/annotation write: nothing new to try
            del self._parked[key]
        self._activate(key)

    def resync(self, objects: Iterable[KubeObject]) -> None:
        """Rebuild the cache and queues from a full listing (start, relist)."""
        from control.scheduler.table import NodeTable

        self.table = NodeTable()
        self._active.clear()
        self._active_set.clear()
        self._parked.clear()
        objs = list(objects)
        self.handle([WatchEvent("ADDED", o, 0) for o in objs if isinstance(o, Node)])
        self.handle([WatchEvent("ADDED", o, 0) for o in objs if isinstance(o, Pod)])

    @staticmethod
    def has_start_work(store: Store, pods: Sequence[PodSummary]) -> bool:
        """Whether :meth:`resync` would queue a pod (one without a node, not being
        deleted, for this scheduler): a full start retries it, so a control plane
        started on a converged store starts the scheduler at once
        (:meth:`control.runner.ControlPlane.start`)."""
        return any(
            not p.node_name
            and p.deletion_timestamp is None
            and (p.scheduler_name or SCHEDULER_NAME) == SCHEDULER_NAME
            for p in pods
        )

    def pending(self) -> int:
        return len(self._active_set)

    # ---- the loop

    def sync(self) -> int:
        """Attempt every pod queued when called; returns the number of attempts."""
        t0 = time.perf_counter()
        done = 0
        for _ in range(len(self._active)):
            key = self._active.popleft()
            if key not in self._active_set:
                continue
            self._active_set.discard(key)
            done += 1
            try:
                self._attempt(key)
                self._failures.pop(key, None)
            except SvclabError:
                n = self._failures.get(key, 0) + 1
                self._failures[key] = n
                if n <= self.max_retries:
                    self._activate(key)
        self.stats.seconds += time.perf_counter() - t0
        return done

    def _attempt(self, key: str) -> None:
        from control.scheduler.table import pod_info

        try:
            pod = self.store.get("Pod", key)
        except NotFoundError:
            return
        if not isinstance(pod, Pod) or pod.spec.node_name or pod.is_terminating:
            return
        if not self.responsible_for(pod):
            return
        info = pod_info(pod)
        decision = self.schedule(pod, info)
        self._remember(decision)
        if decision.node is not None:
            self._bind(pod, info, decision)
        else:
            self._fail(pod, decision)

    def _remember(self, d: Decision) -> None:
        self.decisions[d.pod] = d
        self.decisions.move_to_end(d.pod)
        while len(self.decisions) > 4096:
            self.decisions.popitem(last=False)

    # ---- one decision (pure with respect to the store)

    def schedule(self, pod: Pod, info: PodInfo) -> Decision:
        """Filter, score and select a node for ``pod`` against the cache; no writes."""
        import numpy as np

        t = self.table
        t.refresh()
        n = len(t.names)
        weights = self._weights
        if n == 0:
            return Decision(pod.key, None, "no nodes available to schedule pods", 0, 0, 0, weights)
        if self.pinned_fast_path:
            pinned = self._schedule_pinned(pod, info, n)
            if pinned is not None:
                return pinned
        status = self._no_status  # 0 = feasible, else 1 + filter index
        alive: BoolArray | None = None  # None: every node passed so far
        for pi, plugin in enumerate(self.filters, 1):
            mask = plugin.fails(pod, info, t)
            if mask is not None:
                if alive is None:
                    status = np.zeros(n, dtype=np.int64)
                    status[mask] = pi
                    alive = ~mask
                else:
                    status[mask & alive] = pi
                    alive &= ~mask
        start = self._next_start % n
        want = num_feasible_nodes_to_find(n, self.percentage)
        processed = n
        if alive is None:
            processed = want  # every node is feasible: the first `want` of the walk
        elif want < n:
            cums = np.cumsum(np.concatenate((alive[start:], alive[:start])))
            if cums[-1] >= want:
                processed = int(np.searchsorted(cums, want)) + 1
        self._next_start = (start + processed) % n
        evaluated = self._walk(n)[start : start + processed]
        feasible = evaluated if alive is None else evaluated[alive[evaluated]]
        if len(feasible) == 0:
            msg = self._fit_error(pod, info, status)
            failed_rows, left_out = self._rows(pod, info, evaluated, status, feasible, None, None)
            return Decision(
                pod.key, None, msg, n, processed, 0, weights, failed_rows, omitted=left_out
            )
        chosen, per_plugin, totals, pick, top = self._score(pod, info, feasible)
        node = t.names[chosen]
        rows, omitted = self._rows(
            pod,
            info,
            evaluated,
            None if alive is None else status,
            feasible,
            per_plugin,
            totals,
            (pick, top),
        )
        return Decision(
            pod.key,
            node,
            f"Scheduled to {node}",
            n,
            processed,
            len(feasible),
            weights,
            rows,
            omitted=omitted,
        )

    def _score(
        self, pod: Pod, info: PodInfo, feasible: IntArray
    ) -> tuple[int, dict[str, IntArray] | None, IntArray | None, int, int]:
        """Score the feasible nodes (in walk order) and select one: the chosen node's
        index, the scores per plugin and their weighted totals (None: a single feasible
        node, nothing to score), its position in ``feasible`` and the best total."""
        import numpy as np

        if len(feasible) == 1:
            return int(feasible[0]), None, None, 0, 0
        per_plugin: dict[str, IntArray] = {}
        totals: IntArray | None = None
        for sp in self.scores:
            score = per_plugin[sp.name] = sp.score(pod, info, self.table, feasible)
            weighted = score * sp.weight if sp.weight != 1 else score
            totals = weighted.copy() if totals is None else totals + weighted
        assert totals is not None
        top = int(totals.max())
        best = np.flatnonzero(totals == top)
        pick = int(best[self._rng.randrange(len(best))] if len(best) > 1 else best[0])
        return int(feasible[pick]), per_plugin, totals, pick, top

    def _schedule_pinned(self, pod: Pod, info: PodInfo, n: int) -> Decision | None:
        """:meth:`schedule` for a pod whose required node affinity names its nodes
        (``matchFields metadata.name In``: a DaemonSet's pods), looking at those nodes
        and at the first ``record_limit`` others by name only, as kube-scheduler's
        NodeAffinity PreFilter narrows the search; None when the full walk is needed.

        The decision is the full walk's, field for field: with fewer named nodes than
        :func:`num_feasible_nodes_to_find`, that walk evaluates every node (so the
        rotating start stays where it is), every node not named is rejected (its status
        the first filter that rejects it, which these filters compute for the nodes
        asked), and the record keeps the chosen node, then the rejected nodes by name:
        the first ones of them are among the nodes looked at. A pod that fits none of
        its nodes takes the full walk (its message counts every node's reasons)."""
        import numpy as np

        from control.scheduler.plugins import pinned_nodes

        named = pinned_nodes(pod)
        if named is None:
            return None
        t = self.table
        inside = {i for i in (t.index.get(name) for name in named) if i is not None}
        if len(inside) >= num_feasible_nodes_to_find(n, self.percentage):
            return None  # the walk may stop early: take it
        limit = self.record_limit
        others: list[int] = []
        i = 0
        while len(others) < limit and i < n:
            if i not in inside:
                others.append(i)
            i += 1
        looked = np.array(sorted(inside.union(others)), dtype=np.int64)
        status = np.zeros(len(looked), dtype=np.int64)
        alive = np.ones(len(looked), dtype=bool)
        for pi, plugin in enumerate(self.filters, 1):
            mask = plugin.fails_at(pod, info, t, looked)
            if mask is not None:
                status[mask & alive] = pi
                alive &= ~mask
        good = looked[alive].tolist()
        if not good or not inside.issuperset(good):
            return None  # fits none of its nodes, or a filter set without NodeAffinity
        start = self._next_start % n
        self._next_start = start  # the full walk goes round once: back where it began
        feasible = np.array(sorted(good, key=lambda j: (j - start) % n), dtype=np.int64)
        self.stats.pinned += 1
        chosen, per_plugin, totals, pick, top = self._score(pod, info, feasible)
        node = t.names[chosen]
        no_rejects = np.zeros(0, dtype=np.int64)
        rows = list(
            self._rows(pod, info, no_rejects, None, feasible, per_plugin, totals, (pick, top))[0]
        )
        for j in np.flatnonzero(status)[: max(0, limit - len(rows))].tolist():
            k = int(looked[j])
            plugin = self.filters[int(status[j]) - 1]
            why = "; ".join(plugin.reasons(pod, info, t, k))
            rows.append(NodeRow(t.names[k], f"{plugin.name}: {why}"))
        return Decision(
            pod.key,
            node,
            f"Scheduled to {node}",
            n,
            n,
            len(feasible),
            self._weights,
            tuple(rows),
            omitted=n - len(rows),
        )

    def _walk(self, n: int) -> IntArray:
        """0..n-1 twice over: a walk of any length from any start is one slice."""
        import numpy as np

        if len(self._walk_cache) != 2 * n:
            self._walk_cache = np.concatenate((np.arange(n), np.arange(n)))
        return self._walk_cache

    def _fit_error(self, pod: Pod, info: PodInfo, status: IntArray) -> str:
        import numpy as np

        n = len(status)
        reasons: list[str] = []
        preemption: list[str] = []
        for i in np.flatnonzero(status):
            plugin = self.filters[int(status[i]) - 1]
            reasons += plugin.reasons(pod, info, self.table, int(i))
            preemption.append(NO_PREEMPTION_HELP if plugin.unresolvable else NO_VICTIMS)
        return (
            f"0/{n} nodes are available: {_histogram(reasons)}. "
            f"preemption: 0/{n} nodes are available: {_histogram(preemption)}."
        )

    def _rows(
        self,
        pod: Pod,
        info: PodInfo,
        evaluated: IntArray,
        status: IntArray | None,
        feasible: IntArray,
        per_plugin: dict[str, IntArray] | None,
        totals: IntArray | None,
        picked_best: tuple[int, int] | None = None,
    ) -> tuple[tuple[NodeRow, ...], int]:
        """The table rows worth keeping (at most ``record_limit``: the chosen node, the
        best totals, then rejected nodes by name) and how many were left out.
        ``status`` None means no evaluated node was rejected. ``picked_best``: the chosen
        node's position in ``feasible`` and the best total, when scored."""
        import numpy as np

        t = self.table
        limit = self.record_limit
        rows: list[NodeRow] = []
        if len(feasible) and totals is not None and per_plugin is not None:
            assert picked_best is not None
            first, best = picked_best  # the chosen one first: a tie may rank it lower
            # best total first, ties by name (node indexes are in name order): one key
            key = (best - totals) * len(t.names) + feasible
            if len(key) > limit:
                top = np.argpartition(key, limit - 1)[:limit]
                order = top[np.argsort(key[top])].tolist()
            else:
                order = np.argsort(key).tolist()
            picked = np.array([first, *[j for j in order if j != first]][:limit])
            names = [t.names[i] for i in feasible[picked].tolist()]
            plugins = list(per_plugin)
            cols = zip(*[arr[picked].tolist() for arr in per_plugin.values()], strict=True)
            rows = [
                NodeRow(name, None, dict(zip(plugins, scores, strict=True)), total)
                for name, total, scores in zip(names, totals[picked].tolist(), cols, strict=True)
            ]
        elif len(feasible):
            rows = [NodeRow(t.names[i]) for i in np.sort(feasible)[:limit].tolist()]
        if status is None:
            return tuple(rows), len(feasible) - len(rows)
        rejected = np.sort(evaluated[status[evaluated] > 0]).tolist()
        for i in rejected[: max(0, limit - len(rows))]:
            plugin = self.filters[int(status[i]) - 1]
            why = "; ".join(plugin.reasons(pod, info, t, i))
            rows.append(NodeRow(t.names[i], f"{plugin.name}: {why}"))
        return tuple(rows), len(feasible) + len(rejected) - len(rows)

    # ---- writes

    def _bind(self, pod: Pod, info: PodInfo, decision: Decision) -> None:
        node = decision.node
        assert node is not None
        # the pods/binding subresource, with the decision as the Binding's annotation
        # (copied onto the pod) and the pod read as precondition (uid, resourceVersion)
        updated = self.api.bind(
            pod.key,
            node,
            {SCHEDULING_ANNOTATION: decision.to_json()},
            uid=pod.metadata.uid,
            resource_version=pod.resource_version,
            component=self.name,
        )
        info.node = node
        self.table.add_pod(info)  # assume: visible to the next attempt at once
        self.stats.scheduled += 1
        self.recorder.record(
            self.name,
            updated,
            "Scheduled",
            f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
        )

    def _fail(self, pod: Pod, decision: Decision) -> None:
        self.stats.failed += 1
        raw = decision.to_json()
        # an API client may not update pods (kube-scheduler's role): the condition says why
        may_annotate = isinstance(self.api, APIServer)
        if may_annotate and pod.metadata.annotations.get(SCHEDULING_ANNOTATION) != raw:
            ann = {**pod.metadata.annotations, SCHEDULING_ANNOTATION: raw}
            updated = self.api.update(pod.with_meta(annotations=ann), component=self.name)
            assert isinstance(updated, Pod)
            pod = updated
        cur = pod.condition("PodScheduled")
        if cur is None or (cur.status, cur.reason, cur.message) != (
            "False",
            "Unschedulable",
            decision.result,
        ):
            cond = Condition(
                type="PodScheduled",
                status="False",
                reason="Unschedulable",
                message=decision.result,
                last_transition_time=rfc3339(self.clock.now()),
            )
            others = [c for c in pod.status.conditions if c.type != "PodScheduled"]
            status = pod.status.evolve(
                phase=pod.status.phase or "Pending", conditions=[*others, cond]
            )
            updated = self.api.update_status(pod.evolve(status=status), component=self.name)
            assert isinstance(updated, Pod)
            pod = updated
        self.recorder.record(self.name, pod, "FailedScheduling", decision.result, type_="Warning")
        self._parked[pod.key] = (pod.spec, pod.labels)

    def last_decision(self, pod_key: str) -> Decision | None:
        """The last decision for a pod: from memory, else from its annotation."""
        d = self.decisions.get(pod_key)
        if d is not None:
            return d
        try:
            pod = self.store.get("Pod", pod_key)
        except NotFoundError:
            return None
        raw = pod.metadata.annotations.get(SCHEDULING_ANNOTATION)
        return Decision.from_json(pod_key, raw) if raw else None
