"""The walk through netfilter: DNAT, MASQUERADE via the mark, REJECT/DROP, replies
through the same conntrack entry, hairpin, NodePort, ICMP errors about NATed packets."""

from __future__ import annotations

import pytest
from emu_helpers import EXT, N1, RULES, RULES_NO_HAIRPIN_MASQ, A, B, C, both, cluster

CIP, REJECTED, DROPPED, SPLIT = "10.96.0.10", "10.96.0.11", "10.96.0.12", "10.96.0.20"


def test_clusterip_is_dnated_to_a_pod_on_another_node_and_the_reply_un_nated() -> None:
    c = cluster(both())
    t = c.trace("pod/default/a", CIP, "tcp", 80)
    assert t.verdict == "delivered"
    assert t.delivered_to is not None
    assert (t.delivered_to.ip, t.delivered_to.port) == (C, 8080)
    assert t.delivered_to.pod == "default/c" and t.delivered_to.node == "n2"
    assert t.source_seen == A and not t.masquerade
    dnat = [h for h in t.rules() if h.nat and h.netns == "node/n1"]
    assert [h.nat for h in dnat] == [f"{CIP}:80 -> {C}:8080"]
    assert dnat[0].hook == "PREROUTING" and dnat[0].chain == "SEP-C"
    assert t.chosen_by == "-A SVC-WEB -j SEP-C"
    assert t.hops_of("vxlan")  # the DNATed packet crossed the overlay
    # the answer comes back from the Service address, rewritten on n1
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.source_seen == f"{CIP}"
    assert t.reply.delivered_to is not None and t.reply.delivered_to.pod == "default/a"
    rewrites = [h for h in t.reply.hops_of("nat") if h.netns == "node/n1"]
    assert [h.nat for h in rewrites] == [f"{C}:8080 -> {CIP}:80"]
    # one entry in n1's table carries both directions
    entries = [e for e in c.conntrack("n1") if e.proto == "tcp"]
    assert len(entries) == 1
    e = entries[0]
    assert e.orig == (A, CIP, t.packet.sport, 80)
    assert e.reply == (C, A, 8080, t.packet.sport)
    assert e.seen_reply and e.tcp_state == "SYN_RECV"


def test_connect_reaches_established_assured_through_nat() -> None:
    c = cluster(both())
    res = c.connect("pod/default/a", CIP, "tcp", 80, n=2)
    assert [r.established for r in res] == [True, True]
    assert {r.endpoint for r in res} == {f"{C}:8080"}
    assert res[0].sport != res[1].sport
    assert all(r.chosen_by == "-A SVC-WEB -j SEP-C" for r in res)
    tcp = [e for e in c.conntrack("n1") if e.proto == "tcp"]
    assert len(tcp) == 2
    assert all(e.tcp_state == "ESTABLISHED" and e.assured for e in tcp)
    assert "[ASSURED]" in tcp[0].text and f"dst={CIP}" in tcp[0].text


def test_connect_with_close_ends_in_time_wait() -> None:
    c = cluster(both())
    c.connect("pod/default/a", CIP, "tcp", 80, n=1, close=True)
    states = [e.tcp_state for e in c.conntrack("n1") if e.proto == "tcp"]
    assert states == ["TIME_WAIT"]


def test_hairpin_through_the_service_needs_the_sep_masquerade() -> None:
    c = cluster(both())
    t = c.trace("pod/default/c", CIP, "tcp", 80)
    assert t.verdict == "delivered"
    assert t.delivered_to is not None and t.delivered_to.pod == "default/c"
    assert t.masquerade and t.source_seen == "10.244.2.1"  # n2's cni0 address
    assert any("hairpin" in (h.bridge or "") for h in t.hops_of("bridge"))
    assert any(h.verdict == "MASQUERADE" for h in t.rules())
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.source_seen == CIP
    assert any("hairpin" in (h.bridge or "") for h in t.reply.hops_of("bridge"))


def test_hairpin_without_masquerade_is_dropped_as_martian() -> None:
    c = cluster(both(RULES_NO_HAIRPIN_MASQ))
    t = c.trace("pod/default/c", CIP, "tcp", 80)
    assert t.verdict == "DROP"
    assert "martian source" in t.reason
    assert t.hops[-1].netns == "pod/default/c"


def test_statistic_split_picks_endpoints_with_the_seeded_generator() -> None:
    c = cluster(both(), seed=3)
    res = c.connect("pod/default/a", SPLIT, "tcp", 80, n=40)
    chosen = {r.endpoint for r in res}
    assert chosen == {f"{B}:8080", f"{C}:8080"}
    by_rule = {r.endpoint: r.chosen_by for r in res}
    assert by_rule[f"{B}:8080"] == (
        "-A SVC-SPLIT -m statistic --mode random --probability 0.5000000000 -j SEP-B"
    )
    assert by_rule[f"{C}:8080"] == "-A SVC-SPLIT -j SEP-C"
    again = cluster(both(), seed=3).connect("pod/default/a", SPLIT, "tcp", 80, n=40)
    assert [r.endpoint for r in again] == [r.endpoint for r in res]


