"""Parse ``iptables-save`` / ``iptables-restore`` text into a :class:`~.rules.Ruleset`.

Contract:

* :func:`parse_save` reads a dump; :func:`apply_restore` applies a restore payload onto
  an existing ruleset and returns the new one (the input ruleset is never changed, so a
  failing payload leaves the caller's state as it was, like ``iptables-restore``'s
  all-or-nothing COMMIT).
* Without ``noflush`` every table named in the payload is first emptied (rules deleted,
  user chains removed, built-in policies kept). With ``noflush`` (``--noflush``, what
  kube-proxy uses) a ``:CHAIN`` line creates the chain or flushes an existing user chain,
  and only the chains the payload names change.
* Supported lines: ``*table``, ``:CHAIN POLICY [pkts:bytes]``, ``[pkts:bytes] -A ...``,
  ``-A``, ``-I CHAIN [N]``, ``-D CHAIN N|spec``, ``-R CHAIN N spec``, ``-N``, ``-X [CHAIN]``,
  ``-F [CHAIN]``, ``-Z [CHAIN]``, ``-P CHAIN POLICY``, ``-E OLD NEW``, ``COMMIT``, ``#``
  comments and blank lines.
* A ``--noflush`` restore onto a table this module built costs what the payload holds
  and what it reaches, not what the table holds: chains the payload leaves alone are
  shared with the base table, and the COMMIT-time check reads only the chains the
  payload changed, from what the check that built the base table learned
  (:class:`~.restorefacts.TableFacts`: each chain's jump targets and hook-restricted
  rules, and the hooks that reach it; kept in ``Table.checked``): a loop must pass
  through a jump the payload added, and a restricted target can newly be reached only
  through one. Whenever this check has any doubt (or the payload renames a chain,
  or flushes or deletes every chain) the whole table is checked as without it, so the
  result and every error are those of a check of every rule.
* Matches and targets are those of :mod:`.rules`. Anything else (an unknown ``-m``
  module, target, or option) raises :class:`~netmodel.errors.UnsupportedRuleError`
  naming the line number and text; malformed input (a bad address, a jump to a missing
  chain, a rule outside a table) raises :class:`RestoreError`. Nothing is ignored.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field

from . import ruleparse as _ruleparse
from . import rules as R
from .restorefacts import Restricted, TableFacts, cycle_through, propagate_hooks
from .ruleparse import (
    TARGET_HOOKS,
    RestoreError,
    new_chain,
    parse_common_line,
    parse_rule,
    tokenize,
    unsupported,
    where,
)

__all__ = [
    "RestoreError",
    "apply_restore",
    "format_save",
    "parse_rule",
    "parse_save",
    "tokenize",
]


# --------------------------------------------------------------------------- restore


@dataclass(slots=True)
class _MChain:
    name: str
    policy: str | None
    rules: list[R.Rule]
    counters: tuple[int, int]
    declared: bool


@dataclass(slots=True)
class _MTable:
    """A table being restored: the base table's (frozen) chains until one is changed,
    which is then an :class:`_MChain` named in ``touched`` (so are chains created and
    deleted)."""

    name: str
    chains: dict[str, R.Chain | _MChain]
    #: what the base table's check learned; None: the COMMIT check reads every rule
    facts: TableFacts | None = None
    touched: set[str] = field(default_factory=set)


def _thaw(table: R.Table) -> _MTable:
    """The table to restore onto ``table`` (its chains shared until changed)."""
    facts = table.checked
    return _MTable(table.name, dict(table.chains), facts if isinstance(facts, TableFacts) else None)


def _new_table(name: str) -> _MTable:
    names = R.BUILTIN_CHAINS[name]
    return _MTable(
        name, {c: _MChain(c, "ACCEPT", [], (0, 0), False) for c in names}, None, set(names)
    )


def _edit(t: _MTable, name: str, *, keep_rules: bool = True) -> _MChain:
    """``name``'s chain, to change (ValueError if there is none); ``keep_rules=False``
    when the caller empties it anyway."""
    ch = t.chains.get(name)
    if ch is None:
        raise ValueError(f"no chain {name!r} in table {t.name}")
    if ch.__class__ is _MChain:
        return ch
    m = _MChain(ch.name, ch.policy, list(ch.rules) if keep_rules else [], ch.counters, ch.declared)
    t.chains[name] = m
    t.touched.add(name)
    return m


def _add(t: _MTable, ch: _MChain) -> None:
    t.chains[ch.name] = ch
    t.touched.add(ch.name)


def _edit_all(t: _MTable) -> list[_MChain]:
    """Every chain, to change: the COMMIT check will read the whole table."""
    t.facts = None
    return [_edit(t, name) for name in list(t.chains)]


def _freeze(t: _MTable, facts: TableFacts) -> R.Table:
    chains = dict(t.chains)
    for name in t.touched:
        c = chains.get(name)
        if c is not None and c.__class__ is _MChain:
            chains[name] = new_chain(c.name, c.policy, tuple(c.rules), c.counters, c.declared)
    return R.Table(t.name, chains, facts)  # type: ignore[arg-type]


def parse_save(
    text: str,
    *,
    family: int = 4,
    source: str = "<iptables-save>",
    ipsets: Collection[str] | None = None,
) -> R.Ruleset:
    """Parse ``iptables-save`` output (or any restore payload) into a fresh ruleset."""
    return apply_restore(
        R.Ruleset(family=family), text, noflush=False, source=source, ipsets=ipsets
    )


def apply_restore(
    base: R.Ruleset,
    text: str,
    *,
    noflush: bool = True,
    source: str = "<iptables-restore>",
    ipsets: Collection[str] | None = None,
) -> R.Ruleset:
    """Apply an ``iptables-restore`` payload to ``base`` and return the new ruleset.

    ``noflush`` is ``--noflush``. ``ipsets``: the names of the ipsets that exist on the
    node; when given, ``-m set`` naming any other set is refused, as the kernel refuses
    it (``Set X doesn't exist``). Each ``*table`` ... ``COMMIT`` section is applied as a
    whole; an error anywhere raises and nothing is returned (``base`` is unchanged).

    A large payload is parsed with the cyclic garbage collector paused (restored on the
    way out, also on error): parsing builds hundreds of thousands of acyclic objects, and
    the collections their allocation triggers took close to half the time at 10,000
    Services."""
    if len(text) < _PAUSE_GC_ABOVE or not gc.isenabled():
        return _apply_restore(base, text, noflush, source, ipsets)
    gc.disable()
    try:
        return _apply_restore(base, text, noflush, source, ipsets)
    finally:
        # the parsed rules live as long as the ruleset: move every tracked object to
        # the oldest generation (freeze + unfreeze) instead of letting the first young
        # collection after enable() scan them all (~10% of the parse at 10,000
        # Services); they take part in full collections as any old object does
        gc.freeze()
        gc.unfreeze()
        gc.enable()


_PAUSE_GC_ABOVE = 1 << 20  # characters (about 5,000 rules)


def _apply_restore(
    base: R.Ruleset, text: str, noflush: bool, source: str, ipsets: Collection[str] | None
) -> R.Ruleset:
    family = base.family
    jump_cls = R.Jump
    fast = _ruleparse.FAST_PATH
    tables: dict[str, R.Table] = dict(base.tables)
    cur: _MTable | None = None
    cur_start = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        if cur is None:
            if line.startswith("*"):
                name = line[1:].strip()
                if name not in R.BUILTIN_CHAINS:
                    raise RestoreError(
                        f"{where(source, lineno, line)}: table name {name!r} invalid"
                    )
                old = tables.get(name)
                if old is None:
                    cur = _new_table(name)
                else:
                    cur = _thaw(old)
                    if not noflush:
                        cur.chains = {k: c for k, c in cur.chains.items() if c.policy is not None}
                        for c in _edit_all(cur):
                            c.rules = []
                cur_start = lineno
                continue
            raise RestoreError(f"{where(source, lineno, line)}: line outside a *table section")
        if line == "COMMIT":
            tables[cur.name] = _freeze(cur, _check_table(cur, source, cur_start))
            cur = None
            continue
        if line[0] == ":" and fast:
            # a new user chain without counters (iptables-save's): the general
            # path's result, without its checks for the cases that need them
            parts = line[1:].split()
            if len(parts) == 3 and parts[1] == "-" and parts[2] == "[0:0]":
                name = parts[0]
                if name not in cur.chains and len(name) <= 28:
                    _add(cur, _MChain(name, None, [], (0, 0), True))
                    continue
        elif line[0] == "[" or line[:3] == "-A ":
            # most rules: one regular expression, then the checks _rule_from makes
            # (the chain exists, a jump's target chain is declared); anything else,
            # errors included, goes the general way below
            rule = parse_common_line(line, lineno, cur.name, family)
            if rule is not None:
                ch = cur.chains.get(rule.chain)
                tg = rule.target
                if ch is not None and (tg.__class__ is not jump_cls or tg.chain in cur.chains):
                    if ch.__class__ is not _MChain:
                        ch = _edit(cur, rule.chain)
                    ch.rules.append(rule)
                    continue
        try:
            _apply_line(cur, line, lineno, family, source, ipsets)
        except (ValueError, IndexError) as e:
            raise RestoreError(f"{where(source, lineno, line)}: {e}") from None
    if cur is not None:
        # like iptables-restore, name the line where COMMIT was expected
        end = len(text.splitlines()) + 1
        raise RestoreError(
            f"{source}:{end}: *{cur.name}: COMMIT expected (table opened at line {cur_start})"
        )
    return R.Ruleset(tables, family)


def _counters(text: str) -> tuple[int, int]:
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"bad counters {text!r}")
    p, _, b = text[1:-1].partition(":")
    return int(p), int(b)


def _chain_counters(text: str) -> tuple[int, int]:
    """A chain line's ``[pkts:bytes]``. iptables-restore without ``-c`` (how kube-proxy
    and svclab restore) does not read them, so malformed ones load as zero, as there."""
    try:
        return _counters(text)
    except ValueError:
        return (0, 0)


def _apply_line(
    t: _MTable,
    line: str,
    lineno: int,
    family: int,
    source: str,
    ipsets: Collection[str] | None = None,
) -> None:
    counters: tuple[int, int] | None = None
    if line.startswith("["):
        close = line.index("]")
        counters = _counters(line[: close + 1])
        line = line[close + 1 :].lstrip()
    if line.startswith(":"):
        parts = line[1:].split()
        name = parts[0]
        policy = parts[1] if len(parts) > 1 else "-"
        ctr = _chain_counters(parts[2]) if len(parts) > 2 else (0, 0)
        ch = t.chains.get(name)
        builtin = name in R.BUILTIN_CHAINS[t.name]
        if builtin:
            if policy not in ("ACCEPT", "DROP", "-"):
                raise ValueError(f"bad policy {policy!r} for built-in chain {name}")
            ch = _edit(t, name)
            if policy != "-":
                ch.policy = policy
            ch.counters = ctr
            ch.declared = True
        else:
            if policy != "-":
                raise ValueError(f"user chain {name} cannot have a policy")
            if len(name) > 28:
                raise ValueError(f"chain name {name!r} longer than 28 characters")
            if ch is None:
                _add(t, _MChain(name, None, [], ctr, True))
            else:
                ch = _edit(t, name, keep_rules=False)
                ch.rules = []
                ch.counters = ctr
                ch.declared = True
        return
    head, _, rest = line.partition(" ")
    rest = rest.strip()
    if head == "-A" or head == "--append":
        chain, _, spec = rest.partition(" ")
        _chain_of(t, chain).rules.append(
            _rule_from(t, chain, spec.strip(), line, lineno, family, source, ipsets, counters)
        )
        return

    def chain_of(name: str) -> _MChain:
        return _chain_of(t, name)

    def rule_from(chain: str, spec: str) -> R.Rule:
        return _rule_from(t, chain, spec, line, lineno, family, source, ipsets, counters)

    if head in ("-I", "--insert"):
        chain, _, spec = rest.partition(" ")
        spec = spec.strip()
        pos = 1
        first, _, after = spec.partition(" ")
        if first.isdigit():
            pos, spec = int(first), after.strip()
        ch = chain_of(chain)
        if not 1 <= pos <= len(ch.rules) + 1:
            raise ValueError(f"index {pos} out of range for chain {chain}")
        ch.rules.insert(pos - 1, rule_from(chain, spec))
    elif head in ("-D", "--delete"):
        chain, _, spec = rest.partition(" ")
        spec = spec.strip()
        ch = chain_of(chain)
        if spec.isdigit():
            k = int(spec)
            if not 1 <= k <= len(ch.rules):
                raise ValueError(f"index {k} out of range for chain {chain}")
            del ch.rules[k - 1]
        else:
            want = rule_from(chain, spec)
            for k, r in enumerate(ch.rules):
                if r.matches == want.matches and r.target == want.target:
                    del ch.rules[k]
                    break
            else:
                raise ValueError("no rule matching that specification")
    elif head in ("-R", "--replace"):
        chain, _, spec = rest.partition(" ")
        num, _, spec = spec.strip().partition(" ")
        ch = chain_of(chain)
        k = int(num)
        if not 1 <= k <= len(ch.rules):
            raise ValueError(f"index {k} out of range for chain {chain}")
        ch.rules[k - 1] = rule_from(chain, spec.strip())
    elif head in ("-N", "--new-chain"):
        if rest in t.chains:
            raise ValueError(f"chain {rest} already exists")
        _add(t, _MChain(rest, None, [], (0, 0), True))
    elif head in ("-X", "--delete-chain"):
        if not rest:
            t.facts = None  # every user chain: the COMMIT check reads the whole table
        victims = [rest] if rest else [c.name for c in t.chains.values() if c.policy is None]
        for v in victims:
            ch = chain_of(v)
            if ch.policy is not None:
                raise ValueError(f"cannot delete built-in chain {v}")
            if ch.rules:
                raise ValueError(f"chain {v} is not empty")
            users = [u for u in _referrers(t, v) if u not in victims]
            if users:
                raise ValueError(f"chain {v} is still referenced from {users[0]}")
        for v in victims:
            del t.chains[v]
            t.touched.add(v)
    elif head in ("-F", "--flush"):
        for ch in [chain_of(rest)] if rest else _edit_all(t):
            ch.rules = []
    elif head in ("-Z", "--zero"):
        for ch in [chain_of(rest)] if rest else _edit_all(t):
            ch.counters = (0, 0)
            ch.rules = [
                R.Rule(r.chain, r.matches, r.target, r.spec, r.line, (0, 0) if r.counters else None)
                for r in ch.rules
            ]
    elif head in ("-P", "--policy"):
        chain, _, policy = rest.partition(" ")
        ch = chain_of(chain)
        if ch.policy is None:
            raise ValueError(f"{chain} is not a built-in chain")
        if policy.strip() not in ("ACCEPT", "DROP"):
            raise ValueError(f"bad policy {policy!r}")
        ch.policy = policy.strip()
    elif head in ("-E", "--rename-chain"):
        old, _, new = rest.partition(" ")
        new = new.strip()
        ch = chain_of(old)
        if ch.policy is not None or new in t.chains:
            raise ValueError(f"cannot rename {old} to {new}")
        if _referrers(t, old):
            raise ValueError(f"chain {old} is referenced")
        _edit_all(t)
        ch = _edit(t, old)
        ch.name = new
        t.chains = {(new if k == old else k): c for k, c in t.chains.items()}
        t.touched.update((old, new))
        ch.rules = [R.Rule(new, r.matches, r.target, r.spec, r.line, r.counters) for r in ch.rules]
    else:
        raise unsupported(source, lineno, line, f"unsupported command {head!r}")


def _chain_of(t: _MTable, name: str) -> _MChain:
    return _edit(t, name)


def _rule_from(
    t: _MTable,
    chain: str,
    spec: str,
    line: str,
    lineno: int,
    family: int,
    source: str,
    ipsets: Collection[str] | None,
    counters: tuple[int, int] | None,
) -> R.Rule:
    """The rule of an ``-A``/``-I``/``-D``/``-R`` line (``spec``: after the chain).

    A rule parsed before (same chain, text, table, family and counters: a kube-proxy
    partial sync repeats most of its lines) gives its values again, at ``lineno``; the
    checks below run on it as on a new one. Only with the parser's fast paths on
    (``ruleparse.FAST_PATH``), so that the general path's tests parse every line."""
    fast = _ruleparse.FAST_PATH
    key = (chain, spec, t.name, family, counters)
    seen = _SPECS.get(key) if fast else None
    if seen is not None:
        rule = (
            seen
            if seen.line == lineno
            else R.Rule(chain, seen.matches, seen.target, spec, lineno, counters)
        )
    else:
        try:
            toks = tokenize(spec)
        except ValueError as e:
            raise RestoreError(f"{where(source, lineno, line)}: {e}") from None
        rule = parse_rule(
            chain,
            toks,
            spec=spec,
            line=lineno,
            table=t.name,
            family=family,
            source=source,
            counters=counters,
        )
        if fast:
            if len(_SPECS) >= _SPECS_MAX:
                _SPECS.clear()
            _SPECS[key] = rule
    if ipsets is not None:
        for m in rule.matches:
            if isinstance(m, R.SetMatch) and m.name not in ipsets:
                raise RestoreError(f"{where(source, lineno, line)}: Set {m.name} doesn't exist.")
    # like iptables-restore, a jump names a chain declared on an earlier line
    tg = rule.target
    if tg.__class__ is R.Jump and tg.chain not in t.chains:
        raise RestoreError(
            f"{where(source, lineno, line)}: Couldn't load target "
            f"`{tg.chain}': no such chain in table {t.name}"
        )
    return rule


