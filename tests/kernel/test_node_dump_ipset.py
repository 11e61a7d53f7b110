"""The ipset part of a real IPVS node (tests/data/node-dumps/kube-proxy-ipvs-minikube-ipset)
against the kernel. This kernel has no IPVS, so the virtual servers cannot be compared;
what can is which packets kube-proxy's ``-m set --match-set KUBE-CLUSTER-IP dst,dst``
rule accepts. The node is built in namespaces (:mod:`tests.kernel.nodeshape`: the real
``ipset -L`` listing restored, the ``iptables -S`` listing replayed), new connections are
sent on docker0, and the rule's packet counter is read back with ``iptables-nft-save
-c``; svclab's trace must show the rule accepting exactly the same flows.

The namespace gets one rule the dump does not hold: ``ct state new`` with no verdict in
a table of its own. The kernel turns connection tracking on in a namespace only when a
rule needs it, and the nat table is walked only by tracked packets; the real node's
other rules (kube-proxy's MASQUERADE, Docker's), which the write-up did not print, had
it on, and svclab, like every real node, tracks connections."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from dataplane.linux.netns import is_root
from tests.kernel.nodeshape import kernel_outcomes, run, shaped_node

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

DUMP = (
    Path(__file__).resolve().parents[1] / "data" / "node-dumps" / "kube-proxy-ipvs-minikube-ipset"
)
RULE = "-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT"
CONNTRACK_ON = """\
table ip svclab-test-ct {
\tchain pre {
\t\ttype filter hook prerouting priority -300; policy accept;
\t\tct state new
\t}
}
"""
FLOWS = [
    ("10.108.218.82", 80, "tcp", True),  # web-svc-cip: in the set
    ("10.108.218.82", 81, "tcp", False),  # same address, a port the set does not hold
    ("10.96.0.10", 53, "udp", True),  # kube-dns over UDP: in the set
    ("10.96.0.10", 53, "tcp", True),  # and over TCP
    ("10.96.0.1", 53, "udp", False),  # the kubernetes Service's address, another port
]


def _rule_packets(node: str) -> int:
    for line in run(node, "iptables-nft-save", "-c", "-t", "nat").splitlines():
        m = re.match(r"\[(\d+):\d+\] (.*)$", line)
        if m and m.group(2) == RULE:
            return int(m.group(1))
    raise AssertionError(f"{RULE!r} not in the namespace's rules")


def _svclab_accepts(dst: str, port: int, proto: str) -> bool:
    argv = ["trace", "--node-dump", str(DUMP), "--from", "172.17.0.7"]
    r = CliRunner().invoke(cli, [*argv, "--to", f"{dst}:{port}", "--proto", proto, "-o", "json"])
    assert r.exit_code == 0, r.output
    hops = json.loads(r.output)["hops"]
    return any(h["text"] == RULE and h["effect"] == "ACCEPT" for h in hops)


@pytest.mark.parametrize(("dst", "port", "proto", "member"), FLOWS)
def test_ipset_rule_matches_the_flows_the_kernel_matches(
    dst: str, port: int, proto: str, member: bool
) -> None:
    with shaped_node(DUMP) as shaped:
        run(shaped.node, "nft", "-f", "-", input=CONNTRACK_ON)
        run(shaped.node, "iptables-nft", "-t", "nat", "-Z")
        kernel_outcomes(
            shaped, "172.17.0.7", dst, port, proto, local=False, in_iface="docker0", count=3
        )
        kernel = _rule_packets(shaped.node)
    assert kernel == (3 if member else 0), (dst, port, proto, kernel)
    assert _svclab_accepts(dst, port, proto) == member, (dst, port, proto)
