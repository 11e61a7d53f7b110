"""The pod servers: sockets inside each pod's network namespace, listening on the pod's
containerPorts (TCP and UDP) and answering every connection or datagram with one line::

    <pod ns/name> <peer ip> <peer port>\\n

i.e. who answered and which source address the server saw (after any NAT). A TCP
connection is answered as the pod server model says (``dataplane/podtools/podserver.py``,
the specification): an HTTP/1.x request gets ``HTTP/1.1 200 OK`` with that line as its
body (``HEAD``: the headers alone); any other bytes, or nothing within
:data:`FIRST_BYTES_WINDOW`, get the line alone; a connection closed without sending
anything (``nc -z``) gets nothing. Each answer appends one record to the pod's access
log (``log`` below) in kubelet's CRI format, ``<RFC3339Nano UTC> stdout F <text>``, with
the model's log text (``<peer ip>:<port> -> <local ip>:<port> "<request line>" <status>
<bytes>``), written with one ``write(2)`` per answer: a reader following the file sees it
at once. A UDP datagram is answered with the line and logs nothing (as in the model).

gRPC: on the TCP ports a pod's ``grpc`` probes target (``grpc`` in its start request),
a connection that opens with the HTTP/2 preface is a gRPC client: it is served
``grpc.health.v1.Health/Check`` (:class:`GrpcHealth`), SERVING or NOT_SERVING from the
pod's health flags as the emulator decides (:func:`grpc_serving`), each call logged as
``"POST /grpc.health.v1.Health/Check HTTP/2.0" 200 <bytes>``. Any other connection there
is answered as on every port (a Service's traffic to that port gets the usual line). On
other ports the preface gets the raw line: no gRPC server listens there.

A socket belongs to the network namespace it was created in, whatever process holds it.
So one *host process* answers for many pods: it enters each pod's namespace with
``setns(2)`` just long enough to create and bind that pod's sockets, returns to its own
namespace (its host's: the pods' node), and serves them all from one selector. A
realised cluster runs one such process per node (the pods a node runs live and die with
it, as containers with their node's runtime), not one per pod: forking and scheduling a
thousand processes cost more than everything else of a 1,000-pod ``svclab up``. A pod
without a host gets a process of its own in its own namespace.

This file is a standalone script (standard library only, but for ``h2`` and
``grpcio-health-checking``, imported by the host processes that serve a gRPC port; run
as ``python3 -I podserver.py STATE_DIR`` with svclab's interpreter, which has them):
starting a Python interpreter costs ~80 ms here,
so one *supervisor* per cluster forks the host processes (~1 ms each). The supervisor:

* writes ``STATE_DIR/supervisor.pid`` and listens on ``STATE_DIR/supervisor.sock``;
  prints ``ready`` on stdout once it does, then closes stdout;
* takes one JSON request per connection, answers one JSON line:
  ``{"op": "start", "pods": [{"pod", "netns", "host", "host_netns", "tcp": [..],
  "udp": [..], "grpc": [..], "log": PATH}]}`` -> ``{"ok": true, "pids": {pod: pid}, "errors": {pod: why}}`` (a pod
  already served by the same host with the same ports (gRPC ones too) keeps its sockets; ``host`` and
  ``host_netns`` default to the pod and its namespace); ``{"op": "stop", "pods": [pod,
  ...]}`` (closes their sockets: connections are refused at once);
  ``{"op": "list"}`` -> pod -> pid; ``{"op": "shutdown"}``;
* talks to each host process over a ``SOCK_SEQPACKET`` pair, one JSON message each way
  per request (``add`` / ``remove`` pods); the host process binds the pods' sockets and
  writes the pods it answers for to ``STATE_DIR/host-<sha256(host)[:8]>.pods`` (a JSON
  list, replaced whole) before it answers, so a started pod is already listening; it
  writes its pid to ``STATE_DIR/host-<sha256(host)[:8]>.pid`` when it starts. (Files per
  host, not per pod: creating a thousand small files on a busy file system cost more
  than binding a thousand sockets.)
* stops a host process that serves no pod any more; reaps its children; on SIGTERM it
  stops every child, removes the pid files and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000
CONTROL_TIMEOUT = 30.0  # seconds a host process may take to answer one request
MAX_MESSAGE = 1 << 22


def host_pid_file(state_dir: Path, host: str) -> Path:
    return state_dir / f"host-{hashlib.sha256(host.encode()).hexdigest()[:8]}.pid"


def host_pods_file(state_dir: Path, host: str) -> Path:
    """The pods the host process answers for (a JSON list)."""
    return host_pid_file(state_dir, host).with_suffix(".pods")


# ---------------------------------------------------------------------- the host process
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int, what: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"setns {what}")


def _open_netns(netns: str) -> int:
    return os.open(f"/var/run/netns/{netns}", os.O_RDONLY)


def _bind(tcp: list[int], udp: list[int]) -> list[socket.socket]:
    socks: list[socket.socket] = []
    try:
        for port in tcp:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", port))
            s.listen(512)
        for port in udp:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", port))
    except BaseException:
        for s in socks:
            s.close()
        raise
    for s in socks:
        s.setblocking(False)
    return socks


# ---------------------------------------------------------------------- what a pod answers
# The pod server model (dataplane/podtools/podserver.py) is the specification; this script
# may import nothing outside the standard library, so its few rules are restated here and
# tests/dataplane/test_podserver_protocol.py checks that both answer every request alike.
HEADERS = (
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: {length}\r\n"
    "Connection: close\r\n"
    "\r\n"
)
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")
#: How long a connection that has sent nothing is waited for before it gets the raw
#: body line (``nc HOST PORT`` with no input). An HTTP client writes its request right
#: after connect() returns, microseconds later on one machine; 200 ms leaves room for a
#: loaded machine's scheduling delays (the decision re-reads the socket at the deadline,
#: so bytes already queued count) and still answers an idle ``nc`` at once to a human.
FIRST_BYTES_WINDOW = 0.2
#: How long a request that may still become (or is) an HTTP request is waited for: for
#: the rest of its request line, then for the blank line that ends its headers.
REQUEST_WINDOW = 2.0
#: After the answer: how long the client's further bytes (a request body) are read and
#: dropped before the connection is closed (closing with unread bytes sends a RST, which
#: may destroy the answer before the client read it).
DRAIN_WINDOW = 1.0
MAX_REQUEST = 65536


def request_line(request: bytes) -> str | None:
    """The HTTP request line of ``request`` (None: not an HTTP/1.x request), as the
    model decides it."""
    head, sep, _ = request.partition(b"\r\n")
    if not sep:
        return None
    words = head.decode("latin-1").split(" ")
    if len(words) != 3 or words[0] not in METHODS or not words[2].startswith("HTTP/1."):
        return None
    return head.decode("latin-1")


def may_become_http(request: bytes) -> bool:
    """Could bytes appended to ``request`` (which holds no CRLF yet) make it an HTTP/1.x
    request line? False: the model's verdict (a raw connection) is already fixed."""
    words = request.decode("latin-1").split(" ")
    if len(words) > 3:
        return False
    if len(words) == 1:
        return any(m.startswith(words[0]) for m in METHODS)
    if words[0] not in METHODS:
        return False
    return len(words) == 2 or "HTTP/1.".startswith(words[2]) or words[2].startswith("HTTP/1.")