#: (chain, spec, table, family, counters) -> the rule _rule_from parsed (cleared when full)
_SPECS: dict[tuple[str, str, str, int, tuple[int, int] | None], R.Rule] = {}
_SPECS_MAX = 200_000


def _referrers(t: _MTable, name: str) -> list[str]:
    """The chains with a rule that jumps or goes to ``name`` (one entry per rule), in
    table order. With the base table's facts, chains left alone answer from them, and
    only when some chain refers to ``name`` are the rules read (to list them all)."""
    facts = t.facts
    if facts is not None:
        touched = t.touched
        if not any(u not in touched for u in facts.callers.get(name, ())) and not any(
            isinstance(r.target, R.Jump) and r.target.chain == name
            for u in touched
            if (c := t.chains.get(u)) is not None
            for r in c.rules
        ):
            return []
    return [
        c.name
        for c in t.chains.values()
        for r in c.rules
        if isinstance(r.target, R.Jump) and r.target.chain == name
    ]


def _check_table(t: _MTable, source: str, start: int) -> TableFacts:
    """COMMIT-time checks: jumps go to existing user chains, there are no loops, and
    targets restricted to some hooks are reached only from those (:func:`_check_hooks`).
    Returns what the check learned (for the table's ``checked``).

    The common case (no error) is made cheap: one pass over the rules, a loop test
    that peels chains with no successors left (Kahn), and for restricted targets the
    chains reachable from each hook they may not be reached from. Only when one of
    these finds a fault are the exact line and wording worked out, by the slower
    searches that name them (:func:`_find_loop`, :func:`_check_hooks`).

    With the base table's facts (``t.facts``), :func:`_check_changes` reads only the
    chains the restore touched; when it has any doubt, the whole table is checked."""
    builtins = frozenset(R.BUILTIN_CHAINS[t.name])
    # the restricted targets this table's built-in chains do not all allow
    limited = {
        cls: (name, TARGET_HOOKS[name])
        for cls, name in _TARGET_NAMES.items()
        if not builtins <= TARGET_HOOKS[name]
    }
    if t.facts is not None:
        facts = _check_changes(t, t.facts, limited, builtins)
        if facts is not None:
            return facts
    # chain -> the chains it jumps or goes to (a dict as an ordered set)
    succ: dict[str, dict[str, None]] = {}
    restricted: dict[str, tuple[Restricted, ...]] = {}
    for c in t.chains.values():
        outs, mine = _scan(t, c, limited, source)
        if outs:
            succ[c.name] = outs
        if mine:
            restricted[c.name] = mine
    order = _topological(succ)
    if order is None:
        _find_loop(t, succ, source)
    reach = _hooks_reaching(succ, order or [], builtins)
    # the built-in chains each restricted target may not be reached from
    wrong: dict[frozenset[str], int] = {}
    for cname, mine in restricted.items():
        bits = reach.get(cname, 0)
        for entry in mine:
            allowed = entry[2]
            w = wrong.get(allowed)
            if w is None:
                w = wrong[allowed] = ~_hook_bits(builtins, allowed)
            if bits & w:
                # the first restricted rule reached from a wrong hook: word it
                _check_hooks(builtins, _callers(t), [(cname, *entry)], source)
    callers: dict[str, dict[str, None]] = {}
    for a, outs in succ.items():
        for b in outs:
            callers.setdefault(b, {})[a] = None
    return TableFacts(succ, callers, restricted, reach)


