"""Packets as immutable values. A NATed packet is a new packet (``dataclasses.replace``).

A :class:`Packet` is the L3/L4 header a netfilter rule or a route looks at, plus the
skb metadata that travels with it inside one host (``mark``). Link-layer and
encapsulation headers live in :class:`Frame` / :class:`VxlanEncap`, which wrap it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from ipaddress import ip_address
from typing import Literal

from netmodel.ip import IPAddress

Proto = Literal["tcp", "udp", "icmp", "sctp"]

PROTO_NUMBERS: dict[str, int] = {"icmp": 1, "tcp": 6, "udp": 17, "sctp": 132}

# TCP flag names as iptables spells them
TCP_FLAGS = ("FIN", "SYN", "RST", "PSH", "ACK", "URG")

ICMP_ECHO_REPLY = 0
ICMP_DEST_UNREACH = 3
ICMP_ECHO_REQUEST = 8
ICMP_TIME_EXCEEDED = 11
# codes of ICMP_DEST_UNREACH
ICMP_NET_UNREACH = 0
ICMP_HOST_UNREACH = 1
ICMP_PORT_UNREACH = 3
ICMP_FRAG_NEEDED = 4
ICMP_ADMIN_PROHIBITED = 13


@dataclass(frozen=True, slots=True, init=False)
class Packet:
    """An IP packet. ``sport``/``dport`` are 0 for ICMP; for ICMP echo, ``icmp_id`` is the
    identifier conntrack uses in place of ports. ``flags`` holds TCP flags (``{"SYN"}``),
    or an SCTP packet's chunk (``{"INIT"}``). ``inner`` is the offending packet's header carried by an ICMP error."""

    src: IPAddress
    dst: IPAddress
    proto: Proto = "tcp"
    sport: int = 0
    dport: int = 0
    ttl: int = 64
    length: int = 60
    flags: frozenset[str] = frozenset()
    icmp_type: int | None = None
    icmp_code: int | None = None
    icmp_id: int = 0
    payload: bytes = b""
    mark: int = 0
    inner: Packet | None = None
    df: bool = True

    def __init__(
        self,
        src: IPAddress,
        dst: IPAddress,
        proto: Proto = "tcp",
        sport: int = 0,
        dport: int = 0,
        ttl: int = 64,
        length: int = 60,
        flags: frozenset[str] = frozenset(),
        icmp_type: int | None = None,
        icmp_code: int | None = None,
        icmp_id: int = 0,
        payload: bytes = b"",
        mark: int = 0,
        inner: Packet | None = None,
        df: bool = True,
    ) -> None:
        # What the generated __init__ does, written out: a frozen dataclass's own
        # __init__ stores each field through object.__setattr__, which costs twice as
        # much as the slot's descriptor doing the same store (the emulator builds about
        # ten packets per connection). Every field, in order, with the same defaults (a
        # test checks it against the dataclass fields).
        _set_src(self, src)
        _set_dst(self, dst)
        _set_proto(self, proto)
        _set_sport(self, sport)
        _set_dport(self, dport)
        _set_ttl(self, ttl)
        _set_length(self, length)
        _set_flags(self, flags)
        _set_icmp_type(self, icmp_type)
        _set_icmp_code(self, icmp_code)
        _set_icmp_id(self, icmp_id)
        _set_payload(self, payload)
        _set_mark(self, mark)
        _set_inner(self, inner)
        _set_df(self, df)

    def __hash__(self) -> int:
        # The dataclass's own hash hashes the address objects, and an ip_address's
        # __hash__ is Python code that formats the address as hex text: the flow cache
        # hashes a packet per send. Equal packets have equal address integers (``_ip``,
        # what ip_address equality compares), so hashing those keeps hash and equality
        # consistent at a third of the cost. Equal packets have equal fields, so a hash
        # of some of them is consistent too: the ones that tell a flow's packets apart
        # (packets that differ only in the others share a hash, and equality decides).
        return hash(
            (
                self.src._ip,  # type: ignore[union-attr]
                self.dst._ip,  # type: ignore[union-attr]
                self.sport,
                self.dport,
                self.length,
                self.flags,
                self.icmp_id,
            )
        )

    @staticmethod
    def make(
        src: str | IPAddress,
        dst: str | IPAddress,
        proto: Proto = "tcp",
        sport: int = 0,
        dport: int = 0,
        **kw: object,
    ) -> Packet:
        """Convenience constructor parsing the addresses."""
        return Packet(
            src=ip_address(str(src)),
            dst=ip_address(str(dst)),
            proto=proto,
            sport=sport,
            dport=dport,
            **kw,  # type: ignore[arg-type]
        )

    def evolve(self, **changes: object) -> Packet:
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def proto_number(self) -> int:
        return PROTO_NUMBERS[self.proto]

    def reversed(self) -> Packet:
        """The header of an answer: addresses and ports swapped (mark cleared)."""
        return replace(self, src=self.dst, dst=self.src, sport=self.dport, dport=self.sport, mark=0)

    def summary(self) -> str:
        if self.proto == "icmp":
            kind = {0: "echo-reply", 3: "dest-unreach", 8: "echo-request", 11: "time-exceeded"}
            t = kind.get(self.icmp_type or 0, f"type {self.icmp_type}")
            return f"icmp {self.src} > {self.dst} {t} id={self.icmp_id} ttl={self.ttl}"
        fl = ("[" + ",".join(sorted(self.flags)) + "]") if self.flags else ""
        return f"{self.proto} {self.src}:{self.sport} > {self.dst}:{self.dport} {fl}".rstrip()


# The slot descriptors' stores, for Packet.__init__ (bypassing the frozen __setattr__ as
# the generated __init__ does, only faster).
_set_src = Packet.__dict__["src"].__set__
_set_dst = Packet.__dict__["dst"].__set__
_set_proto = Packet.__dict__["proto"].__set__
_set_sport = Packet.__dict__["sport"].__set__
_set_dport = Packet.__dict__["dport"].__set__
_set_ttl = Packet.__dict__["ttl"].__set__
_set_length = Packet.__dict__["length"].__set__
_set_flags = Packet.__dict__["flags"].__set__
_set_icmp_type = Packet.__dict__["icmp_type"].__set__
_set_icmp_code = Packet.__dict__["icmp_code"].__set__
_set_icmp_id = Packet.__dict__["icmp_id"].__set__
_set_payload = Packet.__dict__["payload"].__set__
_set_mark = Packet.__dict__["mark"].__set__
_set_inner = Packet.__dict__["inner"].__set__
_set_df = Packet.__dict__["df"].__set__


@dataclass(frozen=True, slots=True)
class VxlanEncap:
    """The outer headers VXLAN adds: underlay addresses, UDP 8472 (flannel), VNI."""

    outer_src: IPAddress
    outer_dst: IPAddress
    vni: int = 1
    udp_sport: int = 0
    udp_dport: int = 8472
    inner_src_mac: str = ""
    inner_dst_mac: str = ""


@dataclass(frozen=True, slots=True)
class Frame:
    """An Ethernet frame carrying a packet (``arp`` for ARP requests/replies)."""

    src_mac: str
    dst_mac: str
    packet: Packet | None = None
    arp: tuple[str, str, str] | None = None  # (op, sender ip, target ip)
    encap: VxlanEncap | None = field(default=None)
