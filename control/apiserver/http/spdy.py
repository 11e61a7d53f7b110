"""SPDY/3.1 framing and a server-side session, as kubelet's streaming server speaks it to
``kubectl exec``, ``attach`` and ``port-forward`` (the clients' library is Go's
``spdystream``; the protocol is the public SPDY/3.1 draft).

Frames (all integers big-endian; the length counts the bytes after the 8-byte head)::

    control: |1| version (15) = 3 | type (16) |  flags (8) | length (24) | data
    data:    |0| stream id (31)               |  flags (8) | length (24) | data

Control frames used: SYN_STREAM (1), SYN_REPLY (2), RST_STREAM (3), SETTINGS (4),
PING (6), GOAWAY (7), HEADERS (8), WINDOW_UPDATE (9). Flag FIN (1) ends a sender's
half of a stream. A header block (in SYN_STREAM, SYN_REPLY, HEADERS) is a 32-bit count
of pairs, then per pair a 32-bit length + lower-case name and a 32-bit length + value
(several values joined by NUL), compressed with zlib and the SPDY/3 dictionary
(:data:`DICTIONARY`), one compression context per direction for the whole session,
each block ending in a sync flush.

:class:`Session` runs over any byte transport (:class:`ByteIO`): the socket a hijacked
HTTP upgrade leaves (:mod:`.tls`), or the binary messages of a WebSocket tunnel
(``SPDY/3.1+portforward.k8s.io``). The client opens streams (odd ids); the server
accepts (SYN_REPLY, as kubelet answers every stream it takes) or refuses (RST_STREAM
CANCEL), then both sides send DATA and half-close with FIN.

Flow control. Receiving: each stream and the session start with a 64 KiB window, and a
WINDOW_UPDATE returns what the application consumed, so a sender that counts windows
is paced by them. ``spdystream`` (kubectl's, client-go's, kubelet's own library) counts
none: it parses WINDOW_UPDATE and SETTINGS and ignores them, and sends as fast as TCP
takes it. Such a sender is paced the way spdystream paces it: a stream holds at most
:data:`STREAM_BUFFER` unread bytes, past which the session stops reading the transport
until the application catches up. Sending: once the peer shows that it counts windows
(it sent a WINDOW_UPDATE or a SETTINGS_INITIAL_WINDOW_SIZE), DATA never exceeds the
stream's and the session's windows and waits for the peer's updates; a peer that never
does (spdystream) would otherwise stall every transfer past 64 KiB, as a real kubelet's
peer never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger("svclab.spdy")

VERSION = 3

SYN_STREAM = 1
SYN_REPLY = 2
RST_STREAM = 3
SETTINGS = 4
PING = 6
GOAWAY = 7
HEADERS = 8
WINDOW_UPDATE = 9

FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02

#: RST_STREAM status codes
PROTOCOL_ERROR = 1
INVALID_STREAM = 2
REFUSED_STREAM = 3
UNSUPPORTED_VERSION = 4
CANCEL = 5
INTERNAL_ERROR = 6
FLOW_CONTROL_ERROR = 7
STREAM_IN_USE = 8
STREAM_ALREADY_CLOSED = 9
FRAME_TOO_LARGE = 11

#: GOAWAY status codes
GOAWAY_OK = 0
GOAWAY_PROTOCOL_ERROR = 1
GOAWAY_INTERNAL_ERROR = 2

#: SETTINGS ids
SETTINGS_INITIAL_WINDOW_SIZE = 7

#: the initial window of every stream and of the session (SPDY/3.1)
INITIAL_WINDOW = 65536
#: the largest DATA frame this side sends
MAX_DATA = 32768
#: unread bytes a stream holds before the session stops reading the transport
STREAM_BUFFER = 1 << 20
#: the largest frame this side accepts (the 24-bit length allows 16 MiB)
MAX_FRAME = 1 << 24

# The SPDY/3 header compression dictionary (draft-mbelshe-httpbis-spdy-00, section
# 2.6.10.1): a list of header names and common values, each preceded by its 32-bit
# length, then a run of raw status codes, reason phrases, dates and media types.
_DICT_WORDS = (
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
)
_DICT_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417"
    "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently"
    "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
    "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct "
    "Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,"
    "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8"
    "charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = (
    b"".join(struct.pack(">I", len(w)) + w.encode() for w in _DICT_WORDS) + _DICT_TAIL.encode()
)

Headers = dict[str, list[str]]


class SpdyError(Exception):
    """A peer broke the protocol (the session ends with GOAWAY PROTOCOL_ERROR)."""


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame as read: ``control`` frames have a ``type``; DATA frames have
    ``stream`` and ``type`` 0. ``data`` is what follows the 8-byte head."""

    control: bool
    type: int
    flags: int
    data: bytes
    stream: int = 0

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


