"""A live component's inbox (control/live.py): an informer shared by many components
(every kube-proxy's Service and EndpointSlice informers) hands each its events without
waiting for any of them to end a sync; each component then handles its events in the
order they came, never while it syncs.

Two components share one real :class:`SharedInformer`; the first one's agent holds its
sync open (until the test lets it go). An event delivered meanwhile, from another
thread as a reflector delivers it, must reach the second component at once, and the
first after its sync."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from control.informers import SharedInformer
from control.informers.listwatch import Listing
from control.live import LiveComponent
from control.store.base import WatchEvent
from netmodel.objects import Container, ObjectMeta, Pod, PodSpec

WAIT = 30.0  # seconds: a liveness bound for threads, not a timing measure


def _pod(name: str, rv: int) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default", resource_version=str(rv)),
        spec=PodSpec(containers=[Container(name="c", image="nginx")]),
    )


class GatedAgent:
    """An agent (kinds/handle/sync/pending) that keeps the names it was handed, and
    whose sync, while ``gate`` is not set, waits for it (``syncing`` says it does)."""

    kinds = ("Pod",)

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.name = "gated"
        self.gate = gate
        self.syncing = threading.Event()
        self.in_sync = False
        self.handled: list[str] = []
        self.overlaps = 0
        self.todo = 0
        self.seen = threading.Condition()

    def handle(self, events: Sequence[WatchEvent]) -> None:
        if self.in_sync:
            self.overlaps += 1
        with self.seen:
            self.handled += [e.object.name for e in events]
            self.seen.notify_all()
        self.todo += len(events)

    def pending(self) -> int:
        return self.todo

    def sync(self) -> int:
        if not self.todo:
            return 0
        self.in_sync = True
        try:
            if self.gate is not None:
                self.syncing.set()
                assert self.gate.wait(WAIT), "the test never let the sync go"
            self.todo = 0
            return 1
        finally:
            self.in_sync = False

    def wait_for(self, name: str) -> bool:
        with self.seen:
            return self.seen.wait_for(lambda: name in self.handled, WAIT)


def test_a_shared_informer_never_waits_for_a_component_in_a_sync() -> None:
    inf = SharedInformer("Pod")
    gate = threading.Event()
    slow, fast = GatedAgent(gate), GatedAgent()
    comps = [LiveComponent(f"c{i}", a, [inf]) for i, a in enumerate((slow, fast))]
    stop = threading.Event()
    threads = [threading.Thread(target=c.run, args=(stop,), daemon=True) for c in comps]
    for t in threads:
        t.start()
    try:
        inf.replace(Listing([], 1))
        assert all(c.started.wait(WAIT) for c in comps)
        inf.deliver([WatchEvent("ADDED", _pod("a", 2), 2)])
        assert slow.syncing.wait(WAIT)  # the slow component now syncs "a", held open

        # a reflector delivers the next event: it must not wait for the slow sync
        reflector = threading.Thread(
            target=inf.deliver, args=([WatchEvent("ADDED", _pod("b", 3), 3)],), daemon=True
        )
        reflector.start()
        reflector.join(WAIT)
        assert not reflector.is_alive(), "the informer waited for a component's sync"
        assert fast.wait_for("b")  # the other component got it meanwhile
        assert "b" not in slow.handled  # the slow one gets it after its sync

        gate.set()
        assert slow.wait_for("b")
        assert slow.handled == ["a", "b"] and fast.handled == ["a", "b"]
        assert slow.overlaps == 0 and fast.overlaps == 0  # never handled during a sync
    finally:
        gate.set()
        stop.set()
        for c in comps:
            c.wake.set()
        for t in threads:
            t.join(WAIT)
