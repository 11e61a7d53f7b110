"""The iptables renderer against upstream's expectations and behaviour."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from proxy_builders import (
    CASES,
    apply_noflush,
    endpoint,
    fake_config,
    fake_config_v6,
    service,
    service_sets,
    slice_,
    trace,
)

from dataplane.proxy import naming
from dataplane.proxy.cases import load_case
from dataplane.proxy.iptables import port_text, probability, render_iptables
from dataplane.proxy.normalize import consistency_errors, normalize, parse_tables
from dataplane.proxy.snapshot import build_snapshot
from dataplane.proxy.tracker import ChangeTracker


def render(services, slices, cfg=None, **kw):  # type: ignore[no-untyped-def]
    cfg = cfg or fake_config()
    return render_iptables(build_snapshot(services, slices, cfg), cfg, **kw)


def chain_rules(restore: str, table: str, chain: str) -> list[str]:
    return parse_tables(restore)[table].rules.get(chain, [])


# --------------------------------------------------------------------------- the case


def test_overall_case_matches_upstream_byte_for_byte() -> None:
    case = load_case(CASES / "TestOverallIPTablesRules.yaml")
    snap = build_snapshot(case.services, case.endpointslices, case.node_config)
    out = render_iptables(snap, case.node_config)
    expected = case.raw["expected_iptables_restore"].lstrip(" \t\n")
    assert normalize(out.restore_input) == expected
    assert case.raw["expected_check_consistency"] is True
    assert consistency_errors(out.restore_input) == []


def test_external_traffic_policy_local_case_flows() -> None:
    case = load_case(CASES / "TestExternalTrafficPolicyLocal.yaml")
    snap = build_snapshot(case.services, case.endpointslices, case.node_config)
    restore = render_iptables(snap, case.node_config).restore_input
    flows = case.raw["flows"]
    assert flows
    for flow in flows:
        got = trace(
            restore,
            case.node_config,
            flow["sourceIP"],
            flow["destIP"],
            flow["destPort"],
            flow.get("protocol", "TCP").lower(),
        )
        assert got == (flow["output"], flow["masq"]), flow["name"]


def test_raw_output_is_deterministic_and_declares_before_use() -> None:
    case = load_case(CASES / "TestOverallIPTablesRules.yaml")
    snap = build_snapshot(case.services, case.endpointslices, case.node_config)
    a = render_iptables(snap, case.node_config).restore_input
    b = render_iptables(
        build_snapshot(reversed(case.services), reversed(case.endpointslices), case.node_config),
        case.node_config,
    ).restore_input
    assert a == b
    nat = a[a.index("*nat") :]
    first_rule = nat.index("\n-A ")
    assert nat.rindex("\n:") < first_rule  # chain lines come before every rule
    assert a.endswith(
        '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must '
        'be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\nCOMMIT\n'
    )


# --------------------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (1, "1.0000000000"),
        (2, "0.5000000000"),
        (3, "0.3333333333"),
        (4, "0.2500000000"),
        (6, "0.1666666667"),
        (10, "0.1000000000"),
        (100, "0.0100000000"),
        (1000, "0.0010000000"),
        (10000, "0.0001000000"),
        (100000, "0.0000100000"),
        (100001, "0.0000099999"),
    ],
)
def test_probability_format(n: int, text: str) -> None:
    assert probability(n) == text


def test_probability_rules_count_down_to_unconditional_last() -> None:
    eps = [endpoint(f"10.180.0.{i}") for i in range(1, 5)]
    out = render([service("ns1", "svc1", "172.30.0.41")], [slice_("ns1", "svc1", eps)])
    rules = chain_rules(out.restore_input, "nat", naming.svc_chain("ns1/svc1:p80", "tcp"))
    probs = [r.split("--probability ")[1].split()[0] for r in rules if "--probability" in r]
    assert probs == ["0.2500000000", "0.3333333333", "0.5000000000"]
    assert (
        rules[-1].endswith("-j " + naming.sep_chain("ns1/svc1:p80", "tcp", "10.180.0.4:80"))
        and "statistic" not in rules[-1]
    )


# --------------------------------------------------------------------------- behaviour


def test_no_endpoints_rejects_and_local_policy_drops() -> None:
    svcs = [
        service("ns1", "none", "172.30.0.1"),
        service("ns1", "itp", "172.30.0.2", itp="Local"),
        service(
            "ns1",
            "etp",
            "172.30.0.3",
            type="LoadBalancer",
            etp="Local",
            ports=[("p80", "TCP", 80, 30080)],
            lb_ips=["1.2.3.4"],
        ),
    ]
    slices = [
        slice_("ns1", "itp", [endpoint("10.180.0.2", "other")]),
        slice_("ns1", "etp", [endpoint("10.180.0.3", "other")]),
    ]
    cfg = fake_config()
    out = render(svcs, slices, cfg)
    r = out.restore_input
    assert '"ns1/none:p80 has no endpoints" -m tcp -p tcp -d 172.30.0.1 --dport 80 -j REJECT' in r
    assert (
        '"ns1/itp:p80 has no local endpoints" -m tcp -p tcp -d 172.30.0.2 --dport 80 -j DROP' in r
    )
    assert trace(r, cfg, "10.0.0.5", "172.30.0.1", 80) == ("REJECT", False)
    assert trace(r, cfg, "10.0.0.5", "172.30.0.2", 80) == ("DROP", False)
    # eTP Local without local endpoints: internal traffic works, external is dropped
    assert trace(r, cfg, "10.0.0.5", "172.30.0.3", 80) == ("10.180.0.3:80", False)
    assert trace(r, cfg, "203.0.113.2", "1.2.3.4", 80) == ("DROP", False)
    assert trace(r, cfg, "203.0.113.2", "192.168.0.2", 30080) == ("DROP", False)
    # pods are short-circuited to the cluster-wide endpoints
    assert trace(r, cfg, "10.0.0.5", "1.2.3.4", 80) == ("10.180.0.3:80", False)
    assert consistency_errors(r) == []


def test_internal_traffic_policy_local_uses_only_local_endpoints() -> None:
    cfg = fake_config()
    out = render(
        [service("ns1", "svc1", "172.30.0.41", itp="Local")],
        [slice_("ns1", "svc1", [endpoint("10.180.0.1", "test-node"), endpoint("10.180.0.2")])],
        cfg,
    )
    r = out.restore_input
    svl = naming.svl_chain("ns1/svc1:p80", "tcp")
    assert f"-d 172.30.0.41 --dport 80 -j {svl}" in r
    assert naming.svc_chain("ns1/svc1:p80", "tcp") not in r
    assert trace(r, cfg, "10.0.0.5", "172.30.0.41", 80) == ("10.180.0.1:80", False)
    assert trace(r, cfg, "192.168.0.2", "172.30.0.41", 80) == ("10.180.0.1:80", True)


def test_external_traffic_policy_local_masquerades_only_local_sources() -> None:
    cfg = fake_config()
    svc = service(
        "ns1",
        "svc1",
        "172.30.0.41",
        type="NodePort",
        etp="Local",
        ports=[("p80", "TCP", 80, 3001)],
    )
    eps = slice_("ns1", "svc1", [endpoint("10.180.0.1"), endpoint("10.180.2.1", "test-node")])
    r = render([svc], [eps], cfg).restore_input
    assert trace(r, cfg, "203.0.113.2", "192.168.0.2", 3001) == ("10.180.2.1:80", False)
    assert trace(r, cfg, "192.168.0.2", "192.168.0.2", 3001) == (
        "10.180.0.1:80, 10.180.2.1:80",
        True,
    )
    assert trace(r, cfg, "10.0.0.3", "192.168.0.2", 3001) == ("10.180.0.1:80, 10.180.2.1:80", False)


def test_session_affinity_uses_recent_lists_named_after_endpoint_chains() -> None:
    out = render(
        [service("ns1", "svc1", "172.30.0.41", affinity=300)],
        [slice_("ns1", "svc1", [endpoint("10.180.0.1"), endpoint("10.180.0.2")])],
    )
    svc = naming.svc_chain("ns1/svc1:p80", "tcp")
    rules = chain_rules(out.restore_input, "nat", svc)
    seps = [naming.sep_chain("ns1/svc1:p80", "tcp", f"10.180.0.{i}:80") for i in (1, 2)]
    assert [r for r in rules if "--rcheck" in r] == [
        f'-A {svc} -m comment --comment "ns1/svc1:p80 -> 10.180.0.{i}:80" -m recent --name '
        f"{sep} --rcheck --seconds 300 --reap -j {sep}"
        for i, sep in zip((1, 2), seps, strict=True)
    ]
    for sep in seps:
        assert f"-m recent --name {sep} --set -m tcp -p tcp -j DNAT" in out.restore_input


def test_load_balancer_source_ranges() -> None:
    cfg = fake_config()
    svc = service(
        "ns1",
        "svc1",
        "172.30.0.41",
        type="LoadBalancer",
        lb_ips=["5.6.7.8"],
        ports=[("p80", "TCP", 80, 3002)],
        source_ranges=[" 203.0.113.000/025", "192.168.0.0/16"],
    )
    r = render([svc], [slice_("ns1", "svc1", [endpoint("10.180.0.1")])], cfg).restore_input
    fw = naming.fw_chain("ns1/svc1:p80", "tcp")
    ext = naming.ext_chain("ns1/svc1:p80", "tcp")
    assert chain_rules(r, "nat", fw) == [
        f'-A {fw} -m comment --comment "ns1/svc1:p80 loadbalancer IP" -s 203.0.113.0/25 -j {ext}',
        f'-A {fw} -m comment --comment "ns1/svc1:p80 loadbalancer IP" -s 192.168.0.0/16 -j {ext}',
        # the node IP 192.168.0.2 is inside a range: the VIP itself is allowed too
        f'-A {fw} -m comment --comment "ns1/svc1:p80 loadbalancer IP" -s 5.6.7.8 -j {ext}',
        f'-A {fw} -m comment --comment "other traffic to ns1/svc1:p80 will be dropped by '
        'KUBE-PROXY-FIREWALL"',
    ]
    assert trace(r, cfg, "203.0.113.2", "5.6.7.8", 80) == ("10.180.0.1:80", True)
    assert trace(r, cfg, "203.0.113.130", "5.6.7.8", 80) == ("DROP", False)
    # NodePorts are not subject to source ranges
    assert trace(r, cfg, "203.0.113.130", "192.168.0.2", 3002) == ("10.180.0.1:80", True)


def test_terminating_endpoints_are_a_fallback() -> None:
    cfg = fake_config()
    svc = service(
        "ns1", "svc1", "172.30.0.41", type="NodePort", etp="Local", ports=[("p80", "TCP", 80, 3001)]
    )
    eps = slice_(
        "ns1",
        "svc1",
        [
            endpoint("10.180.0.1", "other"),  # ready, remote
            endpoint("10.180.0.2", "test-node", ready=False, serving=True, terminating=True),
            endpoint("10.180.0.3", "test-node", ready=False, serving=False, terminating=True),
        ],
    )
    r = render([svc], [eps], cfg).restore_input
    # external traffic falls back to the local serving+terminating endpoint
    assert trace(r, cfg, "203.0.113.2", "192.168.0.2", 3001) == ("10.180.0.2:80", False)
    # cluster traffic uses the ready endpoint only
    assert trace(r, cfg, "10.0.0.9", "172.30.0.41", 80) == ("10.180.0.1:80", False)
    assert "10.180.0.3:80" not in r
    assert consistency_errors(r) == []

    only_terminating = slice_(
        "ns1", "svc1", [endpoint("10.180.0.2", "x", ready=False, serving=True, terminating=True)]
    )
    plain = service("ns1", "svc1", "172.30.0.41")
    r2 = render([plain], [only_terminating], cfg).restore_input
    assert trace(r2, cfg, "10.0.0.9", "172.30.0.41", 80) == ("10.180.0.2:80", False)


def test_large_cluster_mode_drops_endpoint_comments() -> None:
    cfg = fake_config(large_cluster_threshold=3)
    eps = [endpoint(f"10.180.0.{i}") for i in range(1, 5)]
    out = render([service("ns1", "svc1", "172.30.0.41")], [slice_("ns1", "svc1", eps)], cfg)
    assert out.large_cluster
    sep = naming.sep_chain("ns1/svc1:p80", "tcp", "10.180.0.1:80")
    assert chain_rules(out.restore_input, "nat", sep) == [
        f"-A {sep} -s 10.180.0.1 -j KUBE-MARK-MASQ",
        f"-A {sep} -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80",
    ]
    svc_rules = chain_rules(out.restore_input, "nat", naming.svc_chain("ns1/svc1:p80", "tcp"))
    assert '"ns1/svc1:p80 cluster IP"' in svc_rules[0]  # the masquerade rule keeps its comment
    assert all("comment" not in r for r in svc_rules[1:])
    small = render([service("ns1", "svc1", "172.30.0.41")], [slice_("ns1", "svc1", eps)])
    assert not small.large_cluster


def test_node_port_addresses_and_localhost() -> None:
    cfg = fake_config(node_port_addresses=("192.168.0.0/24", "127.0.0.0/8", "2001:db8::/64"))
    out = render([], [], cfg).restore_input
    last = [r for r in chain_rules(out, "nat", "KUBE-SERVICES") if "must be the last" in r]
    assert [r.split(" -d ")[1] for r in last] == [
        "127.0.0.1 -j KUBE-NODEPORTS",
        "192.168.0.2 -j KUBE-NODEPORTS",
    ]
    no_localhost = render([], [], fake_config(localhost_node_ports=False)).restore_input
    assert "-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS" in no_localhost
    assert "KUBE-FIREWALL" not in no_localhost


def test_ipv6_render() -> None:
    cfg = fake_config_v6()
    svc = service(
        "ns1", "svc1", "fd00:172:30::41", type="NodePort", ports=[("p80", "TCP", 80, 3001)]
    )
    eps = slice_("ns1", "svc1", [endpoint("fd00:10:180::1")], address_type="IPv6")
    r = render([svc, service("ns1", "v4", "172.30.0.1")], [eps], cfg).restore_input
    sep = naming.sep_chain("ns1/svc1:p80", "tcp", "[fd00:10:180::1]:80")
    assert sep == "KUBE-SEP-OGYCNMB4EMRUSJ6N"
    assert f"-A {sep} -m comment --comment ns1/svc1:p80 -s fd00:10:180::1 -j KUBE-MARK-MASQ" in r
    assert "--to-destination [fd00:10:180::1]:80" in r
    assert "172.30.0.1" not in r  # the IPv4 service belongs to the other proxier
    assert "KUBE-FIREWALL" not in r and "127.0.0.0/8" not in r
    assert "-m addrtype --dst-type LOCAL ! -d ::1/128 -j KUBE-NODEPORTS" in r
    assert trace(r, cfg, "2001:db8::99", "2001:db8::1", 3001) == ("[fd00:10:180::1]:80", True)
    assert consistency_errors(r) == []


def test_masquerade_all_and_no_detector() -> None:
    svc = service("ns1", "svc1", "172.30.0.41")
    eps = slice_("ns1", "svc1", [endpoint("10.180.0.1")])
    chain = naming.svc_chain("ns1/svc1:p80", "tcp")
    masq_all = render([svc], [eps], fake_config(masquerade_all=True)).restore_input
    assert chain_rules(masq_all, "nat", chain)[0].endswith("--dport 80 -j KUBE-MARK-MASQ")
    none = render([svc], [eps], fake_config(local_detector=None)).restore_input
    assert "KUBE-MARK-MASQ" not in chain_rules(none, "nat", chain)[0]


def test_fixed_rules_follow_node_settings() -> None:
    cfg = fake_config(
        masquerade_mark="0x00004000",
        random_fully=True,
        conntrack_tcp_be_liberal=True,
        nfacct_counters=frozenset(),
    )
    r = render([], [], cfg).restore_input
    assert "-j MASQUERADE --random-fully" in r
    assert "--ctstate INVALID" not in r
    assert "-m mark ! --mark 0x00004000/0x00004000 -j RETURN" in r
    assert "nfacct" not in r


# --------------------------------------------------------------------------- syncs


def test_partial_sync_omits_unchanged_services_chains_and_deletes_stale() -> None:
    cfg = fake_config()
    svcs = [service("ns1", "svc1", "172.30.0.41"), service("ns2", "svc2", "172.30.0.42")]
    before = [
        slice_("ns1", "svc1", [endpoint("10.180.0.1"), endpoint("10.180.0.2")]),
        slice_("ns2", "svc2", [endpoint("10.180.1.1")]),
    ]
    full = render(svcs, before, cfg)
    after = [slice_("ns1", "svc1", [endpoint("10.180.0.1")]), before[1]]
    part = render(
        svcs,
        after,
        cfg,
        changed={"ns1/svc1"},
        existing_chains=full.active_chains,
    )
    r = part.restore_input
    svc2 = naming.svc_chain("ns2/svc2:p80", "tcp")
    svc1 = naming.svc_chain("ns1/svc1:p80", "tcp")
    gone = naming.sep_chain("ns1/svc1:p80", "tcp", "10.180.0.2:80")
    assert f":{svc2} " not in r and f"-A {svc2} " not in r
    assert f"-j {svc2}" in r  # KUBE-SERVICES is always rewritten
    assert f":{svc1} - [0:0]" in r
    assert part.stale_chains == (gone,)
    assert f":{gone} - [0:0]" in r and r.index(f"-X {gone}") < r.index("must be the last")
    assert consistency_errors(r, present=full.active_chains) == []
    # the save text describes the whole state, not the partial payload
    assert svc2 in part.save_text and gone not in part.save_text


def test_consistency_check_finds_problems() -> None:
    bad = (
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SVC-A - [0:0]\n"
        ":KUBE-SEP-B - [0:0]\n:KUBE-SVC-C - [0:0]\n"
        "-A KUBE-SERVICES -j KUBE-SVC-A\n-A KUBE-SERVICES -j KUBE-MISSING\n"
        "-A KUBE-UNDECLARED -j ACCEPT\n-A KUBE-SERVICES -j KUBE-SEP-B\n"
        "-A KUBE-SVC-A -j DROP\nCOMMIT\n"
    )
    errors = consistency_errors(bad)
    assert "nat: chain KUBE-SVC-A declared twice" in errors
    assert "nat: KUBE-SERVICES jumps to missing chain KUBE-MISSING" in errors
    assert "nat: rules appended to undeclared chain KUBE-UNDECLARED" in errors
    assert "nat: jumped-to chain KUBE-SEP-B has no rules" in errors
    assert "nat: chain KUBE-SVC-C is declared but never jumped to" in errors


def test_normalize_sorts_like_upstream() -> None:
    text = (
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-NODEPORTS - [0:0]\n:KUBE-B - [0:0]\n:KUBE-A - [0:0]\n"
        '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must '
        'be the last rule in this chain" -j KUBE-NODEPORTS\n'
        '-A KUBE-SERVICES -m comment --comment "ns2/b:p cluster IP" -j KUBE-B\n'
        '-A KUBE-SERVICES -m comment --comment "ns1/a:p cluster IP" -j KUBE-A\n'
        "-X KUBE-OLD\nCOMMIT\n*filter\nCOMMIT\n"
    )
    lines = normalize(text).splitlines()
    assert lines[:2] == ["*filter", "COMMIT"]
    assert lines[3:7] == [
        ":KUBE-NODEPORTS - [0:0]",
        ":KUBE-SERVICES - [0:0]",
        ":KUBE-A - [0:0]",
        ":KUBE-B - [0:0]",
    ]
    assert [ln.split('"')[1][:6] for ln in lines if ln.startswith("-A KUBE-SERVICES")] == [
        "ns1/a:",
        "ns2/b:",
        "kubern",
    ]
    assert lines[-2:] == ["-X KUBE-OLD", "COMMIT"]


# --------------------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(service_sets())
def test_generated_rule_sets_are_consistent(data) -> None:  # type: ignore[no-untyped-def]
    services, slices = data
    for cfg in (fake_config(), fake_config(local_detector=None, masquerade_all=True)):
        out = render(services, slices, cfg)
        assert consistency_errors(out.restore_input) == []
        # the save form can be produced for every rule kube-proxy writes
        assert out.save_text.startswith("*filter\n")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(service_sets())
def test_plain_port_writer_agrees_with_the_general_one(data) -> None:  # type: ignore[no-untyped-def]
    """The renderer writes ClusterIP-only ports with a shorter writer: for every port,
    on every kind of node, its text is the general writer's. Both read the endpoints'
    KUBE-SEP names kept on the endpoints: each is the name hashed from its own port."""
    services, slices = data
    for cfg in (
        fake_config(),
        fake_config(local_detector=None, masquerade_all=True),
        fake_config(local_detector=None),
        fake_config_v6(),
    ):
        for st in build_snapshot(services, slices, cfg):
            for ep in st.endpoints:
                assert ep.chain_name == "KUBE-SEP-" + naming.hash16(
                    st.name.text + st.info.proto + ep.endpoint
                )
            for large in (False, True):
                assert port_text(st, cfg, large=large) == port_text(
                    st, cfg, large=large, general=True
                )


def test_plain_and_general_writers_agree_on_a_cluster_ip_port() -> None:
    """A concrete ClusterIP port with two endpoints (the case the plain writer takes):
    the KUBE-SERVICES rule, the KUBE-SVC chain and two KUBE-SEP chains, the same from
    both writers, with and without large-cluster mode."""
    svc = service("ns1", "svc1", "172.30.0.41", ports=[("p80", "TCP", 80, None)])
    eps = slice_("ns1", "svc1", [endpoint("10.180.0.1"), endpoint("10.180.0.2")])
    cfg = fake_config()
    (st,) = build_snapshot([svc], [eps], cfg)
    for large in (False, True):
        filt, top, chains, rules, active = port_text(st, cfg, large=large)
        assert filt == "" and top.startswith("-A KUBE-SERVICES ") and len(active) == 3
        assert rules.count("-j DNAT --to-destination 10.180.0.") == 2
        assert (filt, top, chains, rules, active) == port_text(st, cfg, large=large, general=True)


def test_plain_and_general_writers_agree_on_a_node_port_port() -> None:
    """A NodePort with cluster-wide policy and seven endpoints (the plain writer's other
    case, more endpoints than the generated sets have): KUBE-SERVICES and
    KUBE-NODEPORTS rules, the KUBE-EXT chain, the same from both writers, with and
    without the localhost NodePort rule and large-cluster mode."""
    svc = service("ns1", "svc1", "172.30.0.41", type="NodePort", ports=[("p80", "UDP", 80, 3001)])
    eps = slice_(
        "ns1",
        "svc1",
        [endpoint(f"10.180.0.{i}") for i in range(1, 8)],
        ports=[("p80", "UDP", 80)],
    )
    for cfg in (fake_config(), fake_config(nfacct_counters=frozenset())):
        for st in build_snapshot([svc], [eps], cfg):
            for large in (False, True):
                filt, top, chains, rules, active = port_text(st, cfg, large=large)
                assert filt == "" and len(active) == 9 and active[0].startswith("KUBE-EXT-")
                assert top.count("-A KUBE-NODEPORTS ") == (2 if cfg.nfacct_counters else 1)
                assert rules.count("-m statistic --mode random") == 6
                assert f"-A {active[0]} -j {active[1]}\n" in rules
                assert (filt, top, chains, rules, active) == port_text(
                    st, cfg, large=large, general=True
                )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(service_sets(max_services=5), service_sets(max_services=5))
def test_partial_syncs_from_the_tracker_reach_the_full_state(before, after) -> None:  # type: ignore[no-untyped-def]
    """Sync 1 renders `before` fully; sync 2 feeds the differences to a ChangeTracker and
    renders only what changed on top. The resulting tables equal a fresh full render."""
    cfg = fake_config()
    tracker = ChangeTracker(cfg)
    for svc in before[0]:
        tracker.update_service(None, svc)
    for eps in before[1]:
        tracker.update_endpoint_slice(None, eps)
    tracker.apply()
    kernel: dict[str, dict[str, list[str]]] = {}
    first = render_iptables(tracker.snapshot, cfg)
    apply_noflush(kernel, first.restore_input)

    old_svcs = {s.key: s for s in before[0]}
    new_svcs = {s.key: s for s in after[0]}
    for key in old_svcs.keys() | new_svcs.keys():
        tracker.update_service(old_svcs.get(key), new_svcs.get(key))
    old_eps = {s.key: s for s in before[1]}
    new_eps = {s.key: s for s in after[1]}
    for key in old_eps.keys() | new_eps.keys():
        tracker.update_endpoint_slice(old_eps.get(key), new_eps.get(key))
    changed = tracker.apply()
    existing = set(kernel["nat"])
    second = render_iptables(tracker.snapshot, cfg, changed=changed, existing_chains=existing)
    naive = {c for c in existing if naming.is_service_chain(c)} - second.active_chains
    assert set(second.stale_chains) == naive
    apply_noflush(kernel, second.restore_input)

    fresh: dict[str, dict[str, list[str]]] = {}
    apply_noflush(fresh, render_objects_full(after, cfg))
    assert kernel == fresh


def render_objects_full(data, cfg) -> str:  # type: ignore[no-untyped-def]
    return render_iptables(build_snapshot(data[0], data[1], cfg), cfg).restore_input


def test_save_text_builtin_chains_as_on_a_real_node() -> None:
    """INPUT/FORWARD/OUTPUT as every kubeadm node's iptables-save shows them (kubelet's
    KUBE-FIREWALL jump was there first, kube-proxy prepended its own above it)."""
    out = render([], [])
    filt = out.save_text.split("*nat")[0]
    got = [ln for ln in filt.splitlines() if ln.startswith(("-A INPUT", "-A FORWARD", "-A OUTPUT"))]
    fw = '-m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL'
    ext = '-m comment --comment "kubernetes externally-visible service portals"'
    svc = '-m comment --comment "kubernetes service portals" -j KUBE-SERVICES'
    assert got == [
        f"-A INPUT -m conntrack --ctstate NEW {fw}",
        '-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
        f"-A INPUT -m conntrack --ctstate NEW {ext} -j KUBE-EXTERNAL-SERVICES",
        "-A INPUT -j KUBE-FIREWALL",
        f"-A FORWARD -m conntrack --ctstate NEW {fw}",
        '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
        f"-A FORWARD -m conntrack --ctstate NEW {svc}",
        f"-A FORWARD -m conntrack --ctstate NEW {ext} -j KUBE-EXTERNAL-SERVICES",
        f"-A OUTPUT -m conntrack --ctstate NEW {fw}",
        f"-A OUTPUT -m conntrack --ctstate NEW {svc}",
        "-A OUTPUT -j KUBE-FIREWALL",
    ]
    assert ":KUBE-PROXY-CANARY - [0:0]" in filt


def test_incremental_syncs_stay_exact_through_a_sequence_of_changes() -> None:
    """The memo patches the previous texts (spliced fragments, stale chains updated by
    difference, positions of services). After every change, the partial payload applied
    to the kernel's chains must give what a full render gives, and the stale chains
    must be the naive difference and what a render from cold caches finds."""
    import random

    from dataplane.proxy import iptables
    from dataplane.proxy.snapshot import make_state, snapshot_from_states

    def cold(*args, **kw):  # type: ignore[no-untyped-def]
        saved = dict(iptables._MEMOS)
        iptables.clear_cache()
        try:
            return render_iptables(*args, **kw)
        finally:
            iptables._MEMOS.clear()
            iptables._MEMOS.update(saved)

    def port(ns: str, name: str, ip: str, eps: int):  # type: ignore[no-untyped-def]
        sl = slice_(ns, name, [endpoint(f"10.181.{k}.{eps}") for k in range(eps)])
        return next(iter(build_snapshot([service(ns, name, ip)], [sl], cfg)))

    rng = random.Random(7)
    cfg = fake_config()
    n = 90
    svcs = [service(f"ns{i % 3}", f"s{i}", f"172.30.0.{i + 1}") for i in range(n)]
    slices = [
        slice_(f"ns{i % 3}", f"s{i}", [endpoint(f"10.180.{i}.{k + 1}") for k in range(1 + i % 4)])
        for i in range(n)
    ]
    iptables.clear_cache()
    snap = build_snapshot(svcs, slices, cfg)
    kernel: dict[str, dict[str, list[str]]] = {}
    apply_noflush(kernel, render_iptables(snap, cfg).restore_input)
    fixed = frozenset(kernel["nat"])  # a caller that does not re-read the kernel
    states = list(snap)
    steps = []
    for step in range(60):
        states = list(states)
        kind = step % 5
        i = rng.randrange(len(states))
        name = states[i].info.name
        changed = {name.service_key}
        if kind in (0, 4):  # an endpoint fewer
            states[i] = make_state(states[i].info, states[i].endpoints[:-1])
        elif kind == 1:  # two ports change at once
            j = rng.randrange(len(states))
            states[i] = make_state(states[i].info, states[i].endpoints[1:])
            other = states[j].info
            states[j] = port(other.name.namespace, other.name.name, other.cluster_ip, step % 3)
            changed.add(other.name.service_key)
        elif kind == 2:  # another Service at the same position (s12 -> s12x)
            states[i] = port(name.namespace, f"{name.name}x", f"172.31.0.{step + 1}", 2)
            changed.add(states[i].info.name.service_key)
        else:  # a Service goes away
            del states[i]
        steps.append((snapshot_from_states(states, cfg), changed))

    # a caller that re-reads the kernel: each payload checked by applying it
    for step, (snap, changed) in enumerate(steps):
        part = render_iptables(snap, cfg, changed=changed, existing_chains=set(kernel["nat"]))
        apply_noflush(kernel, part.restore_input)
        fresh: dict[str, dict[str, list[str]]] = {}
        apply_noflush(fresh, cold(snap, cfg).restore_input)
        assert kernel == fresh, step
        if step % 6 == 5:
            assert render_iptables(snap, cfg).restore_input == cold(snap, cfg).restore_input

    # a caller that does not: stale chains updated by difference
    iptables.clear_cache()
    render_iptables(build_snapshot(svcs, slices, cfg), cfg)
    for step, (snap, changed) in enumerate(steps):
        delete_stale = step % 7 != 3
        kw = {"changed": changed, "existing_chains": fixed, "delete_stale": delete_stale}
        warm = render_iptables(snap, cfg, **kw)  # type: ignore[arg-type]
        naive = {c for c in fixed if naming.is_service_chain(c)} - warm.active_chains
        assert set(warm.stale_chains) == (naive if delete_stale else set()), step
        assert warm.restore_input == cold(snap, cfg, **kw).restore_input, step


def test_partial_syncs_stay_exact_when_other_calls_come_between_them() -> None:
    """A partial render reuses the positions the fragment step replaced only for the
    lists that step made: an active_chains() question or a render without the stale
    scan between two syncs moves the memo on, and the next payload and stale chains
    must still be a cold render's."""
    from dataplane.proxy import iptables
    from dataplane.proxy.iptables import active_chains
    from dataplane.proxy.snapshot import make_state, snapshot_from_states

    def cold(*args, **kw):  # type: ignore[no-untyped-def]
        saved = dict(iptables._MEMOS)
        iptables.clear_cache()
        try:
            return render_iptables(*args, **kw)
        finally:
            iptables._MEMOS.clear()
            iptables._MEMOS.update(saved)

    cfg = fake_config()
    n = 40
    svcs = [service("ns", f"s{i}", f"172.30.1.{i + 1}") for i in range(n)]
    slices = [
        slice_("ns", f"s{i}", [endpoint(f"10.182.{i}.{k + 1}") for k in range(2 + i % 3)])
        for i in range(n)
    ]
    iptables.clear_cache()
    snap = build_snapshot(svcs, slices, cfg)
    existing = render_iptables(snap, cfg).active_chains
    states = list(snap)
    for step in range(24):
        i = (step * 7) % n
        states[i] = make_state(states[i].info, states[i].endpoints[: 1 + step % 2])
        snap = snapshot_from_states(states, cfg)
        changed = {states[i].info.name.service_key}
        if step % 3 == 1:
            assert active_chains(snap, cfg) == cold(snap, cfg).active_chains, step
        if step % 4 == 2:
            render_iptables(snap, cfg, changed=changed, delete_stale=False)
        kw = {"changed": changed, "existing_chains": existing}
        warm = render_iptables(snap, cfg, **kw)  # type: ignore[arg-type]
        fresh = cold(snap, cfg, **kw)
        assert warm.restore_input == fresh.restore_input, step
        assert warm.stale_chains == fresh.stale_chains, step
