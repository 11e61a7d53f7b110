"""Deployment rollouts and ReplicationControllers with the real kubectl (on PATH) and the
official kubernetes Python client against a real ``svclab serve``: ``kubectl wait
--for=condition=Available``, ``rollout status/history/undo/pause/resume``, a rollout
that exceeds its progress deadline, and an RC scaled and serving a Service."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from serving import WEB, Served

pytestmark = pytest.mark.slow

STUCK = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: stuck}
spec:
  replicas: 1
  progressDeadlineSeconds: 2
  selector: {matchLabels: {app: stuck}}
  template:
    metadata: {labels: {app: stuck}}
    spec:
      nodeSelector: {no-such: node}
      containers: [{name: c, image: nginx}]
"""

RC = """
apiVersion: v1
kind: ReplicationController
metadata: {name: legacy}
spec:
  replicas: 1
  template:
    metadata: {labels: {app: legacy}}
    spec:
      containers: [{name: c, image: nginx, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: legacy}
spec:
  selector: {app: legacy}
  ports: [{port: 80, targetPort: 8080}]
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("serve") / "state")
    try:
        s.start()
        s.kubectl("apply", "-f", str(WEB))
        yield s
    finally:
        s.stop()


def _image(srv: Served) -> str:
    return srv.kubectl(
        "get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"
    ).stdout


def test_wait_for_available_and_rollout_status(srv: Served) -> None:
    out = srv.kubectl("wait", "--for=condition=Available", "deploy/web", "--timeout=60s").stdout
    assert "deployment.apps/web condition met" in out
    status = srv.kubectl("rollout", "status", "deploy/web", "--timeout=60s").stdout
    assert 'deployment "web" successfully rolled out' in status
    d = json.loads(srv.kubectl("get", "deploy", "web", "-o", "json").stdout)
    conds = {c["type"]: (c["status"], c["reason"]) for c in d["status"]["conditions"]}
    assert conds == {
        "Available": ("True", "MinimumReplicasAvailable"),
        "Progressing": ("True", "NewReplicaSetAvailable"),
    }
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"


def test_rollout_history_and_undo(srv: Served) -> None:
    srv.kubectl("set", "image", "deploy/web", "web=registry.k8s.io/e2e-test-images/agnhost:2.48")
    srv.kubectl("annotate", "deploy/web", "kubernetes.io/change-cause=agnhost 2.48")
    srv.kubectl("rollout", "status", "deploy/web", "--timeout=60s")
    hist = srv.kubectl("rollout", "history", "deploy/web").stdout
    rows = [line.split(None, 1) for line in hist.splitlines()[2:] if line.strip()]
    assert [r[0] for r in rows] == ["1", "2"], hist
    assert rows[1][1].strip() == "agnhost 2.48"
    out = srv.kubectl("rollout", "undo", "deploy/web").stdout
    assert "deployment.apps/web rolled back" in out
    srv.kubectl("rollout", "status", "deploy/web", "--timeout=60s")
    assert _image(srv).endswith("agnhost:2.47")
    hist = srv.kubectl("rollout", "history", "deploy/web").stdout
    revs = [line.split()[0] for line in hist.splitlines()[2:] if line.strip()]
    assert revs == ["2", "3"], hist  # revision 1's ReplicaSet is revision 3 now
    srv.kubectl("rollout", "undo", "deploy/web", "--to-revision=2")
    srv.kubectl("rollout", "status", "deploy/web", "--timeout=60s")
    assert _image(srv).endswith("agnhost:2.48")
    one = srv.kubectl("rollout", "history", "deploy/web", "--revision=4").stdout
    assert "agnhost:2.48" in one


def test_pause_resume_and_restart(srv: Served) -> None:
    srv.kubectl("rollout", "pause", "deploy/web")
    srv.wait_for(
        ["get", "deploy", "web", "-o", "jsonpath={.status.conditions[*].reason}"],
        "DeploymentPaused",
    )
    srv.kubectl("set", "image", "deploy/web", "web=registry.k8s.io/e2e-test-images/agnhost:2.49")
    time.sleep(1)
    rs = srv.kubectl("get", "rs", "-l", "app=web", "-o", "name").stdout.split()
    assert not any("2.49" in srv.kubectl("get", r, "-o", "yaml").stdout for r in rs)
    srv.kubectl("rollout", "resume", "deploy/web")
    srv.kubectl("rollout", "status", "deploy/web", "--timeout=60s")
    assert _image(srv).endswith("agnhost:2.49")
    before = set(srv.kubectl("get", "rs", "-l", "app=web", "-o", "name").stdout.split())
    srv.kubectl("rollout", "restart", "deploy/web")
    srv.kubectl("rollout", "status", "deploy/web", "--timeout=60s")
    after = set(srv.kubectl("get", "rs", "-l", "app=web", "-o", "name").stdout.split())
    assert after - before, "restart made no new ReplicaSet"


def test_a_stuck_rollout_exceeds_its_progress_deadline(srv: Served) -> None:
    srv.kubectl("apply", "-f", "-", input=STUCK)
    out = srv.kubectl("rollout", "status", "deploy/stuck", "--timeout=60s", check=False)
    assert out.returncode != 0
    assert 'deployment "stuck" exceeded its progress deadline' in out.stderr
    from kubernetes import client, config

    api = client.AppsV1Api(config.new_client_from_config(str(srv.kubeconfig)))
    d = api.read_namespaced_deployment("stuck", "default")
    conds = {c.type: (c.status, c.reason) for c in d.status.conditions}
    assert conds["Progressing"] == ("False", "ProgressDeadlineExceeded")
    assert conds["Available"] == ("False", "MinimumReplicasUnavailable")
    assert d.status.unavailable_replicas == 1 and d.status.updated_replicas == 1


def test_replication_controller_scales_and_serves(srv: Served) -> None:
    srv.kubectl("apply", "-f", "-", input=RC)
    srv.kubectl("wait", "--for=jsonpath={.status.readyReplicas}=1", "rc/legacy", "--timeout=60s")
    rc = json.loads(srv.kubectl("get", "rc", "legacy", "-o", "json").stdout)
    assert rc["spec"]["selector"] == {"app": "legacy"}  # defaulted from the template
    assert srv.kubectl("scale", "rc/legacy", "--replicas=3").stdout.strip() == (
        "replicationcontroller/legacy scaled"
    )
    srv.kubectl(
        "wait", "--for=jsonpath={.status.availableReplicas}=3", "rc/legacy", "--timeout=60s"
    )
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(str(srv.kubeconfig)))
    got = core.read_namespaced_replication_controller("legacy", "default")
    assert got.status.replicas == 3 and got.status.fully_labeled_replicas == 3
    scale = core.read_namespaced_replication_controller_scale("legacy", "default")
    assert scale.spec.replicas == 3 and scale.status.selector == "app=legacy"
    pods = core.list_namespaced_pod("default", label_selector="app=legacy").items
    assert len(pods) == 3
    assert all(p.metadata.owner_references[0].kind == "ReplicationController" for p in pods)
    ips = {p.status.pod_ip for p in pods}
    eps = srv.wait_for(["get", "endpoints", "legacy"], ":8080")
    assert eps.count(":8080") == 3
    # the emulator walks a packet to the Service and lands on one of the RC's pods
    ip = srv.kubectl("get", "svc", "legacy", "-o", "jsonpath={.spec.clusterIP}").stdout
    trace = srv.svclab("trace", "--from", "node/node-1", "--to", f"{ip}:80")
    assert trace.returncode == 0, trace.stderr
    assert any(addr in trace.stdout for addr in ips), trace.stdout
    srv.kubectl("delete", "rc", "legacy")
    deadline = time.monotonic() + 30
    while core.list_namespaced_pod("default", label_selector="app=legacy").items:
        assert time.monotonic() < deadline, "the RC's pods outlived it"
        time.sleep(0.3)
