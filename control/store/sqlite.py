"""SQLite backend: the store a persistent cluster (``--state DIR``) lives in.

Keeps the consistency contract of :mod:`control.store.base` and survives process
restarts. Layout (one file, WAL mode)::

    objects(kind, key, data)          current state, data = the object's JSON (to_dict form)
    log(rev, type, kind, key, data)   one row per write, for watch; compaction deletes rows
    meta(name, value)                 'revision', 'compacted'

Speed (the CLI loads tens of thousands of pods):

* Reads are served from an in-memory cache of typed objects, loaded per kind on first
  use (one query, ``model_validate_json`` per row). Writes keep it current.
* Watch is served from an in-memory log of the writes made since the store was opened;
  only revisions older than that are read back from the ``log`` table.
* Writes run inside one open SQLite transaction that is committed every
  :attr:`SqliteStore.COMMIT_EVERY` writes, at the end of an outermost
  :meth:`transaction`, on :meth:`flush` and on :meth:`close`. A process that dies
  without closing loses at most the writes since the last commit; the file is always a
  consistent revision.

Several processes may share one file (``svclab serve`` and CLI commands on the same
state directory):

* A write takes SQLite's write lock first (``BEGIN IMMEDIATE``, waiting up to
  :attr:`SqliteStore.BUSY_TIMEOUT` seconds for another writer's commit), then catches
  up with what other processes committed, then checks its compare-and-swap
  (``expected_version``) against that. Revisions stay unique and gap-free across
  processes, and no update is lost.
* A read outside this process's own open transaction first asks SQLite whether another
  connection committed since (``PRAGMA data_version``, a cheap check) and, if so, reads
  the new ``log`` rows into the cache and the watch log (or drops the cache when the
  other process compacted past them). So a reader sees a committed revision and, through
  ``watch``, every write of every process.
* Checkpoints (copying the WAL back into the database file, with its fsyncs) happen in
  the committing thread when the WAL passes SQLite's default 1,000 pages, unless the
  owner takes them over (:meth:`defer_checkpoints`): then :meth:`checkpoint`, on a
  connection of its own, may run in another thread while this one keeps writing (a
  passive checkpoint never blocks a writer). ``svclab serve`` does so, so that a
  checkpoint never stalls its event loop.
* The page cache is SQLite's default (2 MiB) for a short-lived process: a CLI question
  reads each page about once, and a larger cache only holds what it read (64 MB more
  peak memory for one trace on a 1,000-node state). A long-running server asks for
  :attr:`SqliteStore.SERVER_CACHE_KIB` (:meth:`use_server_cache`): the default is
  smaller than what one flush of a busy server dirties (pages spilled and read back).
  So does a bulk writer, once :attr:`SqliteStore.BULK_WRITES` writes wait for one
  commit (``svclab apply -f`` of 10,000 objects dirties tens of MB in one transaction;
  with 2 MiB its inserts spill pages to the WAL and read them back, about half their
  time).
* A process sees another's writes once they are committed: a writer that batches (see
  above) should :meth:`flush` when it goes idle; the deterministic runner does at the
  end of each ``run_until_idle``. Readers never block writers (WAL).
"""

from __future__ import annotations

