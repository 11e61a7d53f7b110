"""NAT with nf_nat's semantics: the DNAT, SNAT and MASQUERADE targets, and the nat
stage of a hook that applies a connection's bindings.

**Targets** (:func:`dnat`, :func:`dnat_ints`, :func:`snat`) run for the first packet of a
connection only (the stage below calls the nat chains while the connection has no
decision for that manipulation). They choose the new address and port and record the
binding in the connection (:meth:`~.conntrack.ConntrackTable.bind_dnat`,
:meth:`~.conntrack.ConntrackTable.bind_snat`); they return a verdict code
(:mod:`.verdict`) and a NAT note for the trace. The host (``w.host``, a
:class:`~.evaluate.Netfilter`) supplies the conntrack table, the random source and, for
MASQUERADE, the source address (:meth:`~.evaluate.Netfilter.masq_source`).

**The stage** (:func:`nat_stage`) runs at -100 (DST: PREROUTING, OUTPUT) and 100 (SRC:
INPUT, POSTROUTING). Later packets and replies are rewritten from the binding stored in
the connection (:func:`apply_binding`). An ICMP error RELATED to a connection never runs
the nat chains: its outer header and the packet it quotes are translated per the
connection's bindings (:func:`translate_error`), as ``nf_nat_icmp_reply_translation``
does.
"""

from __future__ import annotations

import random as _random
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from netmodel.packet import Packet

from . import rules as R
from .choice import RandomChooser
from .compile import ST_NEW, ST_RELATED, Work
from .conntrack import (
    DST_NAT,
    DST_NAT_DONE,
    REPLY,
    SRC_NAT,
    SRC_NAT_DONE,
    Connection,
    addr_int,
    int_addr,
)
from .trace import TraceRecord
from .verdict import ACCEPT, CONTINUE, DROP, REJECT

if TYPE_CHECKING:
    from .compiled import NatNote, RawTrace
    from .evaluate import Netfilter

__all__ = [
    "Stage",
    "apply_binding",
    "dnat",
    "dnat_ints",
    "nat_hash",
    "nat_stage",
    "range_ints",
    "snat",
    "translate_error",
]

#: A hook stage (and a nat chain): ``(work, raw trace or None) -> verdict code``.
Stage = Callable[[Work, "RawTrace | None"], int]

_RANGE_INTS: dict[int, tuple[object, int | None, int, int | None, int]] = {}


def range_ints(t: R.Dnat) -> tuple[int | None, int, int | None, int]:
    """A DNAT target's first range as integers: address low and high (None, 0 when the
    target keeps the address), port low and high (None, 0 when it keeps the port)."""
    rng = t.ranges[0]
    lo = hi = None
    if rng.addr_lo is not None:
        lo, hi = addr_int(rng.addr_lo), addr_int(rng.addr_hi or rng.addr_lo)
    return (lo, hi if hi is not None else 0, rng.port_lo, rng.port_hi or rng.port_lo or 0)


def _cached_range_ints(t: R.Dnat) -> tuple[object, int | None, int, int | None, int]:
    """:func:`range_ints`, cached by the target's identity (the target is kept in the
    entry, so a recycled id is recognised)."""
    ent = _RANGE_INTS.get(id(t))
    if ent is None or ent[0] is not t:
        ent = (t, *range_ints(t))
        if len(_RANGE_INTS) > 200_000:
            _RANGE_INTS.clear()
        _RANGE_INTS[id(t)] = ent
    return ent


def nat_hash(src: int, dst: int, persistent: bool) -> int:
    """nf_nat's choice of an address in a range hashes the connection's source and,
    unless the range is ``--persistent``, its destination (a deterministic hash here;
    the kernel's is seeded at boot)."""
    return zlib.crc32(f"{src}/{0 if persistent else dst}".encode())


