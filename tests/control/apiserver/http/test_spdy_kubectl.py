"""kubectl exec, attach and port-forward over SPDY/3.1 against a real ``svclab serve`` on
the emulator: Debian's kubectl 1.20 (SPDY only) and kubectl 1.32 made to use SPDY
(``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false``, ``KUBECTL_PORT_FORWARD_WEBSOCKETS=false``),
plus the refusals before the upgrade, read off the wire with a raw TLS client."""

from __future__ import annotations

import json
import os
import pty
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import KUBECTL, Served, free_port, kubectl_1_20

pytestmark = pytest.mark.slow

SPDY_ENV = {
    "KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false",
    "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false",
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("spdy") / "state")
    try:
        s.start()
        s.apply_web()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def k120() -> str:
    binary, why = kubectl_1_20()
    if binary is None:
        pytest.skip(f"no kubectl 1.20: {why}")
    return binary


def _pods(srv: Served) -> list[dict[str, str]]:
    out = srv.kubectl("get", "pods", "-l", "app=web", "-o", "json").stdout
    return [
        {"name": p["metadata"]["name"], "ip": p["status"]["podIP"]}
        for p in sorted(json.loads(out)["items"], key=lambda p: p["metadata"]["name"])
    ]


# --------------------------------------------------------------------------- exec


def test_exec_output_and_exit_codes_kubectl_1_20(srv: Served, k120: str) -> None:
    pod = _pods(srv)[0]
    out = srv.kubectl("exec", pod["name"], "--", "ip", "addr", binary=k120)
    assert f"inet {pod['ip']}/24" in out.stdout
    assert srv.kubectl("exec", pod["name"], "--", "hostname", binary=k120).stdout == (
        pod["name"] + "\n"
    )
    refused = srv.kubectl(
        "exec", pod["name"], "--", "curl", "-s", "127.0.0.1:1", binary=k120, check=False
    )
    assert refused.returncode == 7, refused.stderr
    assert "command terminated with exit code 7" in refused.stderr
    unknown = srv.kubectl("exec", pod["name"], "--", "frobnicate", binary=k120, check=False)
    assert unknown.returncode == 127
    assert "sh: frobnicate: not found in an emulated pod" in unknown.stderr


def test_exec_stdin_piped_and_closed_kubectl_1_20(srv: Served, k120: str) -> None:
    pod = _pods(srv)[0]["name"]
    text = "hello\nworld\n" + "x" * 200_000 + "\n"  # past SPDY's 64 KiB window
    out = srv.kubectl("exec", "-i", pod, "--", "cat", binary=k120, input=text)
    assert out.stdout == text


def test_exec_container_errors_kubectl_1_20(srv: Served, k120: str) -> None:
    pod = _pods(srv)[0]["name"]
    bad = srv.kubectl("exec", pod, "-c", "nope", "--", "hostname", binary=k120, check=False)
    assert bad.returncode == 1
    assert f"container nope is not valid for pod {pod}" in bad.stderr
    gone = srv.kubectl("exec", "no-such-pod", "--", "hostname", binary=k120, check=False)
    assert gone.returncode == 1 and 'pods "no-such-pod" not found' in gone.stderr


def test_exec_with_a_terminal_kubectl_1_20(srv: Served, k120: str) -> None:
    """``-it`` on a pseudo-terminal: stderr joins stdout and lines end in CRLF."""
    pod = _pods(srv)[0]["name"]
    master, slave = pty.openpty()
    try:
        cmd = [k120, "--kubeconfig", str(srv.kubeconfig), "exec", "-it", pod, "--"]
        got = subprocess.run(
            [*cmd, "cat", "/etc/hosts"], stdin=slave, capture_output=True, timeout=60
        )
        assert got.returncode == 0, got.stderr
        assert b"\r\n" in got.stdout and b"\n" not in got.stdout.replace(b"\r\n", b"")
        err = subprocess.run(
            [*cmd, "curl", "-s", "-S", "127.0.0.1:1"], stdin=slave, capture_output=True, timeout=60
        )
        assert err.returncode == 7
        assert b"curl: (7) Failed to connect" in err.stdout  # stderr, on the terminal
    finally:
        os.close(master)
        os.close(slave)


