"""The ReplicaSet controller: keeps ``spec.replicas`` active pods per ReplicaSet.

* Pods are named ``<rs>-<5 chars>`` from Kubernetes' safe alphabet, drawn from a random
  generator seeded by (seed, namespace/name of the ReplicaSet): the same operations
  give the same names. A name already taken is skipped.
* Pods carry the template's labels and annotations and an ownerReference to the
  ReplicaSet (``controller: true``). Orphan pods matching the selector are adopted.
* Active pods: not terminating, phase not Succeeded/Failed. Terminating pods do not
  count, so their replacements start at once (as in Kubernetes).
* Scale-down deletes pods in the order Kubernetes ranks them (:func:`deletion_order`):
  unscheduled, then Pending < Unknown < Running, not ready, doubled up on a node,
  ready for less time, newer.
* At most :data:`BURST` pods are created per reconcile (Kubernetes' burstReplicas); the
  key is queued again for the rest.
* ``status`` (replicas, readyReplicas, availableReplicas, observedGeneration) is computed from the pods seen before acting, as upstream does.
"""

from __future__ import annotations

import datetime as _dt
import random
from collections import Counter
from collections.abc import Iterable, Iterator

from control.controllers.base import (
    APIClient,
    Controller,
    Indexer,
    controlled_by,
    controller_ref,
    is_controlled_by,
    owner_id,
)
from control.controllers.deployment import SAFE_ALPHABET, desired_replicas
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError
from netmodel.objects import KubeObject, ObjectMeta, Pod, ReplicaSet, ReplicaSetStatus

BURST = 500

_PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}


def is_active(pod: Pod) -> bool:
    """Counted towards replicas: not terminating and not finished."""
    return pod.metadata.deletion_timestamp is None and pod.status.phase not in (
        "Succeeded",
        "Failed",
    )


def _ts(text: str | None) -> float:
    if not text:
        return 0.0
    return _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC).timestamp()


def deletion_order(pods: list[Pod]) -> list[Pod]:
    """``pods`` sorted the way Kubernetes picks scale-down victims (first = deleted first):

    1. unassigned before assigned; 2. Pending < Unknown < Running; 3. not ready before
    ready; 4. more pods of the same set on the pod's node first; 5. ready for less time
    first; 6. newer (or no creation time) first; then by name for determinism."""
    per_node = Counter(p.spec.node_name for p in pods if p.spec.node_name)

    def rank(p: Pod) -> tuple[int, int, int, int, float, int, float, str]:
        ready = p.is_ready
        cond = p.condition("Ready")
        ready_since = _ts(cond.last_transition_time) if (ready and cond) else 0.0
        created = p.metadata.creation_timestamp
        return (
            1 if p.spec.node_name else 0,
            _PHASE_ORDER.get(p.status.phase or "", 0),
            1 if ready else 0,
            -per_node.get(p.spec.node_name or "", 0) if p.spec.node_name else 0,
            -ready_since,
            1 if created else 0,
            -_ts(created),
            p.name,
        )

    return sorted(pods, key=rank)


def _pod_view(pod: KubeObject) -> tuple[object, ...]:
    """What of a pod its ReplicaSet's reconcile reads: the owner and the labels
    (ownership, adoption), whether it is terminating, its spec (the node) and its status
    (active, ready, the scale-down ranking). A pod update that changes none of them (an
    annotation, managedFields) cannot change what the reconcile does."""
    meta = pod.metadata
    return (
        meta.owner_references,
        meta.labels,
        meta.deletion_timestamp,
        getattr(pod, "spec", None),
        getattr(pod, "status", None),
    )


