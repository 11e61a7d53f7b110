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
* Matches and targets are those of :mod:`.rules`. Anything else (an unknown ``-m``
  module, target, or option) raises :class:`~netmodel.errors.UnsupportedRuleError`
  naming the line number and text; malformed input (a bad address, a jump to a missing
  chain, a rule outside a table) raises :class:`RestoreError`. Nothing is ignored.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass

from . import ruleparse as _ruleparse
from . import rules as R
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
    name: str
    chains: dict[str, _MChain]


def _thaw(table: R.Table) -> _MTable:
    return _MTable(
        table.name,
        {c.name: _MChain(c.name, c.policy, list(c.rules), c.counters, c.declared) for c in table},
    )


def _new_table(name: str) -> _MTable:
    return _MTable(
        name, {c: _MChain(c, "ACCEPT", [], (0, 0), False) for c in R.BUILTIN_CHAINS[name]}
    )


def _freeze(t: _MTable) -> R.Table:
    return R.Table(
        t.name,
        {
            c.name: new_chain(c.name, c.policy, tuple(c.rules), c.counters, c.declared)
            for c in t.chains.values()
        },
    )


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
                        for c in cur.chains.values():
                            c.rules = []
                cur_start = lineno
                continue
            raise RestoreError(f"{where(source, lineno, line)}: line outside a *table section")
        if line == "COMMIT":
            _check_table(cur, source, cur_start)
            tables[cur.name] = _freeze(cur)
            cur = None
            continue
        if line[0] == ":" and fast:
            # a new user chain without counters (iptables-save's): the general
            # path's result, without its checks for the cases that need them
            parts = line[1:].split()
            if len(parts) == 3 and parts[1] == "-" and parts[2] == "[0:0]":
                name = parts[0]
                if name not in cur.chains and len(name) <= 28:
                    cur.chains[name] = _MChain(name, None, [], (0, 0), True)
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
            assert ch is not None
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
                t.chains[name] = _MChain(name, None, [], ctr, True)
            else:
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
        t.chains[rest] = _MChain(rest, None, [], (0, 0), True)
    elif head in ("-X", "--delete-chain"):
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
    elif head in ("-F", "--flush"):
        for ch in [chain_of(rest)] if rest else list(t.chains.values()):
            ch.rules = []
    elif head in ("-Z", "--zero"):
        for ch in [chain_of(rest)] if rest else list(t.chains.values()):
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
        ch.name = new
        t.chains = {(new if k == old else k): c for k, c in t.chains.items()}
        ch.rules = [R.Rule(new, r.matches, r.target, r.spec, r.line, r.counters) for r in ch.rules]
    else:
        raise unsupported(source, lineno, line, f"unsupported command {head!r}")


def _chain_of(t: _MTable, name: str) -> _MChain:
    ch = t.chains.get(name)
    if ch is None:
        raise ValueError(f"no chain {name!r} in table {t.name}")
    return ch


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
    """The rule of an ``-A``/``-I``/``-D``/``-R`` line (``spec``: after the chain)."""
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


def _referrers(t: _MTable, name: str) -> list[str]:
    return [
        c.name
        for c in t.chains.values()
        for r in c.rules
        if isinstance(r.target, R.Jump) and r.target.chain == name
    ]


def _check_table(t: _MTable, source: str, start: int) -> None:
    """COMMIT-time checks: jumps go to existing user chains, there are no loops, and
    targets restricted to some hooks are reached only from those (:func:`_check_hooks`).

    The common case (no error) is made cheap: one pass over the rules, a loop test
    that peels chains with no successors left (Kahn), and for restricted targets the
    chains reachable from each hook they may not be reached from. Only when one of
    these finds a fault are the exact line and wording worked out, by the slower
    searches that name them (:func:`_find_loop`, :func:`_check_hooks`)."""
    builtins = frozenset(R.BUILTIN_CHAINS[t.name])
    restricted: list[tuple[str, R.Rule, str, frozenset[str]]] = []
    # chain -> the chains it jumps or goes to (a dict as an ordered set)
    succ: dict[str, dict[str, None]] = {}
    # the restricted targets this table's built-in chains do not all allow
    limited = {
        cls: (name, TARGET_HOOKS[name])
        for cls, name in _TARGET_NAMES.items()
        if not builtins <= TARGET_HOOKS[name]
    }
    jump_cls = R.Jump
    chains = t.chains
    for c in chains.values():
        user = c.policy is None
        outs: dict[str, None] | None = None
        for r in c.rules:
            tg = r.target
            if tg.__class__ is not jump_cls:
                if user and tg is not None:
                    hit = limited.get(tg.__class__)
                    if hit is not None:
                        restricted.append((c.name, r, hit[0], hit[1]))
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
            if outs is None:
                outs = {dname: None}
            else:
                outs[dname] = None
        if outs:
            succ[c.name] = outs
    order = _topological(succ)
    if order is None:
        _find_loop(t, succ, source)
    if restricted:
        reach = _hooks_reaching(succ, order or [], builtins)
        # the built-in chains each restricted target may not be reached from
        wrong = {a: ~_hook_bits(builtins, a) for _, _, _, a in restricted}
        for entry in restricted:
            cname, _, _, allowed = entry
            if reach.get(cname, 0) & wrong[allowed]:
                # the first restricted rule reached from a wrong hook: word it
                _check_hooks(builtins, _callers(t), [entry], source)


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
