"""``iptables -S`` listings (the form people paste) read as ``iptables-save`` text.

``iptables -S [-t TABLE]`` prints ``-P CHAIN POLICY`` for each built-in chain, ``-N CHAIN``
for each user chain, then ``-A CHAIN ...`` for each rule: the rules ``iptables-save``
prints, without its ``*table`` / ``COMMIT`` framing. A listing may hold several tables
one after another (``iptables -S; iptables -S -t nat``). Each table's part starts with its
``-P`` lines; its table is, in this order:

* the one a ``*TABLE`` line before it names;
* the one a ``#`` comment line before it names, when that comment is the command that
  printed it (``# iptables -S -t nat``, ``# iptables -t nat -S``; no ``-t``: filter);
* the one whose built-in chains its ``-P`` lines list (filter: INPUT FORWARD OUTPUT;
  nat: PREROUTING INPUT OUTPUT POSTROUTING; mangle: all five; raw: PREROUTING OUTPUT).

Other ``#`` lines and blank lines are skipped. Anything else is refused, naming the
source and line. :func:`listing_to_save` returns the ``iptables-save`` text and, for
each of its lines, the line of the listing it comes from (so errors about a rule can
name the line the user wrote).
"""

from __future__ import annotations

import re

from netmodel.errors import InputError

__all__ = ["is_listing", "listing_to_save"]

_BUILTINS = {
    frozenset({"INPUT", "FORWARD", "OUTPUT"}): "filter",
    frozenset({"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}): "nat",
    frozenset({"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}): "mangle",
    frozenset({"PREROUTING", "OUTPUT"}): "raw",
}
_TABLES = ("filter", "nat", "mangle", "raw", "security")
_COMMAND = re.compile(r"\biptables(?:-legacy|-nft)?\s.*-S\b|\biptables(?:-legacy|-nft)?\s+-S")
_TABLE_OPT = re.compile(r"(?:-t\s*|--table[ =])(\w+)")


def is_listing(text: str) -> bool:
    """Whether the first line that says something is an ``iptables -S`` line."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        return line.startswith(("-P ", "-N ", "-A "))
    return False


def listing_to_save(text: str, source: str) -> tuple[str, list[int]]:
    """``iptables -S`` text -> (``iptables-save`` text, the listing line of each line)."""
    out: list[str] = []
    origin: list[int] = []
    pending: str | None = None  # the table a *TABLE line or a command comment named
    table: str | None = None  # the table being written (its block is open)
    policies: list[tuple[int, str, str]] = []  # (line, chain, policy) of a block's head

    def emit(line: str, n: int) -> None:
        out.append(line)
        origin.append(n)

    def close(n: int) -> None:
        """End the table being written (a table of policies only is written first)."""
        nonlocal table
        if table is None and policies:
            open_block(n)
        if table is not None:
            emit("COMMIT", n)
            table = None

    def open_block(n: int) -> None:
        nonlocal table, pending
        chains = frozenset(c for _, c, _ in policies)
        name = pending or _BUILTINS.get(chains)
        if name is None:
            first = policies[0][0]
            raise InputError(
                f"{source}:{first}: cannot tell which table this iptables -S listing is "
                f"(policies for {', '.join(sorted(chains))}): put a '*TABLE' line before it"
            )
        table, pending = name, None
        emit(f"*{name}", policies[0][0])
        for ln, chain, policy in policies:
            emit(f":{chain} {policy} [0:0]", ln)
        policies.clear()

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("*"):
            name = line[1:].strip()
            if name not in _TABLES:
                raise InputError(f"{source}:{n}: {line}: no such table")
            close(n)
            pending = name
            continue
        if line.startswith("#"):
            if _COMMAND.search(line):
                m = _TABLE_OPT.search(line)
                name = m.group(1) if m else "filter"
                if name not in _TABLES:
                    raise InputError(f"{source}:{n}: {line}: no such table {name!r}")
                close(n)
                pending = name
            continue
        words = line.split()
        if words[0] == "-P" and len(words) == 3:
            if table is not None:
                close(n)  # the next table's listing starts
            policies.append((n, words[1], words[2]))
            continue
        if words[0] in ("-N", "-A"):
            if table is None:
                if not policies:
                    raise InputError(
                        f"{source}:{n}: {line}: a listing starts with its '-P' lines"
                    )
                open_block(n)
            if words[0] == "-N":
                if len(words) != 2:
                    raise InputError(f"{source}:{n}: {line}: expected '-N CHAIN'")
                emit(f":{words[1]} - [0:0]", n)
            else:
                emit(line, n)
            continue
        raise InputError(
            f"{source}:{n}: {line}: not an iptables -S line (-P, -N or -A)"
        )
    close(len(text.splitlines()))
    return "\n".join(out) + "\n", origin
