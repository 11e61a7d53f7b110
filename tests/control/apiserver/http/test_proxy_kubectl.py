"""services/proxy, pods/proxy and nodes/proxy against a real ``svclab serve`` on the
emulator, driven by the real kubectl: ``kubectl get --raw .../proxy/`` and ``kubectl
proxy``. The answer is the pod server model's ``<ns/pod> <peer ip> <peer port>``, the
peer being the address the control-plane node's connection comes from as the emulated
dataplane routes it (what ``svclab trace`` from that node says the pod sees). No
endpoints: 503 with kube-apiserver's message; a node's kubelet answers /healthz and
/pods from the store. Debian's kubectl 1.20 reaches a Service the same way."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest
from serving import KUBECTL, WEB, Served, kubectl_1_20

pytestmark = pytest.mark.slow

EXTRA = """\
apiVersion: v1
kind: Service
metadata: {name: web2}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: empty}
spec:
  selector: {app: nothing}
  ports: [{name: http, port: 80}]
"""
ANSWER = re.compile(r"^default/(web-\S+) (\d+\.\d+\.\d+\.\d+) (\d+)\n$")
PROXY = "/api/v1/namespaces/default/services"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("proxy") / "state")
    try:
        s.start()
        s.kubectl("apply", "-f", str(WEB))
        s.kubectl("apply", "-f", "-", input=EXTRA)
        deadline = time.monotonic() + 60
        while len(s.kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout.split()) < 3:
            assert time.monotonic() < deadline, "the web pods never came"
            time.sleep(0.2)
        s.kubectl("wait", "--for=condition=Ready", "pod", "-l", "app=web", "--timeout=60s")
        yield s
    finally:
        s.stop()


def _pods(srv: Served) -> dict[str, dict[str, str]]:
    doc = json.loads(srv.kubectl("get", "pods", "-l", "app=web", "-o", "json").stdout)
    return {
        p["metadata"]["name"]: {"ip": p["status"]["podIP"], "node": p["spec"]["nodeName"]}
        for p in doc["items"]
    }


_SEEN: dict[tuple[str, str], str] = {}


def _seen_from_control_plane(srv: Served, ip: str) -> str:
    """The source address pod ``ip`` sees for a connection from the control-plane node
    (node-1 carries the apiserver address), as ``svclab trace`` walks it (once a pod)."""
    key = (str(srv.state), ip)
    if key not in _SEEN:
        _SEEN[key] = _trace_source(srv, ip)
    return _SEEN[key]


def _trace_source(srv: Served, ip: str) -> str:
    out = srv.svclab("trace", "--from", "node/node-1", "--to", f"{ip}:8080", "-o", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["verdict"] == "delivered", doc
    return str(doc["source_seen"])


def _check_answer(srv: Served, text: str, pod: str | None = None) -> str:
    m = ANSWER.match(text)
    assert m is not None, text
    pods = _pods(srv)
    assert m.group(1) in pods, (text, sorted(pods))
    if pod is not None:
        assert m.group(1) == pod
    assert m.group(2) == _seen_from_control_plane(srv, pods[m.group(1)]["ip"])
    return m.group(1)


def test_get_raw_service_proxy_reaches_an_endpoint(srv: Served) -> None:
    answered = set()
    for _ in range(12):
        out = srv.kubectl("get", "--raw", f"{PROXY}/web:80/proxy/").stdout
        answered.add(_check_answer(srv, out))
    # kube-apiserver picks a ready endpoint at random: several of the three answer
    assert len(answered) >= 2, answered
    out = srv.kubectl("get", "--raw", f"{PROXY}/web:http/proxy/some/path?x=1").stdout
    _check_answer(srv, out)


def test_get_raw_pod_proxy_reaches_that_pod(srv: Served) -> None:
    for name in sorted(_pods(srv)):
        out = srv.kubectl("get", "--raw", f"/api/v1/namespaces/default/pods/{name}:8080/proxy/")
        _check_answer(srv, out.stdout, name)
        first_port = srv.kubectl("get", "--raw", f"/api/v1/namespaces/default/pods/{name}/proxy/")
        _check_answer(srv, first_port.stdout, name)


def test_kubectl_proxy_forwards_to_services(srv: Served) -> None:
    proc = subprocess.Popen(
        [KUBECTL, "--kubeconfig", str(srv.kubeconfig), "proxy", "--port=0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"Starting to serve on 127\.0\.0\.1:(\d+)", line)
        assert m is not None, line
        base = f"http://127.0.0.1:{m.group(1)}{PROXY}"
        # web2's only port has no name: the Service's name alone reaches it
        with urllib.request.urlopen(f"{base}/web2/proxy/", timeout=30) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
            _check_answer(srv, resp.read().decode())
        # no trailing slash: redirected to .../proxy/ (301), which urllib follows
        with urllib.request.urlopen(f"{base}/web:http/proxy", timeout=30) as resp:
            assert resp.url.endswith("/web:http/proxy/")
            _check_answer(srv, resp.read().decode())
    finally:
        proc.terminate()
        proc.wait(10)


def test_no_endpoints_and_a_wrong_port_are_refused_as_upstream(srv: Served) -> None:
    out = srv.kubectl("get", "--raw", f"{PROXY}/empty:80/proxy/", check=False)
    assert out.returncode != 0
    assert 'no endpoints available for service "empty"' in out.stderr
    code, body, _ = srv.raw("GET", f"{PROXY}/empty:80/proxy/")
    assert code == 503 and isinstance(body, dict)
    assert (body["reason"], body["message"]) == (
        "ServiceUnavailable",
        'no endpoints available for service "empty"',
    )
    # web's port is named http: without a port name no endpoint port matches
    code, body, _ = srv.raw("GET", f"{PROXY}/web/proxy/")
    assert (code, body["message"]) == (503, 'no endpoints available for service "web"')  # type: ignore[index]
    code, body, _ = srv.raw("GET", f"{PROXY}/web:81/proxy/")
    assert (code, body["message"]) == (503, 'no service port 81 found for service "web"')  # type: ignore[index]
    # a port nothing listens on: the dialer's error
    name, pod = sorted(_pods(srv).items())[0]
    code, body, _ = srv.raw("GET", f"/api/v1/namespaces/default/pods/{name}:80/proxy/")
    assert code == 503 and isinstance(body, dict)
    assert body["message"] == (
        f"error trying to reach service: dial tcp {pod['ip']}:80: connect: connection refused"
    )
    # https to a pod server that speaks plain HTTP
    code, body, _ = srv.raw("GET", f"{PROXY}/https:web:80/proxy/")
    assert (code, body["message"]) == (  # type: ignore[index]
        503,
        "error trying to reach service: tls: first record does not look like a TLS handshake",
    )


def test_node_proxy_answers_kubelets_healthz_and_pods(srv: Served) -> None:
    assert srv.kubectl("get", "--raw", "/api/v1/nodes/node-1/proxy/healthz").stdout == "ok"
    doc = json.loads(srv.kubectl("get", "--raw", "/api/v1/nodes/node-1/proxy/pods").stdout)
    assert doc["kind"] == "PodList"
    listed = sorted(i["metadata"]["name"] for i in doc["items"])
    everywhere = json.loads(srv.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    mine = sorted(
        p["metadata"]["name"] for p in everywhere if p["spec"].get("nodeName") == "node-1"
    )
    assert listed == mine and listed
    code, body, _ = srv.raw("GET", "/api/v1/nodes/node-1/proxy/stats/summary")
    assert (code, body) == (404, "404 page not found\n")
    code, body, _ = srv.raw("GET", "/api/v1/nodes/nope/proxy/healthz")
    assert (code, body["message"]) == (404, 'nodes "nope" not found')  # type: ignore[index]


def test_kubectl_1_20_get_raw_service_proxy(srv: Served) -> None:
    binary, why = kubectl_1_20()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no kubectl 1.20 under CI=true: {why}", pytrace=False)
        pytest.skip(why)
    out = srv.kubectl("get", "--raw", f"{PROXY}/web:80/proxy/", binary=binary).stdout
    _check_answer(srv, out)
