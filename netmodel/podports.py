"""Where a pod's server listens, on either backend: every declared container port, and
the TCP port each of its probes (``httpGet``, ``tcpSocket``, ``grpc``) targets.

A container's ``ports`` are informational in Kubernetes: an application listens where it
listens, and its probes name where that is (ingress-nginx declares 80 and 443 and is
probed on 10254). svclab's pod servers stand in for the application, so they listen on
both; the emulator's model and the kernel's pod servers take the same set from here.
"""

from __future__ import annotations

from netmodel.objects import Container, Pod, Probe


def probe_port(container: Container, port: int | str) -> int | None:
    """A probe's port: the number, or the number of the container's port of that name
    (None: no such port)."""
    if isinstance(port, int):
        return port
    for cp in container.ports:
        if cp.name == port:
            return cp.container_port
    return None


def _probes(pod: Pod) -> list[tuple[Container, Probe]]:
    return [
        (c, probe)
        for c in pod.spec.containers
        for probe in (c.readiness_probe, c.liveness_probe, c.startup_probe)
        if probe is not None
    ]


def grpc_ports(pod: Pod) -> frozenset[int]:
    """The TCP ports the pod's ``grpc`` probes target: where its server speaks gRPC's
    health service (a gRPC server stands in for the application there)."""
    out = set()
    for c, probe in _probes(pod):
        port = None if probe.grpc is None else probe_port(c, probe.grpc.port)
        if port:
            out.add(port)
    return frozenset(out)


def listening(pod: Pod) -> frozenset[tuple[str, int]]:
    """(protocol in lower case, port) of every port the pod's server listens on."""
    out = {(cp.protocol.lower(), cp.container_port) for c in pod.spec.containers for cp in c.ports}
    for c, probe in _probes(pod):
        raw: int | str | None = None
        if probe.http_get is not None:
            raw = probe.http_get.port
        elif probe.tcp_socket is not None:
            raw = probe.tcp_socket.port
        elif probe.grpc is not None:
            raw = probe.grpc.port
        port = None if raw is None else probe_port(c, raw)
        if port:
            out.add(("tcp", port))
    return frozenset(out)


__all__ = ["grpc_ports", "listening", "probe_port"]
