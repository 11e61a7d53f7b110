"""svclab's gRPC health wire checked against gRPC's own implementation, both ways, over
loopback TCP:

* the kernel prober's call (:mod:`app.grpcprobe`, HTTP/2 by ``h2`` over a socket it is
  handed) against a grpcio server running grpcio-health-checking's ``HealthServicer``:
  SERVING, NOT_SERVING, an unknown service (NOT_FOUND), a server without the health
  service (UNIMPLEMENTED), with kubelet's messages;
* the pod server's gRPC health service (:class:`dataplane.linux.podserver.GrpcHealth`,
  fed by a small accept loop here as the pod server's host process feeds it) against a
  grpcio client's ``HealthStub.Check``: SERVING or NOT_SERVING per the pod's health
  files, ``Watch`` refused as UNIMPLEMENTED, each call in the log texts;
* the prober against something that is no gRPC server, and one that never answers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from app import grpcprobe
from control.agents.probes import ProbeResult
from dataplane.linux.podserver import GrpcHealth
from netmodel import podhealth

UA = "kube-probe/1.31"
POD = "default/web-1"


def _dial(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _check(port: int, service: str, timeout: float = 5.0) -> ProbeResult:
    with _dial(port) as s:
        return grpcprobe.check(s, f"127.0.0.1:{port}", service, timeout, UA)


@pytest.fixture
def grpcio_server() -> Iterator[tuple[int, health.HealthServicer]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, servicer
    finally:
        server.stop(None)


def test_the_probers_call_against_grpcios_health_server(
    grpcio_server: tuple[int, health.HealthServicer],
) -> None:
    port, servicer = grpcio_server
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    servicer.set("readiness", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert _check(port, "") == ProbeResult(True)
    assert _check(port, "readiness") == ProbeResult(
        False, 'service unhealthy (responded with "NOT_SERVING")'
    )
    servicer.set("readiness", health_pb2.HealthCheckResponse.SERVING)
    assert _check(port, "readiness").ok
    servicer.set("", health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
    assert _check(port, "").message == 'service unhealthy (responded with "SERVICE_UNKNOWN")'
    res = _check(port, "nosuch")  # grpcio's servicer: NOT_FOUND for an unknown service
    assert not res.ok
    assert res.message.startswith(
        "error: health rpc probe failed: rpc error: code = NotFound desc = "
    ), res.message


def test_a_grpc_server_without_the_health_service_is_unimplemented() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        res = _check(port, "")
    finally:
        server.stop(None)
    assert not res.ok
    assert res.message.startswith(
        "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): "
    ), res.message


def _serve(listener: socket.socket, root: Path, log: list[str]) -> None:
    """Feed each accepted connection's bytes to a GrpcHealth, as the pod server's host
    process does, until the client closes."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            g = GrpcHealth(POD, root)
            preface = b""
            while len(preface) < len(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"):
                chunk = conn.recv(24 - len(preface))
                if not chunk:
                    break
                preface += chunk
            data = preface
            while data and not g.closed:
                log.extend(f"{line} {status} {size}" for line, status, size in g.feed(data))
                conn.sendall(g.outgoing())
                try:
                    data = conn.recv(65536)
                except OSError:
                    break


@pytest.fixture
def pod_server(tmp_path: Path) -> Iterator[tuple[int, Path, list[str]]]:
    listener = socket.create_server(("127.0.0.1", 0))
    log: list[str] = []
    t = threading.Thread(target=_serve, args=(listener, tmp_path, log), daemon=True)
    t.start()
    try:
        yield listener.getsockname()[1], tmp_path, log
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        t.join(5)


def test_grpcios_client_against_the_pod_servers_health_service(
    pod_server: tuple[int, Path, list[str]],
) -> None:
    port, root, log = pod_server
    req = health_pb2.HealthCheckRequest
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        serving = health_pb2.HealthCheckResponse.SERVING
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        assert stub.Check(req(service=""), timeout=5).status == serving
        assert stub.Check(req(service="readiness"), timeout=5).status == serving
        podhealth.set_flags(POD, False, ("ready",), root)
        assert stub.Check(req(service="readiness"), timeout=5).status == not_serving
        assert stub.Check(req(service=""), timeout=5).status == serving
        podhealth.set_flags(POD, False, ("live",), root)
        assert stub.Check(req(service=""), timeout=5).status == not_serving
        podhealth.set_flags(POD, True, ("ready", "live"), root)
        assert stub.Check(req(service="readiness"), timeout=5).status == serving
        with pytest.raises(grpc.RpcError) as err:
            next(iter(stub.Watch(req(service=""), timeout=5)))
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert log[0] == "POST /grpc.health.v1.Health/Check HTTP/2.0 200 7"
    assert log[-1] == "POST /grpc.health.v1.Health/Watch HTTP/2.0 200 0"
    assert len(log) == 7  # six checks and the watch


def test_the_prober_against_the_pod_servers_health_service(
    pod_server: tuple[int, Path, list[str]],
) -> None:
    port, root, _ = pod_server
    assert _check(port, "readiness").ok
    podhealth.set_flags(POD, False, ("ready",), root)
    assert _check(port, "readiness").message == 'service unhealthy (responded with "NOT_SERVING")'
    assert _check(port, "").ok


def test_the_prober_against_no_grpc_server_and_a_silent_one() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def line_server() -> None:  # what svclab's pod servers answer on a plain port
        conn, peer = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(f"{POD} {peer[0]} {peer[1]}\n".encode())

    t = threading.Thread(target=line_server, daemon=True)
    t.start()
    try:
        res = _check(port, "")
        t.join(5)
        assert not res.ok
        assert res.message.startswith(f'error: failed to connect service at "127.0.0.1:{port}": ')
        # accepted (the backlog) but never answered: the call's deadline
        with _dial(port) as s:
            res = grpcprobe.check(s, f"127.0.0.1:{port}", "", 0.3, UA)
        assert res == ProbeResult(False, "timeout: health rpc did not complete within 0.3s")
    finally:
        listener.close()


def test_request_and_response_messages_are_grpcs_length_prefixed_protobuf() -> None:
    assert grpcprobe.encode_request("readiness") == b"\0\0\0\0\x0b\x0a\x09readiness"
    assert grpcprobe.encode_request("") == b"\0\0\0\0\0"
    assert grpcprobe.decode_response(b"\0\0\0\0\x02\x08\x02") == 2  # NOT_SERVING
    for bad in (b"", b"\0\0\0\0\x05\x08", b"\x01\0\0\0\x02\x08\x01", b"\0\0\0\0\x02\xff\xff"):
        with pytest.raises(ValueError):
            grpcprobe.decode_response(bad)
