"""What the apiserver's pod subresources need from the nodes: the contract between
``pods/exec``, ``pods/attach``, ``pods/portforward``, ``pods/log`` and the ``proxy``
subresources (kubelet's side of them) and the backend that runs the pods.

kube-apiserver does not run a pod's command itself: it checks the request (the pod
exists, is scheduled and running, the container is one of its own), then forwards it
to the pod's kubelet, which asks the container runtime. svclab's HTTP layer does the
checks; a :class:`PodRuntime` is the kubelet and the runtime. Two implement it, one
per backend, and the HTTP layer does not know which it has:

* the emulator (``app``): commands are the emulated pod's network tools
  (:mod:`dataplane.podtools`), connections go to the pod server model;
* the kernel (``app``, on a cluster ``svclab up --real`` built): commands run inside
  the pod's network namespace, connections are sockets in it.

Streams are plain ``bytes``. Everything here is awaited on the server's event loop; an
implementation runs blocking work in a thread.

Logs: both backends keep a pod's log as a file in the CRI logging format kubelet
reads (one record a line: ``<RFC 3339 timestamp with nanoseconds, UTC> <stdout|stderr>
<F|P> <text>``), appended as the pod server answers: :meth:`PodRuntime.log_path`
names it. ``kubectl logs`` reads it, ``-f`` follows it as it grows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class PodRuntimeError(Exception):
    """The runtime cannot do what was asked of a pod that the HTTP layer found fit
    (e.g. its namespace is gone): ``message`` is what kubelet would answer, one line."""


@dataclass(frozen=True, slots=True)
class ExecSpec:
    """One ``exec``: the command of container ``container`` of pod ``namespace/pod``,
    and which streams the client asked for (``tty``: a terminal; stderr then goes to
    stdout, as with a real terminal)."""

    namespace: str
    pod: str
    container: str
    command: tuple[str, ...]
    stdin: bool = False
    stdout: bool = True
    stderr: bool = True
    tty: bool = False


class ExecIO(Protocol):
    """The client's side of an exec, as the streaming protocol delivers it."""

    async def read_stdin(self) -> bytes | None:
        """The next chunk the client typed; ``None`` once stdin is closed (or was not
        asked for)."""
        ...

    async def write_stdout(self, data: bytes) -> None: ...

    async def write_stderr(self, data: bytes) -> None: ...


class Conn(Protocol):
    """One TCP connection the runtime opened for the client (port-forward, proxy)."""

    async def read(self, n: int = 65536) -> bytes:
        """Up to ``n`` bytes; ``b""`` once the other end closed its side."""
        ...

    async def write(self, data: bytes) -> None: ...

    async def write_eof(self) -> None:
        """Close our sending side (the peer reads end of file); reading goes on."""
        ...

    async def close(self) -> None: ...


class PodRuntime(Protocol):
    """A node's kubelet and container runtime, as the pod subresources use them."""

    #: ``emulated`` or ``real``
    backend: str

    async def exec(self, spec: ExecSpec, io: ExecIO) -> int:
        """Run ``spec.command`` in the container; its exit code (127: no such command;
        126: not executable). Output goes to ``io`` as it is produced."""
        ...

    async def port_forward(self, namespace: str, pod: str, port: int) -> Conn:
        """A connection to ``localhost:port`` inside pod ``namespace/pod``'s network
        namespace, as kubelet opens it for ``kubectl port-forward``. Raises
        :class:`PodRuntimeError` when nothing listens there (kubelet's wording:
        ``failed to connect to localhost:PORT inside namespace ...``)."""
        ...

    async def dial(self, ip: str, port: int) -> Conn:
        """A connection from the control plane's node to ``ip:port`` through the
        cluster network (what kube-apiserver's ``services/proxy``, ``pods/proxy`` and
        ``nodes/proxy`` open). Raises :class:`PodRuntimeError` when it is refused or
        times out."""
        ...

    def log_path(self, namespace: str, pod: str, container: str, previous: bool) -> Path | None:
        """The CRI log file of the container (``previous``: of its last terminated
        instance); ``None`` when it has none yet."""
        ...
