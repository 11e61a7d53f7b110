"""A window of node starts in flight: how the live plane paces its nodes' agents.

A node's kubelet starts with a TLS handshake, a LIST and a WATCH per informer. Started
one at a time (each once the previous had listed), 500 nodes took minutes on a busy
host and 5,000 most of an hour, the server idle between the round trips; started all
at once, thousands of handshakes and LISTs would queue on the server at the same
instant and time out. :class:`StartWindow` keeps at most ``size`` starts in flight.

Contract: a start admitted with :meth:`StartWindow.admit` is in flight until every
informer it names has listed (``synced`` set) or ``wait`` seconds (on ``clock``) have
passed since it was admitted, whichever comes first. :meth:`StartWindow.wait_for_room`
returns once fewer than ``size`` starts are in flight (True), or False when ``stop`` is
set first. ``size`` 1 is the one-at-a-time pacing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from control.informers.informer import SharedInformer


class StartWindow:
    """At most ``size`` starts in flight (see the module docstring)."""

    #: seconds between checks while the window is full (an informer's list ending wakes
    #: the wait on the oldest start sooner)
    POLL = 0.05

    def __init__(self, size: int, wait: float, clock: Callable[[], float] = time.monotonic) -> None:
        if size < 1:
            raise ValueError(f"a start window holds at least one start, not {size}")
        self.size = size
        self.wait = wait
        self.clock = clock
        self._flight: list[tuple[float, list[SharedInformer]]] = []

    def admit(self, informers: Iterable[SharedInformer]) -> None:
        """A start whose informers are ``informers`` is now in flight."""
        self._flight.append((self.clock() + self.wait, list(informers)))

    def in_flight(self) -> int:
        """Starts still in flight (the others are forgotten)."""
        now = self.clock()
        self._flight = [
            (due, infs)
            for due, infs in self._flight
            if now < due and not all(inf.synced.is_set() for inf in infs)
        ]
        return len(self._flight)

    def wait_for_room(self, stop: threading.Event) -> bool:
        """Block until fewer than ``size`` starts are in flight (True) or ``stop`` is set
        (False)."""
        while not stop.is_set():
            if self.in_flight() < self.size:
                return True
            due, infs = self._flight[0]
            pending = next((inf for inf in infs if not inf.synced.is_set()), None)
            left = max(0.0, min(self.POLL, due - self.clock()))
            if pending is not None:
                pending.synced.wait(left)
            else:
                stop.wait(left)
        return False


__all__ = ["StartWindow"]
