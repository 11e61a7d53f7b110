"""``pods/exec``, ``pods/attach`` and ``pods/portforward`` over SPDY/3.1, as
kube-apiserver (the checks before it forwards) and kubelet (the upgrade and the streams)
serve them to ``kubectl`` 1.20, and to kubectl 1.29+ when its WebSocket upgrade is
refused (it then falls back to SPDY).

Before the upgrade (each refusal is a plain HTTP answer, nothing is upgraded):

* kube-apiserver: not an upgrade request: 400 ``Upgrade request required``; the pod and
  container checks of :func:`connect.pod_container` (404, 400); exec without a command:
  400 ``you must specify at least 1 command``;
* kubelet: none of stdin, stdout, stderr asked for: 400 ``you must specify at least 1 of
  stdin, stdout, stderr``; a pod or container that does not run (:func:`connect.running`,
  404); no ``X-Stream-Protocol-Version``: 400 ``unable to upgrade:
  X-Stream-Protocol-Version is required``; no version in common: 403 ``unable to
  upgrade: unable to negotiate protocol: client supports [...], server accepts [...]``
  with ``X-Accepted-Stream-Protocol-Versions``; no ``Upgrade: SPDY/3.1``: 400
  ``unable to upgrade: missing upgrade headers in request: ...``. kubelet's answers are
  ``text/plain`` (Go's ``http.Error``), as kube-apiserver's proxy passes them on.
* no pod runtime behind the API (``api.runtime`` None): 503.

Authorization happened before (:meth:`API.authorize`): a POST is ``create`` on
``pods/exec`` (kubectl's SPDY requests are POSTs), a GET is ``get`` (kube-apiserver 1.32;
the extra ``create`` check on GET upgrades, gate AuthorizePodWebsocketUpgradeCreatePermission,
is on by default only from 1.35).

Then ``101 Switching Protocols`` with the chosen ``X-Stream-Protocol-Version`` and a
:class:`spdy.Session` over the connection taken from uvicorn (:data:`tls.HIJACK`).
The sessions themselves (:func:`serve_exec`, :func:`serve_port_forward`) take any
:class:`spdy.Session`, so a SPDY tunnel inside WebSocket messages can reuse them.

exec/attach (kubelet's remotecommand server): the client opens one stream per
``streamType`` header (``error``, then ``stdin``, ``stdout``, ``stderr`` as asked, and
``resize`` with a terminal on v3+); once all are there the command runs; its output ends
with FIN on stdout/stderr, then the error stream carries the result and FIN, then
GOAWAY. v4: a ``metav1.Status`` (``Success``, or ``Failure`` reason ``NonZeroExitCode``
with cause ``ExitCode`` = the code, which kubectl exits with); v1-v3: the failure's
message as text, nothing on success. A terminal (``tty``) sends stderr to stdout; resize
events (JSON ``{"Width":W,"Height":H}``, one after another) are parsed and kept on the
:class:`SpdyExecIO` the runtime gets (``size``, ``resizes``).

attach: the container's main process is its pod server; its output is what the server
logs, so an attach follows the container's CRI log (:meth:`PodRuntime.log_path`) from
its current end and sends each record to stdout or stderr as the record says, until the
client leaves or the pod stops running. The pod server reads no stdin (a container
without ``stdin: true`` has none): bytes a client sends there are read and dropped, as
the runtime drops them.

port-forward (kubelet's portforward server, protocol ``portforward.k8s.io``): per local
connection kubectl opens an ``error`` and a ``data`` stream with the same ``port`` and
``requestID`` headers; the pair is forwarded to :meth:`PodRuntime.port_forward`. A
failure is written to the error stream (``error forwarding port P to pod ID, uid :
...``). The data stream ends with FIN once the pod's side ended and the client's side
ended or had a second to; then the error stream ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from control.apiserver.http import connect, status, tls
from control.apiserver.http.spdy import Session, Stream, StreamIO
from control.apiserver.http.status import APIError
from control.apiserver.podruntime import ExecSpec, PodRuntime, PodRuntimeError

if TYPE_CHECKING:
    from starlette.requests import Request

    from control.apiserver.http.app import API, RequestInfo
    from control.apiserver.http.authn import User

log = logging.getLogger("svclab.streams")

#: exec/attach protocols kubelet speaks over SPDY, in its order of preference
EXEC_PROTOCOLS = (
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
)
PORT_FORWARD_PROTOCOLS = ("portforward.k8s.io",)
#: how long kubelet waits for a client to open the streams it announced
STREAM_CREATION_TIMEOUT = 30.0
#: how long a forwarded connection's other direction may take once one ended
FORWARD_GRACE = 1.0
#: how often an attach looks for new log records
ATTACH_POLL = 0.05


# --------------------------------------------------------------------------- upgrade


class _Upgraded(Response):
    """The handler's answer once the connection was taken over: nothing more is sent
    (uvicorn was told the connection is gone); 101 for the request metrics."""

    def __init__(self) -> None:
        super().__init__(status_code=101)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        return None


def _text(code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """Go's ``http.Error``: the message and a newline, text/plain."""
    h = {"X-Content-Type-Options": "nosniff", **(headers or {})}
    return Response(
        message + "\n", status_code=code, media_type="text/plain; charset=utf-8", headers=h
    )


