"""ClusterNetworkPolicy, three ways that check each other on hand-written tier
scenarios (tests/data/clusternetworkpolicy/tiers.yaml): what
:func:`netmodel.clusterpolicy.decide` says, what ``svclab reach``'s matrix says
(:class:`netmodel.reachtiers.TieredMatrix`) and what connections through the emulated
dataplane do (:func:`app.reachprobe.probe_matrix`: the nodes' policy agents render
svclab's tier chains, the emulator evaluates them). Each scenario's verdicts are pinned
too (Admin Deny beats a NetworkPolicy allow; Admin Pass hands to the NetworkPolicy
tier; Baseline Deny only where no NetworkPolicy selects the pod; priority order), and a
trace names the deciding ClusterNetworkPolicy rule as ``decide`` does. ``reach
--what-if`` with a ClusterNetworkPolicy file or ``--delete cnp/NAME`` equals applying
the change and recomputing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from app import emulation, netpolview
from app.cli.reach_cmd import cluster_policies, cluster_view
from app.reachprobe import probe_matrix
from control.session import Session
from netmodel.clusterpolicy import decide
from tests.cnptiers import PORTS, TIERS, computed, differences, without_self
from tests.netpol_e2e import PODS, Harness


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    h = Harness(tmp_path_factory.mktemp("cnp-tiers") / "state")
    h.create()
    h.svclab("apply", "-f", str(TIERS))
    yield h.state


def test_decide_the_matrix_and_the_emulated_probe_agree(state: Path) -> None:
    want, matrix = computed(state)
    assert len(want) == 72
    assert not differences(want, matrix), "matrix:\n" + "\n".join(differences(want, matrix))
    probed = without_self(probe_matrix(state, ports=PORTS))
    assert not differences(want, probed), "probe:\n" + "\n".join(differences(want, probed))


@pytest.mark.parametrize(
    ("src", "dst", "allowed"),
    [
        # 1. Admin Deny beats the NetworkPolicy allow-a-to-b (which allows 81)
        ("x/a", "x/b", {("TCP", 81), ("UDP", 80)}),
        # x/c is not a: the NetworkPolicy isolating x/b denies it
        ("x/c", "x/b", set()),
        # 2. Admin Pass from z: the priority-20 Deny of 81 is never read; y/a's
        # NetworkPolicy allows TCP 80 only; y/b is not isolated, Baseline denies 81
        ("z/a", "y/a", {("TCP", 80)}),
        ("z/a", "y/b", {("TCP", 80), ("UDP", 80)}),
        # no Pass from x: x/c is denied everything by priority 20
        ("x/c", "y/b", set()),
        # 3. Baseline Deny of 81: y/b (no NetworkPolicy) denied 81; y/a's NetworkPolicy
        # decides for it (80 only, Baseline not read)
        ("x/a", "y/b", {("TCP", 80), ("UDP", 80)}),
        ("x/a", "y/a", {("TCP", 80)}),
        # 4. priority: z/a -> z/c accepted on the named port serve-80-tcp (priority 1)
        # before the Deny (priority 2); x/a is not of z: allowed
        ("z/a", "z/c", {("TCP", 80)}),
        ("x/a", "z/c", {("TCP", 80), ("TCP", 81), ("UDP", 80)}),
        # egress: z/b -> x/a accepted (priority 3) before no-81-to-x (priority 4)
        ("z/b", "x/a", {("TCP", 80), ("TCP", 81), ("UDP", 80)}),
        ("z/b", "x/c", {("TCP", 80), ("UDP", 80)}),
    ],
)
def test_each_tier_rule_decides_as_the_api_says(
    state: Path, src: str, dst: str, allowed: set[tuple[str, int]]
) -> None:
    want, _ = computed(state)
    assert want[(src, dst)] == allowed


def test_a_trace_names_the_deciding_cluster_network_policy_rule(state: Path) -> None:
    session = Session.open(state)
    try:
        pods, policies, namespaces = cluster_view(session)
        cnps = cluster_policies(session)
        by_key = {p.key: p for p in pods}
        agent = emulation.policy_agent_of(session)
        emu = emulation.emulator(session)
        named = set()
        for src in pods:
            for dst in pods:
                if src.key == dst.key:
                    continue
                for port in (80, 81):
                    both = decide(
                        src, dst, "TCP", port, policies, namespaces, cluster_policies=cnps
                    )
                    want = both.deciding
                    t = netpolview.attribute(
                        emu.trace(f"pod/{src.key}", str(by_key[dst.key].ip), "tcp", port),
                        agent,
                        netpolview.node_of,
                    )
                    where = f"{src.key} -> {dst.key}:{port}"
                    notes = [h for h in t.hops if h.kind == "netpol"]
                    assert notes, where
                    assert notes[-1].note == want.describe(), where
                    if (want.policy or "").startswith("ClusterNetworkPolicy/"):
                        named.add(want.policy)
                    # an egress verdict that let the packet on is named too, at the source
                    if both.egress.allowed and both.egress.policy:
                        assert both.egress.describe() in [h.note for h in notes], where
                        named.add(both.egress.policy)
    finally:
        session.close()
    assert named == {
        "ClusterNetworkPolicy/deny-a-to-b-80",
        "ClusterNetworkPolicy/deny-z-and-x-into-y",
        "ClusterNetworkPolicy/baseline-no-81-into-y",
        "ClusterNetworkPolicy/first-accept-za-web",
        "ClusterNetworkPolicy/then-deny-za",
        "ClusterNetworkPolicy/zb-egress-to-xa",
        "ClusterNetworkPolicy/zb-egress-no-81-to-x",
    }


NEW_CNP = """\
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: admin-deny-x-into-z-80}
spec:
  tier: Admin
  priority: 7
  subject: {namespaces: {matchLabels: {kubernetes.io/metadata.name: z}}}
  ingress:
  - action: Deny
    from: [{namespaces: {matchLabels: {kubernetes.io/metadata.name: x}}}]
    protocols: [{tcp: {destinationPort: {number: 80}}}]
