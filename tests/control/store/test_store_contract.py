"""The consistency contract of control.store.base, run against every backend."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_backends import FACTORIES, PERSISTENT, Opener

from control.store import BatchConflictError, SqliteStore, Store, WatchEvent, batched
from control.store.base import labelled, peek, scan, state_token
from netmodel.errors import CompactedError, ConflictError, NotFoundError
from netmodel.objects import KubeObject, Namespace, ObjectMeta, Pod, Service
from netmodel.selectors import LabelSelector, parse_selector


class Boom(Exception):
    pass


@pytest.fixture(params=sorted(FACTORIES))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Opener, Opener | None]:
    return FACTORIES[request.param](tmp_path, request)


@pytest.fixture(params=PERSISTENT)
def persisted(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Opener, Opener]:
    """A backend whose data a second store object opens again (``reopen``)."""
    open_, reopen = FACTORIES[request.param](tmp_path, request)
    assert reopen is not None, f"{request.param} is in PERSISTENT but cannot reopen"
    return open_, reopen


@pytest.fixture
def store(backend: tuple[Opener, Opener | None]) -> Iterator[Store]:
    s = backend[0]()
    yield s
    s.close()


def pod(name: str, ns: str = "default", **labels: str) -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace=ns, labels=labels))


def snapshot(s: Store) -> dict[str, list[KubeObject]]:
    return {k: s.list(k) for k in ("Pod", "Service", "Namespace")}


# Revisions are checked relative to the store's revision when the test starts (r0): an
# empty memory or SQLite store is at 0, a fresh etcd at 1 (and the etcd these tests share
# has been written before). ``watch(r0)`` is "everything this test did".


# --------------------------------------------------------------------------- revisions


def test_every_write_adds_exactly_one_revision(store: Store) -> None:
    r0 = store.revision
    assert r0 == (0 if store.TXN_REVISIONS == "consecutive" else r0)
    a = store.create(pod("a"))
    assert (store.revision, a.resource_version) == (r0 + 1, r0 + 1)
    assert a.metadata.resource_version == str(r0 + 1)
    b = store.update(a.with_meta(labels={"x": "y"}))
    assert (store.revision, b.resource_version) == (r0 + 2, r0 + 2)
    store.create(Namespace(metadata=ObjectMeta(name="ns1")))
    assert store.revision == r0 + 3
    gone = store.delete("Pod", "default/a")
    assert store.revision == r0 + 4
    assert gone.resource_version == r0 + 2  # the last stored state
    assert store.get("Namespace", "ns1").resource_version == r0 + 3


def test_create_existing_conflicts_and_missing_is_not_found(store: Store) -> None:
    r0 = store.revision
    store.create(pod("a"))
    with pytest.raises(ConflictError):
        store.create(pod("a"))
    with pytest.raises(NotFoundError):
        store.get("Pod", "default/b")
    with pytest.raises(NotFoundError):
        store.update(pod("b"))
    with pytest.raises(NotFoundError):
        store.delete("Pod", "default/b")
    assert store.revision == r0 + 1


def test_compare_and_swap(store: Store) -> None:
    r0 = store.revision
    a = store.create(pod("a"))
    b = store.update(a.with_meta(labels={"v": "2"}), expected_version=a.resource_version)
    with pytest.raises(ConflictError):
        store.update(a.with_meta(labels={"v": "3"}), expected_version=a.resource_version)
    with pytest.raises(ConflictError):
        store.delete("Pod", "default/a", expected_version=a.resource_version)
    assert store.get("Pod", "default/a") == b
    assert store.revision == r0 + 2
    store.delete("Pod", "default/a", expected_version=b.resource_version)
    assert store.list("Pod") == []


# --------------------------------------------------------------------------- watch


def test_watch_from_revision_includes_deletes(store: Store) -> None:
    r0 = store.revision
    a = store.create(pod("a"))
    mid = store.revision
    b = store.update(a.with_meta(labels={"v": "2"}))
    svc = store.create(Service(metadata=ObjectMeta(name="s", namespace="default")))
    gone = store.delete("Pod", "default/a")
    events = store.watch(mid)
    assert [(e.type, e.kind, e.revision) for e in events] == [
        ("MODIFIED", "Pod", r0 + 2),
        ("ADDED", "Service", r0 + 3),
        ("DELETED", "Pod", r0 + 4),
    ]
    assert events[0].object == b
    assert events[1].object == svc
    assert events[2].object == gone == b  # last stored state, deleting revision
    assert [e.revision for e in store.watch(r0, kinds=["Pod"])] == [r0 + 1, r0 + 2, r0 + 4]
    assert store.watch(store.revision) == []


def test_watcher_applying_events_converges_to_current_state(store: Store) -> None:
    r0 = store.revision
    for i in range(5):
        store.create(pod(f"p{i}", app="x" if i % 2 else "y"))
    for i in range(0, 5, 2):
        store.update(store.get("Pod", f"default/p{i}").with_meta(labels={"app": "z"}))
    store.delete("Pod", "default/p1")
    seen: dict[str, KubeObject] = {}
    for e in store.watch(r0):
        if e.type == "DELETED":
            del seen[e.object.key]
        else:
            seen[e.object.key] = e.object
    assert sorted(seen.values(), key=lambda o: o.key) == store.list("Pod")


def test_compaction(store: Store) -> None:
    r0 = store.revision
    for i in range(4):
        store.create(pod(f"p{i}"))
    store.compact(r0 + 2)
    assert store.compacted_revision == r0 + 2
    with pytest.raises(CompactedError):
        store.watch(r0 + 1)
    with pytest.raises(CompactedError):
        store.watch(r0)
    assert [e.revision for e in store.watch(r0 + 2)] == [r0 + 3, r0 + 4]
    store.compact(r0 + 1)  # never goes back
    assert store.compacted_revision == r0 + 2
    store.compact(r0 + 99)  # capped at the current revision
    assert store.compacted_revision == r0 + 4
    assert store.watch(r0 + 4) == []
    assert len(store.list("Pod")) == 4  # compaction drops history, not objects


# --------------------------------------------------------------------------- transactions


def test_transaction_commits_all_writes(store: Store) -> None:
    """Consecutive revisions, or one shared revision (etcd): see TXN_REVISIONS."""
    r1 = store.create(pod("a")).resource_version
    with store.transaction():
        assert store.revision == r1
        b = store.create(pod("b"))
        assert b.resource_version == r1 + 1  # revision + 1, read before the write
        a = store.update(store.get("Pod", "default/a").with_meta(labels={"k": "v"}))
        c = store.create(pod("c"))
        assert store.get("Pod", "default/b") == b  # the block reads its own writes
        assert [p.name for p in store.list("Pod")] == ["a", "b", "c"]
    got = [(e.type, e.object.name, e.revision) for e in store.watch(r1)]
    if store.TXN_REVISIONS == "consecutive":
        assert store.revision == r1 + 3
        assert (a.resource_version, c.resource_version) == (r1 + 2, r1 + 3)
        assert got == [("ADDED", "b", r1 + 1), ("MODIFIED", "a", r1 + 2), ("ADDED", "c", r1 + 3)]
    else:
        assert store.TXN_REVISIONS == "shared"
        assert store.revision == r1 + 1
        assert a.resource_version == c.resource_version == r1 + 1
        assert sorted(got) == [
            ("ADDED", "b", r1 + 1),
            ("ADDED", "c", r1 + 1),
            ("MODIFIED", "a", r1 + 1),
        ]
    assert [store.get("Pod", f"default/{n}") for n in "abc"] == [a, b, c]


def test_transaction_writing_a_key_twice(store: Store) -> None:
    """A watcher sees a subsequence of each object's states, ending in the current one."""
    r0 = store.revision
    with store.transaction():
        store.create(pod("b"))
        store.update(store.get("Pod", "default/b").with_meta(labels={"k": "v"}))
        store.create(pod("gone"))
        store.delete("Pod", "default/gone")
    events = store.watch(r0)
    of_b = [e for e in events if e.object.name == "b"]
    assert of_b[0].type == "ADDED" and of_b[-1].object == store.get("Pod", "default/b")
    assert [p.name for p in store.list("Pod")] == ["b"]
    if store.TXN_REVISIONS == "consecutive":
        assert [e.revision for e in events] == [r0 + 1, r0 + 2, r0 + 3, r0 + 4]
    else:
        assert [(e.type, e.revision) for e in events] == [("ADDED", r0 + 1)]


