"""The store backends the contract suite runs against.

A factory gets a per-test temporary directory and the pytest request, and returns
``(open, reopen)``: ``open()`` makes the store under test (empty); ``reopen()`` opens the
same data again after the first was closed, or is None for a backend whose data does
not outlive the process (memory). etcd runs as a real process (the session's
``etcd_member`` fixture), emptied before each test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from control.store import MemoryStore, SqliteStore, Store, open_store

Opener = Callable[[], Store]
Factory = Callable[[Path, pytest.FixtureRequest], tuple[Opener, Opener | None]]


def _memory(_tmp: Path, _request: pytest.FixtureRequest) -> tuple[Opener, Opener | None]:
    return MemoryStore, None


def _sqlite(tmp: Path, _request: pytest.FixtureRequest) -> tuple[Opener, Opener | None]:
    path = tmp / "state.db"
    return (lambda: SqliteStore(path)), (lambda: SqliteStore(path))


def _etcd(_tmp: Path, request: pytest.FixtureRequest) -> tuple[Opener, Opener | None]:
    cluster = request.getfixturevalue("etcd_member")

    def fresh() -> Store:
        cluster.wipe()
        return open_store(cluster.url)

    return fresh, (lambda: open_store(cluster.url))


#: the backends whose data outlives the store object (``reopen`` is not None)
PERSISTENT = ("etcd", "sqlite")

FACTORIES: dict[str, Factory] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "etcd": _etcd,
}