def test_trace_all_lists_every_endpoint_in_rule_order_and_keeps_state() -> None:
    c = cluster(both())
    before = [e.text for e in c.conntrack("n1")]
    t = c.trace_all("pod/default/a", SPLIT, "tcp", 80)
    assert [(e.endpoint, e.probability) for e in t.endpoints] == [
        (f"{B}:8080", 0.5),
        (f"{C}:8080", 0.5),
    ]
    assert len(t.branches) == 2
    assert [b.delivered_to.pod for _, b in t.branches if b.delivered_to] == [
        "default/b",
        "default/c",
    ]
    assert [e.text for e in c.conntrack("n1")] == before
    js = t.to_json()
    assert js["endpoints"] == [
        {"endpoint": f"{B}:8080", "probability": 0.5},
        {"endpoint": f"{C}:8080", "probability": 0.5},
    ]


def test_single_trace_reports_the_probability_of_its_branch() -> None:
    c = cluster(both(), seed=3)
    t = c.trace("pod/default/a", SPLIT, "tcp", 80)
    assert len(t.endpoints) == 1 and t.endpoints[0].probability == pytest.approx(0.5)
    t2 = c.trace("pod/default/a", CIP, "tcp", 80)
    assert t2.endpoints[0].probability == 1.0


def test_reject_in_forward_answers_the_pod_with_port_unreachable() -> None:
    c = cluster(both())
    t = c.trace("pod/default/a", REJECTED, "tcp", 80)
    assert t.verdict == "REJECT"
    rule = t.rules()[-1]
    assert rule.hook == "FORWARD" and rule.verdict == "REJECT icmp-port-unreachable"
    assert rule.netns == "node/n1"
    assert t.reply is not None and t.reply.verdict == "delivered"
    err = t.reply.packet
    assert (err.icmp_type, err.icmp_code) == (3, 3)
    assert str(err.dst) == A and err.inner is not None and str(err.inner.dst) == REJECTED


def test_reject_in_output_for_the_node_itself() -> None:
    c = cluster(both())
    t = c.trace("node/n1", REJECTED, "tcp", 80)
    assert t.verdict == "REJECT"
    assert t.rules()[-1].hook == "OUTPUT"
    assert t.reply is not None and t.reply.verdict == "delivered"


def test_drop_has_no_answer() -> None:
    c = cluster(both())
    t = c.trace("pod/default/a", DROPPED, "tcp", 80)
    assert t.verdict == "DROP" and t.reply is None
    assert t.rules()[-1].verdict == "DROP"


def test_external_client_to_nodeport_is_masqueraded_to_the_overlay_address() -> None:
    c = cluster(both())
    t = c.trace(EXT, f"{N1}:30080", "tcp")
    assert t.verdict == "delivered"
    assert t.delivered_to is not None and t.delivered_to.pod == "default/c"
    assert t.masquerade and t.source_seen == "10.244.1.0"  # n1's flannel.1
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.source_seen == N1
    assert t.reply.delivered_to is not None and t.reply.delivered_to.netns == f"ext/{EXT}"


def test_frag_needed_across_vxlan_is_sent_back_un_nated() -> None:
    c = cluster(both())
    t = c.trace(EXT, f"{N1}:30080", "tcp", length=1500)
    assert t.verdict == "frag-needed"
    assert t.hops[-1].netns == "node/n1" and "MTU 1450" in t.reason
    icmp = [h for h in t.hops if h.kind == "icmp"]
    assert icmp and icmp[0].note == "next-hop MTU 1450"
    assert t.reply is not None and t.reply.verdict == "delivered"
    sent = t.reply.packet
    assert (sent.icmp_type, sent.icmp_code) == (3, 4)
    assert sent.inner is not None and (str(sent.inner.dst), sent.inner.dport) == (C, 8080)
    # the quoted header is translated back to what the client sent
    err = t.reply.received
    assert err is not None and err.inner is not None
    assert (str(err.inner.dst), err.inner.dport) == (N1, 30080)
    assert t.reply.delivered_to is not None and t.reply.delivered_to.netns == f"ext/{EXT}"
    # the failed connection was never confirmed on n1
    assert not [e for e in c.conntrack("n1") if e.proto == "tcp"]


def test_ttl_exceeded_after_dnat_quotes_the_original_destination() -> None:
    c = cluster(both())
    t = c.trace("pod/default/a", CIP, "tcp", 80, ttl=1)
    assert t.verdict == "ttl-exceeded"
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.packet.inner is not None and str(t.reply.packet.inner.dst) == C
    received = t.reply.received
    assert received is not None and received.inner is not None
    assert (str(received.inner.dst), received.inner.dport) == (CIP, 80)