def control_frame(ftype: int, flags: int, payload: bytes) -> bytes:
    """A control frame's bytes (version 3)."""
    if len(payload) >= MAX_FRAME:
        raise ValueError(f"control frame of {len(payload)} bytes")
    return struct.pack(">HHI", 0x8000 | VERSION, ftype, (flags << 24) | len(payload)) + payload


def data_frame(stream: int, flags: int, payload: bytes) -> bytes:
    """A DATA frame's bytes."""
    if len(payload) >= MAX_FRAME:
        raise ValueError(f"data frame of {len(payload)} bytes")
    return struct.pack(">II", stream & 0x7FFFFFFF, (flags << 24) | len(payload)) + payload


def parse_head(head: bytes) -> tuple[bool, int, int, int, int]:
    """``(control, version, type or stream id, flags, length)`` of an 8-byte head."""
    word, rest = struct.unpack(">II", head)
    flags, length = rest >> 24, rest & 0xFFFFFF
    if word & 0x80000000:
        return True, (word >> 16) & 0x7FFF, word & 0xFFFF, flags, length
    return False, 0, word & 0x7FFFFFFF, flags, length


def encode_block(headers: Iterable[tuple[str, list[str]]]) -> bytes:
    """An uncompressed header block: names lower-cased, several values joined by NUL."""
    pairs = list(headers)
    out = [struct.pack(">I", len(pairs))]
    for name, values in pairs:
        n = name.lower().encode()
        v = b"\0".join(x.encode() for x in values)
        out += [struct.pack(">I", len(n)), n, struct.pack(">I", len(v)), v]
    return b"".join(out)


def decode_block(block: bytes) -> Headers:
    """The headers of an uncompressed block; :class:`SpdyError` on a truncated or
    malformed one (an empty name, a repeated name, a name with upper-case letters)."""
    try:
        (count,) = struct.unpack_from(">I", block, 0)
        pos = 4
        out: Headers = {}
        for _ in range(count):
            (ln,) = struct.unpack_from(">I", block, pos)
            name = block[pos + 4 : pos + 4 + ln]
            pos += 4 + ln
            (lv,) = struct.unpack_from(">I", block, pos)
            value = block[pos + 4 : pos + 4 + lv]
            pos += 4 + lv
            if len(name) != ln or len(value) != lv:
                raise SpdyError("truncated header block")
            text = name.decode("latin-1")
            if not text or text != text.lower() or text in out:
                raise SpdyError(f"invalid header name {text!r}")
            out[text] = value.decode("latin-1").split("\0")
    except struct.error:
        raise SpdyError("truncated header block") from None
    if pos != len(block):
        raise SpdyError("trailing bytes after the header block")
    return out


class HeaderCodec:
    """The two zlib contexts of a session: one compresses every header block this side
    sends, the other inflates every block the peer sends (both with :data:`DICTIONARY`)."""

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(
            zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, DICTIONARY
        )
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)

    def compress(self, headers: Iterable[tuple[str, list[str]]]) -> bytes:
        return self._deflate.compress(encode_block(headers)) + self._deflate.flush(
            zlib.Z_SYNC_FLUSH
        )

    def decompress(self, data: bytes) -> Headers:
        try:
            block = self._inflate.decompress(data)
        except zlib.error as e:
            raise SpdyError(f"header block does not inflate: {e}") from None
        return decode_block(block)


# --------------------------------------------------------------------------- transport


class ByteIO(Protocol):
    """A reliable byte transport the session runs over."""

    async def read(self, n: int) -> bytes:
        """Up to ``n`` bytes; ``b""`` at the end."""
        ...

    async def write(self, data: bytes) -> None:
        """Send ``data`` (returns once the transport took it, pacing the writer)."""
        ...

    async def close(self) -> None: ...


