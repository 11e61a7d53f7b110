"""The compiled form of an iptables ruleset, and the raw trace it records.

:class:`CompiledRuleset` turns a :class:`~.rules.Ruleset` into chains ready to run: small
chains become generated functions (:mod:`.codegen`), big ones are searched through a
:class:`~.compile.ChainIndex` by :func:`walk_indexed`. A chain function takes the work
context and the raw trace list and returns a verdict code (0: the chain ended or
RETURNed; 1 ACCEPT, 2 DROP, 3 REJECT; a built-in chain returns its policy instead of 0).
Nothing here depends on a particular host, so one compiled ruleset can serve several
:class:`~.evaluate.Netfilter` instances (the host is reached through ``w.host``).

On the hot path the engine records cheap tuples; :func:`materialize` turns them into
:class:`~.trace.TraceRecord` values when someone reads a trace.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping

from . import rules as R
from .codegen import chain_function
from .compile import (
    ChainIndex,
    Work,
    compile_test,
    index_covers,
    index_key,
)
from .conntrack import REPLY, int_addr
from .ipset import IpSet
from .nat import dnat, snat
from .trace import TraceRecord
from .verdict import ACCEPT, CONTINUE, DROP, REJECT, STOLEN

# REJECT and STOLEN: verdict codes (:mod:`.verdict`), re-exported for callers that
# still import them from here
__all__ = [
    "REJECT",
    "STOLEN",
    "CChain",
    "CRule",
    "CompiledRuleset",
    "NatNote",
    "RawTrace",
    "apply_connmark",
    "apply_ct",
    "ct_effect",
    "hostport",
    "materialize",
    "walk_indexed",
]


# rule kinds
K_NONE, K_ACCEPT, K_DROP, K_RETURN, K_REJECT, K_JUMP, K_GOTO = range(7)
K_MARK, K_DNAT, K_SNAT, K_MASQ, K_CONNMARK, K_LOG, K_NOTRACK, K_TRACE = range(7, 15)

INDEX_MIN_RULES = 12

_IPSTR: dict[int, str] = {}


def hostport(addr: int, port: int) -> str:
    text = _IPSTR.get(addr)
    if text is None:
        a = int_addr(addr)
        text = f"[{a}]" if a.version == 6 else str(a)
        if len(_IPSTR) > 100_000:
            _IPSTR.clear()
        _IPSTR[addr] = text
    return f"{text}:{port}"


def apply_connmark(w: Work, t: R.Connmark) -> None:
    """The CONNMARK target: set the connection's mark, save the packet's mark into it,
    or restore the packet's mark from it (nothing without a connection)."""
    ct = w.ct
    if ct is None:
        return
    if t.mode == "set":
        ct.mark = (ct.mark & ~t.mask & 0xFFFFFFFF) ^ t.value
    elif t.mode == "save":
        ct.mark = (ct.mark & ~t.ctmask & 0xFFFFFFFF) ^ (w.mark & t.nfmask)
    else:
        w.mark = (w.mark & ~t.nfmask & 0xFFFFFFFF) ^ (ct.mark & t.ctmask)


def ct_effect(t: R.Notrack) -> str:
    """How a trace names a NOTRACK/CT rule's effect."""
    if t.notrack:
        return "NOTRACK"
    if t.by_mark:
        zone = "mark"
    else:
        zone = str(t.zone)
    if t.zone_dirs == R.ZONE_ORIG:
        return f"CT zone-orig {zone}"
    if t.zone_dirs == R.ZONE_REPLY:
        return f"CT zone-reply {zone}"
    return f"CT zone {zone}"


def apply_ct(w: Work, t: R.Notrack) -> None:
    """The NOTRACK and CT targets (xt_CT): a conntrack template for a packet that has
    none yet (the first such rule wins, a looped-back packet keeps its connection):
    untracked, or the zone that conntrack looks the packet up in (:attr:`Work.ctzone`)."""
    if w.ctzone is not None:
        return
    if t.notrack:
        w.untracked = True
    elif not w.untracked and w.ct is None:
        w.ctzone = t


