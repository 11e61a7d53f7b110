"""Which rulesets the flow cache may replay (see :mod:`dataplane.emulator.flowcache`).

A replayed packet belongs to a known connection (ctstate NEW-but-confirmed or
ESTABLISHED), so the kernel skips the nat table for it; the other tables still run. A
replay is exact only if those tables decide for such a packet from nothing but the
packet, its interfaces and its connection.
"""

from __future__ import annotations

from dataplane.netfilter import rules as R
from dataplane.netfilter.rules import Ruleset


def replay_safe(ruleset: Ruleset) -> bool:
    """Whether a packet of a known connection (ctstate NEW-but-confirmed or
    ESTABLISHED; the nat table is then skipped) meets, in the raw, mangle, filter and
    security tables, only rules whose outcome depends on nothing but the packet, its
    interfaces and its connection — no random draw, no ``recent`` list, no counter, no
    connection status bits, no target that changes the connection. Then a recorded walk
    of such a packet can be replayed for the next identical packet."""
    for tname in ("raw", "mangle", "filter", "security"):
        table = ruleset.tables.get(tname)
        if table is None:
            continue
        seen: set[str] = set()
        for chain in table:
            if chain.builtin and not _chain_safe(table, chain.name, seen):
                return False
    return True


_REPLAY_STATES = frozenset({"NEW", "ESTABLISHED", "SNAT", "DNAT"})


def _blocks_replayed(m: object) -> bool:
    """A match that is false for every replayed packet (``--ctstate`` without NEW,
    ESTABLISHED or the NAT states)."""
    if isinstance(m, R.ConntrackMatch) and m.states and not m.states_invert:
        return not (_REPLAY_STATES & set(m.states))
    if isinstance(m, R.StateMatch) and not m.invert:
        return not (_REPLAY_STATES & set(m.states))
    return False


def _chain_safe(table: R.Table, name: str, seen: set[str]) -> bool:
    if name in seen:
        return True
    seen.add(name)
    chain = table.chains.get(name)
    if chain is None:
        return True
    for rule in chain.rules:
        blocked = False
        for m in rule.matches:
            if _blocks_replayed(m):
                blocked = True
                break
            if isinstance(m, R.StatisticMatch | R.RecentMatch | R.NfacctMatch | R.LimitMatch):
                return False
            if isinstance(m, R.ConntrackMatch) and m.statuses:
                return False
        if blocked:
            continue
        target = rule.target
        if isinstance(target, R.Jump):
            if not _chain_safe(table, target.chain, seen):
                return False
        elif isinstance(target, R.Connmark | R.Notrack | R.Dnat | R.Snat | R.Masquerade):
            return False
    return True
