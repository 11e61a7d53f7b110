"""Naming, the snapshot builders, node config defaults and the change tracker."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from proxy_builders import endpoint, fake_config, service, slice_

from dataplane.proxy import naming
from dataplane.proxy.model import IPFamily, LocalDetector, ServicePortName
from dataplane.proxy.snapshot import build_node_config, build_snapshot
from dataplane.proxy.tracker import ChangeTracker
from netmodel.cluster import ClusterSpec
from netmodel.proxyconfig import KubeProxyConfiguration

# --------------------------------------------------------------------------- naming


@pytest.mark.parametrize(
    ("spn", "proto", "ep", "chain"),
    [
        ("ns1/svc1:p80", "tcp", None, "KUBE-SVC-XPGD46QRK7WJZT7O"),
        ("ns5/svc5:p80", "tcp", None, "KUBE-SVC-NUKIZ6OKUXPJNT4C"),
        ("ns4/svc4:p80", "tcp", "10.180.0.4:80", "KUBE-SEP-UKSFD7AGPMPPLUHC"),
        ("ns4/svc4:p8082", "tcp", None, "KUBE-SVC-EBDQOQU5SJFXRIL3"),
        ("ns1/svc1", "tcp", None, "KUBE-SVC-AQI2S6QIMU7PVVRP"),
        ("ns1/svc1:p80", "tcp", "[fd00:10:180::1]:80", "KUBE-SEP-OGYCNMB4EMRUSJ6N"),
        ("ns1/svc1:p80", "tcp", "10.180.0.1:80", "KUBE-SEP-SXIVWICOYRO3J4NJ"),
        ("ns2/svc2:p80", "tcp", None, "KUBE-SVC-GNZBNJ2PO5MGZ6GT"),
        ("ns2/svc2:p8080", "tcp", None, "KUBE-SVC-2VJB64SDSIJUP5T6"),
        ("ns1/svc1:p80", "tcp", "10.0.0.0:80", "KUBE-SEP-DKGQUZGBKLTPAR56"),
        ("ns3/svc3:p8081", "tcp", "203.0.113.4:8081", "KUBE-SEP-RUVVH7YV3PHQBDOS"),
    ],
)
def test_iptables_chain_names(spn: str, proto: str, ep: str | None, chain: str) -> None:
    got = naming.sep_chain(spn, proto, ep) if ep else naming.svc_chain(spn, proto.upper())
    assert got == chain
    assert len(got) <= 28


def test_service_chains_share_one_hash() -> None:
    names = [
        f(("ns5/svc5:p80"), "TCP")
        for f in (naming.svc_chain, naming.svl_chain, naming.ext_chain, naming.fw_chain)
    ]
    assert names == [f"KUBE-{p}-NUKIZ6OKUXPJNT4C" for p in ("SVC", "SVL", "EXT", "FW")]
    assert all(naming.is_service_chain(n) for n in names)
    assert not naming.is_service_chain("KUBE-SERVICES")


def test_nftables_names() -> None:
    assert naming.nft_service_base("ns1", "svc1", "TCP", "p80") == "ULMVA6XW-ns1/svc1/tcp/p80"
    assert (
        naming.nft_endpoint_base("ns1", "svc1", "tcp", "p80", "10.180.0.1", 80)
        == "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
    )
    assert naming.nft_endpoint_base("ns5", "svc5", "tcp", "p80", "10.180.0.3", 80).startswith(
        "GTK6MW7G-"
    )
    v6 = naming.nft_endpoint_base(
        "testing", "service", "tcp", "http", "fd80:abcd:12::a1b2:c3d4:e5f6:9999", 80
    )
    assert v6 == "U7E2ET36-testing/service/tcp/http__fd80.abcd.12..a1b2.c3d4.e5f6.9999/80"
    long = naming.hash_and_truncate("n/" + "x" * 300)
    assert len(long) == 240 and long.endswith("...")


# --------------------------------------------------------------------------- snapshot


def test_endpoints_are_deduplicated_sorted_and_sloppily_parsed() -> None:
    cfg = fake_config()
    svc = service("ns1", "svc1", "172.30.0.041", ports=[("p22", "TCP", 22, None)])
    a = slice_(
        "ns1",
        "svc1",
        [endpoint("10.2.2.2"), endpoint("10.2.2.22"), endpoint("010.2.2.3"), endpoint("bad")],
        name="a",
        ports=[("p22", "TCP", 22)],
    )
    b = slice_(
        "ns1", "svc1", [endpoint("10.2.2.2", "test-node")], name="b", ports=[("p22", "TCP", 22)]
    )
    snap = build_snapshot([svc], [a, b], cfg)
    (st,) = snap
    assert st.info.cluster_ip == "172.30.0.41"
    assert [e.endpoint for e in st.endpoints] == ["10.2.2.22:22", "10.2.2.2:22", "10.2.2.3:22"]
    assert [e.is_local for e in st.endpoints] == [False, True, False]  # local copy wins
    assert snap.total_endpoints == 3


def test_services_skipped_or_filtered_like_upstream() -> None:
    cfg = fake_config()
    svcs = [
        service("ns", "headless", "None"),
        service("ns", "empty", ""),
        service("ns", "v6", "fd00::1"),
        service("ns", "bad", "not-an-ip"),
        service(
            "ns",
            "lb",
            "172.30.0.9",
            type="LoadBalancer",
            external_ips=["192.168.99.033", "2001:db8::9", "x"],
            lb_ips=["1.2.3.4", "2001:db8::4"],
            source_ranges=[" 203.0.113.5/25", "2001:db8::/64", "junk"],
            ports=[("p", "TCP", 80, None), ("q", "ICMP", 1, None)],
        ),
    ]
    snap = build_snapshot(svcs, [], cfg)
    assert [str(n) for n in snap.ports] == ["ns/lb:p"]
    info = next(iter(snap)).info
    assert info.external_ips == ("192.168.99.33",)
    assert info.load_balancer_vips == ("1.2.3.4",)
    assert info.load_balancer_source_ranges == ("203.0.113.0/25",)


def test_proxy_mode_load_balancer_ips_follow_the_feature_gate() -> None:
    svc = service("ns", "lb", "172.30.0.9", type="LoadBalancer")
    svc = svc.evolve(
        status=svc.status.model_validate(
            {"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "ipMode": "Proxy"}, {"ip": "5.6.7.8"}]}}
        )
    )
    on = next(iter(build_snapshot([svc], [], fake_config()))).info
    off = next(iter(build_snapshot([svc], [], fake_config(load_balancer_ip_mode=False)))).info
    assert on.load_balancer_vips == ("5.6.7.8",)
    assert off.load_balancer_vips == ("1.2.3.4", "5.6.7.8")


def test_unnamed_port_and_derived_flags() -> None:
    svc = service(
        "ns1", "svc1", "172.30.0.41", type="NodePort", etp="Local", ports=[("", "TCP", 80, 3001)]
    )
    eps = slice_("ns1", "svc1", [endpoint("10.0.0.1", "other")], ports=[("", "TCP", 8080)])
    st = next(iter(build_snapshot([svc], [eps], fake_config())))
    assert str(st.name) == "ns1/svc1"
    assert st.svc_chain == "KUBE-SVC-AQI2S6QIMU7PVVRP"
    assert st.has_endpoints and st.has_internal_endpoints and not st.has_external_endpoints
    assert st.uses_external_chain and st.uses_cluster_chain and not st.uses_local_chain
    assert st.external_filter == ("DROP", "ns1/svc1 has no local endpoints")


def test_build_node_config_defaults() -> None:
    spec = ClusterSpec(pod_cidr="10.244.0.0/16")
    cfg = build_node_config(None, spec, "node-1", ["172.18.0.2"], "10.244.1.0/24")
    assert cfg.local_detector == LocalDetector("ClusterCIDR", "10.244.0.0/16")
    assert cfg.node_ips == ("127.0.0.1", "::1", "172.18.0.2")
    assert cfg.primary_ip == "172.18.0.2" and cfg.ip_family is IPFamily.IPV4
    assert cfg.masquerade_mark == "0x00004000"
    assert cfg.service_cidrs == ("10.96.0.0/12",)
    assert cfg.ipvs_scheduler == "rr"

    off = KubeProxyConfiguration(cluster_cidr="")
    assert build_node_config(off, spec, "n", ["172.18.0.2"], None).local_detector is None

    node_cidr = KubeProxyConfiguration(detect_local_mode="NodeCIDR")
    got = build_node_config(node_cidr, spec, "n", ["172.18.0.2"], "10.244.1.0/24")
    assert got.local_detector == LocalDetector("NodeCIDR", "10.244.1.0/24")

    custom = KubeProxyConfiguration.model_validate(
        {
            "clusterCIDR": "10.0.0.0/8,fd00::/48",
            "iptables": {"masqueradeBit": 15, "masqueradeAll": True},
            "ipvs": {"scheduler": "wrr"},
            "nodePortAddresses": ["primary"],
        }
    )
    c = build_node_config(custom, spec, "n", ["172.18.0.2", "fd01::2"], None)
    assert c.local_detector == LocalDetector("ClusterCIDR", "10.0.0.0/8")
    assert c.masquerade_mark == "0x00008000" and c.masquerade_all
    assert c.ipvs_scheduler == "wrr"
    assert c.node_port_addresses == ("172.18.0.2/32", "fd01::2/128")
    v6 = build_node_config(
        custom, spec, "n", ["172.18.0.2", "fd01::2"], None, ip_family=IPFamily.IPV6
    )
    assert v6.primary_ip == "fd01::2" and v6.local_detector == LocalDetector(
        "ClusterCIDR", "fd00::/48"
    )


# --------------------------------------------------------------------------- tracker


def test_tracker_drops_no_op_updates_and_reports_changed_ports() -> None:
    tr = ChangeTracker(fake_config())
    svc = service(
        "ns1", "svc1", "172.30.0.41", ports=[("a", "TCP", 80, None), ("b", "UDP", 53, None)]
    )
    eps = slice_("ns1", "svc1", [endpoint("10.0.0.1")], ports=[("a", "TCP", 80)])
    assert tr.update_service(None, svc)
    assert tr.update_endpoint_slice(None, eps)
    changed = tr.apply()
    assert changed == {
        ServicePortName("ns1", "svc1", "a", "TCP"),
        ServicePortName("ns1", "svc1", "b", "UDP"),
    }
    assert len(tr.snapshot) == 2 and tr.snapshot.total_endpoints == 1

    relabelled = svc.with_meta(labels={"x": "y"})
    assert not tr.update_service(svc, relabelled)  # nothing kube-proxy reads changed
    same = eps.with_meta(resource_version="7")
    assert not tr.update_endpoint_slice(eps, same)
    assert tr.pending() == frozenset() and tr.apply() == set()

    # add then delete within one sync: nothing to do
    other = service("ns2", "svc2", "172.30.0.42")
    assert tr.update_service(None, other)
    assert not tr.update_service(other, None)
    assert tr.apply() == set()

    moved = eps.evolve(endpoints=[eps.endpoints[0].evolve(addresses=["10.0.0.2"])])
    assert tr.update_endpoint_slice(same, moved)
    assert tr.apply() == {ServicePortName("ns1", "svc1", "a", "TCP")}
    (a, _) = tr.snapshot
    assert [e.endpoint for e in a.endpoints] == ["10.0.0.2:80"]

    assert tr.update_service(relabelled, None)
    assert tr.apply() == {
        ServicePortName("ns1", "svc1", "a", "TCP"),
        ServicePortName("ns1", "svc1", "b", "UDP"),
    }
    assert len(tr.snapshot) == 0


def test_tracker_snapshot_equals_a_fresh_build() -> None:
    cfg = fake_config()
    svcs = [service("ns1", f"s{i}", f"172.30.0.{i}") for i in range(1, 5)]
    slices = [slice_("ns1", f"s{i}", [endpoint(f"10.0.0.{i}")]) for i in range(1, 5)]
    tr = ChangeTracker(cfg)
    for s in svcs:
        tr.update_service(None, s)
    for e in reversed(slices):
        tr.update_endpoint_slice(None, e)
    tr.apply()
    fresh = build_snapshot(svcs, slices, cfg)
    assert list(tr.snapshot.ports.items()) == list(fresh.ports.items())


@given(st.text(max_size=300))
def test_fast_base32_equals_the_standard_encoding(text: str) -> None:
    full = base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()
    assert naming.hash16(text) == full[:16]
    expected = f"{full[:8]}-{text}"
    if len(expected) > 240:
        expected = expected[:237] + "..."
    assert naming.hash_and_truncate(text) == expected


@given(st.text(max_size=100), st.sampled_from(["TCP", "udp", "SCTP"]), st.text(max_size=60))
def test_endpoint_chain_hash_equals_the_standard_encoding(
    port_name: str, protocol: str, endpoint: str
) -> None:
    """sep_chain hashes without hash16's memo; the name is the standard one."""
    text = port_name + protocol.lower() + endpoint
    full = base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()
    assert naming.sep_chain(port_name, protocol, endpoint) == "KUBE-SEP-" + full[:16]


