"""The Job and CronJob controllers under the deterministic runner, on a FakeClock; and
their admission (defaults, generated selector, validation)."""

from __future__ import annotations

from typing import Any

import pytest

from control.agents.containers import container_statuses
from control.clock import FakeClock
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from netmodel.batch import COMPLETION_INDEX, CONTROLLER_UID_LABEL, JOB_NAME_LABEL, CronJob, Job
from netmodel.cluster import ClusterSpec
from netmodel.errors import InvalidError
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject, Pod

T0 = 1767225600.0  # the FakeClock's start, 2026-01-01T00:00:00Z


def _plane() -> tuple[ControlPlane, FakeClock]:
    clock = FakeClock()
    plane = ControlPlane(MemoryStore(), ClusterSpec(nodes=2, dns=False), clock=clock)
    plane.start()
    plane.run_until_idle()
    return plane, clock


def _job(name: str, command: list[str], policy: str = "Never", **spec: Any) -> KubeObject:
    return object_from_dict(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                **spec,
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "restartPolicy": policy,
                        "containers": [{"name": "c", "image": "busybox", "command": command}],
                    },
                },
            },
        }
    )


def _get(plane: ControlPlane, name: str) -> Job:
    job = plane.store.get("Job", f"default/{name}")
    assert isinstance(job, Job)
    return job


def _pods(plane: ControlPlane, job: str) -> list[Pod]:
    return sorted(
        (
            p
            for p in plane.store.list("Pod")
            if isinstance(p, Pod) and p.labels.get(JOB_NAME_LABEL) == job
        ),
        key=lambda p: p.name,
    )


def _conds(job: Job) -> list[tuple[str, str, str | None]]:
    return [(c.type, c.status, c.reason) for c in job.status.conditions]


def _step(plane: ControlPlane, clock: FakeClock, seconds: float) -> None:
    clock.advance(seconds)
    plane.run_until_idle()


def test_completions_and_parallelism() -> None:
    plane, clock = _plane()
    plane.apply([_job("pi", ["sleep", "5"], completions=3, parallelism=2)])
    plane.run_until_idle()
    job = _get(plane, "pi")
    uid = job.metadata.uid or ""
    assert job.spec.selector is not None and job.spec.selector.match_labels == {
        CONTROLLER_UID_LABEL: uid
    }
    assert job.spec.backoff_limit == 6 and job.spec.completion_mode == "NonIndexed"
    pods = _pods(plane, "pi")
    assert len(pods) == 2 and all(p.name.startswith("pi-") for p in pods)
    assert pods[0].labels["controller-uid"] == uid and pods[0].labels["job-name"] == "pi"
    assert (job.status.active, job.status.ready, job.status.succeeded) == (2, 2, 0)
    assert job.status.start_time == "2026-01-01T00:00:00Z"
    _step(plane, clock, 5)
    job = _get(plane, "pi")
    assert (job.status.active, job.status.succeeded) == (1, 2)
    assert not job.finished
    _step(plane, clock, 5)
    job = _get(plane, "pi")
    assert (job.status.active, job.status.succeeded, job.status.failed) == (0, 3, 0)
    assert _conds(job) == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    assert job.status.completion_time == "2026-01-01T00:00:10Z"
    assert [p.status.phase for p in _pods(plane, "pi")] == ["Succeeded"] * 3


def test_backoff_limit_counts_failed_pods() -> None:
    plane, clock = _plane()
    plane.apply([_job("bad", ["sh", "-c", "sleep 1; exit 2"], backoffLimit=2)])
    plane.run_until_idle()
    for _ in range(2):
        _step(plane, clock, 1)
        assert not _get(plane, "bad").finished
    _step(plane, clock, 1)
    job = _get(plane, "bad")
    assert job.status.failed == 3
    assert _conds(job) == [
        ("FailureTarget", "True", "BackoffLimitExceeded"),
        ("Failed", "True", "BackoffLimitExceeded"),
    ]
    assert job.status.conditions[1].message == "Job has reached the specified backoff limit"
    assert len(_pods(plane, "bad")) == 3