import bisect
import builtins
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from control.store.base import EventType, WatchEvent, bulk, iter_matching, stamped
from netmodel.errors import CompactedError, ConflictError, NotFoundError
from netmodel.kinds import KINDS
from netmodel.objects import KubeObject
from netmodel.selectors import LabelSelector

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    kind TEXT NOT NULL,
    key  TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log (
    rev  INTEGER PRIMARY KEY,
    type TEXT NOT NULL,
    kind TEXT NOT NULL,
    key  TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


def _dump(obj: KubeObject) -> str:
    """The object's JSON: the same fields :meth:`KubeObject.to_dict` emits."""
    return obj.model_dump_json(by_alias=True, exclude_unset=True, exclude_none=True)


def _load(kind: str, data: str) -> KubeObject:
    cls = KINDS.get(kind)
    if cls is None:
        raise KeyError(f"unknown kind {kind!r} in store")
    return cls.model_validate_json(data)


# undo record: (kind, key, object before the write or None if it did not exist)
_Undo = tuple[str, str, KubeObject | None]


class SqliteStore:
    """A :class:`~control.store.base.Store` in one SQLite file. See the module docstring."""

    TXN_REVISIONS = "consecutive"

    COMMIT_EVERY = 5000
    BUSY_TIMEOUT = 30.0
    #: the page cache :meth:`use_server_cache` asks for (a long-running server's, or a
    #: bulk writer's: one that has :attr:`BULK_WRITES` writes not committed yet)
    SERVER_CACHE_KIB = 64 * 1024
    BULK_WRITES = 1000
    WAL_LIMIT = 64 << 20

    def __init__(self, path: str | Path, *, commit_every: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if commit_every is not None:
            self.COMMIT_EVERY = max(1, commit_every)
        self._db: sqlite3.Connection | None = sqlite3.connect(
            str(self.path),
            isolation_level=None,
            check_same_thread=False,
            timeout=self.BUSY_TIMEOUT,
        )
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA temp_store=MEMORY")
        self._deferred_checkpoints = False
        self._server_cache = False
        self._ckpt_db: sqlite3.Connection | None = None
        self._ckpt_lock = threading.Lock()
        db.executescript(_SCHEMA)
        meta = dict(db.execute("SELECT name, value FROM meta").fetchall())
        self._revision: int = int(meta.get("revision", 0))
        self._compacted: int = int(meta.get("compacted", 0))
        self._store_id = int(meta["store_id"]) if "store_id" in meta else self._new_id()
        self._opened_at = self._revision
        self._cache: dict[str, dict[str, KubeObject]] = {}
        self._keys: dict[str, builtins.list[str]] = {}  # sorted keys per kind, lazily
        self._log: builtins.list[WatchEvent] = []
        self._log_revs: builtins.list[int] = []
        self._in_sql_txn = False
        self._pending = 0
        self._depth = 0
        self._undo: builtins.list[_Undo] = []
        # kind -> (the object the latest write of that kind returned, its JSON): see encoded
        self._written: dict[str, tuple[KubeObject, str]] = {}
        # (kind, key) -> the state before this process's first write to it since
        # track_first_states() (None: absent); None: not tracking, or another process
        # wrote meanwhile (see first_states)
        self._first: dict[tuple[str, str], KubeObject | None] | None = None
        self._data_version = self._read_data_version()

    # ------------------------------------------------------------------ plumbing

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"store {self.path} is closed")
        return self._db

    def _bucket(self, kind: str) -> dict[str, KubeObject]:
        bucket = self._cache.get(kind)
        if bucket is None:
            rows = self._conn.execute(
                "SELECT key, data FROM objects WHERE kind = ? ORDER BY key", (kind,)
            ).fetchall()
            with bulk():
                bucket = {key: _load(kind, data) for key, data in rows}
            self._cache[kind] = bucket
        return bucket

    def _new_id(self) -> int | None:
        """This file's identity (:meth:`state_token`): a random number recorded once,
        when the file is made or first opened by code that knows it (the first
        process to record it wins; the others read it). None when it cannot be
        recorded now (the file is read-only, another writer holds the lock past the
        busy timeout): then this store names no state token."""
        db = self._conn
        try:
            db.execute("INSERT OR IGNORE INTO meta(name, value) VALUES ('store_id', abs(random()))")
        except sqlite3.OperationalError:
            return None
        row = db.execute("SELECT value FROM meta WHERE name = 'store_id'").fetchone()
        return None if row is None else int(row[0])

    def _read_data_version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _refresh(self, *, force: bool = False) -> None:
        """Catch up with what other processes committed (see the module docstring).
        A no-op inside this process's own transaction: it holds the write lock.
        ``force``: read the committed revision even if data_version did not move."""
        if self._in_sql_txn:
            return
        version = self._read_data_version()
        if version == self._data_version and not force:
            return
        self._data_version = version
        db = self._conn
        meta = dict(db.execute("SELECT name, value FROM meta").fetchall())
        rev, compacted = int(meta.get("revision", 0)), int(meta.get("compacted", 0))
        if rev > self._revision:
            self._first = None  # another process wrote: the states it overwrote are unknown
            rows = db.execute(
                "SELECT rev, type, kind, key, data FROM log WHERE rev > ? AND rev <= ? ORDER BY rev",
                (self._revision, rev),
            ).fetchall()
            if len(rows) != rev - self._revision:  # compacted past us: start over
                self._cache.clear()
                self._keys.clear()
                self._log.clear()
                self._log_revs.clear()
                self._opened_at = rev
            else:
                with bulk():
                    for r, type_, kind, key, data in rows:
                        obj = _load(kind, data)
                        bucket = self._cache.get(kind)
                        if bucket is not None:
                            if type_ == "DELETED":
                                bucket.pop(key, None)
                            else:
                                bucket[key] = obj
                            self._keys.pop(kind, None)
                        self._log.append(WatchEvent(type_, obj, r))
                        self._log_revs.append(r)
            self._revision = rev
        if compacted > self._compacted:
            cut = bisect.bisect_right(self._log_revs, compacted)
            del self._log[:cut]
            del self._log_revs[:cut]
            self._compacted = compacted

    def _begin(self) -> None:
        if not self._in_sql_txn:
            self._conn.execute("BEGIN IMMEDIATE")  # the write lock, before reading state
            self._refresh(force=True)
            self._in_sql_txn = True

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the write lock around one write's checks and changes; a write refused
        outside any batch releases the lock at once."""
        self._begin()
        try:
            yield
        finally:
            if self._depth == 0 and self._pending == 0:
                self._commit()  # nothing written (refused, or a no-op): unlock

    def _held(self) -> bool:
        """Whether the write lock is held and stays held whatever the next write does
        (inside a :meth:`transaction`, or with batched writes not committed yet): then
        :meth:`_writing` would neither take nor release anything, and a write goes
        without it (its generator is a tenth of a small write's cost)."""
        return self._in_sql_txn and (self._depth > 0 or self._pending > 0)

    def _commit(self) -> None:
        if self._in_sql_txn:
            db = self._conn
            db.executemany(
                "INSERT INTO meta(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                [("revision", self._revision), ("compacted", self._compacted)],
            )
            db.execute("COMMIT")
            self._in_sql_txn = False
            self._pending = 0
            # (our own commit leaves our data_version as it was: it counts others' commits)

    def _wrote(self) -> None:
        self._pending += 1
        if self._pending == self.BULK_WRITES and not self._server_cache:
            self.use_server_cache()  # a bulk writer: see the module docstring
        if self._depth == 0 and self._pending >= self.COMMIT_EVERY:
            self._commit()

    def _append(self, type_: EventType, obj: KubeObject, data: str) -> None:
        self._conn.execute(
            "INSERT INTO log(rev, type, kind, key, data) VALUES (?, ?, ?, ?, ?)",
            (self._revision, type_, obj.store_kind, obj.key, data),
        )
        self._log.append(WatchEvent(type_, obj, self._revision))
        self._log_revs.append(self._revision)

    def _remember(self, kind: str, key: str, before: KubeObject | None) -> None:
        if self._depth:
            self._undo.append((kind, key, before))

    def _check_version(
        self, kind: str, key: str, current: KubeObject, expected: int | None
    ) -> None:
        if expected is not None and current.resource_version != expected:
            raise ConflictError(
                f"{kind} {key!r}: resourceVersion {expected} is stale "
                f"(stored: {current.resource_version})"
            )

    # ------------------------------------------------------------------ reads

    @property
    def revision(self) -> int:
        self._refresh()
        return self._revision

    @property
    def compacted_revision(self) -> int:
        self._refresh()
        return self._compacted

    def get(self, kind: str, key: str) -> KubeObject:
        self._refresh()
        try:
            return self._bucket(kind)[key]
        except KeyError:
            raise NotFoundError(f"{kind} {key!r} not found") from None

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        selector: LabelSelector | None = None,
    ) -> builtins.list[KubeObject]:
        self._refresh()
        bucket = self._bucket(kind)
        keys = self._keys.get(kind)
        if keys is None:
            keys = self._keys[kind] = sorted(bucket)
        if namespace is None and selector is None:
            return [bucket[k] for k in keys]
        return iter_matching((bucket[k] for k in keys), namespace, selector)

    def scan(self, kind: str, paths: Sequence[Sequence[str]]) -> builtins.list[tuple[Any, ...]]:
        """:func:`control.store.base.scan`: the values read by SQLite from the stored
        JSON, no object built (this connection sees its own writes: the same state as
        the cache)."""
        self._refresh()
        if not paths:
            rows = self._conn.execute(
                "SELECT key FROM objects WHERE kind = ? ORDER BY key", (kind,)
            ).fetchall()
            return rows
        cols = ", ".join("json_extract(data, ?)" for _ in paths)
        args = ["$" + "".join('."' + k.replace('"', '""') + '"' for k in p) for p in paths]
        return self._conn.execute(
            f"SELECT key, {cols} FROM objects WHERE kind = ? ORDER BY key", (*args, kind)
        ).fetchall()

    def labelled(
        self, kind: str, namespace: str, labels: dict[str, str]
    ) -> builtins.list[KubeObject]:
        """:func:`control.store.base.labelled`: when ``kind`` is not loaded yet, one
        query over the stored labels (``metadata.labels``) and the key's namespace part,
        decoding only the rows that match (not cached: a later :meth:`get` or
        :meth:`list` loads the kind as before); else from the loaded kind."""
        self._refresh()
        cls = KINDS.get(kind)
        if kind in self._cache or cls is None or not cls.NAMESPACED:
            return self.list(kind, namespace, LabelSelector(match_labels=dict(labels)))
        prefix = namespace + "/"
        where = ["kind = ?", "substr(key, 1, ?) = ?"]
        args: list[object] = [kind, len(prefix), prefix]
        for k, v in sorted(labels.items()):
            where.append("json_extract(data, ?) = ?")
            args += ['$.metadata.labels."' + k.replace('"', '""') + '"', v]
        rows = self._conn.execute(
            f"SELECT data FROM objects WHERE {' AND '.join(where)} ORDER BY key", args
        ).fetchall()
        with bulk():
            return [_load(kind, data) for (data,) in rows]

    def state_token(self) -> str | None:
        """:func:`control.store.base.state_token`: this file's identity and the
        committed revision (None inside this process's own open transaction: the
        revision then names writes not committed yet)."""
        self._refresh()
        if self._in_sql_txn or self._store_id is None:
            return None
        return f"sqlite:{self._store_id}:{self._revision}"

    def encoded(self, obj: KubeObject) -> str | None:
        """The JSON this store wrote for ``obj`` if ``obj`` is the very (immutable) object
        the latest create or update of its kind returned; else None. See
        :func:`control.store.base.encoded`."""
        hit = self._written.get(obj.store_kind)
        return hit[1] if hit is not None and hit[0] is obj else None

    def peek(self, kind: str, key: str) -> KubeObject:
        """:meth:`get`, reading only that row when ``kind`` is not loaded yet (not
        cached: a later :meth:`get` loads the kind as before)."""
        self._refresh()
        bucket = self._cache.get(kind)
        if bucket is not None:
            return self.get(kind, key)
        row = self._conn.execute(
            "SELECT data FROM objects WHERE kind = ? AND key = ?", (kind, key)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"{kind} {key!r} not found")
        return _load(kind, row[0])

    def track_first_states(self) -> int:
        """Start recording, for every object this store writes from now on, its state
        before the first such write; returns the revision the record starts at. See
        :func:`control.store.base.first_states`."""
        self._refresh()
        self._first = {}
        return self._revision

    def first_states(self) -> dict[tuple[str, str], KubeObject | None] | None:
        """What :meth:`track_first_states` recorded so far: ``(kind, key)`` -> the
        object as it was at the start revision (None: it did not exist), for every
        object written since; None when not tracking or when another process wrote
        to the file since (its writes' earlier states are not known here)."""
        self._refresh()
        return None if self._first is None else dict(self._first)

    def watch(self, since: int, kinds: Collection[str] | None = None) -> builtins.list[WatchEvent]:
        self._refresh()
        if since < self._compacted:
            raise CompactedError(
                f"revision {since} has been compacted (oldest kept: {self._compacted})"
            )
        ks = set(kinds) if kinds is not None else None
        events: builtins.list[WatchEvent] = []
        if since < self._opened_at:
            rows = self._conn.execute(
                "SELECT rev, type, kind, data FROM log WHERE rev > ? AND rev <= ? ORDER BY rev",
                (since, self._opened_at),
            ).fetchall()
            with bulk():
                for rev, type_, kind, data in rows:
                    if ks is None or kind in ks:
                        events.append(WatchEvent(type_, _load(kind, data), rev))
        start = bisect.bisect_right(self._log_revs, since)
        tail = self._log[start:]
        if ks is not None:
            tail = [e for e in tail if e.object.store_kind in ks]
        events.extend(tail)
        return events

    # ------------------------------------------------------------------ writes

    def create(self, obj: KubeObject) -> KubeObject:
        if self._held():
            return self._create(obj)
        with self._writing():
            return self._create(obj)

    def _current(self, kind: str, key: str) -> KubeObject | None:
        """The stored ``kind``/``key`` a write checks against: from the cache when the
        kind is loaded, else that one row (a write never loads a whole kind: recording
        one Event must not decode every Event stored)."""
        bucket = self._cache.get(kind)
        if bucket is not None:
            return bucket.get(key)
        row = self._conn.execute(
            "SELECT data FROM objects WHERE kind = ? AND key = ?", (kind, key)
        ).fetchone()
        return None if row is None else _load(kind, row[0])

    def _track(self, kind: str, key: str, before: KubeObject | None) -> None:
        first = self._first
        if first is not None and (kind, key) not in first:
            first[(kind, key)] = before

    def _create(self, obj: KubeObject) -> KubeObject:
        key = obj.key
        kind = obj.store_kind
        bucket = self._cache.get(kind)
        if bucket is not None and key in bucket:
            raise ConflictError(f"{obj.kind} {key!r} already exists")
        stored = stamped(obj, self._revision + 1)
        data = _dump(stored)
        try:
            # a kind not loaded (Events, as a rule) is not looked up first: the primary
            # key refuses a second row, and a refused INSERT changes nothing
            self._conn.execute(
                "INSERT INTO objects(kind, key, data) VALUES (?, ?, ?)", (kind, key, data)
            )
        except sqlite3.IntegrityError as e:
            if "UNIQUE" not in str(e):
                raise
            raise ConflictError(f"{obj.kind} {key!r} already exists") from None
        self._track(kind, key, None)
        self._revision += 1
        self._append("ADDED", stored, data)
        self._written[obj.store_kind] = (stored, data)
        if bucket is not None:
            bucket[key] = stored
        self._keys.pop(obj.store_kind, None)
        self._remember(obj.store_kind, key, None)
        self._wrote()
        return stored

    def update(self, obj: KubeObject, expected_version: int | None = None) -> KubeObject:
        if self._held():
            return self._update(obj, expected_version)
        with self._writing():
            return self._update(obj, expected_version)

    def _update(self, obj: KubeObject, expected_version: int | None) -> KubeObject:
        key = obj.key
        current = self._current(obj.store_kind, key)
        if current is None:
            raise NotFoundError(f"{obj.kind} {key!r} not found")
        self._check_version(obj.store_kind, key, current, expected_version)
        self._track(obj.store_kind, key, current)
        self._revision += 1
        stored = stamped(obj, self._revision)
        data = _dump(stored)
        self._conn.execute(
            "UPDATE objects SET data = ? WHERE kind = ? AND key = ?", (data, obj.store_kind, key)
        )
        self._append("MODIFIED", stored, data)
        self._written[obj.store_kind] = (stored, data)
        bucket = self._cache.get(obj.store_kind)
        if bucket is not None:
            bucket[key] = stored
        self._remember(obj.store_kind, key, current)
        self._wrote()
        return stored

    def delete(self, kind: str, key: str, expected_version: int | None = None) -> KubeObject:
        if self._held():
            return self._delete(kind, key, expected_version)
        with self._writing():
            return self._delete(kind, key, expected_version)

    def _delete(self, kind: str, key: str, expected_version: int | None) -> KubeObject:
        current = self._current(kind, key)
        if current is None:
            raise NotFoundError(f"{kind} {key!r} not found")
        self._check_version(kind, key, current, expected_version)
        self._track(kind, key, current)
        self._revision += 1
        self._conn.execute("DELETE FROM objects WHERE kind = ? AND key = ?", (kind, key))
        self._append("DELETED", current, _dump(current))
        bucket = self._cache.get(kind)
        if bucket is not None:
            del bucket[key]
        self._keys.pop(kind, None)
        self._remember(kind, key, current)
        self._wrote()
        return current

    def compact(self, revision: int) -> None:
        with self._writing():
            self._compact(revision)

    def _compact(self, revision: int) -> None:
        revision = min(revision, self._revision)
        if revision <= self._compacted:
            return
        self._conn.execute("DELETE FROM log WHERE rev <= ?", (revision,))
        cut = bisect.bisect_right(self._log_revs, revision)
        del self._log[:cut]
        del self._log_revs[:cut]
        self._compacted = revision
        self._wrote()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All-or-nothing (SAVEPOINT / ROLLBACK TO); nests. On error the rows, the cache,
        the watch log and the revision are restored and the error propagates."""
        self._begin()
        name = f"svclab_{self._depth}"
        self._conn.execute(f"SAVEPOINT {name}")
        undo_mark, log_mark = len(self._undo), len(self._log)
        rev, compacted = self._revision, self._compacted
        self._depth += 1
        try:
            yield
        except BaseException:
            self._conn.execute(f"ROLLBACK TO {name}")
            self._conn.execute(f"RELEASE {name}")
            self._restore(undo_mark, log_mark, rev, compacted)
            raise
        else:
            self._conn.execute(f"RELEASE {name}")
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._undo.clear()
                # committed or rolled back, the outermost transaction ends the SQL one:
                # a rolled-back transaction must not keep the write lock (and writes
                # made before it stay committed, as they were already done)
                self._commit()

    def _restore(self, undo_mark: int, log_mark: int, rev: int, compacted: int) -> None:
        for kind, key, before in reversed(self._undo[undo_mark:]):
            bucket = self._cache.get(kind)
            if bucket is None:
                continue  # not loaded: the rows rolled back are what a load reads
            if before is None:
                bucket.pop(key, None)
            else:
                bucket[key] = before
            self._keys.pop(kind, None)
        del self._undo[undo_mark:]
        if compacted != self._compacted:
            # the compacted part of the in-memory log cannot be restored: re-read it
            self._compacted = compacted
            self._log.clear()
            self._log_revs.clear()
            self._opened_at = rev
        else:
            del self._log[log_mark:]
            del self._log_revs[log_mark:]
        self._revision = rev

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Writes in the block are applied at once, as outside it (the store contract's
        ``batch``: nothing to group here)."""
        yield

    def flush(self) -> None:
        """Commit what is written so far (no-op inside a transaction)."""
        if self._depth == 0:
            self._commit()

    def use_server_cache(self) -> None:
        """Grow the page cache to :attr:`SERVER_CACHE_KIB` (for a long-running server
        under write load; see the module docstring). Idempotent."""
        if not self._server_cache:
            self._conn.execute(f"PRAGMA cache_size=-{self.SERVER_CACHE_KIB}")
            self._server_cache = True

    def defer_checkpoints(self) -> None:
        """From now on this store's writes never checkpoint the WAL: the caller runs
        :meth:`checkpoint` often enough (the WAL grows until it does). Idempotent."""
        if not self._deferred_checkpoints:
            self._conn.execute("PRAGMA wal_autocheckpoint=0")
            # a restarted WAL is written over from its start; past this size the file
            # is truncated then (it would otherwise keep its largest size)
            self._conn.execute(f"PRAGMA journal_size_limit={self.WAL_LIMIT}")
            self._deferred_checkpoints = True

    def checkpoint(self) -> tuple[int, int]:
        """A passive WAL checkpoint on a connection of its own: it copies what is
        committed back into the database file without waiting for, or blocking, the
        writer, so it may run in another thread than the one that writes. The next
        write transaction after a complete one restarts the WAL. Returns the WAL's
        frames and how many of them are in the database file now ((0, 0) once closed)."""
        with self._ckpt_lock:
            if self._db is None:
                return 0, 0
            if self._ckpt_db is None:
                self._ckpt_db = sqlite3.connect(
                    str(self.path), isolation_level=None, check_same_thread=False
                )
            _, log, done = self._ckpt_db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            return int(log), int(done)

    def close(self) -> None:
        """Commit and close; idempotent. (Call it once no :meth:`checkpoint` runs.)"""
        if self._db is None:
            return
        if self._depth == 0:
            self._commit()
        with self._ckpt_lock:  # a checkpoint running in another thread ends first
            if self._ckpt_db is not None:
                self._ckpt_db.close()
                self._ckpt_db = None
            self._db.close()
            self._db = None

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
