"""What the packet walk needs from netfilter, as a narrow protocol.

The walk calls :meth:`PacketFilter.run` at each of the five IPv4 hooks with the packet,
the devices involved and the packet's per-namespace :class:`Skb` state (its conntrack
attachment, which the filter reads and writes). The filter answers with a
:class:`HookOutcome`: the verdict, the packet after the hook (NAT, mark), and the trace
steps it wants shown. :mod:`dataplane.emulator.filters` implements the protocol over
:mod:`dataplane.netfilter`.

Contract of ``run``:

* ``hook`` is ``PREROUTING``, ``INPUT``, ``FORWARD``, ``OUTPUT`` or ``POSTROUTING``;
  ``indev``/``outdev`` are the ``-i``/``-o`` names (for bridged frames under
  br_netfilter: the bridge).
* ``physin``/``physout`` are the bridge ports of a packet br_netfilter handles
  (``-m physdev``): the ingress port from the bridge's PREROUTING on (also in INPUT or
  FORWARD when the frame went up to the IP layer), the egress port in the bridge's
  FORWARD and POSTROUTING. Both None: the packet never crossed a bridge port.
* The first hook a packet meets in a namespace (PREROUTING or OUTPUT) attaches its
  conntrack state to ``skb``; the last one (INPUT or POSTROUTING) confirms a new entry.
  A packet crossing into another namespace gets a fresh :class:`Skb`.
* Replies and ICMP errors about tracked connections are un-NATed through the
  connection's bindings; packets of known connections skip the ``nat`` table.
* ``verdict`` is ``ACCEPT``, ``DROP`` or ``REJECT`` (``reject_with`` then names the
  answer: ``icmp-port-unreachable``, ``tcp-reset``, ...), or ``STOLEN`` in INPUT: IPVS
  took the (rewritten) packet to send it to a remote real server itself — the walk
  routes it, checks and decrements its TTL, and passes it through OUTPUT and
  POSTROUTING.
* ``record`` False asks for no trace steps (the fast path of benchmarks).
* ``log``, when given, receives one :class:`ReplayStep` for the hook that attached the
  conntrack state, if the packet belongs to an existing connection whose later packets
  the flow cache may replay (see :mod:`dataplane.emulator.flowcache`); otherwise it
  receives ``None``, which marks the flow as not replayable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from dataplane.emulator.trace import Hop
from dataplane.netfilter.conntrack import Connection, ConntrackTable, CtTuple
from netmodel.packet import Packet

HookName = Literal["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]
FilterVerdict = Literal["ACCEPT", "DROP", "REJECT", "STOLEN"]


class Tunnel(NamedTuple):
    """The inner Ethernet frame an outer VXLAN packet carries, with its VNI."""

    src_mac: str
    dst_mac: str
    packet: Packet
    vni: int


@dataclass(slots=True)
class Skb:
    """Per-namespace metadata of one packet in flight.

    ``ct`` is the filter's conntrack attachment (opaque to the walk); ``tunnel`` is the
    inner Ethernet frame an outer VXLAN packet carries; ``bridged`` says br_netfilter has
    already run PREROUTING for it (so the IP layer must not run it again); ``related`` is
    the attachment of the packet a kernel-generated error answers (``nf_ct_attach``): the
    error is RELATED to that connection even before it is confirmed; ``physin`` is the
    bridge port the frame entered through under br_netfilter (``-m physdev``)."""

    ct: object | None = None
    tunnel: Tunnel | None = None
    bridged: bool = False
    related: object | None = None
    physin: str | None = None


class HookOutcome(NamedTuple):
    """The result of one hook (see the module docstring). A named tuple: one is made per
    hook call, on the hot path."""

    verdict: FilterVerdict
    packet: Packet
    hops: Sequence[Hop] = ()
    reject_with: str | None = None
    chosen_by: str | None = None


@dataclass(frozen=True, slots=True)
class ReplayStep:
    """One namespace's conntrack step of a recorded flow: the table, the tuple looked
    up, the connection and direction found, the ctstate it gave and the TCP state the
    connection had before this packet updated it."""

    table: ConntrackTable
    tuple: CtTuple
    conn: Connection
    direction: int
    state: str
    tcp_before: str | None


class PacketFilter(Protocol):
    """Netfilter for one namespace: its ruleset, conntrack table and LOCAL addresses."""

    @property
    def conntrack(self) -> ConntrackTable:
        """The namespace's conntrack table."""
        ...

    def run(
        self,
        hook: HookName,
        pkt: Packet,
        indev: str | None,
        outdev: str | None,
        skb: Skb,
        *,
        record: bool,
        log: list[ReplayStep | None] | None = None,
        physin: str | None = None,
        physout: str | None = None,
        hops_wanted: bool = True,
    ) -> HookOutcome:
        """Run ``hook`` for ``pkt`` (see the module docstring); with ``record`` but not
        ``hops_wanted`` only ``chosen_by`` is found (no hops built)."""
        ...

    def quick(
        self,
        hook: HookName,
        pkt: Packet,
        indev: str | None,
        outdev: str | None,
        skb: Skb,
        physin: str | None,
        physout: str | None,
    ) -> tuple[Packet | None, FilterVerdict, str | None]:
        """``run`` with ``record`` False and no ``log`` (the walk's fast path, same
        effects): the packet after the hook (None when it did not survive: DROP or
        REJECT), the verdict and ``reject_with``."""
        ...
