"""Network namespaces: create, remove, run a tool inside one. The kernel edge.

Every namespace svclab makes carries the prefix :data:`PREFIX` (``svclab-``), so that
:func:`cleanup` can find and remove whatever a crashed run left behind. Each also
records the process that created it (:func:`dataplane.linux.nsenter.owner`): several
svclab processes share a machine, and one's leak check or cleanup must not take the
namespaces of another that is still running.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pyroute2 import netns as _netns

from dataplane.linux import nsenter
from dataplane.linux.links import NsLink
from dataplane.linux.names import CLUSTER_ID_RE, PREFIX
from dataplane.linux.state import StateDir
from netmodel.errors import BackendError

NETNS_DIR = nsenter.NETNS_DIR
__all__ = ["NETNS_DIR", "PREFIX", "cleanup", "create", "list_ours", "remove", "run_in", "temporary"]


def unique_name(role: str = "t") -> str:
    """A fresh namespace name: ``svclab-<role>-<8 hex>``."""
    return f"{PREFIX}{role}-{secrets.token_hex(4)}"


def create(name: str) -> str:
    """Create the namespace (loopback up); idempotent. Returns its name."""
    if not name.startswith(PREFIX):
        raise BackendError(f"netns {name!r}: svclab only manages names starting with {PREFIX!r}")
    nsenter.create_netns(name)
    with NsLink(name) as link:
        link.set_up("lo")
    return name


def remove(name: str) -> None:
    """Remove the namespace if it exists (killing nothing: svclab runs no daemons in it
    except the ones it tracks itself)."""
    try:
        nsenter.remove_netns(name)
    except OSError as e:  # tolerate races with another cleanup
        if name in _netns.listnetns():
            raise BackendError(f"netns {name}: remove failed: {e}") from e


def held(name: str) -> bool:
    """Is namespace ``name`` someone else's to remove: created by another live process,
    or part of a cluster realised as persistent (a dev cluster)?"""
    if nsenter.held_elsewhere(name):
        return True
    cluster = name[len(PREFIX) :].split("-", 1)[0]
    return CLUSTER_ID_RE.match(cluster) is not None and (
        StateDir.of(cluster).persistent_marker.exists()
    )


def list_ours(*, include_held: bool = False) -> list[str]:
    """svclab's namespaces (prefix :data:`PREFIX`), except :func:`held` ones (another
    live process's, a persistent cluster's): those are not this process's to judge as
    leaks or to remove. ``include_held`` lists them too."""
    names = sorted(n for n in _netns.listnetns() if n.startswith(PREFIX))
    if include_held:
        return names
    return [n for n in names if not held(n)]


def cleanup() -> list[str]:
    """Remove every svclab namespace that is not :func:`held`; returns their names. For servers, state dirs and a forced
    removal see :func:`dataplane.linux.realize.cleanup`."""
    gone = list_ours()
    for n in gone:
        remove(n)
    return gone


def run_in(
    name: str | None,
    argv: Sequence[str],
    *,
    input: str | bytes | None = None,
    check: bool = True,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run a tool (``iptables-restore``, ``nft``, ...) inside namespace ``name``
    (``None``: the current one). Raises BackendError naming the tool on failure."""
    cmd = list(argv) if name is None else ["ip", "netns", "exec", name, *argv]
    data = input.decode() if isinstance(input, bytes) else input
    proc = subprocess.run(
        cmd, input=data, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        first = msg[0] if msg else f"exit code {proc.returncode}"
        raise BackendError(f"{' '.join(argv[:2])} in netns {name}: {first}")
    return proc


@contextmanager
def temporary(role: str = "t") -> Iterator[str]:
    """A fresh namespace removed on exit, also on error or KeyboardInterrupt."""
    name = unique_name(role)
    try:
        create(name)
        yield name
    finally:
        remove(name)


def is_root() -> bool:
    return os.geteuid() == 0
