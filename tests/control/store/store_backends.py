"""The store backends the contract suite runs against.

Hook for new backends (etcd): add a factory to :data:`FACTORIES`. A factory gets a
per-test temporary directory and returns ``(open, reopen)``: ``open()`` makes the store
under test; ``reopen()`` opens the same data again after the first was closed, or is
None for a backend whose data does not outlive the process (memory). A factory that
cannot run here (no etcd binary) calls ``pytest.skip``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from control.store import MemoryStore, SqliteStore, Store

Opener = Callable[[], Store]
Factory = Callable[[Path], tuple[Opener, Opener | None]]


def _memory(_tmp: Path) -> tuple[Opener, Opener | None]:
    return MemoryStore, None


def _sqlite(tmp: Path) -> tuple[Opener, Opener | None]:
    path = tmp / "state.db"
    return (lambda: SqliteStore(path)), (lambda: SqliteStore(path))


FACTORIES: dict[str, Factory] = {
    "memory": _memory,
    "sqlite": _sqlite,
}
