"""The emulator's kubelet and container runtime for the pod subresources
(:class:`control.apiserver.podruntime.PodRuntime`): what ``kubectl exec``, ``attach``,
``port-forward``, ``logs`` and the apiserver's proxies reach on an emulated cluster.

* **exec** runs the emulated pod's network tools (:mod:`dataplane.podtools`) in the
  emulated world of the store as it is now (:func:`app.podexec.world`, rebuilt when the
  store's revision moved; the same world, conntrack included, between two execs of an
  unchanged cluster). ``cat`` without a file (or ``-``) copies stdin to stdout, as the
  real one does. With a terminal (``tty``) stderr joins stdout and every ``\\n`` goes
  out as ``\\r\\n`` (the terminal's ``onlcr``).
* **port-forward** is a connection to the pod server model (:mod:`dataplane.podtools.
  podserver`) from inside the pod (kubelet connects to ``localhost:PORT`` in the pod's
  namespace): the server sees ``127.0.0.1`` and an ephemeral port. A port no container
  declares is refused with kubelet's wording.
* **dial** is a connection from the node kube-apiserver runs on (the one whose address is
  the cluster's apiserver advertise address: :meth:`ClusterSpec.apiserver_address`)
  through the emulated dataplane, as kube-apiserver's proxies open it.
* **logs**: each answer of a pod server model is a record in the CRI log file of the
  container that declares the port, ``DIR/pods/<ns>_<name>_<uid>/<container>/0.log``
  (kubelet's ``/var/log/pods`` layout; a throw-away cluster uses a temporary directory).
  An emulated container never restarts, so there is no ``previous`` log.

When the answer of a connection is due (kube-proxy's pod servers answer the same way):
an HTTP/1.x request once its header ends (``\\r\\n\\r\\n``); any other bytes at once; end
of file with nothing sent (``nc -z``): nothing; nothing sent within
:data:`FIRST_BYTES_WINDOW` seconds: the body line.

Everything runs on the caller's event loop thread (the store is never used from two
threads); one tool run takes milliseconds.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from app import podexec
from control.apiserver.podruntime import Conn, ExecIO, ExecSpec, PodRuntime, PodRuntimeError
from control.session import Session
from dataplane import podtools
from dataplane.podtools import podserver
from dataplane.podtools.net import Emulated, tcp_exchange
from dataplane.podtools.target import PodTarget
from netmodel.errors import InputError, NotFoundError
from netmodel.objects import Node, Pod
from netmodel.resolvconf import pod_resolv_conf

__all__ = ["FIRST_BYTES_WINDOW", "EmulatedRuntime", "cri_record", "runtime_for", "stored_pod"]

#: seconds a connection may stay silent before the pod server answers its line (the real
#: pod server's window, dataplane/linux/podserver.py)
FIRST_BYTES_WINDOW = 0.2
#: Linux's default ephemeral port range (``net.ipv4.ip_local_port_range``)
EPHEMERAL = (32768, 60999)


def cri_record(text: str, when_ns: int | None = None, stream: str = "stdout") -> str:
    """One CRI log record (a line): ``<RFC 3339, nanoseconds, UTC> <stream> F <text>``."""
    ns = time.time_ns() if when_ns is None else when_ns
    secs, frac = divmod(ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    return f"{stamp}.{frac:09d}Z {stream} F {text}\n"


def stored_pod(session: Session, namespace: str, name: str) -> Pod:
    """Pod ``namespace/name`` of ``session``'s store; kubelet's ``pod does not exist``
    (:class:`PodRuntimeError`) when it is gone."""
    try:
        pod = session.store.get("Pod", f"{namespace}/{name}")
    except NotFoundError:
        raise PodRuntimeError("pod does not exist") from None
    assert isinstance(pod, Pod)
    return pod


def runtime_for(session: Session, *, real: bool) -> PodRuntime:
    """The runtime of ``session``'s cluster: the kernel's (the cluster ``svclab up
    --real`` built from its state directory) or the emulator's."""
    if real:
        from app.realruntime import RealRuntime

        return RealRuntime(session)
    return EmulatedRuntime(session)


