"""``services/NAME/proxy``, ``pods/NAME/proxy`` and ``nodes/NAME/proxy``: kube-apiserver's
HTTP proxy to a Service's endpoint, a pod or a node (what ``kubectl proxy`` and
``kubectl get --raw .../proxy/...`` use). Where each goes is :mod:`.proxytargets`'s;
a node's kubelet is answered from the store (:mod:`.kubeletapi`).

One request, as kube-apiserver's proxy handler forwards it:

* the path after ``proxy`` (cleaned as Go's ``path.Join`` does, a trailing ``/``
  kept) and the query go to the target; ``.../proxy`` without a path is redirected
  (301, ``GET``/``HEAD``) to ``.../proxy/``;
* the request's headers go along except the hop-by-hop ones (``Connection`` and the
  headers it names, ``Keep-Alive``, ``Proxy-*``, ``TE``, ``Trailer``,
  ``Transfer-Encoding``, ``Upgrade``) and ``Authorization`` (kube-apiserver's
  authentication filter removes it); ``X-Forwarded-For`` (the client's address),
  ``X-Forwarded-Uri``, ``X-Forwarded-Host`` and ``X-Forwarded-Proto`` are added; the
  body is sent whole with its ``Content-Length``;
* the connection is :meth:`PodRuntime.dial` from the control plane's node (through
  the cluster network of the backend serving the pods); ``https`` runs TLS over it
  without verifying the certificate (kube-apiserver's proxy transport does not);
* the answer's status, headers (less the hop-by-hop ones) and body come back as they
  arrive.

Refusals: the runtime missing, a refused or failed connection or a malformed answer:
503 ``error trying to reach service: <the dialer's or HTTP client's error>``, as
kube-apiserver words it. Not done: kube-apiserver rewrites the links of ``text/html``
answers and ``Location`` headers to go through the proxy again; svclab relays them
unchanged. WebSocket/SPDY upgrades through the proxy are not relayed.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import h11
from starlette.responses import Response, StreamingResponse

from control.apiserver.http import connect, kubeletapi
from control.apiserver.http.proxytargets import Target, node_target, pod_target, service_target
from control.apiserver.http.proxytargets import split_scheme_name_port as _split
from control.apiserver.http.status import APIError
from control.apiserver.podruntime import Conn, PodRuntimeError
from netmodel.errors import NotFoundError
from netmodel.objects import EndpointSlice, Node, Pod, Service

if TYPE_CHECKING:
    from starlette.requests import Request

    from control.apiserver.http.app import API, RequestInfo
    from control.apiserver.http.authn import User

#: headers that concern one connection, never forwarded (Go's ``httputil.ReverseProxy``)
HOP_BY_HOP = frozenset(
    {
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: what kube-apiserver's filters take off a request before proxying it
CONSUMED = frozenset({"authorization"})
UNREACHABLE = "error trying to reach service: "


def _unreachable(why: str) -> APIError:
    return APIError(503, "ServiceUnavailable", UNREACHABLE + why, {})


# --------------------------------------------------------------------------- paths


def proxy_path(raw_path: str, resource: str) -> tuple[str, str]:
    """``(prefix, rest)`` of a proxy URL path: ``prefix`` up to and including the
    ``proxy`` segment that follows ``RESOURCE/NAME``, ``rest`` what follows it
    (``""`` or starting with ``/``)."""
    segs = raw_path.split("/")
    for k in range(2, len(segs)):
        if segs[k] == "proxy" and segs[k - 2] == resource:
            rest = segs[k + 1 :]
            return "/".join(segs[: k + 1]), ("/" + "/".join(rest)) if rest else ""
    raise APIError(404, "NotFound", "the server could not find the requested resource", {})


def clean_path(rest: str) -> str:
    """Go's ``net.JoinPreservingTrailingSlash("", rest)``: ``path.Clean`` (no ``.``,
    ``..`` or repeated ``/``), the trailing ``/`` kept; empty stays empty."""
    if not rest:
        return ""
    out: list[str] = []
    for seg in rest.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    cleaned = "/" + "/".join(out)
    if rest.endswith("/") and not cleaned.endswith("/"):
        cleaned += "/"
    return cleaned


# --------------------------------------------------------------------------- TLS over a Conn


class TLSConn:
    """TLS (client side, no certificate check) over a runtime's :class:`Conn`."""

    def __init__(self, conn: Conn) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        self.conn = conn
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._tls = ctx.wrap_bio(self._in, self._out)

    async def _flush(self) -> None:
        data = self._out.read()
        if data:
            await self.conn.write(data)

    async def _fill(self) -> None:
        data = await self.conn.read()
        if data:
            self._in.write(data)
        else:
            self._in.write_eof()

    async def handshake(self) -> None:
        """Raises :class:`PodRuntimeError` with Go's words when the peer does not
        speak TLS."""
        while True:
            try:
                self._tls.do_handshake()
                await self._flush()
                return
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill()
            except ssl.SSLError as e:
                if "WRONG_VERSION_NUMBER" in str(e) or "record layer" in str(e):
                    raise PodRuntimeError(
                        "tls: first record does not look like a TLS handshake"
                    ) from None
                if isinstance(e, ssl.SSLEOFError) or "EOF" in str(e):
                    raise PodRuntimeError("EOF") from None
                raise PodRuntimeError(f"remote error: tls: {e.reason or e}") from None

    async def read(self, n: int = 65536) -> bytes:
        while True:
            try:
                return self._tls.read(n)
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def write(self, data: bytes) -> None:
        self._tls.write(data)
        await self._flush()

    async def write_eof(self) -> None:
        await self.conn.write_eof()

    async def close(self) -> None:
        await self.conn.close()


