"""Rewrite kube-proxy's rule text into the form ``iptables-save`` prints it in.

``iptables-restore`` accepts options in any order; ``iptables-save`` (1.8.x) prints them
canonically: ``[!] -s``, ``[!] -d``, ``-i``, ``-o``, ``[!] -p`` first (host addresses
with ``/32`` or ``/128``), then every match in the order it was given, each with its
options in the extension's own order, then ``-j`` and the target's options. Some
extensions print what they stored rather than what they were given:

* ``-m comment``: bare if only ``[A-Za-z0-9_-]``, else double-quoted (``"`` ``\\`` ``'``
  escaped);
* ``-m statistic --probability``: the kernel keeps ``lround(p * 2**31)``, printed back
  with 11 decimals (``0.3333333333`` → ``0.33333333349``);
* ``-m recent``: adds ``--mask <all ones> --rsource`` unless given (so save text maps to
  itself); ``-m nfacct`` prints two spaces;
* ``-j MARK --or-mark M`` → ``--set-xmark M/M``, ``--xor-mark M`` → ``--set-xmark M/0x0``;
* ``-j REJECT`` → ``--reject-with icmp-port-unreachable`` (``icmp6-…`` for IPv6);
* ``-m conntrack --ctstate``: states in the kernel's bit order.

Only the matches and targets kube-proxy writes (iptables, IPVS glue) are covered;
anything else raises :class:`ValueError` naming the token. Verified against iptables
1.8.9 (nf_tables back end) by ``tests/kernel/test_proxy_rules_load.py``, except
``-m ipvs`` (this kernel has no IPVS), whose printed form is a best guess.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import shlex

_NO_QUOTE = frozenset("_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_CTSTATES = ("INVALID", "NEW", "RELATED", "ESTABLISHED", "UNTRACKED", "SNAT", "DNAT")
_PROTO_MATCHES = frozenset({"tcp", "udp", "sctp"})


def save_string(value: str) -> str:
    """How iptables-save prints a string argument (comment, nfacct name)."""
    if value and all(c in _NO_QUOTE for c in value):
        return value
    escaped = "".join("\\" + c if c in "\"\\'" else c for c in value)
    return f'"{escaped}"'


def saved_probability(text: str) -> str:
    """The probability iptables-save prints for ``--probability text``."""
    stored = math.floor(float(text) * 0x80000000 + 0.5)
    return f"{stored / 0x80000000:.11f}"


def _addr(text: str, ipv6: bool) -> str:
    if "/" in text:
        net = ipaddress.ip_network(text, strict=False)
        return f"{net.network_address}/{net.prefixlen}"
    return f"{ipaddress.ip_address(text)}/{128 if ipv6 else 32}"


def _mark(text: str) -> str:
    value, _, mask = text.partition("/")
    v = int(value, 0)
    if not mask or int(mask, 0) == 0xFFFFFFFF:
        return hex(v)
    return f"{hex(v)}/{hex(int(mask, 0))}"


class _Match:
    __slots__ = ("name", "opts")

    def __init__(self, name: str) -> None:
        self.name = name
        self.opts: list[tuple[bool, str, list[str]]] = []  # (negated, option, values)


#: option -> (match it belongs to, number of values)
_OPTION_MATCH: dict[str, tuple[str | None, int]] = {
    "--comment": ("comment", 1),
    "--dport": (None, 1),
    "--sport": (None, 1),
    "--mode": ("statistic", 1),
    "--probability": ("statistic", 1),
    "--name": ("recent", 1),
    "--set": ("recent", 0),
    "--rcheck": ("recent", 0),
    "--update": ("recent", 0),
    "--remove": ("recent", 0),
    "--seconds": ("recent", 1),
    "--reap": ("recent", 0),
    "--mask": ("recent", 1),
    "--rsource": ("recent", 0),
    "--rdest": ("recent", 0),
    "--ctstate": ("conntrack", 1),
    "--src-type": ("addrtype", 1),
    "--dst-type": ("addrtype", 1),
    "--limit-iface-in": ("addrtype", 0),
    "--limit-iface-out": ("addrtype", 0),
    "--mark": ("mark", 1),
    "--nfacct-name": ("nfacct", 1),
    "--match-set": ("set", 2),
    "--physdev-is-in": ("physdev", 0),
    "--vaddr": ("ipvs", 1),
    "--vproto": ("ipvs", 1),
    "--vport": ("ipvs", 1),
}
_PROTO_NUMBERS = {"tcp": "6", "udp": "17", "sctp": "132"}


def _format_match(m: _Match, ipv6: bool) -> str:
    opts = {o: (neg, vals) for neg, o, vals in m.opts}

    def neg(o: str) -> str:
        return "! " if opts[o][0] else ""

    def val(o: str) -> str:
        return opts[o][1][0]

    parts = [f"-m {m.name}"]
    if m.name == "comment":
        parts.append(f"--comment {save_string(val('--comment'))}")
    elif m.name in _PROTO_MATCHES:
        for o in ("--sport", "--dport"):
            if o in opts:
                parts.append(f"{neg(o)}{o} {val(o)}")
    elif m.name == "statistic":
        parts.append(f"--mode {val('--mode')}")
        if "--probability" in opts:
            parts.append(
                f"{neg('--probability')}--probability {saved_probability(val('--probability'))}"
            )
    elif m.name == "recent":
        for o in ("--set", "--rcheck", "--update", "--remove"):
            if o in opts:
                parts.append(f"{neg(o)}{o}")
        if "--seconds" in opts:
            parts.append(f"--seconds {val('--seconds')}")
        if "--reap" in opts:
            parts.append("--reap")
        full = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff" if ipv6 else "255.255.255.255"
        mask = val("--mask") if "--mask" in opts else full
        side = "--rdest" if "--rdest" in opts else "--rsource"
        parts.append(
            f"--name {val('--name') if '--name' in opts else 'DEFAULT'} --mask {mask} {side}"
        )
    elif m.name == "conntrack":
        states = set(val("--ctstate").split(","))
        unknown = states.difference(_CTSTATES)
        if unknown:
            raise ValueError(f"unknown ctstate {sorted(unknown)}")
        ordered = ",".join(s for s in _CTSTATES if s in states)
        parts.append(f"{neg('--ctstate')}--ctstate {ordered}")
    elif m.name == "addrtype":
        for o in ("--src-type", "--dst-type"):
            if o in opts:
                parts.append(f"{neg(o)}{o} {val(o)}")
        for o in ("--limit-iface-in", "--limit-iface-out"):  # after the types, as saved
            if o in opts:
                parts.append(o)
    elif m.name == "mark":
        parts.append(f"{neg('--mark')}--mark {_mark(val('--mark'))}")
    elif m.name == "nfacct":
        parts.append(f"--nfacct-name  {save_string(val('--nfacct-name'))}")
    elif m.name == "set":
        name, flags = opts["--match-set"][1]
        parts.append(f"{neg('--match-set')}--match-set {name} {flags}")
    elif m.name == "physdev":
        parts.append(f"{neg('--physdev-is-in')}--physdev-is-in")
    elif m.name == "ipvs":  # not loadable here (no IPVS in this kernel): unverified form
        if "--vproto" in opts:
            parts.append(f"--vproto {_PROTO_NUMBERS.get(val('--vproto'), val('--vproto'))}")
        if "--vaddr" in opts:
            parts.append(f"--vaddr {_addr(val('--vaddr'), ipv6)}")
        if "--vport" in opts:
            parts.append(f"--vport {val('--vport')}")
    else:  # pragma: no cover - guarded by the parser
        raise ValueError(f"unsupported match {m.name!r}")
    return " ".join(parts)


def _format_target(target: str, topts: list[str], ipv6: bool, flag: str = "-j") -> str:
    if target == "REJECT":
        if not topts:
            topts = ["--reject-with", "icmp6-port-unreachable" if ipv6 else "icmp-port-unreachable"]
        return "-j REJECT " + " ".join(topts)
    if target == "MARK":
        if len(topts) != 2:
            raise ValueError(f"MARK needs one option, got {topts}")
        opt, value = topts
        v = int(value.partition("/")[0], 0)
        if opt == "--or-mark":
            return f"-j MARK --set-xmark {hex(v)}/{hex(v)}"
        if opt == "--xor-mark":
            return f"-j MARK --set-xmark {hex(v)}/0x0"
        if opt == "--set-xmark":
            mask = int(value.partition("/")[2] or "0xffffffff", 0)
            return f"-j MARK --set-xmark {hex(v)}/{hex(mask)}"
        if opt == "--set-mark":
            mask = int(value.partition("/")[2] or "0xffffffff", 0)
            return f"-j MARK --set-xmark {hex(v)}/{hex(mask)}"
        raise ValueError(f"unsupported MARK option {opt!r}")
    if target in ("DNAT", "SNAT", "MASQUERADE"):
        return " ".join(["-j", target, *topts])
    if topts:
        raise ValueError(f"unexpected options {topts} for target {target!r}")
    return f"{flag} {target}"


@functools.lru_cache(maxsize=1 << 16)
def save_form(rule: str, ipv6: bool = False) -> str:
    """``-A CHAIN <kube-proxy options>`` → the line ``iptables-save`` prints for it."""
    tokens = shlex.split(rule)
    if len(tokens) < 2 or tokens[0] not in ("-A", "-I"):
        raise ValueError(f"not a rule: {rule!r}")
    chain = tokens[1]
    generic: dict[str, tuple[bool, str]] = {}
    matches: list[_Match] = []
    target: str | None = None
    flag = "-j"
    topts: list[str] = []
    i, negate = 2, False
    while i < len(tokens):
        tok = tokens[i]
        if target is not None:
            topts.append(tok)
            i += 1
            continue
        if tok == "!":
            negate = True
            i += 1
            continue
        if tok in ("-s", "-d", "-i", "-o", "-p"):
            value = tokens[i + 1]
            if tok in ("-s", "-d"):
                value = _addr(value, ipv6)
            generic[tok] = (negate, value)
            i += 2
        elif tok == "-m":
            matches.append(_Match(tokens[i + 1]))
            i += 2
        elif tok in ("-j", "-g"):
            flag, target = tok, tokens[i + 1]
            i += 2
        elif tok in _OPTION_MATCH:
            owner, nvals = _OPTION_MATCH[tok]
            if owner is None:  # --dport/--sport: the protocol match (loaded implicitly)
                m = next((x for x in reversed(matches) if x.name in _PROTO_MATCHES), None)
                if m is None:
                    proto = generic.get("-p", (False, ""))[1]
                    if proto not in _PROTO_MATCHES:
                        raise ValueError(f"{tok} without a protocol in {rule!r}")
                    m = _Match(proto)
                    matches.append(m)
            else:
                m = next((x for x in reversed(matches) if x.name == owner), None)
                if m is None:
                    raise ValueError(f"{tok} without -m {owner} in {rule!r}")
            m.opts.append((negate, tok, tokens[i + 1 : i + 1 + nvals]))
            i += 1 + nvals
        else:
            raise ValueError(f"unsupported token {tok!r} in {rule!r}")
        if tok != "!":
            negate = False
    known = _PROTO_MATCHES | {o for o, _ in _OPTION_MATCH.values() if o}
    for m in matches:
        if m.name not in known:
            raise ValueError(f"unsupported match {m.name!r} in {rule!r}")
    out = ["-A", chain]
    for opt in ("-s", "-d", "-i", "-o", "-p"):
        if opt in generic:
            neg, value = generic[opt]
            out.append(f"{'! ' if neg else ''}{opt} {value}")
    out.extend(_format_match(m, ipv6) for m in matches)
    if target is not None:
        out.append(_format_target(target, topts, ipv6, flag))
    return " ".join(out)


#: the iptables the save form is verified against (see the module docstring)
SAVE_VERSION = "v1.8.9 (nf_tables)"


def with_save_comments(text: str, when: float, version: str = SAVE_VERSION) -> str:
    """``text`` in iptables-save form with the comment lines ``iptables-save`` puts
    around each table: ``# Generated by iptables-save VERSION on DATE`` before its
    ``*table`` line, ``# Completed on DATE`` after its ``COMMIT`` (DATE as ``ctime``
    prints ``when``, a Unix time). Lines outside tables (ipvsadm-save, ipset save) are
    left as they are. Pure: the caller gives the time."""
    import time

    date = time.ctime(when)
    out: list[str] = []
    in_table = False
    for line in text.splitlines():
        if line.startswith("*") and not in_table:
            out.append(f"# Generated by iptables-save {version} on {date}")
            in_table = True
        out.append(line)
        if line == "COMMIT" and in_table:
            out.append(f"# Completed on {date}")
            in_table = False
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def saved_rule(text: str) -> str:
    """The form ``iptables-save`` prints for a rule line as it was loaded (restore input
    or save text alike: the save form maps to itself), for showing a rule where users
    compare it with ``iptables-save`` or ``svclab rules``. IPv6 when an address in it is.
    A rule this module cannot rewrite (a match kube-proxy never writes) is returned as
    given."""
    try:
        return save_form(text, _looks_ipv6(text))
    except ValueError:
        return text


def _looks_ipv6(text: str) -> bool:
    for tok in text.split():
        host = tok.strip("[]").split("]")[0].split("/")[0]
        if host.count(":") >= 2:
            try:
                ipaddress.IPv6Address(host.strip("[]"))
            except ValueError:
                continue
            return True
    return False
