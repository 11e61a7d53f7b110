"""A namespace's forwarding information base: the ``local`` table, then ``main``.

Contract (IPv4, what ``ip route get`` answers):

* The local table holds every address configured on the namespace's interfaces (type
  ``local``) and the whole of ``127.0.0.0/8`` on ``lo``. It is consulted first; a hit
  means "deliver to this host".
* The main table is a longest-prefix match over the namespace's routes; among equal
  prefixes the first listed wins. A route with ``via`` forwards to that gateway (``onlink``
  skips the check that the gateway is on a connected network); without ``via`` the
  destination itself is the next hop.
* The preferred source is the route's ``src`` when set; otherwise the first address of the
  egress device that contains the next hop, else the device's first address, else the
  first global address of any other device (``inet_select_addr``).

Lookups are cached per destination: the tables never change after construction. A
result's ``description`` is written when first read (only traces read it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Literal

from netmodel.ip import IPAddress
from netmodel.network import Route

LOOPBACK_NET = IPv4Network("127.0.0.0/8")


@dataclass(frozen=True, slots=True)
class RouteResult:
    """The answer to a route lookup for ``dst``.

    ``type`` is ``local`` (deliver here), ``unicast`` (send out ``dev`` to ``nexthop``)
    or ``unreachable`` (no route). ``description`` is what ``ip route get`` would show.
    """

    type: Literal["local", "unicast", "unreachable"]
    dev: str | None
    nexthop: IPAddress | None
    src: IPAddress | None
    route: Route | None
    dst: IPAddress

    @property
    def description(self) -> str:
        """Built on demand: a walk without a trace never reads it, and formatting the
        addresses costs more than the lookup itself."""
        dst = self.dst
        if self.type == "local":
            return f"local {dst} dev lo table local src {dst}"
        r = self.route
        if self.type == "unreachable" or r is None:
            return f"{dst}: no route (Network is unreachable)"
        text = f"{dst} " + ("via " + str(r.via) + " " if r.via else "") + f"dev {r.dev}"
        if self.src is not None:
            text += f" src {self.src}"
        return f"{text}  (route: {r.describe()})"


class Fib:
    """The local and main tables of one namespace (see the module docstring)."""

    __slots__ = ("_addrs", "_cache", "_local", "_main", "_sources")

    def __init__(
        self,
        addresses: Mapping[str, Sequence[IPv4Interface]],
        routes: Iterable[Route],
    ) -> None:
        """``addresses``: per device name, its addresses in configuration order."""
        self._addrs: dict[str, tuple[IPv4Interface, ...]] = {
            dev: tuple(a) for dev, a in addresses.items()
        }
        self._local: dict[int, str] = {}
        for dev, addrs in self._addrs.items():
            for a in addrs:
                self._local.setdefault(int(a.ip), dev)
        main: list[tuple[int, int, int, Route]] = []
        for r in routes:
            if r.dst.version != 4:
                continue
            net = r.dst
            main.append((net.prefixlen, int(net.network_address), int(net.netmask), r))
        # longest prefix first; stable so that the first listed wins among equals
        main.sort(key=lambda t: -t[0])
        self._main = main
        self._cache: dict[int, RouteResult] = {}  # by address as int (cheap to hash)
        # select_source per (device, target as int): routes via a gateway ask the same
        self._sources: dict[tuple[str, int | None], IPAddress | None] = {}

    def is_local(self, addr: IPAddress) -> bool:
        """Whether ``addr`` is in the local table (own address or 127/8)."""
        value = addr._ip  # type: ignore[union-attr]  # int(addr), without its Python call
        return value in self._local or (value >> 24) == 127

    def local_addresses(self) -> frozenset[IPAddress]:
        return frozenset(IPv4Address(v) for v in self._local)

    def lookup(self, dst: IPAddress) -> RouteResult:
        """The route for ``dst`` (cached)."""
        value = dst._ip  # type: ignore[union-attr]  # int(dst), without its Python call
        hit = self._cache.get(value)
        if hit is None:
            hit = self._lookup(dst)
            self._cache[value] = hit
        return hit

    def _lookup(self, dst: IPAddress) -> RouteResult:
        value = int(dst)
        dev = self._local.get(value)
        if dev is not None or (value >> 24) == 127:
            return RouteResult("local", "lo", dst, dst, None, dst)
        for _plen, net, mask, r in self._main:
            if value & mask == net:
                nexthop = r.via if r.via is not None else dst
                src = r.src if r.src is not None else self.select_source(r.dev, nexthop)
                return RouteResult("unicast", r.dev, nexthop, src, r, dst)
        return RouteResult("unreachable", None, None, None, None, dst)

    def select_source(self, dev: str, target: IPAddress | None) -> IPAddress | None:
        """``inet_select_addr``: an address of ``dev`` on ``target``'s subnet, else its
        first address, else the first non-loopback address of the namespace (cached)."""
        key = (dev, None if target is None else int(target))
        if key in self._sources:
            return self._sources[key]
        found = self._sources[key] = self._select_source(dev, target)
        return found

    def _select_source(self, dev: str, target: IPAddress | None) -> IPAddress | None:
        addrs = self._addrs.get(dev, ())
        if target is not None:
            for a in addrs:
                if target in a.network:
                    return a.ip
        if addrs:
            return addrs[0].ip
        for other, others in self._addrs.items():
            for a in others:
                if other != "lo" and a.ip not in LOOPBACK_NET:
                    return a.ip
        return None
