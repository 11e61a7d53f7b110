"""Who serves a state directory: ``svclab serve`` holds ``DIR/serve.lock``.

While a server runs on a state directory its live components (:mod:`control.live`)
converge the cluster. CLI commands on the same directory then read and write the
SQLite store directly (it is safe for concurrent processes: see
:mod:`control.store.sqlite`) but never run controllers, the scheduler or kubelets of
their own: two control planes would fight over the same objects (two kubelets
allocating addresses on one node). :func:`is_served` is how they tell.

The lock is an advisory ``flock`` held for the server's lifetime: it disappears with
the process, however it ends, so a crashed server never leaves the directory "served".
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from netmodel.errors import SvclabError

LOCK_FILE = "serve.lock"


class AlreadyServedError(SvclabError):
    """Another server already serves this state directory."""


@contextmanager
def serving(state_dir: str | Path) -> Iterator[None]:
    """Hold ``DIR/serve.lock`` (exclusive) for the block; AlreadyServedError if held."""
    path = Path(state_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadyServedError(
                f"{state_dir}: already served by another 'svclab serve'"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def is_served(state_dir: str | Path) -> bool:
    """Whether a live process holds ``DIR/serve.lock``."""
    path = Path(state_dir) / LOCK_FILE
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


__all__ = ["LOCK_FILE", "AlreadyServedError", "is_served", "serving"]
