"""pcap export: every frame of a trace, VXLAN as real VXLAN over UDP 8472."""

from __future__ import annotations

from pathlib import Path

from emu_helpers import EXT, N1, N2, A, C, both, cluster
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.layers.vxlan import VXLAN
from scapy.utils import rdpcap


def test_pcap_holds_arp_and_vxlan_encapsulated_frames(tmp_path: Path) -> None:
    c = cluster()
    t = c.trace("pod/default/a", "pod/default/c", "tcp", 8080)
    path = tmp_path / "t.pcap"
    n = c.pcap(t, path)
    frames = rdpcap(str(path))
    assert len(frames) == n
    wire = [h for tr in (t, t.reply) if tr for h in tr.hops if h.frame is not None]
    assert n == len(wire)
    arps = [f for f in frames if f.haslayer(ARP)]
    assert [a[ARP].op for a in arps][:2] == [1, 2]  # who-has, is-at
    vx = [f for f in frames if f.haslayer(UDP) and f[UDP].dport == 8472]
    assert len(vx) == 4  # n1 eth0 and router u1 for the SYN, the same back for the SYN-ACK
    first = vx[0]
    assert (first[IP].src, first[IP].dst) == (N1, N2)
    inner = VXLAN(bytes(first[UDP].payload))
    assert inner.vni == 1
    assert inner.haslayer(Ether) and inner.haslayer(TCP)
    assert (inner[IP].src, inner[IP].dst, inner[TCP].dport) == (A, C, 8080)
    assert inner[TCP].flags == "S" and inner[IP].ttl == 63
    plain = [f for f in frames if f.haslayer(TCP) and not f.haslayer(UDP)]
    assert plain[0][IP].ttl == 64 and plain[0][IP].flags == "DF"
    assert plain[0][IP].len == 60


def test_pcap_frag_needed_carries_the_next_hop_mtu(tmp_path: Path) -> None:
    c = cluster(both())
    t = c.trace(EXT, f"{N1}:30080", "tcp", length=1500)
    path = tmp_path / "f.pcap"
    c.pcap(t, path)
    errors = [f for f in rdpcap(str(path)) if f.haslayer(ICMP) and f[ICMP].type == 3]
    assert errors
    assert errors[0][ICMP].code == 4 and errors[0][ICMP].nexthopmtu == 1450
    assert errors[-1][IP].dst == EXT


def test_syn_and_syn_ack_carry_options_and_no_payload(tmp_path: Path) -> None:
    """A SYN is 60 bytes on the wire as Linux sends it: a 40-byte TCP header (20 bytes
    of options) and no payload; the SYN-ACK (40 bytes in the emulator) has neither; scapy
    reads every length back consistent."""
    c = cluster()
    t = c.trace("pod/default/a", "pod/default/c", "tcp", 8080)
    path = tmp_path / "syn.pcap"
    c.pcap(t, path)
    syns = [
        f for f in rdpcap(str(path)) if f.haslayer(TCP) and not f.haslayer(UDP) and f[TCP].flags.S
    ]
    assert {str(f[TCP].flags) for f in syns} == {"S", "SA"}
    for f in syns:
        tcp = f[TCP]
        if str(tcp.flags) == "S":
            assert f[IP].len == 60 and tcp.dataofs * 4 == 40
            options = [name for name, _ in tcp.options]
            assert options == ["MSS", "SAckOK", "Timestamp", "NOP", "WScale"]
        assert bytes(tcp.payload) == b""
        assert f[IP].len == f[IP].ihl * 4 + tcp.dataofs * 4