def test_endpoints_carry_their_chain_names() -> None:
    """Each EndpointInfo holds its KUBE-SEP name for its own service port (two ports of
    one slice give one address two names), the name upstream computes."""
    svc = service("ns4", "svc4", "172.30.0.44", ports=[("p80", "TCP", 80, None)])
    eps = slice_(
        "ns4",
        "svc4",
        [endpoint("10.180.0.4"), endpoint("10.180.0.5")],
        ports=[("p80", "TCP", 80), ("p81", "UDP", 81)],
    )
    svc2 = service(
        "ns4", "svc4", "172.30.0.44", ports=[("p80", "TCP", 80, None), ("p81", "UDP", 81, None)]
    )
    (st,) = build_snapshot([svc], [eps], fake_config())
    assert st.endpoints[0].chain_name == "KUBE-SEP-UKSFD7AGPMPPLUHC"
    assert st.sep_chain(st.endpoints[0]) == "KUBE-SEP-UKSFD7AGPMPPLUHC"
    a, b = build_snapshot([svc2], [eps], fake_config())
    for state in (a, b):
        for ep in state.endpoints:
            assert ep.chain_name == "KUBE-SEP-" + naming.hash16(
                state.name.text + state.info.proto + ep.endpoint
            )
    assert a.endpoints[0].chain_name != b.endpoints[0].chain_name


