"""The Job controller: pods that run to completion, as kube-controller-manager's does.

For each Job (not finished, not being deleted), from its pods (controlled by it):

* ``startTime`` is set when it first runs (and reset when it resumes from ``suspend``);
* a suspended Job has its active pods deleted and condition Suspended (JobSuspended);
* NonIndexed: it keeps ``min(parallelism, completions - succeeded)`` pods active (with
  ``completions`` unset: ``parallelism`` until one succeeds, then none); it is complete
  when ``succeeded`` reaches ``completions`` (unset: one succeeded and none active);
* Indexed: each index 0..completions-1 gets a pod (``<job>-<index>-<5 chars>``, the
  ``batch.kubernetes.io/job-completion-index`` annotation and label, hostname
  ``<job>-<index>``, env ``JOB_COMPLETION_INDEX``), at most ``parallelism`` at once; it is
  complete when every index has a succeeded pod (``completedIndexes``: ``0-2,4``);
* failures: ``failed`` counts the Failed pods (less those a ``podFailurePolicy`` Ignore
  rule matches) plus the restarts of active pods (restartPolicy OnFailure), as kube
  counts them against ``backoffLimit``; more than ``backoffLimit`` fails the Job
  (BackoffLimitExceeded); a FailJob rule of ``podFailurePolicy`` fails it at once
  (PodFailurePolicy); ``activeDeadlineSeconds`` after ``startTime`` fails it
  (DeadlineExceeded). A failed Job's active pods are deleted;
* finishing sets the conditions kube 1.31+ sets, both at once: SuccessCriteriaMet then
  Complete (with ``completionTime``), or FailureTarget then Failed;
* ``status``: active, ready, succeeded, failed, terminating, startTime,
  completionTime, completedIndexes, conditions; ``uncountedTerminatedPods`` is not
  written (svclab does not put the job-tracking finalizer on pods);
* ``ttlSecondsAfterFinished``: the finished Job is deleted (foreground: its pods go
  first) that many seconds after it finished, as kube's TTL-after-finished controller.

Pods it created or deleted count as its expectations (kube's): until their watch
events come, it creates and deletes no other pod for that Job (the live driver's
cache may lag its own writes).

Time-based work (deadlines, TTLs) is due on the injected clock: every :meth:`sync`
picks up what came due, so after ``clock.advance`` the next ``run_until_idle`` does it.

Counts come from the pods that exist, never below what the status already says: a
finished pod deleted by hand stays counted (kube keeps it counted through its
job-tracking finalizer), but one deleted before the controller saw it finish is not.
Left out: the pod-recreation back-off after failures (kube waits 10 s doubling before
replacing a failed pod; svclab replaces it at once), and the per-index back-off limits
(refused at admission: :mod:`control.apiserver.batchkinds`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from control.agents.containers import container_statuses
from control.clock import Clock, parse_rfc3339, rfc3339
from control.controllers.base import (
    APIClient,
    Indexer,
    controller_index,
    controller_keys,
    controller_ref,
    is_controlled_by,
    owner_id,
)
from control.controllers.deployment import SAFE_ALPHABET
from control.controllers.replicaset import is_active
from control.controllers.timed import TimedController
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.batch import COMPLETION_INDEX, Job, JobCondition, JobStatus
from netmodel.errors import NotFoundError
from netmodel.objects import KubeObject, ObjectMeta, Pod

BURST = 500
BACKOFF_MESSAGE = "Job has reached the specified backoff limit"
DEADLINE_MESSAGE = "Job was active longer than specified deadline"


def completion_index(pod: Pod) -> int | None:
    """The pod's completion index (annotation, else label), None when it has none."""
    raw = pod.metadata.annotations.get(COMPLETION_INDEX) or pod.labels.get(COMPLETION_INDEX)
    if raw is None or not raw.isdigit():
        return None
    return int(raw)


