"""Read a namespace's conntrack table back (``conntrack -L``) and parse it into the form
the emulator prints (:func:`dataplane.netfilter.conntrack.format_conntrack_l`), so the
two can be compared line by line.

A ``conntrack -L`` line::

    tcp      6 431999 ESTABLISHED src=10.244.1.2 dst=10.96.0.10 sport=40000 dport=80 \\
        src=10.244.2.3 dst=10.244.1.2 sport=8080 dport=40000 [ASSURED] mark=0 use=1

The remaining timeout and ``use`` count depend on timing, so :meth:`ConntrackEntry.key`
and :func:`normalize_line` leave them out; apply :func:`normalize_line` to both sides'
lines before comparing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dataplane.linux.netns import run_in
from netmodel.errors import BackendError

_FLAGS = ("[UNREPLIED]", "[ASSURED]", "[OFFLOAD]", "[HW_OFFLOAD]")


@dataclass(frozen=True, slots=True)
class ConntrackEntry:
    """One tracked connection. ``orig``/``reply`` hold the tuple fields in printed order
    (``src``, ``dst``, ``sport``, ``dport`` or ``type``, ``code``, ``id``)."""

    proto: str
    protonum: int
    timeout: int
    state: str | None
    orig: tuple[tuple[str, str], ...]
    reply: tuple[tuple[str, str], ...]
    unreplied: bool = False
    assured: bool = False
    mark: int = 0
    zone: int = 0
    extra: tuple[tuple[str, str], ...] = field(default=())

    def field(self, direction: str, name: str) -> str | None:
        items = self.orig if direction == "orig" else self.reply
        return dict(items).get(name)

    def render(self, *, timeout: int | None = None, use: int = 1) -> str:
        """The ``conntrack -L`` line (with ``timeout`` if given, else this entry's)."""
        parts = [f"{self.proto:<8} {self.protonum} {self.timeout if timeout is None else timeout}"]
        if self.state:
            parts.append(self.state)
        parts.append(" ".join(f"{k}={v}" for k, v in self.orig))
        if self.unreplied:
            parts.append("[UNREPLIED]")
        parts.append(" ".join(f"{k}={v}" for k, v in self.reply))
        if self.assured:
            parts.append("[ASSURED]")
        parts.append(f"mark={self.mark}")
        if self.zone:
            parts.append(f"zone={self.zone}")
        parts.append(f"use={use}")
        return " ".join(parts)

    def key(self) -> str:
        """The line without its volatile fields (timeout, use): comparable across
        backends and runs."""
        return normalize_line(self.render())


def parse_line(line: str) -> ConntrackEntry:
    """Parse one ``conntrack -L`` line; raises BackendError on a line of another form."""
    words = line.split()
    if len(words) < 4 or not words[1].isdigit() or not words[2].isdigit():
        raise BackendError(f"conntrack: unexpected line {line!r}")
    proto, protonum, timeout = words[0], int(words[1]), int(words[2])
    rest = words[3:]
    state = None
    if rest and "=" not in rest[0] and not rest[0].startswith("["):
        state = rest.pop(0)
    orig: list[tuple[str, str]] = []
    reply: list[tuple[str, str]] = []
    extra: list[tuple[str, str]] = []
    flags: set[str] = set()
    current = orig
    mark = zone = 0
    for w in rest:
        if w in _FLAGS:
            flags.add(w)
            continue
        k, _, v = w.partition("=")
        if k == "src" and any(key == "src" for key, _ in current):
            if current is orig:
                current = reply
            else:
                raise BackendError(f"conntrack: three tuples in {line!r}")
        if k == "mark":
            mark = int(v)
        elif k == "zone":
            zone = int(v)
        elif k == "use":
            continue
        elif k in ("src", "dst", "sport", "dport", "type", "code", "id") and current is orig:
            orig.append((k, v))
        elif k in ("src", "dst", "sport", "dport", "type", "code", "id"):
            reply.append((k, v))
        else:
            extra.append((k, v))
    if not orig or not reply:
        raise BackendError(f"conntrack: no original/reply tuple in {line!r}")
    return ConntrackEntry(
        proto=proto,
        protonum=protonum,
        timeout=timeout,
        state=state,
        orig=tuple(orig),
        reply=tuple(reply),
        unreplied="[UNREPLIED]" in flags,
        assured="[ASSURED]" in flags,
        mark=mark,
        zone=zone,
        extra=tuple(extra),
    )


def normalize_line(line: str) -> str:
    """A ``conntrack -L`` line with the timeout replaced by ``-`` and ``use=`` dropped,
    whitespace collapsed. Works on the emulator's lines and the kernel's alike."""
    words = line.split()
    if len(words) > 2:
        words[2] = "-"
    return " ".join(w for w in words if not w.startswith("use="))


def parse(text: str) -> list[ConntrackEntry]:
    return [parse_line(line) for line in text.splitlines() if line.strip()]


def list_entries(netns: str, *, family: str = "ipv4") -> list[ConntrackEntry]:
    """``conntrack -L -f FAMILY`` inside ``netns``, parsed. An empty table is ``[]``
    (conntrack prints its summary on stderr)."""
    proc = run_in(netns, ["conntrack", "-L", "-f", family])
    return parse(proc.stdout)


def flush(netns: str) -> None:
    """``conntrack -F`` inside ``netns``."""
    run_in(netns, ["conntrack", "-F"])
