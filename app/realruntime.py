"""The kernel's pod runtime (:class:`control.apiserver.podruntime.PodRuntime`): kubelet and
the container runtime of the cluster ``svclab up --real`` built from a session's state
directory (``DIR/real.json``, :class:`app.real.RealRecord`).

* ``exec``: the command runs for real inside the pod's network namespace (its node's for
  a host-network pod) with the pod's ``/etc/resolv.conf``, ``/etc/hosts`` and hostname as
  kubelet gives them (:mod:`dataplane.linux.sandbox`); stdin, stdout and stderr are
  streamed as the process reads and writes them; the exit code is the process's
  (``128 + N`` when signal N ended it; 127, with runc's message on stderr, when the
  command does not exist; 126 when it cannot be executed). There is no terminal: with
  ``tty`` stderr goes to stdout, as on a terminal.
* ``port_forward``: a TCP socket created in the pod's namespace and connected to
  ``127.0.0.1:PORT``, as kubelet (the CRI's ``PortForward``) does from inside the pod.
* ``dial``: a TCP connection from the control plane's node, the one kube-apiserver runs
  on: the node whose address is the cluster's apiserver advertise address
  (:meth:`netmodel.cluster.ClusterSpec.apiserver_address`: the first control-plane node,
  else the first node), as the emulated runtime picks it (else the first node by name).
  Its host namespace is where kube-apiserver runs, so a ``services/proxy`` request
  crosses that node's kube-proxy rules.
* ``log_path``: the pod server's access log (:meth:`dataplane.linux.state.StateDir.pod_log`),
  which the real pod server appends a CRI record to per answer. One pod server answers
  for all of a pod's containerPorts, so the log is the container's that declares the
  pod's first TCP containerPort (a pod with one container: that one); other containers
  have none.

What this runtime sees is the realised cluster as the last ``svclab up --real`` left it:
a pod created since then has no sandbox until ``up`` runs again, and gets
:class:`PodRuntimeError` saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import socket
from pathlib import Path

from app.podruntime import stored_pod
from app.real import NoRealCluster, RealRecord
from control.apiserver.podruntime import Conn, ExecIO, ExecSpec, PodRuntimeError
from control.session import Session
from dataplane.linux import nsenter, sandbox
from dataplane.linux.realize import RealCluster
from dataplane.podtools.target import pod_target
from netmodel.errors import BackendError, InputError, NotFoundError
from netmodel.objects import Node, Pod
from netmodel.resolvconf import pod_resolv_conf

#: how long ``dial`` waits for the connection (kube-apiserver's proxy dialer: 30 s)
DIAL_TIMEOUT = 30.0
CHUNK = 1 << 16


class StreamConn:
    """A :class:`Conn` over asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def read(self, n: int = CHUNK) -> bytes:
        try:
            return await self.reader.read(n)
        except ConnectionError:
            return b""

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def write_eof(self) -> None:
        if self.writer.can_write_eof() and not self.writer.is_closing():
            with contextlib.suppress(OSError):
                self.writer.write_eof()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


async def _connect(sock: socket.socket, ip: str, port: int, timeout: float) -> StreamConn:
    """Connect ``sock`` (created in its namespace, not blocking) and wrap it."""
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.sock_connect(sock, (ip, port)), timeout)
        reader, writer = await asyncio.open_connection(sock=sock, limit=CHUNK * 4)
    except BaseException:
        sock.close()
        raise
    return StreamConn(reader, writer)


def _socket_in(netns: str, family: int = socket.AF_INET) -> socket.socket:
    s = nsenter.socket_in(netns, family, socket.SOCK_STREAM)
    s.setblocking(False)
    return s


