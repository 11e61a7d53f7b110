"""The Deployment controller: one ReplicaSet per pod template, rolled out by the strategy.

For a Deployment ``web`` whose template hashes to ``h`` (:func:`pod_template_hash`), the
*new* ReplicaSet is ``web-h``, owned by the Deployment (``controller: true``), its
selector and template carrying the label ``pod-template-hash=h``; every other owned
ReplicaSet is *old*. ``replicas`` below means ``spec.replicas`` (default 1). A reconcile
does one step of the rollout, as the upstream controller's sync does, and the next
change of a ReplicaSet (its status follows its pods) triggers the next step:

* ``RollingUpdate`` (the default; :func:`rolling_limits` turns maxSurge / maxUnavailable
  into pod counts, surge rounding up and unavailable down): first the new ReplicaSet is
  created or scaled up so that the ReplicaSets' ``spec.replicas`` sum to at most
  ``replicas + maxSurge`` (down to ``replicas`` if it is above); if it was scaled, that
  is the step. Otherwise old ReplicaSets are scaled down, oldest first, as far as
  ``replicas - maxUnavailable`` pods stay available: unavailable old replicas are
  removed first (they count for nothing), then available ones. The new ReplicaSet is
  created already scaled when there is room. So total pods stay at most
  ``replicas + maxSurge`` and available pods at least ``replicas - maxUnavailable``.
* ``Recreate``: every old ReplicaSet is scaled to 0; while any of their pods exists
  (terminating ones too) nothing else happens; then the new ReplicaSet is created (or
  scaled) at ``replicas``. Old and new pods never exist at once.

"Available" follows ``minReadySeconds``: the ReplicaSet controller counts a pod available
once it has been ready for longer than its ReplicaSet's ``spec.minReadySeconds``, which
the Deployment's is copied to. A ReplicaSet whose ``spec.replicas`` was lowered counts
at most that many available pods even before its status says so: it deletes unready
pods first, so that many are left.

Revisions: the new ReplicaSet gets the annotation ``deployment.kubernetes.io/revision``
= the highest old revision + 1 (a template rolled back to takes a new revision and notes
its earlier ones in ``deployment.kubernetes.io/revision-history``); the Deployment
carries its new ReplicaSet's revision in the same annotation. The Deployment's other
annotations (``kubernetes.io/change-cause`` among them; not last-applied-configuration
nor the controller's own) are copied to its new ReplicaSet, which ``kubectl rollout
history`` reads and ``kubectl rollout undo`` copies back. Every ReplicaSet the
controller creates or scales carries ``deployment.kubernetes.io/desired-replicas``
(``replicas``) and ``deployment.kubernetes.io/max-replicas`` (``replicas + maxSurge``).
Once a rollout is complete (or while paused), old ReplicaSets at 0 replicas beyond
``spec.revisionHistoryLimit`` are deleted, lowest revision first. Every scaling records
a ``ScalingReplicaSet`` Event on the Deployment in upstream's words (``Scaled up
replica set web-h to 3 from 0``).

``status``: ``replicas`` / ``readyReplicas`` / ``availableReplicas`` sum the
ReplicaSets' status, ``updatedReplicas`` is the new ReplicaSet's ``status.replicas``,
``unavailableReplicas`` is the ReplicaSets' ``spec.replicas`` sum less the available
ones (at least 0). Conditions, as kube-controller-manager sets them (times from the
controller's clock):

* ``Available``: True ``MinimumReplicasAvailable`` when at least ``replicas -
  maxUnavailable`` pods are available, else False ``MinimumReplicasUnavailable``.
* ``Progressing`` (only with a ``progressDeadlineSeconds``): True
  ``NewReplicaSetCreated`` / ``FoundNewReplicaSet`` when the new ReplicaSet is created
  / first found; True ``ReplicaSetUpdated`` (its ``lastUpdateTime`` renewed) whenever
  the rollout makes progress (more updated, ready or available pods, fewer old ones);
  True ``NewReplicaSetAvailable`` once complete; False ``ProgressDeadlineExceeded``
  when no progress was made for ``progressDeadlineSeconds`` since ``lastUpdateTime``
  (the key is queued for that moment on the controller's clock). ``spec.paused``:
  Unknown ``DeploymentPaused``, and Unknown ``DeploymentResumed`` when resumed.
* ``ReplicaFailure``: a ReplicaSet's own ``ReplicaFailure`` condition (a pod creation
  the apiserver refused), removed when none has one.

``spec.paused``: no new ReplicaSet is created and no rollout step is taken; a resize
goes to the only active ReplicaSet (or the newest if none is active), and old ones are
scaled to 0 once the new one is saturated (proportional scaling of several active
ReplicaSets is not modelled). Deleting the Deployment is the garbage collector's job
(owner references). Not modelled: proportional scaling of a resize in mid-rollout (the
rollout rules above converge instead).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator

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
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.errors import ConflictError, InvalidError, NotFoundError
from netmodel.objects import (
    Deployment,
    DeploymentCondition,
    DeploymentStatus,
    KubeObject,
    LabelSelector,
    ObjectMeta,
    Pod,
    PodTemplateSpec,
    ReplicaSet,
    ReplicaSetSpec,
    RollingUpdateDeployment,
)

TEMPLATE_HASH_LABEL = "pod-template-hash"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
REVISION_HISTORY_ANNOTATION = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS_ANNOTATION = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS_ANNOTATION = "deployment.kubernetes.io/max-replicas"
CHANGE_CAUSE_ANNOTATION = "kubernetes.io/change-cause"
#: Deployment annotations never copied to its ReplicaSets (upstream's skip list)
NOT_COPIED = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        REVISION_ANNOTATION,
        REVISION_HISTORY_ANNOTATION,
        DESIRED_REPLICAS_ANNOTATION,
        MAX_REPLICAS_ANNOTATION,
        "deprecated.deployment.rollback.to",
    }
)

# condition reasons (upstream's words)
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
RS_UPDATED = "ReplicaSetUpdated"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"

#: Kubernetes' "safe" alphabet (no vowels, no 0/1/3): what generated name suffixes use.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def fnv1a_32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(text: str) -> str:
    """Kubernetes' rand.SafeEncodeString: each character mapped into SAFE_ALPHABET."""
    return "".join(SAFE_ALPHABET[ord(c) % len(SAFE_ALPHABET)] for c in text)


