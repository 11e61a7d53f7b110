"""The ASGI ``websocket`` scope: ``pods/exec``, ``pods/attach`` and ``pods/portforward``
over a WebSocket, as kubectl 1.29+ and the official Python client speak them.

The request goes through kube-apiserver's filter chain as any other: authentication
(client certificate, bearer token, impersonation: :meth:`API.user_of`), request info,
authorization. A WebSocket handshake is a ``GET``, so the request is authorized as
``get`` on the subresource; then, as kube-apiserver does behind the
``AuthorizePodWebsocketUpgradeCreatePermission`` gate (beta and on by default from
1.35; kube-apiserver 1.32 checks ``get`` only), also as ``create``, the verb the SPDY
``POST`` is authorized with, so that read-only access cannot run commands. Then the
connect handler's checks (:func:`connect.pod_container`: the pod, its node, the
container) and the protocol negotiation (:mod:`.channels`). Every refusal up to here
is an HTTP answer to the handshake (uvicorn's ``websocket.http.response``
extension): a ``Status`` with kube-apiserver's code and wording; a protocol nobody
serves is kubelet's ``403`` with an empty body.

Protocols: exec and attach speak kubelet's (``""``, ``channel.k8s.io``,
``base64.channel.k8s.io``, ``v4.channel.k8s.io``, ``v4.base64.channel.k8s.io``) and
``v5.channel.k8s.io``, which kube-apiserver's stream translator serves itself
whenever a client offers it (then kubelet's refusal of a container that is not
running arrives after the upgrade, as an ``InternalError`` on the error channel,
wrapped as the translator wraps it; with the other protocols it is the answer to the
handshake, :func:`connect.running`). Port-forward speaks kubelet's (``""``,
``v4.channel.k8s.io``, ``v4.base64.channel.k8s.io``). kubectl 1.31+ port-forward
offers ``SPDY/3.1+portforward.k8s.io`` (SPDY tunnelled in a WebSocket): it is not
served, so the handshake is refused and kubectl falls back to a plain SPDY upgrade,
which the SPDY layer answers. (The refusal is the WebSocket library's 400 before the
app is called: "/" may not appear in a header token; were it let through, the
negotiation here would answer 403.)

Behind the protocol is ``api.runtime`` (:mod:`control.apiserver.podruntime`): exec
runs ``runtime.exec`` with an :class:`~control.apiserver.podruntime.ExecIO` over the
socket; attach follows the container's CRI log file from its end (the main process's
output from now on; a container started without stdin reads none, so what the client
types is dropped, as containerd drops it); port-forward opens
``runtime.port_forward`` for each port at once, as kubelet does. A WebSocket that is
not one of these is answered as the same ``GET`` over HTTP.

Each stream is counted in ``apiserver_request_duration_seconds`` with verb
``CONNECT`` and code 101, from the handshake to the socket's close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from starlette.requests import Request

from control.apiserver.http import channels, connect, metrics, wire
from control.apiserver.http.channels import Closed, Data, Protocol, ProtocolError
from control.apiserver.http.status import APIError
from control.apiserver.podruntime import ExecSpec, PodRuntime, PodRuntimeError

if TYPE_CHECKING:
    from control.apiserver.http.app import API, RequestInfo
    from control.apiserver.http.authn import User

log = logging.getLogger("svclab.apiserver.ws")

STREAMING = ("exec", "attach", "portforward")
#: how often attach looks for new log records and for its container's end (seconds)
FOLLOW_EVERY = 0.05
WATCH_POD_EVERY = 0.5


class Refusal(Exception):
    """An HTTP answer to the handshake instead of the upgrade."""

    def __init__(self, code: int, body: bytes = b"", ctype: str = "text/plain") -> None:
        super().__init__(code)
        self.code = code
        self.body = body
        self.ctype = ctype

    @classmethod
    def of(cls, e: APIError) -> Refusal:
        return cls(e.code, wire.dumps(e.status()), "application/json")


async def serve(api: API, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answer one ASGI ``websocket`` scope (see the module docstring)."""
    t0 = time.perf_counter()
    request = Request({**scope, "type": "http", "method": "GET"})
    key: metrics.RequestKey | None = None
    try:
        user = api.user_of(request)
        params = parse_qs(scope["query_string"].decode(), keep_blank_values=True)
        path = scope["path"].rstrip("/") or "/"
        info = api.parse(path, "GET", params) if path.startswith(("/api/", "/apis/")) else None
        res = info.resource if info is not None else None
        sub = info.subresource if info is not None else ""
        if info is None or res is None or res.group or res.name != "pods" or sub not in STREAMING:
            await _plain(api, request, scope, send)
            return
        key = metrics.request_key(
            "connect", "", info.version, "pods", sub, info.namespace, info.name, dry_run=False
        )
        api.authorize(user, info, params)
        _authorize_create(api, user, info, params)
        offers = channels.offered(request.headers.getlist("sec-websocket-protocol"))
        stream = _prepare(api, info, params, offers)
    except APIError as e:
        await _refuse(scope, send, Refusal.of(e))
        _observe(api, key, e.code, t0)
        return
    except Refusal as r:
        await _refuse(scope, send, r)
        _observe(api, key, r.code, t0)
        return
    msg = await receive()
    if msg["type"] != "websocket.connect":  # the client left before the upgrade
        return
    await send({"type": "websocket.accept", "subprotocol": stream.proto.name or None})
    sock = Socket(receive, send, stream.proto)
    try:
        await stream.run(sock)
        await sock.close(1000)
    finally:
        _observe(api, key, 101, t0)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "WebSocket %s %s (%s) ended after %.1f ms",
                sub,
                path,
                stream.proto.name,
                (time.perf_counter() - t0) * 1000,
            )