def _scan(
    t: _MTable,
    c: R.Chain | _MChain,
    limited: dict[type, tuple[str, frozenset[str]]],
    source: str,
) -> tuple[dict[str, None], tuple[Restricted, ...]]:
    """One chain's jump targets (in rule order) and, in a user chain, its rules with a
    restricted target; raises for a jump to a missing or built-in chain."""
    jump_cls = R.Jump
    chains = t.chains
    user = c.policy is None
    outs: dict[str, None] = {}
    mine: list[Restricted] = []
    for r in c.rules:
        tg = r.target
        if tg.__class__ is not jump_cls:
            if user and tg is not None:
                hit = limited.get(tg.__class__)
                if hit is not None:
                    mine.append((r, hit[0], hit[1]))
            continue
        dname = tg.chain
        dest = chains.get(dname)
        if dest is None:
            raise RestoreError(
                f"{where(source, r.line, r.text)}: Couldn't load target "
                f"`{dname}': no such chain in table {t.name}"
            )
        if dest.policy is not None:
            raise RestoreError(
                f"{where(source, r.line, r.text)}: cannot jump to built-in chain {dname}"
            )
        outs[dname] = None
    return outs, tuple(mine)


def _check_changes(
    t: _MTable,
    base: TableFacts,
    limited: dict[type, tuple[str, frozenset[str]]],
    builtins: frozenset[str],
) -> TableFacts | None:
    """The COMMIT check of a restore onto a table whose facts are ``base``, reading only
    the touched chains; None when it cannot vouch for the table (an error, or a doubt:
    the caller then checks every rule and words any error). Sound because the chains
    left alone kept their rules, so their jumps still go to user chains (a chain
    referred to cannot be deleted), any new loop passes through a jump a touched chain
    gained (:func:`~.restorefacts.cycle_through`), and a hook can newly reach a chain
    only through such a jump (:func:`~.restorefacts.propagate_hooks`; the hooks kept
    per chain may be more than reach it now, never fewer: more only means a doubt)."""
    chains = t.chains
    succ = dict(base.succ)
    restricted = dict(base.restricted)
    callers = dict(base.callers)
    reach = dict(base.reach)
    gained: list[tuple[str, str]] = []
    gone: list[str] = []
    for name in t.touched:
        before = base.succ.get(name, {})
        c = chains.get(name)
        if c is None:
            gone.append(name)
            now: dict[str, None] = {}
            succ.pop(name, None)
            restricted.pop(name, None)
            reach.pop(name, None)
        else:
            try:
                now, mine = _scan(t, c, limited, "")
            except RestoreError:
                return None
            if now:
                succ[name] = now
            else:
                succ.pop(name, None)
            if mine:
                restricted[name] = mine
            else:
                restricted.pop(name, None)
        for b in before:
            if b not in now:
                left = {k: None for k in callers.get(b, ()) if k != name}
                if left:
                    callers[b] = left
                else:
                    callers.pop(b, None)
        for b in now:
            if b not in before:
                gained.append((name, b))
                callers[b] = {**callers.get(b, {}), name: None}
    for name in gone:
        if callers.pop(name, None):
            return None  # still referred to (the -X check should have refused it)
    if gained and cycle_through(succ, [b for _, b in gained]):
        return None
    grown = propagate_hooks(succ, reach, [a for a, _ in gained])
    for name in (*t.touched, *grown):
        mine = restricted.get(name, ())
        bits = reach.get(name, 0)
        for _, _, allowed in mine:
            if bits & ~_hook_bits(builtins, allowed):
                return None
    return TableFacts(succ, callers, restricted, reach)