class RealRuntime:
    """The pod runtime of the real cluster of ``session``'s state directory. Raises
    :class:`app.real.NoRealCluster` when there is none up."""

    backend = "real"

    def __init__(self, session: Session) -> None:
        self.session = session
        if session.state_dir is None:
            raise NoRealCluster("a real cluster needs a state directory (--state DIR)")
        record = RealRecord.read(session.state_dir)
        if record is None or record.status != "up":
            raise NoRealCluster(
                f"{session.state_dir}: no real cluster up here (run 'svclab up --real' first)"
            )
        self.cluster_id = record.cluster_id
        self._cluster: tuple[int, RealCluster] | None = None
        self.cluster  # noqa: B018 - fails now, not at the first request, when it is gone

    # ------------------------------------------------------------------ the cluster
    @property
    def cluster(self) -> RealCluster:
        """The realised cluster, re-read when ``up`` changed it."""
        try:
            from dataplane.linux.state import StateDir

            mtime = StateDir.of(self.cluster_id).cluster_file.stat().st_mtime_ns
        except OSError:
            raise NoRealCluster(f"real cluster {self.cluster_id} is gone") from None
        if self._cluster is None or self._cluster[0] != mtime:
            try:
                self._cluster = (mtime, RealCluster.load(self.cluster_id))
            except BackendError as e:
                raise NoRealCluster(str(e)) from None
        return self._cluster[1]

    def _pod(self, namespace: str, name: str) -> Pod:
        return stored_pod(self.session, namespace, name)

    def _netns(self, pod: Pod) -> str:
        """The kernel namespace the pod's processes and sockets live in."""
        logical = f"node/{pod.spec.node_name}" if pod.spec.host_network else f"pod/{pod.key}"
        netns = self.cluster.namespaces.get(logical)
        if netns is None or nsenter.inode(netns) is None:
            raise PodRuntimeError(
                f"pod {pod.key} has no sandbox in real cluster {self.cluster_id} "
                "(created after 'svclab up --real'? run it again)"
            )
        return netns

    def _files(self, pod: Pod) -> sandbox.PodFiles:
        spec = self.session.cluster.spec
        node_ip = None
        if pod.spec.host_network and pod.spec.node_name:
            with contextlib.suppress(NotFoundError):
                n = self.session.store.get("Node", pod.spec.node_name)
                if isinstance(n, Node) and n.internal_ips:
                    node_ip = n.internal_ips[0]
        try:
            t = pod_target(pod, pod_resolv_conf(pod, spec), spec.cluster_domain, node_ip=node_ip)
        except InputError as e:  # not running, or a dnsPolicy/dnsConfig kubelet refuses
            raise PodRuntimeError(str(e)) from None
        return sandbox.PodFiles(t.resolv_conf.render(), t.hosts, t.hostname)

    # ------------------------------------------------------------------ exec
    async def exec(self, spec: ExecSpec, io: ExecIO) -> int:
        pod = self._pod(spec.namespace, spec.pod)
        netns = self._netns(pod)
        files = self._files(pod)
        if not spec.command:
            raise PodRuntimeError("command must not be empty")
        path = sandbox.which(spec.command[0])
        if path is None:
            if spec.stderr or spec.tty:
                await (io.write_stdout if spec.tty else io.write_stderr)(
                    (
                        "OCI runtime exec failed: exec failed: unable to start container "
                        f'process: exec: "{spec.command[0]}": executable file not found '
                        "in $PATH: unknown\r\n"
                    ).encode()
                )
            return 127
        mounts = sandbox.write_files(self.cluster.state, pod.key, files)
        env = {"PATH": sandbox.PATH, "HOSTNAME": files.hostname, "HOME": "/root"}
        if spec.tty:
            env["TERM"] = "xterm"
        pipe, null = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
        try:
            proc = await sandbox.spawn(
                netns,
                [path, *spec.command[1:]],
                mounts,
                files.hostname,
                env=env,
                stdin=pipe if spec.stdin else null,
                stdout=pipe if spec.stdout or spec.tty else null,
                stderr=asyncio.subprocess.STDOUT if spec.tty else (pipe if spec.stderr else null),
            )
        except PermissionError:
            return 126
        except OSError as e:
            if e.errno in (errno.EACCES, errno.ENOEXEC):
                return 126
            raise PodRuntimeError(f"exec {spec.command[0]}: {e.strerror or e}") from None
        except BackendError as e:
            raise PodRuntimeError(str(e)) from None
        return await self._run(proc, io)

    async def _run(self, proc: asyncio.subprocess.Process, io: ExecIO) -> int:
        async def pump(stream: asyncio.StreamReader | None, write: object) -> None:
            if stream is None:
                return
            assert callable(write)
            while chunk := await stream.read(CHUNK):
                await write(chunk)

        async def feed() -> None:
            assert proc.stdin is not None
            try:
                while (chunk := await io.read_stdin()) is not None:
                    proc.stdin.write(chunk)
                    await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                proc.stdin.close()

        feeder = asyncio.ensure_future(feed()) if proc.stdin is not None else None
        try:
            await asyncio.gather(
                pump(proc.stdout, io.write_stdout), pump(proc.stderr, io.write_stderr)
            )
            code = await proc.wait()
        finally:
            if feeder is not None:
                feeder.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await feeder
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL)
                await proc.wait()
        return code if code >= 0 else 128 - code

    # ------------------------------------------------------------------ connections
    async def port_forward(self, namespace: str, pod: str, port: int) -> Conn:
        """IPv4 first, then IPv6 (``[::1]``), as containerd's ``PortForward`` tries."""
        p = self._pod(namespace, pod)
        netns = self._netns(p)
        try:
            return await _connect(_socket_in(netns), "127.0.0.1", port, DIAL_TIMEOUT)
        except (OSError, TimeoutError) as e:
            err4 = _dial_error("tcp4", f"127.0.0.1:{port}", e)
        try:
            return await _connect(_socket_in(netns, socket.AF_INET6), "::1", port, DIAL_TIMEOUT)
        except (OSError, TimeoutError) as e:
            err6 = _dial_error("tcp6", f"[::1]:{port}", e)
        raise PodRuntimeError(
            f"failed to connect to localhost:{port} inside namespace "
            f'"{p.metadata.uid or p.key}", IPv4: {err4} IPv6 {err6} '
        )

    def dial_node(self) -> str:
        """The node ``dial`` connects from (see the module docstring)."""
        address = self.session.cluster.spec.apiserver_address()
        nodes = sorted(
            (n for n in self.session.store.list("Node") if isinstance(n, Node)),
            key=lambda n: n.name,
        )
        realised = [n for n in nodes if f"node/{n.name}" in self.cluster.namespaces]
        for n in realised:
            if address in n.internal_ips:
                return n.name
        if not realised:
            raise PodRuntimeError("the cluster has no node for kube-apiserver to dial from")
        return realised[0].name

    async def dial(self, ip: str, port: int) -> Conn:
        netns = self.cluster.namespaces[f"node/{self.dial_node()}"]
        try:
            return await _connect(_socket_in(netns), ip, port, DIAL_TIMEOUT)
        except TimeoutError:
            raise PodRuntimeError(f"dial tcp {ip}:{port}: i/o timeout") from None
        except OSError as e:
            raise PodRuntimeError(f"dial tcp {ip}:{port}: connect: {_strerror(e)}") from None

    # ------------------------------------------------------------------ logs
    def log_path(self, namespace: str, pod: str, container: str, previous: bool) -> Path | None:
        if previous:
            return None  # a pod server never restarts: no terminated instance
        try:
            p = self.session.store.get("Pod", f"{namespace}/{pod}")
        except NotFoundError:
            return None
        assert isinstance(p, Pod)
        if log_container(p) != container:
            return None
        path = self.cluster.state.pod_log(p.key)
        return path if path.exists() else None


def log_container(pod: Pod) -> str | None:
    """The container whose log is the pod server's (see the module docstring)."""
    for c in pod.spec.containers:
        if any((p.protocol or "TCP") == "TCP" for p in c.ports):
            return c.name
    return pod.spec.containers[0].name if len(pod.spec.containers) == 1 else None


def _dial_error(network: str, address: str, e: BaseException) -> str:
    """Go's ``net.Dial`` error text (``dial tcp4 127.0.0.1:81: connect: connection
    refused``)."""
    if isinstance(e, TimeoutError):
        return f"dial {network} {address}: i/o timeout"
    assert isinstance(e, OSError)
    return f"dial {network} {address}: connect: {_strerror(e)}"


def _strerror(e: OSError) -> str:
    """Go's wording of a connect error (``connection refused``, ``no route to host``)."""
    return os.strerror(e.errno).lower() if e.errno else str(e)
