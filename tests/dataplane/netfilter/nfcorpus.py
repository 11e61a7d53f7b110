"""The kernel-agreement corpus (``tests/data/netfilter-corpus/``): reading it, and
asking svclab's parsers about each entry.

An entry is one ``iptables-restore`` payload or one ``nft -f`` script. In a corpus file
each entry starts with a header line::

    #:: NAME expect=accept|refuse [legacy=accept|refuse] [table=T] [family=4|6]
        [svclab=unsupported]

``table=T`` wraps the entry's lines in ``*T`` ... ``COMMIT`` (iptables files only);
without it the body is the whole payload. ``expect`` is what the kernel's tools do with
the entry (the kernel test checks that it still is); ``legacy=`` says where the legacy
back end (``iptables-legacy-restore``) differs from the nf_tables one. svclab accepts
an entry only when every back end does. ``svclab=unsupported`` marks an
entry the kernel accepts and svclab refuses on purpose, naming the construct it does not
evaluate (an :class:`~netmodel.errors.UnsupportedRuleError`) — never for an entry the
kernel refuses. Lines before the first header are the file's notes (provenance).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from netmodel.errors import InputError, UnsupportedRuleError

CORPUS = Path(__file__).resolve().parents[2] / "data" / "netfilter-corpus"
_HEADER = re.compile(r"^#::\s+(\S+)((?:\s+\w+=\S+)*)\s*$")
_LINE = re.compile(r":(\d+):")


@dataclass(frozen=True)
class Entry:
    """One corpus entry: ``kind`` is ``iptables`` or ``nft``; ``text`` is exactly what
    the kernel's tool reads."""

    name: str
    kind: str
    family: int
    text: str
    expect: str
    unsupported: bool
    where: str
    expect_legacy: str = ""

    @property
    def svclab_expect(self) -> str:
        """What svclab must do: accept only what every back end accepts."""
        return "accept" if self.expect == self.legacy_expect == "accept" else "refuse"

    @property
    def legacy_expect(self) -> str:
        return self.expect_legacy or self.expect

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class Verdict:
    """What one parser did with an entry: accepted, or refused at ``line`` (None when
    the refusal names no line) with ``message``; ``unsupported`` for svclab's refusals
    of constructs it does not evaluate."""

    accepted: bool
    line: int | None = None
    message: str = ""
    unsupported: bool = False


def load(kind: str | None = None) -> list[Entry]:
    """Every entry of the corpus (of ``kind`` if given), in file order."""
    out: list[Entry] = []
    for path in sorted(CORPUS.glob("*/*")):
        k = path.parent.name
        if k not in ("iptables", "nft") or (kind and k != kind):
            continue
        out.extend(_read(path, k))
    names = [e.id for e in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"corpus: duplicate entry names {sorted(dup)}")
    return out


def _read(path: Path, kind: str) -> list[Entry]:
    entries: list[Entry] = []
    head: tuple[str, dict[str, str], int] | None = None
    body: list[str] = []

    def flush() -> None:
        if head is None:
            return
        name, opts, lineno = head
        while body and not body[-1].strip():
            body.pop()
        lines = list(body)
        if "table" in opts:
            lines = [f"*{opts['table']}", *lines, "COMMIT"]
        expect = opts.get("expect")
        if expect not in ("accept", "refuse"):
            raise ValueError(f"{path}:{lineno}: expect=accept|refuse required")
        unsupported = opts.get("svclab") == "unsupported"
        if unsupported and expect != "accept":
            raise ValueError(f"{path}:{lineno}: svclab=unsupported only for accepted entries")
        entries.append(
            Entry(
                name,
                kind,
                int(opts.get("family", "4")),
                "\n".join(lines) + "\n",
                expect,
                unsupported,
                f"{path.name}:{lineno}",
                opts.get("legacy", ""),
            )
        )

    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        m = _HEADER.match(raw)
        if m:
            flush()
            opts = dict(kv.split("=", 1) for kv in m.group(2).split())
            head, body = (m.group(1), opts, lineno), []
        elif raw.startswith("#::"):
            raise ValueError(f"{path}:{lineno}: bad entry header {raw!r}")
        elif head is not None:
            body.append(raw)
    flush()
    return entries


def svclab_verdict(e: Entry) -> Verdict:
    """Parse the entry with svclab's parser for its kind."""
    from dataplane.netfilter import rules as R
    from dataplane.netfilter.nft import parse_nft
    from dataplane.netfilter.parse import apply_restore

    try:
        if e.kind == "iptables":
            apply_restore(
                R.Ruleset(family=e.family),
                e.text,
                noflush=False,
                source="corpus",
                ipsets=ipset_names(),
            )
        else:
            parse_nft(e.text, source="corpus")
    except UnsupportedRuleError as err:
        return Verdict(False, _line(str(err)), str(err), unsupported=True)
    except InputError as err:
        return Verdict(False, _line(str(err)), str(err))
    return Verdict(True)


def ipset_names() -> set[str]:
    """The sets ``ipsets.save`` creates (the kernel test loads it in each namespace)."""
    return {
        ln.split()[1]
        for ln in (CORPUS / "ipsets.save").read_text().splitlines()
        if ln.startswith("create ")
    }


def _line(message: str) -> int | None:
    m = _LINE.search(message)
    return int(m.group(1)) if m else None