def test_exec_kubectl_1_32_over_spdy(srv: Served) -> None:
    pod = _pods(srv)[1]["name"]
    out = srv.kubectl("exec", pod, "--", "hostname", env=SPDY_ENV)
    assert out.stdout == pod + "\n"
    refused = srv.kubectl("exec", pod, "--", "curl", "-s", "127.0.0.1:1", env=SPDY_ENV, check=False)
    assert refused.returncode == 7
    piped = srv.kubectl("exec", "-i", pod, "--", "cat", env=SPDY_ENV, input="abc\n")
    assert piped.stdout == "abc\n"


# --------------------------------------------------------------------------- attach


def test_attach_follows_the_pod_server_kubectl_1_20(srv: Served, k120: str, tmp_path: Path) -> None:
    a, b = _pods(srv)[:2]
    log = tmp_path / "attach.out"
    with log.open("wb") as f:
        proc = subprocess.Popen(
            [k120, "--kubeconfig", str(srv.kubeconfig), "attach", a["name"]],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        want = '"GET /attach-probe HTTP/1.1" 200'
        while want not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            srv.kubectl(
                "exec", b["name"], "--", "curl", "-s", f"http://{a['ip']}:8080/attach-probe"
            )
            time.sleep(0.5)
        assert f"{b['ip']}:" in log.read_text()  # the client's address, as the pod saw it
    finally:
        proc.terminate()
        proc.wait(10)


# --------------------------------------------------------------------------- port-forward


def _forward(
    srv: Served, binary: str, target: str, env: dict[str, str]
) -> tuple[subprocess.Popen[str], int]:
    local = free_port()
    proc = subprocess.Popen(
        [binary, "--kubeconfig", str(srv.kubeconfig), "port-forward", target, f"{local}:8080"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("Forwarding from"), line
    return proc, local


def _raw(local: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", local), timeout=10) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


@pytest.mark.parametrize("client", ["1.20", "1.32", "1.32-default"])
def test_port_forward_http_and_raw(srv: Served, k120: str, client: str) -> None:
    """1.32-default: kubectl's own choice (a WebSocket tunnel first, SPDY when the
    WebSocket upgrade is refused)."""
    pod = _pods(srv)[2]["name"]
    binary = k120 if client == "1.20" else KUBECTL
    proc, local = _forward(srv, binary, f"pod/{pod}", {} if "default" in client else SPDY_ENV)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{local}/pf", timeout=10) as resp:
            assert resp.status == 200
            body = resp.read().decode()
        assert re.fullmatch(rf"default/{pod} 127\.0\.0\.1 \d+\n", body), body
        raw = _raw(local, b"ping\n")
        assert re.fullmatch(rf"default/{pod} 127\.0\.0\.1 \d+\n", raw.decode()), raw
        http = _raw(local, b"GET /raw HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert http.startswith(b"HTTP/1.1 200 OK\r\n") and http.endswith(b"\n")
    finally:
        proc.terminate()
        proc.wait(10)


def test_port_forward_to_a_closed_port_reports_kubelet_s_error(srv: Served, k120: str) -> None:
    pod = _pods(srv)[2]["name"]
    local = free_port()
    proc = subprocess.Popen(
        [k120, "--kubeconfig", str(srv.kubeconfig), "port-forward", pod, f"{local}:9999"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("Forwarding from")
        assert _raw(local, b"x") == b""
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
        assert "error forwarding port 9999 to pod" in out
        assert "failed to connect to localhost:9999 inside namespace" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# --------------------------------------------------------------------------- refusals


def _request(
    srv: Served, method: str, path: str, headers: dict[str, str] | list[tuple[str, str]]
) -> tuple[int, dict[str, list[str]], bytes]:
    """One request on a fresh TLS connection as admin: (status, headers, body); for a
    101 the body is empty and the connection is dropped."""
    ctx = srv.ssl_context()
    items = list(headers.items()) if isinstance(headers, dict) else headers
    with (
        socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
    ):
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in items) + "\r\n"
        s.sendall(head.encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            assert chunk, buf
            buf += chunk
        top, body = buf.split(b"\r\n\r\n", 1)
        lines = top.decode().split("\r\n")
        code = int(lines[0].split()[1])
        got: dict[str, list[str]] = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            got.setdefault(k.lower(), []).append(v.strip())
        if code == 101:
            return code, got, b""
        length = int(got.get("content-length", ["0"])[0])
        while len(body) < length:
            body += s.recv(65536)
        return code, got, body


UPGRADE = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}


def test_refusals_before_the_upgrade(srv: Served) -> None:
    pod = _pods(srv)[0]["name"]
    base = f"/api/v1/namespaces/default/pods/{pod}"
    exec_q = f"{base}/exec?command=hostname&stdout=true"
    code, _h, body = _request(srv, "POST", exec_q, {})
    assert (code, json.loads(body)["message"]) == (400, "Upgrade request required")
    code, _h, body = _request(srv, "POST", f"{base}/exec?stdout=true", UPGRADE)
    assert (code, json.loads(body)["message"]) == (400, "you must specify at least 1 command")
    # stdout and stderr are on unless turned off (kube-apiserver's PodExecOptions defaults)
    none = f"{base}/exec?command=hostname&stdout=FALSE&stderr=0"
    code, _h, body = _request(srv, "POST", none, UPGRADE)
    assert (code, body) == (400, b"you must specify at least 1 of stdin, stdout, stderr\n")

    code, _h, body = _request(srv, "POST", exec_q, UPGRADE)
    assert (code, body) == (400, b"unable to upgrade: X-Stream-Protocol-Version is required\n")
    versions = [
        ("X-Stream-Protocol-Version", "v9.channel.k8s.io"),
        ("X-Stream-Protocol-Version", "x"),
    ]
    code, h, body = _request(srv, "POST", exec_q, [*UPGRADE.items(), *versions])
    assert code == 403
    assert body == (
        b"unable to upgrade: unable to negotiate protocol: client supports "
        b"[v9.channel.k8s.io x], server accepts "
        b"[v4.channel.k8s.io v3.channel.k8s.io v2.channel.k8s.io channel.k8s.io]\n"
    )
    assert h["x-accepted-stream-protocol-versions"] == [
        "v4.channel.k8s.io",
        "v3.channel.k8s.io",
        "v2.channel.k8s.io",
        "channel.k8s.io",
    ]
    code, h, _b = _request(
        srv,
        "POST",
        exec_q,
        {**UPGRADE, "X-Stream-Protocol-Version": "v2.channel.k8s.io, v4.channel.k8s.io"},
    )
    assert code == 101 and h["x-stream-protocol-version"] == ["v2.channel.k8s.io"]
    code, _h, body = _request(
        srv,
        "POST",
        f"{base}/portforward",
        {
            "Connection": "Upgrade",
            "Upgrade": "h2c",
            "X-Stream-Protocol-Version": "portforward.k8s.io",
        },
    )
    assert code == 400 and body.startswith(
        b"unable to upgrade: missing upgrade headers in request: http.Header{"
    )


def test_authorization_is_kube_apiserver_1_32_s(srv: Served) -> None:
    """POST (SPDY) needs ``create`` on pods/exec; a GET upgrade needs ``get`` only (the
    extra ``create`` check on GET upgrades is on by default from 1.35)."""
    pod = _pods(srv)[0]["name"]
    srv.kubectl("create", "role", "exec-getter", "--verb=get", "--resource=pods/exec", check=False)
    srv.kubectl(
        "create", "rolebinding", "exec-getter", "--role=exec-getter", "--user=getter", check=False
    )
    q = f"/api/v1/namespaces/default/pods/{pod}/exec?command=hostname&stdout=true"
    hdrs = {
        **UPGRADE,
        "X-Stream-Protocol-Version": "v4.channel.k8s.io",
        "Impersonate-User": "getter",
    }
    code, _h, body = _request(srv, "POST", q, hdrs)
    assert code == 403
    assert json.loads(body)["message"] == (
        f'pods "{pod}" is forbidden: User "getter" cannot create resource "pods/exec" '
        'in API group "" in the namespace "default"'
    )
    code, _h, _b = _request(srv, "GET", q, hdrs)
    assert code == 101
