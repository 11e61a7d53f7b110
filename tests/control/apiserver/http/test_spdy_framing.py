"""SPDY/3.1 framing and the server session (control.apiserver.http.spdy), against bytes
derived from the SPDY/3.1 draft and header blocks a real kubectl 1.20 sent; the session
runs over an in-memory byte pipe with a test client that writes and parses raw frames."""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from spdyclient import Client

from control.apiserver.http import spdy
from control.apiserver.http.spdy import (
    DICTIONARY,
    HeaderCodec,
    Session,
    SpdyError,
    control_frame,
    data_frame,
    decode_block,
    encode_block,
    parse_head,
)

# The first three SYN_STREAM header blocks of `kubectl exec POD -- hostname` (kubectl
# 1.20, Go's zlib with its own copy of the SPDY/3 dictionary), in the order sent: one
# zlib context runs through all three, so each decodes only after the ones before.
KUBECTL_1_20_BLOCKS = [
    bytes.fromhex("78f9e3c6a7c26260606004a7b392a2d4c45c6851c29a0a0a6800000000ffff"),
    bytes.fromhex("c22ac5565c92925f5a02000000ffff"),
    bytes.fromhex("c229975a5404000000ffff"),
]


def test_dictionary_is_the_spec_s() -> None:
    # draft-mbelshe-httpbis-spdy-00 2.6.10.1: 1423 bytes, length-prefixed words first
    assert len(DICTIONARY) == 1423
    assert DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert DICTIONARY.endswith(b"utf-,*,enq=0.")
    # the zlib stream kubectl sent names the dictionary it used by its Adler-32 (FDICT)
    first = KUBECTL_1_20_BLOCKS[0]
    assert first[1] & 0x20
    assert struct.unpack(">I", first[2:6])[0] == zlib.adler32(DICTIONARY)


def test_decodes_kubectl_1_20_header_blocks_in_one_context() -> None:
    codec = HeaderCodec()
    got = [codec.decompress(b) for b in KUBECTL_1_20_BLOCKS]
    assert got == [
        {"streamtype": ["error"]},
        {"streamtype": ["stdout"]},
        {"streamtype": ["stderr"]},
    ]
    # without the first block's context the second cannot be read
    with pytest.raises(SpdyError):
        HeaderCodec().decompress(KUBECTL_1_20_BLOCKS[1])


def test_header_block_layout_and_compression_round_trip() -> None:
    block = encode_block([("StreamType", ["data"]), ("port", ["80"]), ("x", ["a", "b"])])
    want = (
        b"\x00\x00\x00\x03"
        + b"\x00\x00\x00\x0astreamtype\x00\x00\x00\x04data"
        + b"\x00\x00\x00\x04port\x00\x00\x00\x0280"
        + b"\x00\x00\x00\x01x\x00\x00\x00\x03a\x00b"
    )
    assert block == want
    assert decode_block(block) == {"streamtype": ["data"], "port": ["80"], "x": ["a", "b"]}
    sender, receiver = HeaderCodec(), HeaderCodec()
    for headers in ([("streamtype", ["error"]), ("requestid", ["0"])], [], [("port", ["8080"])]):
        wire = sender.compress(headers)
        assert wire.endswith(b"\x00\x00\xff\xff")  # each block ends in a sync flush
        assert receiver.decompress(wire) == {k: v for k, v in headers}
    # what we send, zlib itself inflates with the spec's dictionary
    d = zlib.decompressobj(zdict=DICTIONARY)
    assert d.decompress(HeaderCodec().compress([("a", ["b"])])) == encode_block([("a", ["b"])])


@pytest.mark.parametrize(
    "block",
    [
        b"\x00\x00\x00\x01\x00\x00\x00\x05ab",  # truncated name
        b"\x00\x00\x00\x01\x00\x00\x00\x01A\x00\x00\x00\x00",  # upper-case name
        b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00",  # empty name
        b"\x00\x00\x00\x00junk",  # trailing bytes
    ],
)
def test_malformed_header_blocks_are_refused(block: bytes) -> None:
    with pytest.raises(SpdyError):
        decode_block(block)


def test_frame_byte_layouts() -> None:
    # DATA: |0|stream id (31)|flags (8)|length (24)|data
    assert data_frame(5, spdy.FLAG_FIN, b"ab") == bytes.fromhex("00000005 01000002 6162")
    # RST_STREAM: |1|version 3|type 3| flags 0 | length 8 | stream id | status
    rst = control_frame(spdy.RST_STREAM, 0, struct.pack(">II", 7, spdy.CANCEL))
    assert rst == bytes.fromhex("80030003 00000008 00000007 00000005")
    assert parse_head(rst[:8]) == (True, 3, spdy.RST_STREAM, 0, 8)
    assert parse_head(data_frame(0x7FFFFFFF, 0, b"x")[:8]) == (False, 0, 0x7FFFFFFF, 0, 1)


# --------------------------------------------------------------------------- session