def _topological(succ: dict[str, dict[str, None]]) -> list[str] | None:
    """The chains of the jump graph, each before the chains it jumps to (Kahn), or None
    when there is a loop."""
    indeg: dict[str, int] = {}
    get = indeg.get
    for succs in succ.values():
        for b in succs:
            indeg[b] = get(b, 0) + 1
    order = [a for a in succ if a not in indeg]
    sources = len(order)
    nxt = succ.get
    for a in order:  # grows while it is walked
        outs = nxt(a)
        if outs:
            for b in outs:
                k = indeg[b] - 1
                indeg[b] = k
                if k == 0:
                    order.append(b)
    return order if len(order) - sources == len(indeg) else None


def _hook_bits(builtins: frozenset[str], hooks: frozenset[str]) -> int:
    """The built-in chains in ``hooks`` as bits (bit i: the i-th built-in, sorted)."""
    return sum(1 << i for i, b in enumerate(sorted(builtins)) if b in hooks)


def _hooks_reaching(
    succ: dict[str, dict[str, None]], order: list[str], builtins: frozenset[str]
) -> dict[str, int]:
    """chain -> the built-in chains that reach it, as :func:`_hook_bits` bits (walked in
    topological ``order``, so each chain's bits are complete before they pass on)."""
    bits = {b: 1 << i for i, b in enumerate(sorted(builtins))}
    get = bits.get
    nxt = succ.get
    for a in order:
        m = get(a)
        if m:
            outs = nxt(a)
            if outs:
                for b in outs:
                    bits[b] = get(b, 0) | m
    return bits