def test_onfailure_restarts_count_against_the_backoff_limit() -> None:
    plane, clock = _plane()
    plane.apply([_job("flaky", ["false"], policy="OnFailure", backoffLimit=1)])
    plane.run_until_idle()  # fails at once, restarted at once: restartCount 1
    (pod,) = _pods(plane, "flaky")
    assert container_statuses(pod)[0]["restartCount"] == 1
    assert not _get(plane, "flaky").finished
    _step(plane, clock, 10)  # the back-off ran out: restart 2 > backoffLimit 1
    job = _get(plane, "flaky")
    assert ("Failed", "True", "BackoffLimitExceeded") in _conds(job)
    assert _pods(plane, "flaky") == []  # the active pod is deleted


def test_active_deadline() -> None:
    plane, clock = _plane()
    plane.apply([_job("slow", ["sleep", "100"], activeDeadlineSeconds=10)])
    plane.run_until_idle()
    _step(plane, clock, 9)
    assert not _get(plane, "slow").finished
    _step(plane, clock, 1)
    job = _get(plane, "slow")
    assert ("Failed", "True", "DeadlineExceeded") in _conds(job)
    assert job.status.active == 0 and _pods(plane, "slow") == []


def test_indexed() -> None:
    plane, clock = _plane()
    plane.apply(
        [_job("ix", ["sleep", "3"], completions=3, parallelism=2, completionMode="Indexed")]
    )
    plane.run_until_idle()
    pods = _pods(plane, "ix")
    assert sorted(p.metadata.annotations[COMPLETION_INDEX] for p in pods) == ["0", "1"]
    for p in pods:
        i = p.labels[COMPLETION_INDEX]
        assert p.name.startswith(f"ix-{i}-")
        assert (p.spec.model_extra or {})["hostname"] == f"ix-{i}"
        env = (p.spec.containers[0].model_extra or {})["env"]
        assert env[0]["name"] == "JOB_COMPLETION_INDEX"
    _step(plane, clock, 3)
    assert _get(plane, "ix").status.completed_indexes == "0-1"
    _step(plane, clock, 3)
    job = _get(plane, "ix")
    assert job.status.completed_indexes == "0-2" and job.has_condition("Complete")


def test_suspend_and_resume() -> None:
    plane, clock = _plane()
    plane.apply([_job("s", ["sleep", "5"], suspend=True)])
    plane.run_until_idle()
    job = _get(plane, "s")
    assert _pods(plane, "s") == [] and _conds(job) == [("Suspended", "True", "JobSuspended")]
    clock.advance(60)
    resumed = job.evolve(spec=job.spec.evolve(suspend=False))
    plane.apiserver.update(resumed)
    plane.run_until_idle()
    job = _get(plane, "s")
    assert _conds(job) == [("Suspended", "False", "JobResumed")]
    assert job.status.start_time == "2026-01-01T00:01:00Z" and len(_pods(plane, "s")) == 1


def test_ttl_after_finished_deletes_the_job_and_its_pods() -> None:
    plane, clock = _plane()
    plane.apply([_job("t", ["true"], ttlSecondsAfterFinished=30)])
    plane.run_until_idle()
    assert _get(plane, "t").has_condition("Complete")
    _step(plane, clock, 29)
    assert _get(plane, "t")
    _step(plane, clock, 1)
    assert [j for j in plane.store.list("Job") if j.name == "t"] == []
    assert _pods(plane, "t") == []


