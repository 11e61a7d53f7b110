"""Generate one Python function per chain: the chain's rules as straight-line code.

For a chain with rules ``r1 .. rn`` the generated function ``(w, rec) -> verdict`` tests
each rule in order with its matches inlined (short-circuit ``and``, kernel order) and
runs the target: a jump calls the target chain's function and continues unless it
returned a verdict, a goto returns whatever the target chain returns, a verdict returns
its code, MARK/CONNMARK/LOG continue, NAT targets call the host. ``w.visited`` grows by
the number of rules examined. With ``rec`` not None each matched rule appends a raw
trace entry (see :func:`.evaluate.materialize`).

Every constant is a bound name, so chains of the same shape (every KUBE-SVC-… chain
with five endpoints, say) generate the same source; it is compiled once and each chain
gets a function object over its own constants (``types.FunctionType``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import CodeType, FunctionType
from typing import TYPE_CHECKING, Any

from . import rules as R
from .compile import Ns, match_expr

if TYPE_CHECKING:
    from .evaluate import CChain
    from .ipset import IpSet

__all__ = ["chain_function"]

_CODE: dict[str, CodeType] = {}


def _body(chain: CChain, ns: Ns, sets: Mapping[str, IpSet]) -> list[str]:
    from .evaluate import (
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
    )

    out = ["def chain(w, rec):", "    n = 0"]
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
        if k == K_JUMP:
            d = ns.bind(cr.dest)
            out += [rec_plain, f"{ind}v = {d}.fn(w, rec)", f"{ind}if v:",
                    f"{ind}    w.visited += n", f"{ind}    return v"]
        elif k == K_GOTO:
            d = ns.bind(cr.dest)
            out += [rec_plain, f"{ind}w.visited += n", f"{ind}return {d}.fn(w, rec)"]
        elif k in (K_ACCEPT, K_DROP, K_RETURN):
            code = {K_ACCEPT: 1, K_DROP: 2, K_RETURN: 0}[k]
            out += [rec_plain, f"{ind}w.visited += n", f"{ind}return {code}"]
        elif k == K_REJECT:
            assert isinstance(t, R.Reject)
            out += [f"{ind}w.reject_with = {ns.bind(t.reject_with)}", rec_plain,
                    f"{ind}w.visited += n", f"{ind}return 3"]
        elif k == K_MARK:
            assert isinstance(t, R.SetMark)
            keep = ns.bind(~t.mask & 0xFFFFFFFF)
            val = ns.bind(t.value)
            out += [f"{ind}w.mark = (w.mark & {keep}) ^ {val}",
                    f"{ind}if w.mark & w.masq_bit: w.masq_seen = True", rec_plain]
        elif k in (K_DNAT, K_SNAT, K_MASQ):
            fn = "_dnat" if k == K_DNAT else "_snat"
            out += [f"{ind}v, nat = w.host.{fn}(w, {ns.bind(t)})",
                    f"{ind}if rec is not None: rec.append(({r}, w.mark, nat))",
                    f"{ind}w.visited += n", f"{ind}return v"]
        elif k == K_CONNMARK:
            out += [f"{ind}w.host._connmark(w, {ns.bind(t)})", rec_plain]
        elif k == K_NOTRACK:
            assert isinstance(t, R.Notrack)
            if t.notrack:
                out.append(f"{ind}w.untracked = True")
            out.append(rec_plain)
        else:  # no target, LOG, NFLOG, TRACE
            out.append(rec_plain)
    out.append("    w.visited += n")
    if chain.policy is None:
        out.append(f"    if rec is not None: rec.append(({ns.bind(chain)}, w.mark))")
    out.append("    return 0")
    return out


def chain_function(chain: CChain, sets: Mapping[str, IpSet]) -> Callable[[Any, Any], int]:
    """The generated function of a (non-indexed) chain."""
    ns = Ns("_k")
    src = "\n".join(_body(chain, ns, sets)) + "\n"
    code = _CODE.get(src)
    if code is None:
        module = compile(src, f"<chain {chain.name}>", "exec")
        code = next(c for c in module.co_consts if isinstance(c, CodeType))
        if len(_CODE) > 50_000:
            _CODE.clear()
        _CODE[src] = code
    env: dict[str, Any] = {"__builtins__": {}}
    env.update(ns.values)
    fn: Callable[[Any, Any], int] = FunctionType(code, env, "chain")
    return fn
