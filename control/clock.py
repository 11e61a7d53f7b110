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


def rfc3339_nano(t: float) -> str:
    """Go's ``time.RFC3339Nano`` of ``t`` in UTC (what upstream writes in the
    last-change-trigger-time annotation): the fraction of a second to the microsecond,
    trailing zeros dropped, none at all for a whole second (``2026-01-01T00:00:00.25Z``)."""
    whole = _dt.datetime.fromtimestamp(t, tz=_dt.UTC)
    text = whole.strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{whole.microsecond:06d}".rstrip("0")
    return f"{text}.{frac}Z" if frac else f"{text}Z"


def parse_rfc3339_nano(text: str) -> float:
    """The time in an RFC 3339 timestamp in UTC with or without a fraction of a second
    (``...:05Z``, ``...:05.123456789Z``; digits past the microsecond are dropped), as
    Unix seconds. ValueError for any other format."""
    if not text.endswith("Z"):
        raise ValueError(f"not an RFC 3339 UTC time: {text!r}")
    head, dot, frac = text[:-1].partition(".")
    if dot and (not frac.isdigit() or len(frac) > 9):
        raise ValueError(f"not an RFC 3339 UTC time: {text!r}")
    base = _dt.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=_dt.UTC)
    return base.timestamp() + (int(frac[:6].ljust(6, "0")) / 1e6 if frac else 0.0)
