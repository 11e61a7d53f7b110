"""Rules loaded into real node namespaces: kube-proxy's jump ensure and restore, rule
counters and conntrack read back after real connections, nft, and the hairpin modes."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from ipaddress import IPv4Address

import pytest

from dataplane.linux import conntrack, nsenter, rules
from dataplane.linux.netns import is_root
from dataplane.linux.realize import BRIDGE_NF, RealCluster, install_hairpin_masquerade, realize
from dataplane.linux.testing import Sample, realized, sample_network
from dataplane.linux.traffic import ConnectFailed
from dataplane.proxy.iptables import JUMP_RULES

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

SVC = "10.96.0.10"
SEP_DNAT = '-A KUBE-SEP-TEST -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 10.244.1.2:8080'
PAYLOAD = f"""*filter
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-TEST - [0:0]
:KUBE-SEP-TEST - [0:0]
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-SERVICES -d {SVC}/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-TEST
-A KUBE-SVC-TEST -m comment --comment "default/web:http -> 10.244.1.2:8080" -j KUBE-SEP-TEST
-A KUBE-SEP-TEST -s 10.244.1.2/32 -m comment --comment default/web:http -j KUBE-MARK-MASQ
{SEP_DNAT}
COMMIT
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Sample, RealCluster]]:
    sample = sample_network(2, 2, overlay="vxlan")
    with realized(sample.network) as c:
        c.serve({p.key: [(8080, "tcp")] for p in sample.pods})
        rules.load_iptables(c.node_netns("n0"), PAYLOAD)
        yield sample, c


def _dnat_packets(c: RealCluster) -> int:
    counted = [
        r for r in rules.rule_counters(c.node_netns("n0"), table="nat") if r.rule == SEP_DNAT
    ]
    assert len(counted) == 1, "the DNAT rule reads back exactly as loaded"
    return counted[0].packets


def test_jumps_are_ensured_in_kube_proxys_order_and_only_once(
    cluster: tuple[Sample, RealCluster],
) -> None:
    _, c = cluster
    ns = c.node_netns("n0")
    save = rules.iptables_save(ns, counters=False)
    forward = [line for line in save.splitlines() if line.startswith("-A FORWARD ")]
    assert [line.rsplit("-j ", 1)[1] for line in forward] == [
        "KUBE-PROXY-FIREWALL",
        "KUBE-FORWARD",
        "KUBE-SERVICES",
        "KUBE-EXTERNAL-SERVICES",
    ]
    assert not rules.missing_jumps(save, JUMP_RULES)
    assert rules.ensure_jumps(ns) == []
    rules.load_iptables(ns, PAYLOAD)  # a second sync: same rules, no duplicates
    assert rules.iptables_save(ns, counters=False).count("-j KUBE-SERVICES") == save.count(
        "-j KUBE-SERVICES"
    )


def test_service_dnat_counts_each_new_connection_once(cluster: tuple[Sample, RealCluster]) -> None:
    sample, c = cluster
    before = _dnat_packets(c)
    for _ in range(3):
        r = c.connect("pod/default/p0-0", SVC, 80)
        assert r.pod == "default/p1-0"
        assert r.seen_src[0] == sample.pod("default/p0-0").ip  # no masquerade for pod clients
    # nat rules see only the first packet of a connection
    assert _dnat_packets(c) == before + 3


def test_conntrack_reads_back_the_dnat_binding(cluster: tuple[Sample, RealCluster]) -> None:
    sample, c = cluster
    client, server = sample.pod("default/p0-0").ip, sample.pod("default/p1-0").ip
    r = c.connect("pod/default/p0-0", SVC, 80, sport=41234)
    assert r.local == (client, 41234)
    expected = conntrack.normalize_line(
        f"tcp      6 120 TIME_WAIT src={client} dst={SVC} sport=41234 dport=80 "
        f"src={server} dst={client} sport=8080 dport=41234 [ASSURED] mark=0 use=1"
    )
    deadline = time.monotonic() + 2
    while True:  # the last ACK of the close may still be on its way
        entries = conntrack.list_entries(c.node_netns("n0"))
        mine = [e for e in entries if e.field("orig", "sport") == "41234"]
        if (mine and mine[0].key() == expected) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert [e.key() for e in mine] == [expected]
    assert mine[0].field("reply", "src") == str(server)


