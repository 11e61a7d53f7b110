"""TLS for ``svclab serve`` as kube-apiserver does it: the handshake *requests* a client
certificate and accepts any (Go's ``tls.RequestClientCert``); the authenticator
(:mod:`.authn`) verifies it afterwards and answers 401 to a bad one.

Why not Python's ``ssl``: CPython's ``_ssl`` sets OpenSSL's verification without a
verify callback (``SSL_CTX_set_verify(ctx, mode, NULL)``), so with ``CERT_OPTIONAL`` a
certificate that does not chain to a loaded CA (a foreign CA, an expired certificate)
aborts the handshake with an alert, and ``CERT_NONE`` requests no certificate at all:
kubectl would report a TLS error where kube-apiserver answers 401 Unauthorized.
asyncio's TLS (and so uvicorn's, hypercorn's) is built on that ``ssl`` module.

What is used instead: pyOpenSSL (the Python Cryptographic Authority's OpenSSL binding,
the sibling of ``cryptography``), whose ``Context.set_verify`` takes a callback. Here it
accepts every certificate, so the handshake never depends on it. The TLS connection
runs on memory BIOs inside :class:`TLSProtocol`, an asyncio protocol that sits between
the TCP transport and uvicorn's own HTTP protocol: uvicorn still parses HTTP and calls
the ASGI app, and sees a transport (:class:`TLSTransport`) whose ``write`` encrypts.
OpenSSL does the TLS, ``cryptography`` the X.509: nothing of either is written here.
The alternatives were a different ASGI server (daphne, through Twisted) or a TLS
terminating proxy in front of uvicorn; both add a process or a framework for the same
few lines of glue.

Like kube-apiserver, the CertificateRequest names the cluster CA as the acceptable
issuer (Go's ``tls.Config.ClientCAs``). A client may use that list to pick its
certificate; kubectl (client-go) sends the one its kubeconfig names regardless, so a
certificate from another CA does reach the authenticator.

The peer's certificates reach the app in the ASGI ``tls`` extension:
``scope["extensions"]["tls"]["client_cert_chain"]``, PEM strings, the client's own
certificate first (the ASGI TLS extension's format).

Connection takeover (Go's ``http.Hijacker``), for upgrades uvicorn does not know (SPDY):
``scope["extensions"][HIJACK]`` is a function that takes the connection away from the
HTTP protocol and returns an asyncio ``(StreamReader, StreamWriter)`` over the TLS
connection; the app then writes the ``101`` response head itself and speaks the new
protocol. uvicorn's protocol is told the connection is gone (its request sees a
disconnect, nothing more is written for it). Bytes the client sent after the request
head before it read the ``101`` are lost: clients of an upgrade wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding
from OpenSSL import SSL

log = logging.getLogger("svclab.tls")

#: how long a client may take to finish the handshake (asyncio's default for TLS servers)
HANDSHAKE_TIMEOUT = 60.0
#: the most plaintext taken from OpenSSL per read (one TLS record carries 16 KiB at most)
READ_SIZE = 1 << 16
#: the most ciphertext taken from the outgoing memory BIO per read
BIO_READ_SIZE = 1 << 18
#: plaintext written since the last flush past which a write flushes at once
FLUSH_AT = 1 << 16
#: the ASGI scope extension that takes over the connection (see the module docstring)
HIJACK = "svclab.hijack"


def _accept_any(conn: SSL.Connection, cert: Any, errno: int, depth: int, ok: int) -> bool:
    """The verify callback: every certificate passes the handshake; the authenticator
    verifies the chain (Go's ``tls.RequestClientCert``)."""
    return True


def server_context(cert_file: Path, key_file: Path, client_ca_file: Path) -> SSL.Context:
    """A TLS server context: TLS 1.2 or later, the serving certificate CERT_FILE (its
    chain) with KEY_FILE, a client certificate requested but not required nor verified,
    and CLIENT_CA_FILE's CAs named as the acceptable issuers."""
    ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_2_VERSION)
    ctx.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE)
    ctx.use_certificate_chain_file(str(cert_file))
    ctx.use_privatekey_file(str(key_file))
    ctx.check_privatekey()
    ctx.set_verify(SSL.VERIFY_PEER, _accept_any)
    ctx.load_client_ca(str(client_ca_file).encode())
    # OpenSSL refuses to resume a session when the server asks for certificates and
    # the session has no id context (CPython's ssl sets one too)
    ctx.set_session_id(b"svclab")
    return ctx


