"""A router between two hosts, for comparing one nft ruleset's evaluation by the kernel
and by svclab, packet for packet.

:func:`router_lab` makes three namespaces: a *client* (10.77.1.2 on ``c0``), a *router*
(``r1`` 10.77.1.1/24 towards the client, ``r2`` 10.77.2.1/24 towards the server,
forwarding on) and a *server* (10.77.2.2 on ``s0``), and loads the ruleset into the router
with ``nft -f``. :meth:`RouterLab.exchange` sends UDP datagrams from the client to the
server one after the other; the server answers each (so the router forwards, in order,
request 1, reply 1, request 2, ...). The kernel's observations are read from the router:
each rule's ``counter`` (``nft -j list ruleset``) and the marks of its conntrack entries
(``conntrack -L``).

:func:`emulate` walks the same packets, in the same order, through svclab's engine
loaded with the same text, and returns what it observed the same way: how many packets
each rule matched (its trace records) and the marks of the connections it tracks. So a
test compares the two dictionaries. Nothing is sent outside these namespaces.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from ipaddress import ip_address

from dataplane.linux import netns as ns
from dataplane.netfilter.evaluate import Netfilter
from dataplane.netfilter.nft import NftEngine, parse_nft
from netmodel.packet import Packet

CLIENT, SERVER = "10.77.1.2", "10.77.2.2"
R1, R2 = "10.77.1.1", "10.77.2.1"

#: rule counters by (family table, chain, rule number from 1)
Counters = dict[tuple[str, str, int], int]


def run(name: str, *argv: str, input: str | None = None) -> str:
    return ns.run_in(name, list(argv), input=input).stdout


@dataclass
class RouterLab:
    client: str
    router: str
    server: str

    def load(self, ruleset: str) -> None:
        """Replace the router's nft ruleset (``nft -f``: the kernel checks it)."""
        run(self.router, "nft", "flush", "ruleset")
        run(self.router, "nft", "-f", "-", input=ruleset)
        run(self.router, "conntrack", "-F")

    def exchange(self, count: int, sport: int = 40000, dport: int = 5353) -> int:
        """Send ``count`` datagrams (each after the previous one's answer, or a timeout)
        and return how many answers came back."""
        echo = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.server,
                sys.executable,
                "-c",
                _ECHO,
                SERVER,
                str(dport),
                str(count),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert echo.stdout is not None
            echo.stdout.readline()  # "ready": bound before the first datagram
            out = run(
                self.client,
                sys.executable,
                "-c",
                _SEND,
                SERVER,
                str(dport),
                str(sport),
                str(count),
            )
        finally:
            echo.kill()
            echo.wait(timeout=10)
        return int(out.strip())

    def counters(self) -> Counters:
        """Each rule's counter (rules without ``counter`` are left out)."""
        data = json.loads(run(self.router, "nft", "-j", "list", "ruleset"))
        out: Counters = {}
        seen: Counter[tuple[str, str]] = Counter()
        for item in data["nftables"]:
            rule = item.get("rule")
            if rule is None:
                continue
            key = (f"{rule['family']} {rule['table']}", rule["chain"])
            seen[key] += 1
            for e in rule["expr"]:
                if "counter" in e:
                    out[(*key, seen[key])] = int(e["counter"]["packets"])
        return out

    def conntrack_marks(self) -> list[int]:
        """The marks of the router's conntrack entries for the exchange's flow."""
        text = run(self.router, "conntrack", "-L", "-p", "udp", "-s", CLIENT)
        marks = []
        for line in text.splitlines():
            for word in line.split():
                if word.startswith("mark="):
                    marks.append(int(word[5:]))
        return marks


_ECHO = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[1], int(sys.argv[2])))
    print("ready", flush=True)
    for _ in range(int(sys.argv[3])):
        data, peer = s.recvfrom(100)
        s.sendto(data, peer)
    """
)

_SEND = textwrap.dedent(
    """
    import socket, sys
    dst, dport, sport, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", sport))
    s.settimeout(1.0)
    got = 0
    for i in range(count):
        s.sendto(b"x", (dst, dport))
        try:
            s.recvfrom(100)
            got += 1
        except TimeoutError:
            pass
    print(got)
    """
)


@contextmanager
def router_lab() -> Iterator[RouterLab]:
    """The three namespaces (removed on exit, also on failure)."""
    names = [ns.unique_name(r) for r in ("nmc", "nmr", "nms")]
    client, router, server = names
    try:
        for n in names:
            ns.create(n)
        for here, there, a, b in ((client, "c0", "r1", "1"), (server, "s0", "r2", "2")):
            run(router, "ip", "link", "add", a, "type", "veth", "peer", "name", there)
            run(router, "ip", "link", "set", there, "netns", here)
            run(router, "ip", "addr", "add", f"10.77.{b}.1/24", "dev", a)
            run(router, "ip", "link", "set", a, "up")
            run(here, "ip", "addr", "add", f"10.77.{b}.2/24", "dev", there)
            run(here, "ip", "link", "set", there, "up")
            run(here, "ip", "route", "add", "default", "via", f"10.77.{b}.1")
        run(router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        yield RouterLab(client, router, server)
    finally:
        for n in names:
            ns.remove(n)


def _route(p: Packet) -> str | None:
    d = str(p.dst)
    if d in (R1, R2):
        return None
    return "r2" if d.startswith("10.77.2.") else "r1"


def emulate(
    ruleset: str, count: int, sport: int = 40000, dport: int = 5353
) -> tuple[Counters, list[int], int]:
    """svclab's evaluation of the same exchange: rule hits, conntrack marks, answers."""
    nf = Netfilter(
        nft=NftEngine(parse_nft(ruleset, source="ruleset")),
        local_addrs=[ip_address(R1), ip_address(R2)],
        iface_addrs={"r1": [ip_address(R1)], "r2": [ip_address(R2)]},
    )
    hits: Counters = {}
    got = 0
    for _ in range(count):
        req = Packet.make(CLIENT, SERVER, "udp", sport, dport, length=29)
        t = nf.traverse(req, origin="in", in_iface="r1", route=_route)
        _count(hits, t.records)
        if t.verdict != "ACCEPT" or t.delivery != "forward":
            continue
        rep = Packet.make(SERVER, CLIENT, "udp", dport, sport, length=29)
        t = nf.traverse(rep, origin="in", in_iface="r2", route=_route)
        _count(hits, t.records)
        if t.verdict == "ACCEPT" and t.delivery == "forward":
            got += 1
    marks = [c.mark for c in nf.conntrack.entries() if c.orig[0] == "udp"]
    return hits, marks, got


def _count(hits: Counters, records: object) -> None:
    for r in records:  # type: ignore[attr-defined]
        if r.table.startswith("nft:") and r.rule >= 1:
            key = (r.table[4:], r.chain, r.rule)
            hits[key] = hits.get(key, 0) + 1
