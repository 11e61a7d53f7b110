"""batch/v1 Job and CronJob admission: kube-apiserver's defaulting, generated selector
and validation (its field paths and wording), as :class:`JobStrategy` and
:class:`CronJobStrategy` (registered in :mod:`.strategy`).

Job defaults: ``parallelism`` 1; ``completions`` 1 when neither is set; ``backoffLimit``
6; ``completionMode`` NonIndexed; ``suspend`` false; ``podReplacementPolicy``
TerminatingOrFailed; the pod template's defaults (restartPolicy Always, which a Job
refuses: it must say Never or OnFailure, as in kube). Unless ``manualSelector`` is true,
the selector is generated: ``matchLabels: {batch.kubernetes.io/controller-uid: <uid>}``,
and the template gets the ``batch.kubernetes.io/controller-uid``, ``controller-uid``,
``batch.kubernetes.io/job-name`` and ``job-name`` labels (when the uid is known only at
write time, in an apply, :meth:`JobStrategy.uid_assigned` does it then).

What svclab does not evaluate is refused, not ignored (422, naming the field):
``backoffLimitPerIndex``, ``maxFailedIndexes``, ``successPolicy``, ``managedBy`` other
than the built-in controller, ``podReplacementPolicy: Failed``. ``podFailurePolicy``
is evaluated (:mod:`control.controllers.job`) for ``onExitCodes`` and
``onPodConditions`` rules with the actions FailJob, Ignore and Count; FailIndex
(which needs backoffLimitPerIndex) is refused.

CronJob defaults: ``concurrencyPolicy`` Allow, ``suspend`` false,
``successfulJobsHistoryLimit`` 3, ``failedJobsHistoryLimit`` 1, pod template defaults.
Its ``schedule`` is parsed with croniter (five fields or a ``@hourly``-style macro;
``TZ=`` prefixes refused as kube refuses them) and ``timeZone`` must name an IANA zone.
"""

from __future__ import annotations

import zoneinfo
from typing import Any

from control.apiserver.defaults import default_pod_spec
from control.apiserver.strategybase import GenericStrategy
from control.apiserver.validation import Problems, selector_text, validate_pod_spec
from control.cron import CronError, parse_schedule
from netmodel.batch import (
    CONTROLLER_UID_LABEL,
    JOB_NAME_LABEL,
    LEGACY_CONTROLLER_UID_LABEL,
    LEGACY_JOB_NAME_LABEL,
    CronJob,
    Job,
    JobSpec,
)
from netmodel.cluster import ClusterSpec
from netmodel.objects import KubeObject, PodTemplateSpec
from netmodel.selectors import LabelSelector

RESTART_POLICIES = ("OnFailure", "Never")
COMPLETION_MODES = ("NonIndexed", "Indexed")
CONCURRENCY_POLICIES = ("Allow", "Forbid", "Replace")
POD_FAILURE_ACTIONS = ("FailJob", "Ignore", "Count")
#: the most characters a CronJob name may have (its Jobs append 11)
CRONJOB_NAME_MAX = 52
_NONNEG = "must be greater than or equal to 0"
#: JobSpec fields svclab does not evaluate -> why it refuses them
_REFUSED = {
    "backoffLimitPerIndex": "svclab does not evaluate backoffLimitPerIndex",
    "maxFailedIndexes": "svclab does not evaluate maxFailedIndexes",
    "successPolicy": "svclab does not evaluate successPolicy",
}


def _template_defaults(t: PodTemplateSpec) -> PodTemplateSpec:
    spec = default_pod_spec(t.spec)
    return t if spec is t.spec else t.evolve(spec=spec)


def default_job_spec(spec: JobSpec) -> JobSpec:
    """kube's SetDefaults_Job on a spec (idempotent)."""
    ch: dict[str, Any] = {}
    if spec.completions is None and spec.parallelism is None:
        ch["completions"] = 1
    if spec.parallelism is None:
        ch["parallelism"] = 1
    if spec.backoff_limit is None:
        ch["backoff_limit"] = 6
    if spec.completion_mode is None:
        ch["completion_mode"] = "NonIndexed"
    if spec.suspend is None:
        ch["suspend"] = False
    extra = spec.model_extra or {}
    if "podReplacementPolicy" not in extra:
        ch["podReplacementPolicy"] = "TerminatingOrFailed"
    template = _template_defaults(spec.template)
    if template is not spec.template:
        ch["template"] = template
    return spec.evolve(**ch) if ch else spec


def generated_selector(job: Job) -> Job:
    """The selector and template labels kube-apiserver generates for a Job whose
    ``manualSelector`` is not true, once its uid is known."""
    uid = job.metadata.uid
    if job.spec.manual_selector or not uid:
        return job
    labels = dict(job.spec.template.metadata.labels)
    want = {
        CONTROLLER_UID_LABEL: uid,
        LEGACY_CONTROLLER_UID_LABEL: uid,
        JOB_NAME_LABEL: job.name,
        LEGACY_JOB_NAME_LABEL: job.name,
    }
    selector = job.spec.selector
    if selector is None:
        selector = LabelSelector(match_labels={CONTROLLER_UID_LABEL: uid})
    if all(labels.get(k) == v for k, v in want.items()) and selector is job.spec.selector:
        return job
    labels.update(want)
    t = job.spec.template
    template = t.evolve(metadata=t.metadata.evolve(labels=labels))
    return job.evolve(spec=job.spec.evolve(selector=selector, template=template))