def respond(
    pod: str,
    peer: tuple[str, int],
    local: tuple[str, int],
    request: bytes,
    health_root: Path | None = None,
) -> tuple[bytes, str]:
    """The answer to a connection that sent ``request`` and its access log text (the
    model's ``answer``; the health URLs answer the pod's health kept under
    ``health_root``, :mod:`netmodel.podhealth`)."""
    text = f"{pod} {peer[0]} {peer[1]}\n".encode()
    line = request_line(request)
    where = f"{peer[0]}:{peer[1]} -> {local[0]}:{local[1]}"
    if line is None:
        return text, f'{where} "-" - {len(text)}'
    method, target = line.split(" ")[:2]
    code = 200
    special = health_answer(pod, method, target, health_root)
    if special is not None:
        code, text = special[0], special[1].encode()
    head = HEADERS.format(length=len(text)).encode()
    if code != 200:
        head = head.replace(b"200 OK", f"{code} {REASONS[code]}".encode(), 1)
    data = head if line.startswith("HEAD ") else head + text
    return data, f'{where} "{line}" {code} {len(text)}'


REASONS = {200: "OK", 500: "Internal Server Error", 503: "Service Unavailable"}


def health_answer(pod: str, method: str, target: str, root: Path | None) -> tuple[int, str] | None:
    """(status, body) for a health URL (None: not one): the model's
    ``netmodel.podhealth.http_answer`` over the same files (one JSON file per pod,
    ``<root>/<ns>_<name>``), written here with the standard library alone, as this
    script runs (in every pod's namespace) without svclab's packages."""
    path = target.split("?", 1)[0]
    flag = None
    if path == "/readyz" or path.startswith("/readyz/"):
        flag = "ready"
    elif any(path == p or path.startswith(p + "/") for p in ("/healthz", "/livez")):
        flag = "live"
    if flag is None or root is None:
        return None
    file = _health_file(root, pod)
    state = _health_state(file)
    if method == "POST" and (path.endswith("/fail") or path.endswith("/heal")):
        state = {"ready": state.get("ready", True), "live": state.get("live", True)}
        state[flag] = path.endswith("/heal")
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".{file.name}.{os.getpid()}"
        tmp.write_text(json.dumps(state))
        tmp.replace(file)
        return 200, "ok\n"
    if state.get(flag, True):
        return 200, "ok\n"
    return (503, "not ready\n") if flag == "ready" else (500, "unhealthy\n")


