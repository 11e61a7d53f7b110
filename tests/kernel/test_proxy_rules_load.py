"""The rendered kube-proxy rules load into the real kernel and read back as rendered.

Back end: ``iptables`` / ``ip6tables`` on this machine are iptables-nft 1.8.x, so these
tests exercise the nf_tables back end (not legacy libiptc). Each test works in a fresh
``svclab-`` namespace that is always removed.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dataplane" / "proxy"))
from proxy_builders import (
    CASES,
    endpoint,
    fake_config,
    fake_config_v6,
    service,
    service_sets,
    slice_,
)

from dataplane.linux import netns as ns
from dataplane.linux.netns import run_in
from dataplane.proxy import render
from dataplane.proxy.cases import load_case
from dataplane.proxy.iptables import IptablesRender, render_iptables
from dataplane.proxy.ipvs import IpvsRender
from dataplane.proxy.model import NodeProxyConfig
from dataplane.proxy.nftables import NftablesRender, NftChain, listing
from dataplane.proxy.normalize import normalize, normalize_listing, parse_tables
from dataplane.proxy.savefmt import save_form
from dataplane.proxy.snapshot import build_snapshot
from dataplane.proxy.tracker import ChangeTracker

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not ns.is_root(), reason="needs root"),
    pytest.mark.skipif(shutil.which("iptables-restore") is None, reason="needs iptables"),
]

# Creates nfacct objects (what kube-proxy does at start-up) over raw nfnetlink, so that
# the "-m nfacct" matches load. Runs inside the namespace through `ip netns exec`.
NFACCT_ADD = r"""
import socket, struct, sys
for name in sys.argv[1:]:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)
    nb = name.encode() + b"\0"
    attr = struct.pack("HH", 4 + len(nb), 1) + nb
    attr += b"\0" * (-len(attr) % 4)
    body = struct.pack("BBH", 0, 0, 0) + attr
    s.send(struct.pack("IHHII", 16 + len(body), 7 << 8, 0x1 | 0x4 | 0x400, 1, 0) + body)
    err = struct.unpack("i", s.recv(4096)[16:20])[0]
    if err not in (0, -17):
        raise SystemExit(f"nfacct {name}: errno {-err}")
