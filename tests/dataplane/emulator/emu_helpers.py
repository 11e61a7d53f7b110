"""Small clusters for the emulator tests, built with netmodel.topology.build."""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Address, ip_network
from typing import Literal

from dataplane.emulator import EmulatedCluster, IptablesRules
from netmodel.network import ClusterNetwork
from netmodel.topology import PodInfo, build, node_info

EXT = "203.0.113.5"
A, B, C = "10.244.1.5", "10.244.1.6", "10.244.2.5"
N1, N2 = "172.18.0.2", "172.18.0.3"


def network(overlay: Literal["vxlan", "host-gw"] = "vxlan") -> ClusterNetwork:
    """Two nodes; pods a and b on n1, c on n2; one external client."""
    nodes = [
        node_info("n1", N1, "10.244.1.0/24"),
        node_info("n2", N2, "10.244.2.0/24"),
    ]
    pods = [
        PodInfo("default/a", "n1", IPv4Address(A)),
        PodInfo("default/b", "n1", IPv4Address(B)),
        PodInfo("default/c", "n2", IPv4Address(C)),
    ]
    return build(ip_network("172.18.0.0/16"), nodes, pods, overlay=overlay, external_clients=[EXT])


LISTENERS = {
    "pod/default/a": {("tcp", 8080)},
    "pod/default/b": {("tcp", 8080), ("udp", 53)},
    "pod/default/c": {("tcp", 8080), ("udp", 53)},
}


def cluster(
    rules: Mapping[str, str] | None = None,
    overlay: Literal["vxlan", "host-gw"] = "vxlan",
    seed: int = 1,
) -> EmulatedCluster:
    return EmulatedCluster(
        network(overlay),
        rulesets={n: IptablesRules(t) for n, t in (rules or {}).items()},
        listeners=LISTENERS,
        seed=seed,
    )


# A hand-written ruleset in kube-proxy's shape: ClusterIP 10.96.0.10:80 -> c:8080 (on n2),
# with the hairpin masquerade; 10.96.0.11 rejected; 10.96.0.12 dropped; NodePort 30080
# masqueraded and DNATed to c; ClusterIP 10.96.0.20:80 split 50/50 between b and c.
RULES = """\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:SVC - [0:0]
:NODEPORTS - [0:0]
:EXT-WEB - [0:0]
:SVC-WEB - [0:0]
:SVC-SPLIT - [0:0]
:SEP-B - [0:0]
:SEP-C - [0:0]
:MARK-MASQ - [0:0]
:POST - [0:0]
-A PREROUTING -j SVC
-A OUTPUT -j SVC
-A POSTROUTING -j POST
-A POST -m mark ! --mark 0x4000/0x4000 -j RETURN
-A POST -j MARK --xor-mark 0x4000
-A POST -j MASQUERADE
-A MARK-MASQ -j MARK --or-mark 0x4000
-A SVC -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j SVC-WEB
-A SVC -d 10.96.0.20/32 -p tcp -m tcp --dport 80 -j SVC-SPLIT
-A SVC -m addrtype --dst-type LOCAL -j NODEPORTS
-A NODEPORTS -p tcp -m tcp --dport 30080 -j EXT-WEB
-A EXT-WEB -j MARK-MASQ
-A EXT-WEB -j SVC-WEB
-A SVC-WEB -j SEP-C
-A SVC-SPLIT -m statistic --mode random --probability 0.5000000000 -j SEP-B
-A SVC-SPLIT -j SEP-C
-A SEP-B -s 10.244.1.6/32 -j MARK-MASQ
-A SEP-B -p tcp -m tcp -j DNAT --to-destination 10.244.1.6:8080
-A SEP-C -s 10.244.2.5/32 -j MARK-MASQ
-A SEP-C -p tcp -m tcp -j DNAT --to-destination 10.244.2.5:8080
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -d 10.96.0.11/32 -p tcp -j REJECT
-A OUTPUT -d 10.96.0.11/32 -p tcp -j REJECT
-A FORWARD -d 10.96.0.12/32 -j DROP
-A OUTPUT -d 10.96.0.12/32 -j DROP
COMMIT
"""

RULES_NO_HAIRPIN_MASQ = RULES.replace("-A SEP-C -s 10.244.2.5/32 -j MARK-MASQ\n", "")


def both(rules: str = RULES) -> dict[str, str]:
    return {"n1": rules, "n2": rules}