def _health_file(root: Path, pod: str) -> Path:
    ns, _, name = pod.partition("/")
    return root / f"{ns}_{name}"


def _health_state(file: Path) -> dict[str, Any]:
    try:
        state = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def grpc_serving(pod: str, service: str, root: Path | None) -> bool:
    """A gRPC health check of ``service``: SERVING (True) or NOT_SERVING, as the model's
    ``netmodel.podhealth.grpc_serving`` decides over the same files: service
    ``readiness`` follows the ``ready`` flag, any other (``""`` too) the ``live`` flag."""
    state = {} if root is None else _health_state(_health_file(root, pod))
    return bool(state.get("ready" if service == "readiness" else "live", True))


def health_root(state_dir: Path) -> Path:
    """Where the pods of the real cluster kept in ``state_dir`` keep their health flags
    (``svclab pod fail|heal`` writes there too)."""
    return state_dir / "health"


def decide(request: bytes, final: bool) -> bool:
    """Is it time to answer a connection that sent ``request`` so far? ``final``: it
    will send nothing more (end of file, or its window is over)."""
    if final or len(request) >= MAX_REQUEST:
        return True
    if b"\r\n" not in request:
        return bool(request) and not may_become_http(request)
    return request_line(request) is None or b"\r\n\r\n" in request