"""


def _reach(h: Harness, *args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from app.cli.main import cli

    res = CliRunner().invoke(cli, ["--state", str(h.state), "reach", "-o", "json", *args])
    return res.exit_code, res.output


def _pairs(doc: dict[str, list[dict[str, object]]]) -> set[str]:
    return {yaml.safe_dump(e, sort_keys=True) for e in doc["allowed"]}


@pytest.mark.parametrize("change", ["add", "delete"])
def test_what_if_equals_applying_and_recomputing(tmp_path: Path, change: str) -> None:
    h = Harness(tmp_path / "state")
    h.create()
    h.svclab("apply", "-f", str(TIERS))
    new = tmp_path / "new.yaml"
    new.write_text(NEW_CNP)
    before = _pairs(yaml.safe_load(_reach(h)[1]))
    if change == "add":
        code, out = _reach(h, "--what-if", "-f", str(new))
    else:
        code, out = _reach(h, "--what-if", "--delete", "cnp/baseline-no-81-into-y")
    assert code == 1, out
    diff = yaml.safe_load(out)
    assert diff["added"] or diff["removed"]
    assert _pairs(yaml.safe_load(_reach(h)[1])) == before  # nothing stored changed
    if change == "add":
        h.svclab("apply", "-f", str(new))
    else:
        h.svclab("delete", "clusternetworkpolicy", "baseline-no-81-into-y")
    after = _pairs(yaml.safe_load(_reach(h)[1]))
    # every pair added or removed is one whose connections changed, and no other
    changed = {(e["from"], e["to"]) for e in (*diff["added"], *diff["removed"])}
    moved = {(e["from"], e["to"]) for e in (yaml.safe_load(p) for p in before ^ after)}
    assert changed == moved
    if change == "add":
        # the new Admin Deny takes TCP 80 from x into z, except where priority 1
        # accepted it first (x/a -> z/c on serve-80-tcp)
        assert {(e["from"], e["to"]) for e in diff["removed"]} == {
            (f"x/{s}", f"z/{d}") for s in "abc" for d in "abc"
        } - {("x/a", "z/c")}
        assert all(
            e["protocols"] == {"TCP": [[80, 80]], "UDP": [], "SCTP": []} for e in diff["removed"]
        )
        assert not diff["added"]
    else:
        # the Baseline Deny of 81-82 gone: TCP 81-82 into y/b and y/c from every other pod
        # but x/c (which the Admin tier denies everything into y)
        assert not diff["removed"]
        assert {(e["from"], e["to"]) for e in diff["added"]} == {
            (s, f"y/{d}") for s in PODS for d in "bc" if s not in (f"y/{d}", "x/c")
        }
        assert all(
            e["protocols"] == {"TCP": [[81, 82]], "UDP": [], "SCTP": []} for e in diff["added"]
        )
