"""An injectable clock. The control plane never reads the wall clock directly, so tests
and the deterministic runner can drive time."""

from __future__ import annotations

import datetime as _dt
import functools
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class WallClock:
    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told (``advance``). Starts at 2026-01-01T00:00:00Z."""

    def __init__(self, start: float = 1767225600.0) -> None:
        self._t = start

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        self._t += seconds


def rfc3339(t: float) -> str:
    """Kubernetes' timestamp format (second precision, UTC)."""
    return _rfc3339(int(t))


@functools.lru_cache(maxsize=64)
def _rfc3339(t: int) -> str:
    # every Event and every write stamps the time; under a FakeClock it rarely changes
    return _dt.datetime.fromtimestamp(t, tz=_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> float:
    """The time :func:`rfc3339` wrote (``2026-01-01T00:00:00Z``), as Unix seconds.
    ValueError for any other format."""
    return _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC).timestamp()
