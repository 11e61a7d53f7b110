"""nftables mode keeps stale chains for a while, as upstream's nftables proxier does
(``staleChains`` in ``pkg/proxy/nftables/proxier.go``): a per-service chain a sync no
longer uses is flushed, not deleted, and stamped with the sync's time; every sync
re-flushes and re-stamps the chains still stale and forgets those in use again; a sync
first deletes, in a transaction of its own, the chains stamped more than one second
before it. Stale affinity sets go at once.

Each sequence is applied to one emulated node (``parse_nft`` on top of the previous
state, which refuses what the kernel refuses: flushing or deleting a missing chain,
deleting a chain a rule or a verdict-map element still points to)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from proxy_builders import endpoint, fake_config, service, service_sets, slice_

from app.cli.main import cli
from control.clock import FakeClock
from control.session import Session
from dataplane.netfilter import NftRuleset, parse_nft
from dataplane.netfilter.nftrules import NftError
from dataplane.proxy import ChangeTracker
from dataplane.proxy.nftables import STALE_CHAIN_DELAY, NftablesRender, render_nftables
from dataplane.proxy.snapshot import build_snapshot
from netmodel.manifests import load_text
from netmodel.objects import EndpointSlice, Service

TABLE = ("ip", "kube-proxy")
T0 = 1000.0

CLUSTER = textwrap.dedent(
    """\
    apiVersion: svclab.dev/v1alpha1
    kind: Cluster
    spec: {nodes: 1, proxyMode: nftables}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web}
    spec:
      replicas: 2
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec:
          containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
    """
)
SVC = (
    "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\n"
    "spec: {{selector: {{app: web}}, ports: [{{port: 80, targetPort: 8080}}]}}\n"
)


class Node:
    """One node's kube-proxy table, as the kernel would hold it after each sync."""

    def __init__(self) -> None:
        self.rs = NftRuleset({})

    def load(self, out: NftablesRender) -> None:
        """Run a sync as upstream does: the stale-chain deletions, then the sync."""
        if out.cleanup_input:
            self.rs = parse_nft(out.cleanup_input, base=self.rs, source="cleanup")
        self.rs = parse_nft(out.restore_input, base=self.rs, source="sync")

    def names(self) -> list[str]:
        t = self.rs.tables.get(TABLE)
        return [*t.chains, *t.sets] if t is not None else []

    def chain_rules(self) -> dict[str, list[str]]:
        return {n: [r.text for r in c.rules] for n, c in self.rs.tables[TABLE].chains.items()}

    def sync(
        self,
        services: Sequence[Service],
        slices: Sequence[EndpointSlice],
        now: float,
        prev: NftablesRender | None,
    ) -> NftablesRender:
        cfg = fake_config()
        out = render_nftables(
            build_snapshot(services, slices, cfg),
            cfg,
            existing_chains=self.names(),
            stale_since=prev.stale_since if prev else None,
            now=now,
        )
        self.load(out)
        return out


def table_state(rs: NftRuleset) -> tuple[dict[str, list[str]], dict[str, object]]:
    """(chain -> rule texts, set -> its elements and CIDR ranges) of the table."""
    t = rs.tables[TABLE]
    chains = {n: [r.text for r in c.rules] for n, c in t.chains.items()}
    sets = {n: (dict(s.elements), sorted(map(repr, s.nets))) for n, s in t.sets.items()}
    return chains, sets


def fresh_state(services: Sequence[Service], slices: Sequence[EndpointSlice]) -> tuple:  # type: ignore[type-arg]
    cfg = fake_config()
    return table_state(
        parse_nft(render_nftables(build_snapshot(services, slices, cfg), cfg).restore_input)
    )


def referenced(rs: NftRuleset, chain: str) -> bool:
    t = rs.tables[TABLE]
    in_rules = any(
        f"goto {chain}" in r.text or f"jump {chain}" in r.text
        for c in t.chains.values()
        for r in c.rules
    )
    in_maps = any(
        v in (("goto", chain), ("jump", chain))
        for s in t.sets.values()
        for v in s.elements.values()
    )
    return in_rules or in_maps


