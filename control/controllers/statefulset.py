"""The StatefulSet controller: pods with stable identities, as kube-controller-manager's
StatefulSet controller keeps them.

For a StatefulSet ``web`` of ``replicas`` n (ordinals from ``s`` = ``spec.ordinals.start``,
0 by default), the pods are ``web-s`` … ``web-(s+n-1)``. Each pod is made from the
template of its revision (:mod:`.history`) and carries:

* the template's labels and annotations, plus ``statefulset.kubernetes.io/pod-name``
  (its name), ``apps.kubernetes.io/pod-index`` (its ordinal) and
  ``controller-revision-hash`` (the name of its revision);
* ``spec.hostname`` = its name and ``spec.subdomain`` = ``spec.serviceName``: through the
  governing headless Service its EndpointSlice endpoint takes that hostname, and cluster
  DNS answers ``web-0.<serviceName>.<ns>.svc.<domain>``;
* a controller ownerReference to the StatefulSet.

Healthy (upstream's ``isHealthy`` since minReadySeconds counts): Running, Ready for
more than ``spec.minReadySeconds`` on the controller's clock (at once for 0; upstream's
IsPodAvailable) and not being deleted. A Ready pod not available yet queues the
StatefulSet again for the moment it will be (the live driver wakes the component then).

A reconcile is one step of upstream's ``UpdateStatefulSet``:

1. The revisions: the *update* revision is the template now, the *current* one is
   ``status.currentRevision`` (:meth:`.history.History.revisions`; a template rolled back
   to renumbers its old revision).
2. Pods that failed or succeeded are deleted (recreated by a later step).
3. Missing ordinals are created, from the lowest, each after its PersistentVolumeClaims
   (below). A pod with an ordinal below the partition (RollingUpdate) is made at the
   current revision, others at the update revision. Under ``OrderedReady`` the step
   stops after a creation, at a pod being deleted, or at a pod that is not healthy:
   pod ``i+1`` is created only once pod ``i`` is healthy. Under ``Parallel`` nothing
   waits.
4. Pods with an ordinal outside the range are deleted from the highest; under
   ``OrderedReady`` one at a time, once every other pod is healthy.
5. ``RollingUpdate`` (with MaxUnavailableStatefulSet, on by default since 1.35):
   ``rollingUpdate.maxUnavailable`` (default 1; a percentage of ``replicas`` rounds up;
   never less than 1) bounds the pods in range that are not healthy. With ``u`` of
   them unhealthy, up to ``maxUnavailable - u`` pods not at the update revision and not
   being deleted are deleted, from the highest ordinal down to the partition (step 3
   of a later reconcile recreates them at the update revision). Under ``Parallel``
   they are recreated at once; under ``OrderedReady`` step 3 recreates them one at a
   time, so a batch is deleted only once the previous one is healthy (upstream's
   "might not be effective for OrderedReady"). ``OnDelete``: pods are replaced only
   when the user deletes them.
6. ``status``: replicas, readyReplicas, availableReplicas (healthy, above),
   currentReplicas and updatedReplicas (pods at each revision), currentRevision,
   updateRevision, collisionCount, observedGeneration; once every pod is at the update
   revision and ready, currentRevision becomes the update revision.
7. Revisions that no pod uses beyond ``revisionHistoryLimit`` are deleted, oldest first.

``spec.volumeClaimTemplates``: pod ``web-3`` gets, for each template ``data``, the
PersistentVolumeClaim ``data-web-3`` (the template's metadata and spec, plus the
selector's matchLabels), created before the pod when it does not exist, and a volume
``data`` naming it (replacing a template volume of that name). A claim being deleted,
or still owned by an earlier pod of its ordinal (whenScaled Delete), holds the pod
back until the garbage collector has removed it. ``persistentVolumeClaimRetentionPolicy``
is kept on the claims as ownerReferences (controller references, as upstream), which
the garbage collector acts on: ``whenDeleted: Delete`` makes the StatefulSet the
owner of the claims of pods in range (deleting the StatefulSet deletes them);
``whenScaled: Delete`` makes a condemned pod the owner of its claims before it is
deleted (scaling down deletes them once the pod is gone). ``Retain`` leaves them. A
claim controlled by anything else is left alone.

Orphan pods and revisions the selector matches are adopted. Deleting the StatefulSet
is the garbage collector's (owner references). svclab binds no volumes: claims stay
Pending and do not hold pods back from scheduling.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from control.apiserver.statefulsets import (
    DELETE,
    ON_DELETE,
    ORDERED_READY,
    claim_templates,
    retention_policy,
)
from control.clock import Clock, WallClock
from control.controllers.base import (
    APIClient,
    Controller,
    Indexer,
    controlled_by,
    controller_ref,
    is_controlled_by,
    owner_id,
)
from control.controllers.history import (
    POD_REVISION_LABEL,
    History,
    Revisions,
    template_of,
    template_patch,
)
from control.controllers.replicaset import ready_since
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.apps import ControllerRevision, StatefulSet, StatefulSetStatus
from netmodel.errors import ConflictError, NotFoundError, SvclabError
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject, ObjectMeta, OwnerReference, Pod, scaled_value

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
CLAIM = "PersistentVolumeClaim"
_ORDINAL = re.compile(r"^(.*)-([0-9]+)$")


def ordinal_of(pod: KubeObject, sts: StatefulSet) -> int | None:
    """The ordinal of a pod named ``<sts>-<ordinal>``, None for another name."""
    m = _ORDINAL.match(pod.name)
    if m is None or m.group(1) != sts.name:
        return None
    return int(m.group(2))


def replicas_of(sts: StatefulSet) -> int:
    r = sts.spec.replicas
    return 1 if r is None else max(0, r)


def partition_of(sts: StatefulSet) -> int:
    us = sts.spec.update_strategy
    ru = us.rolling_update if us is not None else None
    return (ru.partition or 0) if ru is not None else 0


def max_unavailable_of(sts: StatefulSet) -> int:
    """``rollingUpdate.maxUnavailable`` as a pod count (upstream's
    getStatefulSetMaxUnavailable): 1 when unset, a percentage of ``replicas`` rounded
    up, and never less than 1."""
    us = sts.spec.update_strategy
    ru = us.rolling_update if us is not None else None
    value = ru.max_unavailable if ru is not None else None
    n = scaled_value(1 if value is None else value, replicas_of(sts), round_up=True)
    return max(1, n)


def is_on_delete(sts: StatefulSet) -> bool:
    us = sts.spec.update_strategy
    return us is not None and us.type == ON_DELETE


def is_monotonic(sts: StatefulSet) -> bool:
    return (sts.spec.pod_management_policy or ORDERED_READY) == ORDERED_READY


def running_and_ready(pod: Pod) -> bool:
    return pod.status.phase == "Running" and pod.is_ready


def available_at(pod: Pod, min_ready_seconds: int) -> float | None:
    """When a Running and Ready pod is available: ready since that time plus
    ``minReadySeconds`` (it is available strictly after it); None for a pod not Running
    and Ready, or Ready at an unknown time with ``minReadySeconds`` > 0 (never)."""
    if not running_and_ready(pod):
        return None
    if min_ready_seconds <= 0:
        return float("-inf")
    since = ready_since(pod)
    return None if since is None else since + min_ready_seconds


def claim_name(template: str, sts: StatefulSet, ordinal: int) -> str:
    """The PersistentVolumeClaim of claim template ``template`` for pod ``ordinal``."""
    return f"{template}-{sts.name}-{ordinal}"


def _finished(pod: Pod) -> bool:
    return pod.status.phase in ("Failed", "Succeeded")


def _pod_view(pod: KubeObject) -> tuple[object, ...]:
    """What of a pod a reconcile reads (owner, labels, deletion, phase and readiness)."""
    meta = pod.metadata
    status = getattr(pod, "status", None)
    return (
        meta.owner_references,
        meta.labels,
        meta.deletion_timestamp,
        getattr(status, "phase", None),
        pod.is_ready if isinstance(pod, Pod) else None,
    )


class StatefulSetController(Controller):
    """Creates, deletes and rolls the pods of StatefulSets and creates their claims; see
    the module docstring."""

    name = "statefulset-controller"
    kinds = frozenset({"StatefulSet", "Pod", "ControllerRevision", CLAIM})

    def __init__(self, api: APIClient, recorder: Recorder, *, clock: Clock | None = None) -> None:
        super().__init__(api, recorder)
        self.history = History(api, self.name)
        self.clock: Clock = clock or getattr(api, "clock", None) or WallClock()
        self.queue.clock = self.clock  # minReadySeconds requeues are due on this clock
        self._now = 0.0
        #: during a reconcile: the earliest time a Ready pod seen unavailable becomes
        #: available
        self._next_available: float | None = None

    def indexers(self) -> dict[str, Indexer]:
        def index(obj: KubeObject) -> Iterator[str]:
            if obj.kind == "StatefulSet":
                yield f"sts:{obj.namespace}"
                return
            o = controlled_by(obj, "StatefulSet")
            if o is not None:
                yield o
            elif obj.metadata.controller_ref() is None and obj.kind != CLAIM:
                yield f"orphan:{obj.namespace}"

        return {"by": index}

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        obj = event.object
        if obj.kind == "StatefulSet":
            return [obj.key]
        if obj.kind == CLAIM:
            # a claim that goes away may be what a pod waits for (being deleted, stale)
            return [
                s.key
                for s in self.cache.by_index("by", f"sts:{obj.namespace}")
                if isinstance(s, StatefulSet)
                and claim_templates(s)
                and f"-{s.name}-" in obj.name
            ]
        if (
            obj.kind == "Pod"
            and event.type == "MODIFIED"
            and old is not None
            and _pod_view(old) == _pod_view(obj)
        ):
            return []
        keys: list[str] = []
        for o in (old, obj):
            if o is None:
                continue
            ref = o.metadata.controller_ref()
            if ref is not None:
                if ref.kind == "StatefulSet":
                    keys.append(f"{obj.namespace}/{ref.name}")
            elif event.type != "DELETED" and o is obj:
                keys += [
                    s.key
                    for s in self.cache.by_index("by", f"sts:{obj.namespace}")
                    if isinstance(s, StatefulSet)
                    and not s.spec.selector.is_empty
                    and s.spec.selector.matches(obj.labels)
                ]
        return keys

    def subject(self, key: str) -> KubeObject | None:
        return self.cache.get("StatefulSet", key)

    # ---- reconcile

    def reconcile(self, key: str) -> None:
        try:
            sts = self.store.get("StatefulSet", key)
        except NotFoundError:
            return
        if not isinstance(sts, StatefulSet) or sts.metadata.deletion_timestamp is not None:
            return
        self._now = self.clock.now()
        self._next_available = None
        ident = owner_id("StatefulSet", sts.namespace, sts.name, sts.metadata.uid)
        mine = list(self.cache.by_index("by", ident))
        orphans = list(self.cache.by_index("by", f"orphan:{sts.namespace}"))
        owned = self.history.owned(
            sts,
            sts.spec.selector,
            [o for o in mine + orphans if isinstance(o, ControllerRevision)],
        )
        t = sts.spec.template
        revs = self.history.revisions(
            sts,
            template_patch(t),
            t.metadata.labels,
            owned,
            current_name=sts.status.current_revision,
            collision_count=sts.status.collision_count or 0,
            annotations=sts.metadata.annotations,
        )
        pods = {
            o: p
            for p in [x for x in mine if isinstance(x, Pod) and is_controlled_by(x, sts)]
            + self._adopt(sts, [x for x in orphans if isinstance(x, Pod)])
            if (o := ordinal_of(p, sts)) is not None
        }
        self._step(sts, revs, pods)
        status = _status(sts, revs, pods, [self._healthy(sts, p) for p in pods.values()])
        if status != sts.status:
            self.api.update_status(sts.evolve(status=status), component=self.name)
        live = {revs.current.name, revs.update.name}
        live |= {p.labels.get(POD_REVISION_LABEL, "") for p in pods.values()}
        limit = sts.spec.revision_history_limit
        self.history.truncate(revs.all, live, 10 if limit is None else limit)
        if self._next_available is not None:
            # look again just after the next Ready pod passes minReadySeconds
            self.queue.add_after(sts.key, self._next_available - self._now + 0.001)

    def _healthy(self, sts: StatefulSet, pod: Pod) -> bool:
        """Running, available (Ready for more than ``minReadySeconds``) and not being
        deleted; notes when a Ready pod will be available."""
        if pod.metadata.deletion_timestamp is not None:
            return False
        at = available_at(pod, sts.spec.min_ready_seconds or 0)
        if at is None:
            return False
        if at < self._now:
            return True
        if self._next_available is None or at < self._next_available:
            self._next_available = at
        return False

    def _adopt(self, sts: StatefulSet, orphans: list[Pod]) -> list[Pod]:
        if sts.spec.selector.is_empty:
            return []
        adopted: list[Pod] = []
        for p in orphans:
            if (
                p.metadata.deletion_timestamp is not None
                or ordinal_of(p, sts) is None
                or not sts.spec.selector.matches(p.labels)
            ):
                continue
            refs = [*p.metadata.owner_references, controller_ref(sts)]
            updated = self.api.update(p.with_meta(owner_references=refs), component=self.name)
            assert isinstance(updated, Pod)
            adopted.append(updated)
        return adopted

    def _step(self, sts: StatefulSet, revs: Revisions, pods: dict[int, Pod]) -> None:
        """One step of upstream's UpdateStatefulSet; ``pods`` (ordinal -> pod) is kept
        up to date with what the step writes."""
        monotonic = is_monotonic(sts)
        start, n = sts.start_ordinal, replicas_of(sts)
        wanted = range(start, start + n)
        for o in wanted:  # failed and succeeded pods go first, as upstream
            pod = pods.get(o)
            if pod is not None and _finished(pod) and pod.metadata.deletion_timestamp is None:
                self._delete(sts, pod)
                pods.pop(o)
        for o in wanted:
            pod = pods.get(o)
            if pod is None:
                if not self._claims_ready(sts, o):
                    if monotonic:
                        return
                    continue
                pods[o] = self._create(sts, revs, o)
                if monotonic:
                    return
                continue
            self._keep_claims(sts, o, pod, condemned=False)
            if monotonic and not self._healthy(sts, pod):
                return
        condemned = sorted((o for o in pods if o not in wanted), reverse=True)
        for o in condemned:  # their claims' owners first, as upstream
            self._keep_claims(sts, o, pods[o], condemned=True)
        # every wanted pod is healthy here under OrderedReady: the lowest unhealthy
        # condemned pod may go first of the unhealthy ones, as upstream's firstUnhealthyPod
        unhealthy = [o for o in condemned if not self._healthy(sts, pods[o])]
        first_unhealthy = unhealthy[-1] if unhealthy else None
        for o in condemned:
            pod = pods[o]
            if pod.metadata.deletion_timestamp is not None:
                if monotonic:
                    return
                continue
            if monotonic and o in unhealthy and o != first_unhealthy:
                return
            self._delete(sts, pod)
            pods[o] = pod.with_meta(deletion_timestamp="deleting")
            if monotonic:
                return
        if condemned and monotonic:
            return
        if is_on_delete(sts):
            return
        present = [pods[o] for o in wanted if o in pods]
        unavailable = sum(1 for p in present if not self._healthy(sts, p))
        budget = max_unavailable_of(sts) - unavailable
        for o in reversed([o for o in wanted if o >= start + partition_of(sts)]):
            if budget <= 0:
                return
            pod = pods.get(o)
            if (
                pod is not None
                and pod.labels.get(POD_REVISION_LABEL) != revs.update.name
                and pod.metadata.deletion_timestamp is None
            ):
                self._delete(sts, pod)
                pods[o] = pod.with_meta(deletion_timestamp="deleting")
                budget -= 1

    # ---- claims

    def _claim(self, sts: StatefulSet, name: str) -> KubeObject | None:
        return self.cache.get(CLAIM, f"{sts.namespace}/{name}")

    def _claims_ready(self, sts: StatefulSet, ordinal: int) -> bool:
        """Create the missing claims of pod ``ordinal``; whether the pod may be created
        (no claim of it is being deleted or still owned by an earlier pod: upstream's
        PodClaimIsStale). A refused claim is recorded (FailedCreate) and retried."""
        pod_name = f"{sts.name}-{ordinal}"
        ok = True
        for template in claim_templates(sts):
            meta = template.get("metadata") or {}
            name = claim_name(str(meta.get("name", "")), sts, ordinal)
            claim = self._claim(sts, name)
            if claim is not None:
                if claim.metadata.deletion_timestamp is not None or any(
                    r.kind == "Pod" and r.name == pod_name for r in claim.metadata.owner_references
                ):
                    ok = False
                continue
            labels = {**(meta.get("labels") or {}), **sts.spec.selector.match_labels}
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": CLAIM,
                "metadata": {
                    **{k: v for k, v in meta.items() if k in ("annotations", "finalizers")},
                    "name": name,
                    "namespace": sts.namespace,
                    "labels": labels,
                },
                "spec": template.get("spec") or {},
            }
            if retention_policy(sts)["whenDeleted"] == DELETE:
                body["metadata"]["ownerReferences"] = [_ref_dict(controller_ref(sts))]
            try:
                self.api.create(object_from_dict(body), component=self.name)
            except ConflictError:
                ok = False  # not in the cache yet: its event brings the key back
                continue
            except SvclabError as e:
                self.recorder.record(
                    self.name,
                    sts,
                    "FailedCreate",
                    f"create Claim {name} for Pod {pod_name} in StatefulSet {sts.name} "
                    f"failed error: {e}",
                    type_="Warning",
                )
                raise
            self.recorder.record(
                self.name,
                sts,
                "SuccessfulCreate",
                f"create Claim {name} Pod {pod_name} in StatefulSet {sts.name} success",
            )
        return ok

    def _keep_claims(self, sts: StatefulSet, ordinal: int, pod: Pod, *, condemned: bool) -> None:
        """Bring the ownerReferences of pod ``ordinal``'s claims to the retention policy
        (see the module docstring); a claim another controller owns is left alone."""
        if not claim_templates(sts):
            return
        policy = retention_policy(sts)
        by_pod = condemned and policy["whenScaled"] == DELETE
        by_set = not by_pod and policy["whenDeleted"] == DELETE
        for template in claim_templates(sts):
            meta = template.get("metadata") or {}
            claim = self._claim(sts, claim_name(str(meta.get("name", "")), sts, ordinal))
            if claim is None or claim.metadata.deletion_timestamp is not None:
                continue
            refs = claim.metadata.owner_references
            ctl = claim.metadata.controller_ref()
            if ctl is not None and not (
                _refers_to(ctl, sts) or (ctl.kind == "Pod" and ctl.name == pod.name)
            ):
                continue
            keep = [
                r
                for r in refs
                if not _refers_to(r, sts) and not (r.kind == "Pod" and r.name == pod.name)
            ]
            if by_set:
                keep.append(controller_ref(sts))
            elif by_pod:
                keep.append(controller_ref(pod))
            if keep != refs:
                self.api.update(claim.with_meta(owner_references=keep), component=self.name)

    # ---- writes

    def _create(self, sts: StatefulSet, revs: Revisions, ordinal: int) -> Pod:
        at_current = (
            not is_on_delete(sts) and ordinal < sts.start_ordinal + partition_of(sts)
        )
        rev = revs.current if at_current else revs.update
        t = template_of(rev)
        name = f"{sts.name}-{ordinal}"
        labels = {
            **t.metadata.labels,
            POD_NAME_LABEL: name,
            POD_INDEX_LABEL: str(ordinal),
            POD_REVISION_LABEL: rev.name,
        }
        identity: dict[str, Any] = {"hostname": name}
        if sts.spec.service_name:
            identity["subdomain"] = sts.spec.service_name
        templates = claim_templates(sts)
        if templates:
            names = [str((c.get("metadata") or {}).get("name", "")) for c in templates]
            volumes = (t.spec.model_extra or {}).get("volumes") or []
            identity["volumes"] = [
                {"name": v, "persistentVolumeClaim": {"claimName": claim_name(v, sts, ordinal)}}
                for v in names
            ] + [v for v in volumes if not (isinstance(v, dict) and v.get("name") in names)]
        spec = t.spec.evolve(**identity)
        pod = Pod(
            metadata=ObjectMeta(
                name=name,
                namespace=sts.namespace,
                labels=labels,
                annotations=dict(t.metadata.annotations),
                owner_references=[controller_ref(sts)],
            ),
            spec=spec,
        )
        created = self.api.create(pod, component=self.name)
        assert isinstance(created, Pod)
        self.recorder.record(
            self.name, sts, "SuccessfulCreate", f"create Pod {name} in StatefulSet {sts.name} successful"
        )
        return created

    def _delete(self, sts: StatefulSet, pod: Pod) -> None:
        self.api.delete("Pod", pod.key, component=self.name)
        self.recorder.record(
            self.name,
            sts,
            "SuccessfulDelete",
            f"delete Pod {pod.name} in StatefulSet {sts.name} successful",
        )


def _refers_to(ref: OwnerReference, sts: StatefulSet) -> bool:
    return ref.kind == "StatefulSet" and ref.name == sts.name


def _ref_dict(ref: OwnerReference) -> dict[str, Any]:
    return ref.model_dump(by_alias=True, exclude_none=True)


def _status(
    sts: StatefulSet, revs: Revisions, pods: dict[int, Pod], healthy: list[bool]
) -> StatefulSetStatus:
    """The status after a step: counts over the pods not being deleted (a pod made in
    this step counts, not ready); ``healthy`` says, pod by pod, which are available."""
    alive = [p for p in pods.values() if p.metadata.deletion_timestamp is None]
    ready = sum(1 for p in alive if running_and_ready(p))
    current = sum(1 for p in alive if p.labels.get(POD_REVISION_LABEL) == revs.current.name)
    updated = sum(1 for p in alive if p.labels.get(POD_REVISION_LABEL) == revs.update.name)
    current_rev = revs.current.name
    n = replicas_of(sts)
    if not is_on_delete(sts) and updated == n and ready == n and len(alive) == n:
        current_rev, current = revs.update.name, updated
    return StatefulSetStatus(
        observed_generation=sts.metadata.generation,
        replicas=len(alive),
        ready_replicas=ready,
        current_replicas=current,
        updated_replicas=updated,
        available_replicas=sum(healthy),
        current_revision=current_rev,
        update_revision=revs.update.name,
        collision_count=revs.collision_count,
    )
