"""etcd backend: the cluster in a real etcd (>= 3.4), laid out as kube-apiserver lays it
out (:mod:`control.store.etcd_layout`), reached through :mod:`control.store.etcd_client`.

URL: ``etcd://HOST:PORT[,HOST:PORT...]``; every member given is used, with failover.
One :class:`EtcdStore` serves one thread at a time (as :class:`SqliteStore` does); open
one per thread, or share it behind a lock.

How the store contract (:mod:`control.store.base`) maps onto etcd:

* ``revision`` is etcd's header revision; an object's resourceVersion is its key's
  ``mod_revision``; a list is read at one revision (pages of :attr:`EtcdStore.PAGE` keys
  pinned to the first page's header revision). A fresh etcd is at revision 1, not 0.
  Writes by other clients of the same etcd advance the revision too.
* A write outside a transaction is one etcd Txn, so it takes exactly one revision:
  create compares ``mod_revision == 0``; update and delete compare the object's
  ``mod_revision`` with ``expected_version`` (without one: the key exists); a failed
  compare is a ConflictError or NotFoundError, as for the other backends.
* :meth:`EtcdStore.transaction` stages the block's writes in this process (reads in the
  block see them) and commits them as ONE etcd Txn, comparing every touched key's
  ``mod_revision`` with the one read when it was first touched. As in etcd, all writes of
  a transaction then share one revision (memory and SQLite give them consecutive ones;
  the contract allows both: :attr:`EtcdStore.TXN_REVISIONS`). Inside the block
  ``revision`` stays at the revision before it, and the objects returned carry that
  plus one: the revision the commit gets, unless another client wrote in between. A
  key written twice in one block is sent once, with its final state (etcd allows one write per key per Txn), so a watcher sees
  only the final state: a subsequence, as the contract promises. A block larger than
  etcd's default limits (128 operations, 1.5 MiB per request) is committed in several
  Txns, none of which can hold it all. Each but the last also writes an undo record
  (``/registry/svclab.dev/pending/TOKEN/N``: the touched keys' states from before),
  the first a key tied to a lease of :attr:`EtcdStore.PENDING_TTL` seconds (the writer
  is alive), and the last deletes the records in the same Txn that finishes the
  transaction. If a Txn fails (a compare, or etcd going away), the writer undoes the
  committed ones from the records at once (history then shows both) and the error
  propagates; if it cannot (etcd down), the records stay, and the next store opened
  on that etcd rolls the transaction back once the lease has expired. A reader in
  between may see part of such a transaction: etcd has no atomic write larger than
  one Txn.
* Every svclab write Txn also puts :data:`MARKER_KEY` (a random token): its
  ``mod_revision`` is the last svclab write, which tells :meth:`EtcdStore.watch` where
  the events it must read end, and its token tells a write retried after a lost answer
  whether the first attempt committed.
* ``watch(since)`` is served from the cache's log (below) for revisions since the store
  was opened; older history comes from etcd's watch stream over ``/registry/`` from
  ``since`` up to the marker's revision, with ``prev_kv`` so that a DELETED event
  carries the last stored state. A watch from a compacted revision gets etcd's
  ``compact_revision`` cancellation, which becomes :class:`CompactedError`.
* Reads are served from a cache in this process, as kube-apiserver's watch cache
  serves lists: the objects of each kind read so far (one paged range on first use)
  and a log of the events since the store was opened, which serves ``watch``. The
  store's own writes go into it when they commit; writes by other clients arrive when
  the cache is refreshed: one range read of the marker and, if another client wrote,
  etcd's watch stream from the cache's revision. ``revision``, reads and ``watch``
  refresh when the last refresh is older than :attr:`EtcdStore.MAX_STALENESS` seconds,
  and every failed compare refreshes at once. With one writer the cache is exact;
  with several, a read may be that many seconds behind, but a write with an expected
  version is still a compare-and-swap in etcd, so a stale read cannot overwrite a
  newer state (a write without one, as on every backend, is last-writer-wins). ``watch`` always
  returns every change up to the ``revision`` last reported.
* ``compact(rev)`` is etcd's compaction (physical). ``compacted_revision`` is found by
  probing: a range read at revision r fails exactly when r is older than the compaction.
"""

from __future__ import annotations

import bisect
import builtins
import contextlib
import json
import math
import time
import uuid
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from control.store.base import (
    BatchConflictError,
    EventType,
    GuardMovedError,
    WatchEvent,
    bulk,
    iter_matching,
)
from control.store.etcd_client import EtcdClient, EtcdRequestError, parse_endpoints
from control.store.etcd_layout import (
    GUARD_PREFIX,
    MARKER_KEY,
    PENDING_PREFIX,
    PREFIX,
    RECORD_PREFIX,
    RESOURCES,
    b64,
    decode_value,
    encode_value,
    object_key,
    prefix_end,
    resource_prefix,
    split_key,
    unb64,
)
from control.store.etcd_watch import HistoryCompactedError, read_history
from netmodel.errors import CompactedError, ConflictError, NotFoundError, SvclabError
from netmodel.objects import KubeObject
from netmodel.selectors import LabelSelector

