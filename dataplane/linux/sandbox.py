"""A command run inside a pod as its container would run it: in the pod's network
namespace (its node's for a host-network pod), seeing the pod's ``/etc/resolv.conf`` and
``/etc/hosts`` as kubelet writes them and the pod's hostname. What ``kubectl exec`` does
on the real backend.

``ip netns exec NAME`` does the same for ``/etc/netns/NAME/*``: it forks, enters the
namespace, unshares a mount namespace, makes it private and bind-mounts each file over
its ``/etc`` twin. Here the forked child does it itself, between ``fork`` and ``exec``
(:func:`spawn`; the ``preexec_fn`` calls only ``setns``, ``unshare``, ``mount`` and
``sethostname`` through pre-resolved libc symbols on pre-built arguments), with a new UTS
namespace too, so ``hostname`` names the pod. One ``fork``/``exec`` per command, no
helper binary: an exec costs a few milliseconds.

Nothing leaks: the mount and UTS namespaces belong to the command's process and vanish
with it (mounts made there are private: none propagates back to the host); the files
mounted live in the cluster's state directory (:meth:`StateDir.pod_etc`, removed with
the cluster), rewritten only when their text changed.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dataplane.linux.nsenter import netns_path
from dataplane.linux.state import StateDir
from netmodel.errors import BackendError

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
#: containerd's default ``PATH`` of a container (the image's when it sets none)
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_libc = ctypes.CDLL(None, use_errno=True)
# resolved once here: the child calls them between fork and exec
_setns = _libc.setns
_unshare = _libc.unshare
_mount = _libc.mount
_sethostname = _libc.sethostname


@dataclass(frozen=True, slots=True)
class PodFiles:
    """What kubelet gives a container: ``/etc/resolv.conf``, ``/etc/hosts`` (their text)
    and the hostname."""

    resolv_conf: str
    hosts: str
    hostname: str


def write_files(state: StateDir, pod_key: str, files: PodFiles) -> dict[str, Path]:
    """The pod's files under the cluster's state directory (written, atomically, when
    their text changed); returns target path (``/etc/...``) -> source file."""
    d = state.pod_etc(pod_key)
    d.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name, text in (("resolv.conf", files.resolv_conf), ("hosts", files.hosts)):
        path = d / name
        try:
            same = path.read_text() == text
        except FileNotFoundError:
            same = False
        if not same:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
        out[f"/etc/{name}"] = path
    return out


def which(command: str) -> str | None:
    """The file ``command`` runs (searched in :data:`PATH` when it has no ``/``), or None
    when there is none."""
    if "/" in command:
        return command if os.path.exists(command) else None
    return shutil.which(command, path=PATH)


def _preexec(netns_fd: int, mounts: Mapping[str, Path], hostname: str) -> Callable[[], None]:
    """The child's part (see the module docstring); its arguments are built here."""
    binds = [(str(src).encode(), dst.encode()) for dst, src in mounts.items()]
    name = hostname.encode()

    def enter() -> None:
        if _setns(netns_fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        if _unshare(CLONE_NEWNS | CLONE_NEWUTS) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        if _mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "mount --make-rprivate /")
        for src, dst in binds:
            if _mount(src, dst, None, MS_BIND, None) != 0:
                raise OSError(ctypes.get_errno(), "mount --bind")
        if _sethostname(name, len(name)) != 0:
            raise OSError(ctypes.get_errno(), "sethostname")

    return enter


async def spawn(
    netns: str,
    argv: list[str],
    mounts: Mapping[str, Path],
    hostname: str,
    *,
    env: Mapping[str, str],
    stdin: int,
    stdout: int,
    stderr: int,
) -> asyncio.subprocess.Process:
    """Start ``argv`` (its first word a path, see :func:`which`) in kernel namespace
    ``netns`` with ``mounts`` (target -> source file) bind-mounted and ``hostname``;
    ``stdin``/``stdout``/``stderr`` as for :func:`asyncio.create_subprocess_exec`.
    Raises BackendError when the namespace is gone or the child could not enter it."""
    try:
        fd = os.open(netns_path(netns), os.O_RDONLY)
    except FileNotFoundError:
        raise BackendError(f"netns {netns}: does not exist") from None
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env),
            cwd="/",
            preexec_fn=_preexec(fd, mounts, hostname),
        )
    except subprocess.SubprocessError as e:  # preexec_fn failed in the child
        raise BackendError(f"netns {netns}: cannot enter the pod's sandbox: {e}") from e
    finally:
        os.close(fd)
