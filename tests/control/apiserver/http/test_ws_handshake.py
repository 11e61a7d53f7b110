"""The WebSocket handshake of pods/exec, attach and portforward against a real ``svclab
serve``, at the protocol level (the websocket-client library the official Python client
is built on): refusals answered as HTTP before the upgrade, with kube-apiserver's codes
and wording (401, 403 from RBAC for ``get`` and for the ``create`` the upgrade also
needs, 404, 400, kubelet's 403 for a protocol nobody serves; kubectl's SPDY tunnel is
refused before the app, by the WebSocket library); the pre-v4, v4 and base64
protocols; a terminal's resize stream; attach following the container's output; the
streams in /metrics."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
import websocket
from serving import WEB, Served

pytestmark = pytest.mark.slow

TOKENS = """\
viewer-token,viewer,1001,""
creator-token,creator,1002,""
runner-token,runner,1003,""
"""
RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: exec-get, namespace: default}
rules: [{apiGroups: [""], resources: [pods/exec], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: exec-create, namespace: default}
rules: [{apiGroups: [""], resources: [pods/exec], verbs: [create]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: exec, namespace: default}
rules: [{apiGroups: [""], resources: [pods/exec], verbs: [get, create]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: viewer, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: exec-get}
subjects: [{kind: User, name: viewer, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: creator, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: exec-create}
subjects: [{kind: User, name: creator, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: runner, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: exec}
subjects: [{kind: User, name: runner, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  containers:
  - {name: client, image: registry.k8s.io/e2e-test-images/agnhost:2.47, args: [pause]}
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("wshandshake")
    tokens = base / "tokens.csv"
    tokens.write_text(TOKENS)
    s = Served(base / "state", "--token-auth-file", str(tokens))
    try:
        s.start()
        s.kubectl("apply", "-f", str(WEB))
        s.kubectl("apply", "-f", "-", input=RBAC)
        deadline = time.monotonic() + 60
        while len(s.kubectl("get", "pods", "-o", "name").stdout.split()) < 4:
            assert time.monotonic() < deadline, "the pods never came"
            time.sleep(0.2)
        s.kubectl("wait", "--for=condition=Ready", "pod", "--all", "--timeout=60s")
        yield s
    finally:
        s.stop()


def _url(srv: Served, pod: str, sub: str, **query: Any) -> str:
    pairs: list[tuple[str, str]] = []
    for k, v in query.items():
        for item in v if isinstance(v, list) else [v]:
            pairs.append((k, str(item)))
    return (
        f"wss://127.0.0.1:{srv.port}/api/v1/namespaces/default/pods/{pod}/{sub}?{urlencode(pairs)}"
    )


def _connect(
    srv: Served,
    url: str,
    protocols: list[str] | None,
    *,
    cert: bool = True,
    headers: list[str] | None = None,
) -> websocket.WebSocket:
    sslopt: dict[str, Any] = {"ca_certs": str(srv.state / "pki" / "ca.crt")}
    if cert:
        sslopt["certfile"] = str(srv.state / "pki" / "admin.crt")
        sslopt["keyfile"] = str(srv.state / "pki" / "admin.key")
    ws = websocket.WebSocket(sslopt=sslopt)
    ws.settimeout(10)
    ws.connect(url, subprotocols=protocols, header=headers or [])
    return ws


def _refused(srv: Served, url: str, protocols: list[str] | None, **kw: Any) -> tuple[int, bytes]:
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        _connect(srv, url, protocols, **kw).close()
    return e.value.status_code, e.value.resp_body or b""


def _messages(ws: websocket.WebSocket) -> list[tuple[int, bytes | str]]:
    """Every data message until the server closes: (opcode, payload)."""
    out: list[tuple[int, bytes | str]] = []
    while True:
        op, data = ws.recv_data(control_frame=True)
        if op == websocket.ABNF.OPCODE_CLOSE:
            return out
        if op in (websocket.ABNF.OPCODE_BINARY, websocket.ABNF.OPCODE_TEXT):
            out.append((op, data))


def _by_channel(msgs: list[tuple[int, bytes | str]]) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for _, m in msgs:
        assert isinstance(m, bytes)
        out[m[0]] = out.get(m[0], b"") + m[1:]
    return out


EXEC = {"command": ["ip", "route"], "stdout": "true", "stderr": "true"}


def test_unknown_protocols_are_refused_403(srv: Served) -> None:
    # kubelet's answer to a protocol it does not serve: 403, empty body (v2/v3 are
    # SPDY names, not WebSocket ones)
    assert _refused(srv, _url(srv, "client", "exec", **EXEC), ["v3.channel.k8s.io"]) == (403, b"")
    assert _refused(srv, _url(srv, "client", "exec", **EXEC), ["bogus"]) == (403, b"")
    # kubectl's port-forward tunnel: not served, any answer but 101 makes kubectl fall
    # back to a plain SPDY upgrade. The WebSocket library refuses it first: "/" may
    # not appear in a header token (RFC 7230), so the app never sees it.
    web = srv.kubectl("get", "pods", "-l", "app=web", "-o", "name").stdout.split()[0]
    url = _url(srv, web.removeprefix("pod/"), "portforward", ports=8080)
    code, body = _refused(srv, url, ["SPDY/3.1+portforward.k8s.io"])
    assert code == 400 and b"invalid Sec-WebSocket-Protocol header" in body
    assert _refused(srv, url, ["v5.channel.k8s.io"]) == (403, b"")  # no v5 port-forward


def test_connect_checks_answer_the_handshake(srv: Served) -> None:
    code, body = _refused(srv, _url(srv, "ghost", "exec", **EXEC), ["v5.channel.k8s.io"])
    assert (code, json.loads(body)["message"]) == (404, 'pods "ghost" not found')
    url = _url(srv, "client", "exec", container="nope", **EXEC)
    code, body = _refused(srv, url, ["v5.channel.k8s.io"])
    st = json.loads(body)
    assert (code, st["reason"], st["message"]) == (
        400,
        "BadRequest",
        "container nope is not valid for pod client",
    )
    code, body = _refused(srv, _url(srv, "client", "exec", stdout="true"), ["v5.channel.k8s.io"])
    assert (code, json.loads(body)["message"]) == (400, "you must specify at least 1 command")
    code, body = _refused(srv, _url(srv, "client", "portforward"), ["v4.channel.k8s.io"])
    assert (code, json.loads(body)["message"]) == (400, 'query parameter "port" is required')


def test_authentication_as_for_http(srv: Served) -> None:
    url = _url(srv, "client", "exec", **EXEC)
    code, body = _refused(srv, url, ["v5.channel.k8s.io"], cert=False)
    assert (code, json.loads(body)["reason"]) == (401, "Unauthorized")
    hdr = ["Authorization: Bearer runner-token"]
    ws = _connect(srv, url, ["v5.channel.k8s.io"], cert=False, headers=hdr)
    assert b"default via" in _by_channel(_messages(ws))[1]


def test_the_upgrade_needs_get_and_create(srv: Served) -> None:
    url = _url(srv, "client", "exec", **EXEC)
    # get alone: the second check, create, refuses with kube-apiserver's wording
    hdr = ["Authorization: Bearer viewer-token"]
    code, body = _refused(srv, url, ["v5.channel.k8s.io"], cert=False, headers=hdr)
    st = json.loads(body)
    assert (code, st["message"], st["details"]) == (
        403,
        'pods "client" is forbidden: ',
        {"name": "client", "kind": "pods"},
    )
    # create alone: the GET itself is not allowed
    hdr = ["Authorization: Bearer creator-token"]
    code, body = _refused(srv, url, ["v5.channel.k8s.io"], cert=False, headers=hdr)
    assert (code, json.loads(body)["message"]) == (
        403,
        'pods "client" is forbidden: User "creator" cannot get resource "pods/exec" '
        'in API group "" in the namespace "default"',
    )
    # impersonating the viewer: the viewer's rights
    code, body = _refused(srv, url, ["v5.channel.k8s.io"], headers=["Impersonate-User: viewer"])
    assert (code, json.loads(body)["message"]) == (403, 'pods "client" is forbidden: ')


def test_v4_reports_the_exit_code_as_a_status(srv: Served) -> None:
    url = _url(srv, "client", "exec", command=["cat", "/nope"], stdout="true", stderr="true")
    ws = _connect(srv, url, ["v4.channel.k8s.io"])
    assert ws.subprotocol == "v4.channel.k8s.io"
    msgs = _messages(ws)
    assert msgs[0] == (websocket.ABNF.OPCODE_BINARY, b"\x01")  # kubelet's "streams are up"
    chans = _by_channel(msgs)
    assert chans[2].startswith(b"cat: /nope:")
    assert json.loads(chans[3]) == {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: error executing command "
        "[cat /nope], exit code 1",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "1"}]},
    }


def test_pre_v4_protocol_reports_text_and_nothing_on_success(srv: Served) -> None:
    url = _url(srv, "client", "exec", command=["cat", "/nope"], stderr="true")
    chans = _by_channel(_messages(_connect(srv, url, ["channel.k8s.io"])))
    assert chans[3] == (
        b"command terminated with non-zero exit code: error executing command "
        b"[cat /nope], exit code 1"
    )
    chans = _by_channel(_messages(_connect(srv, _url(srv, "client", "exec", **EXEC), None)))
    assert b"default via" in chans[1] and 3 not in chans


def test_base64_protocol(srv: Served) -> None:
    url = _url(srv, "client", "exec", command=["hostname"], stdout="true")
    ws = _connect(srv, url, ["v4.base64.channel.k8s.io"])
    msgs = _messages(ws)
    assert all(op == websocket.ABNF.OPCODE_TEXT for op, _ in msgs)
    texts = [m.decode() if isinstance(m, bytes) else m for _, m in msgs]
    out = b"".join(base64.b64decode(t[1:]) for t in texts if t[0] == "1")
    assert out == b"client\n"
    status = [base64.b64decode(t[1:]) for t in texts if t[0] == "3"]
    assert json.loads(status[0])["status"] == "Success"


def test_terminal_resize_and_stdin(srv: Served) -> None:
    url = _url(srv, "client", "exec", command="cat", stdin="true", stdout="true", tty="true")
    ws = _connect(srv, url, ["v5.channel.k8s.io"])
    ws.send_binary(b"\x04" + json.dumps({"Width": 120, "Height": 40}).encode())
    ws.send_binary(b"\x00a line\n")
    ws.send_binary(bytes([255, 0]))  # v5: stdin's end
    chans = _by_channel(_messages(ws))
    assert chans[1] == b"a line\r\n"  # a terminal's onlcr
    assert json.loads(chans[3])["status"] == "Success"
    # a resize message that is not JSON breaks the protocol: the socket closes (1002)
    ws = _connect(srv, url, ["v5.channel.k8s.io"])
    ws.send_binary(b"\x04{oops")
    while True:
        op, data = ws.recv_data(control_frame=True)
        if op == websocket.ABNF.OPCODE_CLOSE:
            break
    assert data[:2] == (1002).to_bytes(2, "big")
    assert b"resize: invalid JSON" in data


def test_attach_follows_the_containers_output(srv: Served) -> None:
    pods = json.loads(srv.kubectl("get", "pods", "-l", "app=web", "-o", "json").stdout)["items"]
    web, ip = pods[0]["metadata"]["name"], pods[0]["status"]["podIP"]
    client_ip = json.loads(srv.kubectl("get", "pod", "client", "-o", "json").stdout)["status"][
        "podIP"
    ]
    ws = _connect(
        srv, _url(srv, web, "attach", stdout="true", stderr="true"), ["v5.channel.k8s.io"]
    )
    try:
        assert ws.recv() == b"\x01"  # streams are up
        srv.kubectl("exec", "client", "--", "curl", "-s", f"{ip}:8080/attach-me")
        seen = b""
        deadline = time.monotonic() + 10
        while b"/attach-me" not in seen and time.monotonic() < deadline:
            m = ws.recv()
            assert isinstance(m, bytes) and m[0] == 1
            seen += m[1:]
        # the pod server's access record: the client's address as the pod saw it
        assert f"{client_ip}:".encode() in seen
        assert f'-> {ip}:8080 "GET /attach-me HTTP/1.1" 200'.encode() in seen
    finally:
        ws.close()


def test_streams_are_counted_as_connect(srv: Served) -> None:
    _messages(_connect(srv, _url(srv, "client", "exec", **EXEC), ["v5.channel.k8s.io"]))
    code, text, _ = srv.raw("GET", "/metrics")
    assert code == 200 and isinstance(text, str)
    lines = [
        line
        for line in text.splitlines()
        if line.startswith("apiserver_request_total{")
        and 'verb="CONNECT"' in line
        and 'subresource="exec"' in line
        and 'code="101"' in line
    ]
    assert lines and float(lines[0].rsplit(" ", 1)[1]) >= 1


def test_other_paths_answer_as_http(srv: Served) -> None:
    url = f"wss://127.0.0.1:{srv.port}/api/v1/namespaces/default/pods/client"
    code, body = _refused(srv, url, None)
    assert code == 200 and json.loads(body)["metadata"]["name"] == "client"
