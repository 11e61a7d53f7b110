"""The walk through rules rendered by dataplane.proxy (kube-proxy's iptables layout)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pytest
from emu_helpers import EXT, LISTENERS, N1, N2, A, B, C, network

from dataplane.emulator import EmulatedCluster, IptablesRules, IpvsRules, NftRules, RulesetInput
from dataplane.proxy.iptables import render_iptables
from dataplane.proxy.ipvs import render_ipvs
from dataplane.proxy.nftables import render_nftables
from dataplane.proxy.snapshot import build_node_config, build_snapshot
from netmodel.cluster import ClusterSpec
from netmodel.objects import EndpointSlice, Service

CIP = "10.96.0.10"
EMPTY_CIP = "10.96.0.99"
NODES = {"n1": (N1, "10.244.1.0/24"), "n2": (N2, "10.244.2.0/24")}


def _service(
    name: str, cip: str, node_port: int | None = None, affinity: int | None = None
) -> Service:
    port: dict[str, Any] = {"name": "http", "protocol": "TCP", "port": 80}
    spec: dict[str, Any] = {"type": "ClusterIP", "clusterIP": cip, "ports": [port]}
    if node_port:
        spec["type"] = "NodePort"
        port["nodePort"] = node_port
    if affinity:
        spec["sessionAffinity"] = "ClientIP"
        spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": affinity}}
    return Service.model_validate(
        {"metadata": {"name": name, "namespace": "default"}, "spec": spec}
    )


def _slice(name: str, endpoints: Sequence[tuple[str, str]]) -> EndpointSlice:
    return EndpointSlice.model_validate(
        {
            "metadata": {
                "name": f"{name}-1",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": [ip], "nodeName": node, "conditions": {"ready": True}}
                for ip, node in endpoints
            ],
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        }
    )


def kube_cluster(
    endpoints: Sequence[tuple[str, str]],
    overlay: Literal["vxlan", "host-gw"] = "vxlan",
    seed: int = 1,
    mode: Literal["iptables", "nftables", "ipvs"] = "iptables",
    affinity: int | None = None,
) -> EmulatedCluster:
    """Service default/web (ClusterIP 10.96.0.10, NodePort 30080) with ``endpoints``
    (ip, node) on port 8080, and default/empty without endpoints; rules per node as
    kube-proxy renders them in ``mode``."""
    services = [_service("web", CIP, 30080, affinity), _service("empty", EMPTY_CIP)]
    slices = [_slice("web", endpoints), _slice("empty", [])]
    spec = ClusterSpec(pod_cidr="10.244.0.0/16")
    rules: dict[str, RulesetInput] = {}
    local: dict[str, tuple[str, ...]] = {}
    for name, (ip, pod_cidr) in NODES.items():
        cfg = build_node_config(None, spec, name, [ip], pod_cidr)
        snap = build_snapshot(services, slices, cfg)
        if mode == "iptables":
            rules[name] = IptablesRules(render_iptables(snap, cfg).save_text)
        elif mode == "nftables":
            rules[name] = NftRules(render_nftables(snap, cfg).restore_input)
        else:
            r = render_ipvs(snap, cfg)
            rules[name] = IpvsRules(r.ipvsadm_text, r.ipset_text, r.iptables_save_text)
            local[name] = tuple(r.addresses)
    return EmulatedCluster(
        network(overlay), rulesets=rules, listeners=LISTENERS, local_addresses=local, seed=seed
    )


@pytest.mark.parametrize("overlay", ["vxlan", "host-gw"])
def test_pod_to_clusterip_to_pod_on_another_node_and_back(overlay: str) -> None:
    c = kube_cluster([(C, "n2")], overlay)  # type: ignore[arg-type]
    t = c.trace("pod/default/a", CIP, "tcp", 80)
    assert t.verdict == "delivered"
    assert t.delivered_to is not None and t.delivered_to.pod == "default/c"
    assert (t.delivered_to.ip, t.delivered_to.port) == (C, 8080)
    assert t.source_seen == A and not t.masquerade  # pod traffic is not masqueraded
    chains = [h.chain for h in t.rules() if h.netns == "node/n1"]
    assert "KUBE-SERVICES" in chains
    assert any(ch and ch.startswith("KUBE-SVC-") for ch in chains)
    assert any(ch and ch.startswith("KUBE-SEP-") for ch in chains)
    assert t.chosen_by is not None and "KUBE-SEP-" in t.chosen_by
    assert bool(t.hops_of("vxlan")) == (overlay == "vxlan")
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.source_seen == CIP
    assert t.reply.received is not None and t.reply.received.sport == 80
    entries = [e for e in c.conntrack("n1") if e.proto == "tcp"]
    assert len(entries) == 1
    assert entries[0].orig[1] == CIP and entries[0].reply[0] == C and entries[0].seen_reply
    # n2 only forwarded the packet: its entry has no NAT
    n2 = [e for e in c.conntrack("n2") if e.proto == "tcp"]
    assert len(n2) == 1 and n2[0].orig == (A, C, t.packet.sport, 8080)


def test_hairpin_pod_reaches_itself_through_its_service() -> None:
    c = kube_cluster([(C, "n2")])
    t = c.trace("pod/default/c", CIP, "tcp", 80)
    assert t.verdict == "delivered"
    assert t.delivered_to is not None and t.delivered_to.pod == "default/c"
    assert t.masquerade and t.source_seen == "10.244.2.1"
    marks = [h for h in t.rules() if h.chain and h.chain.startswith("KUBE-SEP-")]
    assert marks[0].verdict == "jump KUBE-MARK-MASQ"
    assert any("hairpin" in (h.bridge or "") for h in t.hops_of("bridge"))
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.source_seen == CIP


@pytest.mark.parametrize(("overlay", "masq_to"), [("vxlan", "10.244.1.0"), ("host-gw", N1)])
def test_external_client_to_nodeport(overlay: str, masq_to: str) -> None:
    c = kube_cluster([(C, "n2")], overlay)  # type: ignore[arg-type]
    t = c.trace(EXT, f"{N1}:30080", "tcp")
    assert t.verdict == "delivered"
    assert t.delivered_to is not None and t.delivered_to.pod == "default/c"
    assert t.masquerade and t.source_seen == masq_to
    assert any(h.chain == "KUBE-NODEPORTS" for h in t.rules())
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.source_seen == N1 and t.reply.received is not None
    assert t.reply.received.sport == 30080


def test_node_to_clusterip_is_masqueraded_from_outside_the_pod_range() -> None:
    c = kube_cluster([(C, "n2")])
    t = c.trace("node/n1", CIP, "tcp", 80)
    assert t.verdict == "delivered"
    assert t.masquerade and t.source_seen == "10.244.1.0"
    assert t.rules()[0].hook == "OUTPUT"


def test_service_without_endpoints_is_rejected() -> None:
    c = kube_cluster([(C, "n2")])
    t = c.trace("pod/default/a", EMPTY_CIP, "tcp", 80)
    assert t.verdict == "REJECT"
    last = t.rules()[-1]
    assert last.chain == "KUBE-SERVICES" and last.table == "filter"
    assert last.rule is not None and "has no endpoints" in last.rule
    assert t.reply is not None and (t.reply.packet.icmp_type, t.reply.packet.icmp_code) == (3, 3)
    assert t.reply.verdict == "delivered"


def test_trace_all_over_two_endpoints_in_sorted_order() -> None:
    c = kube_cluster([(C, "n2"), (B, "n1")])
    t = c.trace_all("pod/default/a", CIP, "tcp", 80)
    assert [(e.endpoint, e.probability) for e in t.endpoints] == [
        (f"{B}:8080", 0.5),
        (f"{C}:8080", 0.5),
    ]


def test_connections_spread_and_get_assured() -> None:
    c = kube_cluster([(C, "n2"), (B, "n1")], seed=11)
    res = c.connect("pod/default/a", CIP, "tcp", 80, n=20)
    assert all(r.established for r in res)
    assert {r.endpoint for r in res} == {f"{B}:8080", f"{C}:8080"}
    tcp = [e for e in c.conntrack("n1") if e.proto == "tcp"]
    assert len(tcp) == 20 and all(e.assured and e.tcp_state == "ESTABLISHED" for e in tcp)


@pytest.mark.parametrize("mode", ["nftables", "ipvs"])
def test_other_proxy_modes_reach_the_pod_on_another_node_and_back(mode: str) -> None:
    c = kube_cluster([(C, "n2")], mode=mode)  # type: ignore[arg-type]
    t = c.trace("pod/default/a", CIP, "tcp", 80)
    assert t.verdict == "delivered", t.reason
    assert t.delivered_to is not None and t.delivered_to.pod == "default/c"
    assert t.source_seen == A and not t.masquerade
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.source_seen == CIP
    entries = [e for e in c.conntrack("n1") if e.proto == "tcp"]
    assert len(entries) == 1 and entries[0].reply[0] == C


@pytest.mark.parametrize("mode", ["nftables", "ipvs"])
def test_other_proxy_modes_hairpin(mode: str) -> None:
    c = kube_cluster([(C, "n2")], mode=mode)  # type: ignore[arg-type]
    t = c.trace("pod/default/c", CIP, "tcp", 80)
    assert t.verdict == "delivered", t.reason
    assert t.delivered_to is not None and t.delivered_to.pod == "default/c"
    assert t.masquerade and t.source_seen != C
    assert t.reply is not None and t.reply.verdict == "delivered"


def test_ipvs_schedules_round_robin_and_all_lists_both() -> None:
    c = kube_cluster([(C, "n2"), (B, "n1")], mode="ipvs")
    res = c.connect("pod/default/a", CIP, "tcp", 80, n=4)
    assert all(r.established for r in res)
    eps = [r.endpoint for r in res]
    assert eps[0] != eps[1] and eps[:2] == eps[2:]
    assert all(r.chosen_by and "rr" in r.chosen_by for r in res)
    t = c.trace_all("pod/default/a", CIP, "tcp", 80)
    assert sorted(e.endpoint for e in t.endpoints) == [f"{B}:8080", f"{C}:8080"]
    assert all(e.probability == 0.5 for e in t.endpoints)


def test_client_ip_affinity_keeps_a_client_on_one_endpoint_until_the_timeout() -> None:
    c = kube_cluster([(C, "n2"), (B, "n1")], seed=5, affinity=60)
    first = c.connect("pod/default/a", CIP, "tcp", 80, n=8)
    assert len({r.endpoint for r in first}) == 1
    assert all(r.chosen_by and "--rcheck" in r.chosen_by for r in first[1:])
    c.clock.advance(120)  # type: ignore[attr-defined]
    later = c.connect("pod/default/a", CIP, "tcp", 80, n=30)
    assert "--rcheck" not in (later[0].chosen_by or "")
    assert len({r.endpoint for r in later}) == 1


def test_node_reaches_its_own_localhost_nodeport() -> None:
    c = kube_cluster([(C, "n2")])
    t = c.trace("node/n1", "127.0.0.1:30080", "tcp")
    assert t.verdict == "delivered", t.reason
    assert t.delivered_to is not None and t.delivered_to.pod == "default/c"
    assert t.masquerade and t.source_seen == "10.244.1.0"
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.source_seen == "127.0.0.1"


def test_ipvs_takes_the_packet_in_input_and_forwards_it_itself() -> None:
    ipvs = kube_cluster([(C, "n2")], mode="ipvs")
    ipt = kube_cluster([(C, "n2")])
    t = ipvs.trace("pod/default/a", CIP, "tcp", 80)
    assert t.verdict == "delivered", t.reason
    n1 = [h for h in t.hops if h.netns == "node/n1"]
    assert any(h.kind == "route" and "STOLEN" in (h.note or "") for h in n1)
    assert any(h.kind == "forward" and "IPVS" in (h.note or "") for h in n1)
    assert [h.hook for h in n1 if h.table == "ipvs"] == ["INPUT"]  # scheduled once
    # IPVS decrements the TTL as forwarding would: the endpoint sees the same TTL
    ref = ipt.trace("pod/default/a", CIP, "tcp", 80)
    assert t.received is not None and ref.received is not None
    assert t.received.ttl == ref.received.ttl == 62
    # TTL 1 dies in IPVS's hands, with an ICMP time exceeded to the client
    short = ipvs.trace("pod/default/a", CIP, "tcp", 80, ttl=1)
    assert short.verdict == "ttl-exceeded"
    assert short.reply is not None and short.reply.received is not None
    assert short.reply.received.icmp_type == 11


@pytest.mark.parametrize(
    ("mode", "affinity"),
    [("iptables", None), ("iptables", 10800), ("nftables", None), ("ipvs", None)],
)
def test_streamed_connections_answer_as_traced_ones_and_leave_nothing_behind(
    mode: str, affinity: int | None
) -> None:
    """``iter_connect`` untraced with ``choice`` (what ``svclab connect`` runs) picks the
    same endpoints by the same rules as fully traced connections under the same seed;
    with ``release`` each finished connection is forgotten (conntrack, sockets, ports)."""
    eps = [(C, "n2"), (B, "n1")]

    def run(**kw: Any) -> tuple[EmulatedCluster, list[tuple[object, ...]]]:
        c = kube_cluster(eps, seed=5, mode=mode, affinity=affinity)  # type: ignore[arg-type]
        got = [
            (r.endpoint, r.pod, r.chosen_by, r.established, r.source_seen)
            for r in c.iter_connect("pod/default/a", CIP, "tcp", 80, 60, complete=False, **kw)
        ]
        return c, got

    _, traced = run(record=True)
    c, streamed = run(record=False, choice=True, release=True)
    assert streamed == traced
    if mode != "nftables":  # nft traces name no choosing rule (traced ones neither)
        assert all(chosen is not None for _, _, chosen, _, _ in streamed)
    assert len({e for e, *_ in streamed}) == (1 if affinity else 2)
    for node in ("n1", "n2"):
        assert [e for e in c.conntrack(node) if e.proto == "tcp"] == []
    assert not any(c.endpoints.clients.values())
    assert not any(c.endpoints.server_conns.values())


def test_released_connections_outnumber_the_ephemeral_ports() -> None:
    """The range has 28,232 ports; every released connection frees its own, so a client
    opens more connections than that, every one through the Service."""
    c = kube_cluster([(C, "n2"), (B, "n1")], seed=3)
    n = 28_300
    ok = sum(
        r.established
        for r in c.iter_connect(
            "pod/default/a", CIP, "tcp", 80, n, record=False, complete=False, release=True
        )
    )
    assert ok == n
