"""nft statements that set packet metadata, compiled to steps as the kernel evaluates them.

Statements (nft(8), META STATEMENT and CT STATEMENT)::

    meta mark set EXPR        mark set EXPR         skb->mark (32 bits)
    meta nftrace set EXPR     nftrace set EXPR      skb->nf_trace (0 or 1)
    meta priority set EXPR                          skb->priority (a TC handle)
    ct mark set EXPR                                the connection's mark (32 bits)

``EXPR`` is a constant, or a value read from the packet — ``meta mark`` / ``mark`` /
``ct mark`` for the marks, ``meta priority`` for the priority — followed by any number of
``and|or|xor|&|^|'|'|<<|>> CONSTANT`` (applied left to right, as nft folds them into the
kernel's bitwise expression). A TC handle is ``none`` (0), ``root`` (0xffffffff),
``MAJOR:MINOR`` (one to four hex digits each) or a number, which nft 1.0.6 reads with
``strtoull`` and keeps the low 32 bits of (a word that is no number reads as 0, ``none``).

Evaluation, as the kernel's ``nft_meta_set_eval`` / ``nft_ct_set_eval``: the value is
computed when the statement runs and stored; the rule goes on. ``ct mark set`` on a packet
without a connection (before conntrack's hook, untracked) does nothing; the mark is the
connection's, so every later packet of the flow, in both directions, reads it
(``meta mark set ct mark`` restores it on a reply). ``meta nftrace set 1`` marks the
packet for ``nft monitor trace`` and changes no verdict; the flag stays with the packet
inside the host (it is cleared when the packet crosses to another namespace).

Refused as nft or the kernel refuses them, with the line: a constant out of range
(``Value 2 exceeds valid range 0-1``), a value that is no number, a value of the wrong
type (``meta priority set meta mark``), a non-constant right-hand side, and the match
``meta nftrace`` (the kernel cannot read the flag: ``Operation not supported``).

A statement that reads ``ct mark`` of a packet without a connection ends the rule there
(the kernel's ``NFT_BREAK``: the next rule runs), as the match ``ct mark`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from netmodel.errors import UnsupportedRuleError

from .compile import Work

if TYPE_CHECKING:
    from .nftrules import Cursor, NftContext

__all__ = ["format_tc_handle", "meta_set_statement", "parse_tc_handle", "starts_meta_set"]

_U32 = 0xFFFFFFFF
TC_H_ROOT = 0xFFFFFFFF

#: the bitwise operators a value expression may use, by the words nft reads
_OPS = {
    "and": "&",
    "&": "&",
    "or": "|",
    "|": "|",
    "xor": "^",
    "^": "^",
    "<<": "<<",
    "lshift": "<<",
    ">>": ">>",
    "rshift": ">>",
}

#: what each settable key holds: (nft's type name for errors, keys one may read into it)
_TYPES = {
    "mark": ("packet mark", ("meta mark", "ct mark")),
    "ct mark": ("packet mark", ("meta mark", "ct mark")),
    "priority": ("TC classid", ("meta priority",)),
    "nftrace": ("integer", ()),
}
_READ_TYPE = {"meta mark": "packet mark", "ct mark": "packet mark", "meta priority": "TC classid"}

#: a compiled statement: False ends the rule (a value it reads is missing), None goes on
Step = Callable[[Work, "NftContext"], "bool | None"]


def _err(where: str, message: str) -> Exception:
    from .nftrules import NftError  # (nftrules imports this module)

    return NftError(f"{where}: {message}")


def parse_tc_handle(tok: str) -> int:
    """A TC handle as nft 1.0.6 reads it (module docstring); ValueError if nft refuses it."""
    if tok == "none":
        return 0
    if tok == "root":
        return TC_H_ROOT
    if ":" in tok:
        m = re.fullmatch(r"([0-9a-fA-F]{1,4}):([0-9a-fA-F]{1,4})", tok)
        if m is None:
            raise ValueError(f"syntax error, unexpected colon in {tok!r}")
        return (int(m.group(1), 16) << 16) | int(m.group(2), 16)
    if tok.startswith("-"):
        raise ValueError("syntax error, unexpected -")
    return _strtoull(tok) & _U32


#: an integer as nft's scanner reads one: hex, octal (a leading 0) or decimal
_C_INT = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")


def _strtoull(tok: str) -> int:
    """C's ``strtoull(tok, NULL, 0)``: the longest number at the start (0 if none)."""
    m = re.match(r"0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*)", tok)  # (_C_INT, grouped)
    if m is None:
        return 0
    hexa, octal, dec = m.groups()
    if hexa is not None:
        return int(hexa, 16)
    if octal is not None:
        return int(octal, 8)
    return int(dec)


def format_tc_handle(v: int) -> str:
    """A TC handle as ``nft list`` prints it (``none``, ``root``, ``1:a``)."""
    if v == 0:
        return "none"
    if v == TC_H_ROOT:
        return "root"
    return f"{v >> 16:x}:{v & 0xFFFF:x}"