def validate_job_spec(
    spec: JobSpec, f: str, p: Problems, *, template_labels_checked: bool = True
) -> None:
    """kube's ValidateJobSpec under the field path ``f``."""
    for name, value in (
        ("parallelism", spec.parallelism),
        ("completions", spec.completions),
        ("activeDeadlineSeconds", spec.active_deadline_seconds),
        ("backoffLimit", spec.backoff_limit),
        ("ttlSecondsAfterFinished", spec.ttl_seconds_after_finished),
    ):
        if value is not None and value < 0:
            p.invalid(f"{f}.{name}", value, _NONNEG)
    extra = spec.model_extra or {}
    for name, why in _REFUSED.items():
        if extra.get(name) is not None:
            p.forbidden(f"{f}.{name}", why)
    managed = extra.get("managedBy")
    if managed is not None and managed != "kubernetes.io/job-controller":
        p.forbidden(
            f"{f}.managedBy",
            "svclab runs only the built-in Job controller (kubernetes.io/job-controller)",
        )
    replacement = extra.get("podReplacementPolicy")
    if replacement is not None:
        if replacement not in ("TerminatingOrFailed", "Failed"):
            p.unsupported(
                f"{f}.podReplacementPolicy", replacement, ("TerminatingOrFailed", "Failed")
            )
        if replacement == "Failed" and spec.pod_failure_policy is None:
            p.forbidden(f"{f}.podReplacementPolicy", "svclab evaluates only TerminatingOrFailed")
    p.enum(f"{f}.completionMode", spec.completion_mode, COMPLETION_MODES)
    if spec.completion_mode == "Indexed":
        if spec.completions is None:
            p.required(f"{f}.completions", "when completion mode is Indexed")
        if spec.completions > 100000:
            p.invalid(
                f"{f}.completions",
                spec.completions,
                "must be less than or equal to 100000 when completion mode is Indexed",
            )
    if template_labels_checked:
        if spec.selector is None:
            p.required(f"{f}.selector")
        labels = spec.template.metadata.labels
        p.labels(f"{f}.selector.matchLabels", spec.selector.match_labels)
        p.labels(f"{f}.template.metadata.labels", labels)
        if spec.selector.is_empty or not spec.selector.matches(labels):
            p.invalid(
                f"{f}.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            )
    tspec = spec.template.spec
    validate_pod_spec(tspec, f"{f}.template.spec", p)
    policy = (tspec.model_extra or {}).get("restartPolicy")
    if policy not in RESTART_POLICIES:
        p.unsupported(f"{f}.template.spec.restartPolicy", policy, RESTART_POLICIES)
    if spec.pod_failure_policy is not None:
        _pod_failure_policy(spec, f"{f}.podFailurePolicy", p)


def _pod_failure_policy(spec: JobSpec, f: str, p: Problems) -> None:
    pfp = spec.pod_failure_policy or {}
    if (spec.template.spec.model_extra or {}).get("restartPolicy") != "Never":
        p.invalid(
            f"{f}",
            None,
            'only "Never" is supported when podFailurePolicy is specified',
        )
    rules = pfp.get("rules")
    if not isinstance(rules, list):
        p.required(f"{f}.rules")
    names = {c.name for c in spec.template.spec.containers}
    for i, rule in enumerate(rules):
        rf = f"{f}.rules[{i}]"
        if not isinstance(rule, dict):
            p.invalid(rf, rule, "must be an object")
        action = rule.get("action")
        if action == "FailIndex":
            p.forbidden(
                f"{rf}.action", "svclab does not evaluate FailIndex (it needs backoffLimitPerIndex)"
            )
        if action not in POD_FAILURE_ACTIONS:
            p.unsupported(f"{rf}.action", action, POD_FAILURE_ACTIONS)
        codes, conds = rule.get("onExitCodes"), rule.get("onPodConditions")
        if (codes is None) == (conds is None):
            p.invalid(rf, None, "specifying one of onExitCodes and onPodConditions is required")
        if codes is not None:
            cf = f"{rf}.onExitCodes"
            cname = codes.get("containerName")
            if cname is not None and cname not in names:
                p.invalid(
                    f"{cf}.containerName",
                    cname,
                    "must be one of the container or initContainer names in the pod template",
                )
            op = codes.get("operator")
            p.enum(f"{cf}.operator", op, ("In", "NotIn"))
            if op is None:
                p.required(f"{cf}.operator")
            values = codes.get("values")
            if not isinstance(values, list) or not values:
                p.required(f"{cf}.values", "at least one value is required")
            for j, v in enumerate(values):
                if not isinstance(v, int):
                    p.invalid(f"{cf}.values[{j}]", v, "must be an integer")
                if op == "In" and v == 0:
                    p.invalid(f"{cf}.values[{j}]", v, "must not be 0 for the In operator")
            if len(set(values)) != len(values):
                p.invalid(f"{cf}.values", values, "must not contain duplicates")
        else:
            for j, c in enumerate(conds if isinstance(conds, list) else []):
                if not isinstance(c, dict) or not c.get("type"):
                    p.required(f"{rf}.onPodConditions[{j}].type")
                p.enum(
                    f"{rf}.onPodConditions[{j}].status",
                    c.get("status", "True"),
                    ("True", "False", "Unknown"),
                )


class JobStrategy(GenericStrategy):
    """batch/v1 Job (see the module docstring)."""

    counts_generation = True

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, Job)
        spec = default_job_spec(obj.spec)
        job = obj if spec is obj.spec else obj.evolve(spec=spec)
        return generated_selector(job)

    def uid_assigned(self, obj: KubeObject) -> KubeObject:
        """The generated selector, for a Job whose uid was set at write time."""
        assert isinstance(obj, Job)
        return generated_selector(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, Job)
        spec = obj.spec
        pending_uid = obj.metadata.uid is None and not spec.manual_selector
        if spec.manual_selector and spec.selector is None:
            p.required("spec.selector")
        if not pending_uid and not spec.manual_selector and spec.selector is not None:
            uid = obj.metadata.uid
            if spec.selector.match_labels.get(CONTROLLER_UID_LABEL) != uid:
                p.invalid(
                    "spec.selector",
                    selector_text(spec.selector),
                    "`selector` not auto-generated",
                )
        validate_job_spec(spec, "spec", p, template_labels_checked=not pending_uid)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        if not (isinstance(obj, Job) and isinstance(old, Job)):
            return
        a, b = obj.spec, old.spec
        if a.selector != b.selector:
            p.invalid(
                "spec.selector", selector_text(a.selector or LabelSelector()), "field is immutable"
            )
        if a.completion_mode != b.completion_mode:
            p.invalid("spec.completionMode", a.completion_mode, "field is immutable")
        if a.completions != b.completions and not (
            a.completion_mode == "Indexed" and a.completions == a.parallelism
        ):
            p.invalid("spec.completions", a.completions, "field is immutable")
        if a.template != b.template and not b.suspend:
            p.invalid(
                "spec.template",
                a.template.to_dict() if hasattr(a.template, "to_dict") else "",
                "field is immutable",
            )
        if a.pod_failure_policy != b.pod_failure_policy:
            p.invalid("spec.podFailurePolicy", a.pod_failure_policy, "field is immutable")

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        """The generated selector and template labels an update leaves unset."""
        if not (isinstance(obj, Job) and isinstance(current, Job)):
            return obj
        if obj.spec.selector is None and current.spec.selector is not None:
            return generated_selector(obj.with_meta(uid=current.metadata.uid))
        return obj