def index_ranges(indexes: Iterable[int]) -> str:
    """``0-2,4``: kube's completedIndexes format."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(indexes)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def _exit_codes(pod: Pod) -> list[tuple[str, int]]:
    out = []
    for cs in container_statuses(pod):
        term = (cs.get("state") or {}).get("terminated")
        if term is not None:
            out.append((str(cs.get("name")), int(term.get("exitCode") or 0)))
    return out


def failure_rule(job: Job, pod: Pod) -> tuple[int, str, str] | None:
    """The first ``podFailurePolicy`` rule a Failed pod matches: (index, action, what
    matched), or None."""
    pfp = job.spec.pod_failure_policy or {}
    for i, rule in enumerate(pfp.get("rules") or []):
        codes = rule.get("onExitCodes")
        if codes is not None:
            values = set(codes.get("values") or [])
            for name, code in _exit_codes(pod):
                if codes.get("containerName") not in (None, name):
                    continue
                hit = code in values if codes.get("operator") == "In" else code not in values
                if hit and code != 0:
                    return (
                        i,
                        str(rule.get("action")),
                        f"Container {name} for pod "
                        + (f"{pod.namespace}/{pod.name} failed with exit code {code}"),
                    )
            continue
        for pc in rule.get("onPodConditions") or []:
            c = pod.condition(str(pc.get("type")))
            if c is not None and c.status == pc.get("status", "True"):
                return (
                    i,
                    str(rule.get("action")),
                    f"Pod {pod.namespace}/{pod.name} has condition {c.type}",
                )
    return None


class JobController(TimedController):
    """Runs Jobs' pods to completion; see the module docstring. Its timer for a Job is
    the next deadline or TTL due."""

    name = "job-controller"
    kinds = frozenset({"Job", "Pod"})

    def __init__(self, api: APIClient, recorder: Recorder, clock: Clock, *, seed: int = 0) -> None:
        super().__init__(api, recorder, clock)
        self.seed = seed
        self._rngs: dict[str, random.Random] = {}
        #: job key -> pods it created ("add", key) or deleted ("del", key) whose watch
        #: event has not come yet (kube's expectations): until they come, the cache
        #: does not show them, and the Job's pods are not managed again
        self._expected: dict[str, set[tuple[str, str]]] = {}

    def indexers(self) -> dict[str, Indexer]:
        return controller_index("Job")

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        obj = event.object
        if obj.kind == "Job":
            if event.type == "DELETED":
                self._timers.pop(obj.key, None)
            return [obj.key]
        keys = controller_keys(obj, old, "Job")
        for key in keys[:1]:
            exp = self._expected.get(key)
            if exp:
                exp.discard(("add", obj.key))
                if event.type == "DELETED" or obj.metadata.deletion_timestamp is not None:
                    exp.discard(("del", obj.key))
        return keys

    def subject(self, key: str) -> KubeObject | None:
        return self.cache.get("Job", key)

    # ---- reconcile

    def reconcile(self, key: str) -> None:
        try:
            job = self.store.get("Job", key)
        except NotFoundError:
            self._rngs.pop(key, None)
            self._timers.pop(key, None)
            self._expected.pop(key, None)
            return
        if not isinstance(job, Job) or job.metadata.deletion_timestamp is not None:
            return
        ident = owner_id("Job", job.namespace, job.name, job.metadata.uid)
        pods = [
            p
            for p in self.cache.by_index("by", ident)
            if isinstance(p, Pod) and is_controlled_by(p, job)
        ]
        now = self.clock.now()
        if job.finished:
            self._finished(job, pods, now)
            return
        active = sorted((p for p in pods if is_active(p)), key=lambda p: p.name)
        terminating = sum(
            1 for p in pods if p.is_terminating and p.status.phase not in ("Succeeded", "Failed")
        )
        st = job.status
        conds = list(st.conditions)
        start_time = st.start_time
        if job.spec.suspend:
            for p in active:
                self._delete_pod(job, p)
            if not job.has_condition("Suspended"):
                conds = _set_condition(
                    conds, "Suspended", "True", "JobSuspended", "Job suspended", now
                )
                self.recorder.record(self.name, job, "Suspended", "Job suspended")
            self._write(
                job, st.evolve(conditions=conds, active=0, ready=0, terminating=terminating or None)
            )
            return
        if job.has_condition("Suspended"):
            conds = _set_condition(conds, "Suspended", "False", "JobResumed", "Job resumed", now)
            start_time = rfc3339(now)
            self.recorder.record(self.name, job, "Resumed", "Job resumed")
        if start_time is None:
            start_time = rfc3339(now)
        succeeded_pods = [p for p in pods if p.status.phase == "Succeeded"]
        failed_pods = [p for p in pods if p.status.phase == "Failed"]
        fail: tuple[str, str] | None = None
        counted_failures = 0
        for p in failed_pods:
            rule = failure_rule(job, p) if job.spec.pod_failure_policy else None
            if rule is None or rule[1] == "Count":
                counted_failures += 1
            elif rule[1] == "FailJob" and fail is None:
                fail = ("PodFailurePolicy", f"{rule[2]} matching FailJob rule at index {rule[0]}")
        failed = max(st.failed or 0, counted_failures)
        restarts = sum(
            int(cs.get("restartCount") or 0) for p in active for cs in container_statuses(p)
        )
        indexed = job.spec.completion_mode == "Indexed"
        done_indexes = {i for p in succeeded_pods if (i := completion_index(p)) is not None}
        succeeded = len(done_indexes) if indexed else max(st.succeeded or 0, len(succeeded_pods))
        completions = job.spec.completions
        ads = job.spec.active_deadline_seconds
        if fail is None and ads is not None:
            deadline = parse_rfc3339(start_time) + ads
            if deadline <= now:
                fail = ("DeadlineExceeded", DEADLINE_MESSAGE)
            else:
                self._wake_at(key, deadline)
        if fail is None and failed + restarts > (
            job.spec.backoff_limit if job.spec.backoff_limit is not None else 6
        ):
            fail = ("BackoffLimitExceeded", BACKOFF_MESSAGE)
        complete = False
        if fail is None:
            if indexed:
                complete = completions is not None and len(done_indexes) >= completions
            elif completions is not None:
                complete = succeeded >= completions
            else:
                complete = succeeded >= 1 and not active
        new_active = active
        if fail is not None:
            for p in active:
                self._delete_pod(job, p)
            new_active = []
            reason, message = fail
            conds = _set_condition(conds, "FailureTarget", "True", reason, message, now)
            conds = _set_condition(conds, "Failed", "True", reason, message, now)
            self.recorder.record(self.name, job, reason, message, type_="Warning")
        elif complete:
            conds = _set_condition(
                conds,
                "SuccessCriteriaMet",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                now,
            )
            conds = _set_condition(
                conds,
                "Complete",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                now,
            )
            for p in active:
                self._delete_pod(job, p)
            new_active = []
            self.recorder.record(self.name, job, "Completed", "Job completed")
        elif not self._expected.get(key):
            new_active = self._manage(job, active, succeeded, done_indexes)
        status = st.evolve(
            conditions=conds,
            start_time=start_time,
            active=len(new_active),
            ready=sum(1 for p in new_active if p.is_ready),
            succeeded=succeeded,
            failed=failed,
            terminating=terminating,
            completion_time=rfc3339(now) if complete else st.completion_time,
            completed_indexes=index_ranges(done_indexes) if indexed else st.completed_indexes,
        )
        self._write(job, status)
        if (fail is not None or complete) and job.spec.ttl_seconds_after_finished is not None:
            self._wake_at(key, now + job.spec.ttl_seconds_after_finished)

    def _write(self, job: Job, status: JobStatus) -> None:
        if status != job.status:
            self.api.update_status(job.evolve(status=status), component=self.name)

    def _finished(self, job: Job, pods: list[Pod], now: float) -> None:
        if job.has_condition("Failed"):
            for p in pods:
                if is_active(p):
                    self._delete_pod(job, p)
        ttl = job.spec.ttl_seconds_after_finished
        if ttl is None:
            return
        c = job.condition("Complete") if job.has_condition("Complete") else job.condition("Failed")
        finished_at = job.status.completion_time or (c.last_transition_time if c else None)
        at = (parse_rfc3339(finished_at) if finished_at else now) + ttl
        if at > now:
            self._wake_at(job.key, at)
            return
        self._timers.pop(job.key, None)
        self.api.delete(
            "Job", job.key, component="ttl-after-finished-controller", propagation="Foreground"
        )

    def _manage(self, job: Job, active: list[Pod], succeeded: int, done: set[int]) -> list[Pod]:
        """Create or delete pods so that the right number is active; the active pods after."""
        parallelism = job.spec.parallelism if job.spec.parallelism is not None else 1
        completions = job.spec.completions
        if job.spec.completion_mode == "Indexed":
            assert completions is not None
            busy = {i for p in active if (i := completion_index(p)) is not None}
            todo = [i for i in range(completions) if i not in done and i not in busy]
            room = max(0, parallelism - len(active))
            created = [self._create_pod(job, i) for i in todo[: min(room, BURST)]]
            if len(todo) > room and room > BURST:
                self.queue.add(job.key)
            return active + created
        if completions is None:
            want = parallelism if succeeded == 0 else len(active)
        else:
            want = min(parallelism, completions - succeeded)
        want = max(want, 0)
        if len(active) > want:
            extra = sorted(
                active,
                key=lambda p: (p.is_ready, p.metadata.creation_timestamp or ""),
                reverse=False,
            )
            victims = extra[: len(active) - want]
            for p in victims:
                self._delete_pod(job, p)
            return [p for p in active if p not in victims]
        n = want - len(active)
        created = [self._create_pod(job, None) for _ in range(min(n, BURST))]
        if n > BURST:
            self.queue.add(job.key)
        return active + created

    def _rng(self, job: Job) -> random.Random:
        rng = self._rngs.get(job.key)
        if rng is None:
            rng = self._rngs[job.key] = random.Random(f"{self.seed}/{job.key}/{job.metadata.uid}")
        return rng

    def _pod_name(self, base: str, namespace: str, rng: random.Random) -> str:
        while True:
            name = base + "".join(rng.choices(SAFE_ALPHABET, k=5))
            if self.cache.get("Pod", f"{namespace}/{name}") is not None:
                continue
            try:
                self.store.get("Pod", f"{namespace}/{name}")
            except NotFoundError:
                return name

    def _create_pod(self, job: Job, index: int | None) -> Pod:
        t = job.spec.template
        labels = dict(t.metadata.labels)
        annotations = dict(t.metadata.annotations)
        spec = t.spec
        base = f"{job.name[:57]}-"
        if index is not None:
            base = f"{job.name[:50]}-{index}-"
            labels[COMPLETION_INDEX] = str(index)
            annotations[COMPLETION_INDEX] = str(index)
            env_var = {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}
                },
            }
            containers = [
                c.evolve(env=[*((c.model_extra or {}).get("env") or []), env_var])
                for c in spec.containers
            ]
            spec = spec.evolve(containers=containers, hostname=f"{job.name[:50]}-{index}")
        pod = Pod(
            metadata=ObjectMeta(
                name=self._pod_name(base, job.namespace, self._rng(job)),
                generate_name=base,
                namespace=job.namespace,
                labels=labels,
                annotations=annotations,
                owner_references=[controller_ref(job)],
            ),
            spec=spec,
        )
        created = self.api.create(pod, component=self.name)
        assert isinstance(created, Pod)
        self._expected.setdefault(job.key, set()).add(("add", created.key))
        self.recorder.record(self.name, job, "SuccessfulCreate", f"Created pod: {created.name}")
        return created

    def _delete_pod(self, job: Job, pod: Pod) -> None:
        try:
            self.api.delete("Pod", pod.key, component=self.name)
        except NotFoundError:
            return
        self._expected.setdefault(job.key, set()).add(("del", pod.key))
        self.recorder.record(self.name, job, "SuccessfulDelete", f"Deleted pod: {pod.name}")


def _set_condition(
    conds: list[JobCondition], type_: str, status: str, reason: str, message: str, now: float
) -> list[JobCondition]:
    """``conds`` with the condition of ``type_`` set (its transition time kept when its
    status does not change)."""
    t = rfc3339(now)
    out: list[JobCondition] = []
    found = False
    for c in conds:
        if c.type == type_:
            found = True
            since = c.last_transition_time if c.status == status else t
            out.append(
                c.evolve(
                    status=status,
                    reason=reason,
                    message=message,
                    last_probe_time=t,
                    last_transition_time=since,
                )
            )
        else:
            out.append(c)
    if not found:
        out.append(
            JobCondition(
                type=type_,
                status=status,
                reason=reason,
                message=message,
                last_probe_time=t,
                last_transition_time=t,
            )
        )
    return out
