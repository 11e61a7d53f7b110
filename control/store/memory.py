"""In-process store: dicts per kind plus an append-only change log (compactable)."""

from __future__ import annotations

import bisect
import builtins
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from control.store.base import WatchEvent, iter_matching, stamped
from netmodel.errors import CompactedError, ConflictError, NotFoundError
from netmodel.objects import KubeObject
from netmodel.selectors import LabelSelector


class MemoryStore:
    """The default backend. Objects are immutable, so they are stored as they are."""

    TXN_REVISIONS = "consecutive"

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, KubeObject]] = {}
        self._log: list[WatchEvent] = []
        self._log_revs: list[int] = []
        self._revision = 0
        self._compacted = 0
        self._txn_depth = 0
        # while a transaction is open: (kind, key, object before the write or None)
        self._undo: list[tuple[str, str, KubeObject | None]] = []

    # ---- reads

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def compacted_revision(self) -> int:
        return self._compacted

    def get(self, kind: str, key: str) -> KubeObject:
        try:
            return self._objects[kind][key]
        except KeyError:
            raise NotFoundError(f"{kind} {key!r} not found") from None

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        selector: LabelSelector | None = None,
    ) -> builtins.list[KubeObject]:
        bucket = self._objects.get(kind, {})
        return iter_matching((bucket[k] for k in sorted(bucket)), namespace, selector)

    def watch(self, since: int, kinds: Collection[str] | None = None) -> builtins.list[WatchEvent]:
        if since < self._compacted:
            raise CompactedError(
                f"revision {since} has been compacted (oldest kept: {self._compacted})"
            )
        start = bisect.bisect_right(self._log_revs, since)
        events = self._log[start:]
        if kinds is not None:
            ks = set(kinds)
            events = [e for e in events if e.object.store_kind in ks]
        return events

    # ---- writes

    def _stamp(self, obj: KubeObject) -> KubeObject:
        self._revision += 1
        return stamped(obj, self._revision)

    def _emit(self, type_: str, obj: KubeObject) -> None:
        self._log.append(WatchEvent(type_, obj, self._revision))  # type: ignore[arg-type]
        self._log_revs.append(self._revision)

    def create(self, obj: KubeObject) -> KubeObject:
        bucket = self._objects.setdefault(obj.store_kind, {})
        if obj.key in bucket:
            raise ConflictError(f"{obj.store_kind} {obj.key!r} already exists")
        stored = self._stamp(obj)
        self._remember(obj.store_kind, obj.key, None)
        bucket[obj.key] = stored
        self._emit("ADDED", stored)
        return stored

    def update(self, obj: KubeObject, expected_version: int | None = None) -> KubeObject:
        bucket = self._objects.get(obj.store_kind, {})
        current = bucket.get(obj.key)
        if current is None:
            raise NotFoundError(f"{obj.store_kind} {obj.key!r} not found")
        if expected_version is not None and current.resource_version != expected_version:
            raise ConflictError(
                f"{obj.store_kind} {obj.key!r}: resourceVersion {expected_version} is stale "
                f"(stored: {current.resource_version})"
            )
        stored = self._stamp(obj)
        self._remember(obj.store_kind, obj.key, current)
        bucket[obj.key] = stored
        self._emit("MODIFIED", stored)
        return stored

    def delete(self, kind: str, key: str, expected_version: int | None = None) -> KubeObject:
        bucket = self._objects.get(kind, {})
        current = bucket.get(key)
        if current is None:
            raise NotFoundError(f"{kind} {key!r} not found")
        if expected_version is not None and current.resource_version != expected_version:
            raise ConflictError(
                f"{kind} {key!r}: resourceVersion {expected_version} is stale "
                f"(stored: {current.resource_version})"
            )
        self._remember(kind, key, current)
        del bucket[key]
        self._revision += 1
        self._emit("DELETED", current)
        return current

    def compact(self, revision: int) -> None:
        revision = min(revision, self._revision)
        if revision <= self._compacted:
            return
        cut = bisect.bisect_right(self._log_revs, revision)
        del self._log[:cut]
        del self._log_revs[:cut]
        self._compacted = revision

    def _remember(self, kind: str, key: str, before: KubeObject | None) -> None:
        if self._txn_depth:
            self._undo.append((kind, key, before))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All-or-nothing, nestable (a nested block is a savepoint): if the block raises,
        its writes are undone in reverse order, and the log and revision rewound. Costs
        O(writes in the block), not O(store)."""
        mark_undo, mark_log, mark_rev = len(self._undo), len(self._log), self._revision
        self._txn_depth += 1
        try:
            yield
        except BaseException:
            for kind, key, before in reversed(self._undo[mark_undo:]):
                bucket = self._objects.setdefault(kind, {})
                if before is None:
                    bucket.pop(key, None)
                else:
                    bucket[key] = before
            del self._undo[mark_undo:]
            del self._log[mark_log:]
            del self._log_revs[mark_log:]
            self._revision = mark_rev
            raise
        finally:
            self._txn_depth -= 1
            if self._txn_depth == 0:
                self._undo.clear()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Writes in the block are applied at once, as outside it (the store contract's
        ``batch``: nothing to group here)."""
        yield

    def close(self) -> None:
        pass