# A NAT note is ((addr, port) before, (addr, port) after), or a reason text.
NatNote = tuple[tuple[int, int], tuple[int, int]] | str | None
# The hot path records cheap tuples; :func:`materialize` turns them into TraceRecords:
#   (CRule, mark, NatNote)            a rule matched
#   (CChain, mark)                    a chain ended: return, or the policy of a built-in
#   ("H", hook)                       a hook starts
#   ("S", state, shown, dir, mark)    conntrack state (a record when ``shown``)
#   ("N", mark)                       nat table skipped: the connection has its binding
#   ("R", manip, before, after, mark) rewrite from the conntrack binding
#   ("C", ok, mark)                   confirmation (ok False: dropped on a tuple clash)
#   TraceRecord                       anything else, already built
RawTrace = list[tuple[object, ...]]


def _nat_text(note: NatNote) -> str | None:
    if note is None or isinstance(note, str):
        return note
    (ba, bp), (aa, ap) = note
    return f"{hostport(ba, bp)} -> {hostport(aa, ap)}"


def materialize(raw: RawTrace | None) -> tuple[TraceRecord, ...]:
    """Turn the engine's raw trace into :class:`~.trace.TraceRecord` values."""
    out: list[TraceRecord] = []
    hook = ""
    state = ""
    for e in raw or ():
        if isinstance(e, TraceRecord):
            out.append(e)
            continue
        head = e[0]
        if isinstance(head, CRule):
            out.append(TraceRecord(hook, head.table, head.chain, head.number, head.text,
                                   head.effect, _nat_text(e[2]), state, e[1]))  # type: ignore[arg-type]
        elif isinstance(head, CChain):
            if head.policy is None:
                out.append(TraceRecord(hook, head.table, head.name, 0, "", "return", None,
                                       state, e[1]))  # type: ignore[arg-type]
            else:
                out.append(TraceRecord(hook, head.table, head.name, 0,
                                       f":{head.name} {head.policy}", f"policy {head.policy}",
                                       None, state, e[1]))  # type: ignore[arg-type]
        elif head == "H":
            hook = e[1]  # type: ignore[assignment]
        elif head == "S":
            state = e[1]  # type: ignore[assignment]
            if e[2]:
                out.append(TraceRecord(hook, "conntrack", "", 0, "", f"state {state}"
                                       + (" reply" if e[3] == REPLY else ""), None, state, e[4]))  # type: ignore[arg-type]
        elif head == "N":
            out.append(TraceRecord(hook, "nat", "", 0, "",
                                   "skipped: connection already has its NAT decision",
                                   None, state, e[1]))  # type: ignore[arg-type]
        elif head == "R":
            what = "destination" if e[1] == "DST" else "source"
            out.append(TraceRecord(hook, "nat", "", 0, "", f"rewrite {what}",
                                   _nat_text((e[2], e[3])), state, e[4]))  # type: ignore[arg-type]
        elif head == "C":
            out.append(TraceRecord(hook, "conntrack", "", 0, "",
                                   "confirmed" if e[1] else "DROP: tuple clash on confirm",
                                   None, state, e[2]))  # type: ignore[arg-type]
    return tuple(out)


# --------------------------------------------------------------------------- compiled form


class CRule:
    """A compiled rule."""

    __slots__ = ("chain", "dest", "effect", "kind", "number", "rule", "sets", "table", "target",
                 "test", "text")

    def __init__(self, rule: R.Rule, number: int, sets: Mapping[str, IpSet], table: str) -> None:
        self.number = number
        self.table = table
        self.chain = rule.chain
        self.text = rule.text
        self.rule = rule
        self.sets = sets
        trivial = all(isinstance(m, R.CommentMatch) for m in rule.matches)
        self.test: Callable[[Work], bool] | None = None if trivial else self._first_test
        self.target = rule.target
        self.dest: CChain | None = None
        t = rule.target
        if t is None:
            self.kind, self.effect = K_NONE, "match"
        elif isinstance(t, R.Verdict):
            self.kind = {"ACCEPT": K_ACCEPT, "DROP": K_DROP, "RETURN": K_RETURN}[t.name]
            self.effect = t.name if t.name != "RETURN" else "return"
        elif isinstance(t, R.Reject):
            self.kind, self.effect = K_REJECT, f"REJECT {t.reject_with}"
        elif isinstance(t, R.Jump):
            self.kind = K_GOTO if t.goto else K_JUMP
            self.effect = f"{'goto' if t.goto else 'jump'} {t.chain}"
        elif isinstance(t, R.SetMark):
            self.kind, self.effect = K_MARK, f"MARK {t.op} {t.value:#x}" + (
                f"/{t.mask:#x}" if t.op in ("set-xmark", "set-mark") else "")
        elif isinstance(t, R.Dnat):
            self.kind, self.effect = K_DNAT, "DNAT"
        elif isinstance(t, R.Snat):
            self.kind, self.effect = K_SNAT, "SNAT"
        elif isinstance(t, R.Masquerade):
            self.kind, self.effect = K_MASQ, "MASQUERADE"
        elif isinstance(t, R.Connmark):
            self.kind, self.effect = K_CONNMARK, f"CONNMARK {t.mode}"
        elif isinstance(t, R.Log):
            self.kind = K_LOG
            self.effect = "CHECKSUM fill" if t.kind == "CHECKSUM" else f"{t.kind} {t.prefix!r}"
        elif isinstance(t, R.Notrack):
            self.kind, self.effect = K_NOTRACK, ct_effect(t)
        else:
            self.kind, self.effect = K_TRACE, "TRACE"

    def _first_test(self, w: Work) -> bool:
        """Compile the test on first use (indexed chains only need it)."""
        self.test = compile_test(self.rule, self.sets)
        return True if self.test is None else self.test(w)