"""


def _tools(cfg: NodeProxyConfig) -> tuple[str, str]:
    return (
        ("ip6tables-restore", "ip6tables-save")
        if cfg.is_ipv6
        else (
            "iptables-restore",
            "iptables-save",
        )
    )


def load(netns: str, out: IptablesRender, *, fresh: bool = True) -> str:
    """Apply one sync as kube-proxy would; return iptables-save -t filter + -t nat."""
    restore, save = _tools(out.config)
    if fresh:
        if out.config.nfacct_counters:
            run_in(netns, [sys.executable, "-c", NFACCT_ADD, *sorted(out.config.nfacct_counters)])
        run_in(netns, [restore, "--noflush"], input=out.ensure_input())
    run_in(netns, [restore, "--noflush"], input=out.restore_input)
    text = "".join(run_in(netns, [save, "-t", t]).stdout for t in ("filter", "nat"))
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))


def _user_rules(save_text: str) -> str:
    """Both sides normalised (§1.5) after dropping built-in chains and the canary."""
    keep = []
    for line in save_text.splitlines():
        if line.startswith(":") and " ACCEPT " in line:
            continue
        if line.split(" ")[:2] in (
            ["-A", c] for c in ("INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING")
        ):
            continue
        if "KUBE-PROXY-CANARY" in line:
            continue
        keep.append(line)
    return normalize("\n".join(keep) + "\n")


def test_overall_case_loads_and_reads_back(netns: str) -> None:
    case = load_case(CASES / "TestOverallIPTablesRules.yaml")
    snap = build_snapshot(case.services, case.endpointslices, case.node_config)
    out = render_iptables(snap, case.node_config)
    got = load(netns, out)
    assert got == out.save_text
    # and the same comparison after normalising both sides: the restore payload in
    # save form against what the kernel holds
    payload = parse_tables(out.restore_input)
    canon = "".join(
        f"*{t.name}\n"
        + "".join(f":{c} - [0:0]\n" for c in t.declared)
        + "".join(save_form(r) + "\n" for c in t.declared for r in t.rules[c])
        + "COMMIT\n"
        for t in payload.values()
    )
    assert _user_rules(got) == normalize(canon)


def test_real_node_settings_load(netns: str) -> None:
    cfg = fake_config(masquerade_mark="0x00004000", random_fully=True)
    svcs = [
        service(
            "ns1",
            "web",
            "172.30.0.41",
            type="LoadBalancer",
            etp="Local",
            hcnp=31000,
            ports=[("http", "TCP", 80, 30080), ("dns", "UDP", 53, 30053)],
            lb_ips=["5.6.7.8"],
            source_ranges=["203.0.113.0/25"],
            affinity=600,
        ),
        service("ns1", "sctp", "172.30.0.42", ports=[("s", "SCTP", 9, None)], itp="Local"),
    ]
    slices = [
        slice_(
            "ns1",
            "web",
            [endpoint("10.180.0.1", "test-node"), endpoint("10.180.0.2")],
            ports=[("http", "TCP", 8080), ("dns", "UDP", 5353)],
        ),
        slice_("ns1", "sctp", [endpoint("10.180.0.3", "test-node")], ports=[("s", "SCTP", 9)]),
    ]
    out = render_iptables(build_snapshot(svcs, slices, cfg), cfg)
    assert load(netns, out) == out.save_text


def test_ipv6_loads(netns: str) -> None:
    cfg = fake_config_v6()
    svc = service(
        "ns1",
        "svc1",
        "fd00:172:30::41",
        type="NodePort",
        ports=[("p80", "TCP", 80, 3001)],
        affinity=60,
    )
    eps = slice_(
        "ns1", "svc1", [endpoint("fd00:10:180::1"), endpoint("fd00:10:180::2")], address_type="IPv6"
    )
    out = render_iptables(build_snapshot([svc], [eps], cfg), cfg)
    assert load(netns, out) == out.save_text


def test_partial_sync_on_top_of_a_full_one(netns: str) -> None:
    cfg = fake_config()
    svcs = [service("ns1", "a", "172.30.0.1"), service("ns1", "b", "172.30.0.2")]
    eps1 = [
        slice_("ns1", "a", [endpoint("10.180.0.1"), endpoint("10.180.0.2")]),
        slice_("ns1", "b", [endpoint("10.180.1.1")]),
    ]
    full = render_iptables(build_snapshot(svcs, eps1, cfg), cfg)
    assert load(netns, full) == full.save_text
    existing = {
        c
        for c in parse_tables(run_in(netns, ["iptables-save", "-t", "nat"]).stdout)["nat"].declared
    }
    eps2 = [slice_("ns1", "a", [endpoint("10.180.0.3")]), eps1[1]]
    part = render_iptables(
        build_snapshot(svcs, eps2, cfg), cfg, changed={"ns1/a"}, existing_chains=existing
    )
    assert part.partial and len(part.stale_chains) == 2
    assert load(netns, part, fresh=False) == part.save_text


def test_nftables_text_loads_and_reads_back(netns: str) -> None:
    if shutil.which("nft") is None:
        pytest.skip("needs nft")
    case = load_case(CASES / "TestOverallIPTablesRules.yaml")
    cfg = case.node_config
    out = render("nftables", build_snapshot(case.services, case.endpointslices, cfg), cfg)
    run_in(netns, ["nft", "-f", "-"], input=out.restore_input)
    listed = run_in(netns, ["nft", "list", "ruleset"]).stdout
    assert normalize_listing(listed) == normalize_listing(out.save_text)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(service_sets(max_services=4))
def test_generated_rule_sets_load(data) -> None:  # type: ignore[no-untyped-def]
    services, slices = data
    cfg = fake_config()
    out = render_iptables(build_snapshot(services, slices, cfg), cfg)
    nft = render("nftables", build_snapshot(services, slices, cfg), cfg)
    with ns.temporary("t") as name:
        assert load(name, out) == out.save_text
    with ns.temporary("t") as name:
        run_in(name, ["nft", "-f", "-"], input=nft.restore_input)
        listed = run_in(name, ["nft", "list", "ruleset"]).stdout
        assert normalize_listing(listed) == normalize_listing(nft.save_text)


def test_nftables_ipv6_and_resync(netns: str) -> None:
    cfg = fake_config_v6()
    svcs = [
        service(
            "ns1",
            "a",
            "fd00:172:30::41",
            type="LoadBalancer",
            etp="Local",
            ports=[("p80", "TCP", 80, 3001)],
            lb_ips=["2001:db8:99::1"],
            source_ranges=["2001:db8::/32", "fd00:1::/64"],
            affinity=90,
        ),
        service("ns1", "b", "fd00:172:30::42", itp="Local"),
    ]
    eps = [
        slice_(
            "ns1",
            "a",
            [endpoint("fd00:10::1", "test-node"), endpoint("fd00:10::2")],
            address_type="IPv6",
        )
    ]
    out = render("nftables", build_snapshot(svcs, eps, cfg), cfg)
    run_in(netns, ["nft", "-f", "-"], input=out.restore_input)
    run_in(netns, ["nft", "-f", "-"], input=out.restore_input)  # a re-sync is idempotent
    listed = run_in(netns, ["nft", "list", "ruleset"]).stdout
    assert normalize_listing(listed) == normalize_listing(out.save_text)


def test_ipvs_ipsets_and_glue_load(netns: str) -> None:
    if shutil.which("ipset") is None:
        pytest.skip("needs ipset")
    case = load_case(CASES / "TestOverallIPTablesRules.yaml")
    cfg = replace(case.node_config, node_port_addresses=(), random_fully=True)
    out = render("ipvs", build_snapshot(case.services, case.endpointslices, cfg), cfg)
    assert isinstance(out, IpvsRender)

    # this kernel has no IPVS, so the one "-m ipvs" rule (node access to svc5's LB IP,
    # whose source range excludes the node) cannot load: leave it out on both sides
    def no_ipvs_match(text: str) -> str:
        return "".join(ln + "\n" for ln in text.splitlines() if " -m ipvs " not in ln)

    assert " -m ipvs " in out.restore_input
    run_in(netns, ["ipset", "restore"], input=out.ipset_text)
    run_in(netns, ["iptables-restore", "--noflush"], input=out.ensure_input())
    run_in(netns, ["iptables-restore", "--noflush"], input=no_ipvs_match(out.restore_input))
    text = "".join(run_in(netns, ["iptables-save", "-t", t]).stdout for t in ("filter", "nat"))
    got = "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))
    assert got == no_ipvs_match(out.iptables_save_text)
    saved = run_in(netns, ["ipset", "save"]).stdout
    kernel = {ln for ln in saved.splitlines() if ln.startswith("add ")}
    assert kernel == {ln for ln in out.ipset_text.splitlines() if ln.startswith("add ")}


def _track(tracker: ChangeTracker, before: tuple, after: tuple) -> set:  # type: ignore[type-arg]
    """Feed the differences between two (services, slices) states; apply."""
    for old_objs, new_objs, update in (
        (before[0], after[0], tracker.update_service),
        (before[1], after[1], tracker.update_endpoint_slice),
    ):
        old = {o.key: o for o in old_objs}
        new = {o.key: o for o in new_objs}
        for key in old.keys() | new.keys():
            update(old.get(key), new.get(key))  # type: ignore[operator]
    return tracker.apply()


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(service_sets(max_services=4), service_sets(max_services=4))
def test_partial_syncs_in_the_kernel_reach_the_full_state(before, after) -> None:  # type: ignore[no-untyped-def]
    cfg = fake_config()
    empty: tuple = ([], [])  # type: ignore[type-arg]
    ipt, nft = ChangeTracker(cfg), ChangeTracker(cfg)
    _track(ipt, empty, before)
    _track(nft, empty, before)
    with ns.temporary("t") as name:
        first = render_iptables(ipt.snapshot, cfg)
        load(name, first)
        changed = _track(ipt, before, after)
        existing = set(
            parse_tables(run_in(name, ["iptables-save", "-t", "nat"]).stdout)["nat"].declared
        )
        second = render_iptables(ipt.snapshot, cfg, changed=changed, existing_chains=existing)
        fresh = render_iptables(build_snapshot(after[0], after[1], cfg), cfg)
        assert load(name, second, fresh=False) == fresh.save_text
    with ns.temporary("t") as name:
        first_nft = render("nftables", nft.snapshot, cfg, now=0.0)
        assert isinstance(first_nft, NftablesRender)
        run_in(name, ["nft", "-f", "-"], input=first_nft.restore_input)
        changed = _track(nft, before, after)
        second_nft = render(
            "nftables",
            nft.snapshot,
            cfg,
            changed=changed,
            existing_chains=_nft_objects(name),
            stale_since=first_nft.stale_since,
            now=0.5,
        )
        assert isinstance(second_nft, NftablesRender) and not second_nft.cleanup_input
        run_in(name, ["nft", "-f", "-"], input=second_nft.restore_input)
        fresh_nft = render("nftables", build_snapshot(after[0], after[1], cfg), cfg)
        assert isinstance(fresh_nft, NftablesRender)
        # as upstream, the chains sync 2 retired stay, flushed, until a sync more than a
        # second later: the node holds the fresh full render plus those, empty
        got = run_in(name, ["nft", "list", "ruleset"]).stdout
        with_stale = listing(
            cfg.ip_family,
            fresh_nft.sets,
            [*fresh_nft.chains, *(NftChain(n) for n in second_nft.stale_since)],
        )
        assert normalize_listing(got) == normalize_listing(with_stale)
        assert normalize_listing(got) == normalize_listing(second_nft.save_text)
        # sync 3, two seconds later, nothing changed: deletes them, in its own transaction
        third_nft = render(
            "nftables",
            nft.snapshot,
            cfg,
            changed=nft.apply(),
            existing_chains=_nft_objects(name),
            stale_since=second_nft.stale_since,
            now=2.5,
        )
        assert isinstance(third_nft, NftablesRender)
        assert third_nft.deleted == tuple(sorted(second_nft.stale_since))
        if third_nft.cleanup_input:
            run_in(name, ["nft", "-f", "-"], input=third_nft.cleanup_input)
        run_in(name, ["nft", "-f", "-"], input=third_nft.restore_input)
        got = run_in(name, ["nft", "list", "ruleset"]).stdout
        assert normalize_listing(got) == normalize_listing(fresh_nft.save_text)


def _nft_objects(netns: str) -> set[str]:
    """The chains and sets of the kube-proxy table (what upstream lists each sync)."""
    listed = run_in(netns, ["nft", "list", "table", "ip", "kube-proxy"]).stdout
    return {
        ln.split()[1] for ln in listed.splitlines() if ln.strip().startswith(("chain ", "set "))
    }
