"""A test peer for SPDY sessions: an in-memory byte pipe (the server's end is a
:class:`spdy.ByteIO`) and a client that writes raw frames with its own zlib context and
parses what the server sends (shared by the test_spdy_* modules)."""

from __future__ import annotations

import asyncio
import struct

from control.apiserver.http import spdy
from control.apiserver.http.spdy import HeaderCodec, control_frame, parse_head


class Pipe:
    """One direction of an in-memory byte transport."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.more = asyncio.Event()
        self.eof = False

    async def read(self, n: int) -> bytes:
        while not self.buf and not self.eof:
            self.more.clear()
            await self.more.wait()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def feed(self, data: bytes) -> None:
        self.buf += data
        self.more.set()

    def close(self) -> None:
        self.eof = True
        self.more.set()


class ServerEnd:
    """The server's :class:`spdy.ByteIO`: reads what the client wrote, writes to it."""

    def __init__(self, up: Pipe, down: Pipe) -> None:
        self.up, self.down = up, down
        self.closed = False

    async def read(self, n: int) -> bytes:
        return await self.up.read(n)

    async def write(self, data: bytes) -> None:
        self.down.feed(data)

    async def close(self) -> None:
        self.closed = True
        self.down.close()


class Client:
    """A test client that speaks raw frames (its own zlib context)."""

    def __init__(self) -> None:
        self.up, self.down = Pipe(), Pipe()
        self.codec = HeaderCodec()
        self.server_io = ServerEnd(self.up, self.down)

    def syn(self, sid: int, headers: dict[str, str], flags: int = 0) -> None:
        block = self.codec.compress([(k, [v]) for k, v in headers.items()])
        body = struct.pack(">IIBB", sid, 0, 0, 0) + block
        self.up.feed(control_frame(spdy.SYN_STREAM, flags, body))

    def send(self, frame: bytes) -> None:
        self.up.feed(frame)

    async def frame(self) -> tuple[bool, int, int, bytes, int]:
        """(control, type, flags, payload, stream) of the next frame from the server."""
        head = await self._exactly(8)
        control, _v, kind, flags, length = parse_head(head)
        data = await self._exactly(length)
        return (control, kind if control else 0, flags, data, 0 if control else kind)

    async def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = await self.down.read(n - len(out))
            assert chunk, "the server closed the connection"
            out += chunk
        return out

    def pending(self) -> bytes:
        return bytes(self.down.buf)
