"""``svclab apply`` of a Job next to a Service that selects its pod: the Job's pod runs
to completion in the apply's own convergence, leaves the Service's endpoints, and a
trace to the Service reaches only the server pod."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from app.cli.main import cli

APP = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: jobs}
spec: {nodes: 1, dns: false}
---
apiVersion: v1
kind: Service
metadata: {name: work}
spec:
  selector: {app: work}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: server, labels: {app: work}}
spec:
  containers: [{name: c, image: nginx, ports: [{containerPort: 8080}]}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  template:
    metadata: {labels: {app: work}}
    spec:
      restartPolicy: Never
      containers:
      - {name: c, image: busybox, command: [sh, -c, "exit 0"], ports: [{containerPort: 8080}]}
"""


def run(state: Path, *args: str, code: int = 0) -> Result:
    res = CliRunner().invoke(cli, ["--state", str(state), *args])
    assert res.exit_code == code, res.output
    return res


def _pods(state: Path) -> dict[str, tuple[str, str]]:
    rows = run(state, "get", "pods", "-o", "wide").output.splitlines()[1:]
    return {r.split()[0]: (r.split()[2], r.split()[5]) for r in rows}


def test_apply_job_completes_and_leaves_the_endpoints(tmp_path: Path) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(APP)
    state = tmp_path / "st"
    out = run(state, "apply", "-f", str(app)).output
    assert "job/once created" in out
    pods = _pods(state)
    (job_pod,) = [n for n in pods if n.startswith("once-")]
    assert pods[job_pod][0] == "Succeeded" and pods["server"][0] == "Running"
    server_ip, job_ip = pods["server"][1], pods[job_pod][1]
    slices = run(state, "get", "endpointslices", "-o", "json").output
    assert server_ip in slices and job_ip not in slices  # not even as a not-ready endpoint
    trace = run(
        state, "trace", "--from", "node/node-1", "--to", "svc/default/work:80", "--all"
    ).output
    assert f"endpoints: {server_ip}:8080 (1.0000)" in trace
    assert job_ip not in trace


def test_apply_refuses_a_job_that_would_restart_forever(tmp_path: Path) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(APP.replace("restartPolicy: Never", "restartPolicy: Always"))
    out = run(tmp_path / "st", "apply", "-f", str(app), code=1).output
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Always"' in out
    assert "Job/once" in out or "once" in out