def test_pod_failure_policy_failjob_and_ignore() -> None:
    plane, clock = _plane()
    rules = {
        "rules": [
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}},
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "c", "operator": "In", "values": [42]},
            },
        ]
    }
    plane.apply(
        [
            _job("pf", ["sh", "-c", "exit 42"], podFailurePolicy=rules),
            _job("ig", ["sh", "-c", "sleep 1; exit 7"], podFailurePolicy=rules, backoffLimit=0),
        ]
    )
    plane.run_until_idle()
    job = _get(plane, "pf")
    assert ("Failed", "True", "PodFailurePolicy") in _conds(job)
    assert "exit code 42 matching FailJob rule at index 1" in (
        job.status.conditions[-1].message or ""
    )
    _step(plane, clock, 1)
    _step(plane, clock, 1)
    ig = _get(plane, "ig")
    assert not ig.finished and ig.status.failed == 0  # exit 7 is ignored, the pod replaced
    assert len(_pods(plane, "ig")) == 3


@pytest.mark.parametrize(
    ("spec", "policy", "error"),
    [
        (
            {},
            "Always",
            'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"',
        ),
        (
            {"parallelism": -1},
            "Never",
            "spec.parallelism: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            {"completionMode": "Indexed", "parallelism": 2},
            "Never",
            "spec.completions: Required value: when completion mode is Indexed",
        ),
        (
            {"completionMode": "Sometimes"},
            "Never",
            'spec.completionMode: Unsupported value: "Sometimes"',
        ),
        (
            {"backoffLimitPerIndex": 1},
            "Never",
            "spec.backoffLimitPerIndex: Forbidden: svclab does not evaluate",
        ),
        ({"manualSelector": True}, "Never", "spec.selector: Required value"),
        (
            {
                "podFailurePolicy": {
                    "rules": [
                        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}}
                    ]
                }
            },
            "Never",
            "spec.podFailurePolicy.rules[0].action: Forbidden: svclab does not evaluate FailIndex",
        ),
    ],
)
def test_job_validation(spec: dict[str, Any], policy: str, error: str) -> None:
    plane, _ = _plane()
    with pytest.raises(InvalidError) as e:
        plane.apply([_job("v", ["true"], policy=policy, **spec)])
    assert error in str(e.value)
    assert [j for j in plane.store.list("Job")] == []


def test_job_selector_is_immutable() -> None:
    plane, _ = _plane()
    plane.apply([_job("im", ["sleep", "50"])])
    plane.run_until_idle()
    job = _get(plane, "im")
    with pytest.raises(
        InvalidError, match=r"spec\.completions: Invalid value: 5: field is immutable"
    ):
        plane.apiserver.update(job.evolve(spec=job.spec.evolve(completions=5)))


# ------------------------------------------------------------------------- CronJob


def _cronjob(name: str, schedule: str, command: list[str], **spec: Any) -> KubeObject:
    return object_from_dict(
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                **spec,
                "schedule": schedule,
                "jobTemplate": {
                    "metadata": {"labels": {"from": name}},
                    "spec": {
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {"name": "c", "image": "busybox", "command": command}
                                ],
                            }
                        }
                    },
                },
            },
        }
    )


def _cj(plane: ControlPlane, name: str) -> CronJob:
    cj = plane.store.get("CronJob", f"default/{name}")
    assert isinstance(cj, CronJob)
    return cj


def _jobs(plane: ControlPlane) -> list[str]:
    return sorted(j.name for j in plane.store.list("Job"))


