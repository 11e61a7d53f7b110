"""pods/log against a real ``svclab serve``: the real kubectl 1.32 and Debian's 1.20
(``kubectl logs`` with ``--tail``, ``--since``, ``--timestamps``, ``-c``,
``--limit-bytes``, ``-f`` receiving a record written after it started and ending when
the pod is deleted, ``--previous`` refused with kubelet's words) and the official Python
client's ``read_namespaced_pod_log`` (whole, filtered, refused, and ``follow=True,
_preload_content=False``). The records are written where the emulated runtime keeps
the pod's CRI log (``STATE/pods/<ns>_<pod>_<uid>/<container>/0.log``), in its format."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from serving import KUBECTL, ROOT, WEB, Served, kubectl_1_20

from app.podruntime import cri_record

pytestmark = pytest.mark.slow

PODS = ROOT / "examples" / "pods.yaml"
NS = 1_000_000_000
EXTRA = """\
apiVersion: v1
kind: Pod
metadata: {name: nowhere}
spec:
  nodeSelector: {no-such-label: "x"}
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: two}
spec:
  nodeSelector: {kubernetes.io/hostname: node-2}
  containers: [{name: a, image: busybox}, {name: b, image: busybox}]
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("podlogs") / "state")
    try:
        s.start()
        s.kubectl("apply", "-f", str(WEB), "-f", str(PODS))
        s.kubectl("apply", "-f", "-", input=EXTRA)
        deadline = time.monotonic() + 60
        while len(s.kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout.split()) < 3:
            assert time.monotonic() < deadline, "the web pods never came"
            time.sleep(0.2)
        s.kubectl("wait", "--for=condition=Ready", "pod", "-l", "app=web", "--timeout=60s")
        s.kubectl("wait", "--for=condition=Ready", "pod/client", "pod/two", "--timeout=60s")
        yield s
    finally:
        s.stop()


def web_pods(srv: Served) -> list[dict]:  # type: ignore[type-arg]
    out = srv.kubectl("get", "pods", "-l", "app=web", "-o", "json").stdout
    return sorted(json.loads(out)["items"], key=lambda p: p["metadata"]["name"])


def log_file(srv: Served, pod: dict, container: str) -> Path:  # type: ignore[type-arg]
    m = pod["metadata"]
    d = srv.state / "pods" / f"{m['namespace']}_{m['name']}_{m['uid']}" / container
    d.mkdir(parents=True, exist_ok=True)
    return d / "0.log"


def append(path: Path, text: str, when_ns: int | None = None) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(cri_record(text, when_ns))


def test_kubectl_logs_with_its_filters(srv: Served) -> None:
    pod = web_pods(srv)[0]
    name = pod["metadata"]["name"]
    path = log_file(srv, pod, "web")
    now = time.time_ns()
    append(path, "10.244.1.5:40000 -> 10.244.2.3:8080 old", now - 7200 * NS)
    append(path, "10.244.1.5:40001 -> 10.244.2.3:8080 recent", now - 60 * NS)
    append(path, "10.244.1.5:40002 -> 10.244.2.3:8080 new", now)
    lines = srv.kubectl("logs", name).stdout.splitlines()
    assert [line.rsplit(" ", 1)[1] for line in lines] == ["old", "recent", "new"]
    assert srv.kubectl("logs", name, "-c", "web", "--tail=1").stdout.endswith(" new\n")
    since = srv.kubectl("logs", name, "--since=1h").stdout
    assert since.endswith("recent\n" + lines[2] + "\n") and "old" not in since
    stamped = srv.kubectl("logs", name, "--timestamps", "--tail=2").stdout.splitlines()
    assert [s.split(" ", 1)[1] for s in stamped] == lines[1:]
    assert stamped[1].split(" ", 1)[0].startswith(time.strftime("%Y-%m-%dT", time.gmtime()))
    assert srv.kubectl("logs", name, "--limit-bytes=10").stdout == lines[0][:10]
    half_hour_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1800))
    assert srv.kubectl("logs", name, f"--since-time={half_hour_ago}").stdout == since
    # accepted, and without effect on the text (no TLS hop to a kubelet to skip)
    skip = srv.kubectl("logs", name, "--insecure-skip-tls-verify-backend").stdout
    assert skip.splitlines() == lines
    refused = srv.kubectl("logs", name, "--previous", check=False)
    assert refused.returncode == 1
    assert refused.stderr == (
        "Error from server (BadRequest): previous terminated container "
        f'"web" in pod "{name}" not found\n'
    )
    other = srv.kubectl("logs", web_pods(srv)[1]["metadata"]["name"]).stdout
    assert other == ""  # a running container that logged nothing yet


