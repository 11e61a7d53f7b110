"""A node's interfaces, addresses, routing tables and policy rules, from ``ip -j``.

Inputs are what ``ip -j addr``, ``ip -j route show table all`` and ``ip -j rule`` print
(JSON arrays). :class:`Fib` answers the kernel's two questions about a packet:

* :meth:`Fib.lookup` — the policy rules in priority order (``from``/``to``/``iif``/
  ``oif``/``fwmark``/``not``; action ``lookup TABLE`` or ``blackhole``/``unreachable``/
  ``prohibit``), then, in the table a rule names, the longest prefix that matches (then
  the lowest metric). Route types ``local`` (deliver here), ``unicast``,
  ``blackhole``/``unreachable``/``prohibit`` (drop) and ``throw`` (next rule) are
  evaluated; ``broadcast``/``multicast``/``anycast`` routes are not used for unicast
  lookups. An arriving packet to a multicast group is not forwarded (the kernel forwards
  multicast only with multicast routing, which a dump does not hold): it is dropped,
  except the all-hosts group 224.0.0.1 and the limited broadcast 255.255.255.255, which
  are delivered here.
* :meth:`Fib.masquerade_source` — the address MASQUERADE takes: the kernel's
  ``inet_select_addr(out, nexthop, RT_SCOPE_UNIVERSE)``: the first primary
  global-scope IPv4 address of the output interface whose subnet holds the next hop,
  else its first primary global-scope address, else (same as the kernel) a global
  address of another interface.

IPv6 addresses are read; routing is IPv4 (``ip -j route`` prints the IPv4 tables;
``ip -6`` output is not part of a node dump).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, ip_address, ip_interface, ip_network
from typing import Any

from netmodel.errors import InputError
from netmodel.ip import IPAddress

__all__ = ["Address", "Fib", "Route", "RouteDecision", "Rule", "load_json_list"]

_TABLE_IDS = {"local": 255, "main": 254, "default": 253, "unspec": 0}
_DROP_TYPES = ("blackhole", "unreachable", "prohibit")
_ALL_HOSTS = IPv4Address("224.0.0.1")
_LIMITED_BROADCAST = IPv4Address("255.255.255.255")


def load_json_list(text: str, source: str) -> list[dict[str, Any]]:
    """A JSON array of objects (``ip -j`` output), or an InputError naming the file and
    line (``ip`` prints an empty file for nothing, taken as ``[]``)."""
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{source}:{e.lineno}: not JSON: {e.msg}") from None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise InputError(f"{source}:1: expected a JSON array of objects (ip -j output)")
    return data


def _table_id(v: object) -> int:
    if isinstance(v, int):
        return v
    s = str(v)
    if s in _TABLE_IDS:
        return _TABLE_IDS[s]
    return int(s)


@dataclass(frozen=True, slots=True)
class Address:
    """One address of one interface (``ip -j addr``'s ``addr_info``)."""

    ifname: str
    address: IPAddress
    prefixlen: int
    scope: str
    secondary: bool

    @property
    def network(self) -> IPv4Network:
        return ip_interface(f"{self.address}/{self.prefixlen}").network  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Route:
    """One route (``ip -j route show table all``)."""

    table: int
    type: str
    dst: IPv4Network
    dev: str | None
    gateway: IPv4Address | None
    prefsrc: IPv4Address | None
    metric: int
    line: str


@dataclass(frozen=True, slots=True)
class Rule:
    """One policy rule (``ip -j rule``)."""

    priority: int
    src: IPv4Network | None
    dst: IPv4Network | None
    iif: str | None
    oif: str | None
    fwmark: tuple[int, int] | None
    invert: bool
    action: str
    table: int


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """Where a packet goes: ``kind`` ``local``, ``unicast`` or a drop (``blackhole``,
    ``unreachable``, ``prohibit``, ``no route``, ``multicast``); ``dev`` the output interface;
    ``route`` the route text."""

    kind: str
    dev: str | None
    gateway: IPv4Address | None
    prefsrc: IPv4Address | None
    route: str

    @property
    def dropped(self) -> bool:
        return self.kind not in ("local", "unicast")


def parse_addrs(data: list[dict[str, Any]], source: str) -> list[Address]:
    out: list[Address] = []
    for i, link in enumerate(data):
        name = str(link.get("ifname", ""))
        if not name:
            raise InputError(f"{source}: entry {i}: no 'ifname'")
        for a in link.get("addr_info", []) or []:
            if "local" not in a:
                continue
            try:
                out.append(
                    Address(
                        name,
                        ip_address(a["local"]),
                        int(a.get("prefixlen", 32)),
                        str(a.get("scope", "global")),
                        bool(a.get("secondary", False)),
                    )
                )
            except ValueError as e:
                raise InputError(f"{source}: {name}: {e}") from None
    return out


def parse_routes(data: list[dict[str, Any]], source: str) -> list[Route]:
    out: list[Route] = []
    for i, r in enumerate(data):
        try:
            dst = str(r.get("dst", ""))
            net = ip_network("0.0.0.0/0" if dst == "default" else dst, strict=False)
            if net.version != 4:
                continue
            gw = r.get("gateway")
            if gw is None and r.get("nexthops"):
                gw = r["nexthops"][0].get("gateway")
                r = {**r, "dev": r["nexthops"][0].get("dev")}
            out.append(
                Route(
                    _table_id(r.get("table", "main")),
                    str(r.get("type", "unicast")),
                    net,
                    r.get("dev"),
                    IPv4Address(gw) if gw else None,
                    IPv4Address(r["prefsrc"]) if r.get("prefsrc") else None,
                    int(r.get("metric", 0)),
                    json.dumps(r, sort_keys=True),
                )
            )
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"{source}: route {i}: {e}") from None
    return out