def dnat(w: Work, t: R.Dnat) -> tuple[int, NatNote]:
    """DNAT as nf_nat does it: the address from the range by a hash of the source
    and (unless ``--persistent``: the same mapping for a source whatever the
    destination) the destination; the port kept when in the range, else the first
    of it, or (``--random``) a random one of it."""
    ct = w.ct
    if ct is None or ct.status & DST_NAT_DONE:
        return ACCEPT, None
    _, lo, hi, plo, phi = _cached_range_ints(t)
    before = (w.dst, w.dport)
    dst = w.dst
    if lo is not None:
        dst = lo if lo == hi else lo + nat_hash(w.src, w.dst, t.persistent) % (hi - lo + 1)
    dport = w.dport if w.proto != "icmp" else w.icmp_id
    if plo is not None and w.proto in ("tcp", "udp", "sctp"):
        if t.random:
            chooser = w.host.chooser
            rnd = chooser.rng if isinstance(chooser, RandomChooser) else None
            dport = plo + (rnd or _random).randrange(phi - plo + 1)
        elif not plo <= dport <= phi:
            dport = plo
    w.host.conntrack.bind_dnat(ct, dst, dport)
    return ACCEPT, (before, (dst, dport))


def dnat_ints(w: Work, lo: int | None, hi: int, plo: int | None, phi: int) -> tuple[int, NatNote]:
    """:func:`dnat` for a target without flags, its first range given as integers
    (:func:`range_ints`; generated code binds them)."""
    ct = w.ct
    if ct is None or ct.status & DST_NAT_DONE:
        return ACCEPT, None
    dst = w.dst
    before = (dst, w.dport)
    if lo is not None:
        dst = lo if lo == hi else lo + nat_hash(w.src, w.dst, False) % (hi - lo + 1)
    dport = w.dport if w.proto != "icmp" else w.icmp_id
    if plo is not None and w.proto in ("tcp", "udp", "sctp") and not plo <= dport <= phi:
        dport = plo
    w.host.conntrack.bind_dnat(ct, dst, dport)
    return ACCEPT, (before, (dst, dport))


def snat(w: Work, t: R.Snat | R.Masquerade) -> tuple[int, NatNote]:
    """SNAT and MASQUERADE: the source address from the range (by the same hash as
    :func:`dnat`) or, for MASQUERADE, the host's choice; the source port a free one
    (:meth:`~.conntrack.ConntrackTable.bind_snat`). DROP when there is no address to
    masquerade to or no free port."""
    ct = w.ct
    if ct is None or ct.status & SRC_NAT_DONE:
        return ACCEPT, None
    host: Netfilter = w.host
    ports: tuple[int, int] | None = None
    if isinstance(t, R.Masquerade):
        src_addr = host.masq_source(w)
        if src_addr is None:
            return DROP, "no address to masquerade to"
        src = addr_int(src_addr)
        ports = t.ports
        random_fully = t.random_fully
    else:
        rng = t.ranges[0]
        if rng.addr_lo is None:
            src = w.src
        else:
            lo, hi = addr_int(rng.addr_lo), addr_int(rng.addr_hi or rng.addr_lo)
            if lo != hi:  # by source and (unless --persistent) destination
                src = lo + nat_hash(w.src, w.dst, t.persistent) % (hi - lo + 1)
            else:
                src = lo
        if rng.port_lo is not None:
            ports = (rng.port_lo, rng.port_hi or rng.port_lo)
        random_fully = t.random_fully
    before = (w.src, w.sport if w.proto != "icmp" else w.icmp_id)
    chooser = host.chooser
    rnd = chooser.rng if isinstance(chooser, RandomChooser) else None
    port = host.conntrack.bind_snat(
        ct, src, ports, random_fully=random_fully, random=t.random, rng=rnd
    )
    if port is None:
        return DROP, "no free source port"
    w.masq_seen = True
    return ACCEPT, (before, (src, port))


