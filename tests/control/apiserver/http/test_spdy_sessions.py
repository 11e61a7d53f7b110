"""The exec and port-forward sessions of control.apiserver.http.spdystreams over a real
:class:`spdy.Session` and an in-memory byte pipe: stream setup by ``streamType``, the
order kubectl relies on (stdout FIN, then the error stream's status, its FIN, GOAWAY),
v4 and v2 statuses, stdin, a terminal's resize events, and kubelet's checks of
port-forward streams. The command is a coroutine standing for the runtime (the
emulated runtime behind the same calls runs in test_spdy_kubectl)."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import pytest
from spdyclient import Client

from control.apiserver.http import spdy
from control.apiserver.http.spdy import Session, data_frame
from control.apiserver.http.spdystreams import (
    SpdyExecIO,
    accept_port_forward_stream,
    exit_status,
    serve_exec,
    wait_for_streams,
)
from control.apiserver.podruntime import ExecSpec


async def _until_goaway(c: Client) -> list[tuple[bool, int, int, bytes, int]]:
    frames = []
    while True:
        f = await c.frame()
        frames.append(f)
        if f[0] and f[1] == spdy.GOAWAY:
            return frames


def _data(frames: list[tuple[bool, int, int, bytes, int]], sid: int) -> bytes:
    return b"".join(f[3] for f in frames if not f[0] and f[4] == sid)


def _index(frames: list[tuple[bool, int, int, bytes, int]], sid: int, fin: bool) -> int:
    """Where stream ``sid``'s FIN (or first data) frame is."""
    for i, (ctl, _k, flags, data, s) in enumerate(frames):
        if not ctl and s == sid and (bool(flags & spdy.FLAG_FIN) if fin else bool(data)):
            return i
    raise AssertionError(f"no {'FIN' if fin else 'data'} on stream {sid}")


def test_v4_exec_with_terminal_resizes_and_exit_code() -> None:
    seen: list[tuple[int, int]] = []

    async def command(io: SpdyExecIO) -> int:
        while len(io.resizes) < 2:
            io.resized.clear()
            await io.resized.wait()
        seen.extend(io.resizes)
        w, h = io.size or (0, 0)
        await io.write_stdout(f"size {w}x{h}\n".encode())
        await io.write_stderr(b"err\n")  # a terminal: into stdout
        return 3

    async def body() -> None:
        c = Client()
        spec = ExecSpec("default", "p", "c", ("tool", "x"), stdout=True, stderr=False, tty=True)
        server = asyncio.create_task(
            serve_exec(Session(c.server_io), "v4.channel.k8s.io", spec, command)
        )
        c.syn(1, {"streamType": "error"})
        c.syn(3, {"streamType": "stdout"})
        c.syn(5, {"streamType": "resize"})
        c.send(data_frame(5, 0, b'{"Width":80,"Height":24}\n{"Width":1'))
        c.send(data_frame(5, 0, b'00,"Height":30}\n'))
        frames = await _until_goaway(c)
        await server
        assert seen == [(80, 24), (100, 30)]
        assert _data(frames, 3) == b"size 100x30\nerr\n"
        status = json.loads(_data(frames, 1))
        assert status == exit_status(3, ("tool", "x"))
        assert status["reason"] == "NonZeroExitCode"
        assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
        # kubectl reads stdout to its end, then the error stream to its end
        assert _index(frames, 3, fin=True) < _index(frames, 1, fin=False)
        assert _index(frames, 1, fin=False) < _index(frames, 1, fin=True)
        assert c.server_io.closed

    asyncio.run(asyncio.wait_for(body(), 10))


@pytest.mark.parametrize(("code", "want"), [(0, b""), (5, None)])
def test_v2_status_is_text_and_success_is_silent(code: int, want: bytes | None) -> None:
    async def command(io: SpdyExecIO) -> int:
        data = b""
        while (chunk := await io.read_stdin()) is not None:
            data += chunk
        await io.write_stdout(data[::-1])
        return code

    async def body() -> None:
        c = Client()
        spec = ExecSpec("default", "p", "c", ("rev",), stdin=True, stdout=True, stderr=False)
        server = asyncio.create_task(
            serve_exec(Session(c.server_io), "v2.channel.k8s.io", spec, command)
        )
        c.syn(1, {"streamType": "error"})
        c.syn(3, {"streamType": "stdin"})
        c.syn(5, {"streamType": "stdout"})
        c.send(data_frame(3, 0, b"abc") + data_frame(3, spdy.FLAG_FIN, b"def"))
        frames = await _until_goaway(c)
        await server
        assert _data(frames, 5) == b"fedcba"
        expected = want
        if expected is None:
            expected = b"command terminated with non-zero exit code: "
            expected += b"error executing command [rev], exit code 5"
        assert _data(frames, 1) == expected

    asyncio.run(asyncio.wait_for(body(), 10))


def test_streams_of_another_type_are_left_alone_and_a_missing_one_times_out() -> None:
    async def body() -> None:
        c = Client()
        session = Session(c.server_io)
        reader = asyncio.create_task(session.run())
        c.syn(1, {"streamType": "error"})
        c.syn(3, {"streamType": "bogus"})
        assert await wait_for_streams(session, {"error", "stdout"}, timeout=0.2) is None
        c.syn(5, {"streamType": "stdout"})
        got = await wait_for_streams(session, {"stdout"}, timeout=5)
        assert got is not None and got["stdout"].id == 5
        reader.cancel()

    asyncio.run(asyncio.wait_for(body(), 10))


class _Headers:
    def __init__(self, **h: str) -> None:
        self.h = {k.lower(): v for k, v in h.items()}

    def header(self, name: str) -> str:
        return self.h.get(name.lower(), "")


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({"streamType": "data"}, '"port" header is required'),
        (
            {"port": "http", "streamType": "data"},
            'unable to parse "http" as a port: strconv.ParseUint: parsing "http": invalid syntax',
        ),
        (
            {"port": "70000", "streamType": "data"},
            'unable to parse "70000" as a port: strconv.ParseUint: parsing "70000": '
            "value out of range",
        ),
        ({"port": "0", "streamType": "data"}, 'port "0" must be > 0'),
        ({"port": "80"}, '"streamType" header is required'),
        ({"port": "80", "streamType": "stdin"}, 'invalid stream type "stdin"'),
        ({"port": "80", "streamType": "data"}, None),
        ({"port": "80", "streamType": "error"}, None),
    ],
)
def test_port_forward_stream_checks(headers: dict[str, str], why: str | None) -> None:
    stream: Any = _Headers(**headers)
    assert accept_port_forward_stream(stream) == why


def test_refused_port_forward_stream_is_reset_on_the_wire() -> None:
    async def body() -> None:
        c = Client()
        session = Session(c.server_io, accept=accept_port_forward_stream)
        reader = asyncio.create_task(session.run())
        c.syn(1, {"streamType": "data"})
        assert await c.frame() == (
            True,
            spdy.RST_STREAM,
            0,
            struct.pack(">II", 1, spdy.CANCEL),
            0,
        )
        reader.cancel()

    asyncio.run(asyncio.wait_for(body(), 10))