def _callers(t: _MTable) -> dict[str, list[tuple[str, int]]]:
    """chain -> (calling chain, jump line), in rule order."""
    callers: dict[str, list[tuple[str, int]]] = {}
    for c in t.chains.values():
        for r in c.rules:
            tg = r.target
            if isinstance(tg, R.Jump):
                callers.setdefault(tg.chain, []).append((c.name, r.line))
    return callers


def _find_loop(t: _MTable, succ: dict[str, dict[str, None]], source: str) -> None:
    """Raise the error for a loop in the chain graph (there is one): a DFS over the
    chain graph, from the built-in chains first; the loop is reported at the latest rule
    on the path that closes it (where the kernel finds it: the rule that made it
    reachable or closed it)."""
    state: dict[str, int] = {}
    roots = sorted(t.chains, key=lambda c: t.chains[c].policy is None)
    for root in roots:
        if state.get(root):
            continue
        stack: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(succ.get(root, ()))))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                continue
            s = state.get(nxt, 0)
            if s == 1:
                path = [n for n, _ in stack] + [nxt]
                worst = max(
                    (_jump(t, a, b) for a, b in itertools.pairwise(path)),
                    key=lambda r: r.line,
                )
                raise RestoreError(
                    f"{where(source, worst.line, worst.text)}: *{t.name}: loop through chain {nxt}"
                )
            if s == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(succ.get(nxt, ())))))
    raise AssertionError("_find_loop: no loop found")  # pragma: no cover