class StreamIO:
    """:class:`ByteIO` over an asyncio reader/writer pair (a hijacked connection)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def read(self, n: int) -> bytes:
        try:
            return await self.reader.read(n)
        except (ConnectionError, OSError):
            return b""

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


# --------------------------------------------------------------------------- session


@dataclass(eq=False)
class Stream:
    """One client-opened stream. Read with :meth:`read`, write with :meth:`write`,
    end this side with :meth:`close` (FIN)."""

    session: Session
    id: int
    headers: Headers
    #: the peer sent FIN (or the stream was reset): nothing more comes
    remote_closed: bool = False
    #: this side sent FIN
    local_closed: bool = False
    reset: bool = False
    send_window: int = INITIAL_WINDOW
    _chunks: deque[bytes] = field(default_factory=deque)
    _buffered: int = 0
    _unacked: int = 0
    _readable: asyncio.Event = field(default_factory=asyncio.Event)
    _drained: asyncio.Event = field(default_factory=asyncio.Event)

    def header(self, name: str) -> str:
        """The first value of header ``name`` ("" without it)."""
        values = self.headers.get(name.lower())
        return values[0] if values else ""

    async def read(self) -> bytes | None:
        """The next chunk the peer sent; ``None`` once it closed its side."""
        while not self._chunks:
            if self.remote_closed:
                return None
            self._readable.clear()
            await self._readable.wait()
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._buffered < STREAM_BUFFER:
            self._drained.set()
        await self.session._consumed(self, len(chunk))
        return chunk

    async def read_all(self) -> bytes:
        out = bytearray()
        while (chunk := await self.read()) is not None:
            out += chunk
        return bytes(out)

    async def write(self, data: bytes) -> None:
        """Send ``data`` as DATA frames (within the flow-control windows when the peer
        counts them). Nothing is sent after FIN or a reset."""
        await self.session._send_data(self, data, fin=False)

    async def close(self) -> None:
        """Send FIN (once)."""
        if not self.local_closed and not self.reset:
            await self.session._send_data(self, b"", fin=True)

    async def rst(self, status: int = CANCEL) -> None:
        await self.session._reset(self, status)

    # ---- from the session

    def _deliver(self, data: bytes, fin: bool) -> None:
        if data:
            self._chunks.append(data)
            self._buffered += len(data)
            if self._buffered >= STREAM_BUFFER:
                self._drained.clear()
        if fin:
            self.remote_closed = True
        self._readable.set()

    def _end(self) -> None:
        self.remote_closed = True
        self._readable.set()
        self._drained.set()


#: what the server does with a new stream: None accepts it; a string refuses it
#: (RST_STREAM CANCEL, the string is logged), as kubelet's stream handlers do
Acceptor = Callable[[Stream], str | None]


class Session:
    """The server side of one SPDY/3.1 connection over ``io``. :meth:`run` reads frames
    until the peer goes away; accepted streams arrive on :meth:`next_stream`."""

    def __init__(self, io: ByteIO, accept: Acceptor | None = None) -> None:
        self.io = io
        self.codec = HeaderCodec()
        self.streams: dict[int, Stream] = {}
        self.accept = accept or (lambda s: None)
        self._new: asyncio.Queue[Stream | None] = asyncio.Queue()
        self._wlock = asyncio.Lock()
        self._last_id = 0
        #: the peer's view of our sending, once it counts windows
        self.peer_flow_control = False
        self.peer_initial_window = INITIAL_WINDOW
        self.session_send_window = INITIAL_WINDOW
        self._window_open = asyncio.Event()
        self._window_open.set()
        self.going_away = False
        self.closed = False
        self._rbuf = bytearray()
        self._session_unacked = 0

    # ---- reading

    async def _read_exactly(self, n: int) -> bytes | None:
        while len(self._rbuf) < n:
            chunk = await self.io.read(max(n - len(self._rbuf), 65536))
            if not chunk:
                return None
            self._rbuf += chunk
        out = bytes(self._rbuf[:n])
        del self._rbuf[:n]
        return out

    async def read_frame(self) -> Frame | None:
        """The next frame; None at the end of the transport."""
        head = await self._read_exactly(8)
        if head is None:
            return None
        control, version, kind, flags, length = parse_head(head)
        data = await self._read_exactly(length) if length else b""
        if data is None:
            return None
        if control:
            if version != VERSION:
                raise SpdyError(f"unsupported SPDY version {version}")
            return Frame(True, kind, flags, data)
        return Frame(False, 0, flags, data, stream=kind)

    async def run(self) -> None:
        """Read and handle frames until the transport ends or the peer breaks the
        protocol (then GOAWAY PROTOCOL_ERROR); every stream then ends."""
        try:
            while not self.closed:
                frame = await self.read_frame()
                if frame is None:
                    break
                await self._handle(frame)
        except SpdyError as e:
            log.info("SPDY protocol error: %s", e)
            with contextlib.suppress(ConnectionError, OSError):
                await self._goaway(GOAWAY_PROTOCOL_ERROR)
        finally:
            self.closed = True
            for s in self.streams.values():
                s._end()
            self._window_open.set()
            self._new.put_nowait(None)

    async def next_stream(self) -> Stream | None:
        """The next stream the peer opened and the server accepted; None once the
        session ended."""
        s = await self._new.get()
        if s is None:
            self._new.put_nowait(None)
        return s

    async def _handle(self, f: Frame) -> None:
        if not f.control:
            await self._on_data(f)
            return
        handler = _HANDLERS.get(f.type)
        if handler is not None:
            await handler(self, f)
        # other control types (NOOP, CREDENTIAL, unknown) are ignored, as SPDY/3 says

    async def _on_syn_stream(self, f: Frame) -> None:
        if len(f.data) < 10:
            raise SpdyError("short SYN_STREAM")
        sid, _assoc = struct.unpack_from(">II", f.data, 0)
        sid &= 0x7FFFFFFF
        headers = self.codec.decompress(f.data[10:])  # keeps the zlib context in step
        if sid == 0 or sid % 2 == 0 or sid <= self._last_id:
            if sid in self.streams:
                await self._write(_rst(sid, STREAM_IN_USE))
                return
            raise SpdyError(f"SYN_STREAM with stream id {sid} after {self._last_id}")
        self._last_id = sid
        if self.going_away:
            await self._write(_rst(sid, REFUSED_STREAM))
            return
        s = Stream(self, sid, headers, send_window=self.peer_initial_window)
        s._drained.set()
        if f.fin:
            s.remote_closed = True
        if f.flags & FLAG_UNIDIRECTIONAL:
            s.local_closed = True
        why = self.accept(s)
        if why is not None:
            log.info("stream %d refused: %s", sid, why)
            await self._write(_rst(sid, CANCEL))
            return
        self.streams[sid] = s
        await self._write(
            control_frame(SYN_REPLY, 0, struct.pack(">I", sid) + self.codec.compress([]))
        )
        self._new.put_nowait(s)

    async def _on_data(self, f: Frame) -> None:
        s = self.streams.get(f.stream)
        if s is None or s.reset:
            await self._write(_rst(f.stream, INVALID_STREAM))
            return
        if s.remote_closed:
            await self._write(_rst(f.stream, STREAM_ALREADY_CLOSED))
            return
        s._deliver(f.data, f.fin)
        if not f.data:
            return
        # a sender that ignores windows is paced by the transport instead (module doc)
        await s._drained.wait()

    async def _on_rst(self, f: Frame) -> None:
        if len(f.data) != 8:
            raise SpdyError("RST_STREAM of the wrong length")
        sid, status = struct.unpack(">II", f.data)
        s = self.streams.pop(sid & 0x7FFFFFFF, None)
        if s is not None:
            log.debug("stream %d reset by the peer (status %d)", s.id, status)
            s.reset = True
            s._end()

    async def _on_settings(self, f: Frame) -> None:
        if len(f.data) < 4:
            raise SpdyError("short SETTINGS")
        (count,) = struct.unpack_from(">I", f.data, 0)
        if len(f.data) != 4 + 8 * count:
            raise SpdyError("SETTINGS of the wrong length")
        for i in range(count):
            idw, value = struct.unpack_from(">II", f.data, 4 + 8 * i)
            if idw & 0xFFFFFF == SETTINGS_INITIAL_WINDOW_SIZE:
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                self.peer_flow_control = True
                for s in self.streams.values():
                    s.send_window += delta
                self._window_open.set()

    async def _on_ping(self, f: Frame) -> None:
        if len(f.data) != 4:
            raise SpdyError("PING of the wrong length")
        (pid,) = struct.unpack(">I", f.data)
        if pid % 2 == 1:  # the client's ping (ours would be even): echo it
            await self._write(control_frame(PING, 0, f.data))

    async def _on_goaway(self, f: Frame) -> None:
        self.going_away = True

    async def _on_headers(self, f: Frame) -> None:
        if len(f.data) < 4:
            raise SpdyError("short HEADERS")
        (sid,) = struct.unpack_from(">I", f.data, 0)
        more = self.codec.decompress(f.data[4:])
        s = self.streams.get(sid & 0x7FFFFFFF)
        if s is not None:
            s.headers.update(more)
            if f.fin:
                s._deliver(b"", True)

    async def _on_window_update(self, f: Frame) -> None:
        if len(f.data) != 8:
            raise SpdyError("WINDOW_UPDATE of the wrong length")
        sid, delta = struct.unpack(">II", f.data)
        sid &= 0x7FFFFFFF
        delta &= 0x7FFFFFFF
        if delta == 0:
            raise SpdyError("WINDOW_UPDATE of 0")
        self.peer_flow_control = True
        if sid == 0:
            self.session_send_window += delta
        else:
            s = self.streams.get(sid)
            if s is not None:
                s.send_window += delta
        self._window_open.set()

    # ---- writing

    async def _write(self, data: bytes) -> None:
        async with self._wlock:
            await self.io.write(data)

    async def _consumed(self, s: Stream, n: int) -> None:
        """The application read ``n`` bytes of ``s``: give the windows back, in steps of
        half a window (as a sender that counts windows needs them)."""
        if n <= 0 or self.closed:
            return
        s._unacked += n
        self._session_unacked += n
        frames = b""
        if self._session_unacked >= INITIAL_WINDOW // 2:
            frames += _window_update(0, self._session_unacked)
            self._session_unacked = 0
        if s._unacked >= INITIAL_WINDOW // 2 and not s.remote_closed:
            frames += _window_update(s.id, s._unacked)
            s._unacked = 0
        if frames:
            with contextlib.suppress(ConnectionError, OSError):
                await self._write(frames)

    async def _send_data(self, s: Stream, data: bytes, *, fin: bool) -> None:
        if s.local_closed or s.reset or self.closed:
            return
        view = memoryview(data)
        while True:
            n = min(len(view), MAX_DATA)
            if self.peer_flow_control and n:
                while (
                    not self.closed
                    and not s.reset
                    and (s.send_window <= 0 or self.session_send_window <= 0)
                ):
                    self._window_open.clear()
                    await self._window_open.wait()
                if self.closed or s.reset:
                    return
                n = min(n, s.send_window, self.session_send_window)
                s.send_window -= n
                self.session_send_window -= n
            last = n == len(view)
            flags = FLAG_FIN if (fin and last) else 0
            await self._write(data_frame(s.id, flags, bytes(view[:n])))
            view = view[n:]
            if last:
                break
        if fin:
            s.local_closed = True
            self._forget(s)

    async def _reset(self, s: Stream, status: int) -> None:
        if s.reset:
            return
        s.reset = True
        s._end()
        self.streams.pop(s.id, None)
        with contextlib.suppress(ConnectionError, OSError):
            await self._write(_rst(s.id, status))

    def _forget(self, s: Stream) -> None:
        if s.local_closed and s.remote_closed:
            self.streams.pop(s.id, None)

    async def _goaway(self, status: int) -> None:
        await self._write(control_frame(GOAWAY, 0, struct.pack(">II", self._last_id, status)))

    async def close(self) -> None:
        """GOAWAY (status OK, naming the last stream the peer opened), then close the
        transport, as kubelet's streaming server ends a session."""
        if self.closed:
            with contextlib.suppress(ConnectionError, OSError):
                await self.io.close()
            return
        self.going_away = True
        with contextlib.suppress(ConnectionError, OSError):
            await self._goaway(GOAWAY_OK)
        self.closed = True
        self._window_open.set()
        with contextlib.suppress(ConnectionError, OSError):
            await self.io.close()


def _rst(sid: int, status: int) -> bytes:
    return control_frame(RST_STREAM, 0, struct.pack(">II", sid & 0x7FFFFFFF, status))


def _window_update(sid: int, delta: int) -> bytes:
    return control_frame(WINDOW_UPDATE, 0, struct.pack(">II", sid, delta & 0x7FFFFFFF))


_HANDLERS = {
    SYN_STREAM: Session._on_syn_stream,
    RST_STREAM: Session._on_rst,
    SETTINGS: Session._on_settings,
    PING: Session._on_ping,
    GOAWAY: Session._on_goaway,
    HEADERS: Session._on_headers,
    WINDOW_UPDATE: Session._on_window_update,
}

__all__ = [
    "DICTIONARY",
    "ByteIO",
    "Frame",
    "HeaderCodec",
    "Session",
    "SpdyError",
    "Stream",
    "StreamIO",
    "control_frame",
    "data_frame",
    "decode_block",
    "encode_block",
    "parse_head",
]
