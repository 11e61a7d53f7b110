"""``-m limit``: the token bucket the kernel's xt_limit keeps per rule.

A bucket holds up to ``burst`` tokens and starts full; it refills at ``rate`` tokens per
second of the simulated clock (``Work.now``), never above ``burst``. A packet matches
when it can take a whole token, and takes it only when the evaluation commits (a trace
that explores branches or probes a packet does not drain the bucket).
"""

from __future__ import annotations

__all__ = ["TokenBucket"]


class TokenBucket:
    """The state of one ``-m limit --limit RATE --limit-burst BURST`` rule."""

    __slots__ = ("burst", "last", "rate", "tokens")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.last: float | None = None

    def take(self, now: float, commit: bool = True) -> bool:
        """Refill for the time since the last packet, then match if a token is there."""
        tokens = self.tokens
        if self.last is not None and now > self.last:
            tokens = min(float(self.burst), tokens + (now - self.last) * self.rate)
        if tokens < 1.0 - 1e-9:
            if commit:
                self.tokens, self.last = tokens, now
            return False
        if commit:
            self.tokens, self.last = tokens - 1.0, now
        return True