class CChain:
    """A compiled chain: rules, policy, optional index. A chain of a ruleset restored
    from its pickle (:meth:`CompiledRuleset.__reduce__`) starts without its rules: they
    are loaded by :meth:`load`, at the latest when the chain first runs."""

    __slots__ = ("_source", "fn", "index", "name", "policy", "rules", "sets", "table")

    def __init__(self, name: str, policy: str | None, rules: list[CRule],
                 index: ChainIndex[CRule] | None, table: str, sets: Mapping[str, IpSet],
                 source: _LazyTable | None = None) -> None:
        self.name = name
        self.table = table
        self.sets = sets
        self.fn: Callable[[Work, RawTrace | None], int] = self._first_call
        self.policy = policy
        self.rules = rules
        self.index = index
        self._source = source

    def _first_call(self, w: Work, rec: RawTrace | None) -> int:
        """Build the chain's function on first use, then run it."""
        self.build()
        return self.fn(w, rec)

    def load(self) -> None:
        """Load the rules of a lazily restored chain (nothing when they are here)."""
        src = self._source
        if src is not None:
            self._source = None
            src.fill(self)

    def build(self) -> None:
        """Generated code (:mod:`.codegen`) for the chain, or the index-driven walker
        for big chains."""
        if self._source is not None:
            self.load()
        if self.index is None:
            self.fn = chain_function(self, self.sets)
            return
        chain = self
        if self.policy is None:

            def indexed(w: Work, rec: RawTrace | None) -> int:
                return walk_indexed(chain, w, rec)

            self.fn = indexed
            return
        policy = DROP if self.policy == "DROP" else ACCEPT

        def indexed_builtin(w: Work, rec: RawTrace | None) -> int:
            v = walk_indexed(chain, w, rec)
            if v:
                return v
            if rec is not None:
                rec.append((chain, w.mark))
            return policy

        self.fn = indexed_builtin


def _compile_rules(
    rules: tuple[R.Rule, ...], table: str, sets: Mapping[str, IpSet], linear: bool
) -> tuple[list[CRule], ChainIndex[CRule] | None]:
    """One chain's compiled rules and, for a big chain, its index (jump destinations
    are left to the caller)."""
    crules = [CRule(r, i, sets, table) for i, r in enumerate(rules, 1)]
    idx = None
    if not linear and len(crules) >= INDEX_MIN_RULES:
        idx = ChainIndex([index_key(r) for r in rules], crules)
        for cr, r in zip(crules, rules, strict=True):
            if index_covers(r):
                cr.test = None  # an index hit is the whole test
    return crules, idx


#: one chain of a lazy table: (policy, counters, declared, its rules, or their pickle
#: in a ruleset restored from its own)
ChainPart = tuple[str | None, tuple[int, int], bool, "bytes | tuple[R.Rule, ...]"]


