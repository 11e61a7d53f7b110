"""``meta nftrace set`` against the kernel: the kernel loads the rule as people add it
when they debug (a prerouting chain at priority -301), it changes no verdict (every rule
counter and every answer agree with svclab's evaluation of the same ruleset, over a real
UDP exchange through a router namespace: :mod:`tests.kernel.nftlab`), and the rules
``nft monitor trace`` reports for each traced packet are, in order and with their
verdicts, the nft rules svclab's trace walks for it."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from ipaddress import ip_address

import pytest

from dataplane.linux import netns as ns
from dataplane.netfilter.evaluate import Netfilter
from dataplane.netfilter.nft import NftEngine, parse_nft
from netmodel.packet import Packet
from tests.kernel.nftlab import CLIENT, R1, R2, SERVER, RouterLab, emulate, router_lab

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not ns.is_root(), reason="needs root"),
]

RULESET = """table ip trace {
    chain trace_chain {
        type filter hook prerouting priority -301; policy accept;
        meta nftrace set 1
    }
}
table ip t {
    chain filt {
        type filter hook forward priority filter; policy accept;
        udp dport 5353 counter
        meta mark set 0x10 jump sub
        ip saddr 10.77.2.2 counter drop
    }
    chain sub {
        ip saddr 10.77.2.2 udp sport 5353 counter accept
        meta nftrace set 0
    }
    chain post {
        type filter hook postrouting priority srcnat; policy accept;
        counter
    }
}
"""

# "trace id ID FAMILY TABLE CHAIN rule TEXT (verdict V)" or "... policy P [meta mark M]"
_EVENT = re.compile(r"trace id (\w+) (\w+ \S+) (\S+) (?:rule .* \(verdict ([^)]+)\)|policy (\w+))")


@pytest.fixture(scope="module")
def lab() -> Iterator[RouterLab]:
    with router_lab() as lab:
        yield lab


def test_nftrace_set_changes_no_verdict(lab: RouterLab) -> None:
    lab.load(RULESET)
    answered = lab.exchange(3)
    kernel = lab.counters()
    hits, _marks, got = emulate(RULESET, 3)
    assert ({k: hits.get(k, 0) for k in kernel}, got) == (kernel, answered)
    assert answered == 3 and kernel[("ip t", "post", 1)] == 6


def test_nft_monitor_trace_walks_the_rules_svclab_walks(lab: RouterLab) -> None:
    lab.load(RULESET)
    monitor = subprocess.Popen(
        # (line-buffered: a terminated nft loses what its stdio buffer holds)
        ["ip", "netns", "exec", lab.router, "stdbuf", "-oL", "nft", "monitor", "trace"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)  # subscribed before the first packet
        assert lab.exchange(1) == 1
        time.sleep(0.3)
    finally:
        monitor.terminate()
        out, _ = monitor.communicate(timeout=10)
    kernel: dict[str, list[tuple[str, str, str]]] = {}
    for line in out.splitlines():
        m = _EVENT.match(line.strip())
        if m:
            tid, table, chain, verdict, policy = m.groups()
            event = (table, chain, f"rule {verdict}" if verdict else f"policy {policy}")
            kernel.setdefault(tid, []).append(event)
    assert list(kernel.values()) == svclab_trace(RULESET)


def svclab_trace(ruleset: str) -> list[list[tuple[str, str, str]]]:
    """svclab's records of the request and its reply, as ``nft monitor trace`` reports
    them: every nft rule that matched (a rule without verdict: ``continue``) and each
    base chain's policy, from the rule that set the trace flag on, up to one that
    cleared it (which is not reported)."""
    nf = Netfilter(
        nft=NftEngine(parse_nft(ruleset, source="ruleset")),
        local_addrs=[ip_address(R1), ip_address(R2)],
    )
    out = []
    for src, dst, sport, dport, iif in (
        (CLIENT, SERVER, 40000, 5353, "r1"),
        (SERVER, CLIENT, 5353, 40000, "r2"),
    ):
        t = nf.traverse(
            Packet.make(src, dst, "udp", sport, dport),
            in_iface=iif,
            route=lambda p: "r2" if str(p.dst).startswith("10.77.2.") else "r1",
        )
        events = []
        tracing = False
        for r in t.records:
            if not r.table.startswith("nft:"):
                continue
            tracing = (tracing or r.effect == "nftrace set 1") and r.effect != "nftrace set 0"
            if not tracing or (r.rule == 0 and r.effect == "return"):
                continue  # (the kernel reports no implicit return, nor an untraced rule)
            if r.rule == 0:
                events.append((r.table[4:], r.chain, r.effect))
            else:
                verdict = r.effect if r.effect.split(" ")[0] in _VERDICTS else "continue"
                events.append((r.table[4:], r.chain, f"rule {verdict}"))
        out.append(events)
    return out


_VERDICTS = ("accept", "drop", "jump", "goto", "return", "reject", "continue")