_OUT_OF_RANGE = 11  # gRPC code etcd uses for compacted and future revisions


@dataclass
class _Staged:
    """One key touched in a transaction: its state when first touched, and now."""

    kind: str
    key: str
    orig_mod: int  # 0: the key did not exist
    orig: KubeObject | None
    final: KubeObject | None


@dataclass
class _BatchWrite:
    """One key written in a batch: its state before the batch, its final state, the
    chunk (one Txn) it is sent in, and the encoded final value."""

    kind: str
    key: str
    orig_mod: int  # 0: the key did not exist
    orig: KubeObject | None
    final: KubeObject | None
    chunk: int = -1
    value: str | None = None
    size: int = 0


@dataclass
class _Batch:
    base: int  # the revision before the batch: chunk i is committed at base + i + 1
    writes: dict[str, _BatchWrite] = field(default_factory=dict)  # etcd key -> write
    counts: builtins.list[int] = field(default_factory=lambda: [0])  # keys per chunk
    sizes: builtins.list[int] = field(default_factory=lambda: [0])  # request bytes per chunk
    refused: builtins.list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _Txn:
    staged: dict[str, _Staged]  # etcd key -> state, in order of first touch
    base: int = 0  # header revision when the block first needed it (0: not yet)
    #: guard keys (see :meth:`EtcdStore.guard`) -> the mod_revision they must still have
    guards: dict[str, int] = field(default_factory=dict)


def _put(key: str, value: str) -> dict[str, Any]:
    return {"request_put": {"key": b64(key), "value": b64(value)}}


def _delete(key: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


def _mod_is(key: str, rev: int) -> dict[str, Any]:
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(rev)}


def _exists(key: str) -> dict[str, Any]:
    return {"key": b64(key), "target": "VERSION", "result": "GREATER", "version": "0"}


def _range_op(key: str) -> dict[str, Any]:
    return {"request_range": {"key": b64(key)}}


def _op_bytes(key: str, value: str | None) -> int:
    """What one put or delete adds to a Txn request (base64 grows text by 4/3)."""
    return (len(key) + len(value or "")) * 4 // 3 + 64


def _rev(answer: dict[str, Any]) -> int:
    return int(answer["header"]["revision"])