def pod_template_hash(template: PodTemplateSpec, collision_count: int = 0) -> str:
    """A deterministic short hash of a pod template, as the Deployment controller's
    ``ComputeHash``: FNV-1a 32 of the template (here its canonical JSON, without the
    ``pod-template-hash`` label), plus the collision count, safe-encoded.

    Remembered per template object (templates are immutable, and a Deployment read
    again after a status write shares its template with the one read before: each
    sync asked for the hash of the same object, a JSON dump and sort each time)."""
    key = (id(template), collision_count)
    hit = _HASHES.get(key)
    if hit is not None and hit[0] is template:
        return hit[1]
    h = _template_hash(template, collision_count)
    if len(_HASHES) >= _HASHES_KEPT:
        _HASHES.clear()
    _HASHES[key] = (template, h)  # the template kept alive: its id names no other
    return h


#: (id(template), collision count) -> (the template, its hash); see pod_template_hash
_HASHES: dict[tuple[int, int], tuple[PodTemplateSpec, str]] = {}
_HASHES_KEPT = 8192


def _template_hash(template: PodTemplateSpec, collision_count: int) -> str:
    data = template.model_dump(by_alias=True, exclude_none=True, mode="json")
    labels = dict(data.get("metadata", {}).get("labels", {}))
    labels.pop(TEMPLATE_HASH_LABEL, None)
    data.setdefault("metadata", {})["labels"] = labels
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        raw += str(collision_count).encode()
    return _encoded_hash(raw)


@functools.lru_cache(maxsize=4096)
def _encoded_hash(raw: bytes) -> str:
    """safe-encoded FNV-1a 32 of ``raw``, remembered: a controller asks for the same
    template's hash on every sync of its object (the byte loop is pure Python)."""
    return safe_encode(str(fnv1a_32(raw)))


def with_hash_label(template: PodTemplateSpec, h: str) -> PodTemplateSpec:
    labels = {**template.metadata.labels, TEMPLATE_HASH_LABEL: h}
    return template.evolve(metadata=template.metadata.evolve(labels=labels))