# --------------------------------------------------------------------------- forwarding


def forwarded_headers(
    raw: list[tuple[bytes, bytes]], client: str, uri: str, host: str
) -> list[tuple[bytes, bytes]]:
    """The request headers the target gets (see the module docstring)."""
    named = {
        t.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for t in value.decode("latin-1").split(",")
    }
    out: list[tuple[bytes, bytes]] = []
    prior_for = ""
    for name, value in raw:
        low = name.decode("latin-1").lower()
        if low in HOP_BY_HOP or low in named or low in CONSUMED or low == "content-length":
            continue
        if low.startswith("impersonate-"):
            continue
        if low == "x-forwarded-for":
            prior_for = value.decode("latin-1")
            continue
        if low in ("x-forwarded-uri", "x-forwarded-host", "x-forwarded-proto"):
            continue
        out.append((name, value))
    if client:
        out.append(
            (
                b"X-Forwarded-For",
                f"{prior_for}, {client}".encode() if prior_for else client.encode(),
            )
        )
    out.append((b"X-Forwarded-Uri", uri.encode()))
    if host:
        out.append((b"X-Forwarded-Host", host.encode()))
    out.append((b"X-Forwarded-Proto", b"https"))
    return out


def _relayed(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    named = {
        t.strip().lower().encode()
        for name, value in headers
        if name.lower() == b"connection"
        for t in value.decode("latin-1").split(",")
    }
    return [
        (n.lower(), v)
        for n, v in headers
        if n.decode("latin-1").lower() not in HOP_BY_HOP and n.lower() not in named
    ]


async def exchange(
    conn: Conn, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes
) -> tuple[int, list[tuple[bytes, bytes]], AsyncIterator[bytes]]:
    """Send one HTTP/1.1 request over ``conn`` (which it closes when done); the
    answer's status, headers and body (read as it arrives). :class:`PodRuntimeError`
    with Go's HTTP client's words when the answer is not HTTP."""
    h = h11.Connection(h11.CLIENT)
    hdrs = [*headers, (b"Connection", b"close")]
    if body or method in ("POST", "PUT", "PATCH"):
        hdrs.append((b"Content-Length", str(len(body)).encode()))
    try:
        data = h.send(h11.Request(method=method, target=target, headers=hdrs)) or b""
        if body:
            data += h.send(h11.Data(data=body)) or b""
        data += h.send(h11.EndOfMessage()) or b""
    except h11.LocalProtocolError as e:
        await conn.close()
        raise APIError(400, "BadRequest", f"invalid proxy request: {e}", {}) from None
    await conn.write(data)
    seen = bytearray()
    while True:
        try:
            event = h.next_event()
        except h11.RemoteProtocolError:
            await conn.close()
            first = bytes(seen).split(b"\r\n", 1)[0].split(b"\n", 1)[0].decode("latin-1")
            raise PodRuntimeError(
                f'net/http: HTTP/1.x transport connection broken: malformed HTTP response "{first}"'
            ) from None
        if event is h11.NEED_DATA:
            chunk = await conn.read()
            if len(seen) < 4096:
                seen += chunk
            h.receive_data(chunk)
            if not chunk and not seen:
                await conn.close()
                raise PodRuntimeError("EOF")
            continue
        if isinstance(event, h11.InformationalResponse):
            continue
        if isinstance(event, h11.Response):
            return event.status_code, _relayed(list(event.headers)), _body(h, conn)
        await conn.close()
        raise PodRuntimeError("EOF")


async def _body(h: h11.Connection, conn: Conn) -> AsyncIterator[bytes]:
    try:
        while True:
            try:
                event = h.next_event()
            except h11.RemoteProtocolError:
                return  # cut short: what came is what the client gets
            if event is h11.NEED_DATA:
                h.receive_data(await conn.read())
                continue
            if isinstance(event, h11.Data):
                if event.data:
                    yield bytes(event.data)
                continue
            return  # EndOfMessage or ConnectionClosed
    finally:
        await conn.close()


async def _forward(api: API, request: Request, target: Target, prefix: str, rest: str) -> Response:
    path = clean_path(rest)
    query = request.scope.get("query_string", b"").decode("latin-1")
    if not path and request.method in ("GET", "HEAD"):
        location = request.url.path + "/" + (f"?{query}" if query else "")
        return Response(status_code=301, headers={"Location": location})
    if target.kubelet:
        return _kubelet(api, request, target.kubelet, path or "/")
    if api.runtime is None:
        raise _unreachable("no pod runtime serves this cluster")
    uri = prefix + (path or "/")
    headers = forwarded_headers(
        list(request.headers.raw),
        request.client.host if request.client else "",
        uri,
        request.headers.get("host", ""),
    )
    body = await request.body()
    try:
        conn: Conn = await api.runtime.dial(target.host, target.port)
        if target.scheme == "https":
            tls = TLSConn(conn)
            try:
                await tls.handshake()
            except PodRuntimeError:
                await conn.close()
                raise
            conn = tls
        code, hdrs, stream = await exchange(
            conn, request.method, (path or "/") + (f"?{query}" if query else ""), headers, body
        )
    except PodRuntimeError as e:
        raise _unreachable(str(e)) from None
    resp = StreamingResponse(stream, status_code=code)
    resp.raw_headers = hdrs
    return resp


def _kubelet(api: API, request: Request, node: str, path: str) -> Response:
    pods = [p for p in api.list("Pod") if isinstance(p, Pod)]
    a = kubeletapi.answer(request.method, path, node, pods)
    resp = Response(a.body if request.method != "HEAD" else b"", status_code=a.status)
    resp.raw_headers = [(k.lower().encode(), v.encode()) for k, v in a.headers] + [
        (b"content-length", str(len(a.body)).encode())
    ]
    return resp


# --------------------------------------------------------------------------- handlers


def _raw_path(request: Request) -> str:
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path


def _get(api: API, kind: str, key: str) -> object | None:
    try:
        return api.get(kind, key)
    except NotFoundError:
        return None


async def service_proxy(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    """``services/ID/proxy/PATH``."""
    ns = info.namespace
    parsed = _split(info.name)
    name = parsed[1] if parsed else ""
    svc = _get(api, "Service", f"{ns}/{name}") if name else None
    slices = [
        s
        for s in api.list("EndpointSlice", ns)
        if isinstance(s, EndpointSlice) and s.service_name == name
    ]

    def pod(pname: str) -> Pod | None:
        p = _get(api, "Pod", f"{ns}/{pname}")
        return p if isinstance(p, Pod) else None

    target = service_target(
        info.name, svc if isinstance(svc, Service) else None, slices if name else [], pod
    )
    prefix, rest = proxy_path(_raw_path(request), "services")
    return await _forward(api, request, target, prefix, rest)


async def pod_proxy(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    """``pods/ID/proxy/PATH``."""
    parsed = _split(info.name)
    p = _get(api, "Pod", f"{info.namespace}/{parsed[1]}") if parsed else None
    target = pod_target(info.name, p if isinstance(p, Pod) else None)
    prefix, rest = proxy_path(_raw_path(request), "pods")
    return await _forward(api, request, target, prefix, rest)


async def node_proxy(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    """``nodes/ID/proxy/PATH``."""
    parsed = _split(info.name)
    n = _get(api, "Node", parsed[1]) if parsed else None
    target = node_target(info.name, n if isinstance(n, Node) else None)
    prefix, rest = proxy_path(_raw_path(request), "nodes")
    return await _forward(api, request, target, prefix, rest)


connect.HANDLERS[("services", "proxy")] = service_proxy
connect.HANDLERS[("pods", "proxy")] = pod_proxy
connect.HANDLERS[("nodes", "proxy")] = node_proxy
