"""nftables: parse kube-proxy's ``nft -f`` text and evaluate it in the same engine.

Input: the flat command form kube-proxy (knftables) writes — ``add|create|insert table|
chain|rule|set|map|element``, ``flush|delete chain|set|map|table|ruleset``,
``delete element``, ``#`` comments — and the nested ``table ... { chain ... { ... } }``
form ``nft list ruleset`` prints (converted to the flat form first). As in the kernel,
``flush`` and ``delete`` of a missing chain fail (``destroy`` tolerates it), and so does
``delete`` of a chain a rule or a verdict-map element still jumps or goes to.

Rules understood (each statement in order; a test that fails ends the rule):
``ip|ip6 saddr|daddr [!=] ADDR|CIDR|@set|{ ... }``, ``meta l4proto``, ``ip protocol``,
``th|tcp|udp|sctp sport|dport``, concatenations ``a . b . c`` as set/map keys,
``... vmap @map`` and inline ``vmap { k : verdict , ... }``, ``numgen random mod N
[offset M]``, ``ct state``, ``ct status``, ``ct mark``, ``fib saddr|daddr type local``,
``meta mark`` / ``mark`` with ``and|or|xor`` (or ``&``, ``|``, ``^``, as ``nft list``
prints them) then a comparison, ``meta priority``, ``iifname``/``oifname``, ``icmp
type``; statements ``meta mark|nftrace|priority set …``, ``mark set …``, ``nftrace set
…``, ``ct mark set …`` (:mod:`.nftmeta`), ``update|add @set { key }``, ``counter``, ``log``,
``notrack``, ``dnat [ip] to A[:P]``, ``snat [ip] to A[:P]``,
``masquerade [random|fully-random|persistent]``, ``reject [with tcp reset|icmp type T]``;
verdicts ``accept``, ``drop``, ``return``, ``continue``, ``jump C``, ``goto C``;
``comment "…"``. Anything else raises :class:`~netmodel.errors.UnsupportedRuleError`
naming the line.

Evaluation: base chains run at their hook and priority among the iptables tables
(:mod:`.evaluate`); ``type nat`` chains run in the nat stage, only for a connection's
first packet. A vmap or set lookup that finds nothing ends the rule (the next rule runs).
``numgen random`` is a random choice (enumerated by ``--all``). Dynamic sets keep their
elements with timeouts on the host's clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from netmodel.errors import UnsupportedRuleError

from .compile import Work
from .compiled import hostport
from .nftrules import (
    HOOK_NAMES,
    PRIORITY_NAMES,
    TYPE_KIND,
    V6,
    Cursor,
    NftChain,
    NftContext,
    NftError,
    NftRule,
    NftRuleset,
    NftSet,
    NftTable,
    Verdict,
    compile_rule,
    fill_set,
    parse_elements,
    parse_seconds,
    tokenize_nft,
    unquote,
)
from .trace import TraceRecord
from .verdict import ACCEPT, CONTINUE, DROP, REJECT

if TYPE_CHECKING:
    from .evaluate import Netfilter

__all__ = [
    "NftChain",
    "NftEngine",
    "NftError",
    "NftRule",
    "NftRuleset",
    "NftSet",
    "NftTable",
    "parse_nft",
]


# --------------------------------------------------------------------------- parser


def parse_nft(text: str, *, base: NftRuleset | None = None, source: str = "<nft>") -> NftRuleset:
    """Apply an ``nft -f`` payload to ``base`` (or an empty ruleset) and return the result.
    The nested ``table … { … }`` form is accepted too."""
    rs = NftRuleset({k: _copy_table(t) for k, t in (base.tables if base else {}).items()})
    origin: list[int] | None = None  # a flat line's line in the nested text
    end = len(text.splitlines()) + 1
    if re.search(r"^\s*table\s+\S+\s+\S+\s*\{", text, re.M):
        text, origin = _flatten_nested(text)
    checks: list[tuple[NftTable, str, str]] = []
    lines = text.splitlines()
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{origin[n - 1] if origin else n}: {line}"
        if line.count("{") > line.count("}"):
            # nft reads on for the closing brace and meets the end of the file
            raise NftError(f"{source}:{end}: {line}: unexpected end of file")
        try:
            _apply(rs, line, where, n, checks)
        except (ValueError, IndexError, KeyError) as e:
            raise NftError(f"{where}: {e}") from None
    # like the kernel, check references when the whole transaction is in
    # (a verdict-map element counts only if it is still there: a later "delete element"
    # in the same transaction takes its reference away)
    live = {
        (id(t), v[1])
        for t in rs.tables.values()
        for st in t.sets.values()
        for v in st.elements.values()
        if isinstance(v, tuple) and len(v) == 2 and v[0] in ("jump", "goto")
    }
    for t, text, where in checks:
        if rs.tables.get((t.family, t.name)) is not t:
            continue
        if text.startswith("elements:"):
            for m in re.finditer(r"(?:jump|goto) (\S+)", text):
                if (id(t), m.group(1)) in live and m.group(1) not in t.chains:
                    raise NftError(f"{where}: no chain {m.group(1)!r}")
        else:
            _check_targets(t, text, where)
    return rs


def _copy_table(t: NftTable) -> NftTable:
    return NftTable(
        t.family,
        t.name,
        t.comment,
        {
            k: NftChain(c.name, c.type, c.hook, c.priority, c.policy, c.comment, list(c.rules))
            for k, c in t.chains.items()
        },
        {
            k: NftSet(
                s.name,
                s.key,
                s.value,
                s.flags,
                s.timeout,
                s.comment,
                dict(s.elements),
                list(s.nets),
            )
            for k, s in t.sets.items()
        },
    )


def _apply(
    rs: NftRuleset, line: str, where: str, n: int, checks: list[tuple[NftTable, str, str]]
) -> None:
    cur = Cursor(tokenize_nft(line), where)
    verb = cur.next()
    if verb == "flush" and cur.peek() == "ruleset":
        rs.tables.clear()
        return
    what = cur.next()
    # (nft 1.0.6, the reference here, has no "destroy")
    if verb not in ("add", "create", "insert", "delete", "flush", "replace"):
        raise NftError(f"{where}: syntax error, unexpected {verb!r}")
    fam = cur.next()
    if fam in ("arp", "bridge", "netdev"):
        raise UnsupportedRuleError(f"{where}: unsupported family {fam!r}")
    if fam not in ("ip", "ip6", "inet"):
        # nft takes an unknown word here for the table name and then finds one too many
        raise NftError(f"{where}: syntax error, unexpected {cur.peek()!r} after table name")
    tname = cur.next()
    key = (fam, tname)
    if what == "table":
        if verb in ("add", "create"):
            if verb == "create" and key in rs.tables:
                raise NftError(f"{where}: table {fam} {tname} exists (File exists)")
            t = rs.tables.setdefault(key, NftTable(fam, tname))
            if cur.peek() == "{":
                props = _block(cur)
                t.comment = unquote(props.get("comment", t.comment))
        elif verb in ("delete", "destroy"):
            if key not in rs.tables and verb == "delete":
                raise NftError(f"{where}: no table {fam} {tname} (No such file or directory)")
            rs.tables.pop(key, None)
        elif verb == "flush":
            t = _table(rs, key, where)
            for c in t.chains.values():
                c.rules.clear()
        _done(cur, where)
        return
    t = _table(rs, key, where)
    name = cur.next()
    if what == "chain":
        if verb in ("add", "create"):
            found = t.chains.get(name)
            if verb == "create" and found is not None:
                raise NftError(f"{where}: chain {name} exists (File exists)")
            c = found if found is not None else t.chains.setdefault(name, NftChain(name))
            if cur.peek() == "{":
                props = _block(cur)
                if "type" in props:
                    m = re.fullmatch(
                        r"(\w+) hook (\w+)(?: device \S+)? priority (.+)", props["type"]
                    )
                    if not m:
                        raise NftError(f"{where}: bad chain type {props['type']!r}")
                    if m.group(1) not in ("filter", "nat", "route"):
                        raise NftError(f"{where}: unknown chain type {m.group(1)!r}")
                    if m.group(2) not in _ALL_HOOKS:
                        raise NftError(f"{where}: unknown chain hook {m.group(2)!r}")
                    c.type, c.hook = m.group(1), m.group(2)
                    if c.type == "nat" and c.hook not in _NAT_HOOKS:
                        raise NftError(
                            f"{where}: a nat chain cannot hook {c.hook} (Operation not supported)"
                        )
                    c.priority = _priority(m.group(3))
                    if c.hook not in HOOK_NAMES:
                        raise UnsupportedRuleError(f"{where}: unsupported hook {c.hook}")
                if props.get("policy", "accept") not in ("accept", "drop"):
                    raise NftError(
                        f"{where}: syntax error, unexpected {props['policy']!r}, "
                        "expecting accept or drop"
                    )
                c.policy = props.get("policy", c.policy)
                c.comment = unquote(props.get("comment", c.comment))
        elif verb == "flush":
            if name not in t.chains:
                raise NftError(f"{where}: no chain {name!r}")
            t.chains[name].rules.clear()
        elif verb in ("delete", "destroy"):
            if name not in t.chains:
                if verb == "delete":  # the kernel: ENOENT; "destroy" tolerates it
                    raise NftError(f"{where}: no chain {name!r}")
                return
            users = _chain_users(t, name)
            if users:  # the kernel: EBUSY
                raise NftError(f"{where}: chain {name} is still used by {users[0]}")
            del t.chains[name]
        return
    if what == "rule":
        if name not in t.chains:
            raise NftError(f"{where}: no chain {name!r}")
        text = " ".join(cur.toks[cur.i :])
        steps, comment, effect = compile_rule(cur, t)
        chain = t.chains[name]
        if chain.type not in (None, "nat") and _NAT_WORD.search(text.split(" comment ")[0]):
            raise NftError(f"{where}: NAT in a {chain.type} chain (Operation not supported)")
        rule = NftRule(text, n, steps, comment, effect)
        checks.append((t, text, where))
        if verb == "insert":
            t.chains[name].rules.insert(0, rule)
        else:
            t.chains[name].rules.append(rule)
        return
    if what in ("set", "map"):
        if verb in ("add", "create"):
            if name not in t.sets:
                props = _block(cur) if cur.peek() == "{" else {}
                if "type" not in props:
                    raise NftError(f"{where}: {what} {name} needs a type")
                ktext, _, vtext = props["type"].partition(":")
                kinds = tuple(TYPE_KIND.get(k.strip(), k.strip()) for k in ktext.split("."))
                if any(
                    k not in ("addr", "inet_proto", "inet_service", "mark", "ifname") for k in kinds
                ):
                    raise UnsupportedRuleError(f"{where}: unsupported key type {ktext.strip()!r}")
                value = vtext.strip() or None
                if what == "map" and value is None:
                    raise NftError(f"{where}: map needs a value type")
                t.sets[name] = NftSet(
                    name,
                    kinds,
                    value,
                    tuple(props.get("flags", "").replace(" ", "").split(","))
                    if props.get("flags")
                    else (),
                    parse_seconds(props["timeout"]) if "timeout" in props else None,
                    unquote(props.get("comment", "")),
                )
        elif verb == "flush":
            if name not in t.sets:
                raise NftError(f"{where}: no {what} {name!r}")
            t.sets[name].elements.clear()
            t.sets[name].nets.clear()
        elif verb in ("delete", "destroy"):
            if name not in t.sets and verb == "delete":
                raise NftError(f"{where}: no {what} {name!r} (No such file or directory)")
            t.sets.pop(name, None)
        return
    if what == "element":
        s = t.sets.get(name)
        if s is None:
            raise NftError(f"{where}: no set or map {name!r}")
        if cur.peek() != "{":
            raise NftError(f"{where}: syntax error, elements go in braces: {{ ... }}")
        elems = parse_elements(cur, s.key, s.value is not None, keys_only=verb in ("delete", "destroy"))
        checks.append((t, "elements:" + line, where))
        if verb in ("add", "create", "replace"):
            fill_set(s, elems)
        elif verb in ("delete", "destroy"):
            for k, _v, _c in elems:
                if k not in s.elements and verb == "delete":
                    raise NftError(f"{where}: element {k} not in {name}")
                s.elements.pop(k, None)
        _done(cur, where)
        return
    raise UnsupportedRuleError(f"{where}: unsupported object {what!r}")


_NAT_WORD = re.compile(r"(?:^|\s)(?:dnat|snat|masquerade|redirect)(?:\s|$)")
_ALL_HOOKS = ("prerouting", "input", "forward", "output", "postrouting", "ingress", "egress")
_NAT_HOOKS = ("prerouting", "input", "output", "postrouting")


def _done(cur: Cursor, where: str) -> None:
    if not cur.done():
        raise NftError(f"{where}: syntax error, unexpected {cur.peek()!r}")


def _chain_users(t: NftTable, name: str) -> list[str]:
    """What refers to chain ``name``: rules that jump or go to it, and verdict-map
    elements whose verdict is ``jump|goto name`` (named ``@map``)."""
    users = [
        x.name
        for x in t.chains.values()
        for r in x.rules
        if re.search(rf"(?:jump|goto) {re.escape(name)}(?:\s|$)", r.text)
    ]
    for s in t.sets.values():
        if s.value is None:
            continue
        values = [*s.elements.values(), *(v for _lo, _hi, v in s.nets)]
        for v in values:
            if isinstance(v, tuple) and v and isinstance(v[0], tuple):
                v = v[0]  # (value, expiry) in a map with timeouts
            if isinstance(v, tuple) and v[1:2] == (name,) and v[0] in ("jump", "goto"):
                users.append(f"@{s.name}")
                break
    return users


def _check_targets(t: NftTable, text: str, where: str) -> None:
    for m in re.finditer(r"(?:jump|goto) (\S+)", text):
        if m.group(1) not in t.chains:
            raise NftError(f"{where}: no chain {m.group(1)!r}")


def _table(rs: NftRuleset, key: tuple[str, str], where: str) -> NftTable:
    t = rs.tables.get(key)
    if t is None:
        raise NftError(f"{where}: no table {key[0]} {key[1]}")
    return t


def _priority(text: str) -> int:
    text = text.strip()
    m = re.fullmatch(r"(\w+)\s*([+-])\s*(\d+)", text)
    if m and m.group(1) in PRIORITY_NAMES:
        base = PRIORITY_NAMES[m.group(1)]
        return base + int(m.group(3)) * (1 if m.group(2) == "+" else -1)
    if text in PRIORITY_NAMES:
        return PRIORITY_NAMES[text]
    return int(text)


def _block(cur: Cursor) -> dict[str, str]:
    """``{ key words ; key words ; }`` -> {first word: rest}."""
    cur.expect("{")
    props: dict[str, str] = {}
    words: list[str] = []
    while True:
        tok = cur.next()
        if tok in (";", "}"):
            if words:
                props[words[0]] = " ".join(words[1:])
                words = []
            if tok == "}":
                return props
            continue
        if tok == "," and words and words[0] == "flags":
            words[-1] += ","
            continue
        if words and words[-1].endswith(","):
            words[-1] += tok
            continue
        words.append(tok)


def _flatten_nested(text: str) -> tuple[str, list[int]]:
    """The nested form, read with a small block parser, as flat commands, and for each
    flat line the line of the nested text it comes from (errors name that one)."""
    toks: list[str] = []
    tok_line: list[int] = []  # each token's line (a line ends with a ";" token)
    for n, ln in enumerate(text.splitlines(), 1):
        ln = ln.split("#", 1)[0] if not ln.lstrip().startswith("#") else ""
        line_toks = [*tokenize_nft(ln), ";"]
        toks += line_toks
        tok_line += [n] * len(line_toks)
    cur = Cursor(toks, "<nft list ruleset>")
    out: list[str] = []
    at: list[int] = []  # the nested line of each entry of ``out``

    def here() -> int:
        """The line of the token the cursor took last."""
        return tok_line[cur.i - 1]

    while not cur.done():
        tok = cur.next()
        if tok == ";":
            continue
        if tok != "table":
            raise NftError(f"expected 'table', got {tok!r}")
        table_at = here()
        fam, tname = cur.next(), cur.next()
        cur.expect("{")
        out.append(f"add table {fam} {tname}")
        at.append(table_at)
        rules: list[tuple[str, int]] = []
        elems: list[tuple[str, int]] = []
        while True:
            tok = cur.next()
            if tok == ";":
                continue
            if tok == "}":
                break
            if tok == "comment":
                out[-1] = f"add table {fam} {tname} {{ comment {cur.next()} ; }}"
                continue
            if tok not in ("chain", "set", "map"):
                raise NftError(f"unexpected {tok!r} in table {tname}")
            block_at = here()
            name = cur.next()
            cur.expect("{")
            props: list[tuple[str, int]] = []  # (statement, its first line)
            stmt: list[str] = []
            stmt_at = block_at
            depth = 0
            while True:
                t2 = cur.next()
                if t2 == "{":
                    depth += 1
                elif t2 == "}":
                    if depth == 0:
                        if stmt:
                            props.append((" ".join(stmt), stmt_at))
                        break
                    depth -= 1
                if t2 == ";" and depth == 0:
                    if stmt:
                        props.append((" ".join(stmt), stmt_at))
                    stmt = []
                    continue
                if t2 == ";":
                    continue
                if not stmt:
                    stmt_at = here()
                stmt.append(t2)
            if tok == "chain":
                head = [p for p, _ in props if p.split(" ")[0] in ("type", "policy", "comment")]
                out.append(
                    f"add chain {fam} {tname} {name}"
                    + (" { " + " ; ".join(head) + " ; }" if head else "")
                )
                at.append(block_at)
                rules += [
                    (f"add rule {fam} {tname} {name} {p}", n) for p, n in props if p not in head
                ]
            else:
                head = [p for p, _ in props if not p.startswith("elements")]
                out.append(f"add {tok} {fam} {tname} {name} {{ " + " ; ".join(head) + " ; }")
                at.append(block_at)
                for p, n in props:
                    if p.startswith("elements"):
                        elems.append(
                            (f"add element {fam} {tname} {name} " + p.split("=", 1)[1].strip(), n)
                        )
        for line, n in rules + elems:
            out.append(line)
            at.append(n)
    return "\n".join(out) + "\n", at


# --------------------------------------------------------------------------- engine


def _copy_set(s: NftSet) -> NftSet:
    """A set whose elements can change without touching ``s`` (values are immutable)."""
    return NftSet(
        s.name, s.key, s.value, s.flags, s.timeout, s.comment, dict(s.elements), list(s.nets)
    )


class NftEngine:
    """One host's nftables: the loaded ruleset plus the mutable state of its sets
    (dynamic elements added by ``update @set``). Pass as ``Netfilter(nft=...)``."""

    def __init__(self, ruleset: NftRuleset) -> None:
        self.ruleset = ruleset
        self._state: dict[tuple[str, str, str], NftSet] = {}

    def snapshot(self) -> dict[tuple[str, str, str], NftSet]:
        """A copy of the sets' mutable state (for exploring, then restoring)."""
        return {k: _copy_set(s) for k, s in self._state.items()}

    def restore(self, state: dict[tuple[str, str, str], NftSet]) -> None:
        """Go back to a :meth:`snapshot` (which stays usable for another restore)."""
        self._state = {k: _copy_set(s) for k, s in state.items()}

    def set_state(self, table: NftTable, name: str) -> NftSet:
        key = (table.family, table.name, name)
        s = self._state.get(key)
        if s is None:
            src = table.sets[name]
            s = NftSet(
                src.name,
                src.key,
                src.value,
                src.flags,
                src.timeout,
                src.comment,
                dict(src.elements),
                list(src.nets),
            )
            self._state[key] = s
        return s

    def _applies(self, table: NftTable, w: Work) -> bool:
        v6 = bool(w.src & V6)
        return table.family == "inet" or (table.family == "ip6") == v6

    def stages(self, nf: Netfilter) -> list[tuple[str, int, str, Callable[..., int]]]:
        """Base chains of type filter/route as (hook, priority, name, stage)."""
        out: list[tuple[str, int, str, Callable[..., int]]] = []
        for table in self.ruleset.tables.values():
            for chain in table.chains.values():
                if chain.hook is None or chain.type == "nat":
                    continue
                out.append(
                    (
                        HOOK_NAMES[chain.hook],
                        chain.priority,
                        f"nft {table.family} {table.name} {chain.name}",
                        self._stage(nf, table, chain),
                    )
                )
        return out

    def nat_chains(self, nf: Netfilter, hook: str) -> list[Callable[..., int]]:
        """``type nat`` base chains of a hook, by priority, for the nat stage."""
        found = []
        for table in self.ruleset.tables.values():
            for chain in table.chains.values():
                if chain.type == "nat" and chain.hook and HOOK_NAMES[chain.hook] == hook:
                    found.append((chain.priority, table, chain))
        found.sort(key=lambda x: x[0])
        return [self._nat_stage(nf, t, c) for _, t, c in found]

    def _stage(self, nf: Netfilter, table: NftTable, chain: NftChain) -> Callable[..., int]:
        def stage(w: Work, rec: list[Any] | None) -> int:
            if not self._applies(table, w):
                return CONTINUE
            return self._base(nf, table, chain, w, rec)

        return stage

    def _nat_stage(self, nf: Netfilter, table: NftTable, chain: NftChain) -> Callable[..., int]:
        def stage(w: Work, rec: list[Any] | None) -> int:
            if not self._applies(table, w):
                return CONTINUE
            return self._base(nf, table, chain, w, rec)

        return stage

    def _base(
        self, nf: Netfilter, table: NftTable, chain: NftChain, w: Work, rec: list[Any] | None
    ) -> int:
        ctx = NftContext(self, nf, table)
        v = self._walk(ctx, chain, w, rec, 0)
        if v == CONTINUE:
            pol = DROP if chain.policy == "drop" else ACCEPT
            if rec is not None:
                rec.append(
                    self._record(
                        w,
                        table,
                        chain.name,
                        0,
                        f"policy {chain.policy}",
                        f"policy {chain.policy}",
                        None,
                    )
                )
            return pol
        return v

    def _record(
        self,
        w: Work,
        table: NftTable,
        chain: str,
        num: int,
        text: str,
        effect: str,
        nat: str | None,
    ) -> TraceRecord:
        return TraceRecord(
            w.hook,
            f"nft:{table.family} {table.name}",
            chain,
            num,
            text,
            effect,
            nat,
            w.ctname,
            w.mark,
        )

    def _walk(
        self, ctx: NftContext, chain: NftChain, w: Work, rec: list[Any] | None, depth: int
    ) -> int:
        if depth > 16:
            raise NftError(f"chain {chain.name}: jump depth over 16 (loop?)")
        table = ctx.table
        for num, rule in enumerate(chain.rules, 1):
            w.visited += 1
            verdict: Verdict | None = None
            ok = True
            ctx.note = None
            for step in rule.steps:
                r = step(w, ctx)
                if r is False:
                    ok = False
                    break
                if isinstance(r, tuple):
                    verdict = r
                    break
            if not ok:
                continue
            if verdict is None:
                if rec is not None:
                    effect = rule.effect or "match"
                    rec.append(self._record(w, table, chain.name, num, rule.text, effect, None))
                continue
            kind, dest = verdict
            nat = None
            if ctx.note is not None and not isinstance(ctx.note, str):
                (ba, bp), (aa, ap) = ctx.note
                nat = f"{hostport(ba, bp)} -> {hostport(aa, ap)}"
            effect = f"{kind} {dest}" if dest else kind
            if rec is not None:
                if kind == "accept" and nat:
                    effect = (
                        "dnat"
                        if "dnat" in rule.text
                        else ("masquerade" if "masquerade" in rule.text else "snat")
                    )
                rec.append(self._record(w, table, chain.name, num, rule.text, effect, nat))
            if kind in ("jump", "goto"):
                sub = table.chains[dest]  # type: ignore[index]
                v = self._walk(ctx, sub, w, rec, depth + 1)
                if kind == "goto" or v:
                    return v
                continue
            if kind == "return":
                return CONTINUE
            if kind == "continue":
                continue
            if kind == "accept":
                return ACCEPT
            if kind == "drop":
                return DROP
            if kind == "reject":
                if not w.reject_with:
                    w.reject_with = "icmp-port-unreachable"
                return REJECT
        if rec is not None and not chain.base:
            rec.append(self._record(w, table, chain.name, 0, "", "return", None))
        return CONTINUE
