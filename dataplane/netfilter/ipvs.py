"""IPVS, evaluation side: virtual servers as data, and the kernel's choice of a real
server. (The IPVS renderer produces :class:`IpvsState`; svclab's kernel has no IPVS, so
this is checked against the rendered text only.)

Contract:

* :class:`IpvsState` holds virtual servers keyed by ``(address, protocol, port)``.
* Schedulers, as the kernel's: ``rr`` cycles through the real servers of weight > 0 per
  virtual server; ``wrr`` is the kernel's weighted round robin (gcd steps); ``lc`` picks
  the fewest live connections (conntrack entries) weighted, first on ties; ``sh``
  hashes the client address into a 256-bucket table filled in real-server order.
* Persistence (``persistent_timeout`` > 0, ClientIP affinity): a template per (client,
  virtual server) pins the client's new connections to one real server until the
  template has been unused for the timeout.
* As netfilter stages (``Netfilter(ipvs=IpvsEngine(...))``, see
  :meth:`IpvsEngine.stages`): a new connection to a virtual address is scheduled in
  INPUT (priority 98, after the filter table); IPVS then takes the packet (verdict
  ``STOLEN``) and sends it to a remote real server itself, through OUTPUT and
  POSTROUTING, as its NAT forwarding does. A connection from the host itself is
  scheduled in OUTPUT (priority -99). The real server is recorded in conntrack
  (``net.ipv4.vs.conntrack=1``, as kube-proxy sets) by altering the reply tuple, with
  no NAT status bit: later packets arrive for the virtual address, cross INPUT and are
  rewritten and taken by IPVS again; replies are rewritten back by IPVS in FORWARD
  (or INPUT, for a local client), not by nf_nat.
* ``--all``: rr/lc each real server with weight > 0 equally, wrr in proportion to the
  weights; sh and an existing persistence template are deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from ipaddress import ip_address
from math import gcd
from typing import TYPE_CHECKING, Any

from netmodel.ip import IPAddress

from .choice import Explorer
from .compile import ST_NEW, ST_RELATED, Work
from .conntrack import DST_NAT, IPVS, ORIGINAL, REPLY, addr_int, int_addr
from .trace import TraceRecord
from .verdict import CONTINUE, STOLEN

if TYPE_CHECKING:
    from .evaluate import Netfilter

__all__ = ["IpvsEngine", "IpvsState", "RealServer", "VirtualServer", "sh_bucket"]

SCHEDULERS = ("rr", "wrr", "lc", "sh")
SH_TAB_SIZE = 256
_GOLDEN_RATIO_32 = 0x61C88647


@dataclass(frozen=True, slots=True)
class RealServer:
    """A backend: ``address:port`` with a weight (0 = quiesced, gets no new connections)."""

    address: IPAddress
    port: int
    weight: int = 1

    def __str__(self) -> str:
        return (
            f"[{self.address}]:{self.port}"
            if self.address.version == 6
            else f"{self.address}:{self.port}"
        )


@dataclass(frozen=True, slots=True)
class VirtualServer:
    """``ipvsadm -A -t|-u|--sctp-service address:port -s scheduler [-p timeout]``."""

    address: IPAddress
    protocol: str
    port: int
    scheduler: str = "rr"
    persistent_timeout: int = 0
    real_servers: tuple[RealServer, ...] = ()

    @property
    def key(self) -> tuple[IPAddress, str, int]:
        return (self.address, self.protocol, self.port)

    def __str__(self) -> str:
        a = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return f"{self.protocol.upper()} {a}:{self.port} {self.scheduler}"


@dataclass(frozen=True)
class IpvsState:
    """All virtual servers of one host, keyed by ``(address, protocol, port)``."""

    services: Mapping[tuple[IPAddress, str, int], VirtualServer] = field(default_factory=dict)

    @classmethod
    def of(cls, services: Iterable[VirtualServer]) -> IpvsState:
        out: dict[tuple[IPAddress, str, int], VirtualServer] = {}
        for vs in services:
            if vs.scheduler not in SCHEDULERS:
                raise ValueError(f"{vs}: unsupported scheduler {vs.scheduler!r}")
            out[vs.key] = vs
        return cls(out)


def _hash32(value: int, bits: int) -> int:
    return ((value * _GOLDEN_RATIO_32) & 0xFFFFFFFF) >> (32 - bits)


def sh_bucket(client: IPAddress) -> int:
    """The source-hash bucket of a client address (IPv6 folded to 32 bits)."""
    v = int(client)
    if client.version == 6:
        v = (v >> 96) ^ (v >> 64) ^ (v >> 32) ^ v
    return _hash32(v & 0xFFFFFFFF, 8) & (SH_TAB_SIZE - 1)


def _sh_table(servers: tuple[RealServer, ...]) -> list[RealServer | None]:
    live = [s for s in servers if s.weight > 0]
    if not live:
        return [None] * SH_TAB_SIZE
    table: list[RealServer | None] = []
    i = 0
    count = 0
    for _ in range(SH_TAB_SIZE):
        s = live[i]
        table.append(s)
        count += 1
        if count >= s.weight:
            i = (i + 1) % len(live)
            count = 0
    return table


class IpvsEngine:
    """One host's IPVS: the state plus scheduler memory (rr/wrr positions, persistence
    templates). Pass as ``Netfilter(ipvs=...)``."""

    def __init__(self, state: IpvsState) -> None:
        self.state = state
        self._by_int = {(addr_int(a), p, port): vs for (a, p, port), vs in state.services.items()}
        self._rr: dict[tuple[IPAddress, str, int], int] = {}
        self._wrr: dict[tuple[IPAddress, str, int], tuple[int, int]] = {}
        self._templates: dict[tuple[int, tuple[IPAddress, str, int]], tuple[RealServer, float]] = {}
        self._sh: dict[tuple[IPAddress, str, int], list[RealServer | None]] = {}

    # ---- state for exploring (``--all``) and restoring

    def snapshot(self) -> tuple[dict[Any, Any], ...]:
        """A copy of the scheduler memory: rr and wrr positions and persistence
        templates (the per-service source-hash tables are derived, not memory)."""
        return dict(self._rr), dict(self._wrr), dict(self._templates)

    def restore(self, state: tuple[dict[Any, Any], ...]) -> None:
        """Go back to a :meth:`snapshot` (which stays usable for another restore)."""
        rr, wrr, templates = state
        self._rr, self._wrr, self._templates = dict(rr), dict(wrr), dict(templates)

    # ---- scheduling

    def schedule(
        self,
        vs: VirtualServer,
        client: IPAddress,
        *,
        now: float = 0.0,
        nf: Netfilter | None = None,
        chooser: Any = None,
        commit: bool = True,
    ) -> RealServer | None:
        """The real server for a new connection from ``client`` (None if none can take
        it). With an :class:`~.choice.Explorer` as ``chooser`` the non-deterministic
        schedulers branch instead of using their memory."""
        live = [s for s in vs.real_servers if s.weight > 0]
        if not live:
            return None
        cint = addr_int(client)
        if vs.persistent_timeout:
            tpl = self._templates.get((cint, vs.key))
            if tpl is not None and tpl[1] > now and tpl[0] in live:
                if commit:
                    self._templates[(cint, vs.key)] = (tpl[0], now + vs.persistent_timeout)
                return tpl[0]
        explore = isinstance(chooser, Explorer)
        if vs.scheduler == "sh":
            table = self._sh.get(vs.key)
            if table is None:
                table = self._sh[vs.key] = _sh_table(vs.real_servers)
            rs = table[sh_bucket(client)]
        elif explore and vs.scheduler in ("rr", "lc"):
            rs = live[chooser.uniform(len(live))]
        elif explore and vs.scheduler == "wrr":
            total = sum(s.weight for s in live)
            rs = live[chooser.weighted([s.weight / total for s in live])]
        elif vs.scheduler == "rr":
            last = self._rr.get(vs.key, -1)
            order = list(vs.real_servers)
            rs = None
            for k in range(1, len(order) + 1):
                cand = order[(last + k) % len(order)]
                if cand.weight > 0:
                    rs = cand
                    if commit:
                        self._rr[vs.key] = (last + k) % len(order)
                    break
        elif vs.scheduler == "wrr":
            rs = self._wrr_next(vs, commit)
        else:  # lc
            counts = self._active(nf)
            rs = min(
                live, key=lambda s: (counts.get((addr_int(s.address), s.port), 0) * 256) / s.weight
            )
        if rs is not None and vs.persistent_timeout and commit:
            self._templates[(cint, vs.key)] = (rs, now + vs.persistent_timeout)
        return rs

    def _wrr_next(self, vs: VirtualServer, commit: bool) -> RealServer | None:
        servers = vs.real_servers
        weights = [s.weight for s in servers]
        mw = max(weights)
        if mw <= 0:
            return None
        g = 0
        for wt in weights:
            if wt > 0:
                g = gcd(g, wt)
        i, cw = self._wrr.get(vs.key, (-1, 0))
        n = len(servers)
        for _ in range(n * (mw // g + 1)):
            i = (i + 1) % n
            if i == 0:
                cw -= g
                if cw <= 0:
                    cw = mw
            if servers[i].weight >= cw:
                if commit:
                    self._wrr[vs.key] = (i, cw)
                return servers[i]
        return None  # pragma: no cover

    @staticmethod
    def _active(nf: Netfilter | None) -> dict[tuple[int, int], int]:
        counts: dict[tuple[int, int], int] = {}
        if nf is None:
            return counts
        for c in nf.conntrack.entries():
            k = (c.reply.src, c.reply.sport)
            counts[k] = counts.get(k, 0) + 1
        return counts

    # ---- netfilter stages

    def stages(self, nf: Netfilter) -> list[tuple[str, int, str, Any]]:
        """IPVS's hooks (priorities as the kernel registers them): requests in INPUT
        (98, ``ip_vs_remote_request``) and OUTPUT (-99, ``ip_vs_local_request``),
        replies in INPUT (99, ``ip_vs_reply``: to a local client) and FORWARD (100,
        ``ip_vs_forward_reply``)."""
        return [
            ("INPUT", 98, "ipvs", self._request_stage(nf, "INPUT")),
            ("OUTPUT", -99, "ipvs", self._request_stage(nf, "OUTPUT")),
            ("INPUT", 99, "ipvs reply", self._reply_stage()),
            ("FORWARD", 100, "ipvs reply", self._reply_stage()),
        ]

    def nat_chains(self, nf: Netfilter, hook: str) -> list[Any]:
        return []

    def _request_stage(self, nf: Netfilter, hook: str) -> Any:
        """A request to a virtual server: a new connection is scheduled (the real server
        recorded in conntrack with :meth:`~.conntrack.ConntrackTable.alter_reply`),
        later packets of an IPVS connection reuse it; the destination becomes the real
        server. In INPUT, IPVS then takes the packet (STOLEN) to send it on itself
        (NAT forwarding: its own route, TTL and MTU checks, then OUTPUT and
        POSTROUTING) unless the real server is this host (the packet goes on to local
        delivery); in OUTPUT the packet simply continues."""
        locals_ = nf.local_addrs

        def stage(w: Work, rec: list[Any] | None) -> int:
            ct = w.ct
            if ct is None or w.ctbits & ST_RELATED:
                return CONTINUE
            if ct.status & IPVS:
                if w.ctdir != ORIGINAL or (w.dst == ct.reply.src and w.dport == ct.reply.sport):
                    # a reply, or a packet IPVS already sent on (skb->ipvs_property)
                    return CONTINUE
                w.dst, w.dport = ct.reply.src, ct.reply.sport
                if rec is not None:
                    rec.append(
                        TraceRecord(
                            w.hook,
                            "ipvs",
                            "",
                            0,
                            "",
                            f"connection -> {_hostport(w.dst, w.dport)}",
                            None,
                            w.ctname,
                            w.mark,
                        )
                    )
                return STOLEN if hook == "INPUT" and w.dst not in locals_ else CONTINUE
            vs = self._by_int.get((w.dst, w.proto, w.dport))
            if vs is None or ct.status & DST_NAT or not w.ctbits & ST_NEW:
                return CONTINUE
            rs = self.schedule(
                vs, int_addr(w.src), now=w.now, nf=nf, chooser=w.chooser, commit=w.commit
            )
            if rs is None:
                if rec is not None:
                    rec.append(
                        TraceRecord(
                            w.hook,
                            "ipvs",
                            str(vs),
                            0,
                            "",
                            "no real server: DROP",
                            None,
                            w.ctname,
                            w.mark,
                        )
                    )
                return 2  # DROP
            before = _hostport(w.dst, w.dport)
            nf.conntrack.alter_reply(ct, addr_int(rs.address), rs.port)
            w.dst, w.dport = addr_int(rs.address), rs.port
            if rec is not None:
                rec.append(
                    TraceRecord(
                        w.hook,
                        "ipvs",
                        str(vs),
                        0,
                        "",
                        f"schedule {vs.scheduler} -> {rs}",
                        f"{before} -> {rs}",
                        w.ctname,
                        w.mark,
                    )
                )
            return STOLEN if hook == "INPUT" and w.dst not in locals_ else CONTINUE

        return stage

    @staticmethod
    def _reply_stage() -> Any:
        """A reply of an IPVS connection: its source becomes the virtual server again."""

        def stage(w: Work, rec: list[Any] | None) -> int:
            ct = w.ct
            if ct is None or not ct.status & IPVS or w.ctdir != REPLY or w.ctbits & ST_RELATED:
                return CONTINUE
            before = _hostport(w.src, w.sport)
            w.src, w.sport = ct.orig.dst, ct.orig.dport
            if rec is not None:
                rec.append(
                    TraceRecord(
                        w.hook,
                        "ipvs",
                        "",
                        0,
                        "",
                        "reply: source rewritten",
                        f"{before} -> {_hostport(w.src, w.sport)}",
                        w.ctname,
                        w.mark,
                    )
                )
            return CONTINUE

        return stage


def _hostport(addr: int, port: int) -> str:
    a = int_addr(addr)
    return f"[{a}]:{port}" if a.version == 6 else f"{a}:{port}"


def virtual_server(
    address: str,
    protocol: str,
    port: int,
    real_servers: Iterable[tuple[str, int] | tuple[str, int, int]],
    scheduler: str = "rr",
    persistent_timeout: int = 0,
) -> VirtualServer:
    """Convenience constructor from strings: ``real_servers`` as (ip, port[, weight])."""
    rss = tuple(RealServer(ip_address(r[0]), r[1], r[2] if len(r) > 2 else 1) for r in real_servers)
    return VirtualServer(ip_address(address), protocol, port, scheduler, persistent_timeout, rss)