class TLSTransport(asyncio.Transport):
    """What the HTTP protocol writes to: plaintext in, TLS records out on the TCP
    transport. Flow control (pause/resume reading, buffer sizes) is the TCP
    transport's."""

    def __init__(self, tls: TLSProtocol, raw: asyncio.Transport) -> None:
        super().__init__()
        self._tls = tls
        self._raw = raw
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        try:
            self._tls.conn.sendall(data)
        except SSL.Error as e:
            log.debug("TLS write failed: %s", e)
            self.abort()
            return
        self._tls.flush_soon(len(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def close(self) -> None:
        """Send close_notify, then close the TCP connection once its buffer is out."""
        if self._closing:
            return
        self._closing = True
        with contextlib.suppress(SSL.Error):
            self._tls.conn.shutdown()
        self._tls.flush()
        self._raw.close()

    def abort(self) -> None:
        self._closing = True
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._closing or self._raw.is_closing()

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "sslcontext":  # uvicorn's is_ssl(): the scheme is https
            return self._tls.conn.get_context()
        if name == "ssl_object":
            return self._tls.conn
        return self._raw.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """An upgrade (WebSocket) hands the connection to another protocol."""
        assert isinstance(protocol, asyncio.Protocol)
        self._tls.app = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._tls.app is not None
        return self._tls.app


class TLSProtocol(asyncio.Protocol):
    """TLS on one TCP connection (see the module docstring): the handshake first, then
    the decrypted bytes go to the protocol ``make_app()`` returns (uvicorn's HTTP
    protocol), which gets a :class:`TLSTransport` once the handshake is done."""

    def __init__(
        self,
        context: SSL.Context,
        make_app: Callable[[], asyncio.Protocol],
        *,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
    ) -> None:
        self.conn = SSL.Connection(context, None)
        self.conn.set_accept_state()
        self.app: asyncio.Protocol | None = None
        self._make_app = make_app
        self._raw: asyncio.Transport | None = None
        self._transport: TLSTransport | None = None
        self._timeout = handshake_timeout
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self._flush_scheduled = False
        self._unflushed = 0

    # ---- from the TCP transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        self._timer = self._loop.call_later(self._timeout, self._too_slow)

    def _too_slow(self) -> None:
        log.debug("TLS handshake not done in %.0f s; closing", self._timeout)
        if self._raw is not None:
            self._raw.abort()

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        conn.bio_write(data)
        if self.app is None and not self._handshake():
            return
        app = self.app
        assert app is not None and self._transport is not None
        while True:
            try:
                plain = conn.recv(READ_SIZE)
            except SSL.WantReadError:
                break
            except SSL.ZeroReturnError:  # the client's close_notify
                self.flush()
                app.eof_received()
                self._transport.close()
                return
            except SSL.Error as e:
                log.debug("TLS read failed: %s", e)
                self._transport.abort()
                return
            app.data_received(plain)
            if self._transport.is_closing():  # the app closed the connection
                return
            app = self.app  # an upgrade may have swapped it
            assert app is not None
        # What reading produced (rare: a TLS 1.3 key update, an alert) leaves with the
        # next flush, which the response usually brings within the same loop turn: an
        # immediate flush would cost a read of an empty BIO on every request.
        self.flush_soon(0)

    def _handshake(self) -> bool:
        """Advance the handshake; True once it is done and the app is connected."""
        assert self._raw is not None
        try:
            self.conn.do_handshake()
        except SSL.WantReadError:
            self.flush()
            return False
        except SSL.Error as e:
            log.debug("TLS handshake failed: %s", e)
            self.flush()  # the alert
            self._raw.close()
            return False
        self.flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport = TLSTransport(self, self._raw)
        app = _with_extensions(self._make_app(), self.peer_chain_pem(), self.hijack)
        self.app = app
        app.connection_made(self._transport)
        return True

    def hijack(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Take the connection from the HTTP protocol (see the module docstring)."""
        assert self._transport is not None and self.app is not None
        http = self.app
        reader = asyncio.StreamReader(loop=self._loop)
        proto = asyncio.StreamReaderProtocol(reader, loop=self._loop)
        self.app = proto
        http.connection_lost(_Hijacked())
        proto.connection_made(self._transport)
        return reader, asyncio.StreamWriter(self._transport, proto, reader, self._loop)

    def peer_chain_pem(self) -> list[str]:
        """The client's certificate and the chain it sent, PEM, leaf first ([] if none)."""
        leaf = self.conn.get_peer_certificate(as_cryptography=True)
        if leaf is None:
            return []
        rest = self.conn.get_peer_cert_chain(as_cryptography=True) or []
        certs = [leaf, *(c for c in rest if c != leaf)]
        return [c.public_bytes(Encoding.PEM).decode() for c in certs]

    def flush_soon(self, written: int) -> None:
        """Send what the app wrote once the running callback is done, so that a
        response's head and body, written one after the other, leave in one segment
        (as Go's buffered writer sends them); at once past :data:`FLUSH_AT` bytes."""
        self._unflushed += written
        if self._unflushed >= FLUSH_AT:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def flush(self) -> None:
        """Send what OpenSSL wrote into the outgoing memory BIO."""
        self._unflushed = 0
        if self._raw is None or self._raw.is_closing():
            return
        out = []
        while True:
            try:
                chunk = self.conn.bio_read(BIO_READ_SIZE)
            except SSL.WantReadError:
                break
            out.append(chunk)
            if len(chunk) < BIO_READ_SIZE:  # a memory BIO gives all it holds
                break
        if out:
            self._raw.write(out[0] if len(out) == 1 else b"".join(out))

    def eof_received(self) -> bool | None:
        if self.app is not None:
            self.app.eof_received()
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport._closing = True
        if self.app is not None:
            self.app.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.app is not None:
            self.app.pause_writing()

    def resume_writing(self) -> None:
        if self.app is not None:
            self.app.resume_writing()


class _Hijacked(ConnectionError):
    """What the HTTP protocol is told when the app took its connection over."""


def _with_extensions(
    app: asyncio.Protocol,
    chain: list[str],
    hijack: Callable[[], tuple[asyncio.StreamReader, asyncio.StreamWriter]],
) -> asyncio.Protocol:
    """Make APP (a uvicorn HTTP protocol) put CHAIN into each
    request's ASGI scope and into the scope of a WebSocket the connection is upgraded to
    (uvicorn's WebSocket protocol calls the configured app itself, so it gets the same
    wrapper), and the HIJACK function into each HTTP request's scope."""
    inner = app.app  # type: ignore[attr-defined]
    tls_ext = {"client_cert_chain": chain}

    async def with_extensions(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            ext = scope.setdefault("extensions", {})
            ext["tls"] = tls_ext
            if scope["type"] == "http":
                ext[HIJACK] = hijack
        await inner(scope, receive, send)

    app.app = with_extensions  # type: ignore[attr-defined]
    ws_class = getattr(app, "ws_protocol_class", None)
    if ws_class is not None:

        def ws_with_extensions(**kwargs: Any) -> asyncio.Protocol:
            ws = ws_class(**kwargs)
            ws.app = with_extensions
            return ws

        app.ws_protocol_class = ws_with_extensions  # type: ignore[attr-defined]
    return app


def uvicorn_protocol(context: SSL.Context, http: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)``: uvicorn builds it with its
    keyword arguments for each connection; TLS with CONTEXT then HTTP with HTTP (uvicorn's
    HTTP protocol class)."""

    class UvicornTLS(TLSProtocol):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(context, lambda: http(**kwargs))

    return UvicornTLS


__all__ = ["HIJACK", "TLSProtocol", "TLSTransport", "server_context", "uvicorn_protocol"]
