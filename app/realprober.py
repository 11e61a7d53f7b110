"""The kernel's prober (:class:`control.agents.probes.Prober`): each probe is a real
connection from the node's network namespace to the pod, as kubelet's prober dials
from the host.

* ``httpGet``: a TCP connection to ``host`` (default: the pod's IP) and the port (a
  container port's name resolved in the probed container), one ``GET`` with kubelet's
  headers (``Host``, ``User-Agent: kube-probe/<version>``, ``Accept: */*``, then the
  probe's ``httpHeaders``); success is a status in [200, 400). The pod servers answer
  the health URLs (``/readyz``, ``/healthz``) from the pod's health flags.
  ``scheme: HTTPS`` opens TLS (no verification, as kubelet) and fails against the plain
  HTTP pod server, as it would against any plain server.
* ``tcpSocket``: the connection is accepted within ``timeoutSeconds``.
* ``grpc``: a real connection, then one gRPC call of ``grpc.health.v1.Health/Check``
  for ``service`` over it (:mod:`app.grpcprobe`: HTTP/2 driven over the prober's own
  socket); success is SERVING. The pod servers serve it on the ports a pod's ``grpc``
  probes target, SERVING or not from the pod's health flags; elsewhere they speak no
  gRPC and the probe fails as kubelet's would.
* ``exec``: the command runs in the pod's network namespace (``ip netns exec``), with
  ``timeoutSeconds``; success is exit status 0.

Which namespaces: the real cluster recorded in the state directory (``DIR/real.json``,
:class:`app.real.RealRecord`), re-read when ``up`` changed it.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path

from app import grpcprobe
from app.real import RealRecord
from control.agents.emulatedprober import resolve_port
from control.agents.probes import ProbeResult
from dataplane.linux import nsenter
from dataplane.linux.realize import RealCluster
from dataplane.linux.state import StateDir
from netmodel.cluster import ClusterSpec
from netmodel.errors import BackendError
from netmodel.objects import Container, Pod, Probe

#: the version kubelet's User-Agent names
KUBE_VERSION = "1.31"


class RealProber:
    """Probes the pods of the real cluster kept in ``state_dir`` (see the module
    docstring); ``cluster``: its spec (what a node host has)."""

    def __init__(self, state_dir: Path, cluster: ClusterSpec) -> None:
        self.state_dir = Path(state_dir)
        self.spec = cluster
        self._cluster: tuple[str, int, RealCluster] | None = None

    def _real(self) -> RealCluster:
        record = RealRecord.read(self.state_dir)
        if record is None:
            raise BackendError(f"{self.state_dir}: no real cluster here")
        mtime = StateDir.of(record.cluster_id).cluster_file.stat().st_mtime_ns
        if self._cluster is None or self._cluster[:2] != (record.cluster_id, mtime):
            self._cluster = (record.cluster_id, mtime, RealCluster.load(record.cluster_id))
        return self._cluster[2]

    def _netns(self, logical: str) -> str | None:
        try:
            return self._real().namespaces.get(logical)
        except (OSError, BackendError):
            return None

    def probe(self, pod: Pod, container: Container, kind: str, probe: Probe) -> ProbeResult:
        timeout = float(probe.timeout_seconds or 1)
        if probe.exec is not None:
            return self._exec(pod, probe.exec.command, timeout)
        node_ns = self._netns(f"node/{pod.spec.node_name}")
        if node_ns is None:
            return ProbeResult(False, f"node {pod.spec.node_name} has no namespace")
        raw: int | str
        host: str | None = None
        if probe.http_get is not None:
            raw, host = probe.http_get.port, probe.http_get.host
        elif probe.tcp_socket is not None:
            raw, host = probe.tcp_socket.port, probe.tcp_socket.host
        elif probe.grpc is not None:
            raw = probe.grpc.port
        else:
            return ProbeResult(False, "no probe handler")
        port = resolve_port(pod, container, raw)
        if port is None:
            return ProbeResult(False, f"couldn't find port {raw!r} in container {container.name}")
        ip = host or pod.status.pod_ip or ""
        try:
            sock = nsenter.socket_in(node_ns, socket.AF_INET, socket.SOCK_STREAM)
        except OSError as e:
            return ProbeResult(False, f"dial tcp {ip}:{port}: {e.strerror or e}")
        with sock:
            sock.settimeout(timeout)
            try:
                sock.connect((ip, port))
            except TimeoutError:
                return ProbeResult(False, f"dial tcp {ip}:{port}: i/o timeout")
            except OSError as e:
                why = str(e.strerror or e)
                why = why[:1].lower() + why[1:]  # Go's wording: "connection refused"
                return ProbeResult(False, f"dial tcp {ip}:{port}: connect: {why}")
            if probe.tcp_socket is not None:
                return ProbeResult(True)
            if probe.grpc is not None:
                return grpcprobe.check(
                    sock,
                    f"{ip}:{port}",
                    probe.grpc.service or "",
                    timeout,
                    f"kube-probe/{KUBE_VERSION}",
                )
            assert probe.http_get is not None
            return self._http(sock, ip, port, probe)

    def _http(self, sock: socket.socket, ip: str, port: int, probe: Probe) -> ProbeResult:
        get = probe.http_get
        assert get is not None
        scheme = (get.scheme or "HTTP").lower()
        path = get.path or "/"
        url = f"{scheme}://{ip}:{port}{path}"
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {ip}:{port}",
            f"User-Agent: kube-probe/{KUBE_VERSION}",
            "Accept: */*",
            *(f"{h.name}: {h.value}" for h in get.http_headers),
            "Connection: close",
        ]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode()
        conn: socket.socket = sock
        try:
            if scheme == "https":
                ctx = ssl.create_default_context()
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
                conn = ctx.wrap_socket(sock)
            conn.sendall(request)
            data = b""
            while b"\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            return ProbeResult(
                False,
                f'Get "{url}": context deadline exceeded (Client.Timeout exceeded '
                "while awaiting headers)",
            )
        except (OSError, ssl.SSLError) as e:
            return ProbeResult(False, f'Get "{url}": {e}')
        words = data.split(b"\r\n", 1)[0].split(b" ")
        if len(words) < 2 or not words[1].isdigit():
            return ProbeResult(False, f'Get "{url}": malformed HTTP response {data[:40]!r}')
        code = int(words[1])
        if 200 <= code < 400:
            return ProbeResult(True)
        return ProbeResult(False, f"HTTP probe failed with statuscode: {code}")

    def _exec(self, pod: Pod, command: list[str], timeout: float) -> ProbeResult:
        logical = f"node/{pod.spec.node_name}" if pod.spec.host_network else f"pod/{pod.key}"
        netns = self._netns(logical)
        if netns is None:
            return ProbeResult(False, f"pod {pod.key} has no sandbox")
        try:
            out = subprocess.run(
                ["ip", "netns", "exec", netns, *command],
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return ProbeResult(False, f"command timed out after {timeout:g}s")
        except OSError as e:
            return ProbeResult(False, str(e))
        if out.returncode != 0:
            text = (out.stdout + out.stderr).decode(errors="replace").strip()
            return ProbeResult(False, text or f"command exited with {out.returncode}")
        return ProbeResult(True)

    def forget(self, pod: Pod) -> None:
        """Nothing kept per pod here: the pod servers keep the health flags."""
        return None


__all__ = ["RealProber"]
