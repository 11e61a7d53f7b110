"""Generate one Python function per chain: the chain's rules as straight-line code.

For a chain with rules ``r1 .. rn`` the generated function ``(w, rec) -> verdict`` tests
each rule in order with its matches inlined (short-circuit ``and``, kernel order) and
runs the target: a jump calls the target chain's function and continues unless it
returned a verdict, a goto returns whatever the target chain returns, a verdict returns
its code, MARK/CONNMARK/LOG continue, NAT targets call :mod:`.nat`. ``w.visited`` grows by
the number of rules examined. With ``rec`` not None each matched rule appends a raw
trace entry (see :func:`.evaluate.materialize`).

Every constant is a bound name, so chains of the same shape (every KUBE-SVC-… chain
with five endpoints, say) generate the same source; it is compiled once and each chain
gets a function object whose constants are its default arguments (fast local loads, and
far less memory per chain than a dictionary of globals). Equal constants are shared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import CodeType, FunctionType
from typing import TYPE_CHECKING, Any

from . import rules as R
from .compile import Ns, match_expr
from .nat import dnat, dnat_ints, range_ints, snat

if TYPE_CHECKING:
    from .compiled import CChain
    from .ipset import IpSet

__all__ = ["chain_function"]

_CODE: dict[str, CodeType] = {}


def _body(chain: CChain, ns: Ns, sets: Mapping[str, IpSet]) -> list[str]:
    from .compiled import (
        K_ACCEPT,
        K_CONNMARK,
        K_DNAT,
        K_DROP,
        K_GOTO,
        K_JUMP,
        K_MARK,
        K_MASQ,
        K_NOTRACK,
        K_REJECT,
        K_RETURN,
        K_SNAT,
        apply_connmark,
        apply_ct,
    )

    builtin = chain.policy is not None
    # what "the chain ended" means: RETURN to the caller, or a built-in chain's policy
    end = "0" if not builtin else ("2" if chain.policy == "DROP" else "1")
    me = ns.bind(chain)
    end_rec = f"if rec is not None: rec.append(({me}, w.mark))"
    out = ["def chain(w, rec, ARGS):", "    n = 0"]
    for cr in chain.rules:
        rule: R.Rule = cr.rule
        parts = [e for e in (match_expr(m, ns, sets) for m in rule.matches) if e is not None]
        out.append("    n += 1")
        ind = "    "
        if parts:
            out.append(f"    if {' and '.join(parts)}:")
            ind = "        "
        r = ns.bind(cr)
        rec_plain = f"{ind}if rec is not None: rec.append(({r}, w.mark, None))"
        k = cr.kind
        t = cr.target
        if k == K_JUMP and cr.dest is not None:
            cr.dest.load()  # a lazily restored chain: its rules, to see if it is empty
        if k == K_JUMP and cr.dest is not None and not cr.dest.rules:
            # a jump to an empty chain: it returns at once (rulesets do not change)
            out += [rec_plain, f"{ind}if rec is not None: rec.append(({ns.bind(cr.dest)}, w.mark))"]
        elif k == K_JUMP:
            d = ns.bind(_callee(cr.dest))
            out += [
                rec_plain,
                f"{ind}v = {d}(w, rec)",
                f"{ind}if v:",
                f"{ind}    w.visited += n",
                f"{ind}    return v",
            ]
        elif k == K_GOTO:
            d = ns.bind(_callee(cr.dest))
            if builtin:
                out += [
                    rec_plain,
                    f"{ind}w.visited += n",
                    f"{ind}v = {d}(w, rec)",
                    f"{ind}if v: return v",
                    f"{ind}{end_rec}",
                    f"{ind}return {end}",
                ]
            else:
                out += [rec_plain, f"{ind}w.visited += n", f"{ind}return {d}(w, rec)"]
        elif k == K_RETURN:
            out += [rec_plain, f"{ind}w.visited += n"]
            if builtin:
                out.append(f"{ind}{end_rec}")
            out.append(f"{ind}return {end}")
        elif k in (K_ACCEPT, K_DROP):
            code = {K_ACCEPT: 1, K_DROP: 2}[k]
            out += [rec_plain, f"{ind}w.visited += n", f"{ind}return {code}"]
        elif k == K_REJECT:
            assert isinstance(t, R.Reject)
            out += [
                f"{ind}w.reject_with = {ns.bind(t.reject_with)}",
                rec_plain,
                f"{ind}w.visited += n",
                f"{ind}return 3",
            ]
        elif k == K_MARK:
            assert isinstance(t, R.SetMark)
            keep = ns.bind(~t.mask & 0xFFFFFFFF)
            val = ns.bind(t.value)
            out += [
                f"{ind}w.mark = (w.mark & {keep}) ^ {val}",
                f"{ind}if w.mark & w.masq_bit: w.masq_seen = True",
                rec_plain,
            ]
        elif k == K_DNAT:
            assert isinstance(t, R.Dnat)
            ints = range_ints(t)
            if t.random or t.persistent or ints[0] != ints[1]:
                # an address range or a flag: the general path (hash, --random ports)
                call = f"{ns.bind(dnat)}(w, {ns.bind(t)})"
            else:
                call = f"{ns.bind(dnat_ints)}(w, {', '.join(ns.bind(x) for x in ints)})"
            out += [
                f"{ind}v, nat = {call}",
                f"{ind}if rec is not None: rec.append(({r}, w.mark, nat))",
                f"{ind}w.visited += n",
                f"{ind}return v",
            ]
        elif k in (K_SNAT, K_MASQ):
            out += [
                f"{ind}v, nat = {ns.bind(snat)}(w, {ns.bind(t)})",
                f"{ind}if rec is not None: rec.append(({r}, w.mark, nat))",
                f"{ind}w.visited += n",
                f"{ind}return v",
            ]
        elif k == K_CONNMARK:
            out += [f"{ind}{ns.bind(apply_connmark)}(w, {ns.bind(t)})", rec_plain]
        elif k == K_NOTRACK:
            assert isinstance(t, R.Notrack)
            out += [f"{ind}{ns.bind(apply_ct)}(w, {ns.bind(t)})", rec_plain]
        else:  # no target, LOG, NFLOG, TRACE
            out.append(rec_plain)
    out += ["    w.visited += n", f"    {end_rec}", f"    return {end}"]
    return out


def _callee(dest: CChain | None) -> Callable[[Any, Any], int]:
    """The function to call for a jump: the target chain's own function, built now
    (chains form a DAG, so this terminates) — no indirection on the hot path."""
    assert dest is not None
    if dest.fn == dest._first_call:
        dest.build()
    return dest.fn


def chain_function(chain: CChain, sets: Mapping[str, IpSet]) -> Callable[[Any, Any], int]:
    """The generated function of a (non-indexed) chain. A user chain returns 0 when it
    ends or RETURNs; a built-in chain returns its policy's verdict instead."""
    ns = Ns("_k")
    lines = _body(chain, ns, sets)
    names = list(ns.values)
    lines[0] = lines[0].replace(", ARGS", "".join(f", {n}" for n in names))
    src = "\n".join(lines) + "\n"
    code = _CODE.get(src)
    if code is None:
        module = compile(src, f"<chain {chain.name}>", "exec")
        code = next(c for c in module.co_consts if isinstance(c, CodeType))
        if len(_CODE) > 50_000:
            _CODE.clear()
        _CODE[src] = code
    defaults = tuple(_intern(ns.values[n]) for n in names)
    fn: Callable[[Any, Any], int] = FunctionType(code, _GLOBALS, "chain", defaults)
    return fn


_GLOBALS: dict[str, Any] = {"__builtins__": {}}
_INTERNED: dict[tuple[type, object], object] = {}


def _intern(v: object) -> object:
    """One shared object per equal int/str/frozenset constant (fewer cold cache lines)."""
    if type(v) in (int, str, frozenset):
        key = (type(v), v)
        got = _INTERNED.get(key)
        if got is None:
            if len(_INTERNED) > 500_000:
                _INTERNED.clear()
            _INTERNED[key] = got = v
        return got
    return v
