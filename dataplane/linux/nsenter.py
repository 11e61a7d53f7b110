"""Thread-level namespace switching: the fast path to the kernel.

``setns(2)`` with ``CLONE_NEWNET`` moves only the *calling thread* into another network
namespace, and every socket remembers the namespace it was created in. So the backend
never forks to work in a namespace: it enters it for a few microseconds on the current
thread, creates what it needs there (a netlink socket, a TCP/UDP/ICMP socket, a new
namespace, a ``/proc/sys/net`` file handle), and returns. Compared with pyroute2's
``IPRoute(netns=...)`` (which forks a helper per socket, ~10 ms) this costs ~0.5 ms.

Contract: every function restores the calling thread's original namespace before it
returns or raises; if restoring fails (it cannot in practice: we hold an fd to the
original) :class:`~netmodel.errors.BackendError` is raised and the thread must not be
reused.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from dataplane.linux.state import OWNERS_DIR
from netmodel.errors import BackendError

CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20
MNT_DETACH = 2
NETNS_DIR = "/var/run/netns"

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str, name: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what} ({name}): {os.strerror(err)}")


def netns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


@contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the ``with`` body with the current thread inside namespace ``name``."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            target = os.open(netns_path(name), os.O_RDONLY)
        except FileNotFoundError as e:
            raise BackendError(f"netns {name}: does not exist") from e
        try:
            _check(_libc.setns(target, CLONE_NEWNET), "setns", name)
        finally:
            os.close(target)
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:  # pragma: no cover - cannot happen
                raise BackendError(f"netns {name}: could not return to the original netns")
    finally:
        os.close(own)


def _share_run_dir() -> None:
    """Make ``/var/run/netns`` a shared mount point, as ``ip netns add`` does, so the
    namespace bind mounts propagate to mount namespaces created later (``ip netns exec``)."""
    os.makedirs(NETNS_DIR, exist_ok=True)
    if _libc.mount(b"", NETNS_DIR.encode(), b"none", MS_SHARED | MS_REC, None) == 0:
        return
    _check(
        _libc.mount(NETNS_DIR.encode(), NETNS_DIR.encode(), b"none", MS_BIND | MS_REC, None),
        "bind mount",
        NETNS_DIR,
    )
    _check(
        _libc.mount(b"", NETNS_DIR.encode(), b"none", MS_SHARED | MS_REC, None),
        "share mount",
        NETNS_DIR,
    )


_run_dir_ready = False


def create_netns(name: str) -> bool:
    """Create a named namespace (``ip netns add``) without forking: unshare on this
    thread, bind-mount the thread's namespace onto ``/var/run/netns/NAME``, return.
    Returns False (and changes nothing) if the name already exists."""
    global _run_dir_ready
    if not _run_dir_ready:
        _share_run_dir()
        _run_dir_ready = True
    path = netns_path(name)
    if os.path.exists(path):
        return False
    # Owner first: a concurrent lister must never see the name without its owner.
    _record_owner(name)
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    except FileExistsError:
        return False
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            _check(_libc.unshare(CLONE_NEWNET), "unshare", name)
            try:
                _check(
                    _libc.mount(b"/proc/thread-self/ns/net", path.encode(), b"none", MS_BIND, None),
                    "mount",
                    name,
                )
            finally:
                if _libc.setns(own, CLONE_NEWNET) != 0:  # pragma: no cover
                    raise BackendError(f"netns {name}: could not return to the original netns")
        except OSError:
            os.unlink(path)
            (OWNERS_DIR / name).unlink(missing_ok=True)
            raise
    finally:
        os.close(own)
    return True


# ---------------------------------------------------------------------- owners
# Several svclab processes (test sessions, a dev cluster, a lab) may share one machine.
# Each namespace records the process that created it, so a global cleanup or a leak check
# can leave alone the namespaces a *live* process is still using.


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def _record_owner(name: str) -> None:
    OWNERS_DIR.mkdir(parents=True, exist_ok=True)
    (OWNERS_DIR / name).write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")


def owner(name: str) -> int | None:
    """Pid of the live process that created namespace ``name``; None if that process is
    gone (or unknown: a namespace created by another tool)."""
    try:
        pid_text, start_text = (OWNERS_DIR / name).read_text().split()
        pid, start = int(pid_text), int(start_text)
    except (OSError, ValueError):
        return None
    return pid if _start_time(pid) == start else None


def held_elsewhere(name: str) -> bool:
    """Was ``name`` created by another process that is still alive?"""
    pid = owner(name)
    return pid is not None and pid != os.getpid()


def remove_netns(name: str) -> bool:
    """``ip netns del``: detach the mount and unlink the name; False if it did not exist.
    The kernel frees the namespace once no process and no socket uses it any more."""
    path = netns_path(name)
    _libc.umount2(path.encode(), MNT_DETACH)
    (OWNERS_DIR / name).unlink(missing_ok=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def inode(name: str) -> int | None:
    """The namespace's inode (what ``/proc/PID/ns/net`` links to), None if it is gone."""
    try:
        return os.stat(netns_path(name)).st_ino
    except OSError:
        return None


def socket_in(name: str | None, family: int, type: int, proto: int = 0) -> socket.socket:
    """A socket living in namespace ``name`` (None: the caller's)."""
    if name is None:
        return socket.socket(family, type, proto)
    with entered(name):
        return socket.socket(family, type, proto)


SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def loopback_up(name: str) -> None:
    """Bring ``lo`` up inside namespace ``name`` (the kernel then gives it 127.0.0.1/8),
    with one ``SIOCSIFFLAGS`` ioctl: what a container runtime does for a sandbox, and
    all the CNI ``loopback`` plugin does. Idempotent."""
    sock = socket_in(name, socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, req))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
    except OSError as e:
        raise BackendError(f"netns {name}: lo up: {e.strerror or e}") from e
    finally:
        sock.close()


def sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def write_sysctl(name: str, key: str, value: str) -> None:
    """Set ``key`` (dotted, e.g. ``net.ipv4.ip_forward``) inside namespace ``name``.
    ``/proc/sys/net`` resolves to the namespace of the thread that opens the file."""
    with entered(name):
        try:
            fd = os.open(sysctl_path(key), os.O_WRONLY)
        except FileNotFoundError as e:
            raise BackendError(f"netns {name}: no sysctl {key}") from e
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def read_sysctl(name: str, key: str) -> str | None:
    """The value of ``key`` inside namespace ``name``; None if the key does not exist
    there (e.g. ``net.bridge.*`` without br_netfilter)."""
    with entered(name):
        try:
            fd = os.open(sysctl_path(key), os.O_RDONLY)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            raise
    try:
        return os.read(fd, 4096).decode().strip()
    finally:
        os.close(fd)
