"""``ListerWatcher``: how an informer reads one kind — a list, then a watch from the
list's revision. Two implementations keep one contract:

* :class:`StoreListerWatcher` reads an in-process :class:`~control.store.base.Store`
  (the deterministic runner, and tests of the live driver without a server);
* :class:`control.informers.http.HTTPListerWatcher` reads the Kubernetes REST API of
  ``svclab serve`` (``GET ...?watch=1&resourceVersion=N``), with a client certificate.

Contract:

* ``list(kind, field_selector=)`` returns every object of ``kind`` matching the
  selector and the revision the listing is consistent with.
* ``watch(kind, since, field_selector=, timeout=)`` yields, in revision order, the
  changes after ``since`` of the matching objects, until ``timeout`` seconds passed or
  the server ended the stream (then the caller watches again from the last revision it
  saw; a :class:`Bookmark` carries that revision without a change). It raises :class:`~netmodel.errors.CompactedError` (HTTP 410 Gone) when
  ``since`` is older than what the store keeps: the caller lists again.

Field selectors: ``field=value`` and ``field!=value`` terms joined by commas, over
``metadata.name``, ``metadata.namespace``, ``spec.nodeName`` and ``status.phase``, as
kube-apiserver evaluates them. An object that stops matching is sent as DELETED, one
that starts matching as ADDED (the watch cache's rule), where the previous state is
known to the watcher.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Protocol

from control.store.base import Store, WatchEvent
from netmodel.errors import InputError
from netmodel.objects import KubeObject


@dataclass(frozen=True, slots=True)
class Bookmark:
    """A watch BOOKMARK: nothing changed up to ``revision`` (resume from there)."""

    revision: int


@dataclass(frozen=True, slots=True)
class Listing:
    objects: list[KubeObject]
    revision: int


class ListerWatcher(Protocol):
    """See the module docstring."""

    def list(self, kind: str, *, field_selector: str | None = None) -> Listing: ...

    def watch(
        self,
        kind: str,
        since: int,
        *,
        field_selector: str | None = None,
        timeout: float = 60.0,
    ) -> Iterator[WatchEvent | Bookmark]: ...


# --------------------------------------------------------------------------- field selectors

_FIELDS: dict[str, Callable[[KubeObject], str]] = {
    "metadata.name": lambda o: o.name,
    "metadata.namespace": lambda o: o.namespace,
    "spec.nodeName": lambda o: str(getattr(getattr(o, "spec", None), "node_name", "") or ""),
    "status.phase": lambda o: str(getattr(getattr(o, "status", None), "phase", "") or ""),
}

Matcher = Callable[[KubeObject], bool]


def field_matcher(selector: str | None) -> Matcher | None:
    """A predicate for ``selector`` (None: everything matches). InputError for a field
    svclab does not index."""
    if not selector:
        return None
    terms: list[tuple[Callable[[KubeObject], str], str, bool]] = []
    for raw in selector.split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            field, value = term.split("!=", 1)
            negate = True
        else:
            field, _, value = term.partition("==" if "==" in term else "=")
            negate = False
        getter = _FIELDS.get(field.strip())
        if getter is None:
            raise InputError(f"field label not supported: {field.strip()}", field="fieldSelector")
        terms.append((getter, value.strip(), negate))

    def match(obj: KubeObject) -> bool:
        return all((get(obj) == value) != negate for get, value, negate in terms)

    return match


# --------------------------------------------------------------------------- in-process


class StoreListerWatcher:
    """A :class:`ListerWatcher` over an in-process store.

    ``watch`` returns the changes already in the store, then, while ``timeout`` lasts,
    polls every ``poll_interval`` seconds of wall time (``timeout=0``: no waiting, what
    deterministic tests use). :meth:`poll` is the non-blocking multi-kind read the
    deterministic runner makes once per component step."""

    def __init__(self, store: Store, *, poll_interval: float = 0.05) -> None:
        self.store = store
        self.poll_interval = poll_interval

    def list(self, kind: str, *, field_selector: str | None = None) -> Listing:
        match = field_matcher(field_selector)
        rev = self.store.revision
        objs = self.store.list(kind)
        if match is not None:
            objs = [o for o in objs if match(o)]
        return Listing(objs, rev)

    def poll(self, since: int, kinds: Collection[str]) -> builtins.list[WatchEvent]:
        """Every change of ``kinds`` after ``since`` (CompactedError if compacted)."""
        return self.store.watch(since, kinds)

    def watch(
        self,
        kind: str,
        since: int,
        *,
        field_selector: str | None = None,
        timeout: float = 60.0,
    ) -> Iterator[WatchEvent | Bookmark]:
        match = field_matcher(field_selector)
        deadline = time.monotonic() + timeout
        seen: dict[str, bool] = {}
        since = max(since, 0)
        while True:
            for ev in self.store.watch(since, (kind,)):
                since = ev.revision
                out = _selected(ev, match, seen)
                if out is not None:
                    yield out
            if time.monotonic() >= deadline:
                yield Bookmark(since)
                return
            time.sleep(self.poll_interval)


def _selected(ev: WatchEvent, match: Matcher | None, seen: dict[str, bool]) -> WatchEvent | None:
    """Apply a field selector to one event: drop it, pass it, or turn it into the
    ADDED/DELETED the selection change means (``seen``: what this watch sent so far)."""
    if match is None:
        return ev
    key = ev.object.key
    if ev.type == "DELETED":
        was_deleted = seen.pop(key, None)
        return ev if (was_deleted if was_deleted is not None else match(ev.object)) else None
    now = match(ev.object)
    # history unknown (changed before this watch began): no transition, as it is now
    was = seen.get(key, now if ev.type == "MODIFIED" else False)
    seen[key] = now
    if now and not was:
        return WatchEvent("ADDED", ev.object, ev.revision)
    if was and not now:
        return WatchEvent("DELETED", ev.object, ev.revision)
    return ev if now else None


__all__ = ["Bookmark", "ListerWatcher", "Listing", "StoreListerWatcher", "field_matcher"]