class ReplicaSetController(Controller):
    """Creates and deletes pods for ReplicaSets; see the module docstring."""

    name = "replicaset-controller"
    kinds = frozenset({"ReplicaSet", "Pod"})

    def __init__(self, api: APIClient, recorder: Recorder, *, seed: int = 0) -> None:
        super().__init__(api, recorder)
        self.seed = seed
        self._rngs: dict[str, random.Random] = {}

    def indexers(self) -> dict[str, Indexer]:
        def index(obj: KubeObject) -> Iterator[str]:
            if obj.kind == "ReplicaSet":
                yield f"rs:{obj.namespace}"
                return
            o = controlled_by(obj, "ReplicaSet")
            if o is not None:
                yield o
            elif obj.metadata.controller_ref() is None:
                yield f"orphan:{obj.namespace}"

        return {"by": index}

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        obj = event.object
        if obj.kind == "ReplicaSet":
            return [obj.key]
        if event.type == "MODIFIED" and old is not None and _pod_view(old) == _pod_view(obj):
            return []  # e.g. an annotation patch: nothing a ReplicaSet counts or ranks
        keys: list[str] = []
        for o in (old, obj):
            if o is None:
                continue
            ref = o.metadata.controller_ref()
            if ref is not None:
                if ref.kind == "ReplicaSet":
                    keys.append(f"{obj.namespace}/{ref.name}")
            elif event.type != "DELETED" and o is obj and is_active(obj):  # type: ignore[arg-type]
                keys += [
                    rs.key
                    for rs in self.cache.by_index("by", f"rs:{obj.namespace}")
                    if isinstance(rs, ReplicaSet)
                    and not rs.spec.selector.is_empty
                    and rs.spec.selector.matches(obj.labels)
                ]
        return keys

    def subject(self, key: str) -> KubeObject | None:
        return self.cache.get("ReplicaSet", key)

    # ---- reconcile

    def reconcile(self, key: str) -> None:
        try:
            rs = self.store.get("ReplicaSet", key)
        except NotFoundError:
            self._rngs.pop(key, None)
            return
        if not isinstance(rs, ReplicaSet) or rs.metadata.deletion_timestamp is not None:
            return
        ident = owner_id("ReplicaSet", rs.namespace, rs.name, rs.metadata.uid)
        pods = [
            p
            for p in self.cache.by_index("by", ident)
            if isinstance(p, Pod) and is_controlled_by(p, rs)
        ]
        pods += self._adopt(rs)
        active = [p for p in pods if is_active(p)]
        self._update_status(rs, active)
        diff = len(active) - desired_replicas(rs)
        if diff < 0:
            todo = -diff
            for _ in range(min(todo, BURST)):
                self._create_pod(rs)
            if todo > BURST:
                self.queue.add(key)
        elif diff > 0:
            for pod in deletion_order(active)[:diff]:
                self.api.delete("Pod", pod.key, component=self.name)
                self.recorder.record(self.name, rs, "SuccessfulDelete", f"Deleted pod: {pod.name}")

    def _adopt(self, rs: ReplicaSet) -> list[Pod]:
        if rs.spec.selector.is_empty:
            return []
        adopted: list[Pod] = []
        for p in self.cache.by_index("by", f"orphan:{rs.namespace}"):
            if not isinstance(p, Pod) or not is_active(p) or not rs.spec.selector.matches(p.labels):
                continue
            refs = [*p.metadata.owner_references, controller_ref(rs)]
            updated = self.api.update(p.with_meta(owner_references=refs), component=self.name)
            assert isinstance(updated, Pod)
            adopted.append(updated)
        return adopted

    def _rng(self, rs: ReplicaSet) -> random.Random:
        rng = self._rngs.get(rs.key)
        if rng is None:
            rng = self._rngs[rs.key] = random.Random(f"{self.seed}/{rs.key}")
        return rng

    def _pod_name(self, rs: ReplicaSet) -> str:
        rng = self._rng(rs)
        base = f"{rs.name[:58]}-"
        while True:
            name = base + "".join(rng.choices(SAFE_ALPHABET, k=5))
            if self.cache.get("Pod", f"{rs.namespace}/{name}") is not None:
                continue
            try:
                self.store.get("Pod", f"{rs.namespace}/{name}")
            except NotFoundError:
                return name

    def _create_pod(self, rs: ReplicaSet) -> None:
        t = rs.spec.template
        pod = Pod(
            metadata=ObjectMeta(
                name=self._pod_name(rs),
                generate_name=f"{rs.name[:58]}-",
                namespace=rs.namespace,
                labels=dict(t.metadata.labels),
                annotations=dict(t.metadata.annotations),
                owner_references=[controller_ref(rs)],
            ),
            spec=t.spec,
        )
        created = self.api.create(pod, component=self.name)
        self.recorder.record(self.name, rs, "SuccessfulCreate", f"Created pod: {created.name}")

    def _update_status(self, rs: ReplicaSet, active: list[Pod]) -> None:
        ready = sum(1 for p in active if p.is_ready)
        status = ReplicaSetStatus(
            replicas=len(active),
            ready_replicas=ready,
            available_replicas=ready,
            observed_generation=rs.metadata.generation,
        )
        cur = rs.status
        if (cur.replicas or 0, cur.ready_replicas or 0, cur.available_replicas or 0) != (
            len(active),
            ready,
            ready,
        ) or cur.observed_generation != rs.metadata.generation:
            self.api.update_status(rs.evolve(status=status), component=self.name)
