"""Reflector + shared informer over the in-process ListerWatcher: list, watch from the
list's revision, relist after compaction (410 Gone), field selectors, relist diffs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from control.informers import (
    Bookmark,
    Reflector,
    SharedInformer,
    StoreListerWatcher,
    field_matcher,
)
from control.store.base import WatchEvent
from control.store.memory import MemoryStore
from netmodel.errors import CompactedError, InputError
from netmodel.objects import Container, ObjectMeta, Pod, PodSpec


def _pod(name: str, node: str = "", labels: dict[str, str] | None = None) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default", labels=labels or {}),
        spec=PodSpec(containers=[Container(name="c", image="nginx")], node_name=node or None),
    )


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def __call__(self, events: Sequence[WatchEvent]) -> None:
        self.events += [(e.type, e.object.name) for e in events]


def _informer(
    store: MemoryStore, selector: str | None = None
) -> tuple[SharedInformer, Reflector, Seen]:
    inf = SharedInformer("Pod", field_selector=selector)
    seen = Seen()
    inf.add_handler(seen)
    return inf, Reflector(StoreListerWatcher(store), inf, watch_timeout=0), seen


def test_lists_then_watches_from_the_listing_revision() -> None:
    store = MemoryStore()
    store.create(_pod("a"))
    inf, ref, seen = _informer(store)
    assert not inf.synced.is_set()
    assert ref.step() == 1  # the list
    assert inf.synced.is_set() and ref.revision == store.revision
    assert seen.events == [("ADDED", "a")]
    store.create(_pod("b"))
    a = store.get("Pod", "default/a")
    store.update(a.with_meta(labels={"x": "1"}))
    store.delete("Pod", "default/b")
    assert ref.step() == 3  # one watch, from the listing's revision: nothing listed twice
    assert seen.events[1:] == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert [p.name for p in inf.objects()] == ["a"]
    assert inf.cache.get("Pod", "default/a").labels == {"x": "1"}  # type: ignore[union-attr]
    assert ref.lists == 1 and ref.revision == store.revision


def test_relists_after_compaction_and_turns_the_gap_into_events() -> None:
    store = MemoryStore()
    for n in "abc":
        store.create(_pod(n))
    inf, ref, seen = _informer(store)
    ref.step()
    # while the informer is away: b deleted, c changed, d created, then history compacted
    store.delete("Pod", "default/b")
    store.update(store.get("Pod", "default/c").with_meta(labels={"v": "2"}))
    store.create(_pod("d"))
    store.compact(store.revision)
    seen.events.clear()
    assert ref.step() == 0  # the watch is gone (410): no events, revision forgotten
    assert ref.gone == 1 and ref.revision is None
    ref.step()  # relist
    assert ref.lists == 2 and ref.revision == store.revision
    assert sorted(seen.events) == [("ADDED", "d"), ("DELETED", "b"), ("MODIFIED", "c")]
    assert [p.name for p in inf.objects()] == ["a", "c", "d"]
    # and it watches again from there
    store.create(_pod("e"))
    assert ref.step() == 1 and seen.events[-1] == ("ADDED", "e")


def test_store_lister_watcher_raises_gone_for_a_compacted_revision() -> None:
    store = MemoryStore()
    store.create(_pod("a"))
    store.create(_pod("b"))
    store.compact(2)
    lw = StoreListerWatcher(store)
    with pytest.raises(CompactedError):
        list(lw.watch("Pod", 1, timeout=0))
    assert list(lw.watch("Pod", 2, timeout=0)) == [Bookmark(2)]


def test_field_selector_narrows_list_and_watch_and_sends_transitions() -> None:
    store = MemoryStore()
    store.create(_pod("mine", node="n1"))
    store.create(_pod("other", node="n2"))
    store.create(_pod("pending"))
    inf, ref, seen = _informer(store, "spec.nodeName=n1")
    ref.step()
    assert seen.events == [("ADDED", "mine")]
    # a pod bound to n1 appears to the n1 watcher (ADDED), others stay invisible
    p = store.get("Pod", "default/pending")
    assert isinstance(p, Pod)
    store.update(p.evolve(spec=p.spec.evolve(node_name="n1")))
    store.update(store.get("Pod", "default/other").with_meta(labels={"x": "y"}))
    store.delete("Pod", "default/other")
    ref.step()
    assert seen.events[1:] == [("MODIFIED", "pending")]
    assert [o.name for o in inf.objects()] == ["mine", "pending"]
    # a pod created unbound, then bound: ADDED when it starts to match
    store.create(_pod("late"))
    late = store.get("Pod", "default/late")
    assert isinstance(late, Pod)
    store.update(late.evolve(spec=late.spec.evolve(node_name="n1")))
    ref.step()
    assert seen.events[-1] == ("ADDED", "late")


def test_field_matcher_terms() -> None:
    m = field_matcher("metadata.namespace=default,status.phase!=Running")
    assert m is not None and m(_pod("x"))
    assert field_matcher(None) is None
    with pytest.raises(InputError, match=r"field label not supported: spec\.foo"):
        field_matcher("spec.foo=1")


def test_handlers_run_after_the_cache_is_updated() -> None:
    store = MemoryStore()
    inf, ref, _ = _informer(store)
    ref.step()
    seen_in_cache: list[bool] = []
    inf.add_handler(
        lambda evs: seen_in_cache.extend(
            inf.cache.get("Pod", e.object.key) is not None for e in evs
        )
    )
    store.create(_pod("a"))
    ref.step()
    assert seen_in_cache == [True]
