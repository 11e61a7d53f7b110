"""The emulator's prober: a probe reaches the emulated pod server of the pod (what every
emulated pod answers on its declared TCP container ports, :mod:`netmodel.podhealth` for
its health URLs), as kubelet's prober reaches the real one.

* ``httpGet``: the port (a number, or a container port's name) must be a TCP port a
  container of the pod declares (else ``connection refused``, as no server listens);
  the answer is the pod server's: the health URLs answer the pod's health, any other
  path 200. Success is a status in [200, 400), as kubelet's. ``scheme: HTTPS`` fails as
  against the real pod server (it speaks plain HTTP). ``host``, when given, must be the
  pod's own address (svclab's pods serve nowhere else).
* ``tcpSocket``: success when the port is declared (the pod server accepts there).
* ``grpc``: the port must be declared; SERVING per :func:`netmodel.podhealth.grpc_serving`,
  failing with kubelet's ``service unhealthy (responded with "NOT_SERVING")``.
* ``exec``: the command as :mod:`control.agents.commands` evaluates it: success when it
  exits 0 within ``timeoutSeconds``; a command svclab does not evaluate fails, saying so.
"""

from __future__ import annotations

from pathlib import Path

from control.agents.commands import Program, program
from control.agents.probes import ProbeResult
from netmodel import podhealth, podports
from netmodel.objects import Container, Pod, Probe


def resolve_port(pod: Pod, container: Container, port: int | str) -> int | None:
    """A probe's port: the number, or the number of the container's port of that name
    (kubelet looks the name up in the probed container)."""
    if isinstance(port, int):
        return port
    for cp in container.ports:
        if cp.name == port:
            return cp.container_port
    return None


def _declared(pod: Pod, port: int) -> bool:
    """Whether the pod's server listens on TCP ``port`` (:func:`netmodel.podports.listening`)."""
    return ("tcp", port) in podports.listening(pod)


class EmulatedProber:
    """Probes emulated pods; ``health_root``: where the pods' health files are (None: this
    process's memory, see :mod:`netmodel.podhealth`)."""

    def __init__(self, health_root: Path | None = None) -> None:
        self.health_root = health_root

    def probe(self, pod: Pod, container: Container, kind: str, probe: Probe) -> ProbeResult:
        ip = pod.status.pod_ip or ""
        timeout = probe.timeout_seconds or 1
        if probe.exec is not None:
            prog = program(probe.exec.command, None)
            if not isinstance(prog, Program):
                return ProbeResult(False, f"svclab does not evaluate this command: {prog.why}")
            if prog.seconds > timeout:
                return ProbeResult(False, f"command timed out after {timeout}s")
            if prog.code != 0:
                return ProbeResult(False, f"command exited with {prog.code}")
            return ProbeResult(True)
        raw: int | str
        if probe.http_get is not None:
            raw = probe.http_get.port
        elif probe.tcp_socket is not None:
            raw = probe.tcp_socket.port
        elif probe.grpc is not None:
            raw = probe.grpc.port
        else:
            return ProbeResult(False, "no probe handler")
        port = resolve_port(pod, container, raw)
        if port is None:
            return ProbeResult(False, f"couldn't find port {raw!r} in container {container.name}")
        host = (
            (probe.http_get.host if probe.http_get else None)
            or (probe.tcp_socket.host if probe.tcp_socket else None)
            or ip
        )
        if host != ip:
            return ProbeResult(
                False, f"dial tcp {host}:{port}: svclab probes the pod's own address only"
            )
        if not _declared(pod, port):
            return ProbeResult(False, f"dial tcp {ip}:{port}: connect: connection refused")
        if probe.tcp_socket is not None:
            return ProbeResult(True)
        if probe.grpc is not None:
            service = probe.grpc.service or ""
            if podhealth.grpc_serving(pod.key, service, self.health_root):
                return ProbeResult(True)
            return ProbeResult(False, 'service unhealthy (responded with "NOT_SERVING")')
        get = probe.http_get
        assert get is not None
        path = get.path or "/"
        url = f"{(get.scheme or 'HTTP').lower()}://{ip}:{port}{path}"
        if (get.scheme or "HTTP") == "HTTPS":
            return ProbeResult(
                False, f'Get "{url}": http: server gave HTTP response to HTTPS client'
            )
        answer = podhealth.http_answer(pod.key, "GET", path, self.health_root)
        code = 200 if answer is None else answer[0]
        if 200 <= code < 400:
            return ProbeResult(True)
        return ProbeResult(False, f"HTTP probe failed with statuscode: {code}")

    def forget(self, pod: Pod) -> None:
        podhealth.forget(pod.key, self.health_root)


__all__ = ["EmulatedProber", "resolve_port"]
