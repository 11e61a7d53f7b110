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

A reconcile is one step of upstream's ``UpdateStatefulSet``:

1. The revisions: the *update* revision is the template now, the *current* one is
   ``status.currentRevision`` (:meth:`.history.History.revisions`; a template rolled back
   to renumbers its old revision).
2. Pods that failed or succeeded are deleted (recreated by a later step).
3. Missing ordinals are created, from the lowest. A pod with an ordinal below the
   partition (RollingUpdate) is made at the current revision, others at the update
   revision. Under ``OrderedReady`` the step stops after a creation, at a pod being
   deleted, or at a pod that is not Running and Ready: pod ``i+1`` is created only once
   pod ``i`` is Running and Ready. Under ``Parallel`` nothing waits.
4. Pods with an ordinal outside the range are deleted from the highest; under
   ``OrderedReady`` one at a time, once every other pod is Running and Ready.
5. ``RollingUpdate``: from the highest ordinal down to the partition, the first pod not
   at the update revision is deleted (step 3 of a later reconcile recreates it at the
   update revision); a pod that is not Running and Ready, or is being deleted, stops
   the step. ``OnDelete``: pods are replaced only when the user deletes them.
6. ``status``: replicas, readyReplicas, availableReplicas (= ready;
   ``minReadySeconds`` is not modelled), currentReplicas and updatedReplicas (pods at
   each revision), currentRevision, updateRevision, collisionCount, observedGeneration;
   once every pod is at the update revision and ready, currentRevision becomes the
   update revision.
7. Revisions that no pod uses beyond ``revisionHistoryLimit`` are deleted, oldest first.

Orphan pods and revisions the selector matches are adopted. Deleting the StatefulSet
is the garbage collector's (owner references). Not modelled: volumeClaimTemplates
(no volumes: ``persistentVolumeClaimRetentionPolicy`` is stored only) and
``rollingUpdate.maxUnavailable`` (alpha upstream: one pod at a time).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from control.apiserver.statefulsets import ON_DELETE, ORDERED_READY
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
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.apps import ControllerRevision, StatefulSet, StatefulSetStatus
from netmodel.errors import NotFoundError
from netmodel.objects import KubeObject, ObjectMeta, Pod

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
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


def is_on_delete(sts: StatefulSet) -> bool:
    us = sts.spec.update_strategy
    return us is not None and us.type == ON_DELETE


def is_monotonic(sts: StatefulSet) -> bool:
    return (sts.spec.pod_management_policy or ORDERED_READY) == ORDERED_READY


def running_and_ready(pod: Pod) -> bool:
    return pod.status.phase == "Running" and pod.is_ready


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
    """Creates, deletes and rolls the pods of StatefulSets; see the module docstring."""

    name = "statefulset-controller"
    kinds = frozenset({"StatefulSet", "Pod", "ControllerRevision"})

    def __init__(self, api: APIClient, recorder: Recorder) -> None:
        super().__init__(api, recorder)
        self.history = History(api, self.name)

    def indexers(self) -> dict[str, Indexer]:
        def index(obj: KubeObject) -> Iterator[str]:
            if obj.kind == "StatefulSet":
                yield f"sts:{obj.namespace}"
                return
            o = controlled_by(obj, "StatefulSet")
            if o is not None:
                yield o
            elif obj.metadata.controller_ref() is None:
                yield f"orphan:{obj.namespace}"

        return {"by": index}

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        obj = event.object
        if obj.kind == "StatefulSet":
            return [obj.key]
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
        status = _status(sts, revs, pods)
        if status != sts.status:
            self.api.update_status(sts.evolve(status=status), component=self.name)
        live = {revs.current.name, revs.update.name}
        live |= {p.labels.get(POD_REVISION_LABEL, "") for p in pods.values()}
        limit = sts.spec.revision_history_limit
        self.history.truncate(revs.all, live, 10 if limit is None else limit)

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
                pods[o] = self._create(sts, revs, o)
                if monotonic:
                    return
                continue
            if monotonic and (
                pod.metadata.deletion_timestamp is not None or not running_and_ready(pod)
            ):
                return
        condemned = sorted((o for o in pods if o not in wanted), reverse=True)
        # every wanted pod is healthy here under OrderedReady: the lowest unhealthy
        # condemned pod may go first of the unhealthy ones, as upstream's firstUnhealthyPod
        unhealthy = [o for o in condemned if not running_and_ready(pods[o])]
        first_unhealthy = unhealthy[-1] if unhealthy else None
        for o in condemned:
            pod = pods[o]
            if pod.metadata.deletion_timestamp is not None:
                if monotonic:
                    return
                continue
            if monotonic and not running_and_ready(pod) and o != first_unhealthy:
                return
            self._delete(sts, pod)
            pods[o] = pod.with_meta(deletion_timestamp="deleting")
            if monotonic:
                return
        if condemned and monotonic:
            return
        if is_on_delete(sts):
            return
        for o in reversed([o for o in wanted if o >= start + partition_of(sts)]):
            pod = pods[o]
            if (
                pod.labels.get(POD_REVISION_LABEL) != revs.update.name
                and pod.metadata.deletion_timestamp is None
            ):
                self._delete(sts, pod)
                pods[o] = pod.with_meta(deletion_timestamp="deleting")
                return
            if pod.metadata.deletion_timestamp is not None or not running_and_ready(pod):
                return

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
        identity = {"hostname": name}
        if sts.spec.service_name:
            identity["subdomain"] = sts.spec.service_name
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


def _status(sts: StatefulSet, revs: Revisions, pods: dict[int, Pod]) -> StatefulSetStatus:
    """The status after a step: counts over the pods not being deleted (a pod made in
    this step counts, not ready)."""
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
        available_replicas=ready,
        current_revision=current_rev,
        update_revision=revs.update.name,
        collision_count=revs.collision_count,
    )
