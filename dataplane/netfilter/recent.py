"""The ``xt_recent`` lists of one host (``-m recent``), on the host's clock.

Contract (from the iptables-extensions manual and the module's defaults):

* A list (``--name``, default ``DEFAULT``) maps an address (source, or destination with
  ``--rdest``, after ``--mask``) to the times it was seen, newest last, at most
  :data:`PKT_LIST_TOT` (20) of them; a list holds at most :data:`LIST_TOT` (200)
  addresses, the least recently seen is forgotten first.
* ``--set`` records the address and matches. ``--rcheck`` matches if the address is on
  the list; ``--update`` likewise and records the time if it matched; ``--remove``
  matches and deletes if it is on the list.
* ``--seconds S`` (with rcheck/update) requires a time within the last S seconds;
  ``--hitcount N`` requires N such times; ``--reap`` forgets times older than S;
  ``--rttl`` requires the TTL recorded by ``--set`` to equal the packet's.
* With ``commit`` False (an enumeration or dry run) nothing is written.
"""

from __future__ import annotations

from collections import OrderedDict

from .rules import RecentMatch

PKT_LIST_TOT = 20
LIST_TOT = 200

__all__ = ["LIST_TOT", "PKT_LIST_TOT", "RecentEntry", "RecentTable"]


class RecentEntry:
    __slots__ = ("stamps", "ttl")

    def __init__(self, ttl: int) -> None:
        self.stamps: list[float] = []
        self.ttl = ttl


class RecentTable:
    """All ``xt_recent`` lists of one network namespace."""

    def __init__(self) -> None:
        self.lists: dict[str, OrderedDict[int, RecentEntry]] = {}

    def match(self, m: RecentMatch, addr: int, ttl: int, now: float, commit: bool) -> bool:
        """Evaluate one ``-m recent`` match (``!`` applied) and apply its side effect."""
        if m.mask is not None:
            addr &= m.mask
        lst = self.lists.get(m.name)
        entry = lst.get(addr) if lst is not None else None
        if m.command == "set":
            if commit:
                if lst is None:
                    lst = self.lists[m.name] = OrderedDict()
                if entry is None:
                    if len(lst) >= LIST_TOT:
                        lst.popitem(last=False)
                    entry = lst[addr] = RecentEntry(ttl)
                entry.ttl = ttl
                entry.stamps.append(now)
                del entry.stamps[:-PKT_LIST_TOT]
                lst.move_to_end(addr)
            return not m.invert
        hit = False
        if entry is not None and lst is not None:
            if m.reap and m.seconds and commit:
                entry.stamps = [t for t in entry.stamps if t >= now - m.seconds]
                if not entry.stamps:
                    del lst[addr]
                    entry = None
            if entry is not None:
                if m.seconds or m.hitcount:
                    recent = [t for t in entry.stamps if not m.seconds or t >= now - m.seconds]
                    hit = len(recent) >= max(m.hitcount, 1)
                else:
                    hit = True
                if hit and m.rttl and entry.ttl != ttl:
                    hit = False
                if hit and commit and lst is not None:
                    if m.command == "remove":
                        del lst[addr]
                    elif m.command == "update":
                        entry.stamps.append(now)
                        del entry.stamps[:-PKT_LIST_TOT]
                        lst.move_to_end(addr)
        return hit != m.invert

    def addresses(self, name: str) -> list[int]:
        """The addresses on a list (oldest first)."""
        return list(self.lists.get(name, {}))

    def copy(self) -> RecentTable:
        other = RecentTable()
        for name, lst in self.lists.items():
            new: OrderedDict[int, RecentEntry] = OrderedDict()
            for a, e in lst.items():
                ne = RecentEntry(e.ttl)
                ne.stamps = list(e.stamps)
                new[a] = ne
            other.lists[name] = new
        return other