class _ModelConn:
    """One connection to a pod server model, answered by ``respond(request, zero_io)``
    once the request is complete (see the module docstring); then the answer is read
    back and the connection ends."""

    def __init__(self, respond: Callable[[bytes, bool], bytes]) -> None:
        self._respond = respond
        self._request = bytearray()
        self._eof = False
        self._more = asyncio.Event()
        self._answer: bytes | None = None
        self._pos = 0
        self._closed = False

    def _complete(self) -> bool:
        if self._eof:
            return True
        data = bytes(self._request)
        if not data:
            return False
        if podserver.request_line(data) is not None or _http_prefix(data):
            return b"\r\n\r\n" in data
        return True

    async def _await_request(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FIRST_BYTES_WINDOW
        while not self._complete():
            self._more.clear()
            if self._request:
                await self._more.wait()
                continue
            left = deadline - loop.time()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(self._more.wait(), left)
            except TimeoutError:
                return

    async def read(self, n: int = 65536) -> bytes:
        if self._answer is None:
            if self._closed:
                return b""
            await self._await_request()
            zero = self._eof and not self._request
            self._answer = self._respond(bytes(self._request), zero)
        chunk = self._answer[self._pos : self._pos + n]
        self._pos += len(chunk)
        return chunk

    async def write(self, data: bytes) -> None:
        if self._answer is None and not self._eof:
            self._request += data
            self._more.set()

    async def write_eof(self) -> None:
        self._eof = True
        self._more.set()

    async def close(self) -> None:
        self._closed = True
        self._more.set()


def _http_prefix(data: bytes) -> bool:
    """Whether ``data`` starts like an HTTP/1.x request whose first line is unfinished."""
    head = data.split(b"\r\n", 1)[0].split(b" ", 1)[0]
    return b"\r\n" not in data and head.decode("latin-1") in podserver.METHODS


class EmulatedRuntime:
    """See the module docstring. ``session``: the served cluster (the API server's own
    session: read on the event loop only)."""

    backend = "emulated"

    def __init__(self, session: Session, *, logs_dir: Path | None = None) -> None:
        self.session = session
        if logs_dir is None:
            if session.state_dir is not None:
                logs_dir = Path(session.state_dir) / "pods"
            else:
                self._tmp = tempfile.TemporaryDirectory(prefix="svclab-pods-")
                logs_dir = Path(self._tmp.name)
        self.logs_dir = logs_dir
        self._world: Emulated | None = None
        self._revision = -1
        self._logged = 0
        self._ports = itertools.cycle(range(EPHEMERAL[0], EPHEMERAL[1] + 1))

    # ---- the world

    def world(self) -> Emulated:
        """The emulated world of the store as it is now (rebuilt when its revision
        moved since the last one was made)."""
        store = self.session.store
        if self._world is None or store.revision != self._revision:
            self.session.lazy_rules = None  # render the nodes' rules from the store now
            self._world = podexec.world(self.session)
            self._revision = store.revision
            self._logged = 0
        return self._world

    def _pod(self, namespace: str, name: str) -> Pod:
        return stored_pod(self.session, namespace, name)

    def _target(self, world: Emulated, namespace: str, name: str, container: str) -> PodTarget:
        try:
            return podexec.target(self.session, world, namespace, name, container or None)
        except (InputError, NotFoundError) as e:
            raise PodRuntimeError(str(e)) from None

    # ---- logs

    def _container_dir(self, pod: Pod, container: str) -> Path:
        return self.logs_dir / f"{pod.namespace}_{pod.name}_{pod.metadata.uid}" / container

    def log_path(self, namespace: str, pod: str, container: str, previous: bool) -> Path | None:
        if previous:
            return None
        try:
            p = self._pod(namespace, pod)
        except PodRuntimeError:
            return None
        path = self._container_dir(p, container) / "0.log"
        return path if path.exists() else None

    def _flush_logs(self, world: Emulated) -> None:
        """Append the pod servers' answers since the last flush to their containers'
        log files."""
        lines = world.access_log[self._logged :]
        self._logged = len(world.access_log)
        for line in lines:
            self._append(line)

    def _append(self, line: podserver.LogLine) -> None:
        ns, _, name = line.pod.partition("/")
        try:
            pod = self._pod(ns, name)
        except PodRuntimeError:
            return
        container = _container_of(pod, _local_port(line.text))
        d = self._container_dir(pod, container)
        d.mkdir(parents=True, exist_ok=True)
        with open(d / "0.log", "a", encoding="utf-8") as f:
            f.write(cri_record(line.text))

    # ---- exec

    async def exec(self, spec: ExecSpec, io: ExecIO) -> int:
        world = self.world()
        target = self._target(world, spec.namespace, spec.pod, spec.container)
        argv = list(spec.command)
        if spec.stdin and _cat_of_stdin(argv):
            return await self._cat(spec, io)
        code, out, err = podtools.run(world, target, argv)
        self._flush_logs(world)
        if spec.tty:
            out = (out + err).replace(b"\n", b"\r\n")
            err = b""
        if out and spec.stdout:
            await io.write_stdout(out)
        if err and spec.stderr:
            await io.write_stderr(err)
        return code

    async def _cat(self, spec: ExecSpec, io: ExecIO) -> int:
        while True:
            data = await io.read_stdin()
            if data is None:
                return 0
            if spec.tty:
                data = data.replace(b"\n", b"\r\n")
            if spec.stdout:
                await io.write_stdout(data)

    # ---- connections

    async def port_forward(self, namespace: str, pod: str, port: int) -> Conn:
        p = self._pod(namespace, pod)
        if p.status.phase != "Running":
            raise PodRuntimeError("pod does not exist")
        declared = {cp.container_port for c in p.spec.containers for cp in c.ports}
        if port not in declared:
            raise PodRuntimeError(
                f"failed to connect to localhost:{port} inside namespace "
                f'"{p.metadata.uid}", IPv4: dial tcp4 127.0.0.1:{port}: '
                "connect: connection refused IPv6 dial tcp6 [::1]:"
                f"{port}: connect: connection refused "
            )
        key = p.key
        peer = ("127.0.0.1", next(self._ports))

        def respond(request: bytes, zero_io: bool) -> bytes:
            if zero_io:
                return b""
            answer = podserver.answer(key, peer, ("127.0.0.1", port), request)
            if answer.log is not None:
                self._append(answer.log)
            return answer.data

        return _ModelConn(respond)

    def apiserver_node(self) -> tuple[str, str]:
        """(name, address) of the node kube-apiserver runs on (see the module docstring)."""
        address = self.session.cluster.spec.apiserver_address()
        nodes = [n for n in self.session.store.list("Node") if isinstance(n, Node)]
        for n in nodes:
            if address in n.internal_ips:
                return n.name, address
        if not nodes or not nodes[0].internal_ips:
            raise PodRuntimeError("the cluster has no node for kube-apiserver to dial from")
        return nodes[0].name, nodes[0].internal_ips[0]

    async def dial(self, ip: str, port: int) -> Conn:
        world = self.world()
        node, address = self.apiserver_node()
        spec = self.session.cluster.spec
        fake = Pod.model_validate(
            {
                "metadata": {"name": "kube-apiserver", "namespace": "kube-system"},
                "spec": {"nodeName": node, "hostNetwork": True, "containers": []},
                "status": {"phase": "Running", "podIP": address},
            }
        )
        source = podtools.pod_target(
            fake, pod_resolv_conf(fake, spec), spec.cluster_domain, node_ip=address
        )
        probe = tcp_exchange(world, source, ip, port, b"", zero_io=True)
        if probe.verdict != "delivered":
            raise PodRuntimeError(f"dial tcp {ip}:{port}: connect: {probe.error.lower()}")

        def respond(request: bytes, zero_io: bool) -> bytes:
            if zero_io:
                return b""
            now = self.world()
            ex = tcp_exchange(now, source, ip, port, request)
            self._flush_logs(now)
            return ex.answer

        return _ModelConn(respond)


def _cat_of_stdin(argv: list[str]) -> bool:
    return bool(argv) and argv[0].rsplit("/", 1)[-1] == "cat" and argv[1:] in ([], ["-"])


def _local_port(text: str) -> int | None:
    """The server's port in an access log line (``peer -> local "..."``)."""
    try:
        local = text.split(" -> ", 1)[1].split(" ", 1)[0]
        return int(local.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


def _container_of(pod: Pod, port: int | None) -> str:
    """The container that declares ``port`` (the first container otherwise)."""
    for c in pod.spec.containers:
        if any(p.container_port == port for p in c.ports):
            return c.name
    return pod.spec.containers[0].name if pod.spec.containers else "main"
