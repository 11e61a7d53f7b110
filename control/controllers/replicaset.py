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
* ``status`` (replicas, fullyLabeledReplicas, readyReplicas, availableReplicas,
  observedGeneration, conditions) is computed from the pods seen before acting, as
  upstream does, and written after acting. A pod is *available* once it has been ready
  for more than ``spec.minReadySeconds`` on the controller's clock (at once for 0); the
  key is queued again for when the next ready pod becomes available.
* A pod creation the apiserver refuses stops the reconcile's creations (Warning Event
  ``FailedCreate``, ``Error creating: ...``), sets the condition ``ReplicaFailure``
  (status True, reason ``FailedCreate``, the error as its message; kept as it is while
  creations keep failing) and fails the reconcile, which is retried; a reconcile
  without such error removes the condition.

:class:`ReplicaController` is all of this for any kind that keeps replicas of a pod
template; :class:`ReplicaSetController` is it for ReplicaSets (set-based selector) and
:class:`~control.controllers.replicationcontroller.ReplicationControllerController`
for ReplicationControllers (equality selector).
"""

from __future__ import annotations

import datetime as _dt
import random
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import ClassVar

from control.clock import Clock, WallClock, parse_rfc3339, rfc3339
from control.controllers.base import (
    APIClient,
    Controller,
    Indexer,
    controlled_by,
    controller_ref,
    is_controlled_by,
    owner_id,
)
from control.controllers.deployment import SAFE_ALPHABET
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError, SvclabError
from netmodel.objects import (
    Condition,
    KubeObject,
    ObjectMeta,
    Pod,
    PodTemplateSpec,
    ReplicaSet,
    ReplicaSetStatus,
)

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


def ready_since(pod: Pod) -> float | None:
    """When the pod last became ready (its Ready condition's lastTransitionTime); None
    if it is not ready or the time is missing or unreadable."""
    cond = pod.condition("Ready")
    if cond is None or cond.status != "True" or not cond.last_transition_time:
        return None
    try:
        return parse_rfc3339(cond.last_transition_time)
    except ValueError:
        return None


def is_available(pod: Pod, min_ready_seconds: int, now: float) -> bool:
    """Kubernetes' IsPodAvailable: ready, and for ``minReadySeconds`` > 0 ready since
    strictly more than that many seconds before ``now``."""
    if not pod.is_ready:
        return False
    if min_ready_seconds <= 0:
        return True
    since = ready_since(pod)
    return since is not None and since + min_ready_seconds < now


def replicas_of(owner: KubeObject) -> int:
    """``spec.replicas`` (default 1, at least 0) of a ReplicaSet or ReplicationController."""
    r = owner.spec.replicas  # type: ignore[attr-defined]
    return 1 if r is None else max(0, int(r))


class ReplicaController(Controller):
    """Keeps ``spec.replicas`` active pods per owner of :attr:`owner_kind`; see the module
    docstring. Subclasses say how the kind selects pods and where its template is."""

    owner_kind: ClassVar[str] = ""

    def __init__(
        self, api: APIClient, recorder: Recorder, *, seed: int = 0, clock: Clock | None = None
    ) -> None:
        super().__init__(api, recorder)
        self.seed = seed
        self.clock: Clock = clock or getattr(api, "clock", None) or WallClock()
        self.queue.clock = self.clock  # minReadySeconds requeues are due on this clock
        self._rngs: dict[str, random.Random] = {}

    # ---- what a kind provides

    def selects(self, owner: KubeObject, labels: Mapping[str, str]) -> bool:
        """Whether ``owner``'s selector matches ``labels`` (an empty selector: never)."""
        raise NotImplementedError

    def template(self, owner: KubeObject) -> PodTemplateSpec | None:
        raise NotImplementedError

    @staticmethod
    def min_ready_seconds(owner: KubeObject) -> int:
        return int(owner.spec.min_ready_seconds or 0)  # type: ignore[attr-defined]

    # ---- the informer side

    def indexers(self) -> dict[str, Indexer]:
        kind = self.owner_kind

        def index(obj: KubeObject) -> Iterator[str]:
            if obj.kind == kind:
                yield f"owner:{obj.namespace}"
                return
            o = controlled_by(obj, kind)
            if o is not None:
                yield o
            elif obj.metadata.controller_ref() is None:
                yield f"orphan:{obj.namespace}"

        return {"by": index}

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        obj = event.object
        if obj.kind == self.owner_kind:
            return [obj.key]
        if event.type == "MODIFIED" and old is not None and _pod_view(old) == _pod_view(obj):
            return []  # e.g. an annotation patch: nothing an owner counts or ranks
        keys: list[str] = []
        for o in (old, obj):
            if o is None:
                continue
            ref = o.metadata.controller_ref()
            if ref is not None:
                if ref.kind == self.owner_kind:
                    keys.append(f"{obj.namespace}/{ref.name}")
            elif event.type != "DELETED" and o is obj and is_active(obj):  # type: ignore[arg-type]
                keys += [
                    owner.key
                    for owner in self.cache.by_index("by", f"owner:{obj.namespace}")
                    if owner.kind == self.owner_kind and self.selects(owner, obj.labels)
                ]
        return keys

    def subject(self, key: str) -> KubeObject | None:
        return self.cache.get(self.owner_kind, key)

    # ---- reconcile

    def reconcile(self, key: str) -> None:
        try:
            owner = self.store.get(self.owner_kind, key)
        except NotFoundError:
            self._rngs.pop(key, None)
            return
        if owner.kind != self.owner_kind or owner.metadata.deletion_timestamp is not None:
            return
        ident = owner_id(self.owner_kind, owner.namespace, owner.name, owner.metadata.uid)
        pods = [
            p
            for p in self.cache.by_index("by", ident)
            if isinstance(p, Pod) and is_controlled_by(p, owner)
        ]
        pods += self._adopt(owner)
        active = [p for p in pods if is_active(p)]
        failed: SvclabError | None = None
        diff = len(active) - replicas_of(owner)
        if diff < 0:
            todo = -diff
            try:
                for _ in range(min(todo, BURST)):
                    self._create_pod(owner)
            except SvclabError as e:
                failed = e
                self.recorder.record(
                    self.name, owner, "FailedCreate", f"Error creating: {e}", type_="Warning"
                )
            if todo > BURST and failed is None:
                self.queue.add(key)
        elif diff > 0:
            for pod in deletion_order(active)[:diff]:
                self.api.delete("Pod", pod.key, component=self.name)
                self.recorder.record(
                    self.name, owner, "SuccessfulDelete", f"Deleted pod: {pod.name}"
                )
        self._update_status(owner, active, failed)
        if failed is not None:
            raise failed

    def _adopt(self, owner: KubeObject) -> list[Pod]:
        adopted: list[Pod] = []
        for p in self.cache.by_index("by", f"orphan:{owner.namespace}"):
            if not isinstance(p, Pod) or not is_active(p) or not self.selects(owner, p.labels):
                continue
            refs = [*p.metadata.owner_references, controller_ref(owner)]
            updated = self.api.update(p.with_meta(owner_references=refs), component=self.name)
            assert isinstance(updated, Pod)
            adopted.append(updated)
        return adopted

    def _rng(self, owner: KubeObject) -> random.Random:
        rng = self._rngs.get(owner.key)
        if rng is None:
            rng = self._rngs[owner.key] = random.Random(f"{self.seed}/{owner.key}")
        return rng

    def _pod_name(self, owner: KubeObject) -> str:
        rng = self._rng(owner)
        base = f"{owner.name[:58]}-"
        while True:
            name = base + "".join(rng.choices(SAFE_ALPHABET, k=5))
            if self.cache.get("Pod", f"{owner.namespace}/{name}") is not None:
                continue
            try:
                self.store.get("Pod", f"{owner.namespace}/{name}")
            except NotFoundError:
                return name

    def _create_pod(self, owner: KubeObject) -> None:
        t = self.template(owner) or PodTemplateSpec()
        pod = Pod(
            metadata=ObjectMeta(
                name=self._pod_name(owner),
                generate_name=f"{owner.name[:58]}-",
                namespace=owner.namespace,
                labels=dict(t.metadata.labels),
                annotations=dict(t.metadata.annotations),
                owner_references=[controller_ref(owner)],
            ),
            spec=t.spec,
        )
        created = self.api.create(pod, component=self.name)
        self.recorder.record(self.name, owner, "SuccessfulCreate", f"Created pod: {created.name}")

    def _update_status(
        self, owner: KubeObject, active: list[Pod], failed: SvclabError | None
    ) -> None:
        now = self.clock.now()
        min_ready = self.min_ready_seconds(owner)
        template = self.template(owner)
        want_labels = template.metadata.labels if template is not None else {}
        ready = [p for p in active if p.is_ready]
        available = sum(1 for p in ready if is_available(p, min_ready, now))
        cur: ReplicaSetStatus = owner.status  # type: ignore[attr-defined]
        before = cur.condition("ReplicaFailure")
        conditions = [c for c in cur.conditions if c.type != "ReplicaFailure"]
        if failed is not None:
            if before is not None and before.status == "True" and before.reason == "FailedCreate":
                conditions = list(cur.conditions)  # set already: kept as it is (upstream)
            else:
                conditions.append(
                    Condition(
                        type="ReplicaFailure",
                        status="True",
                        reason="FailedCreate",
                        message=str(failed),
                        last_transition_time=rfc3339(now),
                    )
                )
        status = ReplicaSetStatus(
            replicas=len(active),
            fully_labeled_replicas=sum(
                1 for p in active if all(p.labels.get(k) == v for k, v in want_labels.items())
            ),
            ready_replicas=len(ready),
            available_replicas=available,
            observed_generation=owner.metadata.generation,
            conditions=conditions,
        )
        if status != cur:
            self.api.update_status(owner.evolve(status=status), component=self.name)
        if min_ready > 0 and available < len(ready):
            # the next ready pod to pass minReadySeconds: look again just after
            times = [t for p in ready if (t := ready_since(p)) is not None]
            due = min((t + min_ready for t in times if t + min_ready >= now), default=None)
            if due is not None:
                self.queue.add_after(owner.key, due - now + 1)


class ReplicaSetController(ReplicaController):
    """Creates and deletes pods for ReplicaSets; see the module docstring."""

    name = "replicaset-controller"
    owner_kind = "ReplicaSet"
    kinds = frozenset({"ReplicaSet", "Pod"})

    def selects(self, owner: KubeObject, labels: Mapping[str, str]) -> bool:
        assert isinstance(owner, ReplicaSet)
        sel = owner.spec.selector
        return not sel.is_empty and sel.matches(labels)

    def template(self, owner: KubeObject) -> PodTemplateSpec | None:
        assert isinstance(owner, ReplicaSet)
        return owner.spec.template