class _Refused(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def _go_list(items: list[str] | tuple[str, ...]) -> str:
    return "[" + " ".join(items) + "]"


def _go_header(request: Request) -> str:
    """The request's header as Go's ``%#v`` prints an ``http.Header``."""
    merged: dict[str, list[str]] = {}
    for k, v in request.headers.items():
        name = "-".join(p.capitalize() for p in k.split("-"))
        merged.setdefault(name, []).append(v)
    body = ", ".join(
        f'"{k}":[]string{{{", ".join(json.dumps(x) for x in vs)}}}'
        for k, vs in sorted(merged.items())
    )
    return "http.Header{" + body + "}"


def is_upgrade(request: Request) -> bool:
    """Go's ``httpstream.IsUpgradeRequest``: a ``Connection`` header naming upgrade."""
    return any("upgrade" in v.lower() for v in request.headers.getlist("connection"))


def negotiate(request: Request, server: tuple[str, ...]) -> str:
    """kubelet's ``httpstream.Handshake``: the first of the client's
    ``X-Stream-Protocol-Version`` values (comma-separated, in several headers) that the
    server speaks; :class:`_Refused` with kubelet's answer otherwise."""
    client = [
        p.strip()
        for v in request.headers.getlist("x-stream-protocol-version")
        for p in v.split(",")
        if p.strip()
    ]
    if not client:
        raise _Refused(_text(400, "unable to upgrade: X-Stream-Protocol-Version is required"))
    for p in client:
        if p in server:
            return p
    msg = (
        "unable to upgrade: unable to negotiate protocol: client supports "
        f"{_go_list(client)}, server accepts {_go_list(server)}"
    )
    resp = _text(403, msg)
    for p in server:
        resp.headers.append("X-Accepted-Stream-Protocol-Versions", p)
    raise _Refused(resp)


def _check_spdy_upgrade(request: Request) -> None:
    """Go's SPDY ``ResponseUpgrader``: ``Connection: Upgrade`` and ``Upgrade: SPDY/3.1``."""
    conn = " ".join(request.headers.getlist("connection")).lower()
    up = " ".join(request.headers.getlist("upgrade")).lower()
    if "upgrade" not in conn or "spdy/3.1" not in up:
        raise _Refused(
            _text(
                400,
                f"unable to upgrade: missing upgrade headers in request: {_go_header(request)}",
            )
        )


async def upgrade(request: Request, protocol: str) -> Session:
    """Take the connection over, answer ``101`` naming ``protocol`` and start a SPDY
    session on it (the caller runs it)."""
    hijack = request.scope.get("extensions", {}).get(tls.HIJACK)
    if hijack is None:
        raise APIError(500, "InternalError", "this connection cannot be upgraded")
    reader, writer = hijack()
    head = (
        "HTTP/1.1 101 Switching Protocols\r\n"
        "Connection: Upgrade\r\n"
        "Upgrade: SPDY/3.1\r\n"
        f"X-Stream-Protocol-Version: {protocol}\r\n"
        f"Date: {formatdate(usegmt=True)}\r\n\r\n"
    )
    io = StreamIO(reader, writer)
    await io.write(head.encode())
    return Session(io)


def _runtime(api: API) -> PodRuntime:
    if api.runtime is None:
        raise APIError(
            503, "ServiceUnavailable", "no pod runtime serves exec, attach or port-forward here"
        )
    return api.runtime


# --------------------------------------------------------------------------- handlers


async def _exec_or_attach(
    api: API,
    request: Request,
    info: RequestInfo,
    params: dict[str, list[str]],
    *,
    attach: bool,
) -> Response:
    if not is_upgrade(request):
        raise status.bad_request("Upgrade request required")
    pod, container = connect.pod_container(
        api, info.namespace, info.name, connect.query(params, "container")
    )
    command: tuple[str, ...] = () if attach else connect.command(params)
    stdin, stdout, stderr, tty = connect.stream_flags(params)
    try:
        if not (stdin or stdout or stderr):
            raise _Refused(_text(400, "you must specify at least 1 of stdin, stdout, stderr"))
        connect.running(pod, container)
        runtime = _runtime(api)
        protocol = negotiate(request, EXEC_PROTOCOLS)
        _check_spdy_upgrade(request)
    except _Refused as r:
        return r.response
    spec = ExecSpec(
        namespace=info.namespace,
        pod=info.name,
        container=container,
        command=command,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr and not tty,  # kubelet: a terminal has no separate stderr
        tty=tty,
    )
    session = await upgrade(request, protocol)
    if attach:

        def alive() -> bool:
            try:
                p = connect.pod_of(api, info.namespace, info.name)
            except APIError:
                return False
            return p.metadata.uid == pod.metadata.uid and p.status.phase == "Running"

        run: Callable[[SpdyExecIO], Coroutine[Any, Any, int]] = lambda io: follow_log(  # noqa: E731
            runtime, spec, io, alive
        )
    else:
        run = lambda io: runtime.exec(spec, io)  # noqa: E731
    await serve_exec(session, protocol, spec, run)
    return _Upgraded()


async def handle_exec(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    return await _exec_or_attach(api, request, info, params, attach=False)


async def handle_attach(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    return await _exec_or_attach(api, request, info, params, attach=True)


async def handle_port_forward(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    if not is_upgrade(request):
        raise status.bad_request("Upgrade request required")
    pod = connect.pod_of(api, info.namespace, info.name)
    if not pod.spec.node_name:
        raise status.bad_request(f"pod {info.name} does not have a host assigned")
    try:
        if pod.status.phase != "Running":
            raise APIError(404, "NotFound", "pod does not exist", {})
        runtime = _runtime(api)
        protocol = negotiate(request, PORT_FORWARD_PROTOCOLS)
        _check_spdy_upgrade(request)
    except _Refused as r:
        return r.response
    session = await upgrade(request, protocol)
    await serve_port_forward(session, runtime, info.namespace, info.name, pod.metadata.uid or "")
    return _Upgraded()


#: (resource, subresource) -> handler, for :data:`connect.HANDLERS`
HANDLERS: dict[tuple[str, str], connect.Handler] = {
    ("pods", "exec"): handle_exec,
    ("pods", "attach"): handle_attach,
    ("pods", "portforward"): handle_port_forward,
}


# --------------------------------------------------------------------------- exec


@dataclass(eq=False)
class SpdyExecIO:
    """:class:`ExecIO` over the streams of one exec. ``size`` is the terminal's last
    size (width, height) and ``resizes`` every size the client sent, in order."""

    stdin: Stream | None
    stdout: Stream | None
    stderr: Stream | None
    tty: bool = False
    size: tuple[int, int] | None = None
    resizes: list[tuple[int, int]] = field(default_factory=list)
    resized: asyncio.Event = field(default_factory=asyncio.Event)

    async def read_stdin(self) -> bytes | None:
        if self.stdin is None:
            return None
        return await self.stdin.read()

    async def write_stdout(self, data: bytes) -> None:
        if self.stdout is not None and data:
            await self.stdout.write(data)

    async def write_stderr(self, data: bytes) -> None:
        target = self.stdout if self.tty else self.stderr
        if target is not None and data:
            await target.write(data)

    def resize(self, width: int, height: int) -> None:
        self.size = (width, height)
        self.resizes.append(self.size)
        self.resized.set()


async def wait_for_streams(
    session: Session, wanted: set[str], timeout: float = STREAM_CREATION_TIMEOUT
) -> dict[str, Stream] | None:
    """The streams the client opens, by ``streamType``, once each of ``wanted`` is there;
    None if the session ended or ``timeout`` passed first (kubelet then closes the
    connection). A stream of another type is logged and left alone, as kubelet does."""
    got: dict[str, Stream] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not wanted <= got.keys():
        try:
            s = await asyncio.wait_for(session.next_stream(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            log.info("timed out waiting for client to create streams")
            return None
        if s is None:
            return None
        kind = s.header("streamtype")
        if kind in wanted and kind not in got:
            got[kind] = s
        else:
            log.info("unexpected stream type: %r", kind)
    return got


async def _resizes(stream: Stream, io: SpdyExecIO) -> None:
    """Parse the resize stream's JSON values (``{"Width":W,"Height":H}``) into ``io``;
    the first malformed one ends it (kubelet stops reading resizes then)."""
    dec = json.JSONDecoder()
    buf = ""
    while (chunk := await stream.read()) is not None:
        buf += chunk.decode("utf-8", "replace")
        while True:
            buf = buf.lstrip()
            if not buf:
                break
            try:
                obj, end = dec.raw_decode(buf)
            except json.JSONDecodeError:
                break  # incomplete: wait for more (a bad value never completes)
            buf = buf[end:]
            try:
                width, height = int(obj["Width"]), int(obj["Height"])
            except (KeyError, TypeError, ValueError):
                log.info("error decoding resize event: %r", obj)
                return
            io.resize(width, height)


def exit_status(code: int, command: tuple[str, ...]) -> dict[str, Any]:
    """kubelet's v4 status for an exit code (0: Success)."""
    if code == 0:
        return status.success()
    cmd = "[" + " ".join(command) + "]"
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": (
            "command terminated with non-zero exit code: "
            f"error executing command {cmd}, exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def internal_status(message: str) -> dict[str, Any]:
    """``apierrors.NewInternalError`` of an error that is not an exit code."""
    e = APIError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )
    return e.status()


async def serve_exec(
    session: Session,
    protocol: str,
    spec: ExecSpec,
    run: Callable[[SpdyExecIO], Coroutine[Any, Any, int]],
) -> None:
    """One exec or attach over ``session`` (see the module docstring); returns once the
    session is closed."""
    reader = asyncio.create_task(session.run())
    wanted = {"error"}
    if spec.stdin:
        wanted.add("stdin")
    if spec.stdout:
        wanted.add("stdout")
    if spec.stderr:
        wanted.add("stderr")
    if spec.tty and protocol in ("v4.channel.k8s.io", "v3.channel.k8s.io"):
        wanted.add("resize")
    tasks: list[asyncio.Task[Any]] = [reader]
    try:
        streams = await wait_for_streams(session, wanted)
        if streams is None:
            return
        io = SpdyExecIO(
            streams.get("stdin"), streams.get("stdout"), streams.get("stderr"), tty=spec.tty
        )
        if "resize" in streams:
            tasks.append(asyncio.create_task(_resizes(streams["resize"], io)))
        work = asyncio.create_task(run(io))
        tasks.append(work)
        await asyncio.wait({work, reader}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():  # the client left
            return
        try:
            code = work.result()
            result = exit_status(code, spec.command)
        except PodRuntimeError as e:
            result = internal_status(f"error executing command in container: {e}")
        for name in ("stdout", "stderr"):
            if name in streams:
                await streams[name].close()
        err = streams["error"]
        if protocol == "v4.channel.k8s.io":
            await err.write(json.dumps(result).encode())
        elif result["status"] != "Success":
            await err.write(result["message"].encode())
        await err.close()
    finally:
        for t in tasks:
            t.cancel()
        await session.close()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


async def follow_log(
    runtime: PodRuntime, spec: ExecSpec, io: SpdyExecIO, alive: Callable[[], bool]
) -> int:
    """attach: the container's output from now on, read from its CRI log as it grows
    (stdout and stderr records to their streams), until the pod stops running; stdin
    is read and dropped. Returns 0 (the attach ended without error)."""

    async def drop_stdin() -> None:
        while await io.read_stdin() is not None:
            pass

    sink = asyncio.create_task(drop_stdin())
    path = runtime.log_path(spec.namespace, spec.pod, spec.container, False)
    pos = path.stat().st_size if path is not None else 0
    pending = b""
    try:
        while alive():
            if path is None:
                path = runtime.log_path(spec.namespace, spec.pod, spec.container, False)
                pos = 0
            if path is not None:
                with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
                    f.seek(pos)
                    data = f.read()
                    pos += len(data)
                    pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    await _write_record(line, io)
            await asyncio.sleep(ATTACH_POLL)
        return 0
    finally:
        sink.cancel()


async def _write_record(line: bytes, io: SpdyExecIO) -> None:
    """One CRI record (``<time> <stream> <F|P> <text>``) to its stream; a full record
    (``F``) ends with a newline, a partial one (``P``) does not."""
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return
    stream, tag = parts[1], parts[2]
    text = parts[3] if len(parts) > 3 else b""
    if tag == b"F":
        text += b"\n"
    if stream == b"stderr":
        await io.write_stderr(text)
    else:
        await io.write_stdout(text)


# --------------------------------------------------------------------------- port-forward


def accept_port_forward_stream(s: Stream) -> str | None:
    """kubelet's check of a new port-forward stream (its wording): a ``port`` header,
    a port 1-65535, and ``streamType`` ``error`` or ``data``."""
    port = s.header("port")
    if not port:
        return '"port" header is required'
    try:
        n = int(port, 10)
        if not 0 <= n <= 65535:
            raise ValueError
    except ValueError:
        return f'unable to parse "{port}" as a port: strconv.ParseUint: parsing "{port}": ' + (
            "value out of range" if port.isdigit() else "invalid syntax"
        )
    if n < 1:
        return f'port "{port}" must be > 0'
    kind = s.header("streamtype")
    if not kind:
        return '"streamType" header is required'
    if kind not in ("error", "data"):
        return f'invalid stream type "{kind}"'
    return None


@dataclass(eq=False)
class _Pair:
    request_id: str
    error: Stream | None = None
    data: Stream | None = None
    created: float = field(default_factory=time.monotonic)


async def serve_port_forward(
    session: Session, runtime: PodRuntime, namespace: str, pod: str, pod_id: str
) -> None:
    """Port-forward over ``session`` until the client leaves (see the module
    docstring). ``pod_id`` names the pod in error messages (the runtime's sandbox)."""
    session.accept = accept_port_forward_stream
    reader = asyncio.create_task(session.run())
    pairs: dict[str, _Pair] = {}
    tasks: set[asyncio.Task[None]] = set()

    def spawn(coro: Awaitable[None]) -> None:
        t = asyncio.ensure_future(coro)
        tasks.add(t)
        t.add_done_callback(tasks.discard)

    async def monitor(p: _Pair) -> None:
        await asyncio.sleep(STREAM_CREATION_TIMEOUT)
        if pairs.get(p.request_id) is p:
            del pairs[p.request_id]
            if p.error is not None:
                msg = (
                    f"(conn={id(session):#x}, request={p.request_id}) timed out waiting for streams"
                )
                await p.error.write(msg.encode())
                await p.error.close()
            if p.data is not None:
                await p.data.rst()

    try:
        while (s := await session.next_stream()) is not None:
            kind = s.header("streamtype")
            rid = s.header("requestid")
            if not rid:  # clients before kubectl 1.6: the pair's stream ids
                rid = str(s.id if kind == "error" else s.id - 2)
            p = pairs.get(rid)
            if p is None:
                p = pairs[rid] = _Pair(rid)
                spawn(monitor(p))
            if getattr(p, kind) is not None:
                msg = f"error processing stream for request {rid}: {kind} stream already assigned"
                log.info("%s", msg)
                if p.error is not None:
                    await p.error.write(msg.encode())
                continue
            setattr(p, kind, s)
            if p.error is not None and p.data is not None:
                del pairs[rid]
                spawn(_forward(p.error, p.data, runtime, namespace, pod, pod_id))
    finally:
        for t in list(tasks):
            t.cancel()
        reader.cancel()
        await session.close()
        for t in [reader, *tasks]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


async def _forward(
    error: Stream, data: Stream, runtime: PodRuntime, namespace: str, pod: str, pod_id: str
) -> None:
    port = int(data.header("port"))
    try:
        conn = await runtime.port_forward(namespace, pod, port)
    except PodRuntimeError as e:
        msg = f"error forwarding port {port} to pod {pod_id}, uid : {e}"
        log.info("%s", msg)
        await error.write(msg.encode())
        await data.close()
        await error.close()
        return

    async def up() -> None:  # client -> pod
        while (chunk := await data.read()) is not None:
            await conn.write(chunk)
        await conn.write_eof()

    async def down() -> None:  # pod -> client
        while chunk := await conn.read(65536):
            await data.write(chunk)
        await data.close()

    t_up, t_down = asyncio.create_task(up()), asyncio.create_task(down())
    try:
        _, pending = await asyncio.wait({t_up, t_down}, return_when=asyncio.FIRST_COMPLETED)
        if pending:  # the other direction gets a second to finish (as containerd gives)
            await asyncio.wait(pending, timeout=FORWARD_GRACE)
        for t in (t_up, t_down):
            if t.done() and not t.cancelled() and t.exception() is not None:
                log.info("port-forward to %s/%s:%d: %s", namespace, pod, port, t.exception())
    finally:
        t_up.cancel()
        t_down.cancel()
        with contextlib.suppress(Exception):
            await conn.close()
        await data.close()
        await error.close()


# uvicorn warns about every upgrade it does not handle itself; these are ours
logging.getLogger("uvicorn.error").addFilter(
    lambda r: r.getMessage() != "Unsupported upgrade request."
)

__all__ = [
    "EXEC_PROTOCOLS",
    "HANDLERS",
    "PORT_FORWARD_PROTOCOLS",
    "SpdyExecIO",
    "exit_status",
    "negotiate",
    "serve_exec",
    "serve_port_forward",
    "upgrade",
    "wait_for_streams",
]
