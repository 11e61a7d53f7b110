"""Probes and graceful termination on a served cluster (a real ``svclab serve``, its live
control plane, the real kubectl): a readiness probe's failure takes the endpoint out
(``svclab pod fail`` or the pod server's toggle through ``kubectl exec``), a liveness
probe's failure restarts the container into CrashLoopBackOff, bad probes get
kube-apiserver's 422, and a deleted pod serves as terminating for its grace period,
reached through kube-proxy's terminating fallback when it is the only endpoint."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from kubernetes import client, config
from serving import Served

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: lab}
spec: {nodes: 2}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: agnhost
        ports: [{name: http, containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /readyz, port: http}
          periodSeconds: 1
          failureThreshold: 2
        livenessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 1
          failureThreshold: 2
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: solo, labels: {app: solo}}
spec:
  containers:
  - name: c
    image: agnhost
    ports: [{containerPort: 8080}]
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
    lifecycle:
      preStop:
        exec: {command: [sleep, "30"]}
---
apiVersion: v1
kind: Service
metadata: {name: solo}
spec:
  selector: {app: solo}
  ports: [{port: 80, targetPort: 8080}]
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("probes") / "state")
    try:
        s.start()
        s.kubectl("apply", "-f", "-", input=MANIFEST)
        deadline = time.monotonic() + 60
        while len(s.kubectl("get", "pods", "-o", "name").stdout.split()) < 3:
            assert time.monotonic() < deadline, "the pods never came"
            time.sleep(0.2)
        s.kubectl("wait", "--for=condition=Ready", "pod", "--all", "--timeout=60s")
        yield s
    finally:
        s.stop()


def _web_pods(s: Served) -> list[str]:
    out = s.kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout.split()
    return sorted(p.split("/", 1)[1] for p in out)


def _endpoints(s: Served, service: str) -> dict[str, dict[str, bool]]:
    """pod name -> its endpoint's conditions in the Service's EndpointSlices."""
    out = s.kubectl(
        "get", "endpointslices", "-l", f"kubernetes.io/service-name={service}", "-o", "json"
    ).stdout
    got: dict[str, dict[str, bool]] = {}
    for sl in json.loads(out)["items"]:
        for e in sl.get("endpoints") or []:
            got[e["targetRef"]["name"]] = e["conditions"]
    return got


def _wait(what: str, check: object, timeout: float = 20) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _curl(s: Served, pod: str, url: str, *extra: str) -> str:
    return s.kubectl("exec", pod, "--", "curl", "-s", *extra, url).stdout


def test_bad_probes_are_refused_with_kube_apiservers_wording(srv: Served) -> None:
    bad = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bad"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "livenessProbe": {"tcpSocket": {"port": 80}, "successThreshold": 2},
                }
            ]
        },
    }
    out = srv.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode == 1
    assert "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1" in (
        out.stderr
    )
    c = bad["spec"]["containers"][0]  # type: ignore[index]
    c["livenessProbe"] = {"tcpSocket": {"port": 80}, "exec": {"command": ["true"]}}
    out = srv.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert (
        "spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type"
        in out.stderr
    )
    c["livenessProbe"] = {"periodSeconds": 1}
    out = srv.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert (
        "spec.containers[0].livenessProbe: Required value: must specify a handler type"
        in out.stderr
    )
    assert srv.kubectl("get", "pod", "bad", check=False).returncode == 1  # nothing stored
    # defaults as kube-apiserver writes them
    web = _web_pods(srv)[0]
    spec = json.loads(srv.kubectl("get", "pod", web, "-o", "json").stdout)["spec"]
    probe = spec["containers"][0]["readinessProbe"]
    assert probe == {
        "httpGet": {"path": "/readyz", "port": "http", "scheme": "HTTP"},
        "periodSeconds": 1,
        "failureThreshold": 2,
        "successThreshold": 1,
        "timeoutSeconds": 1,
    }


def test_readiness_failure_takes_the_endpoint_out_of_the_rules(srv: Served) -> None:
    a, b = _web_pods(srv)
    ip = json.loads(srv.kubectl("get", "pod", a, "-o", "json").stdout)["status"]["podIP"]
    assert _endpoints(srv, "web")[a]["ready"] is True
    out = srv.svclab("pod", "fail", a, "--probe", "readiness")
    assert out.returncode == 0, out.stderr
    _wait("the endpoint unready", lambda: _endpoints(srv, "web")[a]["ready"] is False)
    assert _endpoints(srv, "web")[a]["serving"] is False
    pod = json.loads(srv.kubectl("get", "pod", a, "-o", "json").stdout)
    conds = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conds["Ready"] == "False" and conds["ContainersReady"] == "False"
    events = srv.kubectl("get", "events", "--field-selector", f"involvedObject.name={a}").stdout
    assert "Readiness probe failed: HTTP probe failed with statuscode: 503" in events
    # the Service's rules lose it; the other pod answers every request
    node = pod["spec"]["nodeName"]
    rules = srv.svclab("rules", "--node", node)
    assert rules.returncode == 0, rules.stderr
    assert f"{ip}:8080" not in rules.stdout
    for _ in range(6):
        assert _curl(srv, b, "http://web").startswith(f"default/{b} ")
    # healed: back in
    assert srv.svclab("pod", "heal", a).returncode == 0
    _wait("the endpoint ready again", lambda: _endpoints(srv, "web")[a]["ready"] is True)
    assert f"{ip}:8080" in srv.svclab("rules", "--node", node).stdout


def test_the_pod_servers_toggle_through_kubectl_exec(srv: Served) -> None:
    a, _ = _web_pods(srv)
    assert _curl(srv, a, "http://localhost:8080/readyz") == "ok\n"
    assert _curl(srv, a, "http://localhost:8080/readyz/fail", "-X", "POST") == "ok\n"
    assert (
        _curl(srv, a, "http://localhost:8080/readyz", "-o", "/dev/null", "-w", "%{http_code}")
        == "503"
    )
    _wait("the endpoint unready", lambda: _endpoints(srv, "web")[a]["ready"] is False)
    _curl(srv, a, "http://localhost:8080/readyz/heal", "-X", "POST")
    _wait("the endpoint ready again", lambda: _endpoints(srv, "web")[a]["ready"] is True)


def test_liveness_failure_restarts_into_crash_loop_back_off(srv: Served) -> None:
    _, b = _web_pods(srv)
    assert srv.svclab("pod", "fail", b, "--probe", "liveness").returncode == 0

    def crash_looping() -> bool:
        line = srv.kubectl("get", "pod", b, "--no-headers").stdout.split()
        return line[2] == "CrashLoopBackOff" and int(line[3]) >= 1

    _wait("CrashLoopBackOff", crash_looping, timeout=30)
    pod = json.loads(srv.kubectl("get", "pod", b, "-o", "json").stdout)
    cs = pod["status"]["containerStatuses"][0]
    assert cs["lastState"]["terminated"]["exitCode"] == 137
    events = srv.kubectl("get", "events", "--field-selector", f"involvedObject.name={b}").stdout
    assert "Container web failed liveness probe, will be restarted" in events
    assert "Back-off restarting failed container web" in events
    assert srv.svclab("pod", "heal", b).returncode == 0
    # after the 10 s back-off it runs again, and stays
    _wait(
        "running again",
        lambda: srv.kubectl("get", "pod", b, "--no-headers").stdout.split()[2] == "Running",
        timeout=30,
    )
    srv.kubectl("wait", "--for=condition=Ready", "pod", b, "--timeout=30s")


def test_a_deleted_pod_serves_as_terminating_for_its_grace_period(srv: Served) -> None:
    a, _ = _web_pods(srv)
    assert _curl(srv, a, "http://solo").startswith("default/solo ")
    t0 = time.monotonic()
    srv.kubectl("delete", "pod", "solo", "--grace-period=6", "--wait=false")
    _wait("terminating", lambda: _endpoints(srv, "solo").get("solo", {}).get("terminating") is True)
    assert _endpoints(srv, "solo")["solo"] == {"ready": False, "serving": True, "terminating": True}
    # no ready endpoint left: kube-proxy falls back to the serving, terminating one
    assert _curl(srv, a, "http://solo").startswith("default/solo ")
    assert srv.kubectl("get", "pod", "solo", check=False).returncode == 0  # still there
    _wait(
        "the pod gone",
        lambda: srv.kubectl("get", "pod", "solo", check=False).returncode != 0,
        timeout=20,
    )
    assert time.monotonic() - t0 >= 5


HELD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: held}}}}
spec:
  terminationGracePeriodSeconds: 45
  containers:
  - name: c
    image: agnhost
    lifecycle:
      preStop:
        exec: {{command: [sleep, "300"]}}
"""