def test_transaction_rollback_leaves_everything_unchanged(store: Store) -> None:
    r0 = store.revision
    a = store.create(pod("a"))
    store.create(pod("gone"))
    before, rev, history = snapshot(store), store.revision, store.watch(r0)
    with pytest.raises(Boom), store.transaction():
        store.create(pod("b"))
        store.update(a.with_meta(labels={"k": "v"}))
        store.delete("Pod", "default/gone")
        store.create(Service(metadata=ObjectMeta(name="s")))
        raise Boom
    assert store.revision == rev
    assert snapshot(store) == before
    assert store.watch(r0) == history
    with pytest.raises(NotFoundError):
        store.get("Pod", "default/b")
    # the store keeps working after a rollback, revisions continue where they were
    c = store.create(pod("c"))
    assert c.resource_version == rev + 1


def test_failed_write_inside_transaction_rolls_back_the_batch(store: Store) -> None:
    a = store.create(pod("a"))
    with pytest.raises(ConflictError), store.transaction():
        store.create(pod("b"))
        store.create(pod("a"))  # exists
    assert store.revision == a.resource_version
    assert [p.name for p in store.list("Pod")] == ["a"]


def test_nested_transaction_rollback_is_local(store: Store) -> None:
    r0 = store.revision
    with store.transaction():
        store.create(pod("outer"))
        with pytest.raises(Boom), store.transaction():
            store.create(pod("inner"))
            raise Boom
        store.create(pod("after"))
    assert [p.name for p in store.list("Pod")] == ["after", "outer"]
    assert store.revision == r0 + (2 if store.TXN_REVISIONS == "consecutive" else 1)


