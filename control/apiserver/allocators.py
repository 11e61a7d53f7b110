"""Bitmap allocators for ClusterIPs, NodePorts, LoadBalancer IPs (and node podCIDRs).

Contract:

* Allocation is deterministic first-free: :meth:`Bitmap.allocate_next` returns the lowest
  free offset, so the same sequence of requests yields the same addresses on every run.
* Every taken offset has an *owner* (a string, e.g. ``Service/default/web``).
  :meth:`release` frees an offset only for its owner, so a stale release never frees an
  address someone else holds.
* Allocators hold no state of their own worth persisting: the apiserver rebuilds them
  from the stored objects when it starts (:meth:`occupy` each stored address in key
  order), so allocations survive restarts of any store backend.
* A :class:`Journal` collects what one admission allocated and released, so a batch
  either keeps all of it (:meth:`Journal.commit`: deferred releases happen) or none
  (:meth:`Journal.rollback`: fresh allocations are given back).

Searching is ``bytearray.find`` (C speed) from a low-water mark, so allocation is
O(1)-ish even for a /12 service range (one byte per address, 1 MiB).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from ipaddress import ip_network

from netmodel.errors import AllocationError
from netmodel.ip import IPAddress, IPNetwork
from netmodel.ip import parse_ip_legacy as parse_ip


class Bitmap:
    """``size`` offsets, each free or owned."""

    def __init__(self, size: int, *, dynamic_start: int = 0) -> None:
        """Offsets below ``dynamic_start`` are only ever taken by explicit request."""
        if size <= 0:
            raise ValueError("empty range")
        self._used = bytearray(size)
        self._owners: dict[int, str] = {}
        self._start = dynamic_start
        self._low = dynamic_start  # every offset in [start, low) is taken

    @property
    def size(self) -> int:
        return len(self._used)

    @property
    def free(self) -> int:
        return len(self._used) - len(self._owners)

    def owner(self, offset: int) -> str | None:
        return self._owners.get(offset)

    def allocate_next(self, owner: str) -> int | None:
        """Take the lowest free offset; ``None`` when full."""
        i = self._used.find(0, max(self._low, self._start))
        if i < 0:
            self._low = len(self._used)
            return None
        self._take(i, owner)
        self._low = i + 1
        return i

    def allocate(self, offset: int, owner: str) -> bool:
        """Take ``offset`` for ``owner``; False if someone else holds it (True if ``owner`` does)."""
        held = self._owners.get(offset)
        if held is not None:
            return held == owner
        self._take(offset, owner)
        return True

    def release(self, offset: int, owner: str) -> bool:
        """Free ``offset`` if ``owner`` holds it; returns whether it was freed."""
        if self._owners.get(offset) != owner:
            return False
        del self._owners[offset]
        self._used[offset] = 0
        self._low = min(self._low, max(offset, self._start))
        return True

    def owners(self) -> Iterator[tuple[int, str]]:
        """Every taken offset and its owner."""
        return iter(list(self._owners.items()))

    def _take(self, offset: int, owner: str) -> None:
        self._used[offset] = 1
        self._owners[offset] = owner


class IPAllocator:
    """Addresses of ``network`` (network and broadcast addresses excluded for IPv4 ranges
    of more than two addresses, as Kubernetes does). ``reserved`` leading host addresses
    are never handed out dynamically; they can only be requested explicitly by
    ``reserved_for`` (ClusterIP: the first one belongs to ``default/kubernetes``)."""

    def __init__(
        self, network: IPNetwork, *, what: str, reserved: int = 0, reserved_for: str = ""
    ) -> None:
        self.network = network
        self.what = what
        skip_edges = network.version == 4 and network.num_addresses > 2
        self._first = int(network.network_address) + (1 if skip_edges else 0)
        size = network.num_addresses - (2 if skip_edges else 0)
        self._bits = Bitmap(size, dynamic_start=min(reserved, size))
        self._reserved = reserved
        self._reserved_for = reserved_for

    def _offset(self, ip: IPAddress) -> int | None:
        if ip.version != self.network.version:
            return None
        off = int(ip) - self._first
        return off if 0 <= off < self._bits.size else None

    def _ip(self, offset: int) -> str:
        return str(type(self.network.network_address)(self._first + offset))

    def contains(self, ip: str) -> bool:
        try:
            return self._offset(parse_ip(ip)) is not None
        except ValueError:
            return False

    def owner(self, ip: str) -> str | None:
        off = self._offset(parse_ip(ip))
        return None if off is None else self._bits.owner(off)

    @property
    def free(self) -> int:
        return self._bits.free

    def allocate_next(self, owner: str) -> str:
        """The lowest free non-reserved address; AllocationError when the range is full."""
        off = self._bits.allocate_next(owner)
        if off is None:
            raise AllocationError(f"no {self.what} available in {self.network}: range is full")
        return self._ip(off)

    def allocate(self, ip: str, owner: str) -> str:
        """Take a requested address. AllocationError (Kubernetes' wording) when it is outside
        the range, reserved for someone else, or already allocated."""
        addr = parse_ip(ip)
        off = self._offset(addr)
        if off is None:
            raise AllocationError(
                f"failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid "
                f"range. The range of valid IPs is {self.network}"
            )
        if off < self._reserved and owner != self._reserved_for:
            raise AllocationError(
                f"failed to allocate IP {ip}: the provided IP ({ip}) is reserved for "
                f"{self._reserved_for}"
            )
        if not self._bits.allocate(off, owner):
            raise AllocationError(
                f"failed to allocate IP {ip}: provided IP is already allocated "
                f"(to {self._bits.owner(off)})"
            )
        return str(addr)

    def occupy(self, ip: str, owner: str) -> bool:
        """Mark a stored address as taken (rebuild, replayed status); False if outside the
        range or held by someone else. Never raises for a well-formed address."""
        try:
            off = self._offset(parse_ip(ip))
        except ValueError:
            return False
        return off is not None and self._bits.allocate(off, owner)

    def release(self, ip: str, owner: str) -> bool:
        try:
            off = self._offset(parse_ip(ip))
        except ValueError:
            return False
        return off is not None and self._bits.release(off, owner)

    def held(self) -> Iterator[tuple[str, str]]:
        """Every taken address and its owner."""
        for off, owner in self._bits.owners():
            yield self._ip(off), owner


class ClusterIPRanges:
    """The ClusterIP allocator over every ServiceCIDR (KEP-1880's meta allocator).

    ``default`` is the range of the ``kubernetes`` ServiceCIDR (the Cluster's
    serviceCIDR, its first address reserved for ``default/kubernetes``); :meth:`sync`
    adds one :class:`IPAllocator` per CIDR of each other ServiceCIDR (of the default
    range's IP family) and drops the ones of ServiceCIDRs gone.

    * Dynamic allocation takes the lowest free address of the default range, then of
      the other ranges in ServiceCIDR name order: a new ServiceCIDR is used once the
      ranges before it are full. A requested address is taken when some range holds it.
    * A ServiceCIDR being deleted (``terminating``) gives no new address, dynamic or
      requested; what it holds stays held until released.
    * Ranges may overlap: an address is marked in every range that holds it (taking,
      releasing, and when a range is added, for what the others already hold), so
      no two owners ever get one address.
    """

    what = "clusterIP"

    def __init__(self, default: IPAllocator) -> None:
        self.default = default
        self.network = default.network
        #: ServiceCIDR name -> its ranges (other than the default one)
        self._extra: dict[str, tuple[IPAllocator, ...]] = {}
        self._terminating: frozenset[str] = frozenset()

    # ---- ranges

    def sync(self, cidrs: Mapping[str, tuple[tuple[str, ...], bool]]) -> None:
        """Make the ranges those of ``cidrs`` (ServiceCIDR name -> (its spec.cidrs,
        whether it is being deleted)). CIDRs of the other IP family, the default range
        itself and unparsable ones add nothing (validation refuses the last)."""
        for name in [n for n in self._extra if n not in cidrs]:
            del self._extra[name]
        for name, (texts, _) in sorted(cidrs.items()):
            if name in self._extra:
                continue
            nets: list[IPAllocator] = []
            for text in texts:
                try:
                    net = ip_network(text, strict=True)
                except ValueError:
                    continue
                if net.version != self.network.version or net == self.network:
                    continue
                alloc = IPAllocator(net, what=self.what)
                for other in self._every():
                    for ip, owner in other.held():
                        alloc.occupy(ip, owner)
                nets.append(alloc)
            self._extra[name] = tuple(nets)
        self._terminating = frozenset(n for n, (_, dying) in cidrs.items() if dying)

    def _every(self) -> list[IPAllocator]:
        return [self.default, *(a for n in sorted(self._extra) for a in self._extra[n])]

    def _ready(self) -> list[IPAllocator]:
        ready = [self.default]
        for name in sorted(self._extra):
            if name not in self._terminating:
                ready.extend(self._extra[name])
        return ready

    def ranges(self) -> list[IPNetwork]:
        """The networks new addresses come from (default first)."""
        return [a.network for a in self._ready()]

    def held(self) -> dict[str, str]:
        """Every address taken in any range (being deleted or not) -> its owner."""
        out: dict[str, str] = {}
        for alloc in self._every():
            for ip, owner in alloc.held():
                out.setdefault(ip, owner)
        return out

    # ---- the allocator interface

    @property
    def free(self) -> int:
        """Free addresses of the ranges that allocate (overlaps counted once per range)."""
        return sum(a.free for a in self._ready())

    def contains(self, ip: str) -> bool:
        return any(a.contains(ip) for a in self._ready())

    def owner(self, ip: str) -> str | None:
        for a in self._every():
            if a.contains(ip) and (held := a.owner(ip)) is not None:
                return held
        return None

    def allocate_next(self, owner: str) -> str:
        """The lowest free address of the first range that has one; AllocationError
        when every range is full."""
        for alloc in self._ready():
            if alloc.free == 0:
                continue
            try:
                ip = alloc.allocate_next(owner)
            except AllocationError:
                continue
            self._mark(ip, owner, alloc)
            return ip
        ranges = ", ".join(str(n) for n in self.ranges())
        raise AllocationError(f"no {self.what} available in {ranges}: range is full")

    def allocate(self, ip: str, owner: str) -> str:
        """Take a requested address: AllocationError (Kubernetes' wording) when no range
        that allocates holds it, it is reserved, or someone else holds it."""
        holders = [a for a in self._ready() if a.contains(ip)]
        if not holders:
            if self.default.contains(ip) or not self._extra:
                return self.default.allocate(ip, owner)  # reserved / range messages
            ranges = ", ".join(str(n) for n in self.ranges())
            raise AllocationError(
                f"failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid "
                f"range. The range of valid IPs is {ranges}"
            )
        was_mine = holders[0].owner(ip) == owner
        got = holders[0].allocate(ip, owner)  # the default range first: its own wording
        for other in self._every():
            if other is holders[0] or not other.contains(ip):
                continue
            held = other.owner(ip)
            if held is not None and held != owner:  # overlapping ranges disagree
                if not was_mine:
                    holders[0].release(ip, owner)
                raise AllocationError(
                    f"failed to allocate IP {ip}: provided IP is already allocated (to {held})"
                )
        self._mark(ip, owner, holders[0])
        return got

    def occupy(self, ip: str, owner: str) -> bool:
        """Mark a stored address taken in every range that holds it (being deleted or
        not); False if none does or someone else holds it."""
        holders = [a for a in self._every() if a.contains(ip)]
        if not holders:
            return False
        held = self.owner(ip)
        if held is not None and held != owner:
            return False
        return all([a.occupy(ip, owner) for a in holders])

    def release(self, ip: str, owner: str) -> bool:
        freed = [a.release(ip, owner) for a in self._every() if a.contains(ip)]
        return any(freed)

    def _mark(self, ip: str, owner: str, taken_in: IPAllocator) -> None:
        for a in self._every():
            if a is not taken_in and a.contains(ip):
                a.occupy(ip, owner)


class PortAllocator:
    """Ports ``lo..hi`` inclusive (NodePorts and healthCheckNodePorts share one range)."""

    def __init__(self, lo: int, hi: int, *, what: str = "nodePort") -> None:
        self.lo, self.hi = lo, hi
        self.what = what
        self._bits = Bitmap(hi - lo + 1)

    def contains(self, port: int) -> bool:
        return self.lo <= port <= self.hi

    def owner(self, port: int) -> str | None:
        return self._bits.owner(port - self.lo) if self.contains(port) else None

    @property
    def free(self) -> int:
        return self._bits.free

    def allocate_next(self, owner: str) -> int:
        off = self._bits.allocate_next(owner)
        if off is None:
            raise AllocationError(f"no {self.what} available in range {self.lo}-{self.hi}")
        return self.lo + off

    def allocate(self, port: int, owner: str) -> int:
        if not self.contains(port):
            raise AllocationError(
                f"provided port is not in the valid range. The range of valid ports is "
                f"{self.lo}-{self.hi}"
            )
        if not self._bits.allocate(port - self.lo, owner):
            raise AllocationError(f"provided port is already allocated (to {self.owner(port)})")
        return port

    def occupy(self, port: int, owner: str) -> bool:
        return self.contains(port) and self._bits.allocate(port - self.lo, owner)

    def release(self, port: int, owner: str) -> bool:
        return self.contains(port) and self._bits.release(port - self.lo, owner)


Allocator = IPAllocator | PortAllocator | ClusterIPRanges


@dataclass
class Journal:
    """What one admission took and what it will give back once the write is durable."""

    taken: list[tuple[Allocator, str | int, str]] = field(default_factory=list)
    to_release: list[tuple[Allocator, str | int, str]] = field(default_factory=list)
    #: store writes that follow the allocations once the write is durable (the
    #: IPAddress objects of :mod:`.servicecidrs`), in order
    effects: list[Callable[[], None]] = field(default_factory=list)

    def took(self, alloc: Allocator, value: str | int, owner: str) -> None:
        self.taken.append((alloc, value, owner))

    def release_later(self, alloc: Allocator, value: str | int, owner: str) -> None:
        self.to_release.append((alloc, value, owner))

    def after_commit(self, effect: Callable[[], None]) -> None:
        self.effects.append(effect)

    def commit(self) -> None:
        """The write happened: perform the deferred releases, then the effects."""
        for alloc, value, owner in self.to_release:
            alloc.release(value, owner)  # type: ignore[arg-type]
        effects = list(self.effects)
        self.taken.clear()
        self.to_release.clear()
        self.effects.clear()
        for effect in effects:
            effect()

    def rollback(self) -> None:
        """The write did not happen: give back everything taken, keep what was to be freed."""
        for alloc, value, owner in reversed(self.taken):
            alloc.release(value, owner)  # type: ignore[arg-type]
        self.taken.clear()
        self.to_release.clear()
        self.effects.clear()

    def __iter__(self) -> Iterator[tuple[Allocator, str | int, str]]:
        return iter(self.taken)
