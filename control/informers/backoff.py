"""Exponential back-off with jitter, capped: client-go's ``wait.Backoff`` as its
reflector and REST client use it.

Each :meth:`Backoff.next` returns the wait before the next attempt: the current step
``d`` stretched by up to ``jitter`` of itself (a uniform ``d * (1 + jitter * U[0,1))``,
so many clients that failed together do not come back together), never more than
``cap``; then the step grows by ``factor`` (up to ``cap``). :meth:`Backoff.reset`
starts again from ``initial`` (after a success).
"""

from __future__ import annotations

import random


class Backoff:
    """See the module docstring. Not thread-safe: one per retrying loop."""

    def __init__(
        self,
        initial: float,
        *,
        factor: float = 2.0,
        jitter: float = 1.0,
        cap: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        if initial <= 0 or factor < 1 or jitter < 0 or cap < initial:
            raise ValueError("Backoff needs 0 < initial <= cap, factor >= 1, jitter >= 0")
        self.initial = initial
        self.factor = factor
        self.jitter = jitter
        self.cap = cap
        self.attempts = 0
        self._step = initial
        self._rng = rng or random.Random()

    def next(self) -> float:
        """The wait before the next attempt (and the step grows)."""
        wait = min(self.cap, self._step * (1 + self.jitter * self._rng.random()))
        self._step = min(self.cap, self._step * self.factor)
        self.attempts += 1
        return wait

    def reset(self) -> None:
        self._step = self.initial
        self.attempts = 0


__all__ = ["Backoff"]
