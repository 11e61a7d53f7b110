"""kubelet's gRPC probe over a socket already connected: one call of
``grpc.health.v1.Health/Check`` (the ``service`` the probe names), spoken as a gRPC
client speaks it (HTTP/2 with prior knowledge, no TLS), and the verdict kubelet's
prober gives (``pkg/probe/grpc``): success only for an ``OK`` call answered
``SERVING``.

The prober opens its connection in the node's network namespace (a socket created
there, :func:`dataplane.linux.nsenter.socket_in`). A grpcio channel would dial sockets
of its own on its own threads, outside that namespace; so HTTP/2 is driven here with
the pure-Python state machine ``h2`` over the prober's socket, and the messages are
``grpcio-health-checking``'s (``grpc_health.v1.health_pb2``): a length-prefixed
``HealthCheckRequest`` in a ``POST`` with ``content-type: application/grpc`` and
``te: trailers``; the answer's ``grpc-status`` (in its trailers, or its headers for a
trailers-only answer) and its ``HealthCheckResponse``.

Failure messages are kubelet's (the event text after ``<Kind> probe failed: ``):

* the server does not speak HTTP/2 (closes, answers garbage):
  ``error: failed to connect service at "IP:PORT": ...``;
* a call that fails: ``error: health rpc probe failed: rpc error: code = CODE desc = MSG``,
  or for ``UNIMPLEMENTED`` ``error: this server does not implement the grpc health
  protocol (grpc.health.v1.Health): MSG``;
* no complete answer within ``timeoutSeconds``: ``timeout: health rpc did not complete
  within Ns``;
* an answer other than SERVING: ``service unhealthy (responded with "NOT_SERVING")``.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import unquote

from grpc_health.v1 import health_pb2
from h2 import events
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.exceptions import H2Error

from control.agents.probes import ProbeResult

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
#: gRPC's status code names (grpc/doc/statuscodes.md), as grpc-go's ``codes`` prints them
CODES = (
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
)
UNIMPLEMENTED = 12


class _Failed(Exception):
    """The call failed; ``args[0]``: kubelet's message."""


def encode_request(service: str) -> bytes:
    """A gRPC length-prefixed message (uncompressed) of ``HealthCheckRequest{service}``."""
    msg = health_pb2.HealthCheckRequest(service=service).SerializeToString()
    return b"\0" + len(msg).to_bytes(4, "big") + msg


def decode_response(body: bytes) -> int:
    """The ``status`` of the one length-prefixed ``HealthCheckResponse`` in ``body``
    (``ValueError``: not exactly one uncompressed message)."""
    if len(body) < 5 or body[0] != 0 or int.from_bytes(body[1:5], "big") != len(body) - 5:
        raise ValueError(f"malformed gRPC message ({len(body)} bytes)")
    try:
        return int(health_pb2.HealthCheckResponse.FromString(body[5:]).status)
    except Exception as e:  # protobuf's DecodeError
        raise ValueError(f"malformed HealthCheckResponse: {e}") from None


def check(
    sock: socket.socket, authority: str, service: str, timeout: float, user_agent: str
) -> ProbeResult:
    """Call Health/Check for ``service`` over the connected ``sock`` (``authority``:
    ``IP:PORT``, the ``:authority`` header) within ``timeout`` seconds from now, and
    judge the answer as kubelet does (module docstring). ``sock`` is left open."""
    deadline = time.monotonic() + timeout
    try:
        status = _call(sock, authority, service, deadline, user_agent)
    except TimeoutError:
        return ProbeResult(False, f"timeout: health rpc did not complete within {timeout:g}s")
    except _Failed as e:
        return ProbeResult(False, str(e.args[0]))
    if status != health_pb2.HealthCheckResponse.SERVING:
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
        return ProbeResult(False, f'service unhealthy (responded with "{name}")')
    return ProbeResult(True)


def _call(sock: socket.socket, authority: str, service: str, deadline: float, ua: str) -> int:
    conn = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(
        stream,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", HEALTH_CHECK),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("user-agent", ua),
        ],
    )
    conn.send_data(stream, encode_request(service), end_stream=True)
    _send(sock, conn, deadline)
    headers: dict[str, str] = {}
    body = bytearray()
    spoke = False  # the server answered HTTP/2 (its SETTINGS)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            raise
        except OSError as e:
            raise _Failed(_unavailable(authority, spoke, str(e.strerror or e))) from None
        if not data:
            raise _Failed(_unavailable(authority, spoke, "connection closed"))
        try:
            got = conn.receive_data(data)
        except H2Error as e:
            raise _Failed(_unavailable(authority, spoke, f"HTTP/2: {e}")) from None
        for ev in got:
            if isinstance(ev, events.RemoteSettingsChanged):
                spoke = True
            elif isinstance(ev, events.ResponseReceived | events.TrailersReceived):
                spoke = True
                headers.update((str(k), str(v)) for k, v in ev.headers or [])
            elif isinstance(ev, events.DataReceived) and ev.stream_id == stream:
                body.extend(ev.data or b"")
                conn.acknowledge_received_data(ev.flow_controlled_length, stream)
            elif isinstance(ev, events.StreamEnded) and ev.stream_id == stream:
                return _verdict(headers, bytes(body))
            elif isinstance(ev, events.StreamReset) and ev.stream_id == stream:
                raise _Failed(
                    f"error: health rpc probe failed: rpc error: code = Unavailable "
                    f"desc = stream reset by the server (HTTP/2 error {int(ev.error_code or 0)})"
                )
            elif isinstance(ev, events.ConnectionTerminated):
                raise _Failed(_unavailable(authority, spoke, "the server sent GOAWAY"))
        _send(sock, conn, deadline)


def _verdict(headers: dict[str, str], body: bytes) -> int:
    """The HealthCheckResponse's status, or _Failed as grpc-go fails the call."""
    http = headers.get(":status", "")
    if http != "200":
        raise _Failed(
            f"error: health rpc probe failed: rpc error: code = Unknown desc = unexpected "
            f"HTTP status code received from server: {http or 'none'}"
        )
    raw = headers.get("grpc-status")
    if raw is None or not raw.isdigit():
        raise _Failed(
            "error: health rpc probe failed: rpc error: code = Internal desc = "
            "server closed the stream without sending trailers"
        )
    code = int(raw)
    message = unquote(headers.get("grpc-message", ""))
    if code == UNIMPLEMENTED:
        raise _Failed(
            "error: this server does not implement the grpc health protocol "
            f"(grpc.health.v1.Health): {message}"
        )
    if code != 0:
        name = CODES[code] if code < len(CODES) else f"Code({code})"
        raise _Failed(f"error: health rpc probe failed: rpc error: code = {name} desc = {message}")
    try:
        return decode_response(body)
    except ValueError as e:
        raise _Failed(
            f"error: health rpc probe failed: rpc error: code = Internal desc = {e}"
        ) from None


def _unavailable(authority: str, spoke: bool, why: str) -> str:
    if not spoke:  # never an HTTP/2 connection: grpc-go's dial fails
        return f'error: failed to connect service at "{authority}": {why}'
    return f"error: health rpc probe failed: rpc error: code = Unavailable desc = {why}"


def _send(sock: socket.socket, conn: H2Connection, deadline: float) -> None:
    out = conn.data_to_send()
    if not out:
        return
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    sock.settimeout(remaining)
    try:
        sock.sendall(out)
    except TimeoutError:
        raise
    except OSError as e:
        raise _Failed(f"error: health rpc probe failed: {e.strerror or e}") from None


__all__ = ["check", "decode_response", "encode_request"]