def test_nft_rules_load_and_count(cluster: tuple[Sample, RealCluster]) -> None:
    sample, c = cluster
    ns = c.node_netns("n1")
    target = sample.pod("default/p1-1").ip
    rules.load_nft(
        ns,
        "table ip svclabtest {\n"
        "  chain pre {\n"
        "    type filter hook prerouting priority -150; policy accept;\n"
        f"    ip daddr {target} tcp dport 8080 counter\n"
        "  }\n"
        "}\n",
    )

    def packets() -> int:
        m = re.search(r"tcp dport 8080 counter packets (\d+)", rules.nft_ruleset(ns))
        assert m, "the counter rule lists back"
        return int(m.group(1))

    assert packets() == 0
    assert c.connect("pod/default/p0-1", target, 8080).pod == "default/p1-1"
    assert packets() >= 3  # SYN, ACK, FIN at least
    rules.run_in(ns, ["nft", "delete", "table", "ip", "svclabtest"])


def test_hairpin_needs_bridge_netfilter_or_the_masquerade_fallback() -> None:
    sample = sample_network(1, 2, overlay="vxlan")
    with realized(sample.network, hairpin="auto") as c:
        assert c.hairpin == "br-netfilter"  # br_netfilter is built in here
        node = c.node_netns("n0")
        client, backend = sample.pod("default/p0-0"), sample.pod("default/p0-1")
        c.serve({backend.key: [(8080, "tcp")]})
        rules.load_iptables(
            node,
            "*nat\n"
            f"-A PREROUTING -d 10.96.0.11/32 -p tcp -m tcp --dport 80"
            f" -j DNAT --to-destination {backend.ip}:8080\nCOMMIT\n",
            jumps=None,
        )
        r = c.connect(f"pod/{client.key}", "10.96.0.11", 80)
        assert r.pod == backend.key and r.seen_src[0] == client.ip

        # Without bridged frames crossing iptables the reply skips conntrack: no answer.
        nsenter.write_sysctl(node, BRIDGE_NF, "0")
        with pytest.raises(ConnectFailed):
            c.connect(f"pod/{client.key}", "10.96.0.11", 80, timeout=0.5)

        # The fallback: masquerade, so the reply is routed (and un-NATed) by the node.
        again = realize(sample.network, cluster_id=c.cluster_id, hairpin="masquerade")
        assert again.hairpin == "masquerade"
        assert nsenter.read_sysctl(node, BRIDGE_NF) == "0"
        r = c.connect(f"pod/{client.key}", "10.96.0.11", 80)
        assert r.pod == backend.key and r.seen_src[0] == IPv4Address("10.244.0.1")
        install_hairpin_masquerade(node, sample.nodes[0].pod_cidr)  # type: ignore[arg-type]
        assert rules.iptables_save(node, table="nat").count("-j MASQUERADE") == 1


def test_conntrack_matches_the_emulators_for_the_same_connection(
    cluster: tuple[Sample, RealCluster],
) -> None:
    """Differential: the node's real iptables-save, given to the emulator, and the same
    connection (same source port) through both: the conntrack lines agree."""
    from dataplane.emulator import cluster as emulator
    from netmodel.rulesets import IptablesRules

    sample, c = cluster
    save = rules.iptables_save(c.node_netns("n0"), counters=False)
    emu = emulator.EmulatedCluster(
        sample.network,
        rulesets={"n0": IptablesRules(save)},
        listeners={f"pod/{p.key}": [("tcp", 8080)] for p in sample.pods},
    )
    [res] = emu.connect("pod/default/p0-0", SVC, "tcp", 80, close=True)
    assert res.established and res.pod == "default/p1-0"
    real = c.connect("pod/default/p0-0", SVC, 80, sport=res.sport)
    assert real.pod == res.pod and str(real.seen_src[0]) == res.source_seen

    emu_lines = [
        conntrack.normalize_line(e.text)
        for e in emu.conntrack("n0")
        if e.orig[2] == res.sport and e.orig[1] == SVC
    ]
    deadline = time.monotonic() + 2
    while True:
        kernel_lines = [
            e.key()
            for e in conntrack.list_entries(c.node_netns("n0"))
            if e.field("orig", "sport") == str(res.sport) and e.field("orig", "dst") == SVC
        ]
        if kernel_lines == emu_lines or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert kernel_lines == emu_lines