# --------------------------------------------------------------------------- list


def test_list_by_namespace_and_selector_sorted_by_key(store: Store) -> None:
    store.create(pod("b", "prod", app="web", tier="front"))
    store.create(pod("a", "prod", app="web", tier="back"))
    store.create(pod("c", "dev", app="web"))
    store.create(pod("d", "dev", app="db"))
    assert [p.key for p in store.list("Pod")] == ["dev/c", "dev/d", "prod/a", "prod/b"]
    assert [p.key for p in store.list("Pod", "prod")] == ["prod/a", "prod/b"]
    sel = LabelSelector(match_labels={"app": "web"})
    assert [p.key for p in store.list("Pod", None, sel)] == ["dev/c", "prod/a", "prod/b"]
    assert [p.key for p in store.list("Pod", "dev", sel)] == ["dev/c"]
    expr = parse_selector("app in (web,db),tier notin (back)")
    assert [p.key for p in store.list("Pod", selector=expr)] == ["dev/c", "dev/d", "prod/b"]
    assert store.list("Service") == []


def test_list_reflects_creates_and_deletes(store: Store) -> None:
    store.create(pod("b"))
    assert [p.name for p in store.list("Pod")] == ["b"]
    store.create(pod("a"))
    assert [p.name for p in store.list("Pod")] == ["a", "b"]
    store.delete("Pod", "default/b")
    assert [p.name for p in store.list("Pod")] == ["a"]


# --------------------------------------------------------------------------- persistence


def test_reopen_keeps_objects_revisions_and_history(
    persisted: tuple[Opener, Opener],
) -> None:
    open_, reopen = persisted
    s = open_()
    r0 = s.revision
    for i in range(3):
        s.create(pod(f"p{i}", app="web"))
    s.update(s.get("Pod", "default/p0").with_meta(labels={"app": "db"}))
    s.delete("Pod", "default/p2")
    s.compact(r0 + 1)
    objects, rev, history = s.list("Pod"), s.revision, s.watch(r0 + 1)
    s.close()

    s2 = reopen()
    try:
        assert s2.revision == rev
        assert s2.compacted_revision == r0 + 1
        assert s2.list("Pod") == objects
        assert s2.watch(r0 + 1) == history
        with pytest.raises(CompactedError):
            s2.watch(r0)
        nxt = s2.create(pod("p9"))
        assert nxt.resource_version == rev + 1
        assert [e.revision for e in s2.watch(rev)] == [rev + 1]
        assert isinstance(s2.watch(rev)[0], WatchEvent)
    finally:
        s2.close()


