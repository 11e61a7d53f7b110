"""Versioned object stores behind one protocol (:class:`Store`), and :func:`open_store`.

Backends: ``memory`` (:class:`MemoryStore`), ``sqlite`` (:class:`SqliteStore`), ``etcd``
(:class:`control.store.etcd.EtcdStore`, ``etcd://HOST:PORT[,HOST:PORT...]``; imported
when first opened). Another backend plugs in with :func:`register_backend` and is then
reachable through ``open_store("SCHEME://...")`` and the shared contract tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from control.store.base import BatchConflictError, Store, WatchEvent, batched
from control.store.memory import MemoryStore
from control.store.sqlite import SqliteStore
from netmodel.errors import InputError

STATE_FILE = "state.db"

#: scheme -> factory(rest of the URL after ``scheme://``)
_BACKENDS: dict[str, Callable[[str], Store]] = {}


def register_backend(scheme: str, factory: Callable[[str], Store]) -> None:
    """Make ``open_store("SCHEME://REST")`` call ``factory(REST)``."""
    _BACKENDS[scheme] = factory


def _sqlite(rest: str) -> Store:
    return SqliteStore(_state_file(Path(rest)))


def _state_file(path: Path) -> Path:
    """A directory (existing, or named without a suffix) holds ``state.db``."""
    if path.is_dir() or (not path.exists() and not path.suffix):
        return path / STATE_FILE
    return path


def _etcd(rest: str) -> Store:
    from control.store.etcd import EtcdStore

    return EtcdStore(rest)


register_backend("memory", lambda _rest: MemoryStore())
register_backend("sqlite", _sqlite)
register_backend("etcd", _etcd)


def open_store(url_or_path: str | Path) -> Store:
    """Open a store.

    * ``memory`` or ``memory://``: a fresh in-process store.
    * ``sqlite:///abs/path`` or ``sqlite://rel/path``: SQLite; a directory means
      ``DIR/state.db``.
    * ``etcd://HOST:PORT[,HOST:PORT...]``: etcd (every member given, with failover).
    * ``SCHEME://...`` for any scheme given to :func:`register_backend`.
    * anything else is a path, as for ``sqlite://``.

    Raises :class:`InputError` for an unknown scheme.
    """
    text = str(url_or_path)
    if text == "memory":
        return MemoryStore()
    scheme, sep, rest = text.partition("://")
    if not sep:
        return _sqlite(text)
    factory = _BACKENDS.get(scheme)
    if factory is None:
        known = ", ".join(sorted(_BACKENDS))
        raise InputError(f"unknown store backend {scheme!r} (known: {known})", field="store")
    return factory(rest)


__all__ = [
    "STATE_FILE",
    "BatchConflictError",
    "MemoryStore",
    "SqliteStore",
    "Store",
    "WatchEvent",
    "batched",
    "open_store",
    "register_backend",
]
