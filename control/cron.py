"""CronJob schedules, as kube-controller-manager reads them (robfig/cron's standard
parser): five fields (minute, hour, day of month, month, day of week; numbers, names
JAN-DEC / SUN-SAT, ``*``, ``?``, ranges, lists, steps) or one of the macros
``@yearly``, ``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight``,
``@hourly``. Times are computed by croniter in the CronJob's ``timeZone`` (UTC when
unset), so daylight-saving changes fall as they do in that zone.

Refused, with the reason: a ``TZ=``/``CRON_TZ=`` prefix (kube: use ``timeZone``),
``@every`` (svclab does not evaluate it), and croniter's extensions that kube's parser
lacks (``L``, ``W``, ``#``, Jenkins' ``H``, a sixth field).
"""

from __future__ import annotations

import datetime as _dt
import re
import zoneinfo
from collections.abc import Iterator

from croniter import croniter

from netmodel.errors import InputError

MACROS = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
_FIELD = re.compile(r"[0-9A-Za-z*?/,\-]+")
_NAMES = re.compile(r"[A-Za-z]+")
_KNOWN_NAMES = frozenset(
    [
        "JAN",
        "FEB",
        "MAR",
        "APR",
        "MAY",
        "JUN",
        "JUL",
        "AUG",
        "SEP",
        "OCT",
        "NOV",
        "DEC",
        "SUN",
        "MON",
        "TUE",
        "WED",
        "THU",
        "FRI",
        "SAT",
    ]
)


class CronError(InputError):
    """A schedule kube's parser (or svclab) does not take; the message says why."""


def parse_schedule(schedule: str) -> str:
    """The schedule croniter evaluates (``?`` read as ``*``). Raises :class:`CronError`."""
    s = schedule.strip()
    if s.startswith(("TZ=", "CRON_TZ=")):
        raise CronError("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
    if s.startswith("@"):
        if s.startswith("@every"):
            raise CronError("svclab does not evaluate @every schedules")
        if s not in MACROS:
            raise CronError(f"unrecognized descriptor: {s}")
        return s
    fields = s.split()
    if len(fields) != 5:
        raise CronError(f"expected exactly 5 fields, found {len(fields)}: {s}")
    for f in fields:
        if not _FIELD.fullmatch(f):
            raise CronError(f"failed to parse {f!r}")
        for name in _NAMES.findall(f):
            if name.upper() not in _KNOWN_NAMES:
                raise CronError(f"failed to parse {f!r}: unknown name {name!r}")
    expr = " ".join(f.replace("?", "*") for f in fields)
    try:
        croniter(expr)
    except (ValueError, KeyError) as e:
        raise CronError(str(e)) from None
    return expr


def _zone(time_zone: str | None) -> _dt.tzinfo:
    return zoneinfo.ZoneInfo(time_zone) if time_zone else _dt.UTC


def times_after(schedule: str, time_zone: str | None, after: float) -> Iterator[float]:
    """The scheduled times strictly after ``after`` (Unix seconds), in order, forever."""
    start = _dt.datetime.fromtimestamp(after, tz=_zone(time_zone))
    it = croniter(parse_schedule(schedule), start)
    while True:
        yield float(it.get_next(float))


def next_after(schedule: str, time_zone: str | None, after: float) -> float:
    """The first scheduled time strictly after ``after``."""
    return next(times_after(schedule, time_zone, after))


def missed(
    schedule: str, time_zone: str | None, after: float, now: float, limit: int = 100
) -> tuple[float | None, int]:
    """The latest scheduled time in (``after``, ``now``] and how many there were (counted
    up to ``limit + 1``: kube's controller stops counting past 100 missed starts)."""
    latest: float | None = None
    n = 0
    for t in times_after(schedule, time_zone, after):
        if t > now:
            break
        latest = t
        n += 1
        if n > limit:
            # jump to the last one before now without counting further
            prev = croniter(
                parse_schedule(schedule), _dt.datetime.fromtimestamp(now, tz=_zone(time_zone))
            ).get_prev(float)
            latest = float(prev) if prev > after else latest
            break
    return latest, n
