"""A DNS server's answering function over one zone snapshot, shared by the emulator's
DNS pods and the real DNS server process.

:class:`ZoneAnswerer` answers with :func:`dataplane.dns.answer.answer_wire` and keeps
each distinct question's answer, as CoreDNS's ``cache`` plugin does (the snapshot does
not change under it, so neither does the answer; the ID is the asker's)."""

from __future__ import annotations

from dataplane.dns.answer import answer_wire
from netmodel.dnszone import DnsZone

CACHE_MAX = 10_000


class ZoneAnswerer:
    """``answerer(payload, tcp) -> answer | None`` for ``zone``."""

    __slots__ = ("_cache", "zone")

    def __init__(self, zone: DnsZone) -> None:
        self.zone = zone
        self._cache: dict[tuple[bytes, bool], bytes | None] = {}

    def __call__(self, payload: bytes, tcp: bool) -> bytes | None:
        key = (payload[2:], tcp)
        hit = self._cache.get(key, b"")
        if hit == b"":
            hit = answer_wire(self.zone, b"\0\0" + payload[2:], tcp=tcp)
            if len(self._cache) >= CACHE_MAX:
                self._cache.clear()
            self._cache[key] = hit
        return None if hit is None else payload[:2] + hit[2:]
