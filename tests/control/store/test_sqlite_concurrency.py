"""Several processes on one SQLite state file (``svclab serve`` plus CLI commands):
writes are compare-and-swap against the latest committed state, revisions stay unique and
gap-free across processes, and every process's reads and watch see the others' commits."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from control.store import SqliteStore
from netmodel.errors import CompactedError, ConflictError
from netmodel.objects import ObjectMeta, Pod, Service, ServicePort, ServiceSpec

ROOT = Path(__file__).resolve().parents[3]

WRITER = textwrap.dedent(
    """
    import sys
    from control.store import SqliteStore
    from netmodel.errors import ConflictError
    from netmodel.objects import ObjectMeta, Pod

    path, me, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    s = SqliteStore(path, commit_every=1)
    conflicts = 0
    for i in range(n):
        while True:  # read-modify-write of the shared counter, CAS on its revision
            svc = s.get("Service", "default/counter")
            value = int(svc.metadata.annotations["n"]) + 1
            try:
                s.update(
                    svc.with_meta(annotations={"n": str(value)}),
                    expected_version=svc.resource_version,
                )
                break
            except ConflictError:
                conflicts += 1
        s.create(Pod(metadata=ObjectMeta(name=f"{me}-{i}", namespace="default")))
    s.close()
    print(conflicts)
    """
)

READER = textwrap.dedent(
    """
    import sys, time
    from control.store import SqliteStore

    path, until = sys.argv[1], int(sys.argv[2])
    s = SqliteStore(path)
    last_rev, last_n, seen = s.revision, -1, s.revision
    deadline = time.monotonic() + 120
    while seen < until and time.monotonic() < deadline:
        rev = s.revision
        assert rev >= last_rev, (rev, last_rev)
        pods = len(s.list("Pod"))
        n = int(s.get("Service", "default/counter").metadata.annotations["n"])
        assert n >= last_n, (n, last_n)  # never goes back
        events = s.watch(seen)
        revs = [e.revision for e in events]
        assert revs == list(range(seen + 1, seen + 1 + len(revs))), revs[:5]  # no gap
        if revs:
            seen = revs[-1]
        assert pods <= n, (pods, n)  # each writer bumps the counter before its pod
        last_rev, last_n = rev, n
    assert seen >= until, (seen, until)
    print(seen)
    """
)


def _counter() -> Service:
    return Service(
        metadata=ObjectMeta(name="counter", namespace="default", annotations={"n": "0"}),
        spec=ServiceSpec(ports=[ServicePort(port=80)]),
    )


def _run(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_concurrent_writer_processes_lose_no_update_and_readers_stay_consistent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with SqliteStore(path) as s:
        s.create(_counter())
    writers, per_writer = 4, 40
    final = 1 + writers * per_writer * 2
    procs = [_run(WRITER, str(path), f"w{i}", str(per_writer)) for i in range(writers)]
    readers = [_run(READER, str(path), str(final)) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=180) for p in procs + readers]
    finally:
        for p in procs + readers:
            p.kill()
    for p, (_out, err) in zip(procs + readers, outs, strict=True):
        assert p.returncode == 0, err
    with SqliteStore(path) as s:
        svc = s.get("Service", "default/counter")
        assert svc.metadata.annotations["n"] == str(writers * per_writer)  # no lost update
        assert s.revision == final
        assert len(s.list("Pod")) == writers * per_writer
        assert [e.revision for e in s.watch(0)] == list(range(1, final + 1))


def test_a_process_sees_and_watches_what_another_committed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    a = SqliteStore(path)
    a.create(_counter())
    a.flush()
    cached = a.get("Service", "default/counter")  # a's cache holds Services now
    b = SqliteStore(path)
    b.update(cached.with_meta(annotations={"n": "7"}), expected_version=cached.resource_version)
    b.create(Pod(metadata=ObjectMeta(name="p", namespace="default")))
    b.flush()
    assert a.revision == 3
    assert a.get("Service", "default/counter").metadata.annotations["n"] == "7"
    assert [(e.type, e.object.name) for e in a.watch(1)] == [
        ("MODIFIED", "counter"),
        ("ADDED", "p"),
    ]
    # a stale CAS from a is refused: it checks against b's commit
    with pytest.raises(ConflictError):
        a.update(cached, expected_version=cached.resource_version)
    assert a.revision == 3
    # b compacts past what a could watch from: a is told to relist, reads stay right
    b.delete("Pod", "default/p")
    b.compact(4)
    b.flush()
    with pytest.raises(CompactedError):
        a.watch(2)
    assert a.list("Pod") == []
    assert [e.revision for e in a.watch(4)] == []
    a.close()
    b.close()


def test_a_refused_write_releases_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    a = SqliteStore(path)
    a.create(_counter())
    a.flush()
    with pytest.raises(ConflictError):
        a.create(_counter())
    b = SqliteStore(path)
    b.BUSY_TIMEOUT = 0.5
    b.create(Pod(metadata=ObjectMeta(name="q", namespace="default")))  # not blocked by a
    b.close()
    assert a.revision == 2
    a.close()
