"""The work queue every controller and agent hands its keys through (client-go's
``workqueue``: a FIFO with dirty/processing sets, plus a rate-limited delaying queue).

Guarantees (tests/control/informers/test_workqueue.py checks each):

* ``add`` of a key that is already queued does nothing: duplicates collapse.
* A key handed out by ``get`` is *processing* until ``done``. Adding it meanwhile marks
  it dirty and ``done`` puts it back at the end of the queue, so a key is never
  processed twice at once and no add is lost.
* ``requeue`` (a failed reconcile) counts one more consecutive failure and adds the key
  again after the delay the :class:`RateLimiter` gives for that count; ``forget`` (a
  success) resets the count. Delayed keys become visible to ``len`` and ``get`` once
  the injected clock reaches their time.

The deterministic runner uses the default :class:`NoDelay` limiter (a failed key is
retried in the next round, as before); the live driver installs
:class:`ExponentialBackoff`. The queue is not thread-safe: one driver thread (or a lock
the driver holds) owns it.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Protocol

from control.clock import Clock, WallClock


class RateLimiter(Protocol):
    """How long to wait before retry number ``failures`` (1 = the first retry)."""

    def delay(self, failures: int) -> float: ...


class NoDelay:
    """Retry at once (the deterministic runner: the next round retries)."""

    def delay(self, failures: int) -> float:
        return 0.0


class ExponentialBackoff:
    """client-go's ItemExponentialFailureRateLimiter: ``base * 2**(failures-1)``, capped."""

    def __init__(self, base: float = 0.005, cap: float = 30.0) -> None:
        if base < 0 or cap < base:
            raise ValueError(f"bad backoff: base={base} cap={cap}")
        self.base = base
        self.cap = cap

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return min(self.cap, self.base * (2.0 ** min(failures - 1, 62)))


class WorkQueue:
    """A rate-limited FIFO of keys for one consumer; see the module docstring."""

    def __init__(self, limiter: RateLimiter | None = None, clock: Clock | None = None) -> None:
        self._queue: deque[str] = deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._waiting: list[tuple[float, int, str]] = []  # (ready at, seq, key) heap
        self._seq = 0
        self.limiter: RateLimiter = limiter or NoDelay()
        self.clock: Clock = clock or WallClock()

    def use(self, limiter: RateLimiter, clock: Clock) -> None:
        """Switch the retry policy (the live driver does, before any key is queued)."""
        self.limiter = limiter
        self.clock = clock

    def __len__(self) -> int:
        if self._waiting:
            self._promote()
        return len(self._queue)

    def __contains__(self, key: object) -> bool:
        return key in self._queued

    def add(self, key: str) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)

    def add_after(self, key: str, delay: float) -> None:
        """Add ``key`` once ``delay`` seconds have passed on the clock (at once if <= 0)."""
        if delay <= 0:
            self.add(key)
            return
        self._seq += 1
        heapq.heappush(self._waiting, (self.clock.now() + delay, self._seq, key))

    def _promote(self) -> None:
        now = self.clock.now()
        while self._waiting and self._waiting[0][0] <= now:
            self.add(heapq.heappop(self._waiting)[2])

    def next_ready_in(self) -> float | None:
        """Seconds until the earliest delayed key is due (None: nothing delayed)."""
        if not self._waiting:
            return None
        return max(0.0, self._waiting[0][0] - self.clock.now())

    def get(self) -> str:
        """The next key (IndexError when none is ready); processing until :meth:`done`."""
        if self._waiting:
            self._promote()
        key = self._queue.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def requeue(self, key: str) -> int:
        """Count one more failure of ``key`` and add it again after the limiter's delay;
        returns the count."""
        n = self._failures.get(key, 0) + 1
        self._failures[key] = n
        self.add_after(key, self.limiter.delay(n))
        return n

    def num_requeues(self, key: str) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def clear(self) -> None:
        self._queue.clear()
        self._queued.clear()
        self._dirty.clear()
        self._failures.clear()
        self._waiting.clear()


__all__ = ["ExponentialBackoff", "NoDelay", "RateLimiter", "WorkQueue"]
