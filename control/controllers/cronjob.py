"""The CronJob controller (kube-controller-manager's cronjob-controller, v2), driven by
the injected clock.

For each CronJob, from the Jobs it controls:

* ``status.active`` lists its unfinished Jobs; a Job that finished leaves it (Event
  SawCompletedJob), and a Complete one moves ``lastSuccessfulTime`` to its
  completionTime;
* finished Jobs beyond ``successfulJobsHistoryLimit`` / ``failedJobsHistoryLimit`` are
  deleted, oldest first (background propagation);
* unless ``suspend``: the most recent scheduled time in (lastScheduleTime — or the
  creationTimestamp —, now] (:mod:`control.cron`, in ``timeZone``), when
  ``startingDeadlineSeconds`` allows it (a start more than that late is missed: only
  the times after ``now - startingDeadlineSeconds`` count), is started as a Job named
  ``<cronjob>-<scheduled time in minutes since the epoch>`` from ``jobTemplate``
  (its labels and annotations, the ``batch.kubernetes.io/cronjob-scheduled-timestamp``
  annotation, a controller ownerReference), and becomes ``lastScheduleTime``. More
  than 100 missed times give a Warning TooManyMissedTimes, as kube's;
* ``concurrencyPolicy``: Allow starts it anyway; Forbid skips the start while a Job is
  active (lastScheduleTime stays, so it starts when the active one finishes, if still
  within the starting deadline); Replace deletes the active Jobs first.

The controller wakes itself at the next scheduled time: after ``clock.advance`` the
next ``run_until_idle`` starts what came due.
"""

from __future__ import annotations

import datetime as _dt
import zoneinfo
from collections.abc import Iterable
from typing import Any

from control.clock import parse_rfc3339, rfc3339
from control.controllers.base import (
    Indexer,
    controller_index,
    controller_keys,
    controller_ref,
    is_controlled_by,
    owner_id,
)
from control.controllers.timed import TimedController
from control.cron import CronError, missed, next_after
from control.store.base import WatchEvent
from netmodel.batch import CRONJOB_SCHEDULED_TIMESTAMP, CronJob, Job
from netmodel.errors import ConflictError, NotFoundError
from netmodel.objects import KubeObject, ObjectMeta

#: kube's limit on missed start times it counts before it warns
MISSED_LIMIT = 100


def job_name(cronjob: str, scheduled: float) -> str:
    """kube's name for the Job of a scheduled time: minutes since the epoch."""
    return f"{cronjob}-{int(scheduled // 60)}"


def _scheduled_text(t: float, time_zone: str | None) -> str:
    tz: _dt.tzinfo = zoneinfo.ZoneInfo(time_zone) if time_zone else _dt.UTC
    d = _dt.datetime.fromtimestamp(int(t), tz=tz)
    return d.isoformat().replace("+00:00", "Z") if not time_zone else d.isoformat()


def _finished(job: Job) -> str | None:
    if job.has_condition("Complete"):
        return "Complete"
    if job.has_condition("Failed"):
        return "Failed"
    return None


