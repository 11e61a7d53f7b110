"""Each filter plugin, through a full scheduling decision, and kube-scheduler's messages."""

from __future__ import annotations

import pytest
from sched_helpers import decide, node, place, pod, scheduler

CP_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


def _filters(d) -> dict[str, str | None]:  # type: ignore[no-untyped-def]
    return {r.node: r.filter for r in d.rows}


def test_unschedulable_node_is_skipped_unless_tolerated() -> None:
    s = scheduler([node("a", unschedulable=True), node("b")])
    d = decide(s, pod("p"))
    assert d.node == "b"
    assert _filters(d)["a"] == "NodeUnschedulable: node(s) were unschedulable"
    tol = [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    ]
    d = decide(scheduler([node("a", unschedulable=True)]), pod("p", tolerations=tol))
    assert d.node == "a"


def test_node_name_filter_rejects_every_other_node() -> None:
    from control.scheduler.plugins import NodeName
    from control.scheduler.table import pod_info

    s = scheduler([node("a"), node("b"), node("c")])
    s.table.refresh()
    p = pod("p", node_name="b")
    mask = NodeName().fails(p, pod_info(p), s.table)
    assert mask is not None and list(mask) == [True, False, True]
    assert NodeName().reasons(p, pod_info(p), s.table, 0) == [
        "node(s) didn't match the requested node name"
    ]
    assert NodeName().fails(pod("q"), pod_info(pod("q")), s.table) is None


def test_noschedule_taint_needs_a_toleration() -> None:
    taint = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    soft = [{"key": "soft", "value": "x", "effect": "PreferNoSchedule"}]
    s = scheduler([node("gpu", taints=taint), node("soft", taints=soft)])
    d = decide(s, pod("p"))
    assert d.node == "soft"  # PreferNoSchedule does not filter
    assert _filters(d)["gpu"] == "TaintToleration: node(s) had untolerated taint {dedicated: gpu}"
    for tol in (
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Exists"},
        {"operator": "Exists"},
    ):
        s = scheduler([node("gpu", taints=taint)])
        assert decide(s, pod("p", tolerations=[tol])).node == "gpu"
    s = scheduler([node("gpu", taints=taint)])
    wrong = {"key": "dedicated", "operator": "Equal", "value": "tpu", "effect": "NoSchedule"}
    assert decide(s, pod("p", tolerations=[wrong])).node is None


def test_resources_fit_counts_cpu_memory_and_pods_of_assigned_pods() -> None:
    s = scheduler([node("a", cpu="2", memory="1Gi", pods="3")])
    place(s, pod("x", cpu="1500m", node_name="a"), pod("y", memory="768Mi", node_name="a"))
    assert decide(s, pod("p", cpu="500m")).node == "a"
    d = decide(s, pod("p", cpu="501m", memory="300Mi"))
    assert d.node is None
    assert _filters(d)["a"] == "NodeResourcesFit: Insufficient cpu; Insufficient memory"
    place(s, pod("z", node_name="a"))
    d = decide(s, pod("p"))
    assert _filters(d)["a"] == "NodeResourcesFit: Too many pods"
    # a deleted pod gives its share back
    from control.store.base import WatchEvent

    s.handle([WatchEvent("DELETED", pod("x", cpu="1500m", node_name="a"), 9)])
    s.handle([WatchEvent("DELETED", pod("z", node_name="a"), 10)])
    assert decide(s, pod("p", cpu="2")).node == "a"


@pytest.mark.parametrize(
    ("op", "values", "expect"),
    [
        ("In", ["ssd"], {"fast"}),
        ("NotIn", ["ssd"], {"slow", "bare"}),
        ("Exists", [], {"fast", "slow"}),
        ("DoesNotExist", [], {"bare"}),
    ],
)
def test_required_node_affinity_operators(op: str, values: list[str], expect: set[str]) -> None:
    nodes = [
        node("fast", labels={"disk": "ssd"}),
        node("slow", labels={"disk": "hdd"}),
        node("bare"),
    ]
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "disk", "operator": op, "values": values}]}
                ]
            }
        }
    }
    d = decide(scheduler(nodes), pod("p", affinity=aff))
    ok = {n for n, f in _filters(d).items() if f is None}
    assert ok == expect
    for n, f in _filters(d).items():
        if n not in expect:
            assert f == "NodeAffinity: node(s) didn't match Pod's node affinity/selector"


