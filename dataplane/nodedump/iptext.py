"""``ip addr``, ``ip route`` and ``ip rule`` as people paste them: their text read into
the records ``ip -j`` prints (:mod:`.routing` reads those).

* ``ip addr`` (``ip a``): a line ``N: NAME[@PEER]: <FLAGS> ...`` starts an interface;
  ``inet ADDR/LEN [peer P] [brd B] [scope S] [secondary] ... [LABEL]`` lines add its IPv4
  addresses, ``inet6`` lines its IPv6 ones; ``link/...`` and ``valid_lft`` lines are
  skipped.
* ``ip route`` (``ip route show table all`` too): one route a line, ``[TYPE] DST`` then
  ``via``, ``dev``, ``proto``, ``scope``, ``src``, ``metric``, ``table`` and the flags
  ``onlink``, ``linkdown``, ``dead``, ``pervasive``, ``offload``; other ``KEY VALUE`` pairs
  are kept as they are. Multipath routes (``nexthop`` lines) are refused: use ``ip -j``.
* ``ip rule``: ``PRIO:`` then ``[not] from SRC [to DST] [iif DEV] [oif DEV] [fwmark
  M[/K]]`` and ``lookup TABLE`` or ``blackhole``/``unreachable``/``prohibit``.

Errors name the source and line. Values only: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from netmodel.errors import InputError

__all__ = ["addr_text", "route_text", "rule_text"]

_LINK = re.compile(r"^(\d+):\s+([^:@\s]+)(?:@(\S+))?:\s+<([^>]*)>")
_ROUTE_TYPES = (
    "unicast",
    "local",
    "broadcast",
    "multicast",
    "blackhole",
    "unreachable",
    "prohibit",
    "throw",
    "anycast",
    "nat",
)
_ROUTE_FLAGS = ("onlink", "linkdown", "dead", "pervasive", "offload", "notify", "rt_offload")
_RULE_ACTIONS = ("blackhole", "unreachable", "prohibit")


def addr_text(text: str, source: str) -> list[dict[str, Any]]:
    """``ip addr`` text -> ``ip -j addr`` records."""
    links: list[dict[str, Any]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = _LINK.match(line)
        if m:
            link: dict[str, Any] = {
                "ifindex": int(m.group(1)),
                "ifname": m.group(2),
                "flags": [f for f in m.group(4).split(",") if f],
                "addr_info": [],
            }
            if m.group(3):
                link["link"] = m.group(3)
            links.append(link)
            continue
        words = line.split()
        if words[0] in ("inet", "inet6"):
            if not links:
                raise InputError(f"{source}:{n}: {line}: an address before any interface")
            if "/" not in words[1]:
                raise InputError(f"{source}:{n}: {line}: expected ADDRESS/PREFIXLEN")
            local, plen = words[1].split("/", 1)
            info: dict[str, Any] = {
                "family": words[0],
                "local": local,
                "prefixlen": int(plen) if plen.isdigit() else _bad(source, n, line),
                "scope": "global",
            }
            rest = words[2:]
            i = 0
            while i < len(rest):
                w = rest[i]
                if w in ("brd", "peer", "scope", "metric", "valid_lft", "preferred_lft"):
                    if i + 1 >= len(rest):
                        raise InputError(f"{source}:{n}: {line}: {w} without a value")
                    if w in ("scope", "metric"):
                        info[w] = rest[i + 1]
                    elif w == "peer":
                        info["address"] = rest[i + 1]
                    i += 2
                    continue
                if w == "secondary":
                    info["secondary"] = True
                i += 1
            # the label ends the line when it is not the interface's own name
            if (
                words[0] == "inet"
                and rest
                and rest[-1] not in ("secondary", "noprefixroute", "dynamic")
                and rest[-1] != links[-1]["ifname"]
            ):
                info["label"] = rest[-1]
            links[-1]["addr_info"].append(info)
            continue
        if words[0].startswith(("link/", "valid_lft", "altname", "vrf_slave", "inet6")):
            continue
        # detail lines (`ip -d`): bridge, vxlan, veth, ... attributes
        if links and raw[:1].isspace():
            continue
        raise InputError(f"{source}:{n}: {line}: not an 'ip addr' line")
    return links


def _bad(source: str, n: int, line: str) -> int:
    raise InputError(f"{source}:{n}: {line}: expected ADDRESS/PREFIXLEN")


def route_text(text: str, source: str) -> list[dict[str, Any]]:
    """``ip route`` text -> ``ip -j route`` records."""
    out: list[dict[str, Any]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or line == "cache":
            continue
        if raw[:1].isspace() or line.startswith("nexthop"):
            raise InputError(
                f"{source}:{n}: {line}: multipath routes are not read from text: use ip -j route"
            )
        words = line.split()
        r: dict[str, Any] = {}
        if words[0] in _ROUTE_TYPES:
            if words[0] != "unicast":
                r["type"] = words[0]
            words = words[1:]
        if not words:
            raise InputError(f"{source}:{n}: {line}: no destination")
        r["dst"] = words[0]
        i = 1
        while i < len(words):
            w = words[i]
            if w in _ROUTE_FLAGS:
                r.setdefault("flags", []).append(w)
                i += 1
                continue
            if i + 1 >= len(words):
                raise InputError(f"{source}:{n}: {line}: {w} without a value")
            v = words[i + 1]
            key = {"via": "gateway", "src": "prefsrc", "proto": "protocol"}.get(w, w)
            if key == "metric":
                if not v.isdigit():
                    raise InputError(f"{source}:{n}: {line}: metric {v!r} is not a number")
                r[key] = int(v)
            elif w == "via" and v == "inet":  # `via inet 10.0.0.1`
                r[key] = words[i + 2] if i + 2 < len(words) else _bad(source, n, line)
                i += 1
            else:
                r[key] = v
            i += 2
        out.append(r)
    return out


def rule_text(text: str, source: str) -> list[dict[str, Any]]:
    """``ip rule`` text -> ``ip -j rule`` records."""
    out: list[dict[str, Any]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        prio, sep, rest = line.partition(":")
        if not sep or not prio.isdigit():
            raise InputError(f"{source}:{n}: {line}: expected 'PRIORITY: SELECTOR ACTION'")
        r: dict[str, Any] = {"priority": int(prio)}
        words = rest.split()
        i = 0
        while i < len(words):
            w = words[i]
            if w == "not":
                r["not"] = None
                i += 1
            elif w in ("from", "to"):
                if i + 1 >= len(words):
                    raise InputError(f"{source}:{n}: {line}: {w} without a value")
                key = "src" if w == "from" else "dst"
                addr, _, plen = words[i + 1].partition("/")
                r[key] = addr
                if addr != "all":
                    r[f"{key}len"] = int(plen) if plen else 32
                i += 2
            elif w in ("iif", "oif", "lookup", "table", "fwmark", "goto"):
                if i + 1 >= len(words):
                    raise InputError(f"{source}:{n}: {line}: {w} without a value")
                v = words[i + 1]
                if w == "fwmark":
                    mark, _, mask = v.partition("/")
                    r["fwmark"] = mark
                    if mask:
                        r["fwmask"] = mask
                else:
                    r["table" if w == "lookup" else w] = v
                i += 2
                if w in ("iif", "oif") and i < len(words) and words[i] == "[detached]":
                    i += 1
            elif w in _RULE_ACTIONS:
                r["action"] = w
                i += 1
            else:
                raise InputError(f"{source}:{n}: {line}: rule selector {w!r} is not read")
        out.append(r)
    return out
