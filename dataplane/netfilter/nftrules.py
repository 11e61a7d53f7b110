"""The nftables rule language svclab understands: the model (tables, chains, sets, maps,
rules) and the compiler from one rule's text to steps over the work context.

A compiled rule is a list of steps run in order: a step returns False (the rule does not
match: go to the next rule), None (go on with the next step) or a verdict
``(kind, chain)``. See :mod:`.nft` for the statements and expressions supported and for
how the steps are evaluated.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from netmodel.errors import InputError, UnsupportedRuleError

from . import rules as R
from .compile import ST_ESTABLISHED, ST_INVALID, ST_NEW, ST_RELATED, ST_UNTRACKED, Work
from .conntrack import DST_NAT, SRC_NAT, STATUS_NAMES, addr_int
from .nat import dnat, snat
from .nftmeta import meta_set_statement, parse_tc_handle, starts_meta_set
from .verdict import ACCEPT

if TYPE_CHECKING:
    from .evaluate import Netfilter
    from .nft import NftEngine

__all__ = ["NftChain", "NftContext", "NftError", "NftRule", "NftRuleset", "NftSet", "NftTable"]

V6 = 1 << 128  # the flag bit that marks an IPv6 address integer (:func:`.conntrack.addr_int`)

PRIORITY_NAMES = {
    "raw": -300,
    "mangle": -150,
    "dstnat": -100,
    "filter": 0,
    "security": 50,
    "srcnat": 100,
}
HOOK_NAMES = {
    "prerouting": "PREROUTING",
    "input": "INPUT",
    "forward": "FORWARD",
    "output": "OUTPUT",
    "postrouting": "POSTROUTING",
}
CT_STATE_BITS = {
    "new": ST_NEW,
    "established": ST_ESTABLISHED,
    "related": ST_RELATED,
    "invalid": ST_INVALID,
    "untracked": ST_UNTRACKED,
}


class NftError(InputError):
    """Malformed nft input; the message names the line."""


# --------------------------------------------------------------------------- model

Verdict = tuple[
    str, str | None
]  # ("accept"|"drop"|"reject"|"return"|"continue"|"jump"|"goto", chain)


@dataclass
class NftSet:
    """A named set or map. ``key`` is the list of key types (concatenation);
    ``value`` the map value type (``verdict``), None for a set. ``elements`` maps a key
    tuple to its value; ``nets`` holds CIDR keys of one-field address sets."""

    name: str
    key: tuple[str, ...]
    value: str | None = None
    flags: tuple[str, ...] = ()
    timeout: float | None = None
    comment: str = ""
    elements: dict[tuple[object, ...], object] = field(default_factory=dict)
    nets: list[tuple[int, int, object]] = field(default_factory=list)


@dataclass
class NftRule:
    """One rule: its statements compiled, its text and 1-based position."""

    text: str
    line: int
    steps: list[Callable[[Work, NftContext], Verdict | bool | None]]
    comment: str = ""
    #: what its metadata statements do, for the trace (``nftrace set 1``); "" if none
    effect: str = ""


@dataclass
class NftChain:
    name: str
    type: str | None = None
    hook: str | None = None
    priority: int = 0
    policy: str = "accept"
    comment: str = ""
    rules: list[NftRule] = field(default_factory=list)

    @property
    def base(self) -> bool:
        return self.hook is not None


@dataclass
class NftTable:
    family: str
    name: str
    comment: str = ""
    chains: dict[str, NftChain] = field(default_factory=dict)
    sets: dict[str, NftSet] = field(default_factory=dict)


@dataclass
class NftRuleset:
    """Everything ``nft -f`` loaded: tables by ``(family, name)``."""

    tables: dict[tuple[str, str], NftTable] = field(default_factory=dict)


class NftContext:
    """Per-evaluation access the compiled statements need (the host, its set state)."""

    __slots__ = ("engine", "nf", "note", "table")

    def __init__(self, engine: NftEngine, nf: Netfilter, table: NftTable) -> None:
        self.engine = engine
        self.nf = nf
        self.table = table
        self.note: object = None


# --------------------------------------------------------------------------- tokens

_TOK = re.compile(r'"((?:[^"\\]|\\.)*)"|([{};,])|([^\s{};,"]+)')


def tokenize_nft(text: str) -> list[str]:
    out: list[str] = []
    for m in _TOK.finditer(text):
        q, punct, word = m.groups()
        if q is not None:
            out.append('"' + q + '"')
        else:
            out.append(punct or word)
    return out


def unquote(tok: str) -> str:
    return tok[1:-1] if tok.startswith('"') and tok.endswith('"') else tok


class Cursor:
    def __init__(self, toks: list[str], where: str) -> None:
        self.toks = toks
        self.i = 0
        self.where = where

    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def next(self) -> str:
        if self.i >= len(self.toks):
            raise NftError(f"{self.where}: unexpected end of line")
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, tok: str) -> None:
        got = self.next()
        if got != tok:
            raise NftError(f"{self.where}: expected {tok!r}, got {got!r}")

    def done(self) -> bool:
        return self.i >= len(self.toks)


# --------------------------------------------------------------------------- values


def _addr_value(tok: str) -> tuple[int, int] | int:
    """An address (int) or a CIDR ``(base, mask)``."""
    if "/" in tok:
        net = ipaddress.ip_network(tok, strict=False)
        width = net.max_prefixlen
        mask = ((1 << width) - 1) ^ ((1 << (width - net.prefixlen)) - 1)
        if width == 128:
            mask |= V6
        return (addr_int(net.network_address), mask)
    return addr_int(ipaddress.ip_address(tok))


_PROTO_NUM = {"6": "tcp", "17": "udp", "1": "icmp", "132": "sctp", "58": "ipv6-icmp"}


_CT_STATES = ("new", "established", "related", "invalid", "untracked")


def _service(tok: str) -> int:
    v = int(tok)
    if not 0 <= v <= 65535:
        raise ValueError(f"Service out of range: {tok}")
    return v


def _parse_value(kind: str, tok: str) -> object:
    if kind in ("ipv4_addr", "ipv6_addr", "addr"):
        return _addr_value(tok)
    if kind == "inet_proto":
        return _PROTO_NUM.get(tok, tok)
    if kind in ("inet_service", "port"):
        if "-" in tok:
            a, b = tok.split("-")
            lo, hi = _service(a), _service(b)
            if lo > hi:
                raise ValueError(f"bad range {tok}")
            return (lo, hi, "range")
        return _service(tok)
    if kind == "ct_state":
        if tok not in _CT_STATES:
            raise ValueError(f"Could not parse conntrack state {tok!r}")
        return tok
    if kind in ("mark", "int"):
        return int(tok, 0)
    if kind == "tc_handle":
        lo_text, dash, hi_text = tok.partition("-")
        lo = parse_tc_handle(lo_text)
        if not dash:
            return lo
        hi = parse_tc_handle(hi_text)
        if lo > hi:
            raise ValueError(f"bad range {tok}")
        return (lo, hi, "range")
    if kind == "ifname":
        return unquote(tok)  # ``nft list`` prints names quoted: iifname "eth0"
    if kind in ("fib_type", "str", "icmp_type"):
        return tok
    raise NftError(f"cannot parse a value of type {kind}")


# --------------------------------------------------------------------------- selectors

Getter = Callable[[Work], object]


def _in_l4(w: Work) -> bool:
    return w.proto in ("tcp", "udp", "sctp", "udplite")


def _selector(cur: Cursor) -> tuple[Getter, str, str] | None:
    """Parse one selector at the cursor: (getter, value kind, text) or None."""
    a = cur.peek()
    b = cur.peek(1)
    if a in ("ip", "ip6") and b in ("saddr", "daddr"):
        cur.i += 2
        val = cur.peek(1) if cur.peek() in ("==", "!=") else cur.peek()
        if val and val[0] not in "@{$" and (":" in val) != (a == "ip6"):
            raise NftError(
                f"{cur.where}: {val} is not an IPv{'6' if a == 'ip6' else '4'} address "
                "(Address family for hostname not supported)"
            )
        if b == "saddr":
            return (lambda w: w.src), "addr", f"{a} saddr"
        return (lambda w: w.dst), "addr", f"{a} daddr"
    if a in ("ip", "ip6") and b in ("protocol", "nexthdr"):
        cur.i += 2
        return (lambda w: w.proto), "inet_proto", f"{a} {b}"
    if a == "meta" and b == "nftrace":
        # the kernel sets skb->nf_trace but has no expression that reads it
        raise NftError(f"{cur.where}: Could not process rule: Operation not supported")
    if a == "meta" and b == "priority":
        cur.i += 2
        return (lambda w: w.priority), "tc_handle", "meta priority"
    if a == "priority":
        raise NftError(f"{cur.where}: syntax error, unexpected priority")
    if a == "meta" and b in ("l4proto", "mark", "iifname", "oifname", "nfproto"):
        cur.i += 2
        if b == "l4proto":
            return (lambda w: w.proto), "inet_proto", "meta l4proto"
        if b == "mark":
            return (lambda w: w.mark), "mark", "meta mark"
        if b == "nfproto":
            return (lambda w: "ipv6" if w.src & V6 else "ipv4"), "str", "meta nfproto"
        if b == "iifname":
            return (lambda w: w.iif), "ifname", "iifname"
        return (lambda w: w.oif), "ifname", "oifname"
    if a in ("iifname", "oifname"):
        cur.i += 1
        if a == "iifname":
            return (lambda w: w.iif), "ifname", a
        return (lambda w: w.oif), "ifname", a
    if a == "mark" and b != "set":
        cur.i += 1
        return (lambda w: w.mark), "mark", "mark"
    if a == "th" and b in ("sport", "dport"):
        cur.i += 2
        if b == "dport":
            return (lambda w: w.dport if _in_l4(w) else None), "inet_service", "th dport"
        return (lambda w: w.sport if _in_l4(w) else None), "inet_service", "th sport"
    if a in ("tcp", "udp", "sctp") and b in ("sport", "dport"):
        cur.i += 2
        proto = a
        if b == "dport":
            return (lambda w: w.dport if w.proto == proto else None), "inet_service", f"{a} dport"
        return (lambda w: w.sport if w.proto == proto else None), "inet_service", f"{a} sport"
    if a == "ct" and b in ("state", "status", "mark"):
        cur.i += 2
        if b == "state":
            return (lambda w: w.ctbits), "ct_state", "ct state"
        if b == "status":

            def status(w: Work) -> object:
                return w.ct.status if w.ct is not None else 0

            return status, "ct_status", "ct status"
        return (lambda w: w.ct.mark if w.ct is not None else None), "mark", "ct mark"
    if a == "fib" and b in ("saddr", "daddr") and cur.peek(2) == "type":
        cur.i += 3
        if b == "saddr":
            return (
                (lambda w: "local" if w.src in w.locals else "unicast"),
                "fib_type",
                "fib saddr type",
            )
        return (lambda w: "local" if w.dst in w.locals else "unicast"), "fib_type", "fib daddr type"
    if a == "icmp" and b == "type":
        cur.i += 2
        return (
            (lambda w: _ICMP_NAMES.get(w.itype) if w.proto == "icmp" else None),
            "icmp_type",
            "icmp type",
        )
    if a == "numgen" and b == "random":
        cur.i += 2
        cur.expect("mod")
        n = int(cur.next())
        if n < 1:
            raise NftError(f"{cur.where}: numgen mod {n}: Numerical result out of range")
        off = 0
        if cur.peek() == "offset":
            cur.next()
            off = int(cur.next())

        def numgen(w: Work) -> object:
            return w.chooser.uniform(n) + off

        return numgen, "int", f"numgen random mod {n}"
    return None


_ICMP_NAMES = {
    0: "echo-reply",
    3: "destination-unreachable",
    8: "echo-request",
    11: "time-exceeded",
}


def _concat(cur: Cursor) -> tuple[Getter, tuple[str, ...]] | None:
    first = _selector(cur)
    if first is None:
        return None
    getters = [first[0]]
    kinds = [first[1]]
    while cur.peek() == ".":
        cur.next()
        s = _selector(cur)
        if s is None:
            raise NftError(f"{cur.where}: bad concatenation")
        getters.append(s[0])
        kinds.append(s[1])
    if len(getters) == 1:
        g0 = getters[0]
        return (lambda w: (g0(w),)), tuple(kinds)
    gs = tuple(getters)
    return (lambda w: tuple(g(w) for g in gs)), tuple(kinds)


# --------------------------------------------------------------------------- sets

TYPE_KIND = {
    "ipv4_addr": "addr",
    "ipv6_addr": "addr",
    "inet_proto": "inet_proto",
    "inet_service": "inet_service",
    "mark": "mark",
    "ifname": "ifname",
    "verdict": "verdict",
}


def parse_elements(
    cur: Cursor, kinds: tuple[str, ...], is_map: bool, keys_only: bool = False
) -> list[tuple[tuple[object, ...], object, str]]:
    """``{ k [comment "c"] [: v] , ... }`` -> [(key, value, comment)]; ``keys_only``
    for deletions, where map values may be left out."""
    cur.expect("{")
    out: list[tuple[tuple[object, ...], object, str]] = []
    while True:
        tok = cur.peek()
        if tok == "}":
            cur.next()
            return out
        if tok == ",":
            cur.next()
            continue
        key: list[object] = []
        for i, kind in enumerate(kinds):
            if i:
                cur.expect(".")
            key.append(_parse_value(kind, cur.next()))
        comment = ""
        value: object = None
        while cur.peek() in ("comment", "timeout", "expires"):
            word = cur.next()
            text = cur.next()
            if word == "comment":
                comment = unquote(text)
        if cur.peek() == ":":
            cur.next()
            if not is_map:
                raise NftError(f"{cur.where}: a set element has no value")
            value = _verdict_value(cur)
        elif is_map and not keys_only:
            raise NftError(f"{cur.where}: map element without value")
        out.append((tuple(key), value, comment))


def _verdict_value(cur: Cursor) -> Verdict:
    v = cur.next()
    if v in ("jump", "goto"):
        return (v, cur.next())
    if v in ("accept", "drop", "return", "continue", "reject"):
        return (v, None)
    raise NftError(f"{cur.where}: unsupported map value {v!r}")


def _set_lookup(s: NftSet, key: tuple[object, ...], now: float) -> tuple[bool, object]:
    hit = s.elements.get(key)
    if hit is not None or key in s.elements:
        if s.timeout is not None or "timeout" in s.flags:
            pair: tuple[object, float | None] = hit  # type: ignore[assignment]
            if pair[1] is not None and pair[1] <= now:
                return False, None
            return True, pair[0]
        return True, hit
    if s.nets and len(key) == 1 and isinstance(key[0], int):
        a = key[0]
        for base, mask, val in s.nets:
            if a & mask == base:
                return True, val
    return False, None


def _match_value(value: object, want: object, kind: str) -> bool:
    if value is None:
        return False
    if kind == "addr" and isinstance(want, tuple):
        return (int(value) & want[1]) == want[0]  # type: ignore[call-overload]
    if kind in ("inet_service", "tc_handle") and isinstance(want, tuple):
        return bool(want[0] <= int(value) <= want[1])  # type: ignore[call-overload]
    if kind == "ct_state":
        return bool(int(value) & CT_STATE_BITS[str(want)])  # type: ignore[call-overload]
    if kind == "ct_status":
        bit = {"dnat": DST_NAT, "snat": SRC_NAT}.get(
            str(want), STATUS_NAMES.get(str(want).upper(), 0)
        )
        return bool(int(value) & bit)  # type: ignore[call-overload]
    if kind == "ifname" and isinstance(want, str) and want.endswith("*"):
        return str(value).startswith(want[:-1])
    return value == want


# --------------------------------------------------------------------------- rule compiler

Step = Callable[[Work, NftContext], "Verdict | bool | None"]


def compile_rule(cur: Cursor, table: NftTable) -> tuple[list[Step], str, str]:
    """One rule's statements as steps, its comment, and what its metadata statements do
    as a trace shows it (``nftrace set 1``; empty when it has none)."""
    steps: list[Step] = []
    effects: list[str] = []
    comment = ""
    while not cur.done():
        tok = cur.peek()
        assert tok is not None
        if tok == "comment":
            cur.next()
            comment = unquote(cur.next())
            continue
        if tok == "counter":
            cur.next()
            while cur.peek() in ("packets", "bytes"):
                cur.next()
                cur.next()
            continue
        if tok in ("accept", "drop", "return", "continue"):
            cur.next()
            steps.append(_const((tok, None)))
            _terminal(cur)
            continue
        if tok in ("jump", "goto"):
            cur.next()
            steps.append(_const((tok, cur.next())))
            _terminal(cur)
            continue
        if tok == "reject":
            cur.next()
            reason = "icmp-port-unreachable"
            if cur.peek() == "with":
                cur.next()
                kind = cur.next()
                if kind == "tcp":
                    cur.expect("reset")
                    reason = "tcp-reset"
                elif kind in ("icmp", "icmpx", "icmpv6"):
                    cur.expect("type")
                    reason = "icmp-" + cur.next()
                else:
                    raise UnsupportedRuleError(f"{cur.where}: reject with {kind}")
            steps.append(_reject_step(reason))
            continue
        if tok in ("dnat", "snat"):
            cur.next()
            if cur.peek() in ("ip", "ip6"):
                cur.next()
            cur.expect("to")
            target = cur.next()
            rng = _nat_to(target)
            extra = []
            while cur.peek() in ("random", "fully-random", "persistent"):
                extra.append(cur.next())
            nat_t: R.Dnat | R.Snat = (
                R.Dnat((rng,))
                if tok == "dnat"
                else R.Snat((rng,), random_fully="fully-random" in extra)
            )
            steps.append(_nat_step(nat_t))
            continue
        if tok == "masquerade":
            cur.next()
            opts = []
            ports = None
            while cur.peek() in ("random", "fully-random", "persistent", "to"):
                o = cur.next()
                if o == "to":
                    p = cur.next().lstrip(":")
                    lo, _, hi = p.partition("-")
                    ports = (int(lo), int(hi or lo))
                else:
                    opts.append(o)
            steps.append(_nat_step(R.Masquerade(ports, "random" in opts, "fully-random" in opts)))
            continue
        if tok == "notrack":
            cur.next()

            def notrack(w: Work, c: NftContext) -> None:
                w.untracked = True

            steps.append(notrack)
            continue
        if tok == "log":
            cur.next()
            while cur.peek() in ("prefix", "level", "group", "flags"):
                cur.next()
                cur.next()
            continue
        if starts_meta_set(cur):
            step, effect = meta_set_statement(cur)
            steps.append(step)
            effects.append(effect)
            continue
        if tok in ("update", "add") and (cur.peek(1) or "").startswith("@"):
            steps.append(_set_update(cur, table))
            continue
        sel = _concat(cur)
        if sel is None:
            raise UnsupportedRuleError(f"{cur.where}: unsupported expression {tok!r}")
        getter, kinds = sel
        # bitwise ops on a single selector: mark and 0x4000 == 0
        while cur.peek() in _BITOPS and len(kinds) == 1:
            op = _BITOPS[cur.next()]
            operand = int(cur.next(), 0)
            getter = _bitwise(getter, op, operand)
        nxt = cur.peek()
        if nxt == "vmap":
            cur.next()
            steps.append(_vmap_step(cur, table, getter, kinds))
            continue
        negate = False
        if nxt in ("==", "!="):
            negate = cur.next() == "!="
        elif nxt in ("<", ">", "<=", ">="):
            op = cur.next()
            val = (
                int(cur.next(), 0) if kinds != ("tc_handle",) else _parse_value(*kinds, cur.next())
            )
            steps.append(_cmp_step(getter, op, val))  # type: ignore[arg-type]
            continue
        steps.append(_test_step(cur, table, getter, kinds, negate))
    return steps, comment, ", ".join(effects)


#: nft's bitwise operators: the words kube-proxy writes and the symbols ``nft list`` prints
#: (``meta mark & 0x00004000 == 0x00000000``, ``meta mark set meta mark ^ 0x00004000``)
_BITOPS = {"and": "and", "&": "and", "or": "or", "|": "or", "xor": "xor", "^": "xor"}


def _terminal(cur: Cursor) -> None:
    """A verdict ends the rule: only a comment may follow (nft: "Statement after
    terminal statement has no effect")."""
    if cur.peek() == "comment":
        return
    if not cur.done():
        raise NftError(f"{cur.where}: statement after terminal statement has no effect")


def _bitwise(g: Callable[[Work], Any], op: str, operand: int) -> Callable[[Work], Any]:
    def get(w: Work) -> tuple[int]:
        v = _int0(g(w)[0])
        return (v & operand if op == "and" else v | operand if op == "or" else v ^ operand,)

    return get


def _const(v: Verdict) -> Step:
    def step(w: Work, c: NftContext) -> Verdict:
        return v

    return step


def _int0(v: object) -> int:
    return 0 if v is None else int(v)  # type: ignore[call-overload]


def _nat_to(text: str) -> R.NatRange:
    from .ruleparse import nat_range

    return nat_range(text)


def _reject_step(reason: str) -> Step:
    def step(w: Work, c: NftContext) -> Verdict:
        w.reject_with = reason
        return ("reject", None)

    return step


def _nat_step(t: R.Dnat | R.Snat | R.Masquerade) -> Step:
    def step(w: Work, c: NftContext) -> Verdict:
        if isinstance(t, R.Dnat):
            code, note = dnat(w, t)
        else:
            code, note = snat(w, t)
        c.note = note
        return ("accept", None) if code == ACCEPT else ("drop", None)

    return step


def _set_update(cur: Cursor, table: NftTable) -> Step:
    cur.next()
    name = cur.next()[1:]
    cur.expect("{")
    sel = _concat(cur)
    if sel is None:
        raise UnsupportedRuleError(f"{cur.where}: unsupported set key")
    getter = sel[0]
    timeout: float | None = None
    if cur.peek() == "timeout":
        cur.next()
        timeout = parse_seconds(cur.next())
    cur.expect("}")
    if name not in table.sets:
        raise NftError(f"{cur.where}: no set {name!r}")

    def step(w: Work, c: NftContext) -> None:
        if not w.commit:
            return
        s = c.engine.set_state(c.table, name)
        t = timeout if timeout is not None else s.timeout
        key: tuple[object, ...] = getter(w)  # type: ignore[assignment]
        s.elements[key] = (None, (w.now + t) if t else None)

    return step


def _vmap_step(
    cur: Cursor, table: NftTable, getter: Callable[[Work], Any], kinds: tuple[str, ...]
) -> Step:
    tok = cur.peek()
    if tok is not None and tok.startswith("@"):
        cur.next()
        name = tok[1:]
        if name not in table.sets:
            raise NftError(f"{cur.where}: no map {name!r}")

        def step(w: Work, c: NftContext) -> Verdict | bool:
            key = getter(w)
            if None in key:
                return False
            found, val = _set_lookup(c.engine.set_state(c.table, name), key, w.now)
            return val if found else False  # type: ignore[return-value]

        return step
    value_kinds = tuple("int" if k == "int" else k for k in kinds)
    elems = parse_elements(cur, value_kinds, True)
    inline = NftSet("<anonymous>", value_kinds, "verdict")
    fill_set(inline, elems)

    def step2(w: Work, c: NftContext) -> Verdict | bool:
        key = getter(w)
        if None in key:
            return False
        found, val = _set_lookup(inline, key, w.now)
        return val if found else False  # type: ignore[return-value]

    return step2


def _cmp_step(getter: Callable[[Work], Any], op: str, val: int) -> Step:
    def step(w: Work, c: NftContext) -> bool:
        (v,) = getter(w)
        if v is None:
            return False
        return bool({"<": v < val, ">": v > val, "<=": v <= val, ">=": v >= val}[op])

    return step


def _test_step(
    cur: Cursor,
    table: NftTable,
    getter: Callable[[Work], Any],
    kinds: tuple[str, ...],
    negate: bool,
) -> Step:
    tok = cur.peek()
    if tok is not None and tok.startswith("@"):
        cur.next()
        name = tok[1:]
        if name not in table.sets:
            raise NftError(f"{cur.where}: no set {name!r}")

        def in_named(w: Work, c: NftContext) -> bool:
            key = getter(w)
            if None in key:
                return False
            return _set_lookup(c.engine.set_state(c.table, name), key, w.now)[0] != negate

        return in_named
    if tok == "{":
        elems = parse_elements(cur, kinds, False)
        anon = NftSet("<anonymous>", kinds)
        fill_set(anon, elems)

        def in_anon(w: Work, c: NftContext) -> bool:
            key = getter(w)
            if None in key:
                return False
            if len(kinds) == 1 and kinds[0] in ("ct_state",):
                return any(_match_value(key[0], k[0], kinds[0]) for k in anon.elements) != negate
            return _set_lookup(anon, key, w.now)[0] != negate

        return in_anon
    if len(kinds) != 1:
        raise UnsupportedRuleError(f"{cur.where}: comparing a concatenation")
    kind = kinds[0]
    raw = cur.next()
    if kind == "ct_state":
        words = raw.split(",")
        while cur.peek() == ",":  # "ct state established,related": the tokens split
            cur.next()
            words.append(cur.next())
        wants = [_parse_value(kind, p) for p in words if p]
    else:
        wants = [_parse_value(kind, raw)]

    def test(w: Work, c: NftContext) -> bool:
        (v,) = getter(w)
        if v is None:
            return False
        return any(_match_value(v, want, kind) for want in wants) != negate

    return test


def fill_set(s: NftSet, elems: list[tuple[tuple[object, ...], object, str]]) -> None:
    timed = s.timeout is not None or "timeout" in s.flags
    for key, value, _comment in elems:
        if len(key) == 1 and isinstance(key[0], tuple) and len(key[0]) == 2 and s.key[0] == "addr":
            s.nets.append((key[0][0], key[0][1], value))
            continue
        s.elements[key] = (value, None) if timed else value


def parse_seconds(text: str) -> float:
    m = re.fullmatch(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?", text)
    if not m or not text:
        raise NftError(f"bad time {text!r}")
    d, h, mi, s, ms = (int(x) if x else 0 for x in m.groups())
    return d * 86400 + h * 3600 + mi * 60 + s + ms / 1000