def desired_replicas(obj: Deployment | ReplicaSet) -> int:
    r = obj.spec.replicas
    return 1 if r is None else max(0, r)


def is_recreate(d: Deployment) -> bool:
    return d.spec.strategy is not None and d.spec.strategy.type == "Recreate"


def rolling_limits(d: Deployment) -> tuple[int, int]:
    """``(maxSurge, maxUnavailable)`` of a RollingUpdate Deployment as pod counts (upstream's
    ``MaxSurge`` / ``MaxUnavailable``): see :meth:`RollingUpdateDeployment.fenceposts`;
    maxUnavailable is at most ``replicas`` (0 for 0 replicas). ``(0, 0)`` for Recreate.
    InvalidError for a value validation would refuse (a Deployment stored before it)."""
    if is_recreate(d):
        return 0, 0
    want = desired_replicas(d)
    strategy = d.spec.strategy
    ru = (strategy.rolling_update if strategy else None) or RollingUpdateDeployment()
    try:
        surge, unavailable = ru.fenceposts(want)
    except ValueError as e:
        raise InvalidError(str(e), obj=d.ref, field="spec.strategy.rollingUpdate") from None
    return surge, 0 if want == 0 else min(unavailable, want)


def revision_of(rs: ReplicaSet) -> int:
    """The ReplicaSet's ``deployment.kubernetes.io/revision`` (0 if unset or not a number)."""
    try:
        return int(rs.metadata.annotations.get(REVISION_ANNOTATION, "0"))
    except ValueError:
        return 0


def available(rs: ReplicaSet) -> int:
    """Available pods of ``rs`` as the rollout counts them: ``status.availableReplicas``,
    at most ``spec.replicas`` (see the module docstring)."""
    return min(rs.status.available_replicas or 0, desired_replicas(rs))


def _total(rss: Iterable[ReplicaSet]) -> int:
    return sum(desired_replicas(rs) for rs in rss)


def _by_age(rs: ReplicaSet) -> tuple[str, str]:
    return (rs.metadata.creation_timestamp or "", rs.name)


