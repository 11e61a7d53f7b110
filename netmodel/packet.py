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


@dataclass(frozen=True, slots=True)
class Packet:
    """An IP packet. ``sport``/``dport`` are 0 for ICMP; for ICMP echo, ``icmp_id`` is the
    identifier conntrack uses in place of ports. ``flags`` holds TCP flags (``{"SYN"}``).
    ``inner`` is the offending packet's header carried by an ICMP error."""

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
