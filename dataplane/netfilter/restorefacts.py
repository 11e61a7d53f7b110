"""What the restore parser's COMMIT-time check learns of a table, kept for the next
``--noflush`` restore onto it (:mod:`.parse`).

A kube-proxy partial sync rewrites a few dozen chains of a nat table of thousands;
with these facts the check of the result reads only the chains the payload touched:

* :class:`TableFacts`: per chain, the chains it jumps or goes to and its rules whose
  target is allowed only in some hooks; per chain, the chains that jump to it; and the
  built-in chains (hooks) that reach it, as bits.
* :func:`cycle_through`: a loop in the jump graph after a restore passes through a jump
  the restore added, so it is reachable from the target of one.
* :func:`propagate_hooks`: the hooks that reach each chain grow only through added
  jumps; they are pushed along from those jumps' sources.

The facts describe exactly the chains of the table that holds them (``Table.checked``);
a table built another way has none, and is checked whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import rules as R

#: a rule whose target is allowed only in some hooks: the rule, the target's name, the
#: built-in chains it is allowed in
Restricted = tuple[R.Rule, str, frozenset[str]]


@dataclass(frozen=True, slots=True)
class TableFacts:
    """What the COMMIT check of one table learned (never changed once made).

    ``succ``: chain -> the chains its rules jump or go to, in rule order (a dict as an
    ordered set; chains with none are left out). ``callers``: chain -> the chains that
    jump or go to it. ``restricted``: user chain -> its rules with a hook-restricted
    target (chains with none left out). ``reach``: chain -> the built-in chains that
    reach it, as bits (bit i: the table's i-th built-in chain in name order); a restore
    may leave more bits than reach a chain, never fewer."""

    succ: dict[str, dict[str, None]]
    callers: dict[str, dict[str, None]]
    restricted: dict[str, tuple[Restricted, ...]]
    reach: dict[str, int]


def cycle_through(succ: dict[str, dict[str, None]], starts: Iterable[str]) -> bool:
    """Whether the jump graph ``succ`` has a loop among the chains reachable from
    ``starts`` (a depth-first walk, each chain once)."""
    done: set[str] = set()
    on_path: set[str] = set()
    for root in starts:
        if root in done:
            continue
        stack: list[tuple[str, list[str]]] = [(root, list(succ.get(root, ())))]
        on_path.add(root)
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                on_path.discard(node)
                done.add(node)
                continue
            nxt = todo.pop()
            if nxt in on_path:
                return True
            if nxt not in done:
                on_path.add(nxt)
                stack.append((nxt, list(succ.get(nxt, ()))))
    return False


def propagate_hooks(
    succ: dict[str, dict[str, None]], reach: dict[str, int], sources: Iterable[str]
) -> set[str]:
    """Push the hook bits of ``sources`` (the chains that gained jumps) along the jump
    graph ``succ`` (which has no loop) into ``reach``, in place; returns the chains
    whose bits grew."""
    grown: set[str] = set()
    work = list(sources)
    get = reach.get
    while work:
        a = work.pop()
        bits = get(a, 0)
        if not bits:
            continue
        for b in succ.get(a, ()):
            old = get(b, 0)
            new = old | bits
            if new != old:
                reach[b] = new
                grown.add(b)
                work.append(b)
    return grown


__all__ = ["Restricted", "TableFacts", "cycle_through", "propagate_hooks"]