def test_a_deleted_pods_deletion_timestamp_is_when_its_grace_period_ends(srv: Served) -> None:
    """As kube-apiserver sets it: deletionTimestamp = the time of the delete plus the
    grace period (DeleteOptions' gracePeriodSeconds, else the pod's
    terminationGracePeriodSeconds), and deletionGracePeriodSeconds that period; read
    from the official client's delete response and a later read."""
    for name in ("held-a", "held-b"):
        srv.kubectl("apply", "-f", "-", input=HELD.format(name=name))
    srv.kubectl("wait", "--for=condition=Ready", "pod", "held-a", "held-b", "--timeout=60s")
    core = client.CoreV1Api(config.new_client_from_config(str(srv.kubeconfig)))
    try:
        for name, grace, body in (
            ("held-a", 12, client.V1DeleteOptions(grace_period_seconds=12)),
            ("held-b", 45, None),  # the pod's own terminationGracePeriodSeconds
        ):
            before = int(time.time())
            marked = core.delete_namespaced_pod(name, "default", body=body)
            after = int(time.time()) + 1
            ts = int(marked.metadata.deletion_timestamp.timestamp())
            assert before + grace <= ts <= after + grace, (name, before, ts, after)
            assert marked.metadata.deletion_grace_period_seconds == grace
            read = core.read_namespaced_pod(name, "default")
            assert read.metadata.deletion_timestamp == marked.metadata.deletion_timestamp
            assert read.metadata.deletion_grace_period_seconds == grace
    finally:
        for name in ("held-a", "held-b"):
            srv.kubectl("delete", "pod", name, "--grace-period=0", "--force", check=False)
        core.api_client.close()
