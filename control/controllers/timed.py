"""Controllers with work due at times on an injected clock (deadlines, TTLs, schedules).

:class:`TimedController` keeps one wake-up time per key. Every :meth:`~TimedController.sync`
first queues the keys whose time came (earliest key order), then reconciles as any
controller does; so after ``clock.advance`` the next ``run_until_idle`` does what came
due. :meth:`~TimedController.pending` counts those due keys, and
:meth:`~TimedController.next_due` tells a driver when the next one comes.
"""

from __future__ import annotations

from control.clock import Clock
from control.controllers.base import APIClient, Controller
from control.events import Recorder


class TimedController(Controller):
    """A :class:`Controller` that also reconciles a key when its wake-up time comes.

    Subclasses set a key's time with :meth:`_wake_at` (the earliest wins) or by writing
    ``_timers[key]`` (replaces it), and drop it with ``_timers.pop(key, None)``."""

    def __init__(self, api: APIClient, recorder: Recorder, clock: Clock) -> None:
        super().__init__(api, recorder)
        self.clock = clock
        #: key -> clock time at which it must be reconciled again
        self._timers: dict[str, float] = {}

    def pending(self) -> int:
        return len(self.queue) + len(self._due())

    def _due(self) -> list[str]:
        if not self._timers:
            return []
        now = self.clock.now()
        return sorted(k for k, t in self._timers.items() if t <= now)

    def next_due(self) -> float | None:
        """The earliest wake-up time of any key, None when none is set."""
        return min(self._timers.values(), default=None)

    def sync(self) -> int:
        """Queue the keys whose time came (their timers end), then reconcile what is queued."""
        for key in self._due():
            del self._timers[key]
            self.queue.add(key)
        return super().sync()

    def _wake_at(self, key: str, t: float) -> None:
        """Reconcile ``key`` at clock time ``t`` at the latest (an earlier time set stays)."""
        cur = self._timers.get(key)
        self._timers[key] = t if cur is None else min(cur, t)