@pytest.mark.parametrize(("op", "expect"), [("Gt", {"n8"}), ("Lt", {"n2"})])
def test_node_affinity_gt_lt(op: str, expect: set[str]) -> None:
    nodes = [node("n2", labels={"cores": "2"}), node("n8", labels={"cores": "8"}), node("nx")]
    term = {"matchExpressions": [{"key": "cores", "operator": op, "values": ["4"]}]}
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    d = decide(scheduler(nodes), pod("p", affinity=aff))
    assert {n for n, f in _filters(d).items() if f is None} == expect


def test_node_selector_and_terms_are_anded_terms_ored() -> None:
    nodes = [
        node("a", labels={"zone": "z1", "disk": "ssd"}),
        node("b", labels={"zone": "z2", "disk": "ssd"}),
        node("c", labels={"zone": "z1"}),
    ]
    terms = [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]},
    ]
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }
    d = decide(scheduler(nodes), pod("p", nodeSelector={"zone": "z1"}, affinity=aff))
    assert {n for n, f in _filters(d).items() if f is None} == {"a", "c"}


def _anti(app: str) -> dict[str, object]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": app}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


def test_pod_anti_affinity_keeps_away_from_matching_pods() -> None:
    s = scheduler([node("a"), node("b")])
    place(s, pod("w1", labels={"app": "web"}, node_name="a"))
    d = decide(s, pod("w2", labels={"app": "web"}, affinity=_anti("web")))
    assert d.node == "b"
    assert _filters(d)["a"] == "InterPodAffinity: node(s) didn't match pod anti-affinity rules"


def test_existing_pods_anti_affinity_is_symmetric() -> None:
    s = scheduler([node("a"), node("b")])
    place(s, pod("guard", labels={"app": "guard"}, node_name="a", affinity=_anti("web")))
    d = decide(s, pod("w", labels={"app": "web"}))
    assert d.node == "b"
    assert _filters(d)["a"] == (
        "InterPodAffinity: node(s) didn't satisfy existing pods anti-affinity rules"
    )


def test_anti_affinity_over_a_zone_topology() -> None:
    s = scheduler(
        [
            node("a1", labels={"zone": "a"}),
            node("a2", labels={"zone": "a"}),
            node("b1", labels={"zone": "b"}),
        ]
    )
    place(s, pod("w1", labels={"app": "web"}, node_name="a1"))
    aff = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
            ]
        }
    }
    d = decide(s, pod("w2", labels={"app": "web"}, affinity=aff))
    assert d.node == "b1"


def test_fit_error_message_is_kube_schedulers() -> None:
    s = scheduler(
        [node("cp1", taints=[CP_TAINT]), node("cp2", taints=[CP_TAINT]), node("w", cpu="1")]
    )
    d = decide(s, pod("p", cpu="2"))
    assert d.node is None
    assert d.result == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint "
        "{node-role.kubernetes.io/control-plane: }. preemption: 0/3 nodes are available: "
        "1 No preemption victims found for incoming pod, 2 Preemption is not helpful for "
        "scheduling."
    )


def test_fit_error_with_only_unresolvable_reasons() -> None:
    s = scheduler([node("a", unschedulable=True), node("b", labels={"x": "y"})])
    d = decide(s, pod("p", nodeSelector={"x": "z"}))
    assert d.result == (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) were unschedulable. preemption: 0/2 nodes are available: "
        "2 Preemption is not helpful for scheduling."
    )


def test_no_nodes_at_all() -> None:
    assert decide(scheduler([]), pod("p")).result == "no nodes available to schedule pods"


@pytest.mark.parametrize(
    ("terms", "selector", "expect"),
    [
        # a daemon pod's term: the node it names, and no other
        (
            [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}],
            {},
            {"b"},
        ),
        # named, but the nodeSelector or the term's expressions still apply
        (
            [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}],
            {"zone": "z1"},
            set(),
        ),
        (
            [
                {
                    "matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["a", "c"]}
                    ],
                    "matchExpressions": [{"key": "disk", "operator": "Exists"}],
                },
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["zz"]}]},
            ],
            {},
            {"a"},
        ),
    ],
)
def test_node_affinity_named_terms_look_up_their_nodes(
    terms: list[dict[str, object]], selector: dict[str, str], expect: set[str]
) -> None:
    nodes = [
        node("a", labels={"zone": "z1", "disk": "ssd"}),
        node("b", labels={"zone": "z2"}),
        node("c", labels={"zone": "z1"}),
    ]
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }
    d = decide(scheduler(nodes), pod("p", nodeSelector=selector, affinity=aff))
    assert {n for n, f in _filters(d).items() if f is None} == expect