def nat_stage(host: Netfilter, hook: str, manip: str) -> Stage:
    """The nat stage of ``hook`` for manipulation ``manip`` (``"DST"`` or ``"SRC"``):
    the first packet of a connection runs the host's nat chains
    (:meth:`~.evaluate.Netfilter.nat_chains`, looked up on first use) until one takes a
    decision; every packet whose direction the connection's bindings concern is then
    rewritten."""
    done_bit = DST_NAT_DONE if manip == "DST" else SRC_NAT_DONE
    # which NAT status bit makes this hook rewrite, per direction (original, reply)
    need = (DST_NAT, SRC_NAT) if manip == "DST" else (SRC_NAT, DST_NAT)
    chains: list[Stage] | None = None

    def stage(w: Work, rec: RawTrace | None) -> int:
        nonlocal chains
        ct = w.ct
        if ct is None:
            return CONTINUE
        if w.ctbits & ST_RELATED:
            # an ICMP error about a connection: translated per the connection's
            # bindings, the nat chains never run for it and no decision is taken
            # (nf_nat_ipv4_fn -> nf_nat_icmp_reply_translation). The only other
            # RELATED packet here is REJECT's TCP reset, attached to the connection
            # it answers: rewritten like a reply (addresses and ports)
            if ct.status & need[w.ctdir]:
                if w.proto == "icmp" or w.proto == "ipv6-icmp":
                    translate_error(w, ct, manip, rec)
                else:
                    apply_binding(w, manip, rec)
            return CONTINUE
        if chains is None:
            chains = host.nat_chains(hook)
        if not ct.status & done_bit:
            if w.ctbits & ST_NEW:
                for ch in chains:
                    v = ch(w, rec)
                    if v in (DROP, REJECT):
                        return v
                    if ct.status & done_bit:
                        break
            ct.status |= done_bit
        elif rec is not None and chains:
            rec.append(("N", w.mark))
        if ct.status & need[w.ctdir]:
            apply_binding(w, manip, rec)
        return CONTINUE

    return stage


def apply_binding(w: Work, manip: str, rec: RawTrace | None) -> None:
    """Rewrite the packet from its connection's binding for ``manip``: the packet comes
    to look like the inverse of the other direction's tuple."""
    ct = w.ct
    assert ct is not None
    bit = SRC_NAT if manip == "SRC" else DST_NAT
    reply_dir = w.ctdir == REPLY
    if reply_dir:
        bit = DST_NAT if bit == SRC_NAT else SRC_NAT
    if not ct.status & bit:
        return
    other = ct.orig if reply_dir else ct.reply
    icmp = w.proto in ("icmp", "ipv6-icmp")
    if manip == "DST":
        before = (w.dst, w.icmp_id if icmp else w.dport)
        w.dst = other[1]
        if icmp:
            w.icmp_id = other[3]
        else:
            w.dport = other[3]
        after = (w.dst, w.icmp_id if icmp else w.dport)
    else:
        before = (w.src, w.icmp_id if icmp else w.sport)
        w.src = other[2]
        if icmp:
            w.icmp_id = other[4]
        else:
            w.sport = other[4]
        after = (w.src, w.icmp_id if icmp else w.sport)
    if rec is not None and before != after:
        rec.append(("R", manip, before, after, w.mark))


def translate_error(w: Work, ct: Connection, manip: str, rec: RawTrace | None) -> None:
    """NAT of an ICMP error RELATED to ``ct`` (``w.ctdir`` is the error's direction),
    as ``nf_nat_icmp_reply_translation`` does it: with ``t`` the connection's tuple of
    the other direction (the quoted packet's), the quoted packet gets the opposite
    manipulation towards ``t`` (DST hook: its source becomes ``t``'s source, SRC
    hook: its destination ``t``'s destination) and the outer header this hook's
    manipulation towards the inverse of ``t`` (DST: destination := ``t``.src; SRC:
    source := ``t``.dst — also when an intermediate router sent the error, whose
    source then shows the connection's address). The caller checked the status bit."""
    t = ct.orig if w.ctdir == REPLY else ct.reply
    inner: Packet | None = w.inner
    before = w.dst if manip == "DST" else w.src
    if inner is not None:
        query = inner.proto in ("icmp", "ipv6-icmp")
        if manip == "DST":
            w.inner = (
                inner.evolve(src=int_addr(t.src), icmp_id=t.sport)
                if query
                else inner.evolve(src=int_addr(t.src), sport=t.sport)
            )
        else:
            w.inner = (
                inner.evolve(dst=int_addr(t.dst), icmp_id=t.dport)
                if query
                else inner.evolve(dst=int_addr(t.dst), dport=t.dport)
            )
    if manip == "DST":
        w.dst = after = t.src
    else:
        w.src = after = t.dst
    if rec is not None:
        what = "destination" if manip == "DST" else "source"
        rec.append(
            TraceRecord(
                w.hook,
                "nat",
                "",
                0,
                "",
                f"ICMP error: rewrite {what} and the quoted packet",
                f"{int_addr(before)} -> {int_addr(after)}",
                w.ctname,
                w.mark,
            )
        )
