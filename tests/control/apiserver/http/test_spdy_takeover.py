"""Connection takeover in svclab's TLS layer (control.apiserver.http.tls, HIJACK): a real
uvicorn server over the TLS protocol, an ASGI app that answers plain requests and takes
an upgrade's connection over to echo it in upper case; a TLS client on a real socket."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import uvicorn
from serving import free_port

from control.apiserver.http import pki, tls


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/takeover":
        reader, writer = scope["extensions"][tls.HIJACK]()
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n")
        writer.write(b"Upgrade: echo\r\n\r\n")
        while data := await reader.read(1000):
            writer.write(data.upper())
            await writer.drain()
        writer.close()
        return  # no ASGI response: uvicorn must write nothing more
    body = f"plain {scope['path']}".encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


def test_hijacked_connection_carries_bytes_both_ways(tmp_path: Path) -> None:
    port = free_port()
    paths = pki.ensure_pki(tmp_path, "127.0.0.1", port)
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    ctx = tls.server_context(paths.server_crt, paths.server_key, paths.ca_crt)
    client_ctx = ssl.create_default_context(cafile=str(paths.ca_crt))

    async def body() -> None:
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            http=tls.uvicorn_protocol(ctx, HttpToolsProtocol),
            lifespan="off",
            log_level="warning",
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.02)
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
            # a plain request first, on the same connection as the upgrade
            w.write(b"GET /plain HTTP/1.1\r\nHost: x\r\n\r\n")
            head, data = await _response(r)
            assert head.startswith(b"HTTP/1.1 200") and data == b"plain /plain"
            w.write(
                b"POST /takeover HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                b"Upgrade: echo\r\nContent-Length: 0\r\n\r\n"
            )
            head = await r.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
            w.write(b"hello")
            assert await r.readexactly(5) == b"HELLO"
            w.write(b"x" * 100_000)  # more than one TLS record, both ways
            assert await r.readexactly(100_000) == b"X" * 100_000
            w.close()
            # the same server still answers plain requests
            r2, w2 = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
            w2.write(b"GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
            head, data = await _response(r2)
            assert data == b"plain /again"
            w2.close()
        finally:
            server.should_exit = True
            await task

    asyncio.run(asyncio.wait_for(body(), 30))


def test_app_may_return_and_leave_the_connection_to_a_task(tmp_path: Path) -> None:
    """The app hands the taken connection to a task and returns without an ASGI
    response: uvicorn writes no 500 of its own into it, the task's bytes come next."""
    port = free_port()
    paths = pki.ensure_pki(tmp_path, "127.0.0.1", port)
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    ctx = tls.server_context(paths.server_crt, paths.server_key, paths.ca_crt)
    client_ctx = ssl.create_default_context(cafile=str(paths.ca_crt))
    tasks: list[asyncio.Task[None]] = []

    async def handoff(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        reader, writer = scope["extensions"][tls.HIJACK]()
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")

        async def echo() -> None:
            while data := await reader.read(1000):
                writer.write(data.upper())
            writer.close()

        tasks.append(asyncio.create_task(echo()))

    async def body() -> None:
        config = uvicorn.Config(
            handoff,
            host="127.0.0.1",
            port=port,
            http=tls.uvicorn_protocol(ctx, HttpToolsProtocol),
            lifespan="off",
            log_level="warning",
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.02)
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
            w.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
            assert await r.readuntil(b"\r\n\r\n") == b"HTTP/1.1 101 Switching Protocols\r\n\r\n"
            while not tasks:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # the app has returned; uvicorn is done with it
            w.write(b"abc")
            assert await r.readexactly(3) == b"ABC"
            w.close()
            await tasks[0]
        finally:
            server.should_exit = True
            await task

    asyncio.run(asyncio.wait_for(body(), 30))