def two_services() -> tuple[list[Service], list[EndpointSlice]]:
    svcs = [service("ns1", "a", "172.30.0.1"), service("ns1", "b", "172.30.0.2", affinity=60)]
    eps = [
        slice_("ns1", "a", [endpoint("10.0.0.1")]),
        slice_("ns1", "b", [endpoint("10.0.1.1"), endpoint("10.0.1.2")]),
    ]
    return svcs, eps


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_a_deleted_services_chains_are_flushed_not_deleted() -> None:
    svcs, eps = two_services()
    node = Node()
    first = node.sync(svcs, eps, T0, None)
    assert first.stale == () and first.stale_since == {} and first.cleanup_input == ""
    b_objects = [n for n in node.names() if "ns1/b/" in n]
    b_chains = sorted(n for n in b_objects if not n.startswith("affinity-"))
    b_sets = sorted(n for n in b_objects if n.startswith("affinity-"))
    assert len(b_chains) == 3 and len(b_sets) == 2  # service-, 2 endpoint-; 2 affinity-

    second = node.sync(svcs[:1], eps[:1], T0 + 0.5, first)
    text = lines(second.restore_input)
    assert second.cleanup_input == "" and second.deleted == ()
    for chain in b_chains:
        assert f"flush chain ip kube-proxy {chain}" in text
        assert not any(ln.startswith("delete chain") for ln in text)
    assert second.stale_since == dict.fromkeys(b_chains, T0 + 0.5)
    # the affinity sets go at once, as upstream does
    assert [ln for ln in text if ln.startswith("delete set") and "ns1/b/" in ln] == [
        f"delete set ip kube-proxy {n}" for n in b_sets
    ]
    assert second.stale == (*b_sets, *b_chains)
    assert not set(b_sets) & set(node.names())
    rules = node.chain_rules()
    for chain in b_chains:
        assert rules[chain] == [] and not referenced(node.rs, chain)
    # the render describes the table as the node holds it: stale chains present, empty
    listed = {c.name: c.rules for c in second.chains if c.name in b_chains}
    assert listed == {n: [] for n in b_chains}
    # (applied where the kernel would apply it: onto the first sync's table; on an empty
    # ruleset its "delete set" lines fail, as they do in the kernel)
    base = parse_nft(first.restore_input)
    assert table_state(parse_nft(second.restore_input, base=base)) == table_state(node.rs)


def test_stale_chains_are_deleted_by_the_first_sync_more_than_a_second_later() -> None:
    svcs, eps = two_services()
    node = Node()
    first = node.sync(svcs, eps, T0, None)
    second = node.sync(svcs[:1], eps[:1], T0, first)
    stale = sorted(second.stale_since)
    assert stale
    # exactly one second later: not yet (upstream: stamped *before* now - 1s); flushed
    # again and stamped again
    third = node.sync(svcs[:1], eps[:1], T0 + STALE_CHAIN_DELAY, second)
    assert third.cleanup_input == "" and third.deleted == ()
    assert third.stale_since == dict.fromkeys(stale, T0 + STALE_CHAIN_DELAY)
    assert set(stale) <= set(node.names())
    # more than a second after the last flush: deleted, in a transaction of their own
    fourth = node.sync(svcs[:1], eps[:1], T0 + STALE_CHAIN_DELAY + 1.5, third)
    assert fourth.deleted == tuple(stale)
    assert lines(fourth.cleanup_input) == [f"delete chain ip kube-proxy {n}" for n in stale]
    assert not any(n in fourth.restore_input for n in stale)
    assert fourth.stale == () and fourth.stale_since == {}
    assert not set(stale) & set(node.names())
    assert table_state(node.rs) == fresh_state(svcs[:1], eps[:1])


def test_a_chain_in_use_again_before_its_deletion_is_kept_and_rewritten() -> None:
    svc = [service("ns1", "a", "172.30.0.1")]
    two = [slice_("ns1", "a", [endpoint("10.0.0.1"), endpoint("10.0.0.2")])]
    one = [slice_("ns1", "a", [endpoint("10.0.0.1")])]
    node = Node()
    first = node.sync(svc, two, T0, None)
    second = node.sync(svc, one, T0 + 0.2, first)
    (gone,) = second.stale_since
    assert gone.startswith("endpoint-") and "10.0.0.2" in gone
    # back within the second: rewritten in place, dropped from the record
    third = node.sync(svc, two, T0 + 0.9, second)
    assert third.stale_since == {} and third.cleanup_input == ""
    assert f"add rule ip kube-proxy {gone} meta l4proto tcp dnat to 10.0.0.2:80" in lines(
        third.restore_input
    )
    # and never deleted afterwards
    later = node.sync(svc, two, T0 + 60, third)
    assert later.cleanup_input == "" and later.deleted == ()
    assert node.chain_rules()[gone] and referenced(node.rs, gone)
    assert table_state(node.rs) == fresh_state(svc, two)