def _check_hooks(
    builtins: frozenset[str],
    callers: dict[str, list[tuple[str, int]]],
    restricted: list[tuple[str, R.Rule, str, frozenset[str]]],
    source: str,
) -> None:
    """COMMIT-time check of targets restricted to some hooks (REJECT, DNAT, SNAT,
    MASQUERADE) in user chains: every built-in chain that reaches the rule must be one
    of its hooks, as the kernel checks when the table is replaced. The error names the
    later of the rule's line and the lines of the jumps that brought it in reach.
    ``callers``: chain -> (calling chain, jump line); the graph has no loops."""
    memo: dict[str, dict[str, int]] = {b: {b: 0} for b in builtins}

    def hooks_of(chain: str) -> dict[str, int]:
        """{built-in chain reaching ``chain``: the latest jump line on that path}."""
        stack = [chain]
        while stack:
            top = stack[-1]
            if top in memo:
                stack.pop()
                continue
            todo = [p for p, _ in callers.get(top, ()) if p not in memo]
            if todo:
                stack.extend(todo)
                continue
            got: dict[str, int] = {}
            for p, line in callers.get(top, ()):
                for h, via in memo[p].items():
                    got.setdefault(h, max(via, line))
            memo[top] = got
            stack.pop()
        return memo[chain]

    for chain, r, name, allowed in restricted:
        for hook, line in hooks_of(chain).items():
            if hook not in allowed:
                raise RestoreError(
                    f"{where(source, max(line, r.line), r.text)}: target {name} in chain "
                    f"{chain} is reached from {hook}, where it is not valid"
                )


