"""Devices, bridges, routes, ARP, VXLAN, TTL and MTU — without any rules."""

from __future__ import annotations

import pytest
from emu_helpers import EXT, N1, N2, A, B, C, cluster

from dataplane.emulator import Trace
from netmodel.errors import InputError


def _last_ttl(trace: Trace) -> int:
    delivered = [h for h in trace.hops if h.kind == "deliver"]
    assert delivered and delivered[-1].packet is not None
    return delivered[-1].packet.ttl


def test_same_node_pods_are_bridged_without_ttl_decrement() -> None:
    c = cluster()
    t = c.trace("pod/default/a", "pod/default/b", "tcp", 8080)
    assert t.verdict == "delivered"
    assert t.delivered_to is not None and t.delivered_to.pod == "default/b"
    assert t.delivered_to.node == "n1" and t.delivered_to.port == 8080
    assert t.source_seen == A and not t.masquerade
    assert _last_ttl(t) == 64
    assert not t.hops_of("forward") and not t.hops_of("vxlan")
    assert any("forwarded" in (h.bridge or "") for h in t.hops_of("bridge"))
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.packet.flags == frozenset({"SYN", "ACK"})


def test_vxlan_across_nodes_decrements_ttl_per_routed_hop_and_shows_encap() -> None:
    c = cluster()
    t = c.trace("pod/default/a", "pod/default/c", "tcp", 8080)
    assert t.verdict == "delivered" and t.source_seen == A
    assert t.delivered_to is not None and t.delivered_to.node == "n2"
    assert _last_ttl(t) == 62
    fw = t.hops_of("forward")
    assert [h.netns for h in fw] == ["node/n1", "node/n2"]
    vx = t.hops_of("vxlan")
    assert [h.netns for h in vx] == ["node/n1", "node/n2"]
    assert vx[0].vxlan is not None and vx[0].vxlan.startswith("encap VNI 1")
    assert f"> {N2}:8472" in vx[0].vxlan
    assert vx[1].vxlan is not None and vx[1].vxlan.startswith("decap VNI 1")
    # on the underlay the frame is the outer UDP 8472 packet carrying the inner frame
    wire = [h for h in t.hops_of("xmit") if h.netns == "router"]
    assert len(wire) == 1
    frame = wire[0].frame
    assert frame is not None and frame.encap is not None
    assert str(frame.encap.outer_src) == N1 and str(frame.encap.outer_dst) == N2
    assert frame.encap.udp_dport == 8472 and frame.encap.vni == 1
    assert frame.packet is not None and str(frame.packet.dst) == C
    assert wire[0].packet is not None and wire[0].packet.proto == "udp"
    # the reply comes back the same way
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert [h.netns for h in t.reply.hops_of("vxlan")] == ["node/n2", "node/n1"]


def test_host_gw_routes_via_the_peer_node_without_encapsulation() -> None:
    c = cluster(overlay="host-gw")
    t = c.trace("pod/default/a", "pod/default/c", "tcp", 8080)
    assert t.verdict == "delivered" and t.source_seen == A
    assert _last_ttl(t) == 62
    assert not t.hops_of("vxlan")
    routes = [h.route for h in t.hops_of("route") if h.netns == "node/n1"]
    assert any(r and f"via {N2} dev eth0" in r for r in routes)


@pytest.mark.parametrize(("overlay", "src"), [("vxlan", "10.244.1.0"), ("host-gw", N1)])
def test_node_reaches_remote_pod_from_the_egress_device_address(overlay: str, src: str) -> None:
    c = cluster(overlay=overlay)  # type: ignore[arg-type]
    t = c.trace("node/n1", "pod/default/c", "tcp", 8080)
    assert t.verdict == "delivered"
    assert t.source_seen == src and not t.masquerade
    assert _last_ttl(t) == 63


def test_arp_resolution_appears_once_then_is_cached() -> None:
    c = cluster()
    first = c.trace("pod/default/a", "pod/default/b", "tcp", 8080)
    requests = [h for h in first.hops_of("arp") if h.arp and h.arp.startswith("who-has")]
    assert [h.arp for h in requests] == [f"who-has {B} tell {A}"]
    assert any(
        h.arp == f"{B} is-at " + h.arp.split()[-1]
        for h in first.hops_of("arp")
        if h.arp and "is-at" in h.arp
    )
    second = c.trace("pod/default/a", "pod/default/b", "tcp", 8080)
    assert second.verdict == "delivered"
    assert not second.hops_of("arp")
    # the answering pod learnt the requester from the request: its reply needs no ARP
    assert first.reply is not None and not first.reply.hops_of("arp")


def test_bridge_learns_and_forwards_by_fdb() -> None:
    c = cluster()
    t = c.trace("pod/default/a", "pod/default/b", "tcp", 8080)
    learned = [h.bridge or "" for h in t.hops_of("arp") if h.bridge]
    assert any("cni0: learned" in x and "flooded" in x for x in learned)  # the ARP request
    forwarded = [h.bridge or "" for h in t.hops_of("bridge")]
    assert any("in fdb" in x for x in forwarded)
    cni0 = c.hosts["node/n1"].devices["cni0"]
    assert len(cni0.fdb) == 2  # type: ignore[attr-defined]