def test_a_chain_due_for_deletion_and_in_use_again_is_deleted_then_written_anew() -> None:
    """Upstream deletes the chains that waited long enough before it looks at the new
    state, so one in use again at that sync is deleted and created again."""
    svc = [service("ns1", "a", "172.30.0.1")]
    two = [slice_("ns1", "a", [endpoint("10.0.0.1"), endpoint("10.0.0.2")])]
    one = [slice_("ns1", "a", [endpoint("10.0.0.1")])]
    node = Node()
    first = node.sync(svc, two, T0, None)
    second = node.sync(svc, one, T0, first)
    (gone,) = second.stale_since
    third = node.sync(svc, two, T0 + 5, second)
    assert third.deleted == (gone,) and third.stale_since == {}
    assert f"add chain ip kube-proxy {gone}" in lines(third.restore_input)
    assert table_state(node.rs) == fresh_state(svc, two)


def test_a_recorded_chain_the_table_no_longer_holds_is_forgotten() -> None:
    cfg = fake_config()
    snap = build_snapshot(*two_services(), cfg)
    out = render_nftables(
        snap, cfg, stale_since={"endpoint-X-ns9/x/tcp/p80__1.1.1.1/80": T0}, now=T0 + 9
    )
    assert out.cleanup_input == "" and out.deleted == () and out.stale_since == {}


def test_a_fresh_full_render_is_unaffected() -> None:
    cfg = fake_config()
    snap = build_snapshot(*two_services(), cfg)
    plain = render_nftables(snap, cfg)
    timed = render_nftables(snap, cfg, existing_chains=(), stale_since={}, now=T0)
    assert timed.restore_input == plain.restore_input
    for out in (plain, timed):
        assert out.cleanup_input == "" and out.deleted == () and out.stale == ()
        assert out.stale_since == {}
        flushed = {
            ln.split()[-1] for ln in lines(out.restore_input) if ln.startswith("flush chain")
        }
        assert flushed == {c.name for c in out.chains}  # only the chains it writes
        assert "delete chain" not in out.restore_input


