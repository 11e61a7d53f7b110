"""The DaemonSet controller: one pod per eligible node, as kube-controller-manager's
``daemon`` controller keeps them.

Which nodes (upstream's ``NodeShouldRunDaemonPod``), judged for the pod the DaemonSet
would create there (its template plus the tolerations below):

* the template's ``nodeName``, if set, names the node;
* the node matches the template's ``nodeSelector`` and its required node affinity
  (any term; a term's ``matchExpressions`` on the labels, ``matchFields`` on
  ``metadata.name``);
* every NoSchedule / NoExecute taint of the node is tolerated. The pod's tolerations are
  the template's plus those the controller adds to every daemon pod (``Exists``):
  ``node.kubernetes.io/not-ready`` and ``unreachable`` (NoExecute),
  ``disk-pressure``, ``memory-pressure``, ``pid-pressure`` and ``unschedulable``
  (NoSchedule), and ``network-unavailable`` (NoSchedule) for hostNetwork pods.

A node that fails only on an untolerated NoSchedule taint keeps the pod it runs (it
should not get a new one); a node that fails otherwise loses it.

Each reconcile (upstream's ``syncDaemonSet``):

1. **manage**: a node that should run the pod and has none gets one; a node that keeps
   its pod deletes Failed pods and all but the oldest running one (while surging, the
   oldest updated and the oldest old one, the old one too once the updated one is
   available); a node that should not run the pod loses its pods; an unscheduled pod
   aimed at a node that no longer exists is deleted. At most :data:`BURST` creations
   and as many deletions per reconcile (kube's burstReplicas); the key is queued again.
2. **rolling update**, when ``updateStrategy.type`` is RollingUpdate and manage wrote
   nothing (upstream waits for its expectations the same way): with ``maxSurge`` 0,
   old pods are deleted as far as ``maxUnavailable`` nodes may be without an available
   pod (unavailable old pods first: they cost nothing), and manage recreates them;
   with ``maxSurge`` > 0, an updated pod is created beside old ones on up to
   ``maxSurge`` nodes, and an old pod is deleted once the updated one beside it is
   available. Limits are counts of the desired nodes, percentages rounded up
   (:meth:`~netmodel.daemonset.RollingUpdateDaemonSet.limits`). OnDelete replaces
   nothing: a deleted pod comes back from the current template.
3. **status**: desiredNumberScheduled (nodes that should run it),
   currentNumberScheduled (of those, with a pod), numberMisscheduled (nodes with a pod
   that should not run it), numberReady / numberAvailable (the oldest pod of a desired
   node is ready / ready for ``minReadySeconds``), updatedNumberScheduled (its pod is of
   the current template), numberUnavailable, observedGeneration.

Revisions (upstream's constructHistory, through :mod:`.history`): the template is
kept as a ControllerRevision ``<ds>-<hash>`` (its data the template patch
``kubectl rollout undo`` sends back; the DaemonSet's annotations, so its change-cause;
``controller-revision-hash`` = the hash), numbered after the others; a template rolled
back to renumbers its old revision as the newest; old revisions no pod runs go beyond
``revisionHistoryLimit``, oldest first.

Pods are made from the template as upstream makes them: named ``<ds>-<5 chars>``
(seeded, deterministic), labelled ``controller-revision-hash`` (the revision's hash)
and ``pod-template-generation``, owned by the DaemonSet, and bound to their node the
way kube ≥ 1.12 does: the template's required node affinity is replaced by one term,
``matchFields metadata.name In [node]``, and the scheduler places the pod. Pods are
"updated" when their hash label is the current one or their template generation label
is the DaemonSet's. Orphan pods the selector matches are adopted.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from control.clock import Clock, FakeClock
from control.controllers.base import (
    APIClient,
    Controller,
    Indexer,
    controlled_by,
    controller_ref,
    is_controlled_by,
    owner_id,
)
from control.controllers.deployment import SAFE_ALPHABET, pod_template_hash
from control.controllers.history import History, sort_revisions, template_patch
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.apps import ControllerRevision
from netmodel.daemonset import (
    TEMPLATE_GENERATION_LABEL,
    DaemonSet,
    RollingUpdateDaemonSet,
)
from netmodel.errors import ConflictError, InvalidError, NotFoundError
from netmodel.objects import (
    Affinity,
    KubeObject,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectMeta,
    Pod,
    PodSpec,
    Taint,
    Toleration,
)

#: the pod label naming the template's revision (apps/v1 DefaultDaemonSetUniqueLabelKey)
REVISION_HASH_LABEL = "controller-revision-hash"
#: kube-controller-manager's burstReplicas
BURST = 250
#: the field a node selector term's matchFields may name
NAME_FIELD = "metadata.name"

_EXISTS = "Exists"
#: (key, effect) of the tolerations every daemon pod gets
AUTO_TOLERATIONS: tuple[tuple[str, str], ...] = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
#: and a hostNetwork daemon pod this one
HOST_NETWORK_TOLERATION = ("node.kubernetes.io/network-unavailable", "NoSchedule")


# --------------------------------------------------------------------------- the pod


def with_daemon_tolerations(spec: PodSpec) -> PodSpec:
    """``spec`` with the tolerations the controller adds (upstream's
    ``AddOrUpdateDaemonPodTolerations``): each one the spec lacks is appended (a
    toleration of the same key and effect with another operator or value is replaced)."""
    tols = list(spec.tolerations)
    wanted = list(AUTO_TOLERATIONS)
    if spec.host_network:
        wanted.append(HOST_NETWORK_TOLERATION)
    for key, effect in wanted:
        new = Toleration(key=key, operator=_EXISTS, effect=effect)
        same = [i for i, t in enumerate(tols) if t.key == key and t.effect == effect]
        if any(tols[i] == new for i in same):
            continue
        for i in reversed(same):
            del tols[i]
        tols.append(new)
    return spec.evolve(tolerations=tols)


def bound_to(spec: PodSpec, node: str) -> PodSpec:
    """``spec`` whose required node affinity is one term, ``matchFields metadata.name In
    [node]`` (upstream's ``ReplaceDaemonSetPodNodeNameNodeAffinity``: the terms the
    template had were checked against the node already)."""
    term = NodeSelectorTerm(
        match_fields=[NodeSelectorRequirement(key=NAME_FIELD, operator="In", values=[node])]
    )
    required = NodeSelector(node_selector_terms=[term])
    aff = spec.affinity or Affinity()
    na = aff.node_affinity or NodeAffinity()
    na = na.evolve(required_during_scheduling_ignored_during_execution=required)
    return spec.evolve(affinity=aff.evolve(node_affinity=na))


def target_node(pod: Pod) -> str | None:
    """The node a daemon pod is for (upstream's ``GetTargetNodeName``): ``nodeName``, else
    the single name of its ``matchFields metadata.name In`` affinity term."""
    if pod.spec.node_name:
        return pod.spec.node_name
    aff = pod.spec.affinity.node_affinity if pod.spec.affinity else None
    req = aff.required_during_scheduling_ignored_during_execution if aff else None
    if req is None:
        return None
    for term in req.node_selector_terms:
        for r in term.match_fields:
            if r.key == NAME_FIELD and r.operator == "In" and len(r.values) == 1:
                return r.values[0]
    return None


def requirement_matches(req: NodeSelectorRequirement, values: Mapping[str, str]) -> bool:
    """A node selector requirement against labels (or fields), as the API defines it."""
    op, key = req.operator, req.key
    if op == "In":
        return key in values and values[key] in req.values
    if op == "NotIn":
        return key not in values or values[key] not in req.values
    if op == "Exists":
        return key in values
    if op == "DoesNotExist":
        return key not in values
    if op in ("Gt", "Lt") and key in values and len(req.values) == 1:
        try:
            have, want = int(values[key]), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_matches(spec: PodSpec, node: Node) -> bool:
    """The node fits the spec's nodeSelector and required node affinity."""
    labels = node.labels
    if any(labels.get(k) != v for k, v in spec.node_selector.items()):
        return False
    aff = spec.affinity.node_affinity if spec.affinity else None
    req = aff.required_during_scheduling_ignored_during_execution if aff else None
    if req is None:
        return True
    fields = {NAME_FIELD: node.name}
    return any(
        (t.match_expressions or t.match_fields)
        and all(requirement_matches(r, labels) for r in t.match_expressions)
        and all(requirement_matches(r, fields) for r in t.match_fields)
        for t in req.node_selector_terms
    )


def _untolerated(taints: Iterable[Taint], tols: list[Toleration], effects: tuple[str, ...]) -> bool:
    return any(t.effect in effects and not any(tol.tolerates(t) for tol in tols) for t in taints)


def should_run(spec: PodSpec, node: Node) -> tuple[bool, bool]:
    """``(should run, should continue running)`` of a daemon pod with ``spec`` (the
    template with the daemon tolerations) on ``node``; see the module docstring."""
    if spec.node_name and spec.node_name != node.name:
        return False, False
    if not node_matches(spec, node):
        return False, False
    taints = node.spec.taints
    if taints and _untolerated(taints, spec.tolerations, ("NoSchedule", "NoExecute")):
        return False, not _untolerated(taints, spec.tolerations, ("NoExecute",))
    return True, True


# --------------------------------------------------------------------------- pod state


@functools.lru_cache(maxsize=4096)
def _ts(text: str | None) -> float:
    if not text:
        return 0.0
    return _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC).timestamp()


