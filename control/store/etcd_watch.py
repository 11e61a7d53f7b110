"""Reading svclab's history from etcd's watch stream.

etcd3gw's watch drops the ``compact_revision`` cancellation etcd sends when a watch
starts at a compacted revision, so svclab reads the stream itself
(:meth:`control.store.etcd_client.EtcdClient.watch`) and turns each etcd event under
``/registry/`` into a :class:`WatchEvent`:

* a put whose ``create_revision`` is its ``mod_revision`` is ADDED, another put
  MODIFIED; the object is the value, its resourceVersion the event's revision;
* a delete is DELETED with the last stored state (``prev_kv``, asked for on every
  watch), at the deleting revision;
* keys that hold no svclab object (the marker, records, anything else) are skipped.
"""

from __future__ import annotations

from typing import Any

from control.store.base import EventType, WatchEvent, bulk
from control.store.etcd_client import EtcdClient, StoreUnavailableError
from control.store.etcd_layout import (
    MARKER_KEY,
    PREFIX,
    b64,
    decode_value,
    prefix_end,
    split_key,
    unb64,
)
from netmodel.errors import CompactedError


class HistoryCompactedError(CompactedError):
    """etcd no longer has the revision asked for; ``oldest`` is its compacted revision."""

    def __init__(self, message: str, oldest: int) -> None:
        super().__init__(message)
        self.oldest = oldest


def read_history(client: EtcdClient, since: int, until: int) -> list[WatchEvent]:
    """Every svclab event after ``since``, in revision order, at least up to ``until``
    (a marker revision: every svclab write puts the marker last, so its event closes
    the write). Raises HistoryCompactedError if etcd no longer has ``since``,
    StoreUnavailableError if the stream ends before ``until``."""
    events: list[WatchEvent] = []
    request = {
        "key": b64(PREFIX),
        "range_end": prefix_end(PREFIX),
        # from ``since`` itself, so that etcd refuses a compacted ``since``
        "start_revision": str(max(since, 1)),
        "prev_kv": True,
    }
    for msg in client.watch(request):
        compact = int(msg.get("compact_revision", 0) or 0)
        if compact:
            raise HistoryCompactedError(
                f"revision {since} has been compacted (oldest kept: {compact})", compact
            )
        if msg.get("canceled"):
            raise CompactedError(f"etcd cancelled the watch from revision {since}")
        done = False
        with bulk():
            for ev in msg.get("events", ()):
                kv = ev["kv"]
                rev = int(kv["mod_revision"])
                if rev <= since:
                    continue
                ekey = unb64(kv["key"]).decode()
                if ekey == MARKER_KEY:
                    done = rev >= until
                    continue
                event = to_event(ev, ekey, rev)
                if event is not None:
                    events.append(event)
        if done:
            return events
    raise StoreUnavailableError(
        f"etcd at {client.where}: the watch stream ended before revision {until}"
    )


def to_event(ev: dict[str, Any], ekey: str, rev: int) -> WatchEvent | None:
    """A WatchEvent from one event of etcd's stream (None: not a svclab object)."""
    where = split_key(ekey)
    if where is None:
        return None
    kind = where[0]
    kv = ev["kv"]
    if ev.get("type") == "DELETE":
        prev = ev.get("prev_kv")
        if not prev:  # the previous state was compacted away: nothing to show
            return None
        obj = decode_value(kind, unb64(prev["value"]), int(prev["mod_revision"]))
        return WatchEvent("DELETED", obj, rev)
    type_: EventType = "ADDED" if kv.get("create_revision") == kv["mod_revision"] else "MODIFIED"
    return WatchEvent(type_, decode_value(kind, unb64(kv["value"]), rev), rev)