def _selector(r: dict[str, Any], key: str) -> IPv4Network | None:
    v = r.get(key)
    if v is None or v == "all":
        return None
    plen = r.get(f"{key}len", 32)
    return ip_network(f"{v}/{plen}", strict=False)  # type: ignore[return-value]


def parse_rules(data: list[dict[str, Any]], source: str) -> list[Rule]:
    out: list[Rule] = []
    for i, r in enumerate(data):
        try:
            mark = None
            if "fwmark" in r:
                mark = (int(str(r["fwmark"]), 0), int(str(r.get("fwmask", "0xffffffff")), 0))
            action = str(r.get("action", "lookup" if "table" in r else "unspec"))
            if action not in ("lookup", *_DROP_TYPES):
                raise ValueError(f"rule action {action!r} is not modelled")
            for k in ("goto", "ipproto", "sport", "dport", "uidrange", "l3mdev"):
                if k in r:
                    raise ValueError(f"rule selector {k!r} is not modelled")
            out.append(
                Rule(
                    int(r.get("priority", 0)),
                    _selector(r, "src"),
                    _selector(r, "dst"),
                    r.get("iif"),
                    r.get("oif"),
                    mark,
                    # ``ip -j rule`` prints an inverted rule's "not" as null
                    "not" in r and r["not"] is not False,
                    action,
                    _table_id(r.get("table", "main")) if action == "lookup" else 0,
                )
            )
        except (ValueError, TypeError) as e:
            raise InputError(f"{source}: rule {i}: {e}") from None
    out.sort(key=lambda x: x.priority)
    return out


def _implicit_routes(addrs: list[Address]) -> list[Route]:
    """The routes the kernel adds for every address (a hand-assembled dump may lack
    them): ``local ADDR`` in table local, and the subnet route in main (unless /32)."""
    out: list[Route] = []
    for a in addrs:
        if a.address.version != 4:
            continue
        host = a.network if a.scope == "host" else IPv4Network(f"{a.address}/32")
        out.append(Route(255, "local", host, a.ifname, None, a.address, 0, f"local {a.address}"))
        if a.prefixlen < 32 and not a.secondary:
            net = a.network
            text = f"{net} dev {a.ifname} proto kernel scope link src {a.address}"
            out.append(Route(254, "unicast", net, a.ifname, None, a.address, 0, text))
    return out


_DEFAULT_RULES = [
    Rule(0, None, None, None, None, None, False, "lookup", 255),
    Rule(32766, None, None, None, None, None, False, "lookup", 254),
    Rule(32767, None, None, None, None, None, False, "lookup", 253),
]