def test_cronjob_starts_jobs_on_schedule() -> None:
    plane, clock = _plane()
    plane.apply([_cronjob("tick", "*/5 * * * *", ["sleep", "30"])])
    plane.run_until_idle()
    cj = _cj(plane, "tick")
    assert (cj.spec.concurrency_policy, cj.spec.successful_jobs_history_limit) == ("Allow", 3)
    assert _jobs(plane) == []
    _step(plane, clock, 299)
    assert _jobs(plane) == []
    _step(plane, clock, 1)
    minutes = int((T0 + 300) // 60)
    assert _jobs(plane) == [f"tick-{minutes}"]
    job = _get(plane, f"tick-{minutes}")
    assert (
        job.metadata.annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"]
        == "2026-01-01T00:05:00Z"
    )
    assert job.labels["from"] == "tick" and job.metadata.controller_ref() is not None
    cj = _cj(plane, "tick")
    assert cj.status.last_schedule_time == "2026-01-01T00:05:00Z"
    assert [r["name"] for r in cj.status.active] == [f"tick-{minutes}"]
    _step(plane, clock, 30)  # the Job completes
    cj = _cj(plane, "tick")
    assert cj.status.active == [] and cj.status.last_successful_time == "2026-01-01T00:05:30Z"


def test_forbid_replace_and_history() -> None:
    plane, clock = _plane()
    plane.apply(
        [
            _cronjob("f", "@hourly", ["sleep", "infinity"], concurrencyPolicy="Forbid"),
            _cronjob("r", "@hourly", ["sleep", "infinity"], concurrencyPolicy="Replace"),
            _cronjob("h", "@hourly", ["true"], successfulJobsHistoryLimit=2),
        ]
    )
    plane.run_until_idle()
    for _ in range(4):
        _step(plane, clock, 3600)
    jobs = _jobs(plane)
    hours = [int((T0 + 3600 * k) // 60) for k in (1, 2, 3, 4)]
    assert [j for j in jobs if j.startswith("f-")] == [f"f-{hours[0]}"]  # the first still runs
    assert [j for j in jobs if j.startswith("r-")] == [f"r-{hours[3]}"]  # each replaced the last
    assert [j for j in jobs if j.startswith("h-")] == [f"h-{hours[2]}", f"h-{hours[3]}"]


def test_starting_deadline_and_time_zone() -> None:
    plane, clock = _plane()
    plane.apply(
        [
            # 09:00 in Tokyo is 00:00 UTC: the FakeClock starts there, the next is a day on
            _cronjob("tz", "0 9 * * *", ["true"], timeZone="Asia/Tokyo"),
            _cronjob("late", "0 * * * *", ["true"], startingDeadlineSeconds=60),
        ]
    )
    plane.run_until_idle()
    # the control plane was away for 90 minutes: 01:00 is more than 60 s late, missed
    clock.advance(5400)
    plane.run_until_idle()
    assert [j for j in _jobs(plane) if j.startswith("late-")] == []
    _step(plane, clock, 1800)  # 02:00 exactly
    assert [j for j in _jobs(plane) if j.startswith("late-")] == [f"late-{int((T0 + 7200) // 60)}"]
    assert [j for j in _jobs(plane) if j.startswith("tz-")] == []
    _step(plane, clock, 86400 - 7200)
    (tz,) = [j for j in _jobs(plane) if j.startswith("tz-")]
    assert tz == f"tz-{int((T0 + 86400) // 60)}"
    assert _get(plane, tz).metadata.annotations[
        "batch.kubernetes.io/cronjob-scheduled-timestamp"
    ] == ("2026-01-02T09:00:00+09:00")


@pytest.mark.parametrize(
    ("schedule", "spec", "error"),
    [
        (
            "* * * *",
            {},
            'spec.schedule: Invalid value: "* * * *": expected exactly 5 fields, found 4',
        ),
        ("61 * * * *", {}, 'spec.schedule: Invalid value: "61 * * * *"'),
        (
            "TZ=UTC * * * * *",
            {},
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        ),
        ("@every 1h", {}, "svclab does not evaluate @every schedules"),
        (
            "* * * * *",
            {"timeZone": "Mars/Olympus"},
            'spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone',
        ),
        (
            "* * * * *",
            {"concurrencyPolicy": "Sometimes"},
            'spec.concurrencyPolicy: Unsupported value: "Sometimes"',
        ),
    ],
)
def test_cronjob_validation(schedule: str, spec: dict[str, Any], error: str) -> None:
    plane, _ = _plane()
    with pytest.raises(InvalidError) as e:
        plane.apply([_cronjob("v", schedule, ["true"], **spec)])
    assert error in str(e.value)