def test_topology_aware_routing_uses_zone_hints() -> None:
    from netmodel.manifests import load_text

    docs = """
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: ns1
  annotations: {service.kubernetes.io/topology-mode: Auto}
spec:
  clusterIP: 172.30.0.9
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: ns1
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [10.0.0.1]
  hints: {forZones: [{name: zone-a}]}
- addresses: [10.0.0.2]
  hints: {forZones: [{name: zone-b}]}
ports: [{name: http, port: 8080, protocol: TCP}]
"""
    objs = load_text(docs).objects
    svcs = [o for o in objs if o.kind == "Service"]
    slices = [o for o in objs if o.kind == "EndpointSlice"]
    in_a = next(iter(build_snapshot(svcs, slices, fake_config(zone="zone-a"))))  # type: ignore[arg-type]
    assert [e.endpoint for e in in_a.reachable_endpoints] == ["10.0.0.1:8080"]
    assert [e.endpoint for e in in_a.endpoints] == ["10.0.0.1:8080", "10.0.0.2:8080"]
    # a node without a zone, or a zone no endpoint is hinted for, uses every endpoint
    for zone in ("", "zone-c"):
        st = next(iter(build_snapshot(svcs, slices, fake_config(zone=zone))))  # type: ignore[arg-type]
        assert len(st.reachable_endpoints) == 2
    labels = {"topology.kubernetes.io/zone": "zone-b"}
    cfg = build_node_config(None, None, "n", ["172.18.0.2"], None, node_labels=labels)
    assert cfg.zone == "zone-b"