def test_ttl_exceeded_at_the_first_router_answers_with_icmp_time_exceeded() -> None:
    c = cluster()
    t = c.trace("pod/default/a", "pod/default/c", "tcp", 8080, ttl=1)
    assert t.verdict == "ttl-exceeded"
    assert t.hops[-1].netns == "node/n1"
    assert t.reply is not None and t.reply.verdict == "delivered"
    err = t.reply.packet
    assert err.proto == "icmp" and err.icmp_type == 11
    assert str(err.src) == "10.244.1.1" and str(err.dst) == A
    assert err.inner is not None and str(err.inner.dst) == C


def test_ttl_exceeded_on_the_second_node() -> None:
    c = cluster()
    t = c.trace("pod/default/a", "pod/default/c", "tcp", 8080, ttl=2)
    assert t.verdict == "ttl-exceeded"
    assert t.hops[-1].netns == "node/n2"
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert str(t.reply.packet.src) == "10.244.2.0"  # n2's flannel.1, the route back


def test_oversized_df_packet_sent_locally_fails_with_emsgsize() -> None:
    c = cluster()
    t = c.trace("node/n1", "pod/default/c", "tcp", 8080, length=1500)
    assert t.verdict == "frag-needed"
    assert t.reply is None
    assert "MTU 1450" in t.reason


def test_no_route_at_the_router_for_an_unknown_destination() -> None:
    c = cluster()
    t = c.trace("pod/default/a", "8.8.8.8", "tcp", 80)
    assert t.verdict == "no-route"
    assert t.hops[-1].netns == "router"


def test_closed_tcp_port_is_answered_with_rst() -> None:
    c = cluster()
    t = c.trace("pod/default/a", "pod/default/c", "tcp", 9999)
    assert t.verdict == "unreachable"
    assert t.reply is not None and "RST" in t.reply.packet.flags
    assert t.reply.verdict == "delivered"


def test_closed_udp_port_is_answered_with_port_unreachable() -> None:
    c = cluster()
    t = c.trace("pod/default/a", "pod/default/c", "udp", 5353)
    assert t.verdict == "unreachable"
    assert t.reply is not None
    assert (t.reply.packet.icmp_type, t.reply.packet.icmp_code) == (3, 3)
    assert t.reply.verdict == "delivered"


def test_udp_to_a_listener_is_answered() -> None:
    c = cluster()
    t = c.trace("pod/default/a", "pod/default/c", "udp", 53)
    assert t.verdict == "delivered"
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert t.reply.packet.proto == "udp" and t.reply.packet.sport == 53


def test_ping_reports_reply_ttl_and_path() -> None:
    c = cluster()
    res = c.ping("pod/default/a", "pod/default/c", count=3)
    assert [r.seq for r in res] == [1, 2, 3]
    assert all(r.ok for r in res)
    assert res[0].ttl == 62 and res[0].reply_from == C
    assert res[0].path[0] == "pod/default/a" and res[0].path[-1] == "pod/default/c"
    assert "router" in res[0].path
    assert res[0].reply_path[-1] == "pod/default/a"


def test_external_client_reaches_a_node() -> None:
    c = cluster()
    res = c.ping(EXT, "node/n1")
    assert res[0].ok and res[0].ttl == 63  # the router forwards the reply once
    assert res[0].path == (f"ext/{EXT}", "router", "node/n1")


def test_hairpin_off_drops_a_frame_that_would_go_back_out_its_ingress_port() -> None:
    c = cluster()
    # a learnt FDB entry pointing b's MAC at a's port makes the bridge send b's frames back
    host = c.hosts["node/n1"]
    br = host.devices["cni0"]
    a_port = next(p for p in br.ports.values() if p.peer and p.peer.host_name == "pod/default/a")  # type: ignore[attr-defined]
    a_port.hairpin = False
    b_mac = c.hosts["pod/default/b"].devices["eth0"].mac
    c.trace("pod/default/a", "pod/default/b", "tcp", 8080)
    assert br.learn(b_mac, a_port)  # type: ignore[attr-defined]
    t = c.trace("pod/default/a", "pod/default/b", "tcp", 8080)
    assert t.verdict == "DROP"
    assert "hairpin mode is off" in t.reason


def test_unknown_source_ip_is_an_input_error() -> None:
    c = cluster()
    with pytest.raises(InputError, match="external client"):
        c.trace("198.51.100.7", "pod/default/a", "tcp", 8080)


def test_same_seed_gives_the_same_trace() -> None:
    one = cluster(seed=5).trace("pod/default/a", "pod/default/c", "tcp", 8080).to_json()
    two = cluster(seed=5).trace("pod/default/a", "pod/default/c", "tcp", 8080).to_json()
    assert one == two


def test_no_arp_answer_on_the_last_hop_is_host_unreachable() -> None:
    c = cluster()
    t = c.trace("pod/default/a", "10.244.2.99", "tcp", 8080)
    assert t.verdict == "unreachable" and "no ARP reply" in t.reason
    assert t.hops[-1].netns == "node/n2"
    assert t.reply is not None and t.reply.verdict == "delivered"
    assert (t.reply.packet.icmp_type, t.reply.packet.icmp_code) == (3, 1)
    local = c.trace("pod/default/a", "10.244.1.99", "tcp", 8080)
    assert local.verdict == "unreachable" and local.reply is None


def test_trace_all_leaves_the_random_state_alone() -> None:
    one, two = cluster(seed=9), cluster(seed=9)
    one.trace_all("pod/default/a", "pod/default/c", "tcp", 8080)
    assert (
        one.trace("pod/default/a", "pod/default/c", "tcp", 8080).packet
        == two.trace("pod/default/a", "pod/default/c", "tcp", 8080).packet
    )