def _observe(api: API, key: metrics.RequestKey | None, code: int, t0: float) -> None:
    if key is not None:
        api.metrics.observe(key, code, time.perf_counter() - t0)


async def _refuse(scope: dict[str, Any], send: Any, r: Refusal) -> None:
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})  # the server answers 403
        return
    await send(
        {
            "type": "websocket.http.response.start",
            "status": r.code,
            "headers": [
                (b"content-type", r.ctype.encode()),
                (b"content-length", str(len(r.body)).encode()),
            ],
        }
    )
    await send({"type": "websocket.http.response.body", "body": r.body})


async def _plain(api: API, request: Request, scope: dict[str, Any], send: Any) -> None:
    """Any other WebSocket: the answer to the same ``GET`` over HTTP (there is no
    upgrade; a watch, which streams, is refused)."""
    try:
        response = await api.handle(request)
    except APIError as e:
        await _refuse(scope, send, Refusal.of(e))
        return
    body = getattr(response, "body", None)
    if body is None:
        await _refuse(
            scope,
            send,
            Refusal.of(
                APIError(
                    400,
                    "BadRequest",
                    "svclab serves no watch over a WebSocket: watch over HTTP instead",
                )
            ),
        )
        return
    await send(
        {
            "type": "websocket.http.response.start",
            "status": response.status_code,
            "headers": response.raw_headers,
        }
    )
    await send({"type": "websocket.http.response.body", "body": bytes(body)})


def _authorize_create(
    api: API, user: User, info: RequestInfo, params: dict[str, list[str]]
) -> None:
    """kube-apiserver's second check of a WebSocket to exec, attach or port-forward:
    ``create`` on the subresource; its refusal is ``pods "NAME" is forbidden: `` with
    the authorizers' reason (RBAC gives none)."""
    verb = info.verb
    info.verb = "create"
    try:
        api.authorize(user, info, params)
    except APIError as e:
        if e.code != 403:
            raise
        raise APIError(
            403,
            "Forbidden",
            f'pods "{info.name}" is forbidden: ',
            {"name": info.name, "kind": "pods"},
        ) from None
    finally:
        info.verb = verb


def _runtime(api: API, sub: str) -> PodRuntime:
    if api.runtime is None:
        raise APIError(
            503,
            "ServiceUnavailable",
            f"svclab serve runs no pod runtime: pods/{sub} is not available",
        )
    return api.runtime