def test_svclab_rules_nftables_on_a_fresh_cluster(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(CLUSTER)
    res = CliRunner().invoke(
        cli, ["rules", "--node", "node-1", "--mode", "nftables", "--restore-input", "-f", str(f)]
    )
    assert res.exit_code == 0, res.output
    assert "delete chain" not in res.output
    assert {ln.split()[-1] for ln in lines(res.output) if ln.startswith("flush chain")} == {
        ln.split()[4] for ln in lines(res.output) if ln.startswith("add chain")
    }


@pytest.mark.parametrize(
    "text, error",
    [
        ("flush chain ip kube-proxy nope", "nope"),
        ("delete chain ip kube-proxy nope", "no chain 'nope'"),
        ("delete chain ip kube-proxy target", "still used by user"),
        (
            "flush chain ip kube-proxy user\ndelete chain ip kube-proxy target",
            "still used by @vmap",
        ),
    ],
)
def test_the_emulator_refuses_what_the_kernel_refuses(text: str, error: str) -> None:
    base = parse_nft(
        "add table ip kube-proxy\nadd chain ip kube-proxy target\nadd chain ip kube-proxy user\n"
        "add rule ip kube-proxy user goto target\n"
        "add map ip kube-proxy vmap { type ipv4_addr : verdict ; }\n"
        "add element ip kube-proxy vmap { 1.2.3.4 : goto target }\n"
    )
    with pytest.raises(NftError, match=rf"^<nft>:\d+: .*{error}"):
        parse_nft(text, base=base)
    # what upstream does: the map element and the rule go in one sync, the chain later
    after = parse_nft(
        "flush map ip kube-proxy vmap\nflush chain ip kube-proxy user\nflush chain ip kube-proxy target\n",
        base=base,
    )
    assert (
        "target"
        not in parse_nft("delete chain ip kube-proxy target", base=after).tables[TABLE].chains
    )
    # nft 1.0.6 (the reference) has no "destroy": refused, as nft refuses it
    with pytest.raises(NftError, match=r"^<nft>:1: destroy chain"):
        parse_nft("destroy chain ip kube-proxy nope", base=after)


# --------------------------------------------------------------------------- property


def _track(tracker: ChangeTracker, before: tuple, after: tuple) -> set:  # type: ignore[type-arg]
    for old_objs, new_objs, update in (
        (before[0], after[0], tracker.update_service),
        (before[1], after[1], tracker.update_endpoint_slice),
    ):
        old = {o.key: o for o in old_objs}
        new = {o.key: o for o in new_objs}
        for key in old.keys() | new.keys():
            update(old.get(key), new.get(key))  # type: ignore[operator]
    return tracker.apply()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(service_sets(max_services=5), service_sets(max_services=5))
def test_partial_syncs_reach_a_fresh_full_render_once_stale_chains_are_deleted(
    before, after
) -> None:  # type: ignore[no-untyped-def]
    """Sync 1 renders ``before`` fully; sync 2 renders only what changed to reach
    ``after``. The node then holds what a fresh full render of ``after`` loads, plus one
    empty, unreferenced chain per chain sync 2 retired (its ``stale_since``). Sync 3,
    more than a second later and with nothing changed, deletes exactly those: the node
    then holds exactly the fresh full render."""
    cfg = fake_config()
    tracker = ChangeTracker(cfg)
    _track(tracker, ([], []), before)
    node = Node()
    first = render_nftables(tracker.snapshot, cfg, now=T0)
    node.load(first)
    changed = _track(tracker, before, after)
    second = render_nftables(
        tracker.snapshot,
        cfg,
        changed=changed,
        existing_chains=node.names(),
        stale_since=first.stale_since,
        now=T0 + 0.5,
    )
    node.load(second)
    want_chains, want_sets = fresh_state(*after)
    have_chains, have_sets = table_state(node.rs)
    assert have_sets == want_sets
    assert have_chains == {**want_chains, **{n: [] for n in second.stale_since}}
    assert not set(second.stale_since) & set(want_chains)
    assert not any(referenced(node.rs, c) for c in second.stale_since)

    third = render_nftables(
        tracker.snapshot,
        cfg,
        changed=tracker.apply(),
        existing_chains=node.names(),
        stale_since=second.stale_since,
        now=T0 + 0.5 + STALE_CHAIN_DELAY + 0.1,
    )
    assert third.deleted == tuple(sorted(second.stale_since))
    node.load(third)
    assert table_state(node.rs) == (want_chains, want_sets)
    assert third.stale_since == {}


# --------------------------------------------------------------------------- the agent


def test_the_agent_keeps_the_record_and_times_it_with_the_control_planes_clock() -> None:
    clock = FakeClock()
    s = Session.ephemeral(
        load_text(CLUSTER + "---\n" + SVC.format(name="a") + "---\n" + SVC.format(name="b")),
        clock=clock,
    )
    s.converge()
    (proxy,) = s.proxies.values()
    assert isinstance(proxy.last, NftablesRender) and proxy.last.stale == ()
    state = s.rules.nodes[proxy.node_name]

    s.plane.delete("Service", "default/b")
    s.converge()
    assert isinstance(proxy.last, NftablesRender)
    b_chains = sorted(proxy.last.stale_since)
    assert b_chains and all("default/b/" in n for n in b_chains)
    assert proxy.stale_since == dict.fromkeys(b_chains, clock.now())
    assert set(b_chains) <= set(s.rules.existing_chains(proxy.node_name))
    assert all(f"chain {n} {{\n\t}}" in state.save_text for n in b_chains)  # listed, empty

    clock.advance(2)
    s.plane.apply(load_text(SVC.format(name="c")).objects)
    s.converge()
    assert isinstance(proxy.last, NftablesRender)
    assert proxy.last.deleted == tuple(b_chains) and proxy.stale_since == {}
    assert not set(b_chains) & set(s.rules.existing_chains(proxy.node_name))

    # a load that fails leaves the record empty (upstream clears it: nothing was flushed)
    s.plane.delete("Service", "default/c")
    s.converge()
    assert proxy.stale_since
    s.rules.load = _fail  # type: ignore[method-assign]
    s.plane.delete("Service", "default/a")
    with pytest.raises(RuntimeError, match="load failed"):
        s.plane.run_round()
    assert proxy.stale_since == {}


def _fail(*args: object, **kwargs: object) -> None:
    raise RuntimeError("load failed")
