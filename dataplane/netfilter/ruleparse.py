"""One iptables rule's text to typed matches and a target (:mod:`.rules`).

:func:`parse_rule` reads the words after ``-A CHAIN`` the way iptables does: the generic
options (``-s -d -i -o -p -f``, with ``!`` before the option or, the legacy way, before
its value), ``-m MODULE`` followed by that module's options (an option belongs to the
latest loaded module that knows it; ``-p tcp`` loads ``tcp`` implicitly), then ``-j`` /
``-g`` and the target's options. Unknown modules, targets and options raise
:class:`~netmodel.errors.UnsupportedRuleError`; bad values raise :class:`RestoreError`;
both name ``source:line`` and the rule text.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from netmodel.errors import InputError, UnsupportedRuleError
from netmodel.ip import IPAddress, IPNetwork

from . import rules as R

__all__ = [
    "RestoreError",
    "nat_range",
    "new_chain",
    "parse_common_line",
    "parse_rule",
    "tokenize",
    "unsupported",
    "where",
]


class RestoreError(InputError):
    """Malformed iptables-save/restore input; the message names the line."""


def where(source: str, line: int, text: str) -> str:
    """The prefix of an error about one input line: ``SOURCE:LINE: TEXT``."""
    return f"{source}:{line}: {text.strip()}"


def unsupported(source: str, line: int, text: str, why: str) -> UnsupportedRuleError:
    """The error for a line the kernel accepts but svclab cannot evaluate."""
    return UnsupportedRuleError(f"{where(source, line, text)}: {why}")


# --------------------------------------------------------------------------- tokens


_TOKEN = re.compile(r"""\s*(?:"((?:[^"\\]|\\.)*)"|([^\s"]+))(?=\s|$)""")


def tokenize(line: str) -> list[str]:
    """Split a rule line like iptables-restore: whitespace separated, double quotes
    group words, backslash escapes the next character inside double quotes. Single
    quotes are ordinary characters (iptables-restore does not group with them)."""
    if '"' not in line:
        return line.split()
    if "\\" not in line and line.count('"') == 2:
        # one quoted word without escapes (a comment): split around it, with the
        # regex's rule that the quoted word stands alone between spaces
        head, word, tail = line.split('"')
        if (not head or head[-1].isspace()) and (not tail or tail[0].isspace()):
            out = head.split()
            out.append(word)
            out += tail.split()
            return out
    out = []
    pos = 0
    n = len(line.rstrip())
    while pos < n:
        m = _TOKEN.match(line, pos)
        if m is None:
            raise ValueError(f"cannot split {line[pos:].strip()!r} (unbalanced quote?)")
        dq, bare = m.groups()
        if dq is not None:
            out.append(_UNESCAPE.sub(r"\1", dq) if "\\" in dq else dq)
        else:
            out.append(bare)
        pos = m.end()
    return out


_UNESCAPE = re.compile(r"\\(.)")


# --------------------------------------------------------------------------- values


@lru_cache(maxsize=65536)
def _net(text: str) -> IPNetwork:
    return ipaddress.ip_network(text, strict=False)


@lru_cache(maxsize=65536)
def _addr(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


def _int(text: str) -> int:
    return int(text, 0)


def _mark(text: str) -> tuple[int, int]:
    value, _, mask = text.partition("/")
    return _int(value), (_int(mask) if mask else 0xFFFFFFFF)


def _port(text: str) -> int:
    p = int(text)
    if not 0 <= p <= 65535:
        raise ValueError(f"port {text} out of range")
    return p


def _port_range(text: str) -> R.PortRange:
    if ":" in text:
        lo, _, hi = text.partition(":")
        rng = (_port(lo) if lo else 0, _port(hi) if hi else 65535)
        if rng[0] > rng[1]:
            raise ValueError(f"invalid portrange (min > max): {text}")
        return rng
    p = _port(text)
    return (p, p)


def _byte(text: str, what: str) -> int:
    v = int(text)
    if not 0 <= v <= 255:
        raise ValueError(f"{what} {text} out of range (0-255)")
    return v


_MAC = re.compile(r"[0-9a-fA-F]{1,2}(?::[0-9a-fA-F]{1,2}){5}")
_IFNAMSIZ = 16


def _iface(text: str) -> str:
    if len(text) >= _IFNAMSIZ:
        raise ValueError(f"interface name `{text}' must be shorter than IFNAMSIZ (15)")
    return text


def nat_range(text: str) -> R.NatRange:
    """``a[-b][:p[-q]]`` or ``[v6][-[v6]]:p``; also ``:p`` (port only)."""
    addr_part, port_part = text, ""
    if text.startswith("["):
        close = text.index("]")
        addr_part, rest = text[1:close], text[close + 1 :]
        if rest.startswith("-["):
            close2 = rest.index("]")
            addr_part += "-" + rest[2:close2]
            rest = rest[close2 + 1 :]
        port_part = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        addr_part, _, port_part = text.partition(":")
    lo: IPAddress | None = None
    hi: IPAddress | None = None
    if addr_part:
        a, _, b = addr_part.partition("-")
        lo = _addr(a)
        hi = _addr(b) if b else lo
    plo: int | None = None
    phi: int | None = None
    if port_part:
        a, _, b = port_part.partition("-")
        plo = _port(a)
        phi = _port(b) if b else plo
        if phi < plo:
            raise ValueError(f"port range `{port_part}' funky")
    if lo is not None and hi is not None and hi is not lo and int(hi) < int(lo):
        raise ValueError(f"bad IP range `{addr_part}'")
    return R.NatRange(lo, hi, plo, phi)


PROTO_ALIASES = {
    "6": "tcp",
    "17": "udp",
    "1": "icmp",
    "132": "sctp",
    "58": "ipv6-icmp",
    "icmpv6": "ipv6-icmp",
}

ICMP_TYPES: dict[str, tuple[int | None, int | None]] = {
    "any": (None, None),
    "echo-reply": (0, None),
    "pong": (0, None),
    "destination-unreachable": (3, None),
    "network-unreachable": (3, 0),
    "host-unreachable": (3, 1),
    "protocol-unreachable": (3, 2),
    "port-unreachable": (3, 3),
    "fragmentation-needed": (3, 4),
    "source-route-failed": (3, 5),
    "network-unknown": (3, 6),
    "host-unknown": (3, 7),
    "network-prohibited": (3, 9),
    "host-prohibited": (3, 10),
    "TOS-network-unreachable": (3, 11),
    "TOS-host-unreachable": (3, 12),
    "communication-prohibited": (3, 13),
    "host-precedence-violation": (3, 14),
    "precedence-cutoff": (3, 15),
    "source-quench": (4, None),
    "redirect": (5, None),
    "echo-request": (8, None),
    "ping": (8, None),
    "router-advertisement": (9, None),
    "router-solicitation": (10, None),
    "time-exceeded": (11, None),
    "ttl-exceeded": (11, None),
    "ttl-zero-during-transit": (11, 0),
    "ttl-zero-during-reassembly": (11, 1),
    "parameter-problem": (12, None),
    "ip-header-bad": (12, 0),
    "required-option-missing": (12, 1),
    "timestamp-request": (13, None),
    "timestamp-reply": (14, None),
    "address-mask-request": (17, None),
    "address-mask-reply": (18, None),
}

ICMPV6_TYPES: dict[str, tuple[int | None, int | None]] = {
    "destination-unreachable": (1, None),
    "no-route": (1, 0),
    "communication-prohibited": (1, 1),
    "beyond-scope": (1, 2),
    "address-unreachable": (1, 3),
    "port-unreachable": (1, 4),
    "failed-policy": (1, 5),
    "reject-route": (1, 6),
    "packet-too-big": (2, None),
    "time-exceeded": (3, None),
    "ttl-exceeded": (3, None),
    "ttl-zero-during-transit": (3, 0),
    "ttl-zero-during-reassembly": (3, 1),
    "parameter-problem": (4, None),
    "bad-header": (4, 0),
    "unknown-header-type": (4, 1),
    "unknown-option": (4, 2),
    "echo-request": (128, None),
    "ping": (128, None),
    "echo-reply": (129, None),
    "pong": (129, None),
    "router-solicitation": (133, None),
    "router-advertisement": (134, None),
    "neighbour-solicitation": (135, None),
    "neighbor-solicitation": (135, None),
    "neighbour-advertisement": (136, None),
    "neighbor-advertisement": (136, None),
    "redirect": (137, None),
}

LOG_LEVELS = {
    "emerg": 0,
    "panic": 0,
    "alert": 1,
    "crit": 2,
    "error": 3,
    "err": 3,
    "warning": 4,
    "warn": 4,
    "notice": 5,
    "info": 6,
    "debug": 7,
}

REJECT_WITH = {
    "icmp-net-unreachable",
    "icmp-host-unreachable",
    "icmp-port-unreachable",
    "icmp-proto-unreachable",
    "icmp-net-prohibited",
    "icmp-host-prohibited",
    "icmp-admin-prohibited",
    "tcp-reset",
    "icmp6-no-route",
    "icmp6-adm-prohibited",
    "icmp6-addr-unreachable",
    "icmp6-port-unreachable",
    "no-route",
    "adm-prohibited",
    "addr-unreach",
    "port-unreach",
}
_REJECT_ALIASES = {
    "net-unreach": "icmp-net-unreachable",
    "host-unreach": "icmp-host-unreachable",
    "port-unreach": "icmp-port-unreachable",
    "proto-unreach": "icmp-proto-unreachable",
    "net-prohib": "icmp-net-prohibited",
    "host-prohib": "icmp-host-prohibited",
    "admin-prohib": "icmp-admin-prohibited",
    "tcp-rst": "tcp-reset",
}

ADDR_TYPES = set(R.AddrType.__args__)  # type: ignore[attr-defined]

# option -> number of arguments, per match module. Aliases map to a canonical name.
_MODULE_OPTIONS: dict[str, dict[str, int]] = {
    "tcp": {"--sport": 1, "--dport": 1, "--tcp-flags": 2, "--syn": 0, "--tcp-option": 1},
    "udp": {"--sport": 1, "--dport": 1},
    "sctp": {"--sport": 1, "--dport": 1},
    "multiport": {"--dports": 1, "--sports": 1, "--ports": 1},
    "addrtype": {"--src-type": 1, "--dst-type": 1, "--limit-iface-in": 0, "--limit-iface-out": 0},
    "comment": {"--comment": 1},
    "statistic": {"--mode": 1, "--probability": 1, "--every": 1, "--packet": 1},
    "recent": {
        "--set": 0,
        "--rcheck": 0,
        "--update": 0,
        "--remove": 0,
        "--seconds": 1,
        "--hitcount": 1,
        "--reap": 0,
        "--rttl": 0,
        "--name": 1,
        "--mask": 1,
        "--rsource": 0,
        "--rdest": 0,
    },
    "mark": {"--mark": 1},
    "connmark": {"--mark": 1},
    "conntrack": {
        "--ctstate": 1,
        "--ctstatus": 1,
        "--ctproto": 1,
        "--ctorigsrc": 1,
        "--ctorigdst": 1,
        "--ctreplsrc": 1,
        "--ctrepldst": 1,
        "--ctorigsrcport": 1,
        "--ctorigdstport": 1,
        "--ctreplsrcport": 1,
        "--ctrepldstport": 1,
        "--ctdir": 1,
    },
    "state": {"--state": 1},
    "icmp": {"--icmp-type": 1},
    "icmp6": {"--icmpv6-type": 1},
    "physdev": {
        "--physdev-in": 1,
        "--physdev-out": 1,
        "--physdev-is-in": 0,
        "--physdev-is-out": 0,
        "--physdev-is-bridged": 0,
    },
    "set": {"--match-set": 2, "--set": 2},
    "nfacct": {"--nfacct-name": 1},
    "limit": {"--limit": 1, "--limit-burst": 1},
    "mac": {"--mac-source": 1},
    "iprange": {"--src-range": 1, "--dst-range": 1},
    "length": {"--length": 1},
    "ttl": {"--ttl-eq": 1, "--ttl-lt": 1, "--ttl-gt": 1},
}
_OPTION_ALIASES = {
    "--source-port": "--sport",
    "--destination-port": "--dport",
    "--source-ports": "--sports",
    "--destination-ports": "--dports",
}
_MODULE_ALIASES = {"ipv6-icmp": "icmp6"}

# Options iptables refuses to negate ("option X cannot be inverted"), per module.
_NOT_INVERTIBLE: dict[str, frozenset[str]] = {
    "comment": frozenset({"--comment"}),
    "limit": frozenset({"--limit", "--limit-burst"}),
    "statistic": frozenset({"--mode", "--packet"}),
    "recent": frozenset(
        {"--seconds", "--hitcount", "--reap", "--rttl", "--name", "--mask", "--rsource", "--rdest"}
    ),
    "addrtype": frozenset({"--limit-iface-in", "--limit-iface-out"}),
    "conntrack": frozenset({"--ctdir"}),
    "nfacct": frozenset({"--nfacct-name"}),
    "ttl": frozenset({"--ttl-lt", "--ttl-gt"}),
}

# Real match modules (the kernel and iptables know them) that svclab does not evaluate:
# refused as unsupported. Any other unknown name is refused as iptables refuses it.
_KNOWN_UNSUPPORTED_MODULES = {
    "rpfilter",
    "ipvs",
    "owner",
    "socket",
    "policy",
    "u32",
    "string",
    "hashlimit",
    "connlimit",
    "connbytes",
    "helper",
    "pkttype",
    "dscp",
    "tos",
    "ecn",
    "time",
    "quota",
    "cgroup",
    "devgroup",
    "cpu",
    "bpf",
    "realm",
    "esp",
    "ah",
    "dccp",
    "udplite",
    "hl",
    "ipv6header",
    "frag",
    "rt",
    "mh",
    "osf",
    "cluster",
    "l2tp",
    "tcpmss",
    "rateest",
    "ipcomp",
    "connlabel",
    "condition",
    "geoip",
    "account",
    "srh",
    "hbh",
    "dst",
    "eui64",
    "conntrackl",
    "set2",
    "ipset",
    "xfrm",
    "sctp-chunks",
    "length2",
    "ttl2",
}

_TARGET_OPTIONS: dict[str, dict[str, int]] = {
    "ACCEPT": {},
    "DROP": {},
    "RETURN": {},
    "TRACE": {},
    "NOTRACK": {},
    "REJECT": {"--reject-with": 1},
    "DNAT": {"--to-destination": 1, "--random": 0, "--persistent": 0},
    "SNAT": {"--to-source": 1, "--random": 0, "--random-fully": 0, "--persistent": 0},
    "MASQUERADE": {"--to-ports": 1, "--random": 0, "--random-fully": 0},
    "MARK": {"--set-xmark": 1, "--set-mark": 1, "--and-mark": 1, "--or-mark": 1, "--xor-mark": 1},
    "CONNMARK": {
        "--set-xmark": 1,
        "--set-mark": 1,
        "--save-mark": 0,
        "--restore-mark": 0,
        "--and-mark": 1,
        "--or-mark": 1,
        "--xor-mark": 1,
        "--nfmask": 1,
        "--ctmask": 1,
        "--mask": 1,
    },
    "LOG": {
        "--log-prefix": 1,
        "--log-level": 1,
        "--log-tcp-sequence": 0,
        "--log-tcp-options": 0,
        "--log-ip-options": 0,
        "--log-uid": 0,
        "--log-macdecode": 0,
    },
    "NFLOG": {
        "--nflog-group": 1,
        "--nflog-prefix": 1,
        "--nflog-range": 1,
        "--nflog-size": 1,
        "--nflog-threshold": 1,
    },
    "CT": {
        "--notrack": 0,
        "--zone": 1,
        "--zone-orig": 1,
        "--zone-reply": 1,
        "--helper": 1,
        "--ctevents": 1,
        "--expevents": 1,
        "--timeout": 1,
    },
    "CHECKSUM": {"--checksum-fill": 0},
}
# Real iptables targets svclab does not evaluate: refused by name rather than being
# mistaken for a jump to a chain.
_KNOWN_UNSUPPORTED_TARGETS = {
    "REDIRECT",
    "TPROXY",
    "NETMAP",
    "TCPMSS",
    "CLASSIFY",
    "DSCP",
    "TOS",
    "ECN",
    "HMARK",
    "SECMARK",
    "CONNSECMARK",
    "TEE",
    "QUEUE",
    "NFQUEUE",
    "AUDIT",
    "IDLETIMER",
    "LED",
    "RATEEST",
    "SET",
    "SYNPROXY",
    "TTL",
    "HL",
    "ULOG",
    "CLUSTERIP",
    "SAME",
    "CONNMARK2",
    "TCPOPTSTRIP",
    "DNPT",
    "SNPT",
}
_NAT_TARGETS = {"DNAT", "SNAT", "MASQUERADE"}
_RAW_TARGETS = {"NOTRACK", "CT"}

# Targets the kernel allows only in one table and at some hooks (xt_target.table and
# .hooks): checked here for rules in built-in chains, and when the table is committed
# for user chains (by the hooks that reach them, :func:`.parse.check_hooks`).
TARGET_TABLE: dict[str, str] = {
    "REJECT": "filter",
    "DNAT": "nat",
    "SNAT": "nat",
    "MASQUERADE": "nat",
    "NOTRACK": "raw",
    "CT": "raw",
}
TARGET_HOOKS: dict[str, frozenset[str]] = {
    "REJECT": frozenset({"INPUT", "FORWARD", "OUTPUT"}),
    "DNAT": frozenset({"PREROUTING", "OUTPUT"}),
    "SNAT": frozenset({"POSTROUTING", "INPUT"}),
    "MASQUERADE": frozenset({"POSTROUTING"}),
}
# protocols with ports (NAT targets with a port range need one of them; ICMP's range is
# the echo identifier)
_PORT_PROTOS = {"tcp", "udp", "sctp", "dccp", "icmp", "ipv6-icmp"}
_LIMIT_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def _limit_rate(text: str) -> float:
    """``N[/second|/minute|/hour|/day]`` (any prefix of the unit, as iptables reads it)
    to packets per second."""
    num, _, unit = text.partition("/")
    if not num.isdigit() or int(num) == 0:
        raise _RuleError(f'bad rate "{text}"\'')
    per = 1
    if unit:
        found = [v for k, v in _LIMIT_UNITS.items() if k.startswith(unit.lower())]
        if not found:
            raise _RuleError(f'bad rate "{text}"\'')
        per = found[0]
    rate = int(num) / per
    if rate > 10000:
        raise _RuleError(f'Rate too fast "{text}"')
    return rate


# the generic matches of a rule (any spelling -> the short option)
_GENERIC = {
    "-s": "-s",
    "--source": "-s",
    "--src": "-s",
    "-d": "-d",
    "--destination": "-d",
    "--dst": "-d",
    "-i": "-i",
    "--in-interface": "-i",
    "-o": "-o",
    "--out-interface": "-o",
    "-p": "-p",
    "--protocol": "-p",
}
# how the rule parser treats a token in option position (None: a module's or the
# target's option, or an error)
_KINDS: dict[str, str] = {
    **_GENERIC,
    "!": "!",
    "-f": "-f",
    "--fragment": "-f",
    "-m": "-m",
    "--match": "-m",
    "-j": "-j",
    "--jump": "-j",
    "-g": "-g",
    "--goto": "-g",
    "-c": "-c",
    "--set-counters": "-c",
}
_JUMPS: dict[tuple[str, bool], R.Jump] = {}
# PortMatch values by (protocol, option, text, inverted)
_PORT_MATCHES: dict[tuple[str, str, str, bool], R.PortMatch] = {}
# AddrMatch values by (option, text, inverted, family): kube-proxy repeats them
_ADDR_MATCHES: dict[tuple[str, str, bool, int], R.AddrMatch] = {}


# --------------------------------------------------------------------------- rule parser


@dataclass(slots=True)
class _Opt:
    name: str
    args: list[str]
    invert: bool


@dataclass(slots=True)
class _Module:
    name: str
    opts: list[_Opt] = field(default_factory=list)
    implicit: bool = False


class _RuleError(Exception):
    def __init__(self, why: str, unsupported: bool = False) -> None:
        super().__init__(why)
        self.unsupported = unsupported


def parse_rule(
    chain: str,
    tokens: list[str],
    *,
    spec: str = "",
    line: int = 0,
    table: str = "filter",
    family: int = 4,
    source: str = "<rules>",
    counters: tuple[int, int] | None = None,
) -> R.Rule:
    """Parse the tokens of one rule (after ``-A CHAIN``) into a :class:`~.rules.Rule`.

    Raises :class:`UnsupportedRuleError` for an unknown module/target/option and
    :class:`RestoreError` for malformed values; both name ``source:line`` and the text."""
    text = spec or " ".join(tokens)
    if FAST_PATH:
        rule = _common_rule(chain, tokens, text, line, table, family, counters)
        if rule is not None:
            return rule
    try:
        return _parse_rule(chain, tokens, text, line, table, family, counters)
    except _RuleError as e:
        full = f"-A {chain} {text}"
        if e.unsupported:
            raise unsupported(source, line, full, str(e)) from None
        raise RestoreError(f"{where(source, line, full)}: {e}") from None
    except (ValueError, IndexError) as e:
        raise RestoreError(f"{where(source, line, f'-A {chain} {text}')}: {e}") from None


#: Whether :func:`parse_rule` tries :func:`_common_rule` first (tests turn it off to
#: check that both give equal rules).
FAST_PATH = True
_L4 = frozenset({"tcp", "udp", "sctp"})
_FAST_MODULE_OPTIONS = {"--comment": "comment", "--dport": None, "--sport": None}


def _common_rule(
    chain: str,
    tokens: list[str],
    spec: str,
    line: int,
    table: str,
    family: int,
    counters: tuple[int, int] | None,
) -> R.Rule | None:
    """The rule kube-proxy and most CNIs write most, parsed without the general
    machinery: only ``[!] -s|-d ADDR``, ``[!] -p tcp|udp|sctp``, ``-m comment --comment
    TEXT``, ``-m tcp|udp|sctp [!] --dport|--sport PORTS`` and ``-j TARGET`` (options only
    for ``DNAT --to-destination``), each spelled short. It follows :func:`_parse_rule`
    step by step for those (same values, same order) and returns None for anything
    else, and on any error, so that :func:`_parse_rule` decides and words it."""
    try:
        return _common_rule_or_none(chain, tokens, spec, line, table, family, counters)
    except Exception:
        return None


def _common_rule_or_none(
    chain: str,
    tokens: list[str],
    spec: str,
    line: int,
    table: str,
    family: int,
    counters: tuple[int, int] | None,
) -> R.Rule | None:
    generic: list[R.Match] = []
    # modules as [name, implicit, [(option, argument, inverted), ...]]
    mods: list[list[Any]] = []
    target_name: str | None = None
    to_dest: str | None = None
    proto: str | None = None
    pending = False
    seen = ""
    i = 0
    n = len(tokens)
    while i < n:
        tok = tokens[i]
        i += 1
        if tok == "!":
            if pending:
                return None
            pending = True
            continue
        if i >= n:
            return None
        arg = tokens[i]
        i += 1
        if arg == "!":
            return None
        if tok == "-s" or tok == "-d":
            if tok in seen:
                return None
            seen += tok
            key = (tok, arg, pending, family)
            hit = _ADDR_MATCHES.get(key)
            if hit is None:
                net = _net(arg)
                if net.version != family:
                    return None
                hit = R.AddrMatch("src" if tok == "-s" else "dst", net, pending)
                if len(_ADDR_MATCHES) > 100_000:
                    _ADDR_MATCHES.clear()
                _ADDR_MATCHES[key] = hit
            generic.append(hit)
        elif tok == "-p":
            if "-p" in seen:
                return None
            seen += "-p"
            p = arg.lower()
            p = PROTO_ALIASES.get(p, p)
            if p not in _L4:
                return None
            generic.append(R.ProtoMatch(p, pending))
            if not pending:
                proto = p
                for m in mods:
                    if m[0] == p:
                        break
                else:
                    mods.append([p, True, []])
        elif tok == "-m":
            if pending or not (arg == "comment" or arg in _L4):
                return None
            for m in mods:
                if m[0] == arg and m[1]:
                    mods.remove(m)
                    break
            mods.append([arg, False, []])
        elif tok in _FAST_MODULE_OPTIONS:
            owner = None
            for m in reversed(mods):
                if tok in _MODULE_OPTIONS[m[0]]:
                    owner = m
                    break
            if owner is None or (pending and owner[0] == "comment"):
                return None
            owner[2].append((tok, arg, pending))
        elif tok == "-j":
            if target_name is not None or pending:
                return None
            target_name = arg
        elif tok == "--to-destination":
            if target_name != "DNAT" or to_dest is not None or pending:
                return None
            to_dest = arg
        else:
            return None
        pending = False
    if pending:
        return None
    matches = generic
    for name, implicit, opts in mods:
        if not opts:
            if implicit:
                continue
            if name == "comment":
                return None
            if proto != name:
                return None
            continue
        if name == "comment":
            if len(opts) != 1:
                return None
            matches.append(R.CommentMatch(opts[0][1]))
            continue
        if proto != name or (len(opts) > 1 and opts[0][0] == opts[1][0]) or len(opts) > 2:
            return None
        for oname, oarg, inv in opts:
            key4 = (name, oname, oarg, inv)
            pm = _PORT_MATCHES.get(key4)
            if pm is None:
                pm = R.PortMatch(name, oname[2:], _port_range(oarg), inv)
                if len(_PORT_MATCHES) > 100_000:
                    _PORT_MATCHES.clear()
                _PORT_MATCHES[key4] = pm
            matches.append(pm)
    target: R.Target | None = None
    if target_name is not None:
        if target_name in _KNOWN_UNSUPPORTED_TARGETS:
            return None
        topts = [_Opt("--to-destination", [to_dest], False)] if to_dest is not None else []
        target = _build_target(target_name, False, topts, table, chain, proto)
    elif to_dest is not None:
        return None
    return R.Rule(chain, tuple(matches), target, spec, line, counters)


# One whole ``-A`` line of the shape kube-proxy writes most, as iptables-save prints it
# (single spaces, options in its order, the comment quoted without escapes or one bare
# word): optional ``[pkts:bytes]``, chain, ``[!] -s``, ``[!] -d``, ``[!] -p
# tcp|udp|sctp``, ``-m comment --comment``, ``-m tcp|udp|sctp [[!] --sport] [[!]
# --dport]``, ``-j TARGET [--to-destination X]``. Groups: packets, bytes, chain, spec,
# then (negation, value) pairs and the rest in that order. A value never starts with
# ``!`` nor holds a quote (such lines take the token path). Whitespace is spelled out
# as the ASCII characters ``str.split`` splits at (a bitmap set, faster than ``\s``):
# the caller takes only ASCII lines this way.
_WORD = r'[^\x09-\x0d\x1c-\x20"!][^\x09-\x0d\x1c-\x20"]*'
_COMMON_LINE = re.compile(
    rf"(?:\[(\d+):(\d+)\] )?-A ({_WORD}) ("
    rf"(?:(! )?-s ({_WORD}) )?"
    rf"(?:(! )?-d ({_WORD}) )?"
    rf"(?:(! )?-p (tcp|udp|sctp) )?"
    rf'(?:-m comment --comment (?:"([^"\\]*)"|({_WORD})) )?'
    rf"(?:-m (tcp|udp|sctp) (?:(! )?--sport ({_WORD}) )?(?:(! )?--dport ({_WORD}) )?)?"
    rf"-j ({_WORD})(?: --to-destination ({_WORD}))?)\Z"
)
# the plain (not inverted, IPv4) entries of _ADDR_MATCHES by text alone, for -s and -d
_SRC4: dict[str, R.AddrMatch] = {}
_DST4: dict[str, R.AddrMatch] = {}
# ProtoMatch values by (protocol, inverted)
_PROTO_MATCHES: dict[tuple[str, bool], R.ProtoMatch] = {}


def parse_common_line(line: str, lineno: int, table: str, family: int) -> R.Rule | None:
    """The rule of a whole ``-A`` line (stripped, ``[pkts:bytes]`` prefix allowed) when it
    has the shape of :data:`_COMMON_LINE`, else None, also on any error: then the caller
    parses the line the general way, which decides and words the error. For the lines
    it takes, the result equals what :func:`parse_rule` gives for the words after the
    chain (the same values in the same order; ``tests/.../test_nf_fastpath.py`` checks
    it). The caller still checks that the chain and a jump's target chain exist.

    Why it exists: one regular expression over the line replaces tokenizing and the
    word-by-word loop, about half of what parsing a kube-proxy rule costs. A line seen
    before (same text, table and family: a kube-proxy partial sync repeats its whole
    KUBE-SERVICES chain) gives the earlier rule's values again, at ``lineno``: its
    matches and target are frozen values, shared as the per-value caches share them."""
    if not FAST_PATH or not line.isascii():
        return None
    key = (line, table, family)
    seen = _LINES.get(key)
    if seen is not None:
        if seen.line == lineno:
            return seen
        return _new_rule(seen.chain, seen.matches, seen.target, seen.spec, lineno, seen.counters)
    m = _COMMON_LINE.match(line)
    if m is None:
        return None
    try:
        rule = _common_line(m.groups(), lineno, table, family)
    except Exception:
        return None
    if rule is not None:
        if len(_LINES) >= _LINES_MAX:
            _LINES.clear()
        _LINES[key] = rule
    return rule


#: (line, table, family) -> the rule parse_common_line made of it (cleared when full)
_LINES: dict[tuple[str, str, int], R.Rule] = {}
_LINES_MAX = 200_000


def _common_line(g: tuple[str | None, ...], lineno: int, table: str, family: int) -> R.Rule | None:
    pk, by, chain, spec, sn, s, dn, d, pn, p, cq, cw, mod, spn, sp, dpn, dp, j, to = g
    matches: list[R.Match] = []
    if s is not None:
        hit = (_SRC4.get(s) if sn is None and family == 4 else None) or _ADDR_MATCHES.get(
            ("-s", s, sn is not None, family)
        )
        if hit is None:
            hit = _addr_match("-s", s, sn is not None, family)
            if hit is None:
                return None
        matches.append(hit)
    if d is not None:
        hit = (_DST4.get(d) if dn is None and family == 4 else None) or _ADDR_MATCHES.get(
            ("-d", d, dn is not None, family)
        )
        if hit is None:
            hit = _addr_match("-d", d, dn is not None, family)
            if hit is None:
                return None
        matches.append(hit)
    proto = None
    if p is not None:
        pm = _PROTO_MATCHES.get((p, pn is not None))
        if pm is None:
            pm = _PROTO_MATCHES[(p, pn is not None)] = R.ProtoMatch(p, pn is not None)
        matches.append(pm)
        if pn is None:
            proto = p
    if cq is not None:
        matches.append(R.CommentMatch(cq))
    elif cw is not None:
        matches.append(R.CommentMatch(cw))
    if mod is not None:
        if proto != mod:
            return None
        if sp is not None:
            matches.append(_port_match(mod, "--sport", sp, spn is not None))
        if dp is not None:
            matches.append(_port_match(mod, "--dport", dp, dpn is not None))
    assert chain is not None and spec is not None and j is not None
    target: R.Target | None
    if to is None:
        # a jump to a user chain (most rules): one value per chain name, as
        # _build_target gives it
        target = _JUMPS.get((j, False)) if j not in _TARGET_OPTIONS else None
        if target is None:
            if j in _KNOWN_UNSUPPORTED_TARGETS:
                return None
            target = _build_target(j, False, [], table, chain, proto)
    elif j == "DNAT":
        target = _build_target(
            j, False, [_Opt("--to-destination", [to], False)], table, chain, proto
        )
    else:
        return None
    counters = None if pk is None or by is None else (int(pk), int(by))
    return _new_rule(chain, tuple(matches), target, spec, lineno, counters)


def _rule_factory() -> Any:
    """``Rule(chain, matches, target, spec, line, counters)`` without the frozen
    dataclass's ``__init__`` (which sets each field through ``object.__setattr__``):
    the slots are set directly, half the cost; the result is an ordinary, equal Rule.
    Checked against Rule's fields when the module loads, so a changed Rule fails here
    instead of building incomplete values."""
    import dataclasses

    names = ("chain", "matches", "target", "spec", "line", "counters")
    if tuple(f.name for f in dataclasses.fields(R.Rule)) != names:  # pragma: no cover
        raise ImportError("ruleparse._rule_factory: Rule's fields changed; update it")
    new = object.__new__
    cls = R.Rule
    set_chain, set_matches, set_target, set_spec, set_line, set_counters = (
        cls.__dict__[n].__set__ for n in names
    )

    def make(
        chain: str,
        matches: tuple[R.Match, ...],
        target: R.Target | None,
        spec: str,
        line: int,
        counters: tuple[int, int] | None,
    ) -> R.Rule:
        r = new(cls)
        set_chain(r, chain)
        set_matches(r, matches)
        set_target(r, target)
        set_spec(r, spec)
        set_line(r, line)
        set_counters(r, counters)
        return r

    return make


_new_rule = _rule_factory()


def _chain_factory() -> Any:
    """``Chain(name, policy, rules, counters, declared)`` by setting the slots directly,
    as :func:`_rule_factory` does for rules (checked against Chain's fields)."""
    import dataclasses

    names = ("name", "policy", "rules", "counters", "declared")
    if tuple(f.name for f in dataclasses.fields(R.Chain)) != names:  # pragma: no cover
        raise ImportError("ruleparse._chain_factory: Chain's fields changed; update it")
    new = object.__new__
    cls = R.Chain
    set_name, set_policy, set_rules, set_counters, set_declared = (
        cls.__dict__[n].__set__ for n in names
    )

    def make(
        name: str,
        policy: str | None,
        rules: tuple[R.Rule, ...],
        counters: tuple[int, int],
        declared: bool,
    ) -> R.Chain:
        c = new(cls)
        set_name(c, name)
        set_policy(c, policy)
        set_rules(c, rules)
        set_counters(c, counters)
        set_declared(c, declared)
        return c

    return make


#: ``Chain(...)`` for the parser's many chains (all five fields, positional)
new_chain = _chain_factory()


def _addr_match(opt: str, text: str, invert: bool, family: int) -> R.AddrMatch | None:
    """The (cached) AddrMatch of ``-s``/``-d`` TEXT; None if not of ``family``."""
    net = _net(text)
    if net.version != family:
        return None
    hit = R.AddrMatch("src" if opt == "-s" else "dst", net, invert)
    if len(_ADDR_MATCHES) > 100_000:
        _ADDR_MATCHES.clear()
        _SRC4.clear()
        _DST4.clear()
    _ADDR_MATCHES[(opt, text, invert, family)] = hit
    if not invert and family == 4:
        (_SRC4 if opt == "-s" else _DST4)[text] = hit
    return hit


def _port_match(proto: str, opt: str, text: str, invert: bool) -> R.PortMatch:
    """The (cached) PortMatch of ``--sport``/``--dport`` TEXT under module ``proto``."""
    key = (proto, opt, text, invert)
    pm = _PORT_MATCHES.get(key)
    if pm is None:
        pm = R.PortMatch(proto, opt[2:], _port_range(text), invert)  # type: ignore[arg-type]
        if len(_PORT_MATCHES) > 100_000:
            _PORT_MATCHES.clear()
        _PORT_MATCHES[key] = pm
    return pm


def _parse_rule(
    chain: str,
    tokens: list[str],
    spec: str,
    line: int,
    table: str,
    family: int,
    counters: tuple[int, int] | None,
) -> R.Rule:
    generic: list[R.Match] = []
    modules: list[_Module] = []
    target_name: str | None = None
    goto = False
    target_opts: list[_Opt] = []
    pending = False
    proto: str | None = None
    i = 0
    n = len(tokens)
    seen_generic: set[str] = set()
    kinds = _KINDS
    module_options = _MODULE_OPTIONS

    def take(k: int) -> list[str]:
        nonlocal i
        if k and i < n and tokens[i] == "!":
            # iptables >= 1.8 refuses the legacy "-s ! ADDR" form
            raise _RuleError(f"Bad argument `{tokens[i + 1] if i + 1 < n else '!'}'")
        if i + k > n:
            raise _RuleError(f"option {tokens[i - 1]} needs {k} argument(s)")
        args = tokens[i : i + k]
        i += k
        return args

    while i < n:
        tok = tokens[i]
        i += 1
        kind = kinds.get(tok)
        if kind is None:
            if not tok.startswith("--"):
                raise _RuleError(f"unexpected token {tok!r}")
            name = _OPTION_ALIASES.get(tok, tok)
            if target_name is not None and not goto:
                topts = _TARGET_OPTIONS.get(target_name)
                if topts is not None and name in topts:
                    target_opts.append(_Opt(name, take(topts[name]), pending))
                    pending = False
                    continue
            owner = None
            for m in reversed(modules):
                if name in module_options[m.name]:
                    owner = m
                    break
            if owner is None:
                if target_name is not None and target_name in _KNOWN_UNSUPPORTED_TARGETS:
                    raise _RuleError(f"unsupported target {target_name}", unsupported=True)
                raise _RuleError(f'unknown option "{tok}"')
            k = module_options[owner.name][name]
            if k == 1 and i < n and tokens[i] != "!":
                args = [tokens[i]]
                i += 1
            else:
                args = take(k)
            if pending and name in _NOT_INVERTIBLE.get(owner.name, ()):
                raise _RuleError(f'{owner.name}: option "{name}" cannot be inverted')
            # (an option given twice is refused by the module's builder)
            owner.opts.append(_Opt(name, args, pending))
            pending = False
            continue
        if kind == "!":
            pending = True
            continue
        if kind == "-m":
            if pending:
                raise _RuleError("'!' before -m is not allowed")
            (name,) = take(1)
            name = _MODULE_ALIASES.get(name, name)
            if name not in module_options:
                if name in _KNOWN_UNSUPPORTED_MODULES:
                    raise _RuleError(f"unsupported match module {name!r}", unsupported=True)
                raise _RuleError(f"Couldn't load match `{name}': no such match")
            for m in modules:
                if m.name == name and m.implicit:
                    m.implicit = False
                    modules.remove(m)
                    break
            modules.append(_Module(name))
            continue
        if kind == "-j" or kind == "-g":
            if target_name is not None:
                raise _RuleError("more than one target")
            (target_name,) = take(1)
            goto = kind == "-g"
            if not goto and target_name in _KNOWN_UNSUPPORTED_TARGETS:
                raise _RuleError(f"unsupported target {target_name}", unsupported=True)
            continue
        if kind == "-f":
            if "-f" in seen_generic:
                raise _RuleError("multiple -f flags not allowed")
            seen_generic.add("-f")
            generic.append(R.FragmentMatch(pending))
            pending = False
            continue
        if kind == "-c":
            args = take(2)
            counters = (int(args[0]), int(args[1]))
            continue
        # a generic match: -s, -d, -i, -o, -p
        if kind in seen_generic:
            raise _RuleError(f"multiple {kind} flags not allowed")
        seen_generic.add(kind)
        (arg,) = take(1)
        inv = pending
        pending = False
        if kind == "-s" or kind == "-d":
            key = (kind, arg, inv, family)
            hit = _ADDR_MATCHES.get(key)
            if hit is None:
                net = _net(arg)
                if net.version != family:
                    raise _RuleError(f"{arg} is not an IPv{family} address")
                hit = R.AddrMatch("src" if kind == "-s" else "dst", net, inv)
                if len(_ADDR_MATCHES) > 100_000:
                    _ADDR_MATCHES.clear()
                _ADDR_MATCHES[key] = hit
            generic.append(hit)
        elif kind == "-i" or kind == "-o":
            pref = arg.endswith("+")
            generic.append(
                R.IfaceMatch("in" if kind == "-i" else "out", _iface(arg).rstrip("+"), pref, inv)
            )
        else:
            p = arg.lower()
            p = PROTO_ALIASES.get(p, p)
            if p != "all":
                generic.append(R.ProtoMatch(p, inv))
                if not inv:
                    proto = p
                    mod = "icmp6" if p == "ipv6-icmp" else p
                    if mod in module_options:
                        for m in modules:
                            if m.name == mod:
                                break
                        else:
                            modules.append(_Module(mod, implicit=True))
    if pending:
        raise _RuleError("dangling '!'")

    matches: list[R.Match] = list(generic)
    for m in modules:
        if m.implicit and not m.opts:
            continue
        if m.name in ("tcp", "udp", "sctp"):
            if proto != m.name:
                raise _RuleError(f"match {m.name} needs -p {m.name}")
            matches.extend(_build_l4(m.name, m.opts))
        else:
            matches.append(_build_match(m, proto, family))
    if target_name:
        # (``proto`` is set only by a -p that is not negated)
        target = _build_target(target_name, goto, target_opts, table, chain, proto)
    else:
        target = None
    return R.Rule(chain, tuple(matches), target, spec, line, counters)


def _single(m: _Module | None, opts: list[_Opt], name: str) -> _Opt | None:
    found = [o for o in opts if o.name == name]
    if len(found) > 1:
        raise _RuleError(f"option {name} given twice")
    return found[0] if found else None


def _build_match(m: _Module, proto: str | None, family: int) -> R.Match:
    name, opts = m.name, m.opts
    if name == "comment":  # first: every kube-proxy rule has one
        o = _single(m, opts, "--comment")
        if o is None:
            raise _RuleError("comment needs --comment")
        return R.CommentMatch(o.args[0])
    if name in ("icmp", "icmp6"):
        v6 = name == "icmp6"
        if proto != ("ipv6-icmp" if v6 else "icmp"):
            raise _RuleError(f"match {name} needs -p {'icmpv6' if v6 else 'icmp'}")
        o = _single(m, opts, "--icmpv6-type" if v6 else "--icmp-type")
        if o is None:
            return R.IcmpMatch(None, None)
        t = o.args[0]
        names = ICMPV6_TYPES if v6 else ICMP_TYPES
        if t in names:
            ty, code = names[t]
        else:
            a, _, b = t.partition("/")
            if not a.isdigit() or (b and not b.isdigit()) or int(a) > 255:
                raise _RuleError(f"Unknown ICMP type `{t}'")
            if b and int(b) > 255:
                raise _RuleError(f"Unknown ICMP code `{t}'")
            ty, code = int(a), (int(b) if b else None)
        return R.IcmpMatch(ty, code, o.invert)
    if name == "multiport":
        if proto not in ("tcp", "udp", "sctp"):
            raise _RuleError("match multiport needs -p tcp|udp|sctp")
        if len(opts) != 1:
            raise _RuleError("multiport needs exactly one of --sports/--dports/--ports")
        o = opts[0]
        fld = {"--dports": "dport", "--sports": "sport", "--ports": "either"}[o.name]
        try:
            ports = tuple(_port_range(p) for p in o.args[0].split(","))
        except ValueError:
            raise _RuleError("invalid portrange specified") from None
        if len(ports) > 15:
            raise _RuleError("multiport takes at most 15 ports")
        return R.MultiportMatch(fld, ports, o.invert)  # type: ignore[arg-type]
    if name == "addrtype":
        src = _single(m, opts, "--src-type")
        dst = _single(m, opts, "--dst-type")
        for o in (src, dst):
            if o is not None:
                bad = [t for t in o.args[0].split(",") if t not in ADDR_TYPES]
                if bad:
                    raise _RuleError(f"unknown address type {bad[0]!r}")
        return R.AddrTypeMatch(
            tuple(src.args[0].split(",")) if src else (),
            bool(src and src.invert),
            tuple(dst.args[0].split(",")) if dst else (),
            bool(dst and dst.invert),
            _single(m, opts, "--limit-iface-in") is not None,
            _single(m, opts, "--limit-iface-out") is not None,
        )
    if name == "statistic":
        return _build_statistic(m, opts)
    if name == "recent":
        return _build_recent(m, opts, family)
    if name in ("mark", "connmark"):
        o = _single(m, opts, "--mark")
        if o is None:
            raise _RuleError(f"{name} needs --mark")
        v, mask = _mark(o.args[0])
        cls = R.MarkMatch if name == "mark" else R.ConnmarkMatch
        return cls(v, mask, o.invert)
    if name == "conntrack":
        return _build_conntrack(opts, family)
    if name == "state":
        o = _single(m, opts, "--state")
        if o is None:
            raise _RuleError("state needs --state")
        states = tuple(o.args[0].split(","))
        bad = [s for s in states if s not in R.CT_STATES[:5]]
        if bad:
            raise _RuleError(f"unknown state {bad[0]!r}")
        return R.StateMatch(states, o.invert)
    if name == "physdev":
        if not opts:
            raise _RuleError("PHYSDEV: no physdev option specified")
        pin = _single(m, opts, "--physdev-in")
        pout = _single(m, opts, "--physdev-out")
        for o in (pin, pout):
            if o is not None:
                _iface(o.args[0])
        isin = _single(m, opts, "--physdev-is-in")
        isout = _single(m, opts, "--physdev-is-out")
        isbr = _single(m, opts, "--physdev-is-bridged")
        return R.PhysdevMatch(
            pin.args[0] if pin else None,
            bool(pin and pin.invert),
            pout.args[0] if pout else None,
            bool(pout and pout.invert),
            None if isin is None else not isin.invert,
            None if isout is None else not isout.invert,
            None if isbr is None else not isbr.invert,
        )
    if name == "set":
        if len(opts) != 1:
            raise _RuleError("set needs exactly one --match-set")
        o = opts[0]
        flags = tuple(o.args[1].split(","))
        if not flags or any(f not in ("src", "dst") for f in flags):
            raise _RuleError(f"bad set flags {o.args[1]!r}")
        return R.SetMatch(o.args[0], flags, o.invert)  # type: ignore[arg-type]
    if name == "nfacct":
        o = _single(m, opts, "--nfacct-name")
        if o is None:
            raise _RuleError("nfacct needs --nfacct-name")
        return R.NfacctMatch(o.args[0])
    if name == "limit":
        rate = _single(m, opts, "--limit")
        burst = _single(m, opts, "--limit-burst")
        text = rate.args[0] if rate else "3/hour"
        burst_n = int(burst.args[0]) if burst else 5
        if not 1 <= burst_n <= 10000:
            raise _RuleError(f"bad --limit-burst `{burst_n}'")
        return R.LimitMatch(text, burst_n, _limit_rate(text))
    if name == "mac":
        o = _single(m, opts, "--mac-source")
        if o is None:
            raise _RuleError("mac needs --mac-source")
        if not _MAC.fullmatch(o.args[0]):
            raise _RuleError("Invalid MAC address specified.")
        mac = ":".join(f"{int(x, 16):02x}" for x in o.args[0].split(":"))
        return R.MacMatch(mac, o.invert)
    if name == "iprange":
        src = _single(m, opts, "--src-range")
        dst = _single(m, opts, "--dst-range")

        def rng(o: _Opt | None) -> tuple[IPAddress, IPAddress] | None:
            if o is None:
                return None
            a, _, b = o.args[0].partition("-")
            return (_addr(a), _addr(b or a))

        return R.IpRangeMatch(
            rng(src), bool(src and src.invert), rng(dst), bool(dst and dst.invert)
        )
    if name == "length":
        o = _single(m, opts, "--length")
        if o is None:
            raise _RuleError("length needs --length")
        lo, _, hi = o.args[0].partition(":")
        len_lo = int(lo or 0)
        len_hi = int(hi) if hi else (len_lo if ":" not in o.args[0] else 65535)
        if not 0 <= len_lo <= len_hi <= 65535:
            raise _RuleError(
                f'length: bad value for option "--length" near "{o.args[0]}", or out of range (0-65535).'
            )
        return R.LengthMatch(len_lo, len_hi, o.invert)
    if name == "ttl":
        if len(opts) != 1:
            raise _RuleError("ttl needs one of --ttl-eq/--ttl-lt/--ttl-gt")
        o = opts[0]
        op = o.name[len("--ttl-") :]
        if o.invert and op != "eq":
            raise _RuleError("only --ttl-eq can be negated")
        return R.TtlMatch(op, _byte(o.args[0], "ttl"), o.invert)  # type: ignore[arg-type]
    raise _RuleError(f"unsupported match module {name!r}", unsupported=True)  # pragma: no cover


_SYN_MASK = frozenset({"SYN", "RST", "ACK", "FIN"})
_ALL_FLAGS = frozenset({"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"})


def _flags(text: str) -> frozenset[str]:
    if text == "ALL":
        return _ALL_FLAGS
    if text == "NONE":
        return frozenset()
    out = frozenset(text.split(","))
    bad = out - _ALL_FLAGS
    if bad:
        raise _RuleError(f"unknown TCP flag {sorted(bad)[0]!r}")
    return out


def _once(module: str, opts: list[_Opt], alias: dict[str, str] | None = None) -> None:
    """iptables' "option X can only be used once" for modules built from a loop."""
    if len(opts) > 1:
        seen: set[str] = set()
        for o in opts:
            key = alias.get(o.name, o.name) if alias else o.name
            if key in seen:
                raise _RuleError(f'{module}: option "{o.name}" can only be used once')
            seen.add(key)


def _build_l4(proto: str, opts: list[_Opt]) -> list[R.Match]:
    _once(proto, opts, {"--syn": "--tcp-flags"})
    built: list[R.Match] = []
    for o in opts:
        if o.name in ("--sport", "--dport"):
            key = (proto, o.name, o.args[0], o.invert)
            pm = _PORT_MATCHES.get(key)
            if pm is None:
                pm = R.PortMatch(proto, o.name[2:], _port_range(o.args[0]), o.invert)  # type: ignore[arg-type]
                if len(_PORT_MATCHES) > 100_000:
                    _PORT_MATCHES.clear()
                _PORT_MATCHES[key] = pm
            built.append(pm)
        elif o.name == "--tcp-flags":
            built.append(R.TcpFlagsMatch(_flags(o.args[0]), _flags(o.args[1]), o.invert))
        elif o.name == "--syn":
            built.append(R.TcpFlagsMatch(_SYN_MASK, frozenset({"SYN"}), o.invert))
        else:
            raise _RuleError(f"unsupported option {o.name}", unsupported=True)
    return built


def _build_statistic(m: _Module, opts: list[_Opt]) -> R.Match:
    mode = _single(m, opts, "--mode")
    if mode is None:
        raise _RuleError("statistic needs --mode")
    have = {o.name for o in opts}
    if "--probability" in have:
        for other in ("--every", "--packet"):
            if other in have:
                raise _RuleError(
                    f'statistic: option "--probability" cannot be used together with "{other}".'
                )
    if "--every" in have and "--packet" not in have:
        raise _RuleError('statistic: option "--every" also requires "--packet".')
    if mode.args[0] not in ("random", "nth"):
        raise _RuleError(f'Bad mode "{mode.args[0]}"')
    if mode.args[0] == "random":
        p = _single(m, opts, "--probability")
        if p is None:
            raise _RuleError("statistic random needs --probability")
        prob = float(p.args[0])
        if not 0.0 <= prob <= 1.0:
            raise _RuleError(f"probability {prob} not in [0, 1]")
        threshold = min(round(prob * 2**31), 2**31)
        return R.StatisticMatch("random", prob, threshold, invert=p.invert)
    if mode.args[0] == "nth":
        every = _single(m, opts, "--every")
        if every is None:
            raise _RuleError("statistic nth needs --every")
        packet = _single(m, opts, "--packet")
        ev = int(every.args[0])
        pk = int(packet.args[0]) if packet else 0
        if ev < 1 or not 0 <= pk < ev:
            raise _RuleError("statistic nth needs --every >= 1 and 0 <= --packet < --every")
        return R.StatisticMatch("nth", every=ev, packet=pk, invert=every.invert)
    raise _RuleError(f'Bad mode "{mode.args[0]}"')  # pragma: no cover


def _build_recent(m: _Module, opts: list[_Opt], family: int) -> R.Match:
    cmds = [o for o in opts if o.name in ("--set", "--rcheck", "--update", "--remove")]
    if len(cmds) != 1:
        raise _RuleError("recent needs exactly one of --set/--rcheck/--update/--remove")
    cmd = cmds[0]
    name = _single(m, opts, "--name")
    seconds = _single(m, opts, "--seconds")
    hit = _single(m, opts, "--hitcount")
    mask = _single(m, opts, "--mask")
    side = "dst" if _single(m, opts, "--rdest") is not None else "src"
    mask_int: int | None = None
    if mask is not None:
        mask_int = int(_addr(mask.args[0]))
    reap = _single(m, opts, "--reap") is not None
    if reap and seconds is None:
        raise _RuleError("recent --reap needs --seconds")
    return R.RecentMatch(
        cmd.name[2:],  # type: ignore[arg-type]
        name.args[0] if name else "DEFAULT",
        int(seconds.args[0]) if seconds else 0,
        int(hit.args[0]) if hit else 0,
        reap,
        _single(m, opts, "--rttl") is not None,
        side,  # type: ignore[arg-type]
        mask_int,
        cmd.invert,
    )


def _build_conntrack(opts: list[_Opt], family: int) -> R.Match:
    if not opts:
        raise _RuleError("conntrack: At least one option is required")
    _once("conntrack", opts)
    kw: dict[str, object] = {}
    addrs: list[R.CtAddrTest] = []
    ports: list[R.CtPortTest] = []
    for o in opts:
        arg = o.args[0]
        if o.name == "--ctstate":
            states = tuple(arg.split(","))
            bad = [s for s in states if s not in R.CT_STATES]
            if bad:
                raise _RuleError(f"unknown ctstate {bad[0]!r}")
            kw["states"], kw["states_invert"] = states, o.invert
        elif o.name == "--ctstatus":
            sts = tuple(arg.split(","))
            bad = [s for s in sts if s not in R.CT_STATUSES]
            if bad:
                raise _RuleError(f"unknown ctstatus {bad[0]!r}")
            kw["statuses"], kw["statuses_invert"] = sts, o.invert
        elif o.name == "--ctproto":
            p = arg.lower()
            kw["proto"], kw["proto_invert"] = PROTO_ALIASES.get(p, p), o.invert
        elif o.name == "--ctdir":
            if arg not in ("ORIGINAL", "REPLY"):
                raise _RuleError(f"bad --ctdir {arg!r}")
            kw["direction"], kw["direction_invert"] = arg, o.invert
        elif o.name.endswith("port"):
            fld = {
                "--ctorigsrcport": "orig_sport",
                "--ctorigdstport": "orig_dport",
                "--ctreplsrcport": "repl_sport",
                "--ctrepldstport": "repl_dport",
            }[o.name]
            ports.append(R.CtPortTest(fld, _port_range(arg), o.invert))  # type: ignore[arg-type]
        else:
            fld = {
                "--ctorigsrc": "orig_src",
                "--ctorigdst": "orig_dst",
                "--ctreplsrc": "repl_src",
                "--ctrepldst": "repl_dst",
            }[o.name]
            net = _net(arg)
            if net.version != family:
                raise _RuleError(f"{arg} is not an IPv{family} address")
            addrs.append(R.CtAddrTest(fld, net, o.invert))  # type: ignore[arg-type]
    return R.ConntrackMatch(addrs=tuple(addrs), ports=tuple(ports), **kw)  # type: ignore[arg-type]


def _build_target(
    name: str, goto: bool, opts: list[_Opt], table: str, chain: str, proto: str | None
) -> R.Target:
    if goto or name not in _TARGET_OPTIONS:
        if not goto:
            if name in _KNOWN_UNSUPPORTED_TARGETS:
                raise _RuleError(f"unsupported target {name}", unsupported=True)
            if opts:
                raise _RuleError(f"unsupported option {opts[0].name}", unsupported=True)
        # one value per chain name: jump targets repeat (KUBE-MARK-MASQ, ...)
        jump = _JUMPS.get((name, goto))
        if jump is None:
            if len(_JUMPS) > 200_000:
                _JUMPS.clear()
            jump = _JUMPS[(name, goto)] = R.Jump(name, goto=goto)
        return jump
    want = TARGET_TABLE.get(name)
    if want is not None and table != want:
        raise _RuleError(f"target {name} is only valid in the {want} table")
    hooks = TARGET_HOOKS.get(name)
    if hooks is not None and chain in R.BUILTIN_CHAINS[table] and chain not in hooks:
        raise _RuleError(f"target {name} is not valid in chain {chain}")
    for o in opts:
        if o.invert:
            raise _RuleError(f"target option {o.name} cannot be negated")
    o_by: dict[str, list[str]] = {}
    for o in opts:
        if o.name in o_by:
            raise _RuleError(f'{name}: option "{o.name}" can only be used once')
        o_by.setdefault(o.name, []).extend(o.args)
    has = o_by.__contains__
    if name in ("ACCEPT", "DROP", "RETURN"):
        return R.Verdict(name)  # type: ignore[arg-type]
    if name == "REJECT":
        w = o_by.get("--reject-with", ["icmp-port-unreachable"])[0]
        w = _REJECT_ALIASES.get(w, w)
        if w not in REJECT_WITH:
            raise _RuleError(f"unknown --reject-with {w!r}")
        if w == "tcp-reset" and proto != "tcp":
            raise _RuleError("REJECT --reject-with tcp-reset needs -p tcp")
        return R.Reject(w)
    if name in ("DNAT", "SNAT"):
        opt = "--to-destination" if name == "DNAT" else "--to-source"
        if not has(opt):
            raise _RuleError(f"{name} needs {opt}")
        rng = nat_range(o_by[opt][0])
        if rng.port_lo is not None and proto not in _PORT_PROTOS:
            raise _RuleError("Need TCP, UDP, SCTP or DCCP with port specification")
        if name == "DNAT":
            return R.Dnat((rng,), has("--random"), has("--persistent"))
        return R.Snat((rng,), has("--random"), has("--random-fully"), has("--persistent"))
    if name == "MASQUERADE":
        ports = None
        if has("--to-ports"):
            if proto not in _PORT_PROTOS:
                raise _RuleError("Need TCP, UDP, SCTP or DCCP with port specification")
            a, _, b = o_by["--to-ports"][0].partition("-")
            ports = (_port(a), _port(b) if b else _port(a))
            if ports[1] < ports[0]:
                raise _RuleError(f"Port range `{o_by['--to-ports'][0]}' funky")
        return R.Masquerade(ports, has("--random"), has("--random-fully"))
    if name == "MARK":
        return _build_mark(o_by, "MARK")
    if name == "CONNMARK":
        if has("--save-mark") or has("--restore-mark"):
            mode = "save" if has("--save-mark") else "restore"
            mask = _int(o_by["--mask"][0]) if has("--mask") else 0xFFFFFFFF
            nf = _int(o_by["--nfmask"][0]) if has("--nfmask") else mask
            ct = _int(o_by["--ctmask"][0]) if has("--ctmask") else mask
            return R.Connmark(mode, nfmask=nf, ctmask=ct)  # type: ignore[arg-type]
        mk = _build_mark(o_by, "CONNMARK")
        return R.Connmark("set", mk.value, mk.mask)
    if name in ("LOG", "NFLOG"):
        level = (o_by.get("--log-level") or [""])[0]
        if level and level not in LOG_LEVELS and not (level.isdigit() and int(level) <= 7):
            raise _RuleError(f'log level "{level}" unknown')
        prefix = (o_by.get("--log-prefix") or o_by.get("--nflog-prefix") or [""])[0]
        return R.Log(
            name,  # type: ignore[arg-type]
            prefix,
            level,
            int((o_by.get("--nflog-group") or ["0"])[0]),
        )
    if name == "NOTRACK":
        return R.Notrack()
    if name == "CT":
        for o in opts:
            if o.name in _CT_UNSUPPORTED:
                raise _RuleError(f"CT {o.name}: {_CT_UNSUPPORTED[o.name]}", unsupported=True)
        return _build_ct(opts, has("--notrack"))
    if name == "TRACE":
        return R.Trace()
    if name == "CHECKSUM":
        # fills in a checksum: nothing a path or verdict depends on (mangle only, as the
        # kernel's xt_CHECKSUM; it needs --checksum-fill)
        if table != "mangle":
            raise _RuleError("target CHECKSUM is only valid in the mangle table")
        if not has("--checksum-fill"):
            raise _RuleError("CHECKSUM needs --checksum-fill")
        return R.Log("CHECKSUM")
    raise _RuleError(f"unsupported target {name}", unsupported=True)  # pragma: no cover


# CT options svclab does not evaluate (refused by name; --notrack and the zones are)
_CT_UNSUPPORTED = {
    "--helper": "conntrack helpers are not emulated",
    "--ctevents": "conntrack events are not emulated",
    "--expevents": "conntrack expectation events are not emulated",
    "--timeout": "conntrack timeout policies are not emulated",
}

_STRTOUL = re.compile(r"\+?(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def _strtoul(text: str, hi: int) -> int | None:
    """``xtables_strtoul(text, NULL, &v, 0, hi)``: an unsigned number in C's base 0
    (``0x`` hexadecimal, a leading ``0`` octal), the whole text, at most ``hi``; None
    when it is not one."""
    if _STRTOUL.fullmatch(text) is None:
        return None
    body = text.lstrip("+")
    if body[:2] in ("0x", "0X"):
        v = int(body[2:], 16)
    elif body.startswith("0"):
        v = int(body, 8)
    else:
        v = int(body)
    return v if v <= hi else None


def _build_ct(opts: list[_Opt], notrack: bool) -> R.Notrack:
    """``CT [--notrack] [--zone|--zone-orig|--zone-reply ID|mark]...`` as libxt_CT reads
    it: each zone option sets the zone (the last one wins; ``mark``: the packet's mark
    when conntrack looks the packet up), ``--zone-orig``/``--zone-reply`` add their
    direction, and ``mark`` once given stays."""
    zone = 0
    dirs = 0
    by_mark = False
    for o in opts:
        if o.name == "--zone-orig":
            dirs |= R.ZONE_ORIG
        elif o.name == "--zone-reply":
            dirs |= R.ZONE_REPLY
        elif o.name != "--zone":
            continue
        text = o.args[0]
        zone = 0
        if text.lower() == "mark":
            by_mark = True
        else:
            v = _strtoul(text, 0xFFFF)
            if v is None:
                raise _RuleError(f"Cannot parse {text} as a zone ID")
            zone = v
    return R.Notrack(notrack, zone, dirs or R.ZONE_BOTH, by_mark)


def _build_mark(o_by: dict[str, list[str]], target: str) -> R.SetMark:
    ops = [
        k
        for k in ("--set-xmark", "--set-mark", "--and-mark", "--or-mark", "--xor-mark")
        if k in o_by
    ]
    if len(ops) != 1:
        raise _RuleError(f"{target} needs exactly one mark operation")
    op = ops[0]
    arg = o_by[op][0]
    if op == "--set-xmark":
        v, m = _mark(arg)
        return R.SetMark(v, m, "set-xmark")
    if op == "--set-mark":
        v, m = _mark(arg)
        return R.SetMark(v, (m | v) & 0xFFFFFFFF, "set-mark")
    bits = _int(arg)
    if op == "--and-mark":
        return R.SetMark(0, (~bits) & 0xFFFFFFFF, "and-mark")
    if op == "--or-mark":
        return R.SetMark(bits, bits, "or-mark")
    return R.SetMark(bits, 0, "xor-mark")