class DeploymentController(Controller):
    """Rolls each Deployment's ReplicaSets; see the module docstring.

    Watches Pods too, but only to know when the old pods of a Recreate rollout are gone
    (pods are indexed by their controlling ReplicaSet; a pod deletion wakes a Recreate
    Deployment)."""

    name = "deployment-controller"
    kinds = frozenset({"Deployment", "ReplicaSet", "Pod"})

    def __init__(self, api: APIClient, recorder: Recorder, *, clock: Clock | None = None) -> None:
        super().__init__(api, recorder)
        self.clock: Clock = clock or getattr(api, "clock", None) or WallClock()
        self.queue.clock = self.clock  # progress deadlines are due on this clock

    def indexers(self) -> dict[str, Indexer]:
        def owner(obj: KubeObject) -> Iterator[str]:
            if obj.kind == "ReplicaSet":
                o = controlled_by(obj, "Deployment")
            elif obj.kind == "Pod":
                o = controlled_by(obj, "ReplicaSet")
            else:
                o = None
            if o is not None:
                yield o

        return {"owner": owner}

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        obj = event.object
        if obj.kind == "Deployment":
            return [obj.key]
        if obj.kind == "Pod":
            return self._pod_keys(event)
        keys = []
        for o in (old, obj):
            ref = o.metadata.controller_ref() if o is not None else None
            if ref is not None and ref.kind == "Deployment":
                keys.append(f"{obj.namespace}/{ref.name}")
        return keys

    def _pod_keys(self, event: WatchEvent) -> list[str]:
        pod = event.object
        assert isinstance(pod, Pod)
        if event.type != "DELETED" and pod.status.phase not in ("Succeeded", "Failed"):
            return []
        ref = pod.metadata.controller_ref()
        if ref is None or ref.kind != "ReplicaSet":
            return []
        rs = self.cache.get("ReplicaSet", f"{pod.namespace}/{ref.name}")
        dref = rs.metadata.controller_ref() if rs is not None else None
        if dref is None or dref.kind != "Deployment":
            return []
        d = self.cache.get("Deployment", f"{pod.namespace}/{dref.name}")
        return [d.key] if isinstance(d, Deployment) and is_recreate(d) else []

    def subject(self, key: str) -> KubeObject | None:
        return self.cache.get("Deployment", key)

    def _owned(self, d: Deployment) -> list[ReplicaSet]:
        ident = owner_id("Deployment", d.namespace, d.name, d.metadata.uid)
        rss = [rs for rs in self.cache.by_index("owner", ident) if isinstance(rs, ReplicaSet)]
        return [rs for rs in rss if is_controlled_by(rs, d)]

    # ---- reconcile

    def reconcile(self, key: str) -> None:
        try:
            d = self.store.get("Deployment", key)
        except NotFoundError:
            return
        if not isinstance(d, Deployment) or d.metadata.deletion_timestamp is not None:
            return
        now = rfc3339(self.clock.now())
        owned = self._owned(d)
        h = pod_template_hash(d.spec.template, d.status.collision_count or 0)
        new = next((rs for rs in owned if rs.labels.get(TEMPLATE_HASH_LABEL) == h), None)
        if new is None:  # upstream's FindNewReplicaSet: same template, whatever its hash
            # (a ReplicaSet replayed from a real cluster carries that cluster's hash; one
            # made before a collision carries the hash of an earlier collision count)
            bare = pod_template_hash(d.spec.template)
            new = next((rs for rs in owned if pod_template_hash(rs.spec.template) == bare), None)
        olds = sorted((rs for rs in owned if rs is not new), key=_by_age)
        revision = max((revision_of(rs) for rs in olds), default=0) + 1
        conds = _paused_conditions(d, list(d.status.conditions), now)
        deadline = d.spec.progress_deadline_seconds
        if new is not None:
            new = self._sync_new(d, new, revision)
            if deadline is not None and _cond(conds, "Progressing") is None:
                msg = f'Found new replica set "{new.name}"'
                conds = _set(conds, _new_cond("Progressing", "True", FOUND_NEW_RS, msg, now))
        if d.spec.paused:
            new, olds = self._paused(d, new, olds)
        else:
            found = new
            if is_recreate(d):
                new, olds = self._recreate(d, h, new, olds, revision)
            else:
                new, olds = self._rolling(d, h, new, olds, revision)
            if found is None and new is not None and deadline is not None:
                msg = f'Created new replica set "{new.name}"'
                conds = _set(conds, _new_cond("Progressing", "True", NEW_RS_CREATED, msg, now))
        if new is not None and d.metadata.annotations.get(REVISION_ANNOTATION) != str(
            revision_of(new)
        ):
            annotations = {**d.metadata.annotations, REVISION_ANNOTATION: str(revision_of(new))}
            updated = self.api.update(d.with_meta(annotations=annotations), component=self.name)
            assert isinstance(updated, Deployment)
            d = updated
        status = _status(d, new, olds)
        status = status.evolve(
            conditions=self._conditions(d, status, new, olds, conds, now),
            collision_count=d.status.collision_count,
        )
        if d.spec.paused or _complete(d, status):
            self._cleanup_history(d, olds)
        if status != d.status:
            self.api.update_status(d.evolve(status=status), component=self.name)
        self._requeue_stuck(d, status)

    def _conditions(
        self,
        d: Deployment,
        status: DeploymentStatus,
        new: ReplicaSet | None,
        olds: list[ReplicaSet],
        conds: list[DeploymentCondition],
        now: str,
    ) -> list[DeploymentCondition]:
        """``Available`` always; ``Progressing`` and ``ReplicaFailure`` while not paused
        (upstream's calculateStatus and syncRolloutStatus); see the module docstring."""
        _, max_unavailable = rolling_limits(d)
        if (status.available_replicas or 0) >= desired_replicas(d) - max_unavailable:
            avail = _new_cond(
                "Available", "True", "MinimumReplicasAvailable",
                "Deployment has minimum availability.", now,
            )  # fmt: skip
        else:
            avail = _new_cond(
                "Available", "False", "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.", now,
            )  # fmt: skip
        conds = _set(conds, avail)
        if d.spec.paused:
            return conds
        deadline = d.spec.progress_deadline_seconds
        if deadline is None:
            return [c for c in conds if c.type != "Progressing"]
        cur = _cond(conds, "Progressing")
        name = new.name if new is not None else ""
        done = status.replicas == status.updated_replicas and (
            cur is not None and cur.reason == NEW_RS_AVAILABLE
        )
        if not done:
            if _complete(d, status):
                msg = f'ReplicaSet "{name}" has successfully progressed.'
                conds = _set(conds, _new_cond("Progressing", "True", NEW_RS_AVAILABLE, msg, now))
            elif _progressed(d.status, status):
                msg = f'ReplicaSet "{name}" is progressing.'
                fresh = _new_cond("Progressing", "True", RS_UPDATED, msg, now)
                if cur is not None and cur.status == "True":
                    fresh = fresh.evolve(last_transition_time=cur.last_transition_time)
                conds = [*(c for c in conds if c.type != "Progressing"), fresh]
            elif _timed_out(cur, deadline, self.clock.now()):
                msg = f'ReplicaSet "{name}" has timed out progressing.'
                conds = _set(conds, _new_cond("Progressing", "False", TIMED_OUT, msg, now))
        failures = [
            c
            for rs in ([new] if new is not None else []) + olds
            if (c := rs.status.condition("ReplicaFailure")) is not None and c.status == "True"
        ]
        if failures:
            f = failures[0]
            failure = _new_cond("ReplicaFailure", "True", f.reason or "", f.message or "", now)
            conds = _set(conds, failure)
        else:
            conds = [c for c in conds if c.type != "ReplicaFailure"]
        return conds

    def _requeue_stuck(self, d: Deployment, status: DeploymentStatus) -> None:
        """Queue ``d`` again for when its progress deadline runs out (upstream's
        requeueStuckDeployment), unless it is complete, timed out or paused."""
        cur = status.condition("Progressing")
        deadline = d.spec.progress_deadline_seconds
        if d.spec.paused or deadline is None or cur is None or not cur.last_update_time:
            return
        if cur.reason in (NEW_RS_AVAILABLE, TIMED_OUT):
            return
        due = parse_rfc3339(cur.last_update_time) + deadline
        # timed out once strictly past the deadline: a second later (times are seconds)
        self.queue.add_after(d.key, max(0.0, due - self.clock.now()) + 1)

    def _sync_new(self, d: Deployment, new: ReplicaSet, revision: int) -> ReplicaSet:
        """The existing new ReplicaSet with the Deployment's annotations copied, its
        revision (history noted) and ``minReadySeconds`` brought up to date: one write
        when any differs."""
        annotations = dict(new.metadata.annotations)
        for k, v in d.metadata.annotations.items():
            if k not in NOT_COPIED:
                annotations[k] = v
        if revision_of(new) < revision:
            earlier = annotations.get(REVISION_ANNOTATION)
            if earlier:
                history = annotations.get(REVISION_HISTORY_ANNOTATION)
                annotations[REVISION_HISTORY_ANNOTATION] = (
                    f"{history},{earlier}" if history else earlier
                )
            annotations[REVISION_ANNOTATION] = str(revision)
        min_ready = d.spec.min_ready_seconds or 0
        if (
            annotations == new.metadata.annotations
            and (new.spec.min_ready_seconds or 0) == min_ready
        ):
            return new
        rs = new.with_meta(annotations=annotations)
        rs = rs.evolve(spec=rs.spec.evolve(min_ready_seconds=min_ready))
        updated = self.api.update(rs, component=self.name)
        assert isinstance(updated, ReplicaSet)
        return updated

    def _paused(
        self, d: Deployment, new: ReplicaSet | None, olds: list[ReplicaSet]
    ) -> tuple[ReplicaSet | None, list[ReplicaSet]]:
        """A paused Deployment's step: resizing only (upstream's ``scale``)."""
        want = desired_replicas(d)
        all_rs = [*olds, *([new] if new is not None else [])]
        active = [rs for rs in all_rs if desired_replicas(rs) > 0]
        target: ReplicaSet | None = None
        if len(active) == 1:
            target = active[0]
        elif not active and all_rs:
            target = new if new is not None else olds[-1]
        if target is not None:
            if desired_replicas(target) != want:
                scaled = self._scale(d, target, want)
                if target is new:
                    new = scaled
                else:
                    olds = [scaled if rs is target else rs for rs in olds]
            return new, olds
        if new is not None and desired_replicas(new) == want and available(new) == want:
            olds = [self._scale(d, rs, 0) if desired_replicas(rs) else rs for rs in olds]
        return new, olds

    def _rolling(
        self, d: Deployment, h: str, new: ReplicaSet | None, olds: list[ReplicaSet], revision: int
    ) -> tuple[ReplicaSet, list[ReplicaSet]]:
        """One step of a rolling update (upstream's rolloutRolling): returns the
        ReplicaSets as they are after it."""
        if new is None:
            new = self._create_rs(d, h, self._new_rs_size(d, olds, 0), revision)
        else:
            scaled = self._reconcile_new(d, new, olds)
            if scaled is not new:
                return scaled, olds
        return new, self._reconcile_olds(d, new, olds)

    def _new_rs_size(self, d: Deployment, olds: list[ReplicaSet], current: int) -> int:
        """The new ReplicaSet's next size (upstream's NewRSNewReplicas for RollingUpdate):
        up by what the surge leaves room for, never past ``replicas``."""
        want = desired_replicas(d)
        surge, _ = rolling_limits(d)
        room = want + surge - (_total(olds) + current)
        if room <= 0:
            return current
        return current + max(0, min(room, want - current))

    def _reconcile_new(self, d: Deployment, new: ReplicaSet, olds: list[ReplicaSet]) -> ReplicaSet:
        """Scale the new ReplicaSet towards ``replicas`` within the surge (down at once if
        it is above); returns it, a new object if it was scaled."""
        want, have = desired_replicas(d), desired_replicas(new)
        if have == want:
            return new
        size = want if have > want else self._new_rs_size(d, olds, have)
        return new if size == have else self._scale(d, new, size)

    def _reconcile_olds(
        self, d: Deployment, new: ReplicaSet, olds: list[ReplicaSet]
    ) -> list[ReplicaSet]:
        """Scale old ReplicaSets down as far as availability allows (upstream's
        reconcileOldReplicaSets); returns the old ReplicaSets as they are after."""
        if _total(olds) == 0:
            return olds
        want = desired_replicas(d)
        _, max_unavailable = rolling_limits(d)
        min_available = want - max_unavailable
        new_unavailable = desired_replicas(new) - available(new)
        # Pods that may go: all of them, less those that must stay available, less the
        # new ones not available yet (they will be counted as available later).
        budget = _total([*olds, new]) - min_available - new_unavailable
        if budget <= 0:
            return olds
        # Unavailable old replicas first: removing them costs no availability, and
        # without this an old ReplicaSet stuck unready would block the rollout.
        olds = list(olds)
        for i, rs in enumerate(olds):
            if budget <= 0:
                break
            unhealthy = desired_replicas(rs) - available(rs)
            if unhealthy <= 0:
                continue
            cut = min(budget, unhealthy)
            olds[i] = self._scale(d, rs, desired_replicas(rs) - cut)
            budget -= cut
        # Then available ones, as long as min_available stay available.
        excess = sum(available(rs) for rs in [*olds, new]) - min_available
        for i, rs in enumerate(olds):
            if excess <= 0:
                break
            have = desired_replicas(rs)
            if have == 0:
                continue
            cut = min(have, excess)
            olds[i] = self._scale(d, rs, have - cut)
            excess -= cut
        return olds

    def _recreate(
        self, d: Deployment, h: str, new: ReplicaSet | None, olds: list[ReplicaSet], revision: int
    ) -> tuple[ReplicaSet | None, list[ReplicaSet]]:
        """One step of a Recreate rollout (upstream's rolloutRecreate)."""
        if any(desired_replicas(rs) > 0 for rs in olds):
            return new, [self._scale(d, rs, 0) if desired_replicas(rs) else rs for rs in olds]
        if self._old_pods_exist(olds):
            return new, olds
        want = desired_replicas(d)
        if new is None:
            return self._create_rs(d, h, want, revision), olds
        if desired_replicas(new) != want:
            new = self._scale(d, new, want)
        return new, olds

    def _old_pods_exist(self, olds: list[ReplicaSet]) -> bool:
        """Whether an old ReplicaSet still has a pod that is not finished (terminating
        ones count), by its status or by the pods seen."""
        if any(rs.status.replicas for rs in olds):
            return True
        for rs in olds:
            ident = owner_id("ReplicaSet", rs.namespace, rs.name, rs.metadata.uid)
            for p in self.cache.by_index("owner", ident):
                if isinstance(p, Pod) and p.status.phase not in ("Succeeded", "Failed"):
                    return True
        return False

    def _cleanup_history(self, d: Deployment, olds: list[ReplicaSet]) -> None:
        """Delete old ReplicaSets beyond ``spec.revisionHistoryLimit`` (lowest revision
        first), only those at 0 replicas whose status has caught up."""
        limit = d.spec.revision_history_limit
        if limit is None:
            return
        excess = len(olds) - limit
        for rs in sorted(olds, key=lambda r: (revision_of(r), _by_age(r)))[: max(0, excess)]:
            settled = (rs.status.observed_generation or 0) >= (rs.metadata.generation or 0)
            if desired_replicas(rs) or rs.status.replicas or not settled:
                continue
            self.api.delete("ReplicaSet", rs.key, component=self.name)

    # ---- writes

    def _create_rs(self, d: Deployment, h: str, replicas: int, revision: int) -> ReplicaSet:
        template = with_hash_label(d.spec.template, h)
        selector = LabelSelector(
            match_labels={**d.spec.selector.match_labels, TEMPLATE_HASH_LABEL: h},
            match_expressions=list(d.spec.selector.match_expressions),
        )
        annotations = {k: v for k, v in d.metadata.annotations.items() if k not in NOT_COPIED}
        annotations |= _replica_annotations(d)
        annotations[REVISION_ANNOTATION] = str(revision)
        rs = ReplicaSet(
            metadata=ObjectMeta(
                name=f"{d.name}-{h}",
                namespace=d.namespace,
                labels=dict(template.metadata.labels),
                annotations=annotations,
                owner_references=[controller_ref(d)],
            ),
            spec=ReplicaSetSpec(
                replicas=replicas,
                min_ready_seconds=d.spec.min_ready_seconds or 0,
                selector=selector,
                template=template,
            ),
        )
        try:
            created = self.api.create(rs, component=self.name)
        except ConflictError:
            created = self._taken(d, rs)
        assert isinstance(created, ReplicaSet)
        if replicas > 0:
            self.recorder.record(
                self.name,
                d,
                "ScalingReplicaSet",
                f"Scaled up replica set {created.name} to {replicas} from 0",
            )
        return created

    def _taken(self, d: Deployment, rs: ReplicaSet) -> ReplicaSet:
        """The new ReplicaSet's name already exists (upstream's getNewReplicaSet): if that
        ReplicaSet is controlled by ``d`` and has its template (the create raced this
        controller's cache), it is the new one. Otherwise the hash collided: raise
        status.collisionCount, which changes the next sync's hash and name, and raise the
        conflict so that the Deployment is synced again."""
        try:
            there = self.store.get("ReplicaSet", rs.key)
        except NotFoundError:
            there = None  # deleted since: the next sync creates it
        if (
            isinstance(there, ReplicaSet)
            and is_controlled_by(there, d)
            and pod_template_hash(there.spec.template) == pod_template_hash(d.spec.template)
        ):
            return there
        if there is not None:
            count = (d.status.collision_count or 0) + 1
            self.api.update_status(
                d.evolve(status=d.status.evolve(collision_count=count)), component=self.name
            )
        raise ConflictError(f"ReplicaSet {rs.key!r} already exists")

    def _scale(self, d: Deployment, rs: ReplicaSet, replicas: int) -> ReplicaSet:
        before = desired_replicas(rs)
        annotations = {**rs.metadata.annotations, **_replica_annotations(d)}
        updated = self.api.update(
            rs.with_meta(annotations=annotations).evolve(spec=rs.spec.evolve(replicas=replicas)),
            component=self.name,
        )
        assert isinstance(updated, ReplicaSet)
        verb = "up" if replicas > before else "down"
        self.recorder.record(
            self.name,
            d,
            "ScalingReplicaSet",
            f"Scaled {verb} replica set {rs.name} to {replicas} from {before}",
        )
        return updated


