"""The proxy's HTTP/1.1 exchange (control.apiserver.http.proxy.exchange, TLSConn) over
real TCP connections to small local servers: a chunked answer relayed without its
hop-by-hop headers, the request's headers and body as the server read them, TLS
without a certificate check, and Go's words for a server that does not speak HTTP or
TLS."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from control.apiserver.http import pki
from control.apiserver.http.proxy import TLSConn, exchange
from control.apiserver.podruntime import Conn, PodRuntimeError

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class StreamConn:
    """A :class:`Conn` over an asyncio TCP connection."""

    def __init__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.r, self.w = r, w

    async def read(self, n: int = 65536) -> bytes:
        return await self.r.read(n)

    async def write(self, data: bytes) -> None:
        self.w.write(data)
        await self.w.drain()

    async def write_eof(self) -> None:
        self.w.write_eof()

    async def close(self) -> None:
        self.w.close()


async def _echo_http(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    """Answers with what it read (request line, headers, body) as JSON, chunked, with
    hop-by-hop headers of its own."""
    head = await r.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    hdrs = [line.split(": ", 1) for line in lines[1:] if line]
    length = int(next((v for k, v in hdrs if k.lower() == "content-length"), "0"))
    body = await r.readexactly(length) if length else b""
    doc = json.dumps({"line": lines[0], "headers": hdrs, "body": body.decode()}).encode()
    half = len(doc) // 2
    w.write(
        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\n"
        b"Keep-Alive: timeout=5\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n"
    )
    for part in (doc[:half], doc[half:]):
        w.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
    w.write(b"0\r\n\r\n")
    await w.drain()
    w.close()


async def _not_http(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    await r.read(10)
    w.write(b"default/web-1 10.244.0.1 40000\n")
    await w.drain()
    w.close()


async def _run(
    serve: Serve, client: Callable[[Conn], Awaitable[object]], tls: ssl.SSLContext | None = None
) -> object:
    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return await client(StreamConn(r, w))
    finally:
        server.close()


async def _collect(
    conn: Conn, method: str = "POST", body: bytes = b"abc"
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    headers = [(b"Host", b"127.0.0.1:6443"), (b"X-Forwarded-Uri", b"/p/")]
    code, hdrs, stream = await exchange(conn, method, "/a/b?x=1", headers, body)
    data = b"".join([c async for c in stream])
    return code, hdrs, data


def test_exchange_relays_a_chunked_answer_without_hop_by_hop_headers() -> None:
    code, hdrs, data = asyncio.run(_run(_echo_http, _collect))  # type: ignore[misc]
    assert code == 201
    names = [n for n, _ in hdrs]
    assert names == [b"content-type", b"set-cookie", b"set-cookie"]
    seen = json.loads(data)
    assert seen["line"] == "POST /a/b?x=1 HTTP/1.1"
    assert seen["body"] == "abc"
    assert ["Content-Length", "3"] in seen["headers"]
    assert ["Connection", "close"] in seen["headers"]


def test_exchange_over_tls_without_certificate_check(tmp_path: Path) -> None:
    paths = pki.ensure_pki(tmp_path, "127.0.0.1", 1)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(paths.server_crt), str(paths.server_key))

    async def client(conn: Conn) -> object:
        tls = TLSConn(conn)
        await tls.handshake()
        return await _collect(tls, "GET", b"")

    code, _, data = asyncio.run(_run(_echo_http, client, ctx))  # type: ignore[misc]
    assert code == 201
    assert json.loads(data)["line"] == "GET /a/b?x=1 HTTP/1.1"


def test_go_words_for_a_server_that_speaks_neither_http_nor_tls() -> None:
    with pytest.raises(PodRuntimeError) as e:
        asyncio.run(_run(_not_http, _collect))
    assert str(e.value) == (
        "net/http: HTTP/1.x transport connection broken: "
        'malformed HTTP response "default/web-1 10.244.0.1 40000"'
    )

    async def client(conn: Conn) -> object:
        await TLSConn(conn).handshake()
        return None

    with pytest.raises(PodRuntimeError) as e:
        asyncio.run(_run(_not_http, client))
    assert str(e.value) == "tls: first record does not look like a TLS handshake"
