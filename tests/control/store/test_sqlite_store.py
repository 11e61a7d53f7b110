"""What only the SQLite backend promises: commit points, a consistent file, the JSON form,
and open_store's URL forms."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from control.store import MemoryStore, SqliteStore, open_store, register_backend
from netmodel.errors import InputError
from netmodel.objects import ObjectMeta, Pod, Service, ServicePort, ServiceSpec


def pod(name: str) -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace="default", labels={"app": "web"}))


def committed_revision(path: Path) -> int:
    """What another process would see."""
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT value FROM meta WHERE name = 'revision'").fetchone()
        return int(row[0]) if row else 0
    finally:
        db.close()


def test_file_holds_a_consistent_revision_between_commits(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    s = SqliteStore(path)
    s.COMMIT_EVERY = 3
    s.create(pod("a"))
    s.create(pod("b"))
    assert committed_revision(path) == 0  # not yet committed: another reader sees nothing
    s.create(pod("c"))
    assert committed_revision(path) == 3  # every COMMIT_EVERY writes
    s.create(pod("d"))
    s.flush()
    assert committed_revision(path) == 4
    s.create(pod("e"))
    other = SqliteStore(path)  # a second opener sees the last committed revision only
    assert other.revision == 4
    assert [p.name for p in other.list("Pod")] == ["a", "b", "c", "d"]
    other.close()
    s.close()
    assert committed_revision(path) == 5


def test_outermost_transaction_commits(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    s = SqliteStore(path)
    with s.transaction():
        s.create(pod("a"))
        with s.transaction():
            s.create(pod("b"))
        assert committed_revision(path) == 0
    assert committed_revision(path) == 2
    s.close()


def test_rows_hold_the_to_dict_json(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    svc = Service(
        metadata=ObjectMeta(name="web", namespace="default"),
        spec=ServiceSpec(ports=[ServicePort(port=80, target_port="http")]),
    )
    with SqliteStore(path) as s:
        stored = s.create(svc)
    db = sqlite3.connect(path)
    (data,) = db.execute("SELECT data FROM objects WHERE kind='Service'").fetchone()
    db.close()
    assert json.loads(data) == stored.to_dict()
    with SqliteStore(path) as s2:
        again = s2.get("Service", "default/web")
        assert again == stored
        assert again.to_dict() == stored.to_dict()  # only the given fields, after reload


def test_closed_store_refuses_use(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "state.db")
    s.close()
    s.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        s.get("Pod", "default/a")


def test_open_store_forms(tmp_path: Path) -> None:
    assert isinstance(open_store("memory"), MemoryStore)
    assert isinstance(open_store("memory://"), MemoryStore)
    a = open_store(tmp_path / "dir")  # a new directory -> DIR/state.db
    assert isinstance(a, SqliteStore) and a.path == tmp_path / "dir" / "state.db"
    a.close()
    b = open_store(f"sqlite://{tmp_path}/x.db")
    assert isinstance(b, SqliteStore) and b.path == tmp_path / "x.db"
    b.close()
    with pytest.raises(InputError, match="unknown store backend 'nosuch'"):
        open_store("nosuch://127.0.0.1:2379")


def test_register_backend_hook() -> None:
    made: list[str] = []

    def factory(rest: str) -> MemoryStore:
        made.append(rest)
        return MemoryStore()

    register_backend("test-backend", factory)
    assert isinstance(open_store("test-backend://host:1/x"), MemoryStore)
    assert made == ["host:1/x"]


def test_rolled_back_transaction_releases_the_write_lock(tmp_path: Path) -> None:
    """A failed outermost transaction ends the SQL transaction too: another writer can
    write at once, and a write made before the transaction stays committed."""
    path = tmp_path / "state.db"
    s = SqliteStore(path)
    s.create(pod("before"))
    with pytest.raises(RuntimeError), s.transaction():
        s.create(pod("undone"))
        raise RuntimeError("refused")
    assert committed_revision(path) == 1
    db = sqlite3.connect(path, timeout=0)  # no waiting: the lock must be free now
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
    finally:
        db.close()
    assert [p.name for p in s.list("Pod")] == ["before"]
    s.close()


def test_writes_to_a_kind_not_loaded_decode_only_their_row(tmp_path: Path) -> None:
    """A write to a kind this process has not read checks and changes that one row (the
    kind stays unloaded), with the same answers as a loaded kind: conflicts, stale
    versions, missing keys, rollbacks, and what a later read and watch see."""
    from netmodel.errors import ConflictError, NotFoundError

    path = tmp_path / "state.db"
    s = SqliteStore(path)
    for n in "abc":
        s.create(pod(n))
    s.close()
    s = SqliteStore(path)
    with pytest.raises(ConflictError, match="Pod 'default/a' already exists"):
        s.create(pod("a"))
    assert s.revision == 3 and s.watch(3) == []  # the refused create left no trace
    stored = s.update(pod("b").with_meta(labels={"app": "db"}), expected_version=2)
    with pytest.raises(ConflictError):
        s.update(pod("b"), expected_version=2)
    with pytest.raises(NotFoundError):
        s.update(pod("zz"))
    gone = s.delete("Pod", "default/c")
    assert gone.name == "c" and gone.resource_version == 3
    with pytest.raises(NotFoundError):
        s.delete("Pod", "default/c")
    with pytest.raises(RuntimeError), s.transaction():
        s.create(pod("d"))
        s.delete("Pod", "default/a")
        raise RuntimeError("roll back")
    assert "Pod" not in s._cache  # nothing above decoded every pod
    assert [(p.name, p.labels["app"]) for p in s.list("Pod")] == [("a", "web"), ("b", "db")]
    assert s.get("Pod", "default/b") == stored
    assert [(e.type, e.object.name) for e in s.watch(3)] == [("MODIFIED", "b"), ("DELETED", "c")]
    s.close()


def test_first_states_give_the_state_at_the_start_revision(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    s = SqliteStore(path)
    for n in "abc":
        s.create(pod(n))
    s.flush()
    before = {p.key: p for p in s.list("Pod")}
    start = s.track_first_states()
    assert start == 3
    s.update(pod("a").with_meta(labels={"app": "x"}))
    s.update(pod("a").with_meta(labels={"app": "y"}))
    s.delete("Pod", "default/b")
    s.create(pod("d"))
    s.delete("Pod", "default/d")
    first = s.first_states()
    assert first == {
        ("Pod", "default/a"): before["default/a"],
        ("Pod", "default/b"): before["default/b"],
        ("Pod", "default/d"): None,
    }
    s.flush()
    other = SqliteStore(path)  # another process writes: what it overwrote is unknown here
    other.create(pod("e"))
    other.close()
    assert s.first_states() is None
    s.close()
    from control.store.base import first_states, track_first_states

    m = MemoryStore()  # a backend that cannot record says so
    assert track_first_states(m) is None and first_states(m) is None


def test_deferred_checkpoints_run_in_another_thread_while_this_one_writes(
    tmp_path: Path,
) -> None:
    """defer_checkpoints: commits leave the WAL to grow (nothing is copied back into the
    database file by a write); checkpoint(), in another thread, copies it back while
    the writer keeps writing, and what was committed is in the file for a new reader."""
    import threading

    path = tmp_path / "state.db"
    wal = tmp_path / "state.db-wal"
    s = SqliteStore(path, commit_every=1)
    s.defer_checkpoints()
    for i in range(300):  # each commit adds WAL frames; SQLite's default would checkpoint
        s.create(pod(f"a{i}"))
    assert wal.stat().st_size > 1000 * 4096  # past the default autocheckpoint: none ran
    stop = threading.Event()
    errors: list[BaseException] = []

    def checkpoints() -> None:
        try:
            while not stop.is_set():
                s.checkpoint()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=checkpoints)
    t.start()
    try:
        for i in range(200):
            s.create(pod(f"b{i}"))
    finally:
        stop.set()
        t.join()
    assert not errors
    log, done = s.checkpoint()
    assert log == done > 0  # all of it copied back
    s.create(pod("c"))  # the first write after a complete checkpoint restarts the WAL
    log, done = s.checkpoint()
    assert 0 < log < 10
    s.close()
    assert s.checkpoint() == (0, 0)  # a no-op once closed
    db = sqlite3.connect(path)
    try:
        n = db.execute("SELECT count(*) FROM objects WHERE kind = 'Pod'").fetchone()[0]
    finally:
        db.close()
    assert n == 501
    again = SqliteStore(path)
    assert again.revision == 501
    again.close()


def test_the_page_cache_is_sqlites_default_until_a_server_asks_for_more(tmp_path: Path) -> None:
    """A CLI process keeps SQLite's default page cache (a larger one only holds what a
    one-off question read: +64 MB peak for a trace on 1,000 nodes); ``svclab serve``
    grows it once, for its write load."""
    s = SqliteStore(tmp_path / "state.db")
    default = s._conn.execute("PRAGMA cache_size").fetchone()[0]
    assert default == -2000  # SQLite's compiled-in default: about 2 MB
    s.use_server_cache()
    s.use_server_cache()
    assert s._conn.execute("PRAGMA cache_size").fetchone()[0] == -SqliteStore.SERVER_CACHE_KIB
    s.close()


def test_a_bulk_writer_gets_the_larger_page_cache(tmp_path: Path) -> None:
    """A process with BULK_WRITES writes waiting for one commit (``apply -f`` of
    thousands of objects: one transaction) grows the cache as a server does; fewer
    writes keep SQLite's default."""
    s = SqliteStore(tmp_path / "state.db")
    with s.transaction():
        for i in range(SqliteStore.BULK_WRITES - 1):
            s.create(pod(f"p{i}"))
    assert s._conn.execute("PRAGMA cache_size").fetchone()[0] == -2000
    with s.transaction():
        for i in range(SqliteStore.BULK_WRITES):
            s.create(pod(f"q{i}"))
    assert s._conn.execute("PRAGMA cache_size").fetchone()[0] == -SqliteStore.SERVER_CACHE_KIB
    s.close()