class EtcdStore:
    """A :class:`~control.store.base.Store` in etcd. See the module docstring."""

    TXN_REVISIONS = "shared"
    PAGE = 5000
    #: etcd's default --max-txn-ops is 128 (the marker put takes one)
    MAX_TXN_OPS = 127
    #: etcd's default --max-request-bytes is 1.5 MiB; base64 grows values by 4/3
    MAX_TXN_BYTES = 1_000_000
    #: reads, ``revision`` and ``watch`` refresh the cache from etcd when the last
    #: refresh is older than this many seconds (0: on every call)
    MAX_STALENESS = 0.1
    #: seconds a writer's lease on an unfinished multi-Txn transaction lasts (see above)
    PENDING_TTL = 30

    def __init__(
        self, endpoints: str | list[tuple[str, int]], *, max_staleness: float | None = None
    ) -> None:
        pairs = parse_endpoints(endpoints) if isinstance(endpoints, str) else endpoints
        self.client = EtcdClient(pairs)
        self.url = "etcd://" + self.client.where
        self.max_staleness = self.MAX_STALENESS if max_staleness is None else max_staleness
        self._txn: _Txn | None = None
        self._batch: _Batch | None = None
        self._compacted = 0
        self._closed = False
        # the cache: objects of the kinds read so far, and the events since it began
        self._cache: dict[str, dict[str, KubeObject]] = {}
        self._keys: dict[str, builtins.list[str]] = {}  # sorted keys per kind, lazily
        self._synced = 0  # every svclab event up to this revision is in cache and log
        self._head = 0  # the newest revision known (>= _synced; own writes move it)
        self._log_from = 0  # the log holds every event with revision > _log_from
        self._log: builtins.list[WatchEvent] = []
        self._log_revs: builtins.list[int] = []
        self._refreshed_at = -math.inf

    # ------------------------------------------------------------------ plumbing

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._closed:
            raise RuntimeError(f"store {self.url} is closed")
        return self.client.call(path, body)

    def _range(self, key: str, **fields: Any) -> dict[str, Any]:
        return self._call("/kv/range", {"key": b64(key), **fields})

    def _range_prefix(self, prefix: str) -> builtins.list[dict[str, Any]]:
        """Every key-value under ``prefix``, in key order, read at one revision."""
        out: builtins.list[dict[str, Any]] = []
        start: bytes = prefix.encode()
        end = prefix_end(prefix)
        pinned: int | None = None
        while True:
            body: dict[str, Any] = {"key": b64(start), "range_end": end, "limit": self.PAGE}
            if pinned is not None:
                body["revision"] = str(pinned)
            answer = self._call("/kv/range", body)
            if pinned is None:
                pinned = _rev(answer)
            kvs = answer.get("kvs", [])
            out += kvs
            if not answer.get("more") or not kvs:
                return out
            start = unb64(kvs[-1]["key"]) + b"\0"

    def _commit(
        self, compare: builtins.list[dict[str, Any]], ops: builtins.list[dict[str, Any]]
    ) -> tuple[bool, int]:
        """One Txn: ``ops`` and the marker if every compare holds. Returns (succeeded,
        revision). A Txn retried after a lost answer whose compare now fails checks the
        marker: if it holds this Txn's token, the first attempt committed."""
        ok, rev, _ = self._txn_call(compare, ops)
        return ok, rev

    def _txn_call(
        self,
        compare: builtins.list[dict[str, Any]],
        ops: builtins.list[dict[str, Any]],
        failure: builtins.list[dict[str, Any]] | None = None,
    ) -> tuple[bool, int, dict[str, Any]]:
        """:meth:`_commit`, with ``failure`` ops run when a compare fails; returns the
        answer too (its ``responses`` are the failure ops' when not succeeded)."""
        token = uuid.uuid4().hex
        body: dict[str, Any] = {"compare": compare, "success": [*ops, _put(MARKER_KEY, token)]}
        if failure:
            body["failure"] = failure
        answer = self._call("/kv/txn", body)
        if answer.get("succeeded"):
            return True, _rev(answer), answer
        if self.client.retried:
            marker = self._range(MARKER_KEY).get("kvs")
            if marker and unb64(marker[0]["value"]).decode() == token:
                return True, int(marker[0]["mod_revision"]), answer
        return False, _rev(answer), answer

    # ------------------------------------------------------------------ the cache

    def _bucket(self, kind: str) -> dict[str, KubeObject]:
        """The cached objects of ``kind``, loaded (one paged range) on first use."""
        bucket = self._cache.get(kind)
        if bucket is None:
            if not self._synced:
                self._refresh(force=True)
            base = len(resource_prefix(kind))
            kvs = self._range_prefix(resource_prefix(kind))
            with bulk():
                bucket = {
                    unb64(kv["key"]).decode()[base:]: decode_value(
                        kind, unb64(kv["value"]), int(kv["mod_revision"])
                    )
                    for kv in kvs
                }
            self._cache[kind] = bucket
            self._keys.pop(kind, None)
        return bucket

    def _refresh(self, *, force: bool = False) -> None:
        """Bring the cache and the log up to etcd's present: one range read of the
        marker, plus the watch stream when another client wrote since the last time."""
        if self._batch is not None and self._synced:
            return  # a batch reads its own view; its compares guard it when it is sent
        if not force and time.monotonic() - self._refreshed_at < self.max_staleness:
            return
        answer = self._range(MARKER_KEY)
        head = _rev(answer)
        kvs = answer.get("kvs")
        last = int(kvs[0]["mod_revision"]) if kvs else 0
        if not self._synced:
            if self._recover():
                head = _rev(self._range(MARKER_KEY))
            self._synced = self._log_from = head
        elif last > self._synced:
            try:
                events = self._stream(self._synced, last)
            except CompactedError:  # another client compacted past us: start again
                self._reset(head)
            else:
                for ev in events:
                    self._apply(ev)
                self._synced = max([head] + [ev.revision for ev in events[-1:]])
        else:
            self._synced = max(self._synced, head)
        self._head = max(self._head, self._synced)
        self._refreshed_at = time.monotonic()

    def _reset(self, head: int) -> None:
        self._cache.clear()
        self._keys.clear()
        self._log.clear()
        self._log_revs.clear()
        self._synced = self._log_from = self._head = head

    def _apply(self, ev: WatchEvent) -> None:
        """An event read from etcd (revision > _synced): into the cache, unless the
        cache already holds a newer state of the key (an own write), and into the log."""
        obj = ev.object
        bucket = self._cache.get(obj.store_kind)
        if bucket is not None:
            cur = bucket.get(obj.key)
            if ev.type == "DELETED":
                if cur is not None and cur.resource_version < ev.revision:
                    del bucket[obj.key]
                    self._keys.pop(obj.store_kind, None)
            elif cur is None or cur.resource_version < ev.revision:
                if cur is None:
                    self._keys.pop(obj.store_kind, None)
                bucket[obj.key] = obj
        self._log.append(ev)
        self._log_revs.append(ev.revision)

    def _wrote(self, rev: int, changes: builtins.list[tuple[EventType, KubeObject]]) -> None:
        """Own writes committed at ``rev``: into the cache now; into the log when nothing
        came between (else the next refresh reads them back from etcd, in order)."""
        for type_, obj in changes:
            bucket = self._cache.get(obj.store_kind)
            if bucket is None:
                continue
            if type_ == "DELETED":
                if bucket.pop(obj.key, None) is not None:
                    self._keys.pop(obj.store_kind, None)
            else:
                if obj.key not in bucket:
                    self._keys.pop(obj.store_kind, None)
                bucket[obj.key] = obj
        if rev == self._synced + 1:
            self._synced = rev
            for type_, obj in changes:
                self._log.append(WatchEvent(type_, obj, rev))
                self._log_revs.append(rev)
        self._head = max(self._head, rev)

    def _stream(self, since: int, until: int) -> builtins.list[WatchEvent]:
        try:
            return read_history(self.client, since, until)
        except HistoryCompactedError as e:
            self._compacted = max(self._compacted, e.oldest)
            raise

    # ------------------------------------------------------------------ reads

    @property
    def revision(self) -> int:
        """etcd's revision as last seen (refreshed as :attr:`MAX_STALENESS` says; own
        writes move it); inside a transaction, the one before it (fixed for the block),
        so that ``revision + 1`` is the revision its writes will share."""
        if self._txn is not None:
            return self._txn_base()
        if self._batch is not None:
            return self._batch.base + len(self._batch.counts) - 1
        self._refresh()
        return self._head

    @property
    def compacted_revision(self) -> int:
        """Probed: the oldest revision a range read still accepts (cached; it only grows)."""
        lo = self._compacted
        if self._readable_at(max(lo, 1)):
            return lo
        self._refresh(force=True)
        bad, good = max(lo, 1), self._head
        while good - bad > 1:
            mid = (bad + good) // 2
            if self._readable_at(mid):
                good = mid
            else:
                bad = mid
        self._compacted = good
        return good

    def _readable_at(self, rev: int) -> bool:
        try:
            self._range(MARKER_KEY, revision=str(rev), count_only=True)
        except EtcdRequestError as e:
            if e.code == _OUT_OF_RANGE and "compacted" in str(e):
                return False
            if e.code == _OUT_OF_RANGE and "future" in str(e):
                return True
            raise
        return True

    def get(self, kind: str, key: str) -> KubeObject:
        if kind not in RESOURCES:
            raise NotFoundError(f"{kind} {key!r} not found")
        staged = self._txn.staged.get(object_key(kind, key)) if self._txn else None
        if staged is not None:
            obj = staged.final
        else:
            self._refresh()
            obj = self._bucket(kind).get(key)
        if obj is None:
            raise NotFoundError(f"{kind} {key!r} not found")
        return obj

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        selector: LabelSelector | None = None,
    ) -> builtins.list[KubeObject]:
        if kind not in RESOURCES:
            return []
        self._refresh()
        bucket = self._bucket(kind)
        staged = [st for st in self._txn.staged.values() if st.kind == kind] if self._txn else []
        if staged:
            bucket = dict(bucket)
            for st in staged:
                if st.final is None:
                    bucket.pop(st.key, None)
                else:
                    bucket[st.key] = st.final
            keys = sorted(bucket)
        else:
            keys = self._keys.get(kind) or []
            if len(keys) != len(bucket):
                keys = self._keys[kind] = sorted(bucket)
        return iter_matching((bucket[k] for k in keys), namespace, selector)

    def watch(self, since: int, kinds: Collection[str] | None = None) -> builtins.list[WatchEvent]:
        if since < self._compacted:
            raise CompactedError(
                f"revision {since} has been compacted (oldest kept: {self._compacted})"
            )
        self._refresh(force=self._synced < self._head)
        ks = set(kinds) if kinds is not None else None
        if since >= self._log_from:
            events = self._log[bisect.bisect_right(self._log_revs, since) :]
        else:  # older than this process's log: etcd's history
            marker = self._range(MARKER_KEY).get("kvs")
            last = int(marker[0]["mod_revision"]) if marker else 0
            if last <= since:
                if since >= 1 and not self._readable_at(since):
                    raise CompactedError(f"revision {since} has been compacted")
                return []
            events = self._stream(since, last)
        return events if ks is None else [e for e in events if e.object.store_kind in ks]

    # ------------------------------------------------------------------ writes

    def create(self, obj: KubeObject) -> KubeObject:
        ekey = object_key(obj.store_kind, obj.key)
        if self._txn is not None:
            st = self._touch(obj.store_kind, obj.key)
            if st.final is not None:
                raise ConflictError(f"{obj.store_kind} {obj.key!r} already exists")
            st.final = obj.with_meta(resource_version=str(self._predicted()))
            return st.final
        if self._batch is not None:
            return self._batched(obj.store_kind, obj.key, obj, None, create=True)
        ok, rev = self._commit([_mod_is(ekey, 0)], [_put(ekey, encode_value(obj))])
        if not ok:
            self._refresh(force=True)
            raise ConflictError(f"{obj.store_kind} {obj.key!r} already exists")
        stored = obj.with_meta(resource_version=str(rev))
        self._wrote(rev, [("ADDED", stored)])
        return stored

    def update(self, obj: KubeObject, expected_version: int | None = None) -> KubeObject:
        ekey = object_key(obj.store_kind, obj.key)
        if self._txn is not None:
            st = self._touch(obj.store_kind, obj.key)
            self._check(obj.store_kind, obj.key, st.final, expected_version)
            st.final = obj.with_meta(resource_version=str(self._predicted()))
            return st.final
        if self._batch is not None:
            return self._batched(obj.store_kind, obj.key, obj, expected_version)
        cond = _exists(ekey) if expected_version is None else _mod_is(ekey, expected_version)
        ok, rev = self._commit([cond], [_put(ekey, encode_value(obj))])
        if not ok:
            self._refresh(force=True)
            self._check(obj.store_kind, obj.key, self._bucket(obj.store_kind).get(obj.key), expected_version)
            raise ConflictError(f"{obj.kind} {obj.key!r}: changed by another writer")
        stored = obj.with_meta(resource_version=str(rev))
        self._wrote(rev, [("MODIFIED", stored)])
        return stored

    def delete(self, kind: str, key: str, expected_version: int | None = None) -> KubeObject:
        if kind not in RESOURCES:
            raise NotFoundError(f"{kind} {key!r} not found")
        if self._txn is not None:
            st = self._touch(kind, key)
            current = self._check(kind, key, st.final, expected_version)
            st.final = None
            return current
        if self._batch is not None:
            return self._batched(kind, key, None, expected_version)
        ekey = object_key(kind, key)
        for attempt in range(10):
            if attempt:
                self._refresh(force=True)
            stored = self._bucket(kind).get(key)
            if stored is None and not attempt:
                continue  # the cache may be behind: look again after a refresh
            last = self._check(kind, key, stored, expected_version)
            ok, rev = self._commit([_mod_is(ekey, last.resource_version)], [_delete(ekey)])
            if ok:
                self._wrote(rev, [("DELETED", last)])
                return last
            # changed between the read and the delete: read again (and re-check)
        raise ConflictError(f"{kind} {key!r}: changed by other writers ten times in a row")

    @staticmethod
    def _check(kind: str, key: str, current: KubeObject | None, expected: int | None) -> KubeObject:
        if current is None:
            raise NotFoundError(f"{kind} {key!r} not found")
        if expected is not None and current.resource_version != expected:
            raise ConflictError(
                f"{kind} {key!r}: resourceVersion {expected} is stale "
                f"(stored: {current.resource_version})"
            )
        return current

    def compact(self, revision: int) -> None:
        self._refresh(force=True)
        revision = min(revision, self._head)
        if revision <= self.compacted_revision:
            return
        try:
            self._call("/kv/compaction", {"revision": str(revision), "physical": True})
        except EtcdRequestError as e:
            if not (e.code == _OUT_OF_RANGE and "compacted" in str(e)):
                raise
        self._compacted = max(self._compacted, revision)
        cut = bisect.bisect_right(self._log_revs, revision)
        del self._log[:cut]
        del self._log_revs[:cut]
        self._log_from = max(self._log_from, revision)

    # ------------------------------------------------------------------ batches

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group writes into as few etcd Txns as etcd's limits allow (the store contract's
        ``batch``). Each write is checked against the cache at the call and goes into the
        cache at once (reads in the block see it); the block's end sends them, chunk by
        chunk (:attr:`MAX_TXN_OPS`, :attr:`MAX_TXN_BYTES`), each Txn comparing every key's
        ``mod_revision`` with the one the cache had. A Txn whose compare fails reads the
        keys back in the same request (its failure branch), and is sent again without
        the writes whose keys changed; those are refused (:class:`BatchConflictError`
        at the end, after every other write was sent) and their cache entries re-read.
        Inside a transaction, or inside another batch, the block joins it."""
        if self._txn is not None or self._batch is not None:
            yield
            return
        self._refresh()
        self._batch = _Batch(self._head)
        try:
            yield
        finally:
            self._end_batch()

    def _end_batch(self) -> None:
        batch, self._batch = self._batch, None
        assert batch is not None
        refused = batch.refused
        try:
            refused += self._send_batch(batch)
        except BaseException:
            # some chunks may not have been sent: read the cache again from etcd
            self._cache.clear()
            self._keys.clear()
            raise
        if refused:
            raise BatchConflictError(refused)

    def _batched(
        self,
        kind: str,
        key: str,
        new: KubeObject | None,
        expected: int | None,
        *,
        create: bool = False,
    ) -> KubeObject:
        """One write in a batch: checked against the cache, staged in a chunk, and put in
        the cache with the revision its chunk will get. ``new`` None: a delete."""
        batch = self._batch
        assert batch is not None
        if kind not in RESOURCES:
            raise NotFoundError(f"{kind} {key!r}: no such kind")
        bucket = self._bucket(kind)
        current = bucket.get(key)
        if create:
            if current is not None:
                raise ConflictError(f"{kind} {key!r} already exists")
        else:
            self._check(kind, key, current, expected)
        ekey = object_key(kind, key)
        w = batch.writes.get(ekey)
        if w is None:
            mod = current.resource_version if current is not None else 0
            w = _BatchWrite(kind, key, mod, current, current)
        value = encode_value(new) if new is not None else None
        size = _op_bytes(ekey, value)
        if w.chunk < 0:
            c = len(batch.counts) - 1
            if batch.counts[c] >= self.MAX_TXN_OPS or batch.sizes[c] + size > self.MAX_TXN_BYTES:
                batch.counts.append(0)
                batch.sizes.append(0)
                c += 1
            w.chunk = c
            batch.counts[c] += 1
            batch.writes[ekey] = w
        batch.sizes[w.chunk] += size - w.size
        w.size, w.value = size, value
        if new is None:
            assert current is not None
            w.final = None
            del bucket[key]
            self._keys.pop(kind, None)
            return current
        stored = new.with_meta(resource_version=str(batch.base + w.chunk + 1))
        w.final = stored
        if current is None:
            self._keys.pop(kind, None)
        bucket[key] = stored
        return stored

    def _send_batch(self, batch: _Batch) -> builtins.list[tuple[str, str]]:
        """Send a batch's chunks in order (an empty one still takes its revision, so that
        the revisions handed out stay exact); returns the refused writes."""
        chunks: builtins.list[builtins.list[tuple[str, _BatchWrite]]] = [[] for _ in batch.counts]
        for ekey, w in batch.writes.items():
            chunks[w.chunk].append((ekey, w))
        if not batch.writes:
            return []
        refused: builtins.list[tuple[str, str]] = []
        for chunk in chunks:
            live = [(k, w) for k, w in chunk if w.final is not None or w.orig is not None]
            for _attempt in range(10):
                compare = [_mod_is(k, w.orig_mod) for k, w in live]
                ops = [_delete(k) if w.final is None else _put(k, w.value or "") for k, w in live]
                ok, rev, answer = self._txn_call(compare, ops, [_range_op(k) for k, _ in live])
                if ok:
                    break
                stale = set()
                for (k, w), resp in zip(live, answer.get("responses", []), strict=False):
                    kvs = resp.get("response_range", {}).get("kvs") or []
                    if (int(kvs[0]["mod_revision"]) if kvs else 0) != w.orig_mod:
                        stale.add(k)
                refused += [(w.kind, w.key) for k, w in live if k in stale]
                self._reread([k for k in stale])
                live = [(k, w) for k, w in live if k not in stale]
            else:
                raise ConflictError("a batched Txn kept failing its compares; nothing more sent")
            changes: builtins.list[tuple[EventType, KubeObject]] = []
            for _, w in live:
                if w.final is None:
                    assert w.orig is not None
                    changes.append(("DELETED", w.orig))
                else:
                    final = w.final
                    if final.resource_version != rev:
                        final = final.with_meta(resource_version=str(rev))
                    changes.append(("ADDED" if w.orig is None else "MODIFIED", final))
            self._wrote(rev, changes)
        return refused

    def _reread(self, ekeys: builtins.list[str]) -> None:
        """Put the state etcd holds for these keys into the cache (after a refused write)."""
        for ekey in ekeys:
            kind_key = split_key(ekey)
            assert kind_key is not None
            kind, key = kind_key
            bucket = self._cache.get(kind)
            if bucket is None:
                continue
            kvs = self._range(ekey).get("kvs")
            if kvs:
                bucket[key] = decode_value(
                    kind, unb64(kvs[0]["value"]), int(kvs[0]["mod_revision"])
                )
            else:
                bucket.pop(key, None)
            self._keys.pop(kind, None)

    # ------------------------------------------------------------------ transactions

    def _txn_base(self) -> int:
        assert self._txn is not None
        if not self._txn.base:
            self._refresh()
            self._txn.base = self._head
        return self._txn.base

    def _predicted(self) -> int:
        return self._txn_base() + 1

    def _touch(self, kind: str, key: str) -> _Staged:
        assert self._txn is not None
        if kind not in RESOURCES:
            raise NotFoundError(f"{kind} {key!r}: no such kind")
        ekey = object_key(kind, key)
        st = self._txn.staged.get(ekey)
        if st is None:
            self._txn_base()
            obj = self._bucket(kind).get(key)
            mod = obj.resource_version if obj is not None else 0
            st = self._txn.staged[ekey] = _Staged(kind, key, mod, obj, obj)
        return st

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Stage the block's writes and commit them as one etcd Txn (see the module
        docstring); nests (a nested block that raises drops only its own writes)."""
        outer = self._txn is None
        paused = self._batch if outer else None
        if paused is not None:  # in a batch: send what it holds, then commit as outside
            self._batch = None
            try:
                paused.refused += self._send_batch(paused)
            except BaseException:
                self._cache.clear()
                self._keys.clear()
                raise
        try:
            yield from self._transaction(outer)
        finally:
            if paused is not None:
                self._batch = _Batch(self._head, refused=paused.refused)

    def _transaction(self, outer: bool) -> Iterator[None]:
        if outer:
            self._txn = _Txn({})
        assert self._txn is not None
        saved = {k: replace(st) for k, st in self._txn.staged.items()}
        try:
            yield
        except BaseException:
            if outer:
                self._txn = None
            else:
                self._txn.staged = saved
            raise
        if outer:
            txn, self._txn = self._txn, None
            self._commit_staged(builtins.list(txn.staged.items()), txn.guards)

    def _commit_staged(
        self, staged: builtins.list[tuple[str, _Staged]], guards: dict[str, int] | None = None
    ) -> None:
        chunks: builtins.list[builtins.list[tuple[str, _Staged, dict[str, Any] | None]]] = [[]]
        size = 0
        for ekey, st in staged:
            op: dict[str, Any] | None = None
            if st.final is None and st.orig is not None:
                op = _delete(ekey)
            elif st.final is not None and st.final != st.orig:
                op = _put(ekey, encode_value(st.final))
            # with the undo record (the state before) that a multi-Txn commit writes
            nbytes = len(json.dumps(op)) if op else 0
            if op is not None and st.orig is not None:
                nbytes += _op_bytes(ekey, encode_value(st.orig))
            # 2 more operations per Txn when it is split: its undo record, the lease key
            if len(chunks[-1]) >= self.MAX_TXN_OPS - 2 or size + nbytes > self.MAX_TXN_BYTES:
                chunks.append([])
                size = 0
            chunks[-1].append((ekey, st, op))
            size += nbytes
        if len(chunks) == 1:
            self._commit_one(chunks[0], guards or {})
            return
        if guards:
            raise ConflictError(
                f"a guarded transaction of {len(staged)} objects does not fit one etcd Txn"
            )
        token = uuid.uuid4().hex
        base = PENDING_PREFIX + token + "/"
        lease = self._call("/lease/grant", {"TTL": str(self.PENDING_TTL)})["ID"]
        alive = {"request_put": {"key": b64(base + "alive"), "value": b64(""), "lease": lease}}
        try:
            for i, chunk in enumerate(chunks):
                ops = [op for _, _, op in chunk if op is not None]
                if i == len(chunks) - 1:  # the last Txn removes the undo records with it
                    ops.append(
                        {"request_delete_range": {"key": b64(base), "range_end": prefix_end(base)}}
                    )
                else:
                    undo = [  # [key, state before or None, whether the Txn deletes it]
                        [
                            ekey,
                            encode_value(st.orig) if st.orig is not None else None,
                            st.final is None,
                        ]
                        for ekey, st, op in chunk
                        if op is not None
                    ]
                    ops.append(_put(f"{base}{i:06d}", json.dumps(undo)))
                    if i == 0:
                        ops.append(alive)
                ok, _ = self._commit([_mod_is(k, st.orig_mod) for k, st, _ in chunk], ops)
                if not ok:
                    raise ConflictError(
                        "another writer changed an object this transaction read; "
                        "nothing was applied"
                    )
        except BaseException:
            with contextlib.suppress(SvclabError):  # etcd gone: the next opener undoes it
                self._roll_back(token)
            raise
        finally:
            with contextlib.suppress(SvclabError):
                self._call("/lease/revoke", {"ID": lease})
            with contextlib.suppress(SvclabError):
                self._refresh(force=True)  # the cache reads it all back, in order

    def _commit_one(
        self,
        chunk: builtins.list[tuple[str, _Staged, dict[str, Any] | None]],
        guards: dict[str, int],
    ) -> None:
        ops = [op for _, _, op in chunk if op is not None]
        if not ops:
            return
        compare = [_mod_is(k, st.orig_mod) for k, st, _ in chunk]
        compare += [_mod_is(k, rev) for k, rev in guards.items()]
        ops += [_put(k, uuid.uuid4().hex) for k in guards]
        ok, rev = self._commit(compare, ops)
        if not ok:
            self._refresh(force=True)
            moved = [
                k[len(GUARD_PREFIX) :]
                for k, want in guards.items()
                if int((self._range(k).get("kvs") or [{"mod_revision": 0}])[0]["mod_revision"])
                != want
            ]
            if moved:
                raise GuardMovedError(
                    f"guard {', '.join(moved)} was moved by another writer; nothing was applied"
                )
            raise ConflictError(
                "another writer changed an object this transaction read; nothing was applied"
            )
        changes: builtins.list[tuple[EventType, KubeObject]] = []
        for _, st, op in chunk:
            if op is None:
                continue
            if st.final is None:
                assert st.orig is not None
                changes.append(("DELETED", st.orig))
            else:
                final = st.final.with_meta(resource_version=str(rev))
                changes.append(("ADDED" if st.orig is None else "MODIFIED", final))
        self._wrote(rev, changes)

    def _roll_back(self, token: str) -> None:
        """Undo a transaction committed in several Txns that did not finish, from its undo
        records (newest first): each key a record's Txn wrote and nobody changed since
        (its mod_revision is still that Txn's revision; a deleted key is still absent)
        gets its state from before the transaction back; then the record goes. Idempotent: a rollback cut short is
        finished by the next one."""
        base = PENDING_PREFIX + token + "/"
        records = [
            kv
            for kv in self._range_prefix(base)
            if not unb64(kv["key"]).decode().endswith("/alive")
        ]
        for kv in reversed(records):
            rev = int(kv["mod_revision"])
            for ekey, orig, deleted in json.loads(unb64(kv["value"])):
                op = _delete(ekey) if orig is None else _put(ekey, orig)
                self._commit([_mod_is(ekey, 0 if deleted else rev)], [op])
            self._call("/kv/deleterange", {"key": kv["key"]})
        self._call("/kv/deleterange", {"key": b64(base), "range_end": prefix_end(base)})

    def _recover(self) -> bool:
        """Roll back every multi-Txn transaction left unfinished by a writer that is gone
        (its lease key, kept for :attr:`PENDING_TTL` seconds, has expired)."""
        tokens: dict[str, bool] = {}
        for kv in self._range_prefix(PENDING_PREFIX):
            token, _, part = unb64(kv["key"]).decode()[len(PENDING_PREFIX) :].partition("/")
            tokens[token] = tokens.get(token, False) or part == "alive"
        gone = [token for token, alive in tokens.items() if not alive]
        for token in gone:
            self._roll_back(token)
        return bool(gone)

    # ------------------------------------------------------------------ guards

    def read_guard(self, name: str) -> int:
        """The revision of guard ``name`` (``/registry/svclab.dev/guards/NAME``; 0: never
        moved), read from etcd itself, with the cache then brought up to etcd's present
        (so what was read from the store afterwards includes every write that moved the
        guard up to the revision returned)."""
        kvs = self._range(GUARD_PREFIX + name).get("kvs")
        self._refresh(force=True)
        return int(kvs[0]["mod_revision"]) if kvs else 0

    def guard(self, name: str, revision: int) -> None:
        """In a transaction: commit only if guard ``name`` is still at ``revision`` (as
        :meth:`read_guard` returned it), and move it with the commit. Writers that
        derive a write from state several of them share (the API server replicas'
        allocators: kube-apiserver's ``/registry/ranges/...`` keys serve the same end)
        read the guard, derive, and write under it: of two racing writers, one commits
        and the other gets :class:`GuardMovedError`, reads again and retries. Only for a
        transaction that fits one Txn (a few objects); a larger one is refused."""
        if self._txn is None:
            raise RuntimeError("EtcdStore.guard is only meaningful inside a transaction")
        self._txn.guards[GUARD_PREFIX + name] = revision

    # ------------------------------------------------------------------ records

    def get_record(self, name: str) -> dict[str, Any] | None:
        """One of svclab's own records (``cluster``: the Cluster document)."""
        kvs = self._range(RECORD_PREFIX + name).get("kvs")
        return json.loads(unb64(kvs[0]["value"])) if kvs else None

    def put_record(self, name: str, data: dict[str, Any]) -> None:
        self._call("/kv/put", {"key": b64(RECORD_PREFIX + name), "value": b64(json.dumps(data))})

    def delete_everything(self) -> None:
        """Remove every svclab key (objects, records, marker): undoes a first apply that
        failed on a cluster that was empty."""
        for res in sorted(set(RESOURCES.values())):
            p = PREFIX + res + "/"
            self._call("/kv/deleterange", {"key": b64(p), "range_end": prefix_end(p)})
        p = RECORD_PREFIX.rsplit("records/", 1)[0]
        self._call("/kv/deleterange", {"key": b64(p), "range_end": prefix_end(p)})
        self._reset(0)

    def flush(self) -> None:
        """Nothing to do: every write outside a transaction is committed when it returns."""

    def close(self) -> None:
        self._closed = True
        self.client.close()