# --------------------------------------------------------------------------- batches


def test_batch_checks_each_write_at_the_call_and_reads_its_writes(store: Store) -> None:
    r0 = store.revision
    a = store.create(pod("a"))
    with batched(store):
        b = store.create(pod("b"))
        with pytest.raises(ConflictError):
            store.create(pod("a"))  # exists: refused at the call
        with pytest.raises(ConflictError):
            store.update(a.with_meta(labels={"k": "v"}), expected_version=a.resource_version - 1)
        with pytest.raises(NotFoundError):
            store.delete("Pod", "default/nope")
        a2 = store.update(a.with_meta(labels={"k": "v"}), expected_version=a.resource_version)
        assert store.get("Pod", "default/b") == b  # reads see the batch's writes
        a3 = store.update(a2.with_meta(labels={"k": "w"}), expected_version=a2.resource_version)
        gone = store.create(pod("gone"))
        store.delete("Pod", "default/gone", expected_version=gone.resource_version)
        assert [p.name for p in store.list("Pod")] == ["a", "b"]
    # one writer: the objects returned carry the versions they were stored with
    assert store.get("Pod", "default/a") == a3
    assert store.get("Pod", "default/b") == b
    assert a3.labels == {"k": "w"}
    # a watcher applying the events converges to the state
    state: dict[str, KubeObject] = {}
    for e in store.watch(r0):
        if e.type == "DELETED":
            state.pop(e.object.key, None)
        else:
            state[e.object.key] = e.object
    assert sorted(state.values(), key=lambda o: o.key) == store.list("Pod")
    assert store.revision >= a3.resource_version


def test_batch_larger_than_one_etcd_txn(store: Store) -> None:
    """Over etcd's 128 operations per Txn: every write lands, with the version returned."""
    r0 = store.revision
    made: list[KubeObject] = []
    with batched(store):
        for i in range(300):
            made.append(store.create(pod(f"p{i:03d}", app="web")))
        for i in range(0, 300, 3):  # rewrite some, in chunks sent earlier
            cur = store.get("Pod", f"default/p{i:03d}")
            made[i] = store.update(cur.with_meta(labels={"app": "db"}), cur.resource_version)
        store.create(Namespace(metadata=ObjectMeta(name="ns-after")))
    assert store.list("Pod") == sorted(made, key=lambda o: o.key)
    assert store.get("Namespace", "ns-after")
    added = [e for e in store.watch(r0) if e.type == "ADDED" and e.kind == "Pod"]
    assert len(added) == 300
    revs = [e.revision for e in store.watch(r0)]
    assert revs == sorted(revs)


def test_batch_block_that_raises_keeps_the_writes_made_before(store: Store) -> None:
    """Each write of a batch was acknowledged when it returned: an error later in the
    block does not take it back (a batch is not a transaction)."""
    with pytest.raises(Boom), batched(store):
        a = store.create(pod("a"))
        raise Boom
    assert store.get("Pod", "default/a") == a


def test_transaction_inside_a_batch_is_all_or_nothing(store: Store) -> None:
    with batched(store):
        store.create(pod("before"))
        with pytest.raises(Boom), store.transaction():
            store.create(pod("rolled-back"))
            raise Boom
        with store.transaction():
            store.create(pod("in-txn"))
        after = store.create(pod("after"))
    assert [p.name for p in store.list("Pod")] == ["after", "before", "in-txn"]
    assert store.get("Pod", "default/after") == after


def _settle(s: Store) -> None:
    """Let other clients see this one's writes: SQLite commits in batches (flush); etcd's
    reads may be ``max_staleness`` seconds behind other clients (wait that long)."""
    flush = getattr(s, "flush", None)
    if flush is not None:
        flush()
    time.sleep(getattr(s, "max_staleness", 0.0) * 1.5)


