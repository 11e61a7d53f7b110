"""Conntrack zones against the kernel: the same UDP packets, sent in a fresh namespace
over lo with ``CT`` rules in the raw table, make the same ``conntrack -L`` entries in the
kernel and in svclab (zones kept apart, ``zone=``, ``zone-orig=``, ``zone-reply=``)."""

from __future__ import annotations

import re
import sys
from ipaddress import ip_address

import pytest

from dataplane.linux import netns as ns
from dataplane.linux.netns import run_in
from dataplane.netfilter import Netfilter, SimClock, format_conntrack_l, parse_save
from netmodel.packet import Packet

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not ns.is_root(), reason="needs root"),
]

RULES = """*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A OUTPUT -p udp --dport 4444 -j CT --zone 7
-A OUTPUT -p udp --dport 1111 -j CT --zone-orig 9
-A OUTPUT -p udp --dport 2222 -j CT --zone-reply 5
-A OUTPUT -p udp --dport 3333 -j CT --zone mark
COMMIT
"""

# (source port, destination port, socket mark): two sockets share 45000 -> 3333 with
# different marks, hence zones 1 and 2 for one tuple; mark 0 is zone 0
SENDS = [
    (41000, 4444, 0),
    (42000, 1111, 0),
    (43000, 2222, 0),
    (45000, 3333, 1),
    (45000, 3333, 2),
    (45000, 3333, 0),
]

SENDER = r"""
import socket, sys
for spec in sys.argv[1:]:
    sport, dport, mark = map(int, spec.split(":"))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
    s.bind(("127.0.0.1", sport))
    s.sendto(b"x", ("127.0.0.1", dport))
    s.close()
"""

_TIMEOUT = re.compile(r"^(\S+\s+\d+) \d+ ")


def _normal(text: str) -> list[str]:
    """Entries without their remaining timeout, sorted."""
    return sorted(_TIMEOUT.sub(r"\1 T ", ln) for ln in text.splitlines() if ln.strip())


def svclab_entries() -> str:
    nf = Netfilter(parse_save(RULES), local_addrs=[ip_address("127.0.0.1")], clock=SimClock())
    for sport, dport, mark in SENDS:
        p = Packet.make("127.0.0.1", "127.0.0.1", "udp", sport, dport, mark=mark)
        nf.traverse(p, origin="out")
    return format_conntrack_l(nf.conntrack)


def test_conntrack_zones_agree_with_the_kernel() -> None:
    with ns.temporary("cz") as name:
        run_in(name, ["ip", "link", "set", "lo", "up"])
        run_in(name, ["iptables-nft-restore"], input=RULES)
        try:
            run_in(name, [sys.executable, "-c", SENDER, *(f"{a}:{b}:{m}" for a, b, m in SENDS)])
            kernel = run_in(name, ["conntrack", "-L"]).stdout
        finally:
            run_in(name, ["iptables-nft", "-t", "raw", "-F"], check=False)
    want = _normal(kernel)
    assert len(want) == 6, kernel
    assert sum(" zone=1 " in ln or " zone=2 " in ln for ln in want) == 2, kernel
    assert _normal(svclab_entries()) == want