class CronJobController(TimedController):
    """Starts Jobs on schedule; see the module docstring. Its timer for a CronJob is the
    next scheduled time."""

    name = "cronjob-controller"
    kinds = frozenset({"CronJob", "Job"})

    def indexers(self) -> dict[str, Indexer]:
        return controller_index("CronJob")

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        obj = event.object
        if obj.kind == "CronJob":
            if event.type == "DELETED":
                self._timers.pop(obj.key, None)
            return [obj.key]
        return controller_keys(obj, old, "CronJob")

    def subject(self, key: str) -> KubeObject | None:
        return self.cache.get("CronJob", key)

    # ---- reconcile

    def reconcile(self, key: str) -> None:
        try:
            cj = self.store.get("CronJob", key)
        except NotFoundError:
            self._timers.pop(key, None)
            return
        if not isinstance(cj, CronJob) or cj.metadata.deletion_timestamp is not None:
            return
        ident = owner_id("CronJob", cj.namespace, cj.name, cj.metadata.uid)
        jobs = sorted(
            (
                j
                for j in self.cache.by_index("by", ident)
                if isinstance(j, Job)
                and is_controlled_by(j, cj)
                and j.metadata.deletion_timestamp is None
            ),
            key=lambda j: (j.status.start_time or j.metadata.creation_timestamp or "", j.name),
        )
        now = self.clock.now()
        st = cj.status
        was_active = {str(r.get("name")) for r in st.active}
        active = [j for j in jobs if _finished(j) is None]
        last_ok = st.last_successful_time
        for j in jobs:
            how = _finished(j)
            if how is None:
                continue
            if j.name in was_active:
                self.recorder.record(
                    self.name,
                    cj,
                    "SawCompletedJob",
                    f"Saw completed job: {j.name}, condition: {how}",
                )
            if (
                how == "Complete"
                and j.status.completion_time
                and (
                    last_ok is None
                    or parse_rfc3339(j.status.completion_time) > parse_rfc3339(last_ok)
                )
            ):
                last_ok = j.status.completion_time
        self._cleanup(cj, jobs)
        last_schedule = st.last_schedule_time
        if not cj.spec.suspend:
            last_schedule, active = self._schedule(cj, now, active, last_schedule)
        status = st.evolve(
            active=[_ref(j) for j in active],
            last_schedule_time=last_schedule,
            last_successful_time=last_ok,
        )
        if status != st:
            self.api.update_status(cj.evolve(status=status), component=self.name)

    def _schedule(
        self, cj: CronJob, now: float, active: list[Job], last_schedule: str | None
    ) -> tuple[str | None, list[Job]]:
        spec = cj.spec
        since_text = last_schedule or cj.metadata.creation_timestamp
        since = parse_rfc3339(since_text) if since_text else now
        if spec.starting_deadline_seconds is not None:
            since = max(since, now - spec.starting_deadline_seconds - 1)
        try:
            latest, n = missed(spec.schedule, spec.time_zone, since, now, MISSED_LIMIT)
            self._timers[cj.key] = next_after(spec.schedule, spec.time_zone, now)
        except CronError as e:  # stored before a rule changed: report, never crash
            self.recorder.record(
                self.name, cj, "UnparseableSchedule", f"unparseable schedule: {e}", type_="Warning"
            )
            return last_schedule, active
        if latest is None:
            return last_schedule, active
        if n > MISSED_LIMIT:
            self.recorder.record(
                self.name,
                cj,
                "TooManyMissedTimes",
                "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
                type_="Warning",
            )
        name = job_name(cj.name, latest)
        if (
            any(j.name == name for j in active)
            or self.cache.get("Job", f"{cj.namespace}/{name}") is not None
        ):
            return rfc3339(latest), active  # started already
        if active and spec.concurrency_policy == "Forbid":
            self.recorder.record(
                self.name,
                cj,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            )
            return last_schedule, active
        if active and spec.concurrency_policy == "Replace":
            for j in active:
                try:
                    self.api.delete("Job", j.key, component=self.name, propagation="Background")
                except NotFoundError:
                    continue
                self.recorder.record(self.name, cj, "SuccessfulDelete", f"Deleted job {j.name}")
            active = []
        jt = spec.job_template
        annotations = dict(jt.metadata.annotations)
        annotations[CRONJOB_SCHEDULED_TIMESTAMP] = _scheduled_text(latest, spec.time_zone)
        job = Job(
            metadata=ObjectMeta(
                name=name,
                namespace=cj.namespace,
                labels=dict(jt.metadata.labels),
                annotations=annotations,
                owner_references=[controller_ref(cj)],
            ),
            spec=jt.spec,
        )
        try:
            created = self.api.create(job, component=self.name)
        except ConflictError:
            return rfc3339(latest), active
        assert isinstance(created, Job)
        self.recorder.record(self.name, cj, "SuccessfulCreate", f"Created job {created.name}")
        return rfc3339(latest), [*active, created]

    def _cleanup(self, cj: CronJob, jobs: list[Job]) -> None:
        for how, limit in (
            ("Complete", cj.spec.successful_jobs_history_limit),
            ("Failed", cj.spec.failed_jobs_history_limit),
        ):
            if limit is None:
                continue
            done = [j for j in jobs if _finished(j) == how]
            for j in done[: max(0, len(done) - limit)]:
                try:
                    self.api.delete("Job", j.key, component=self.name, propagation="Background")
                except NotFoundError:
                    continue
                self.recorder.record(self.name, cj, "SuccessfulDelete", f"Deleted job {j.name}")


def _ref(job: Job) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": job.name,
        "namespace": job.namespace,
        "uid": job.metadata.uid,
    }