def _by_age(p: Pod) -> tuple[int, float, str]:
    """upstream's podByCreationTimestampAndPhase: Running first, then oldest, then name."""
    return (0 if p.status.phase == "Running" else 1, _ts(p.metadata.creation_timestamp), p.name)


def is_updated(pod: Pod, ds: DaemonSet, h: str) -> bool:
    """Of the current template: its hash label, or its template generation label."""
    gen = ds.template_generation
    return pod.labels.get(REVISION_HASH_LABEL) == h or (
        gen is not None and pod.labels.get(TEMPLATE_GENERATION_LABEL) == str(gen)
    )


@dataclass(frozen=True)
class _Plan:
    create: list[str]
    delete: list[Pod]


def _pod_view(pod: KubeObject) -> tuple[object, ...]:
    meta = pod.metadata
    return (
        meta.owner_references,
        meta.labels,
        meta.deletion_timestamp,
        getattr(pod, "spec", None),
        getattr(pod, "status", None),
    )


def _node_view(node: KubeObject) -> tuple[object, ...]:
    """What of a node eligibility reads: its labels and taints."""
    return (node.metadata.labels, getattr(node, "spec", None) and node.spec.taints)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- controller


class DaemonSetController(Controller):
    """Keeps each DaemonSet's pod on every eligible node; see the module docstring."""

    name = "daemonset-controller"
    kinds = frozenset({"DaemonSet", "Pod", "Node", "ControllerRevision"})

    def __init__(
        self, api: APIClient, recorder: Recorder, *, seed: int = 0, clock: Clock | None = None
    ) -> None:
        super().__init__(api, recorder)
        self.seed = seed
        self.clock: Clock = clock or FakeClock()
        self.queue.use(self.queue.limiter, self.clock)  # minReadySeconds waits on it
        self._rngs: dict[str, random.Random] = {}
        self.history = History(api, self.name)
        #: DaemonSet key -> (the template spec, node name -> (that Node object, its
        #: should_run)): what a reconcile found, for the next one (see _runs)
        self._placements: dict[str, tuple[PodSpec, dict[str, tuple[Node, tuple[bool, bool]]]]] = {}

    def indexers(self) -> dict[str, Indexer]:
        def index(obj: KubeObject) -> Iterator[str]:
            if obj.kind == "DaemonSet":
                yield "ds"
                yield f"ds:{obj.namespace}"
                return
            if obj.kind == "ControllerRevision":
                yield f"cr:{obj.namespace}"
                return
            if obj.kind != "Pod":
                return
            o = controlled_by(obj, "DaemonSet")
            if o is not None:
                yield o
            elif obj.metadata.controller_ref() is None:
                yield f"orphan:{obj.namespace}"

        return {"by": index}

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        obj = event.object
        if obj.kind == "DaemonSet":
            return [obj.key]
        if obj.kind == "ControllerRevision":
            ref = obj.metadata.controller_ref()
            if ref is None or ref.kind != "DaemonSet":
                return []
            return [f"{obj.namespace}/{ref.name}"]
        if obj.kind == "Node":
            if event.type == "MODIFIED" and old is not None and _node_view(old) == _node_view(obj):
                return []
            return [ds.key for ds in self.cache.by_index("by", "ds")]
        if event.type == "MODIFIED" and old is not None and _pod_view(old) == _pod_view(obj):
            return []
        keys: list[str] = []
        for o in (old, obj):
            if o is None:
                continue
            ref = o.metadata.controller_ref()
            if ref is not None:
                if ref.kind == "DaemonSet":
                    keys.append(f"{obj.namespace}/{ref.name}")
            elif event.type != "DELETED" and o is obj:
                keys += [
                    ds.key
                    for ds in self.cache.by_index("by", f"ds:{obj.namespace}")
                    if isinstance(ds, DaemonSet)
                    and not ds.spec.selector.is_empty
                    and ds.spec.selector.matches(obj.labels)
                ]
        return keys

    def subject(self, key: str) -> KubeObject | None:
        return self.cache.get("DaemonSet", key)

    # ---- reconcile

    def construct_history(
        self, ds: DaemonSet
    ) -> tuple[ControllerRevision, list[ControllerRevision]]:
        """The DaemonSet's revision of its template now and its other revisions (upstream's
        constructHistory): its revisions (orphans its selector matches adopted) whose data
        is its template's patch are current, the newest kept (the others deleted); one
        older than an old revision is renumbered past them (a rollback); none: a new one
        (:meth:`snapshot`), numbered after the old ones."""
        revs = self.history.owned(
            ds, ds.spec.selector, self.cache.by_index("by", f"cr:{ds.namespace}")
        )
        data = template_patch(ds.spec.template)
        current = [r for r in revs if r.data == data]
        old = [r for r in revs if r.data != data]
        number = max((r.revision for r in old), default=0) + 1
        if not current:
            return self.snapshot(ds, data, number), old
        *dups, cur = sort_revisions(current)
        for r in dups:
            self.api.delete("ControllerRevision", r.key, component=self.name)
        if REVISION_HASH_LABEL not in cur.labels:  # a revision made without it
            labels = {**cur.labels, REVISION_HASH_LABEL: cur.name}
            cur = self._update_revision(cur.with_meta(labels=labels))
        if cur.revision < number:
            cur = self.history.renumber(cur, number)
        return cur, old

    def _update_revision(self, r: ControllerRevision) -> ControllerRevision:
        updated = self.api.update(r, component=self.name)
        assert isinstance(updated, ControllerRevision)
        return updated

    def snapshot(self, ds: DaemonSet, data: object, number: int) -> ControllerRevision:
        """Store revision ``number`` of the template (upstream's snapshot): named
        ``<ds>-<hash>`` where the hash is the template's (:func:`pod_template_hash`,
        with the collision count), labelled with the template's labels and
        ``controller-revision-hash``, annotated with the DaemonSet's annotations (its
        change-cause is what ``kubectl rollout history`` shows). A name taken by a
        revision of other data: the DaemonSet's ``status.collisionCount`` goes up and
        the reconcile fails (it is retried with the new count)."""
        h = pod_template_hash(ds.spec.template, ds.status.collision_count or 0)
        rev = ControllerRevision(
            metadata=ObjectMeta(
                name=f"{ds.name}-{h}",
                namespace=ds.namespace,
                labels={**ds.spec.template.metadata.labels, REVISION_HASH_LABEL: h},
                annotations=dict(ds.metadata.annotations),
                owner_references=[controller_ref(ds)],
            ),
            data=data,
            revision=number,
        )
        try:
            created = self.api.create(rev, component=self.name)
        except ConflictError:
            taken = self.store.get("ControllerRevision", rev.key)
            if isinstance(taken, ControllerRevision) and taken.data == data:
                return taken
            count = (ds.status.collision_count or 0) + 1
            self.api.update_status(
                ds.evolve(status=ds.status.evolve(collision_count=count)), component=self.name
            )
            raise
        assert isinstance(created, ControllerRevision)
        return created

    def _cleanup_history(
        self, ds: DaemonSet, old: list[ControllerRevision], pods: Iterable[Pod]
    ) -> None:
        """Delete the oldest old revisions beyond ``revisionHistoryLimit`` that no pod
        runs (upstream's cleanupHistory)."""
        limit = ds.spec.revision_history_limit
        if limit is None or len(old) <= limit:
            return
        hashes = {p.labels.get(REVISION_HASH_LABEL) for p in pods}
        to_kill = len(old) - limit
        for r in sort_revisions(old):
            if to_kill <= 0:
                break
            if r.labels.get(REVISION_HASH_LABEL) in hashes:
                continue
            with contextlib.suppress(NotFoundError):  # deleted meanwhile
                self.api.delete("ControllerRevision", r.key, component=self.name)
            to_kill -= 1

    def reconcile(self, key: str) -> None:
        try:
            ds = self.store.get("DaemonSet", key)
        except NotFoundError:
            self._rngs.pop(key, None)
            self._placements.pop(key, None)
            return
        if not isinstance(ds, DaemonSet) or ds.metadata.deletion_timestamp is not None:
            return
        cur, old = self.construct_history(ds)
        h = cur.labels.get(REVISION_HASH_LABEL, cur.name)
        ident = owner_id("DaemonSet", ds.namespace, ds.name, ds.metadata.uid)
        pods = [
            p
            for p in self.cache.by_index("by", ident)
            if isinstance(p, Pod) and is_controlled_by(p, ds)
        ]
        pods += self._adopt(ds)
        per_node: dict[str, list[Pod]] = {}
        for p in pods:
            node = target_node(p)
            if node is not None:
                per_node.setdefault(node, []).append(p)
        nodes = sorted(
            (n for n in self.cache.list("Node") if isinstance(n, Node)), key=lambda n: n.name
        )
        proto = with_daemon_tolerations(ds.spec.template.spec)
        runs = self._runs(ds, proto, nodes)
        self._update_status(ds, h, runs, per_node)
        plan = self._manage(ds, h, runs, per_node)
        if not plan.create and not plan.delete and ds.is_rolling_update:
            plan = self._rolling_update(ds, h, runs, per_node)
        self._carry_out(ds, h, plan, proto)
        self._cleanup_history(ds, old, pods)

    def _runs(
        self, ds: DaemonSet, proto: PodSpec, nodes: list[Node]
    ) -> dict[str, tuple[bool, bool]]:
        """:func:`should_run` of ``proto`` on each of ``nodes``, by node name. A node whose
        object is the one the previous reconcile of this DaemonSet looked at, under the
        same template, keeps that answer (it depends on nothing else): a 5,000-node
        rollout reconciles ~20 times (BURST creations each) with the nodes unchanged."""
        template = ds.spec.template.spec
        memo = self._placements.get(ds.key)
        before = memo[1] if memo is not None and memo[0] == template else {}
        seen: dict[str, tuple[Node, tuple[bool, bool]]] = {}
        runs: dict[str, tuple[bool, bool]] = {}
        for n in nodes:
            hit = before.get(n.name)
            if hit is None or hit[0] is not n:
                hit = (n, should_run(proto, n))
            seen[n.name] = hit
            runs[n.name] = hit[1]
        self._placements[ds.key] = (template, seen)
        return runs

    def _manage(
        self,
        ds: DaemonSet,
        h: str,
        runs: dict[str, tuple[bool, bool]],
        per_node: dict[str, list[Pod]],
    ) -> _Plan:
        """upstream's podsShouldBeOnNode over every node, and the unscheduled pods aimed
        at nodes that are gone."""
        create: list[str] = []
        delete: list[Pod] = []
        surge = ds.is_rolling_update and self._limits(ds, runs)[0] > 0
        for name, (run, keep) in runs.items():
            pods = per_node.get(name, [])
            if run and not pods:
                create.append(name)
            elif keep:
                running: list[Pod] = []
                for p in pods:
                    if p.is_terminating:
                        continue
                    if p.status.phase == "Failed":
                        delete.append(p)
                    else:
                        running.append(p)
                if len(running) > 1:
                    delete += self._excess(ds, h, sorted(running, key=_by_age), surge)
            elif pods:
                delete += [p for p in pods if not p.is_terminating]
        for name, pods in per_node.items():
            if name not in runs:
                delete += [p for p in pods if not p.spec.node_name and not p.is_terminating]
        return _Plan(create, delete)

    def _excess(self, ds: DaemonSet, h: str, running: list[Pod], surge: bool) -> list[Pod]:
        """The pods of a node beyond the one it keeps (``running``: oldest first)."""
        if not surge:
            return running[1:]
        newest: Pod | None = None
        oldest: Pod | None = None
        out: list[Pod] = []
        for p in running:
            if is_updated(p, ds, h):
                if newest is None:
                    newest = p
                    continue
            elif oldest is None:
                oldest = p
                continue
            out.append(p)
        if (
            newest is not None
            and oldest is not None
            and (not oldest.is_ready or self._available(ds, newest))
        ):
            out.append(oldest)
        return out

    def _limits(self, ds: DaemonSet, runs: dict[str, tuple[bool, bool]]) -> tuple[int, int]:
        desired = sum(1 for run, _ in runs.values() if run)
        s = ds.spec.update_strategy
        ru = (s.rolling_update if s else None) or RollingUpdateDaemonSet(max_unavailable=1)
        try:
            return ru.limits(desired)
        except ValueError as e:
            raise InvalidError(
                str(e), obj=ds.ref, field="spec.updateStrategy.rollingUpdate"
            ) from None

    def _rolling_update(
        self,
        ds: DaemonSet,
        h: str,
        runs: dict[str, tuple[bool, bool]],
        per_node: dict[str, list[Pod]],
    ) -> _Plan:
        """One step of upstream's rollingUpdate (see the module docstring)."""
        max_surge, max_unavailable = self._limits(ds, runs)
        if max_surge == 0:
            unavailable = 0
            replace: list[Pod] = []
            candidates: list[Pod] = []
            for name in sorted(per_node):
                found = self._old_and_new(ds, h, per_node[name])
                if found is None:
                    unavailable += 1
                    continue
                new, old = found
                if (old is None) == (new is None):
                    unavailable += 1
                elif new is not None:
                    if not self._available(ds, new):
                        unavailable += 1
                elif old is not None:
                    if not self._available(ds, old):
                        replace.append(old)
                    elif unavailable < max_unavailable:
                        candidates.append(old)
            room = min(max(0, max_unavailable - unavailable), len(candidates))
            return _Plan([], replace + candidates[:room])
        surged = 0
        olds: list[Pod] = []
        allowed: list[str] = []
        nodes: list[str] = []
        for name in sorted(per_node):
            found = self._old_and_new(ds, h, per_node[name])
            if found is None:
                surged += 1
                continue
            new, old = found
            if old is None:
                continue
            if new is None:
                if not runs.get(name, (False, False))[0]:
                    continue  # manage's business: no new pod where none should run
                if not self._available(ds, old):
                    allowed.append(name)
                elif surged < max_surge:
                    nodes.append(name)
            elif not self._available(ds, new):
                surged += 1
            else:
                olds.append(old)
        room = min(max(0, max_surge - surged), len(nodes))
        return _Plan(allowed + nodes[:room], olds)

    def _old_and_new(
        self, ds: DaemonSet, h: str, pods: list[Pod]
    ) -> tuple[Pod | None, Pod | None] | None:
        """``(updated pod, old pod)`` of a node, leaving out terminating ones; None when a
        node has two of either (manage's business: upstream's findUpdatedPodsOnNode)."""
        new: Pod | None = None
        old: Pod | None = None
        for p in pods:
            if p.is_terminating:
                continue
            if is_updated(p, ds, h):
                if new is not None:
                    return None
                new = p
            else:
                if old is not None:
                    return None
                old = p
        return new, old

    def _available(self, ds: DaemonSet, pod: Pod) -> bool:
        """Ready for at least ``minReadySeconds`` (upstream's IsPodAvailable); a pod ready
        for less queues the DaemonSet again for when it will be."""
        if not pod.is_ready:
            return False
        wait = ds.spec.min_ready_seconds or 0
        if wait <= 0:
            return True
        cond = pod.condition("Ready")
        since = _ts(cond.last_transition_time if cond else None)
        left = since + wait - self.clock.now()
        if left > 0:
            self.queue.add_after(ds.key, left)
            return False
        return True

    # ---- writes

    def _carry_out(self, ds: DaemonSet, h: str, plan: _Plan, proto: PodSpec) -> None:
        for pod in plan.delete[:BURST]:
            self.api.delete("Pod", pod.key, component=self.name)
            self.recorder.record(self.name, ds, "SuccessfulDelete", f"Deleted pod: {pod.name}")
        for node in plan.create[:BURST]:
            self._create_pod(ds, h, node, proto)
        if len(plan.create) > BURST or len(plan.delete) > BURST:
            self.queue.add(ds.key)

    def _adopt(self, ds: DaemonSet) -> list[Pod]:
        if ds.spec.selector.is_empty:
            return []
        adopted: list[Pod] = []
        for p in self.cache.by_index("by", f"orphan:{ds.namespace}"):
            if not isinstance(p, Pod) or p.is_terminating or not ds.spec.selector.matches(p.labels):
                continue
            refs = [*p.metadata.owner_references, controller_ref(ds)]
            updated = self.api.update(p.with_meta(owner_references=refs), component=self.name)
            assert isinstance(updated, Pod)
            adopted.append(updated)
        return adopted

    def _pod_name(self, ds: DaemonSet) -> str:
        rng = self._rngs.get(ds.key)
        if rng is None:
            rng = self._rngs[ds.key] = random.Random(f"{self.seed}/{ds.key}")
        base = f"{ds.name[:58]}-"
        while True:
            name = base + "".join(rng.choices(SAFE_ALPHABET, k=5))
            if self.cache.get("Pod", f"{ds.namespace}/{name}") is not None:
                continue
            try:
                self.store.get("Pod", f"{ds.namespace}/{name}")
            except NotFoundError:
                return name

    def _create_pod(self, ds: DaemonSet, h: str, node: str, proto: PodSpec) -> None:
        """A pod for ``node``; ``proto``: the template's spec with the daemon tolerations."""
        t = ds.spec.template
        labels = {**t.metadata.labels, REVISION_HASH_LABEL: h}
        gen = ds.template_generation
        if gen is not None:
            labels[TEMPLATE_GENERATION_LABEL] = str(gen)
        pod = Pod(
            metadata=ObjectMeta(
                name=self._pod_name(ds),
                generate_name=f"{ds.name[:58]}-",
                namespace=ds.namespace,
                labels=labels,
                annotations=dict(t.metadata.annotations),
                owner_references=[controller_ref(ds)],
            ),
            spec=bound_to(proto, node),
        )
        created = self.api.create(pod, component=self.name)
        self.recorder.record(self.name, ds, "SuccessfulCreate", f"Created pod: {created.name}")

    def _update_status(
        self,
        ds: DaemonSet,
        h: str,
        runs: dict[str, tuple[bool, bool]],
        per_node: dict[str, list[Pod]],
    ) -> None:
        desired = current = ready = available = updated = misscheduled = 0
        for name, (run, _) in runs.items():
            pods = per_node.get(name)
            if not run:
                misscheduled += 1 if pods else 0
                continue
            desired += 1
            if not pods:
                continue
            current += 1
            pod = pods[0] if len(pods) == 1 else min(pods, key=_by_age)
            if pod.is_ready:
                ready += 1
                available += 1 if self._available(ds, pod) else 0
            updated += 1 if is_updated(pod, ds, h) else 0
        status = ds.status.evolve(
            desired_number_scheduled=desired,
            current_number_scheduled=current,
            number_misscheduled=misscheduled,
            number_ready=ready,
            # omitempty on the wire, as kube-controller-manager's status has them
            number_available=available or None,
            number_unavailable=(desired - available) or None,
            updated_number_scheduled=updated or None,
            observed_generation=ds.metadata.generation,
        )
        if status != ds.status:
            self.api.update_status(ds.evolve(status=status), component=self.name)
