"""batch/v1 Job and CronJob, typed: the fields their controllers
(:mod:`control.controllers.job`, :mod:`control.controllers.cronjob`) read. Every other
field a manifest gives is kept as it came (``extra="allow"``) and checked against the
kubernetes client's models (:mod:`netmodel.schema`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from netmodel.objects import Condition, K8sModel, KubeObject, ObjectMeta, PodTemplateSpec
from netmodel.selectors import LabelSelector

#: label and annotation keys the Job machinery sets (kube's names)
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CRONJOB_SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"


class JobCondition(Condition):
    last_probe_time: str | None = None


class JobSpec(K8sModel):
    parallelism: int | None = None
    completions: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    selector: LabelSelector | None = None
    manual_selector: bool | None = None
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)
    ttl_seconds_after_finished: int | None = None
    completion_mode: str | None = None
    suspend: bool | None = None
    pod_failure_policy: dict[str, Any] | None = None


class JobStatus(K8sModel):
    conditions: list[JobCondition] = Field(default_factory=list)
    start_time: str | None = None
    completion_time: str | None = None
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    ready: int | None = None
    terminating: int | None = None
    completed_indexes: str | None = None


class Job(KubeObject):
    KIND = "Job"
    API_VERSION = "batch/v1"
    spec: JobSpec = Field(default_factory=JobSpec)
    status: JobStatus = Field(default_factory=JobStatus)

    def condition(self, type_: str) -> JobCondition | None:
        for c in self.status.conditions:
            if c.type == type_:
                return c
        return None

    def has_condition(self, type_: str) -> bool:
        c = self.condition(type_)
        return c is not None and c.status == "True"

    @property
    def finished(self) -> bool:
        """Complete or Failed (kube's IsJobFinished)."""
        return self.has_condition("Complete") or self.has_condition("Failed")


class JobTemplateSpec(K8sModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: JobSpec = Field(default_factory=JobSpec)


class CronJobSpec(K8sModel):
    schedule: str = ""
    time_zone: str | None = None
    starting_deadline_seconds: int | None = None
    concurrency_policy: str | None = None
    suspend: bool | None = None
    job_template: JobTemplateSpec = Field(default_factory=JobTemplateSpec)
    successful_jobs_history_limit: int | None = None
    failed_jobs_history_limit: int | None = None


class CronJobStatus(K8sModel):
    active: list[dict[str, Any]] = Field(default_factory=list)
    last_schedule_time: str | None = None
    last_successful_time: str | None = None


class CronJob(KubeObject):
    KIND = "CronJob"
    API_VERSION = "batch/v1"
    spec: CronJobSpec = Field(default_factory=CronJobSpec)
    status: CronJobStatus = Field(default_factory=CronJobStatus)