_TARGET_NAMES: dict[type, str] = {
    R.Reject: "REJECT",
    R.Dnat: "DNAT",
    R.Snat: "SNAT",
    R.Masquerade: "MASQUERADE",
}


def _jump(t: _MTable, src: str, dst: str) -> R.Rule:
    """The first rule of ``src`` that jumps or goes to ``dst``."""
    return next(
        r for r in t.chains[src].rules if isinstance(r.target, R.Jump) and r.target.chain == dst
    )


# --------------------------------------------------------------------------- output


def format_save(
    ruleset: R.Ruleset,
    *,
    declared_only: bool = False,
    counters: bool = False,
    tables: Iterable[str] | None = None,
    header: Callable[[str], str] | None = None,
) -> str:
    """Print a ruleset like ``iptables-save``: per table ``*name``, chain lines (built-in
    with their policy, user chains with ``-``), ``-A`` rules chain by chain, ``COMMIT``.

    ``declared_only`` leaves out built-in chains the input never named (so a restore
    payload round-trips byte for byte); ``counters`` prints ``[pkts:bytes]`` rule
    prefixes like ``iptables-save -c``; ``header`` may return a comment line per table."""
    out: list[str] = []
    names = list(tables) if tables is not None else list(ruleset.tables)
    for tn in names:
        t = ruleset.tables.get(tn)
        if t is None:
            continue
        if header is not None:
            out.append(header(tn))
        out.append(f"*{tn}")
        chains = [c for c in t if c.declared or not declared_only]
        for c in chains:
            out.append(f":{c.name} {c.policy or '-'} [{c.counters[0]}:{c.counters[1]}]")
        for c in chains:
            for r in c.rules:
                if counters:
                    p, b = r.counters or (0, 0)
                    out.append(f"[{p}:{b}] {r.text}")
                else:
                    out.append(r.text)
        out.append("COMMIT")
    return "\n".join(out) + "\n" if out else ""
