"""exec and port-forward over WebSocket against a real ``svclab serve`` on the emulator:
the real kubectl 1.32 (which opens exec as a v5.channel.k8s.io WebSocket) runs the
emulated pod's tools and exits with the command's exit code, and attaches to a pod (its
server's access records as they are written); the official Python
client's ``stream`` (non-interactive, and interactive with stdin written and closed)
and ``portforward`` (raw bytes, and HTTP through the forwarded socket) reach the pod
server model."""

from __future__ import annotations

import http.client
import json
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import IO

import pytest
from kubernetes import client, config
from kubernetes.stream import portforward, stream
from serving import KUBECTL, WEB, Served

pytestmark = pytest.mark.slow

CLIENT = """\
apiVersion: v1
kind: Pod
metadata: {name: client, labels: {app: client}}
spec:
  containers:
  - name: client
    image: registry.k8s.io/e2e-test-images/agnhost:2.47
    args: [pause]
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("wsexec") / "state")
    try:
        s.start()
        s.kubectl("apply", "-f", str(WEB))
        s.kubectl("apply", "-f", "-", input=CLIENT)
        deadline = time.monotonic() + 60
        while len(s.kubectl("get", "pods", "-o", "name").stdout.split()) < 4:
            assert time.monotonic() < deadline, "the pods never came"
            time.sleep(0.2)
        s.kubectl("wait", "--for=condition=Ready", "pod", "--all", "--timeout=60s")
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def core(srv: Served) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(srv.kubeconfig)))


def _pod(srv: Served, name: str) -> dict:  # type: ignore[type-arg]
    return json.loads(srv.kubectl("get", "pod", name, "-o", "json").stdout)  # type: ignore[no-any-return]


def _web_pods(srv: Served) -> list[dict]:  # type: ignore[type-arg]
    out = srv.kubectl("get", "pods", "-l", "app=web", "-o", "json").stdout
    return json.loads(out)["items"]  # type: ignore[no-any-return]


# ---------------------------------------------------------------- kubectl 1.32


def test_kubectl_exec_ip_addr(srv: Served) -> None:
    ip = _pod(srv, "client")["status"]["podIP"]
    out = srv.kubectl("exec", "client", "--", "ip", "addr")
    assert out.returncode == 0
    assert "1: lo: <LOOPBACK,UP,LOWER_UP>" in out.stdout
    assert f"inet {ip}/" in out.stdout


def test_kubectl_exec_curl_a_service(srv: Served) -> None:
    ip = _pod(srv, "client")["status"]["podIP"]
    names = {p["metadata"]["name"] for p in _web_pods(srv)}
    out = srv.kubectl("exec", "client", "--", "curl", "-s", "web")
    # the pod server model's answer: <ns/pod> <peer ip> <peer port>
    who, peer, port = out.stdout.split()
    assert who.removeprefix("default/") in names
    assert peer == ip and port.isdigit()


def test_kubectl_exec_exit_codes(srv: Served) -> None:
    out = srv.kubectl("exec", "client", "--", "frobnicate", check=False)
    assert out.returncode == 127
    assert "sh: frobnicate: not found in an emulated pod" in out.stderr
    assert "command terminated with exit code 127" in out.stderr
    web_ip = _web_pods(srv)[0]["status"]["podIP"]
    out = srv.kubectl("exec", "client", "--", "curl", "-s", f"{web_ip}:9999", check=False)
    assert out.returncode == 7  # connection refused: the pod has nothing on 9999
    assert "command terminated with exit code 7" in out.stderr


def test_kubectl_exec_stdin_is_delivered_and_closed(srv: Served) -> None:
    # `cat` without a file copies stdin until its end: kubectl must deliver the piped
    # bytes and close stdin (v5's close signal), or cat never ends
    out = srv.kubectl("exec", "-i", "client", "--", "cat", input="one\ntwo\n", timeout=30)
    assert out.stdout == "one\ntwo\n"


def test_kubectl_exec_wrong_container_is_refused_on_the_websocket(srv: Served) -> None:
    # kube-apiserver answers the WebSocket handshake 400; kubectl logs that answer at
    # -v=4 and falls back to SPDY, whose answer it then prints
    out = srv.kubectl("exec", "client", "-c", "nope", "-v=4", "--", "ip", "addr", check=False)
    assert out.returncode != 0
    assert (
        "RemoteCommand fallback: unable to upgrade streaming request: "
        "container nope is not valid for pod client"
    ) in out.stderr


def _line(f: IO[str], timeout: float = 15) -> str:
    """The next line of ``f``, or "" after ``timeout`` seconds."""
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: got.put(f.readline()), daemon=True).start()
    try:
        return got.get(timeout=timeout)
    except queue.Empty:
        return ""


def test_kubectl_attach_shows_the_pod_servers_output(srv: Served) -> None:
    web = _web_pods(srv)[0]
    name, ip = web["metadata"]["name"], web["status"]["podIP"]
    client_ip = _pod(srv, "client")["status"]["podIP"]
    # output from before the attach is not the attach's (kubectl logs shows it)
    srv.kubectl("exec", "client", "--", "curl", "-s", f"{ip}:8080/before")
    cmd = [KUBECTL, "--kubeconfig", str(srv.kubeconfig), "attach", name]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None and proc.stdout is not None
        # kubectl's prompt hint comes once the stream is up
        assert "If you don't see a command prompt" in _line(proc.stderr)
        srv.kubectl("exec", "client", "--", "curl", "-s", f"{ip}:8080/attached")
        line = _line(proc.stdout)
        assert line.startswith(f"{client_ip}:")
        assert f'-> {ip}:8080 "GET /attached HTTP/1.1" 200' in line
    finally:
        proc.terminate()
        proc.wait(10)


# ---------------------------------------------------------------- the Python client


def test_python_client_stream(core: client.CoreV1Api) -> None:
    out = stream(
        core.connect_get_namespaced_pod_exec,
        "client",
        "default",
        command=["hostname"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    assert out == "client\n"


def test_python_client_interactive_stdin_and_returncode(core: client.CoreV1Api) -> None:
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        "client",
        "default",
        command=["cat"],
        stderr=True,
        stdin=True,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    try:
        assert resp.subprotocol == "v5.channel.k8s.io"
        resp.write_stdin("hello pod\n")
        out = ""
        deadline = time.monotonic() + 10
        while "hello pod\n" not in out and time.monotonic() < deadline:
            resp.update(timeout=1)
            out += resp.read_stdout()
        assert out == "hello pod\n"
        resp.close_channel(0)  # stdin's end: cat exits 0
        resp.run_forever(timeout=10)
        assert not resp.is_open()
        assert resp.returncode == 0
    finally:
        resp.close()


def test_python_client_nonzero_returncode(core: client.CoreV1Api) -> None:
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        "client",
        "default",
        command=["cat", "/etc/shadow"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=10)
    assert resp.returncode == 1
    assert "cat: /etc/shadow:" in resp.read_stderr()


def _web(srv: Served) -> str:
    return str(_web_pods(srv)[0]["metadata"]["name"])


def test_python_client_portforward_raw(srv: Served, core: client.CoreV1Api) -> None:
    pod = _web(srv)
    pf = portforward(core.connect_get_namespaced_pod_portforward, pod, "default", ports="8080")
    sock = pf.socket(8080)
    sock.settimeout(10)
    sock.sendall(b"GET /hostname HTTP/1.1\r\nHost: web\r\n\r\n")
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    # kubelet connects from inside the pod: the server sees localhost
    who, peer, port = body.decode().split()
    assert (who, peer) == (f"default/{pod}", "127.0.0.1") and port.isdigit()
    assert pf.error(8080) is None


def test_python_client_portforward_http(srv: Served, core: client.CoreV1Api) -> None:
    pod = _web(srv)
    pf = portforward(core.connect_get_namespaced_pod_portforward, pod, "default", ports="8080")
    conn = http.client.HTTPConnection("web", 8080, timeout=10)
    sock = pf.socket(8080)
    sock.settimeout(10)
    conn.sock = sock  # type: ignore[assignment]
    conn.request("GET", "/")
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.read().decode().startswith(f"default/{pod} 127.0.0.1 ")


def test_python_client_portforward_refused_port(srv: Served, core: client.CoreV1Api) -> None:
    pod = _web(srv)
    pf = portforward(core.connect_get_namespaced_pod_portforward, pod, "default", ports="9999")
    sock = pf.socket(9999)
    sock.settimeout(10)
    assert sock.recv(100) == b""
    err = pf.error(9999)
    assert err is not None
    assert err.startswith("error forwarding port 9999 to pod ")
    assert "failed to connect to localhost:9999 inside namespace" in err
