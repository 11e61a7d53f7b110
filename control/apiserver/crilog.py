"""Container logs in kubelet's CRI logging format, and what kubelet does with them for
``kubectl logs`` (its ``ReadLogs``): parse, filter (``tailLines``, ``since``), render
(``timestamps``) and cut (``limitBytes``).

A CRI log file holds one record a line::

    <RFC 3339 timestamp, nanoseconds, UTC> <stdout|stderr> <F|P> <text>

``F`` ends a line of the container's output; ``P`` (partial) is a piece of a line too
long for one record, continued by the next record(s) of the same stream. Output joins
them: a ``P`` record's text is written without a line end.

kubelet's rules, which this module keeps:

* ``tailLines=N`` starts at the N-th line from the end of the *file* (records, not
  joined lines), then the other filters apply to what follows;
* ``since`` (``sinceSeconds`` back from now, or ``sinceTime``) skips records older than
  it (``sinceTime`` reaches kubelet in RFC 3339 to the second: its fraction is dropped);
* ``timestamps`` prefixes each output line with its first record's time in Go's
  ``RFC3339Nano`` (trailing zeros of the fraction dropped) and a space;
* ``limitBytes`` stops the output after that many bytes, even inside a line;
* a malformed line is skipped (kubelet logs it and goes on): :func:`parse_records`
  reports each one with the file and line number.

Pure functions over bytes: no I/O here.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "CRILogError",
    "Record",
    "Renderer",
    "format_rfc3339nano",
    "parse_record",
    "parse_records",
    "parse_rfc3339",
    "render",
    "tail",
]

_STAMP = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d\d):(\d\d))"
)
_STREAMS = (b"stdout", b"stderr")
_TAGS = (b"F", b"P")
NS = 1_000_000_000


class CRILogError(ValueError):
    """A line that is not a CRI log record; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Record:
    """One CRI log record: its time (nanoseconds since the epoch, UTC), its stream,
    whether it is a partial line (``P``) and its text (without the line end)."""

    time_ns: int
    stream: str
    partial: bool
    text: bytes


def parse_rfc3339(text: str, *, fraction: bool = True) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time (``2024-05-01T10:00:00.5Z``,
    ``...+02:00``); ``fraction=False`` drops the fraction of a second. ValueError when
    ``text`` is not one."""
    m = _STAMP.fullmatch(text)
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 60):
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    if day > calendar.monthrange(year, month)[1]:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    secs = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if m.group(9):
        offset = (int(m.group(10)) * 60 + int(m.group(11))) * 60
        secs -= offset if m.group(9) == "+" else -offset
    frac = int((m.group(7) or "").ljust(9, "0")) if fraction and m.group(7) else 0
    return secs * NS + frac


def format_rfc3339nano(time_ns: int) -> str:
    """Go's ``time.RFC3339Nano`` of a UTC time: ``2024-05-01T10:00:00.5Z`` (the fraction's
    trailing zeros dropped, no fraction when it is zero)."""
    secs, frac = divmod(time_ns, NS)
    y, mo, d, h, mi, s = _utc(secs)
    base = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}"
    digits = f"{frac:09d}".rstrip("0")
    return f"{base}.{digits}Z" if digits else f"{base}Z"


def _utc(secs: int) -> tuple[int, int, int, int, int, int]:
    t = time.gmtime(secs)
    return t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec


def parse_record(line: bytes, where: str = "") -> Record:
    """One record from a line of a CRI log file (without its ``\\n``). ``where``
    (``FILE:LINE``) prefixes the error of a malformed line."""
    parts = line.split(b" ", 3)
    prefix = f"{where}: " if where else ""
    if len(parts) < 3:
        raise CRILogError(f"{prefix}not a CRI log record (want 'TIME STREAM F|P TEXT')")
    stamp, stream, tag = parts[0], parts[1], parts[2]
    try:
        time_ns = parse_rfc3339(stamp.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise CRILogError(f"{prefix}bad timestamp {stamp[:40]!r}") from None
    if stream not in _STREAMS:
        raise CRILogError(f"{prefix}unknown stream {stream[:20]!r} (stdout or stderr)")
    if tag not in _TAGS:
        raise CRILogError(f"{prefix}unknown tag {tag[:20]!r} (F or P)")
    text = parts[3] if len(parts) == 4 else b""
    return Record(time_ns, stream.decode(), tag == b"P", text)


def parse_records(
    data: bytes, where: str = "", *, first_line: int = 1, errors: list[str] | None = None
) -> list[Record]:
    """The records of ``data``, complete lines only (the caller keeps any unfinished last
    line for later). A malformed line is skipped, as kubelet skips it; its error
    (``FILE:LINE: why``) goes to ``errors`` when given. ``first_line``: the line number
    of ``data``'s first line in the file."""
    out: list[Record] = []
    lines = data.split(b"\n")
    for i, line in enumerate(lines[:-1]):  # the last piece has no line end yet
        try:
            out.append(parse_record(line, f"{where}:{first_line + i}" if where else ""))
        except CRILogError as e:
            if errors is not None:
                errors.append(str(e))
    return out


def tail(records: list[Record], n: int | None) -> list[Record]:
    """The last ``n`` records (file lines), all of them for None."""
    if n is None:
        return records
    return records[len(records) - n :] if n else []


class Renderer:
    """Turns records into the bytes ``kubectl logs`` receives, across calls (a follow
    renders as records come): a record older than ``since_ns`` is skipped, partial
    records join the next one, ``timestamps`` prefixes each output line once (a record
    continuing a partial one gets none, whether or not that one was skipped, as in
    kubelet), ``limit`` (bytes; None: no limit) cuts the output."""

    def __init__(
        self, *, timestamps: bool = False, since_ns: int | None = None, limit: int | None = None
    ) -> None:
        self.timestamps = timestamps
        self.since_ns = since_ns
        self.left = limit
        self._at_line_start = True

    @property
    def exhausted(self) -> bool:
        """Whether ``limitBytes`` has been reached (nothing more will be written)."""
        return self.left is not None and self.left <= 0

    def feed(self, records: Iterable[Record]) -> bytes:
        chunks: list[bytes] = []
        for r in records:
            start, self._at_line_start = self._at_line_start, not r.partial
            if self.since_ns is not None and r.time_ns < self.since_ns:
                continue
            if start and self.timestamps:
                chunks.append(format_rfc3339nano(r.time_ns).encode() + b" ")
            chunks.append(r.text if r.partial else r.text + b"\n")
        out = b"".join(chunks)
        if self.left is not None:
            out = out[: max(self.left, 0)]
            self.left -= len(out)
        return out


def render(
    records: Iterable[Record],
    *,
    timestamps: bool = False,
    since_ns: int | None = None,
    limit: int | None = None,
) -> bytes:
    """All of ``records`` as one output (see :class:`Renderer`)."""
    return Renderer(timestamps=timestamps, since_ns=since_ns, limit=limit).feed(records)