def run(coro: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(coro(), 10))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_session_accepts_replies_delivers_and_closes() -> None:
    async def body() -> None:
        c = Client()
        s = Session(c.server_io)
        reader = asyncio.create_task(s.run())
        c.syn(1, {"streamType": "stdin"})
        ctl, kind, _f, data, _ = await c.frame()
        assert (ctl, kind) == (True, spdy.SYN_REPLY)
        assert struct.unpack_from(">I", data)[0] == 1
        assert c.codec.decompress(data[4:]) == {}  # kubelet's empty reply
        stream = await s.next_stream()
        assert stream is not None and stream.header("streamtype") == "stdin"
        c.send(data_frame(1, 0, b"hello ") + data_frame(1, spdy.FLAG_FIN, b"world"))
        assert await stream.read_all() == b"hello world"
        await stream.write(b"out")
        await stream.close()
        assert await c.frame() == (False, 0, 0, b"out", 1)
        assert await c.frame() == (False, 0, spdy.FLAG_FIN, b"", 1)
        # a client PING (odd id) is echoed
        c.send(control_frame(spdy.PING, 0, struct.pack(">I", 7)))
        assert await c.frame() == (True, spdy.PING, 0, struct.pack(">I", 7), 0)
        await s.close()
        ctl, kind, _f, data, _ = await c.frame()
        assert (kind, data) == (spdy.GOAWAY, struct.pack(">II", 1, spdy.GOAWAY_OK))
        assert c.server_io.closed
        reader.cancel()

    run(body)


def test_refused_stream_is_reset_and_stream_ids_must_grow() -> None:
    async def body() -> None:
        c = Client()
        s = Session(c.server_io, accept=lambda st: None if st.header("port") else "no port")
        reader = asyncio.create_task(s.run())
        c.syn(1, {"streamType": "data"})
        assert await c.frame() == (
            True,
            spdy.RST_STREAM,
            0,
            struct.pack(">II", 1, spdy.CANCEL),
            0,
        )
        c.syn(1, {"port": "80"})  # an id not above the last one breaks the protocol
        _ctl, kind, _f, data, _ = await c.frame()
        assert (kind, data) == (spdy.GOAWAY, struct.pack(">II", 1, spdy.GOAWAY_PROTOCOL_ERROR))
        await reader
        assert await s.next_stream() is None

    run(body)


def test_receive_window_is_returned_as_the_application_reads() -> None:
    async def body() -> None:
        c = Client()
        s = Session(c.server_io)
        reader = asyncio.create_task(s.run())
        c.syn(1, {"streamType": "data"})
        await c.frame()  # SYN_REPLY
        stream = await s.next_stream()
        assert stream is not None
        half = spdy.INITIAL_WINDOW // 2
        c.send(data_frame(1, 0, b"x" * (half - 1)))
        assert len(await stream.read() or b"") == half - 1
        await settle()
        assert c.pending() == b""  # less than half a window consumed: nothing yet
        c.send(data_frame(1, 0, b"y"))
        assert await stream.read() == b"y"
        got = {await c.frame(), await c.frame()}
        assert got == {
            (True, spdy.WINDOW_UPDATE, 0, struct.pack(">II", 0, half), 0),
            (True, spdy.WINDOW_UPDATE, 0, struct.pack(">II", 1, half), 0),
        }
        reader.cancel()

    run(body)


def test_send_window_is_honoured_once_the_peer_counts_windows() -> None:
    async def body() -> None:
        c = Client()
        s = Session(c.server_io)
        reader = asyncio.create_task(s.run())
        settings = struct.pack(">III", 1, spdy.SETTINGS_INITIAL_WINDOW_SIZE, 10)
        c.send(control_frame(spdy.SETTINGS, 0, settings))
        c.syn(1, {"streamType": "stdout"})
        await c.frame()  # SYN_REPLY
        stream = await s.next_stream()
        assert stream is not None
        writer = asyncio.create_task(stream.write(b"0123456789abcdefghijklmno"))
        assert await c.frame() == (False, 0, 0, b"0123456789", 1)
        await settle()
        assert not writer.done() and c.pending() == b""  # the window is spent
        c.send(control_frame(spdy.WINDOW_UPDATE, 0, struct.pack(">II", 1, 10)))
        assert await c.frame() == (False, 0, 0, b"abcdefghij", 1)
        await settle()
        assert not writer.done()
        c.send(control_frame(spdy.WINDOW_UPDATE, 0, struct.pack(">II", 1, 100)))
        assert await c.frame() == (False, 0, 0, b"klmno", 1)
        await writer
        reader.cancel()

    run(body)


def test_peer_that_counts_no_windows_gets_everything() -> None:
    async def body() -> None:
        # spdystream (kubectl) neither sends WINDOW_UPDATE nor SETTINGS
        c = Client()
        s = Session(c.server_io)
        reader = asyncio.create_task(s.run())
        c.syn(1, {"streamType": "stdout"})
        await c.frame()
        stream = await s.next_stream()
        assert stream is not None
        size = 3 * spdy.INITIAL_WINDOW
        await stream.write(b"z" * size)
        got = 0
        while got < size:
            ctl, _k, _f, data, sid = await c.frame()
            assert not ctl and sid == 1
            got += len(data)
        assert got == size
        reader.cancel()

    run(body)


def test_unknown_version_is_a_protocol_error() -> None:
    async def body() -> None:
        c = Client()
        s = Session(c.server_io)
        reader = asyncio.create_task(s.run())
        c.send(struct.pack(">HHI", 0x8002, spdy.PING, 4) + b"\x00\x00\x00\x01")
        _ctl, kind, _f, data, _ = await c.frame()
        assert (kind, data[4:]) == (spdy.GOAWAY, struct.pack(">I", spdy.GOAWAY_PROTOCOL_ERROR))
        await reader

    run(body)