class _LazyTable(Mapping[str, CChain]):
    """One table of a lazy :class:`CompiledRuleset` (restored from its pickle, or made
    with ``lazy``): a chain is made when first looked up (without its rules), and its
    rules are compiled (first unpickled, when restored) when it is loaded
    (:meth:`CChain.load`: when it first runs, or when a chain that is built jumps to
    it). Each chain's rules were pickled on their own, so a question that runs three
    chains of a 60,000-rule table unpickles and compiles three chains' rules."""

    def __init__(self, name: str, parts: dict[str, ChainPart], sets: Mapping[str, IpSet],
                 linear: bool) -> None:
        self.name = name
        self.parts = parts
        self.sets = sets
        self.linear = linear
        self.made: dict[str, CChain] = {}

    def __getitem__(self, name: str) -> CChain:
        c = self.made.get(name)
        if c is None:
            policy = self.parts[name][0]  # KeyError: no such chain
            c = self.made[name] = CChain(name, policy, [], None, self.name, self.sets, self)
        return c

    def __iter__(self) -> Iterator[str]:
        return iter(self.parts)

    def __len__(self) -> int:
        return len(self.parts)

    def rules(self, name: str) -> tuple[R.Rule, ...]:
        got = self.parts[name][3]
        return pickle.loads(got) if isinstance(got, bytes) else got

    def pickled(self) -> dict[str, ChainPart]:
        """The parts with every chain's rules as their pickle."""
        return {
            name: (p, c, d, x if isinstance(x, bytes)
                   else pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL))
            for name, (p, c, d, x) in self.parts.items()
        }

    def fill(self, chain: CChain) -> None:
        rules = self.rules(chain.name)
        chain.rules, chain.index = _compile_rules(rules, self.name, self.sets, self.linear)
        for cr in chain.rules:
            if isinstance(cr.target, R.Jump):
                cr.dest = self[cr.target.chain]

    def table(self) -> R.Table:
        """The table as parsed (every chain's rules unpickled)."""
        return R.Table(self.name, {
            name: R.Chain(name, policy, self.rules(name), counters, declared)
            for name, (policy, counters, declared, _) in self.parts.items()
        })