class Stream:
    """A stream the handshake checks found fit: its protocol and what runs on it."""

    def __init__(self, proto: Protocol, run: Callable[[Socket], Awaitable[None]]) -> None:
        self.proto = proto
        self.run = run


def _prepare(
    api: API, info: RequestInfo, params: dict[str, list[str]], offers: list[str]
) -> Stream:
    sub, ns, name = info.subresource, info.namespace, info.name
    if sub == "portforward":
        return _prepare_portforward(api, ns, name, params, offers)
    pod, container = connect.pod_container(api, ns, name, connect.query(params, "container"))
    command = connect.command(params) if sub == "exec" else ()
    stdin, stdout, stderr, tty = connect.stream_flags(params)
    if not (stdin or stdout or stderr):
        raise APIError(
            400, "BadRequest", "you must specify at least 1 of stdin, stdout, stderr", {}
        )
    runtime = _runtime(api, sub)
    proto = channels.V5 if channels.V5.name in offers else None
    refused: str | None = None
    try:
        connect.running(pod, container)
    except APIError as e:
        if proto is None:  # kubelet answers the handshake
            raise
        refused = e.message  # the translator already upgraded
    if proto is None:
        proto = channels.negotiate(offers, channels.EXEC_PROTOCOLS)
        if proto is None:
            raise Refusal(403)
    spec = ExecSpec(
        namespace=ns,
        pod=name,
        container=container,
        command=command,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr and not tty,  # kubelet: a terminal has no separate stderr
        tty=tty,
    )
    if refused is not None:
        status = channels.internal_error(f"unable to upgrade connection: {refused}")
        return Stream(proto, lambda sock: _fail(sock, spec, status))
    if sub == "exec":
        return Stream(proto, lambda sock: _exec(runtime, sock, spec))
    return Stream(proto, lambda sock: _attach(api, runtime, sock, spec))


def _prepare_portforward(
    api: API, ns: str, name: str, params: dict[str, list[str]], offers: list[str]
) -> Stream:
    pod = connect.pod_of(api, ns, name)
    if not pod.spec.node_name:
        raise APIError(400, "BadRequest", f"pod {name} does not have a host assigned", {})
    try:
        ports = channels.parse_ports(params.get("ports") or [])
    except ValueError as e:
        raise APIError(400, "BadRequest", str(e), {}) from None
    runtime = _runtime(api, "portforward")
    proto = channels.negotiate(offers, channels.PORTFORWARD_PROTOCOLS)
    if proto is None:  # e.g. kubectl's SPDY/3.1+portforward.k8s.io: it falls back to SPDY
        raise Refusal(403)
    uid = pod.metadata.uid or name
    return Stream(proto, lambda sock: _portforward(runtime, sock, ns, name, uid, ports))


# ---------------------------------------------------------------- the socket


class Socket:
    """One accepted WebSocket speaking ``proto``: channel messages out, client
    messages in (:meth:`read`, run by one task), and whether the client is gone."""

    def __init__(self, receive: Any, send: Any, proto: Protocol) -> None:
        self._receive = receive
        self._send = send
        self.proto = proto
        self.gone = asyncio.Event()
        self._closed = False

    async def send(self, channel: int, data: bytes) -> None:
        """Send ``data`` on ``channel``; nothing once the socket is closed or gone."""
        if self._closed or self.gone.is_set():
            return
        msg = channels.frame(self.proto, channel, data)
        event = {"type": "websocket.send"}
        event["bytes" if isinstance(msg, bytes) else "text"] = msg  # type: ignore[assignment]
        try:
            await self._send(event)
        except OSError:  # uvicorn's ClientDisconnected
            self.gone.set()

    async def close(self, code: int, reason: str = "") -> None:
        if self._closed or self.gone.is_set():
            return
        self._closed = True
        with contextlib.suppress(OSError):
            await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def read(self, on_message: Callable[[Data | Closed], Awaitable[None]]) -> None:
        """Hand each client message to ``on_message`` until the client leaves; a
        message that breaks the protocol closes the socket (1002, with the reason)."""
        while True:
            msg = await self._receive()
            if msg["type"] == "websocket.disconnect":
                self.gone.set()
                return
            if msg["type"] != "websocket.receive":
                continue
            payload = msg.get("bytes")
            if payload is None:
                payload = msg.get("text") or ""
            try:
                m = channels.parse(self.proto, payload)
            except ProtocolError as e:
                log.debug("WebSocket protocol error: %s", e)
                await self.close(1002, str(e)[:120])
                self.gone.set()
                return
            if m is not None:
                await on_message(m)


