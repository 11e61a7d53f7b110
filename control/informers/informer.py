"""Shared informers and reflectors (client-go's ``tools/cache``), thread-based.

A :class:`Reflector` keeps one :class:`SharedInformer` current through a
:class:`~control.informers.listwatch.ListerWatcher`: it lists, then watches from the
list's revision; a watch that ends is resumed from the last revision seen (an event's
or a bookmark's); a 410 Gone (:class:`~netmodel.errors.CompactedError`) makes it list
again. A list or watch that fails (the API server is away) is tried again after an
exponential, jittered, capped back-off (client-go's: 0.8 s doubling up to 30 s). A relist is turned into events by :meth:`SharedInformer.replace`: ADDED for new
objects, MODIFIED for changed ones, DELETED for those gone, so handlers see a
subsequence of each object's states whatever happened to the watch.

A reflector told to stop ends its open watch at the next item the watch brings (an
event, or a bookmark: the server sends one every few seconds on an idle watch that asked
for them), as client-go's reflector stops its watcher when its stop channel closes; it
does not wait for the watch's timeout.

The informer's :class:`~control.informers.cache.ObjectCache` is updated before handlers
are called, and handlers are called outside the informer's lock, in revision order
(one reflector thread per informer). A handler may therefore see an event whose state
it already read from the cache: components are level-triggered and idempotent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from control.informers.backoff import Backoff
from control.informers.cache import Indexer, ObjectCache
from control.informers.listwatch import Bookmark, ListerWatcher, Listing
from control.store.base import WatchEvent
from netmodel.errors import CompactedError
from netmodel.objects import KubeObject

Handler = Callable[[Sequence[WatchEvent]], None]

log = logging.getLogger("svclab.informers")


class SharedInformer:
    """The cache of one kind (optionally narrowed by a field selector) shared by the
    components of one identity, and the handlers to tell."""

    def __init__(
        self,
        kind: str,
        *,
        field_selector: str | None = None,
        indexers: dict[str, Indexer] | None = None,
    ) -> None:
        self.kind = kind
        self.field_selector = field_selector
        self.cache = ObjectCache(indexers)
        self.synced = threading.Event()
        #: the revision of the last listing or event applied
        self.revision = 0
        self._handlers: list[Handler] = []
        self._lock = threading.Lock()

    def add_handler(self, handler: Handler) -> None:
        # a new list: a reflector thread may be iterating over the old one
        self._handlers = [*self._handlers, handler]

    def remove_handler(self, handler: Handler) -> None:
        """Stop telling ``handler`` (a component that stopped); absent: nothing to do."""
        self._handlers = [h for h in self._handlers if h != handler]

    def objects(self) -> list[KubeObject]:
        """A snapshot of the cache (sorted by key)."""
        with self._lock:
            return self.cache.list(self.kind)

    def replace(self, listing: Listing) -> list[WatchEvent]:
        """Make the cache equal ``listing``; tell handlers what that changed."""
        events: list[WatchEvent] = []
        with self._lock:
            listed = {o.key: o for o in listing.objects}
            for old in self.cache.list(self.kind):
                if old.key not in listed:
                    self.cache.remove(old.kind, old.key)
                    events.append(WatchEvent("DELETED", old, listing.revision))
            for key in sorted(listed):
                obj = listed[key]
                prev = self.cache.put(obj)
                if prev is None:
                    events.append(WatchEvent("ADDED", obj, obj.resource_version))
                elif prev.resource_version != obj.resource_version:
                    events.append(WatchEvent("MODIFIED", obj, obj.resource_version))
            self.revision = listing.revision
        self.synced.set()
        self._notify(events)
        return events

    def deliver(self, events: Sequence[WatchEvent]) -> None:
        """Apply watch events of this kind, in order, then tell handlers."""
        with self._lock:
            for ev in events:
                self.cache.apply(ev)
                self.revision = max(self.revision, ev.revision)
        self._notify(events)

    def _notify(self, events: Sequence[WatchEvent]) -> None:
        if events:
            for h in self._handlers:
                h(events)


class Reflector:
    """Keeps ``informer`` current from ``lw``; see the module docstring.

    :meth:`step` is one list (when needed) or one watch call, so tests drive it
    deterministically; :meth:`run` loops until ``stop`` is set, waiting ``backoff``
    seconds (doubling up to ``max_backoff``) after an error."""

    def __init__(
        self,
        lw: ListerWatcher,
        informer: SharedInformer,
        *,
        watch_timeout: float = 30.0,
        name: str = "",
    ) -> None:
        self.lw = lw
        self.informer = informer
        self.watch_timeout = watch_timeout
        self.name = name or informer.kind
        self.revision: int | None = None
        self.lists = 0
        self.watches = 0
        self.gone = 0

    def step(self, stop: threading.Event | None = None) -> int:
        """List if there is no revision to watch from, else watch once (until the watch
        ends, or until ``stop`` is set: checked at each item the watch brings). Returns
        the number of events given to the informer."""
        inf = self.informer
        if self.revision is None:
            t0 = time.perf_counter()
            listing = self.lw.list(inf.kind, field_selector=inf.field_selector)
            events = inf.replace(listing)
            self.revision = listing.revision
            self.lists += 1
            log.debug(
                "reflector %s: listed %d %s at revision %d (%d changes) in %.1f ms",
                self.name,
                len(listing.objects),
                inf.kind,
                listing.revision,
                len(events),
                (time.perf_counter() - t0) * 1e3,
            )
            return len(events)
        self.watches += 1
        n = 0
        watch = self.lw.watch(
            inf.kind,
            self.revision,
            field_selector=inf.field_selector,
            timeout=self.watch_timeout,
        )
        try:
            try:
                for item in watch:
                    if isinstance(item, Bookmark):
                        self.revision = max(self.revision, item.revision)
                    else:
                        inf.deliver((item,))
                        self.revision = item.revision
                        n += 1
                    if stop is not None and stop.is_set():
                        break
            finally:  # a generator's close ends its request (the HTTP stream is released)
                close = getattr(watch, "close", None)
                if close is not None:
                    close()
        except CompactedError as e:
            self.gone += 1
            log.info(
                "reflector %s: watch from %s gone (%s); relisting", self.name, self.revision, e
            )
            self.revision = None
        return n

    def run(self, stop: threading.Event, *, backoff: float = 0.8, max_backoff: float = 30.0) -> None:
        """Step until ``stop``; after an error wait as client-go's reflector does: from
        ``backoff`` seconds, doubling, jittered by up to as much again, capped at
        ``max_backoff`` (:class:`~control.informers.backoff.Backoff`); a step that
        succeeds starts the back-off again. Each wait is logged (WARNING)."""
        delays = Backoff(backoff, cap=max_backoff)
        while not stop.is_set():
            try:
                self.step(stop)
                delays.reset()
            except Exception as e:  # the API is unreachable or refused: retry, never die
                if stop.is_set():
                    return
                delay = delays.next()
                log.warning(
                    "reflector %s: %s: %s (retrying in %.1fs)",
                    self.name,
                    type(e).__name__,
                    e,
                    delay,
                )
                stop.wait(delay)


__all__ = ["Handler", "Reflector", "SharedInformer"]