def _status(d: Deployment, new: ReplicaSet | None, olds: list[ReplicaSet]) -> DeploymentStatus:
    all_rs = [*olds, *([new] if new is not None else [])]
    avail = sum(rs.status.available_replicas or 0 for rs in all_rs)
    return DeploymentStatus(
        replicas=sum(rs.status.replicas or 0 for rs in all_rs),
        updated_replicas=(new.status.replicas or 0) if new is not None else 0,
        ready_replicas=sum(rs.status.ready_replicas or 0 for rs in all_rs),
        available_replicas=avail,
        unavailable_replicas=max(0, _total(all_rs) - avail),
        observed_generation=d.metadata.generation,
    )


def _complete(d: Deployment, s: DeploymentStatus) -> bool:
    """Every replica updated and available, nothing else left, the spec observed
    (upstream's DeploymentComplete)."""
    want = desired_replicas(d)
    return (
        s.updated_replicas == want
        and s.replicas == want
        and s.available_replicas == want
        and (s.observed_generation or 0) >= (d.metadata.generation or 0)
    )


def _progressed(old: DeploymentStatus, new: DeploymentStatus) -> bool:
    """Upstream's DeploymentProgressing: more updated, ready or available pods, or fewer
    old ones, than the stored status says."""
    old_olds = (old.replicas or 0) - (old.updated_replicas or 0)
    new_olds = (new.replicas or 0) - (new.updated_replicas or 0)
    return (
        (new.updated_replicas or 0) > (old.updated_replicas or 0)
        or new_olds < old_olds
        or (new.ready_replicas or 0) > (old.ready_replicas or 0)
        or (new.available_replicas or 0) > (old.available_replicas or 0)
    )