async def _until_first(*aws: Awaitable[Any]) -> None:
    """Wait until one of ``aws`` is done; cancel the others."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending)
    for t in tasks:
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]


async def _hello(sock: Socket, spec: ExecSpec) -> None:
    """kubelet's empty message on the lowest channel it writes: the client knows the
    streams are up."""
    first = channels.STDOUT if spec.stdout else channels.STDERR if spec.stderr else channels.ERROR
    await sock.send(first, b"")


async def _status(sock: Socket, status: dict[str, Any]) -> None:
    data = channels.status_message(status, sock.proto)
    if data is not None:
        await sock.send(channels.ERROR, data)


async def _fail(sock: Socket, spec: ExecSpec, status: dict[str, Any]) -> None:
    await _hello(sock, spec)
    await _status(sock, status)


# ---------------------------------------------------------------- exec


class SocketExecIO:
    """:class:`~control.apiserver.podruntime.ExecIO` over a socket: stdin from channel
    0 (end of file at v5's close signal or when the client leaves), stdout to 1,
    stderr to 2 (to 1 with a terminal), terminal sizes from 4 (kept in ``sizes``: an
    emulated tool draws no screen)."""

    def __init__(self, sock: Socket, spec: ExecSpec) -> None:
        self.sock = sock
        self.spec = spec
        self.sizes: list[channels.TerminalSize] = []
        self._stdin: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._eof = not spec.stdin
        self._resize = channels.ResizeDecoder()

    async def on_message(self, m: Data | Closed) -> None:
        if isinstance(m, Closed):
            if m.channel == channels.STDIN:
                self._stdin.put_nowait(None)
            return
        if m.channel == channels.STDIN and self.spec.stdin:
            if m.data:
                self._stdin.put_nowait(m.data)
        elif m.channel == channels.RESIZE:
            try:
                self.sizes += self._resize.feed(m.data)
            except ProtocolError as e:
                log.debug("WebSocket resize: %s", e)
                await self.sock.close(1002, str(e)[:120])

    def client_gone(self) -> None:
        self._stdin.put_nowait(None)

    async def read_stdin(self) -> bytes | None:
        if self._eof:
            return None
        chunk = await self._stdin.get()
        if chunk is None:
            self._eof = True
        return chunk

    async def write_stdout(self, data: bytes) -> None:
        if data and self.spec.stdout:
            await self.sock.send(channels.STDOUT, data)

    async def write_stderr(self, data: bytes) -> None:
        if not data:
            return
        if self.spec.tty:
            await self.write_stdout(data)
        elif self.spec.stderr:
            await self.sock.send(channels.STDERR, data)


async def _exec(runtime: PodRuntime, sock: Socket, spec: ExecSpec) -> None:
    io = SocketExecIO(sock, spec)
    await _hello(sock, spec)

    async def read() -> None:
        await sock.read(io.on_message)
        io.client_gone()

    reader = asyncio.ensure_future(read())
    try:
        run = asyncio.ensure_future(runtime.exec(spec, io))
        try:
            await _until_first(run, sock.gone.wait())
        except PodRuntimeError as e:
            msg = f"error executing command in container: {e}"
            if sock.proto.half_close:  # the translator wraps kubelet's InternalError again
                msg = f"Internal error occurred: {msg}"
            await _status(sock, channels.internal_error(msg))
            return
        if run.cancelled():
            return  # the client left: the command was cancelled
        code = run.result()
        if code == 0:
            await _status(sock, channels.success())
        else:
            await _status(sock, channels.exit_status(code, spec.command, sock.proto))
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


# ---------------------------------------------------------------- attach


def cri_output(line: str) -> tuple[str, bytes] | None:
    """One CRI log record -> (stream, the bytes the process wrote); ``None`` for a
    line that is not a record. ``F`` ends a line (its newline is restored), ``P`` is
    a part of one."""
    parts = line.rstrip("\n").split(" ", 3)
    if len(parts) < 3 or parts[1] not in ("stdout", "stderr") or parts[2] not in ("F", "P"):
        return None
    text = parts[3] if len(parts) == 4 else ""
    return parts[1], (text + "\n" if parts[2] == "F" else text).encode()


async def _follow(
    path_of: Callable[[], Path | None], out: Callable[[str, bytes], Awaitable[None]]
) -> None:
    """Follow a CRI log file from its end as it is now (or from its start once it
    appears), handing each record's stream and bytes to ``out``."""
    path = path_of()
    pos = path.stat().st_size if path is not None else 0
    pending = ""
    while True:
        if path is None:
            path = path_of()
        if path is not None and path.exists():
            with path.open("r", encoding="utf-8", errors="replace") as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
            pending += chunk
            *lines, pending = pending.split("\n")
            for line in lines:
                rec = cri_output(line)
                if rec is not None:
                    await out(*rec)
        await asyncio.sleep(FOLLOW_EVERY)


async def _container_ends(api: API, spec: ExecSpec) -> None:
    """Return once the pod is gone or its container no longer runs."""
    while True:
        await asyncio.sleep(WATCH_POD_EVERY)
        try:
            pod = connect.pod_of(api, spec.namespace, spec.pod)
            connect.running(pod, spec.container)
        except APIError:
            return


async def _attach(api: API, runtime: PodRuntime, sock: Socket, spec: ExecSpec) -> None:
    io = SocketExecIO(sock, spec)
    await _hello(sock, spec)

    async def out(stream: str, data: bytes) -> None:
        await (io.write_stderr(data) if stream == "stderr" else io.write_stdout(data))

    def path_of() -> Path | None:
        return runtime.log_path(spec.namespace, spec.pod, spec.container, False)

    ended = asyncio.ensure_future(_container_ends(api, spec))
    await _until_first(ended, _follow(path_of, out), sock.read(io.on_message))
    if ended.done() and not ended.cancelled():
        await _status(sock, channels.success())


# ---------------------------------------------------------------- port-forward


async def _portforward(
    runtime: PodRuntime, sock: Socket, ns: str, name: str, uid: str, ports: list[int]
) -> None:
    inboxes: list[asyncio.Queue[bytes]] = [asyncio.Queue() for _ in ports]
    for i, port in enumerate(ports):
        await sock.send(2 * i, channels.port_prefix(port))
        await sock.send(2 * i + 1, channels.port_prefix(port))

    async def on_message(m: Data | Closed) -> None:
        # the error channels are the server's; data for one is dropped, as kubelet does
        if isinstance(m, Data) and m.channel % 2 == 0 and m.channel // 2 < len(ports) and m.data:
            inboxes[m.channel // 2].put_nowait(m.data)

    async def forward(i: int, port: int) -> None:
        try:
            conn = await runtime.port_forward(ns, name, port)
        except PodRuntimeError as e:
            msg = f"error forwarding port {port} to pod {uid}, uid : {e}"
            await sock.send(2 * i + 1, msg.encode())
            return

        async def upstream() -> None:
            while True:
                await conn.write(await inboxes[i].get())

        up = asyncio.ensure_future(upstream())
        try:
            while data := await conn.read():
                await sock.send(2 * i, data)
        finally:
            up.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await up
            await conn.close()

    all_done = asyncio.gather(*(forward(i, p) for i, p in enumerate(ports)))
    await _until_first(all_done, sock.read(on_message))


__all__ = ["STREAMING", "Refusal", "Socket", "SocketExecIO", "cri_output", "serve"]