def test_batch_conflict_with_another_writer_refuses_only_that_write(
    persisted: tuple[Opener, Opener],
) -> None:
    """A key another client changed after this store read it: that write is refused (at
    the call, or when the batch is sent: BatchConflictError naming it), never silently,
    and the batch's other writes are applied."""
    open_, reopen = persisted
    s = open_()
    other = reopen()
    try:
        x = s.create(pod("x"))
        y = s.create(pod("y"))
        _settle(s)
        other.get("Pod", "default/x")
        refused: list[tuple[str, str]] = []
        try:
            with batched(s):
                s.create(pod("new"))
                _settle(s)
                theirs = other.update(
                    other.get("Pod", "default/x").with_meta(labels={"by": "other"})
                )
                _settle(other)
                try:
                    s.update(x.with_meta(labels={"by": "me"}), expected_version=x.resource_version)
                except ConflictError:
                    refused.append(("Pod", "default/x"))
                s.update(y.with_meta(labels={"by": "me"}), expected_version=y.resource_version)
        except BatchConflictError as e:
            refused += e.refused
        assert refused == [("Pod", "default/x")]
        _settle(s)
        for reader in (s, other):
            assert reader.get("Pod", "default/x").labels == {"by": "other"}
            assert reader.get("Pod", "default/y").labels == {"by": "me"}
            assert reader.get("Pod", "default/new")
        assert s.get("Pod", "default/x") == theirs
    finally:
        other.close()
        s.close()


# --------------------------------------------------------------------------- scan, peek


def _scanned(s: Store) -> list[tuple[object, ...]]:
    return scan(
        s,
        "Pod",
        [
            ("spec", "nodeName"),
            ("spec", "hostNetwork"),
            ("metadata", "labels", "k8s-app"),
            ("metadata", "uid"),
        ],
    )


def _listed(s: Store) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for p in s.list("Pod"):
        assert isinstance(p, Pod)
        hn = p.spec.host_network if "hostNetwork" in p.to_dict().get("spec", {}) else None
        out.append(
            (
                p.key,
                p.spec.node_name,
                None if hn is None else int(hn),
                p.labels.get("k8s-app"),
                p.metadata.uid,
            )
        )
    return out


def test_scan_and_peek_read_what_list_and_get_read(store: Store) -> None:
    """scan reads fields of every object as list would give them (key order, absent as
    None, booleans as 1/0), peek an object as get: after writes, inside a transaction
    (its writes seen), after its rollback (gone again)."""
    a = pod("a", "kube-system", **{"k8s-app": "kube-dns"})
    store.create(
        a.model_copy(
            update={"spec": a.spec.model_copy(update={"node_name": "n1", "host_network": True})}
        )
    )
    store.create(pod("b"))
    store.create(pod("c", "dev", app="x"))
    assert _scanned(store) == _listed(store) and len(_scanned(store)) == 3
    assert [r[0] for r in _scanned(store)] == ["default/b", "dev/c", "kube-system/a"]
    assert _scanned(store)[2][1:4] == ("n1", 1, "kube-dns")
    assert scan(store, "Service", [("spec", "clusterIP")]) == []
    for key in ("default/b", "kube-system/a"):
        assert peek(store, "Pod", key) == store.get("Pod", key)
    with pytest.raises(NotFoundError):
        peek(store, "Pod", "default/zz")
    with pytest.raises(Boom), store.transaction():
        store.delete("Pod", "default/b")
        store.create(pod("d"))
        assert _scanned(store) == _listed(store)
        assert [r[0] for r in _scanned(store)] == ["default/d", "dev/c", "kube-system/a"]
        raise Boom
    assert _scanned(store) == _listed(store)
    assert [r[0] for r in _scanned(store)] == ["default/b", "dev/c", "kube-system/a"]