def _timed_out(cur: DeploymentCondition | None, deadline: int, now: float) -> bool:
    """Upstream's DeploymentTimedOut: no progress for ``deadline`` seconds since the
    Progressing condition was last updated (strictly past it)."""
    if cur is None or cur.reason == NEW_RS_AVAILABLE:
        return False
    if cur.reason == TIMED_OUT:
        return True
    if not cur.last_update_time:
        return False
    return parse_rfc3339(cur.last_update_time) + deadline < now


def _replica_annotations(d: Deployment) -> dict[str, str]:
    surge, _ = rolling_limits(d)
    want = desired_replicas(d)
    return {DESIRED_REPLICAS_ANNOTATION: str(want), MAX_REPLICAS_ANNOTATION: str(want + surge)}


def _new_cond(type_: str, status: str, reason: str, message: str, now: str) -> DeploymentCondition:
    return DeploymentCondition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_update_time=now,
        last_transition_time=now,
    )


def _cond(conds: list[DeploymentCondition], type_: str) -> DeploymentCondition | None:
    return next((c for c in conds if c.type == type_), None)


def _set(conds: list[DeploymentCondition], c: DeploymentCondition) -> list[DeploymentCondition]:
    """Upstream's SetDeploymentCondition: unchanged when status and reason are the
    same; otherwise replaced (moved last), keeping its lastTransitionTime if only the
    reason changed."""
    cur = _cond(conds, c.type)
    if cur is not None and cur.status == c.status and cur.reason == c.reason:
        return conds
    if cur is not None and cur.status == c.status:
        c = c.evolve(last_transition_time=cur.last_transition_time)
    return [*(x for x in conds if x.type != c.type), c]


def _paused_conditions(
    d: Deployment, conds: list[DeploymentCondition], now: str
) -> list[DeploymentCondition]:
    """Upstream's checkPausedConditions: Progressing Unknown DeploymentPaused when
    paused, DeploymentResumed when no longer; a timed-out rollout keeps its condition."""
    cur = _cond(conds, "Progressing")
    if d.spec.progress_deadline_seconds is None or (cur is not None and cur.reason == TIMED_OUT):
        return conds
    was_paused = cur is not None and cur.reason == PAUSED
    if d.spec.paused and not was_paused:
        return _set(conds, _new_cond("Progressing", "Unknown", PAUSED, "Deployment is paused", now))
    if not d.spec.paused and was_paused:
        resumed = _new_cond("Progressing", "Unknown", RESUMED, "Deployment is resumed", now)
        return _set(conds, resumed)
    return conds