def default_cronjob(cj: CronJob) -> CronJob:
    s = cj.spec
    ch: dict[str, Any] = {}
    if s.concurrency_policy is None:
        ch["concurrency_policy"] = "Allow"
    if s.suspend is None:
        ch["suspend"] = False
    if s.successful_jobs_history_limit is None:
        ch["successful_jobs_history_limit"] = 3
    if s.failed_jobs_history_limit is None:
        ch["failed_jobs_history_limit"] = 1
    jt = s.job_template
    template = _template_defaults(jt.spec.template)
    if template is not jt.spec.template:
        ch["job_template"] = jt.evolve(spec=jt.spec.evolve(template=template))
    return cj.evolve(spec=s.evolve(**ch)) if ch else cj


class CronJobStrategy(GenericStrategy):
    """batch/v1 CronJob (see the module docstring)."""

    counts_generation = True

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        assert isinstance(obj, CronJob)
        return default_cronjob(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        assert isinstance(obj, CronJob)
        if len(obj.name) > CRONJOB_NAME_MAX:
            p.invalid(
                "metadata.name", obj.name, f"must be no more than {CRONJOB_NAME_MAX} characters"
            )
        s = obj.spec
        if not s.schedule:
            p.required("spec.schedule")
        if s.time_zone is not None:
            try:
                zoneinfo.ZoneInfo(s.time_zone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                p.invalid("spec.timeZone", s.time_zone, f"unknown time zone {s.time_zone}")
        try:
            parse_schedule(s.schedule)
        except CronError as e:
            p.invalid("spec.schedule", s.schedule, str(e))
        p.enum("spec.concurrencyPolicy", s.concurrency_policy, CONCURRENCY_POLICIES)
        for name, value in (
            ("startingDeadlineSeconds", s.starting_deadline_seconds),
            ("successfulJobsHistoryLimit", s.successful_jobs_history_limit),
            ("failedJobsHistoryLimit", s.failed_jobs_history_limit),
        ):
            if value is not None and value < 0:
                p.invalid(f"spec.{name}", value, _NONNEG)
        jt = s.job_template.spec
        if jt.manual_selector or jt.selector is not None:
            validate_job_spec(jt, "spec.jobTemplate.spec", p)
        else:
            validate_job_spec(jt, "spec.jobTemplate.spec", p, template_labels_checked=False)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        return None

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        return obj