def test_scan_and_peek_see_another_process_s_commits(
    persisted: tuple[Opener, Opener],
) -> None:
    opener, reopen = persisted
    reader = opener()
    writer = reopen()
    try:
        assert scan(reader, "Pod", []) == []
        reader.list("Pod")  # its cache loaded: a scan must still see the next commit
        writer.create(pod("x"))
        flush = getattr(writer, "flush", None)
        if flush is not None:
            flush()
        listed = [(o.key,) for o in reader.list("Pod")]
        assert scan(reader, "Pod", []) == listed
        if listed:  # (SQLite sees a commit at once; etcd's cache may follow later)
            assert listed == [("default/x",)]
            assert peek(reader, "Pod", "default/x") == reader.get("Pod", "default/x")
        if isinstance(reader, SqliteStore):
            assert listed
    finally:
        writer.close()
        reader.close()


def _flush(s: Store) -> None:
    flush = getattr(s, "flush", None)
    if flush is not None:
        flush()


def test_state_token_names_the_committed_state(
    backend: tuple[Opener, Opener | None], tmp_path: Path
) -> None:
    """Equal tokens, equal contents: a write changes the token, a rolled-back
    transaction gives the same one back, another process on the same data sees the
    same token, another SQLite file never does; None where the backend cannot say."""
    opener, reopen = backend
    s = opener()
    try:
        t0 = state_token(s)
        if t0 is None:
            assert not isinstance(s, SqliteStore)
            return
        s.create(pod("a"))
        _flush(s)  # (a SQLite store holds its writes in an open transaction until then)
        t1 = state_token(s)
        assert t1 not in (None, t0)
        with pytest.raises(Boom), s.transaction():
            s.create(pod("b"))
            assert state_token(s) is None  # not committed
            raise Boom
        _flush(s)
        assert state_token(s) == t1
        if reopen is not None:
            other = reopen()
            try:
                assert state_token(other) == t1
                other.create(pod("c"))
                _flush(other)
                assert state_token(s) == state_token(other) not in (None, t1)
            finally:
                other.close()
        elsewhere = SqliteStore(tmp_path / "elsewhere" / "state.db")
        try:
            elsewhere.create(pod("a"))
            elsewhere.flush()
            assert state_token(elsewhere) != t1
        finally:
            elsewhere.close()
    finally:
        s.close()


# --------------------------------------------------------------------------- labelled


def test_labelled_gives_what_list_by_labels_gives(
    backend: tuple[Opener, Opener | None],
) -> None:
    """labelled(kind, ns, labels) is list(kind, ns, matchLabels): the same objects in the
    same order, from a store whose kind is not loaded yet (SQLite: a query over the
    stored labels) and from one that has loaded it; dotted and slashed label keys,
    a namespace that prefixes another, an empty selector (the whole namespace)."""
    opener, reopen = backend
    writer = opener()
    try:
        rows = [
            ("b", "default", {"app": "web", "app.kubernetes.io/name": "w"}),
            ("a", "default", {"app": "web"}),
            ("c", "default", {"app": "db", "app.kubernetes.io/name": "w"}),
            ("d", "default-2", {"app": "web"}),
            ("e", "dev", {"app": "web", "tier": "x"}),
            ("f", "default", {}),
        ]
        for name, ns, labels in rows:
            writer.create(pod(name, ns, **labels))
        flush = getattr(writer, "flush", None)
        if flush is not None:
            flush()
        selectors = [
            ("default", {"app": "web"}),
            ("default", {"app.kubernetes.io/name": "w"}),
            ("default", {"app": "web", "app.kubernetes.io/name": "w"}),
            ("default", {}),
            ("default-2", {"app": "web"}),
            ("dev", {"tier": "x", "app": "web"}),
            ("dev", {"tier": "y"}),
            ("nowhere", {}),
        ]
        readers = [writer] if reopen is None else [reopen(), writer]
        try:
            for reader in readers:
                for ns, labels in selectors:
                    want = writer.list("Pod", ns, LabelSelector(match_labels=labels))
                    assert labelled(reader, "Pod", ns, labels) == want, (ns, labels)
                    assert [o.key for o in want] == sorted(o.key for o in want)
                assert [o.name for o in labelled(reader, "Pod", "default", {"app": "web"})] == [
                    "a",
                    "b",
                ]
        finally:
            for reader in readers:
                if reader is not writer:
                    reader.close()
    finally:
        writer.close()