def test_refusals_before_the_kubelet(srv: Served) -> None:
    def get(path: str) -> tuple[int, object]:
        code, body, _ = srv.raw("GET", "/api/v1/namespaces/default/pods/" + path)
        return code, body

    code, body = get("two/log")
    assert code == 400 and body["message"] == (  # type: ignore[index]
        "a container name must be specified for pod two, choose one of: [a b]"
    )
    assert get("two/log?container=b") == (200, "")
    code, body = get("two/log?container=c")
    assert body["message"] == "container c is not valid for pod two"  # type: ignore[index]
    assert get("nowhere/log")[0] == 204  # not scheduled: kube's empty location
    code, body = get("ghost/log")
    assert code == 404 and body["message"] == 'pods "ghost" not found'  # type: ignore[index]
    code, body = get("client/log?tailLines=-1")
    assert code == 422 and body["message"] == (  # type: ignore[index]
        'PodLogOptions "client" is invalid: tailLines: Invalid value: -1: '
        "must be greater than or equal to 0"
    )


def read_until(proc: subprocess.Popen[bytes], want: bytes, timeout: float) -> bytes:
    """What ``proc`` printed until ``want`` appeared (AssertionError after ``timeout``)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    got = b""
    deadline = time.monotonic() + timeout
    while want not in got:
        left = deadline - time.monotonic()
        assert left > 0, f"{want!r} never came; got {got!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, f"the stream ended before {want!r}; got {got!r}"
            got += chunk
    return got


def follow_case(srv: Served, binary: str, pod: dict) -> None:  # type: ignore[type-arg]
    """``kubectl logs -f`` of ``pod``: the records so far, then one written after it
    started, then the stream ends once the pod is deleted."""
    name = pod["metadata"]["name"]
    path = log_file(srv, pod, "web")
    append(path, f"before {binary}")
    cmd = [binary, "--kubeconfig", str(srv.kubeconfig), "logs", "-f", name]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        read_until(proc, b"before", 20)
        append(path, "written after the follow started")
        read_until(proc, b"written after the follow started\n", 5)
        srv.kubectl("delete", "pod", name, "--wait=false")
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_kubectl_logs_follow_then_the_pod_goes(srv: Served) -> None:
    follow_case(srv, KUBECTL, web_pods(srv)[2])


def test_kubectl_1_20(srv: Served) -> None:
    binary, why = kubectl_1_20()
    if binary is None:
        pytest.skip(f"Debian's kubectl 1.20 is not available: {why}")
    pod = web_pods(srv)[0]
    name = pod["metadata"]["name"]
    append(log_file(srv, pod, "web"), "for kubectl 1.20")
    out = srv.kubectl("logs", name, "--tail=1", "--timestamps", binary=binary).stdout
    assert out.endswith(" for kubectl 1.20\n")
    refused = srv.kubectl("logs", name, "-p", binary=binary, check=False)
    assert "previous terminated container" in refused.stderr
    srv.kubectl("wait", "--for=condition=Ready", "pod", "-l", "app=web", "--timeout=60s")
    follow_case(srv, binary, web_pods(srv)[1])


def test_python_client(srv: Served) -> None:
    pod = web_pods(srv)[0]
    name = pod["metadata"]["name"]
    path = log_file(srv, pod, "web")
    append(path, "python one")
    append(path, "python two")
    api = client.CoreV1Api(config.new_client_from_config(str(srv.kubeconfig)))
    text = api.read_namespaced_pod_log(name, "default", tail_lines=2)
    assert text == "python one\npython two\n"
    # the first 6 bytes of the log (another test of this module may have written to this
    # pod's log first: which pod sorts first depends on the names a replacement got)
    whole = api.read_namespaced_pod_log(name, "default")
    assert whole.endswith(text) and len(whole) > 6
    assert api.read_namespaced_pod_log(name, "default", limit_bytes=6) == whole[:6]
    assert api.read_namespaced_pod_log(name, "default", tail_lines=2, pretty="true") == text
    with pytest.raises(ApiException) as e:
        api.read_namespaced_pod_log(name, "default", since_seconds=0)
    assert e.value.status == 422
    with pytest.raises(ApiException) as e:
        api.read_namespaced_pod_log(name, "default", previous=True)
    assert e.value.status == 400 and "previous terminated container" in (e.value.body or "")
    resp = api.read_namespaced_pod_log(
        name, "default", follow=True, tail_lines=1, _preload_content=False
    )
    try:
        stream = resp.stream(amt=None, decode_content=False)
        assert next(stream) == b"python two\n"
        append(path, "python three")
        assert next(stream) == b"python three\n"
    finally:
        resp.release_conn()
