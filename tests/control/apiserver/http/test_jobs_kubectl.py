"""Jobs and CronJobs with the real kubectl against a real ``svclab serve`` (wall clock):
``kubectl create job``, ``kubectl wait --for=condition=complete``, ``kubectl create
cronjob``, ``kubectl create job --from=cronjob/x``, and kube-apiserver's 422 for a Job
whose pods would restart forever. One server for the module.

``kubectl create job|cronjob`` sends protobuf, whose Job/CronJob messages are not in
``control/apiserver/http/proto.py`` yet: the objects are made by kubectl's own
generators (``--dry-run=client -o json``, the same code path up to the request) and
sent as JSON with ``kubectl create -f -``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from serving import Served

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("serve") / "state")
    try:
        s.start()
        yield s
    finally:
        s.stop()


def _json(srv: Served, *args: str) -> Any:
    return json.loads(srv.kubectl(*args, "-o", "json").stdout)


def _create(srv: Served, *args: str, check: bool = True) -> Any:
    """``kubectl create ARGS``: kubectl's generator, then the object sent as JSON."""
    made = srv.kubectl("create", "--dry-run=client", "-o", "json", *args)
    return srv.kubectl("create", "-f", "-", input=made.stdout, check=check)


def test_kubectl_create_job_and_wait_for_complete(srv: Served) -> None:
    out = _create(srv, "job", "once", "--image=busybox", "--", "sh", "-c", "sleep 1")
    assert out.stdout.strip() == "job.batch/once created"
    job = _json(srv, "get", "job", "once")
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"]["matchLabels"] == {"batch.kubernetes.io/controller-uid": uid}
    assert job["spec"]["backoffLimit"] == 6 and job["spec"]["completions"] == 1
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    waited = srv.kubectl("wait", "--for=condition=complete", "job/once", "--timeout=30s")
    assert waited.stdout.strip() == "job.batch/once condition met"
    job = _json(srv, "get", "job", "once")
    assert job["status"]["succeeded"] == 1
    types = [c["type"] for c in job["status"]["conditions"]]
    assert types == ["SuccessCriteriaMet", "Complete"]
    pods = _json(srv, "get", "pods", "-l", "batch.kubernetes.io/job-name=once")["items"]
    assert [p["status"]["phase"] for p in pods] == ["Succeeded"]
    term = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (0, "Completed")


def test_a_failing_job_fails_with_backoff_limit_exceeded(srv: Served) -> None:
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "fails", "namespace": "default"},
        "spec": {
            "backoffLimit": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["false"]}],
                }
            },
        },
    }
    srv.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    waited = srv.kubectl("wait", "--for=condition=failed", "job/fails", "--timeout=30s")
    assert waited.stdout.strip() == "job.batch/fails condition met"
    job = _json(srv, "get", "job", "fails")
    failed = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert failed[0]["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 2


def test_restart_policy_always_is_refused(srv: Served) -> None:
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "always", "namespace": "default"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        },
    }
    out = srv.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert out.returncode != 0
    assert (
        'spec.template.spec.restartPolicy: Unsupported value: "Always": '
        'supported values: "OnFailure", "Never"'
    ) in out.stderr


def test_kubectl_create_cronjob_and_job_from_it(srv: Served) -> None:
    out = _create(
        srv, "cronjob", "nightly", "--image=busybox", "--schedule=0 3 * * *", "--", "true"
    )
    assert out.stdout.strip() == "cronjob.batch/nightly created"
    cj = _json(srv, "get", "cronjob", "nightly")
    assert cj["spec"]["concurrencyPolicy"] == "Allow"
    assert cj["spec"]["successfulJobsHistoryLimit"] == 3
    out = _create(srv, "job", "manual", "--from=cronjob/nightly")
    assert out.stdout.strip() == "job.batch/manual created"
    job = _json(srv, "get", "job", "manual")
    assert job["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    srv.kubectl("wait", "--for=condition=complete", "job/manual", "--timeout=30s")
    bad = _create(srv, "cronjob", "bad", "--image=busybox", "--schedule=61 * * * *", check=False)
    assert bad.returncode != 0 and 'spec.schedule: Invalid value: "61 * * * *"' in bad.stderr
