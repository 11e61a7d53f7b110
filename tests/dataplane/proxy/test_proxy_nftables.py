"""The nftables renderer against upstream's TestOverallNFTablesRules dump."""

from __future__ import annotations

from proxy_builders import CASES, endpoint, fake_config, fake_config_v6, service, slice_

from dataplane.proxy.cases import load_case
from dataplane.proxy.nftables import render_nftables
from dataplane.proxy.normalize import normalize_listing, normalize_transaction
from dataplane.proxy.snapshot import build_snapshot


def test_overall_case_matches_upstream_nft_dump() -> None:
    case = load_case(CASES / "TestOverallIPTablesRules.yaml")
    # the nftables fake proxier differs from the iptables one: the case's nftables.node
    cfg = case.nftables_config
    assert cfg.node_port_addresses == ("192.168.0.2/32", "2001:db8::1/128")
    assert cfg.service_cidrs == ("172.30.0.0/16",)
    out = render_nftables(build_snapshot(case.services, case.endpointslices, cfg), cfg)
    expected = case.raw["nftables"]["expected_nft_transaction"]
    assert normalize_transaction(out.restore_input) == normalize_transaction(expected)


def test_transaction_creates_before_use_and_flushes_what_it_rewrites() -> None:
    cfg = fake_config()
    svc = service("ns1", "svc1", "172.30.0.41", affinity=60)
    out = render_nftables(
        build_snapshot([svc], [slice_("ns1", "svc1", [endpoint("10.0.0.1")])], cfg), cfg
    )
    lines = out.restore_input.splitlines()
    first_rule = next(i for i, ln in enumerate(lines) if ln.startswith("add rule"))
    assert all(
        not ln.startswith(("add chain", "add set", "add map"))
        for ln in lines[first_rule:]
        if "nodeport-ips" not in ln
    )
    assert "flush map ip kube-proxy service-ips" in lines
    assert not any(ln.startswith("flush set ip kube-proxy affinity-") for ln in lines)
    # match-all NodePorts: no node IP set (added and deleted, so it is gone in any
    # case), fib-based matching without localhost
    assert (
        "add rule ip kube-proxy services fib daddr type local ip daddr != 127.0.0.0/8 "
        "meta l4proto . th dport vmap @service-nodeports" in lines
    )
    assert (
        "add rule ip kube-proxy nodeport-endpoints-check ip daddr != 127.0.0.0/8 "
        "meta l4proto . th dport vmap @no-endpoint-nodeports" in lines
    )
    assert lines[-2:] == [
        'add set ip kube-proxy nodeport-ips { type ipv4_addr ; comment "IPs that accept '
        'NodePort traffic" ; }',
        "delete set ip kube-proxy nodeport-ips",
    ]
    assert all(s.name != "nodeport-ips" for s in out.sets)


def test_partial_sync_and_stale_objects() -> None:
    cfg = fake_config()
    svcs = [service("ns1", "a", "172.30.0.1", affinity=60), service("ns1", "b", "172.30.0.2")]
    eps1 = [
        slice_("ns1", "a", [endpoint("10.0.0.1"), endpoint("10.0.0.2")]),
        slice_("ns1", "b", [endpoint("10.0.1.1")]),
    ]
    full = render_nftables(build_snapshot(svcs, eps1, cfg), cfg)
    existing = [c.name for c in full.chains] + [s.name for s in full.sets]
    eps2 = [slice_("ns1", "a", [endpoint("10.0.0.1")]), eps1[1]]
    part = render_nftables(
        build_snapshot(svcs, eps2, cfg), cfg, changed={"ns1/a"}, existing_chains=existing
    )
    text = part.restore_input
    assert "ns1/b/tcp/p80" not in "".join(
        ln for ln in text.splitlines() if ln.startswith(("add chain", "add rule"))
    )
    assert any("ns1/b/tcp/p80" in ln for ln in text.splitlines() if "add element" in ln)
    assert [n.split("-", 1)[0] for n in part.stale] == ["affinity", "endpoint"]
    assert text.rstrip().splitlines()[-1].startswith("delete ")


def test_local_policy_ipv6_and_no_endpoints() -> None:
    cfg = fake_config_v6()
    svcs = [
        service(
            "ns1",
            "svc1",
            "fd00:172:30::41",
            type="NodePort",
            etp="Local",
            ports=[("p80", "TCP", 80, 3001)],
        ),
        service("ns1", "none", "fd00:172:30::42", itp="Local"),
    ]
    eps = slice_(
        "ns1",
        "svc1",
        [endpoint("fd00:10::1", "test-node"), endpoint("fd00:10::2")],
        address_type="IPv6",
    )
    out = render_nftables(build_snapshot(svcs, [eps], cfg), cfg)
    text = out.restore_input
    assert "add table ip6 kube-proxy" in text
    assert "ip6 saddr fd00:10::/64 goto service-" in text
    assert "meta l4proto tcp dnat to [fd00:10::1]:80" in text
    local = [ln for ln in text.splitlines() if ln.startswith("add rule ip6 kube-proxy local-")]
    assert len(local) == 1 and "numgen random mod 1" in local[0]
    assert 'fd00:172:30::42 . tcp . 80 comment "ns1/none:p80" : goto reject-chain' in text


def test_listing_normalisation_ignores_wrapping_and_element_order() -> None:
    a = "table ip t {\n\tset s {\n\t\telements = { 1.1.1.1, 2.2.2.2,\n\t\t\t3.3.3.3 }\n\t}\n}\n"
    b = "table ip t {\n  set s {\n    elements = { 3.3.3.3, 1.1.1.1, 2.2.2.2 }\n  }\n}\n"
    assert normalize_listing(a) == normalize_listing(b)
    assert normalize_listing(a) != normalize_listing(b.replace("3.3.3.3", "4.4.4.4"))