def _constant(key: str, tok: str, where: str) -> int:
    """One constant of the type ``key`` holds, range-checked as nft checks it."""
    if key == "priority":
        try:
            return parse_tc_handle(tok)
        except ValueError as e:
            raise _err(where, str(e)) from None
    if tok.startswith("-"):
        raise _err(where, "syntax error, unexpected -")
    if _C_INT.fullmatch(tok) is None:
        what = "packet mark" if key in ("mark", "ct mark") else "integer"
        raise _err(where, f"Could not parse {what} {tok!r}")
    v = _strtoull(tok)
    top = 1 if key == "nftrace" else _U32
    if v > top:
        raise _err(where, f"Value {v} exceeds valid range 0-{top}")
    return v


def starts_meta_set(cur: Cursor) -> bool:
    """Whether the cursor is at a metadata-setting statement (``meta KEY set``,
    ``mark set``, ``nftrace set``, ``ct KEY set``)."""
    a, b, c = cur.peek(), cur.peek(1), cur.peek(2)
    if a in ("mark", "nftrace") and b == "set":
        return True
    return a in ("meta", "ct") and c == "set" and b is not None


def _read_source(cur: Cursor) -> str | None:
    """A value read at the cursor (consumed): ``meta mark``, ``ct mark``,
    ``meta priority``, or None when the cursor holds a constant."""
    a, b = cur.peek(), cur.peek(1)
    if a == "mark":
        cur.next()
        return "meta mark"
    if a in ("meta", "ct") and b is not None and re.fullmatch(r"[a-z]+", b):
        cur.next()
        cur.next()
        name = f"{a} {b}"
        if name not in _READ_TYPE:
            raise UnsupportedRuleError(
                f"{cur.where}: unsupported value {name!r} in a set statement"
            )
        return name
    return None


def meta_set_statement(cur: Cursor) -> tuple[Step, str]:
    """Parse one statement at the cursor (see :func:`starts_meta_set`) into a step and
    the text a trace shows for it (``nftrace set 1``, ``mark set mark | 0x4000``)."""
    where = cur.where
    first = cur.next()
    if first in ("meta", "ct"):
        name = cur.next()
        key = name if first == "meta" else f"ct {name}"
        if key not in ("ct mark", "mark", "nftrace", "priority"):
            raise UnsupportedRuleError(f"{where}: unsupported statement '{first} {name} set'")
    else:
        key = first
    cur.expect("set")
    want, readable = _TYPES[key]
    source = _read_source(cur)
    if source is not None and source not in readable:
        raise _err(
            where, f"datatype mismatch: expected {want}, expression has type {_READ_TYPE[source]}"
        )
    base = 0 if source is not None else _constant(key, cur.next(), where)
    ops: list[tuple[str, int]] = []
    while cur.peek() in _OPS:
        op = _OPS[cur.next()]
        tok = cur.peek()
        if tok is None:
            raise _err(where, "syntax error, unexpected end of line")
        if tok in ("meta", "ct", "mark") or tok.startswith("@"):
            raise _err(where, "Right hand side of binary operation must be constant")
        cur.next()
        if op in ("<<", ">>"):
            if _C_INT.fullmatch(tok) is None:
                raise _err(where, f"Could not parse integer {tok!r}")
            ops.append((op, _strtoull(tok)))
        else:
            ops.append((op, _constant(key, tok, where)))
    label = _label(key, source, base, ops)
    return _step(key, source, base, tuple(ops)), label


def _label(key: str, source: str | None, base: int, ops: list[tuple[str, int]]) -> str:
    def show(v: int) -> str:
        return (
            format_tc_handle(v) if key == "priority" else f"{v:#x}" if key != "nftrace" else str(v)
        )

    text = source if source is not None else show(base)
    for op, n in ops:
        text += f" {op} {n if op in ('<<', '>>') else show(n)}"
    return f"{'ct mark' if key == 'ct mark' else key} set {text}"


def _apply(v: int, ops: tuple[tuple[str, int], ...]) -> int:
    for op, n in ops:
        if op == "&":
            v &= n
        elif op == "|":
            v |= n
        elif op == "^":
            v ^= n
        elif op == "<<":
            v = (v << n) & _U32
        else:
            v >>= n
    return v


def _step(key: str, source: str | None, base: int, ops: tuple[tuple[str, int], ...]) -> Step:
    """The step: read the source (or the constant), apply the operators, store."""

    def read(w: Work) -> int | None:
        """The value read (None: the read fails, as ``ct mark`` without a connection
        does, and the kernel's NFT_BREAK ends the rule)."""
        if source is None:
            return base
        if source == "meta mark":
            return w.mark
        if source == "meta priority":
            return w.priority
        return w.ct.mark if w.ct is not None else None  # ct mark: none without a connection

    if key == "mark":

        def set_mark(w: Work, c: NftContext) -> bool | None:
            v = read(w)
            if v is None:
                return False
            w.mark = _apply(v, ops)
            if w.mark & w.masq_bit:
                w.masq_seen = True
            return None

        return set_mark
    if key == "ct mark":

        def set_ctmark(w: Work, c: NftContext) -> bool | None:
            ct = w.ct
            v = read(w)
            if v is None:
                return False
            if ct is not None:
                ct.mark = _apply(v, ops)
            return None

        return set_ctmark
    if key == "priority":

        def set_priority(w: Work, c: NftContext) -> bool | None:
            w.priority = _apply(w.priority if source is not None else base, ops)
            return None

        return set_priority
    value = bool(_apply(base, ops) & 1)

    def set_nftrace(w: Work, c: NftContext) -> bool | None:
        w.nftrace = value
        return None

    return set_nftrace
