"""Write a trace's frames to a pcap file (Ethernet link type) with scapy.

Every frame the trace saw on a link is written once, in order: ARP requests and
replies, and every IP frame as it left a device. Packets become
``Ether/IP/TCP|UDP|ICMP`` with the header fields the emulator tracks (addresses, ports,
TTL, DF, TCP flags, ICMP type/code/id, ICMP errors quoting the offending header, the
next-hop MTU of "fragmentation needed"), padded to the packet's IP length; a SYN or
SYN-ACK carries Linux's 20 bytes of TCP options (:data:`SYN_OPTIONS`), not payload. Frames a
VXLAN device encapsulated are written as real VXLAN: outer ``Ether/IP/UDP(dport 8472)/
VXLAN(vni)`` around the inner Ethernet frame, so Wireshark decodes them (flannel's port
8472 needs "Decode As VXLAN" in Wireshark; 4789 is its default).

Timestamps start at ``start`` and advance one microsecond per frame.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dataplane.emulator.trace import Hop, Trace
from netmodel.packet import Frame, Packet

_IP_HEADER = 20
_L4_HEADER = {"tcp": 20, "udp": 8, "icmp": 8}

#: the options Linux puts on a SYN and a SYN-ACK (20 bytes, in its order: MSS, SACK
#: permitted, timestamps, NOP, window scale): the emulator's SYNs are 60 bytes long,
#: a 40-byte TCP header and no payload, as Linux sends them (MSS for a 1500-byte MTU)
SYN_OPTIONS: list[tuple[str, Any]] = [
    ("MSS", 1460),
    ("SAckOK", b""),
    ("Timestamp", (0, 0)),
    ("NOP", None),
    ("WScale", 7),
]
_SYN_OPTIONS_LEN = 20


def frames(trace: Trace) -> Iterator[tuple[Hop, int | None]]:
    """The hops of ``trace`` and its reply that carry a frame, each with the next-hop MTU
    to report when its packet is a "fragmentation needed" error."""
    mtu: int | None = None
    for t in _chain(trace):
        for h in t.hops:
            if h.kind == "icmp" and h.note and h.note.startswith("next-hop MTU"):
                mtu = int(h.note.rsplit(" ", 1)[1])
            if h.frame is not None:
                yield h, mtu


def _chain(trace: Trace) -> Iterator[Trace]:
    t: Trace | None = trace
    while t is not None:
        yield t
        t = t.reply


def write_pcap(trace: Trace, path: str | Path, *, start: float = 0.0) -> int:
    """Write the frames of ``trace`` (and its reply) to ``path``; returns how many."""
    from scapy.utils import wrpcap

    out: list[Any] = []
    for i, (hop, mtu) in enumerate(frames(trace)):
        assert hop.frame is not None
        pkt = to_scapy(hop.frame, hop.packet, mtu)
        pkt.time = start + i * 1e-6
        out.append(pkt)
    wrpcap(str(path), out, linktype=1)
    return len(out)


def to_scapy(frame: Frame, outer: Packet | None = None, mtu: int | None = None) -> Any:
    """One frame as a scapy packet. ``outer`` is the outer IP packet of a VXLAN frame
    (for its TTL); ``mtu`` the next-hop MTU of a fragmentation-needed error."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import ARP, Ether
    from scapy.layers.vxlan import VXLAN

    eth = Ether(src=frame.src_mac, dst=frame.dst_mac)
    if frame.arp is not None:
        op, sender, target = frame.arp
        if op == "who-has":
            return eth / ARP(
                op=1, hwsrc=frame.src_mac, psrc=sender, hwdst="00:00:00:00:00:00", pdst=target
            )
        return eth / ARP(op=2, hwsrc=frame.src_mac, psrc=sender, hwdst=frame.dst_mac, pdst=target)
    assert frame.packet is not None
    inner = ip_layers(frame.packet, mtu)
    if frame.encap is None:
        return eth / inner
    e = frame.encap
    ttl = outer.ttl if outer is not None else 64
    return (
        eth
        / IP(src=str(e.outer_src), dst=str(e.outer_dst), ttl=ttl, proto=17)
        / UDP(sport=e.udp_sport, dport=e.udp_dport)
        / VXLAN(vni=e.vni, flags=0x08)
        / Ether(src=e.inner_src_mac, dst=e.inner_dst_mac)
        / inner
    )


def ip_layers(p: Packet, mtu: int | None = None, *, pad: bool = True) -> Any:
    """``IP/TCP|UDP|ICMP`` for a packet, padded with zeros to ``p.length``."""
    from scapy.layers.inet import ICMP, IP, TCP, UDP
    from scapy.packet import Raw

    ip = IP(src=str(p.src), dst=str(p.dst), ttl=p.ttl, flags="DF" if p.df else 0)
    if not pad:
        ip.len = p.length
    l4: Any
    if p.proto == "tcp":
        flags = "".join(
            f
            for f, n in (
                ("F", "FIN"),
                ("S", "SYN"),
                ("R", "RST"),
                ("P", "PSH"),
                ("A", "ACK"),
                ("U", "URG"),
            )
            if n in p.flags
        )
        l4 = TCP(sport=p.sport, dport=p.dport, flags=flags, window=64240)
        if "SYN" in p.flags and p.length >= _IP_HEADER + 20 + _SYN_OPTIONS_LEN:
            l4.options = SYN_OPTIONS
    elif p.proto == "udp":
        l4 = UDP(sport=p.sport, dport=p.dport)
    elif p.proto == "icmp":
        fields: dict[str, Any] = {"type": p.icmp_type or 0, "code": p.icmp_code or 0}
        if p.icmp_type in (0, 8):
            fields["id"] = p.icmp_id
        elif p.icmp_type == 3 and p.icmp_code == 4 and mtu is not None:
            fields["nexthopmtu"] = mtu
        l4 = ICMP(**fields)
        if p.inner is not None:
            quoted = ip_layers(p.inner, pad=False)
            raw = bytes(quoted)[: _IP_HEADER + 8]
            return ip / l4 / Raw(raw)
    else:
        l4 = Raw(b"")
    pkt = ip / l4
    if pad:
        have = len(bytes(pkt)) if p.proto == "tcp" else _IP_HEADER + _L4_HEADER.get(p.proto, 0)
        if p.length > have:
            pkt = pkt / Raw(b"\x00" * (p.length - have))
    return pkt