# ---------------------------------------------------------------------- gRPC health
#: The HTTP/2 client connection preface (RFC 9113, section 3.4): the first bytes of every
#: gRPC client's connection (prior knowledge, no TLS, as kubelet's gRPC prober dials).
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: the one RPC served: grpc.health.v1.Health/Check (what kubelet's gRPC probe calls)
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
#: an HTTP/2 connection silent for this long is closed (a gRPC client may keep its
#: connection between calls; kubelet's prober closes it after each probe)
H2_IDLE = 60.0
#: gRPC status codes (grpc/doc/statuscodes.md) this server answers
GRPC_OK, GRPC_UNIMPLEMENTED, GRPC_INTERNAL = 0, 12, 13


class GrpcHealth:
    """The server side of one HTTP/2 connection of ``pod`` that speaks gRPC's health
    service (``grpc.health.v1.Health/Check``; any other method gets ``UNIMPLEMENTED``),
    over the pure-Python HTTP/2 state machine ``h2``, with the request and response
    messages of ``grpcio-health-checking`` (``grpc_health.v1.health_pb2``). Fed the bytes
    the client sent (:meth:`feed`), it returns the access log texts of the calls they
    completed; :meth:`outgoing` is what to send back. The status answers the pod's
    health under ``root`` at the time of the call (:func:`grpc_serving`).

    Those two packages (and ``protobuf``) are the only ones outside the standard
    library this script imports, and only in a host process that serves a gRPC port:
    the servers of pods without one start as fast as before."""

    def __init__(self, pod: str, root: Path | None) -> None:
        from h2.config import H2Configuration
        from h2.connection import H2Connection

        self.pod = pod
        self.root = root
        self.h2 = H2Connection(H2Configuration(client_side=False, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.calls: dict[int, tuple[dict[str, str], bytearray]] = {}
        #: the connection is over (the client's GOAWAY, or a protocol error)
        self.closed = False

    def feed(self, data: bytes) -> list[tuple[str, int, int]]:
        """Take the client's bytes; returns (request line, HTTP status, response message
        bytes) per call completed."""
        from h2 import events
        from h2.exceptions import ProtocolError

        try:
            got = self.h2.receive_data(data)
        except ProtocolError:  # h2 queued its GOAWAY: send it, then close
            self.closed = True
            return []
        done: list[tuple[str, int, int]] = []
        for ev in got:
            if isinstance(ev, events.RequestReceived):
                headers = {str(k): str(v) for k, v in ev.headers or []}
                self.calls[ev.stream_id] = (headers, bytearray())
            elif isinstance(ev, events.DataReceived):
                call = self.calls.get(ev.stream_id)
                if call is not None:
                    call[1].extend(ev.data or b"")
                self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, events.StreamEnded):
                call = self.calls.pop(ev.stream_id, None)
                if call is not None:
                    done.append(self._answer(ev.stream_id, *call))
            elif isinstance(ev, events.StreamReset):
                self.calls.pop(ev.stream_id, None)
            elif isinstance(ev, events.ConnectionTerminated):
                self.closed = True
        return done

    def outgoing(self) -> bytes:
        return bytes(self.h2.data_to_send())

    def _answer(
        self, stream: int, headers: dict[str, str], body: bytearray
    ) -> tuple[str, int, int]:
        from google.protobuf.message import DecodeError
        from grpc_health.v1 import health_pb2

        method, path = headers.get(":method", "-"), headers.get(":path", "-")
        line = f"{method} {path} HTTP/2.0"
        ctype = headers.get("content-type", "")
        if method != "POST" or not (
            ctype == "application/grpc"
            or ctype.startswith("application/grpc+")
            or ctype.startswith("application/grpc;")
        ):
            self.h2.send_headers(stream, [(":status", "415")], end_stream=True)
            return line, 415, 0
        if path != HEALTH_CHECK:
            self._trailers_only(stream, GRPC_UNIMPLEMENTED, f"unknown method {path}")
            return line, 200, 0
        n = int.from_bytes(body[1:5], "big") if len(body) >= 5 else -1
        if n != len(body) - 5 or body[0] != 0:
            self._trailers_only(stream, GRPC_INTERNAL, "malformed request message")
            return line, 200, 0
        try:
            request = health_pb2.HealthCheckRequest.FromString(bytes(body[5:]))
        except DecodeError:
            self._trailers_only(stream, GRPC_INTERNAL, "malformed HealthCheckRequest")
            return line, 200, 0
        serving = grpc_serving(self.pod, request.service, self.root)
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        message = health_pb2.HealthCheckResponse(status=status).SerializeToString()
        framed = b"\0" + len(message).to_bytes(4, "big") + message
        self.h2.send_headers(stream, [(":status", "200"), ("content-type", "application/grpc")])
        self.h2.send_data(stream, framed)
        self.h2.send_headers(stream, [("grpc-status", str(GRPC_OK))], end_stream=True)
        return line, 200, len(framed)

    def _trailers_only(self, stream: int, code: int, message: str) -> None:
        self.h2.send_headers(
            stream,
            [
                (":status", "200"),
                ("content-type", "application/grpc"),
                ("grpc-status", str(code)),
                ("grpc-message", message),
            ],
            end_stream=True,
        )


def cri_timestamp(ns: int) -> str:
    """``ns`` (nanoseconds since the epoch) as Go's ``time.RFC3339Nano`` in UTC, the
    timestamp of kubelet's CRI log records (trailing zeros of the fraction dropped)."""
    secs, frac = divmod(ns, 1_000_000_000)
    base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    digits = f"{frac:09d}".rstrip("0")
    return f"{base}.{digits}Z" if digits else f"{base}Z"


def cri_record(text: str, ns: int | None = None) -> bytes:
    """One CRI log record of ``text`` on stdout, complete (``F``)."""
    return f"{cri_timestamp(time.time_ns() if ns is None else ns)} stdout F {text}\n".encode()


@dataclass(eq=False)
class Conn:
    """One accepted TCP connection of ``pod``: what it sent so far, its deadline, and
    whether it was answered (then it is drained until end of file or the deadline)."""

    pod: str
    sock: socket.socket
    peer: tuple[str, int]
    local: tuple[str, int]
    log: int | None
    accepted: float
    deadline: float
    request: bytes = b""
    answered: bool = False
    #: accepted on a gRPC port (see :class:`Listener`)
    grpc: bool = False
    #: the HTTP/2 connection once the client sent the preface on a gRPC port
    h2: GrpcHealth | None = None


def answer_udp(pod: str, sock: socket.socket) -> None:
    """Answer one datagram of ``pod`` with its line (transient errors ignored)."""
    try:
        _, peer = sock.recvfrom(2048)
        sock.sendto(f"{pod} {peer[0]} {peer[1]}\n".encode(), peer)
    except (BlockingIOError, InterruptedError, ConnectionError, TimeoutError):
        pass


@dataclass(frozen=True)
class Listener:
    """A listening (TCP) or bound (UDP) socket of ``pod``; ``log``: the fd of the pod's
    access log (None: it keeps none); ``grpc``: a port the pod's gRPC probes target,
    where a connection that opens with the HTTP/2 preface is served gRPC's health
    service (:class:`GrpcHealth`), any other as on every port."""

    pod: str
    log: int | None
    grpc: bool = False


class HostServer:
    """In a forked host process: the sockets of every pod it answers for, the
    connections being answered, and the control channel to the supervisor. Nothing
    blocks on one connection: each is read as its bytes arrive and answered once
    :func:`decide` says so (or its window is over)."""

    def __init__(self, state_dir: Path, host: str, home: int, control: socket.socket) -> None:
        self.state_dir = state_dir
        self.host = host
        self.home = home  # fd of the namespace this process lives in
        self.control = control
        self.sel = selectors.DefaultSelector()
        self.pods: dict[str, list[socket.socket]] = {}
        self.logs: dict[str, int] = {}  # pod -> fd of its access log
        self.conns: dict[socket.socket, Conn] = {}
        self.sel.register(control, selectors.EVENT_READ, None)

    def add(self, specs: list[dict[str, Any]]) -> dict[str, str]:
        """Bind each pod's sockets in its namespace (replacing sockets it had) and open
        its access log (``log``: a path, appended to); returns pod -> error for the pods
        that failed."""
        errors: dict[str, str] = {}
        for spec in specs:
            pod = str(spec["pod"])
            self.remove(pod)
            log: int | None = None
            grpc_ports = {int(p) for p in spec.get("grpc", [])}
            if grpc_ports:
                try:
                    import grpc_health.v1.health_pb2  # noqa: F401
                    import h2.connection  # noqa: F401
                except ImportError as e:
                    errors[pod] = (
                        f"gRPC ports {sorted(grpc_ports)}: {e} (the pod server's "
                        "interpreter needs the packages h2 and grpcio-health-checking)"
                    )
                    continue
            try:
                if spec.get("log"):
                    path = Path(str(spec["log"]))
                    path.parent.mkdir(parents=True, exist_ok=True)
                    log = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                target = _open_netns(str(spec["netns"]))
                try:
                    _setns(target, spec["netns"])
                    try:
                        socks = _bind(list(spec.get("tcp", [])), list(spec.get("udp", [])))
                    finally:
                        _setns(self.home, "back home")  # cannot fail: we hold its fd
                finally:
                    os.close(target)
            except OSError as e:
                if log is not None:
                    os.close(log)
                errors[pod] = f"{type(e).__name__}: {e}"
                continue
            self.pods[pod] = socks
            if log is not None:
                self.logs[pod] = log
            for s in socks:
                grpc = s.type == socket.SOCK_STREAM and s.getsockname()[1] in grpc_ports
                self.sel.register(s, selectors.EVENT_READ, Listener(pod, log, grpc))
        return errors

    def remove(self, pod: str) -> None:
        """Close the pod's sockets (its connections in flight too) and its log."""
        for s in self.pods.pop(pod, []):
            self.sel.unregister(s)
            s.close()
        for c in [c for c in self.conns.values() if c.pod == pod]:
            self._close(c)
        log = self.logs.pop(pod, None)
        if log is not None:
            os.close(log)

    # ------------------------------------------------------------ connections
    def accept(self, listener: socket.socket, of: Listener) -> None:
        """Take every connection waiting on ``listener``."""
        now = time.monotonic()
        for _ in range(64):
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionError, TimeoutError):
                return
            except OSError:  # e.g. EMFILE: the connection stays queued, tried again
                return
            sock.setblocking(False)
            try:
                local = sock.getsockname()
            except OSError:
                sock.close()
                continue
            c = Conn(
                of.pod,
                sock,
                (peer[0], peer[1]),
                (local[0], local[1]),
                of.log,
                now,
                now + FIRST_BYTES_WINDOW,
                grpc=of.grpc,
            )
            self.conns[sock] = c
            self.sel.register(sock, selectors.EVENT_READ, c)

    def read(self, c: Conn, final: bool = False) -> None:
        """Read what ``c`` sent (``final``: its window is over); answer when it is time."""
        eof = False
        try:
            while True:
                chunk = c.sock.recv(65536)
                if not chunk:
                    eof = True
                    break
                if not c.answered:
                    c.request += chunk
                if len(chunk) < 65536:
                    break
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # reset by the peer: nobody to answer
            self._close(c)
            return
        if c.h2 is not None:
            self._serve_grpc(c, eof or final)
            return
        if c.answered:
            if eof or final:
                self._close(c)
            return
        if eof and not c.request:  # connect and close (nc -z): nothing, no log
            self._close(c)
            return
        if c.grpc and not (eof or final) and H2_PREFACE.startswith(c.request[: len(H2_PREFACE)]):
            if len(c.request) < len(H2_PREFACE):  # maybe the preface: wait for the rest
                if c.request:
                    c.deadline = c.accepted + REQUEST_WINDOW
                return
            c.h2 = GrpcHealth(c.pod, health_root(self.state_dir))
            self._serve_grpc(c, False)
            return
        if decide(c.request, eof or final):
            self._answer(c, closing=eof)
        elif c.request:
            c.deadline = c.accepted + REQUEST_WINDOW

    def _answer(self, c: Conn, closing: bool) -> None:
        """Log the answer, then send it and close our side. The record is written first:
        a client that has its answer (curl stops at Content-Length) finds it in the log."""
        data, text = respond(c.pod, c.peer, c.local, c.request, health_root(self.state_dir))
        c.answered = True
        c.request = b""
        if c.log is not None:
            with contextlib.suppress(OSError):
                os.write(c.log, cri_record(text))
        try:
            c.sock.setblocking(True)
            c.sock.settimeout(1.0)
            c.sock.sendall(data)
            c.sock.shutdown(socket.SHUT_WR)
            c.sock.setblocking(False)
        except OSError:
            self._close(c)
            return
        if closing:
            self._close(c)
        else:
            c.deadline = time.monotonic() + DRAIN_WINDOW

    def _serve_grpc(self, c: Conn, closing: bool) -> None:
        """Feed an HTTP/2 connection what it sent, log its completed calls, send what
        it answers; close it at ``closing`` (end of file, or idle for
        :data:`H2_IDLE`) or when the HTTP/2 connection ended."""
        assert c.h2 is not None
        where = f"{c.peer[0]}:{c.peer[1]} -> {c.local[0]}:{c.local[1]}"
        data, c.request = c.request, b""
        calls = c.h2.feed(data) if data else []
        if c.log is not None:
            for line, status, size in calls:
                with contextlib.suppress(OSError):
                    os.write(c.log, cri_record(f'{where} "{line}" {status} {size}'))
        out = c.h2.outgoing()
        try:
            if out:
                c.sock.setblocking(True)
                c.sock.settimeout(1.0)
                c.sock.sendall(out)
                c.sock.setblocking(False)
        except OSError:
            self._close(c)
            return
        if closing or c.h2.closed:
            self._close(c)
        else:
            c.deadline = time.monotonic() + H2_IDLE

    def _close(self, c: Conn) -> None:
        if self.conns.pop(c.sock, None) is not None:
            self.sel.unregister(c.sock)
        c.sock.close()

    def expire(self) -> float | None:
        """Read once more and settle every connection whose deadline passed; returns the
        seconds until the next deadline (None: no connection)."""
        now = time.monotonic()
        for c in [c for c in self.conns.values() if c.deadline <= now]:
            self.read(c, final=True)
        if not self.conns:
            return None
        return max(0.0, min(c.deadline for c in self.conns.values()) - time.monotonic())

    # ------------------------------------------------------------ control
    def record(self) -> None:
        """Write the pods this process answers for (temp file + rename)."""
        path = host_pods_file(self.state_dir, self.host)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(self.pods)))
        tmp.replace(path)

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        if req.get("op") == "add":
            errors = self.add(list(req["pods"]))
        elif req.get("op") == "remove":
            for pod in req["pods"]:
                self.remove(str(pod))
            errors = {}
        else:
            return {"errors": {"": f"unknown op {req.get('op')!r}"}}
        try:
            self.record()
        except OSError as e:
            errors.setdefault("", f"recording the pods: {e}")
        return {"errors": errors}

    def control_request(self) -> None:
        try:
            data = self.control.recv(MAX_MESSAGE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the supervisor is gone: keep serving
            self.sel.unregister(self.control)
            return
        try:
            reply = self.handle(json.loads(data))
        except (ValueError, KeyError, TypeError) as e:
            reply = {"errors": {"": f"bad request: {e}"}}
        with contextlib.suppress(OSError):
            self.control.send(json.dumps(reply).encode())

    def run(self) -> None:
        """Answer forever; requests from the supervisor in between. Without a
        supervisor (it died) the sockets are still served."""
        timeout: float | None = None
        while True:
            for key, _ in self.sel.select(timeout):
                data = key.data
                if isinstance(data, Conn):
                    if data.sock in self.conns:  # not closed by an earlier event
                        self.read(data)
                elif isinstance(data, Listener):
                    assert isinstance(key.fileobj, socket.socket)
                    if key.fileobj.fileno() == -1:  # removed by an earlier event
                        continue
                    if key.fileobj.type == socket.SOCK_STREAM:
                        self.accept(key.fileobj, data)
                    else:
                        answer_udp(data.pod, key.fileobj)
                else:
                    self.control_request()
            timeout = self.expire()


def _close_other_fds(keep: int) -> None:
    """In a fresh child: close what it inherited from the supervisor (its listener, the
    request connection, the other host processes' channels), keeping stdin, stderr (the
    log) and ``keep``."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in (0, 2, keep):
            with contextlib.suppress(OSError):
                os.close(fd)


def _host_main(state_dir: Path, host: str, host_netns: str, control: socket.socket) -> None:
    """In the forked child: enter the host's namespace, then serve. Never returns. If the
    namespace cannot be entered, every request is answered with that error and the
    process exits."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _close_other_fds(control.fileno())
        failure = None
        try:
            fd = _open_netns(host_netns)
            _setns(fd, host_netns)
            host_pid_file(state_dir, host).write_text(f"{os.getpid()}\n")
        except OSError as e:
            failure = f"{type(e).__name__}: {e}"
        if failure is not None:
            control.settimeout(CONTROL_TIMEOUT)
            data = control.recv(MAX_MESSAGE)
            pods = json.loads(data).get("pods", []) if data else []
            errors = {str(p["pod"] if isinstance(p, dict) else p): failure for p in pods}
            control.send(json.dumps({"errors": errors}).encode())
            os._exit(1)
        HostServer(state_dir, host, fd, control).run()
    except BaseException as e:  # never fall back into the supervisor's code
        with contextlib.suppress(Exception):
            sys.stderr.write(f"pod server {host}: {type(e).__name__}: {e}\n")
        os._exit(1)
    os._exit(0)


# ---------------------------------------------------------------------- the supervisor
Ports = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def spec_ports(spec: dict[str, Any]) -> Ports:
    """A start request's pod's (tcp, udp, grpc) ports."""

    def of(key: str) -> tuple[int, ...]:
        return tuple(int(p) for p in spec.get(key, []))

    return of("tcp"), of("udp"), of("grpc")


@dataclass
class Host:
    """A host process as the supervisor sees it."""

    name: str
    pid: int
    control: socket.socket
    #: pod -> its (tcp, udp, grpc) ports
    pods: dict[str, Ports] = field(default_factory=dict)


class Supervisor:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.hosts: dict[str, Host] = {}
        self.host_of: dict[str, str] = {}  # pod -> host name
        self.running = True

    # ------------------------------------------------------------ host processes
    def _spawn(self, host: str, host_netns: str) -> Host:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            mine.close()
            _host_main(self.state_dir, host, host_netns, theirs)
        theirs.close()
        mine.settimeout(CONTROL_TIMEOUT)
        h = Host(host, pid, mine)
        self.hosts[host] = h
        return h

    def _send(self, h: Host, req: dict[str, Any]) -> bool:
        try:
            h.control.send(json.dumps(req).encode())
        except OSError:
            return False
        return True

    def _receive(self, h: Host) -> dict[str, Any] | None:
        try:
            data = h.control.recv(MAX_MESSAGE)
        except OSError:
            return None
        if not data:
            return None
        reply: dict[str, Any] = json.loads(data)
        return reply

    def _kill_host(self, name: str) -> None:
        h = self.hosts.pop(name, None)
        if h is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(h.pid, signal.SIGKILL)
        _reap(h.pid)
        h.control.close()
        for pod in h.pods:
            self.host_of.pop(pod, None)
        _remove_host_files(self.state_dir, name)

    def _forget_dead(self, h: Host) -> None:
        """``h`` exited on its own: forget it and its pods, remove its files."""
        self.hosts.pop(h.name, None)
        h.control.close()
        for pod in h.pods:
            self.host_of.pop(pod, None)
        _remove_host_files(self.state_dir, h.name)

    # ------------------------------------------------------------ requests
    def start(self, specs: list[dict[str, Any]]) -> dict[str, Any]:
        pids: dict[str, int] = {}
        errors: dict[str, str] = {}
        todo: dict[str, tuple[str, list[dict[str, Any]]]] = {}  # host -> (netns, specs)
        for spec in specs:
            pod = str(spec["pod"])
            host = str(spec.get("host") or pod)
            ports = spec_ports(spec)
            current = self.host_of.get(pod)
            if current is not None:
                h = self.hosts[current]
                if current == host and h.pods.get(pod) == ports and _alive(h.pid):
                    pids[pod] = h.pid
                    continue
                self._stop([pod])
            netns = str(spec.get("host_netns") or spec["netns"])
            todo.setdefault(host, (netns, []))[1].append(spec)
        # every host process binds at once: requests out first, then the answers
        sent: list[tuple[Host, list[dict[str, Any]]]] = []
        for host, (netns, group) in todo.items():
            known = self.hosts.get(host)
            if known is not None and not _alive(known.pid):
                self._kill_host(host)
                known = None
            h = known if known is not None else self._spawn(host, netns)
            if self._send(h, {"op": "add", "pods": group}):
                sent.append((h, group))
            else:
                errors.update({str(s["pod"]): "pod server exited" for s in group})
        for h, group in sent:
            reply = self._receive(h)
            failed: dict[str, str] = (
                {str(s["pod"]): "pod server exited before listening" for s in group}
                if reply is None
                else {str(k): str(v) for k, v in reply.get("errors", {}).items()}
            )
            errors.update(failed)
            for s in group:
                pod = str(s["pod"])
                if pod not in failed:
                    h.pods[pod] = spec_ports(s)
                    self.host_of[pod] = h.name
                    pids[pod] = h.pid
            if reply is None or not h.pods:
                self._kill_host(h.name)
        return {"ok": not errors, "pids": pids, "errors": errors}

    def _stop(self, pods: list[str]) -> None:
        by_host: dict[str, list[str]] = {}
        for pod in pods:
            host = self.host_of.get(pod)
            if host is not None:
                by_host.setdefault(host, []).append(pod)
        for host, group in by_host.items():
            h = self.hosts[host]
            for pod in group:
                h.pods.pop(pod, None)
                self.host_of.pop(pod, None)
            # nothing left to serve (or no answer): the process goes
            done = bool(h.pods) and self._send(h, {"op": "remove", "pods": group})
            if not (done and self._receive(h)):
                self._kill_host(host)

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "start":
            return self.start(list(req["pods"]))
        if op == "stop":
            self._stop([str(p) for p in req["pods"]])
            return {"ok": True}
        if op == "list":
            return {
                "ok": True,
                "pids": {p: self.hosts[h].pid for p, h in self.host_of.items()},
            }
        if op == "shutdown":
            self.running = False
            return {"ok": True}
        return {"ok": False, "errors": {"": f"unknown op {op!r}"}}

    def shutdown(self) -> None:
        for host in list(self.hosts):
            self._kill_host(host)
        (self.state_dir / "supervisor.sock").unlink(missing_ok=True)
        (self.state_dir / "supervisor.pid").unlink(missing_ok=True)

    def run(self) -> None:
        sock_path = self.state_dir / "supervisor.sock"
        sock_path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(sock_path))
        listener.listen(64)
        listener.settimeout(1.0)
        (self.state_dir / "supervisor.pid").write_text(f"{os.getpid()}\n")

        def on_term(signum: int, frame: object) -> None:
            raise SystemExit(0)  # interrupts accept(); the finally below stops children

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # only teardown stops us
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        os.close(1)
        try:
            while self.running:
                self._reap_exited()
                try:
                    conn, _ = listener.accept()
                except (TimeoutError, InterruptedError):
                    continue
                with conn:
                    conn.settimeout(30)
                    data = b""
                    with contextlib.suppress(OSError):
                        while not data.endswith(b"\n"):
                            chunk = conn.recv(65536)
                            if not chunk:
                                break
                            data += chunk
                    try:
                        reply = self.handle(json.loads(data))
                    except (ValueError, KeyError, TypeError) as e:
                        reply = {"ok": False, "errors": {"": f"bad request: {e}"}}
                    with contextlib.suppress(OSError):
                        conn.sendall(json.dumps(reply).encode() + b"\n")
        finally:
            listener.close()
            self.shutdown()

    def _reap_exited(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for h in list(self.hosts.values()):
                if h.pid == pid:
                    self._forget_dead(h)


def _remove_host_files(state_dir: Path, host: str) -> None:
    host_pid_file(state_dir, host).unlink(missing_ok=True)
    host_pods_file(state_dir, host).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == 0


def _reap(pid: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError as e:
            if e.errno == errno.ECHILD:
                return
            raise
        if done:
            return
        time.sleep(0.005)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: podserver.py STATE_DIR\n")
        return 2
    state_dir = Path(argv[1])
    state_dir.mkdir(parents=True, exist_ok=True)
    Supervisor(state_dir).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