class CompiledRuleset:
    """A :class:`~.rules.Ruleset` compiled for evaluation (tests and indexes built once).
    ``linear`` disables the indexes. ``lazy``: each chain is compiled when first loaded
    (as a restored one is, below), not all at once: what a question about one packet
    wants of a 60,000-rule table.

    Pickled, it keeps each chain's rules as a pickle of their own and comes back lazy
    (:class:`_LazyTable`): restoring it costs a bytes object per chain, and only the
    chains a packet runs (or that a built chain jumps to) are unpickled and compiled. The
    ruleset was checked as a whole when it was parsed; a chain loaded late is the chain
    loaded early, so verdicts and traces are the same."""

    def __init__(self, ruleset: R.Ruleset, *, sets: Mapping[str, IpSet] | None = None,
                 linear: bool = False, lazy: bool = False) -> None:
        self._ruleset: R.Ruleset | None = ruleset
        self.family = ruleset.family
        self.sets = sets or {}
        self.linear = linear
        self.tables: dict[str, Mapping[str, CChain]] = {}
        if lazy:
            for tname, table in ruleset.tables.items():
                parts: dict[str, ChainPart] = {
                    c.name: (c.policy, c.counters, c.declared, c.rules) for c in table
                }
                self.tables[tname] = _LazyTable(tname, parts, self.sets, linear)
            return
        for tname, table in ruleset.tables.items():
            chains: dict[str, CChain] = {}
            for chain in table:
                crules, idx = _compile_rules(chain.rules, tname, self.sets, linear)
                chains[chain.name] = CChain(chain.name, chain.policy, crules, idx, tname,
                                            self.sets)
            for c in chains.values():
                for cr in c.rules:
                    if isinstance(cr.target, R.Jump):
                        cr.dest = chains[cr.target.chain]
            self.tables[tname] = chains

    @classmethod
    def _restore(cls, family: int, parts: dict[str, dict[str, ChainPart]],
                 sets: Mapping[str, IpSet], linear: bool) -> CompiledRuleset:
        self = cls.__new__(cls)
        self._ruleset = None
        self.family = family
        self.sets = sets
        self.linear = linear
        self.tables = {t: _LazyTable(t, p, sets, linear) for t, p in parts.items()}
        return self

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle as per-chain parts (see the class docstring): only the rules, never
        the compiled functions (made again on the other side, when needed)."""
        parts: dict[str, dict[str, ChainPart]] = {}
        for tname, chains in self.tables.items():
            if isinstance(chains, _LazyTable):
                parts[tname] = chains.pickled()
                continue
            assert self._ruleset is not None
            parts[tname] = {
                c.name: (c.policy, c.counters, c.declared,
                         pickle.dumps(c.rules, protocol=pickle.HIGHEST_PROTOCOL))
                for c in self._ruleset.tables[tname]
            }
        return (CompiledRuleset._restore, (self.family, parts, self.sets, self.linear))

    def fresh(self) -> CompiledRuleset:
        """The same rules with none of this ruleset's compiled state (a limit's token
        bucket, an nth counter: what :meth:`CChain.build` binds into a chain), each
        chain compiled when first loaded, as a restored ruleset's. Cheap: the chains'
        rules (or their pickles) are shared, nothing is compiled now. What a namespace
        of its own runs when such state must not be shared."""
        parts: dict[str, dict[str, ChainPart]] = {}
        for tname, chains in self.tables.items():
            if isinstance(chains, _LazyTable):
                parts[tname] = dict(chains.parts)
                continue
            assert self._ruleset is not None
            parts[tname] = {
                c.name: (c.policy, c.counters, c.declared, c.rules)
                for c in self._ruleset.tables[tname]
            }
        out = CompiledRuleset._restore(self.family, parts, self.sets, self.linear)
        out._ruleset = self._ruleset
        return out

    @property
    def ruleset(self) -> R.Ruleset:
        """The ruleset compiled (restored lazily: every chain's rules unpickled now)."""
        if self._ruleset is None:
            tables = {}
            for tname, chains in self.tables.items():
                assert isinstance(chains, _LazyTable)
                tables[tname] = chains.table()
            self._ruleset = R.Ruleset(tables, self.family)
        return self._ruleset

    def loaded_chains(self) -> dict[str, list[str]]:
        """Per table, the chains whose rules are loaded (all of them, unless restored
        from a pickle: then those run so far, and those built chains jump to)."""
        return {
            t: [name for name, c in getattr(chains, "made", chains).items()
                if c._source is None]
            for t, chains in self.tables.items()
        }

    def builtin(self, table: str, hook: str) -> CChain | None:
        """A built-in chain, its function ready (it returns the verdict for the table:
        the policy when no rule decided)."""
        t = self.tables.get(table)
        chain = None if t is None else t.get(hook)
        if chain is not None and chain.fn == chain._first_call:
            chain.build()
        return chain


def walk_indexed(chain: CChain, w: Work, rec: RawTrace | None) -> int:
    """The generic first-match loop over the index's candidates (big chains)."""
    idx = chain.index
    rules = chain.rules if idx is None else idx.candidates(w.dst, w.proto, w.dport)
    for r in rules:
        w.visited += 1
        t = r.test
        if t is not None and not t(w):
            continue
        k = r.kind
        if k == K_JUMP:
            if rec is not None:
                rec.append((r, w.mark, None))
            v = r.dest.fn(w, rec)  # type: ignore[union-attr]
            if v:
                return v
            continue
        if k == K_MARK:
            tg: R.SetMark = r.target  # type: ignore[assignment]
            w.mark = (w.mark & ~tg.mask & 0xFFFFFFFF) ^ tg.value
            if w.mark & w.masq_bit:
                w.masq_seen = True
            if rec is not None:
                rec.append((r, w.mark, None))
            continue
        if k == K_GOTO:
            if rec is not None:
                rec.append((r, w.mark, None))
            return r.dest.fn(w, rec)  # type: ignore[union-attr]
        nat: NatNote = None
        if k == K_ACCEPT:
            v = ACCEPT
        elif k == K_DROP:
            v = DROP
        elif k == K_RETURN:
            v = -1
        elif k == K_REJECT:
            v = REJECT
            w.reject_with = r.target.reject_with  # type: ignore[union-attr]
        elif k == K_DNAT:
            v, nat = dnat(w, r.target)  # type: ignore[arg-type]
        elif k in (K_SNAT, K_MASQ):
            v, nat = snat(w, r.target)  # type: ignore[arg-type]
        elif k == K_CONNMARK:
            apply_connmark(w, r.target)  # type: ignore[arg-type]
            v = CONTINUE
        elif k == K_NOTRACK:
            apply_ct(w, r.target)  # type: ignore[arg-type]
            v = CONTINUE
        else:  # K_NONE, K_LOG, K_TRACE
            v = CONTINUE
        if rec is not None:
            rec.append((r, w.mark, nat))
        if v == -1:
            return CONTINUE
        if v:
            return v
    if rec is not None and chain.policy is None:
        rec.append((chain, w.mark))
    return CONTINUE