def test_ping_to_a_clusterip_without_icmp_rules_is_not_answered() -> None:
    c = cluster(both())
    res = c.ping("pod/default/a", CIP)
    assert not res[0].ok
    assert res[0].verdict == "no-route"  # the router has no route to the Service range


def test_json_contract_keys() -> None:
    c = cluster(both())
    js = c.trace("pod/default/a", CIP, "tcp", 80).to_json()
    for key in (
        "verdict",
        "delivered_to",
        "endpoints",
        "masquerade",
        "source_seen",
        "hops",
        "reply",
    ):
        assert key in js
    assert js["delivered_to"] == {"ip": C, "port": 8080, "pod": "default/c", "node": "n2"}
    assert js["reply"]["verdict"] == "delivered"
    assert any(h["kind"] == "rule" and h.get("rule_number") for h in js["hops"])
    text = c.trace("pod/default/a", CIP, "tcp", 80).render_text()
    assert "SEP-C" in text and "request:" in text and "reply:" in text


def _node_port_of(c: object, pod: str) -> str:
    """The name of node n1's bridge port (veth) whose peer is ``pod``'s eth0."""
    host = c.hosts["node/n1"]  # type: ignore[attr-defined]
    for dev in host.devices.values():
        if dev.peer is not None and dev.peer.host_name == pod:
            return str(dev.name)
    raise AssertionError(pod)


def test_physdev_sees_the_bridge_ports_under_br_netfilter() -> None:
    probe = cluster()
    port_a = _node_port_of(probe, "pod/default/a")
    rules = f"""*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp --dport 10250 -m physdev --physdev-in {port_a} -j DROP
-A FORWARD -m physdev --physdev-in {port_a} --physdev-is-bridged -j DROP
COMMIT
"""
    c = cluster({"n1": rules})
    t = c.trace("pod/default/a", B, "tcp", 8080)  # bridged a -> b: FORWARD, ports known
    assert t.verdict == "DROP" and t.rules()[-1].hook == "FORWARD"
    assert c.trace("pod/default/b", A, "tcp", 8080).verdict == "delivered"
    # up to the IP layer through the bridge: INPUT still knows the ingress port
    t2 = c.trace("pod/default/a", N1, "tcp", 10250)
    assert t2.verdict == "DROP" and t2.rules()[-1].hook == "INPUT"
    assert c.trace("pod/default/b", N1, "tcp", 10250).verdict != "DROP"


def test_reject_answers_as_the_kernel_builds_them() -> None:
    extra = (
        "-A FORWARD -d 10.244.2.5/32 -p tcp --dport 8080 -j REJECT --reject-with tcp-reset\n"
        "-A INPUT -p tcp --dport 9999 -j REJECT\nCOMMIT\n"
    )
    rules = RULES[: RULES.rindex("COMMIT")] + extra
    c = cluster({"n1": rules, "n2": RULES})
    # icmp-port-unreachable (the default) from a forwarded packet: sent from the address
    # the rejecting host routes towards the sender, quoting the packet as it was
    t = c.trace("pod/default/a", REJECTED, "tcp", 80)
    assert t.reply is not None and t.reply.received is not None
    err = t.reply.received
    assert (err.proto, err.icmp_type, err.icmp_code) == ("icmp", 3, 3)
    assert (str(err.src), str(err.dst), err.ttl) == ("10.244.1.1", A, 64)
    assert err.length == 20 + 8 + t.packet.length and not err.df
    assert err.inner is not None and (err.inner.sport, err.inner.dport) == (t.packet.sport, 80)
    # ... from a packet to the host itself: from that (local) destination
    t2 = c.trace("pod/default/a", N1, "tcp", 9999)
    assert t2.verdict == "REJECT" and t2.reply is not None and t2.reply.received is not None
    assert str(t2.reply.received.src) == N1
    # tcp-reset after DNAT: addresses and ports swapped, RST+ACK answering the SYN; the
    # connection's binding makes it come from the Service, and nothing is confirmed
    t3 = c.trace("pod/default/a", CIP, "tcp", 80)
    assert t3.verdict == "REJECT" and t3.rules()[-1].verdict == "REJECT tcp-reset"
    assert t3.reply is not None and t3.reply.received is not None
    rst = t3.reply.received
    assert rst.proto == "tcp" and rst.flags == frozenset({"RST", "ACK"})
    assert (str(rst.src), rst.sport, str(rst.dst), rst.dport) == (CIP, 80, A, t3.packet.sport)
    assert not [e for e in c.conntrack("n1") if e.proto == "tcp"]