class Fib:
    """A node's routing: addresses, tables and policy rules (see the module docstring)."""

    def __init__(self, addrs: list[Address], routes: list[Route], rules: list[Rule]) -> None:
        self.addrs = addrs
        self.rules = rules or _DEFAULT_RULES
        self.tables: dict[int, list[Route]] = {}
        routes = routes + _implicit_routes(addrs)
        for r in routes:
            if r.type in ("broadcast", "multicast", "anycast", "nat"):
                continue
            self.tables.setdefault(r.table, []).append(r)
        for rs in self.tables.values():
            rs.sort(key=lambda r: (-r.dst.prefixlen, r.metric))
        # the node's own addresses: its interfaces' and the local table's ``local`` routes
        # (a ``local`` route in another table, e.g. Cilium's ``local default`` in table
        # 2004 for its proxy's marked packets, is reached only through its policy rule)
        local_routes = [r for r in routes if r.type == "local" and r.table == _TABLE_IDS["local"]]
        self.local: frozenset[IPAddress] = frozenset(
            [a.address for a in addrs] + [r.dst.network_address for r in local_routes]
        )
        self._local_nets = [r.dst for r in local_routes if r.dst.prefixlen < 32]

    def is_local(self, addr: IPAddress) -> bool:
        if addr in self.local:
            return True
        return addr.version == 4 and any(addr in n for n in self._local_nets)

    def lookup(
        self, dst: IPAddress, src: IPAddress | None = None, iif: str | None = None, mark: int = 0
    ) -> RouteDecision:
        """The route the kernel picks for a packet to ``dst`` (from ``src``, arriving on
        ``iif`` — None for the node's own traffic — carrying ``mark``)."""
        if dst.version != 4:
            if self.is_local(dst):
                return RouteDecision("local", "lo", None, None, "local")
            return RouteDecision("no route", None, None, None, "IPv6 routing is not in the dump")
        if iif is not None and (dst.is_multicast or dst == _LIMITED_BROADCAST):
            if dst in (_ALL_HOSTS, _LIMITED_BROADCAST):
                return RouteDecision("local", "lo", None, None, f"{dst}: delivered here")
            return RouteDecision(
                "multicast", None, None, None, f"{dst}: not forwarded (no multicast routing)"
            )
        for rule in self.rules:
            hit = True
            if rule.src is not None and (src is None or src not in rule.src):
                hit = False
            if hit and rule.dst is not None and dst not in rule.dst:
                hit = False
            if hit and rule.iif is not None and (iif or "lo") != rule.iif:
                hit = False
            if hit and rule.oif is not None:
                hit = False  # oif selects only sockets bound to a device
            if hit and rule.fwmark is not None and (mark & rule.fwmark[1]) != rule.fwmark[0]:
                hit = False
            if hit == rule.invert:
                continue
            if rule.action != "lookup":
                return RouteDecision(rule.action, None, None, None, f"rule {rule.priority}")
            for r in self.tables.get(rule.table, ()):
                if dst in r.dst:
                    if r.type == "throw":
                        break
                    kind = r.type
                    if kind in _DROP_TYPES:
                        return RouteDecision(kind, None, None, None, r.line)
                    return RouteDecision(
                        "local" if kind == "local" else "unicast",
                        r.dev,
                        r.gateway,
                        r.prefsrc,
                        r.line,
                    )
        return RouteDecision("no route", None, None, None, "no route")

    def masquerade_source(self, dev: str, nexthop: IPAddress) -> IPAddress | None:
        """``inet_select_addr(dev, nexthop, RT_SCOPE_UNIVERSE)`` (module docstring)."""
        cands = [
            a
            for a in self.addrs
            if a.ifname == dev and a.address.version == 4 and a.scope == "global"
        ]
        primary = [a for a in cands if not a.secondary]
        for a in primary:
            if nexthop in a.network:
                return a.address
        if primary:
            return primary[0].address
        for a in self.addrs:
            if a.address.version == 4 and a.scope == "global" and not a.secondary:
                return a.address
        return None

    @property
    def interfaces(self) -> frozenset[str]:
        """The interfaces the dump names: those with an address or a route."""
        devs = {r.dev for rs in self.tables.values() for r in rs if r.dev}
        return frozenset({a.ifname for a in self.addrs} | devs)

    def addresses_of(self, dev: str) -> list[IPAddress]:
        return [a.address for a in self.addrs if a.ifname == dev]
