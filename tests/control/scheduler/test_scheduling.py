"""The scheduler in the control plane: spreading, binding, parking, records, node sampling."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
from sched_helpers import decide, node, pod, scheduler

from control.clock import FakeClock
from control.events import timeline
from control.runner import ControlPlane
from control.scheduler import SCHEDULING_ANNOTATION, num_feasible_nodes_to_find
from control.scheduler.table import pod_info
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import Pod


def _plane(nodes: object = 3, seed: int = 0) -> ControlPlane:
    plane = ControlPlane(
        MemoryStore(), ClusterSpec.model_validate({"nodes": nodes}), seed=seed, clock=FakeClock()
    )
    plane.start()
    plane.run_until_idle()
    return plane


def _deploy(name: str, replicas: int, **spec: object) -> object:
    return object_from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "x"}], **spec},
                },
            },
        }
    )


def _pods(plane: ControlPlane, prefix: str) -> list[Pod]:
    return [p for p in plane.store.list("Pod") if isinstance(p, Pod) and p.name.startswith(prefix)]


def test_replicas_spread_over_nodes() -> None:
    plane = _plane(3)
    plane.apply([_deploy("web", 3)])  # type: ignore[list-item]
    plane.run_until_idle()
    assert sorted(p.spec.node_name or "" for p in _pods(plane, "web-")) == [
        "node-1",
        "node-2",
        "node-3",
    ]
    plane.apply([_deploy("web", 9)])  # type: ignore[list-item]
    plane.run_until_idle()
    per_node = Counter(p.spec.node_name for p in _pods(plane, "web-"))
    assert sorted(per_node.values()) == [3, 3, 3]


def test_binding_sets_node_name_records_the_decision_and_an_event() -> None:
    plane = _plane(3)
    plane.apply([_deploy("web", 1)])  # type: ignore[list-item]
    plane.run_until_idle()
    (p,) = _pods(plane, "web-")
    data = json.loads(p.metadata.annotations[SCHEDULING_ANNOTATION])
    assert data["result"] == f"Scheduled to {p.spec.node_name}"
    assert data["node"] == p.spec.node_name
    assert (data["nodesTotal"], data["evaluated"], data["feasible"]) == (3, 3, 3)
    assert data["nodes"][0]["node"] == p.spec.node_name
    assert set(data["nodes"][0]["scores"]) == {
        "NodeResourcesLeastAllocated",
        "NodeResourcesBalancedAllocation",
        "SelectorSpread",
    }
    w = data["weights"]
    assert data["nodes"][0]["total"] == sum(w[k] * v for k, v in data["nodes"][0]["scores"].items())
    # the web pod's (the default Cluster's coredns pods were scheduled too, in kube-system)
    evs = [
        e
        for e in timeline(plane.store)
        if e.reason == "Scheduled" and e.involved_object.namespace == "default"
    ]
    assert [e.message for e in evs] == [
        f"Successfully assigned default/{p.name} to {p.spec.node_name}"
    ]
    # through pods/binding (APIServer.bind), not an update: the pod's generation stays,
    # and the write before the Scheduled Event is the binding's, with PodScheduled True
    assert p.metadata.generation == 1
    written = plane.store.watch(0, ["Pod"])
    binding = next(w.object for w in written if w.object.spec.node_name)  # type: ignore[attr-defined]
    assert [(c.type, c.status) for c in binding.status.conditions] == [("PodScheduled", "True")]  # type: ignore[attr-defined]
    updated = [
        e for e in timeline(plane.store) if e.reason == "Updated" and e.name.startswith(p.name)
    ]
    assert [(e.message, e.source_component) for e in updated] == [
        (f"updated spec.nodeName={p.spec.node_name}", "default-scheduler")
    ]
    assert evs[0].source_component == "default-scheduler"
    # the CLI's describe renders the table from the annotation
    from app.cli.describe import scheduling_table

    table = scheduling_table(p)
    assert table is not None and p.spec.node_name in table and "SELECTORSPREAD" in table


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


def test_anti_affinity_leaves_the_fourth_replica_pending_until_a_node_is_added() -> None:
    plane = _plane(3)
    plane.apply([_deploy("web", 4, affinity=_anti("web"))])  # type: ignore[list-item]
    plane.run_until_idle()
    ps = _pods(plane, "web-")
    bound = [p for p in ps if p.spec.node_name]
    (pending,) = [p for p in ps if not p.spec.node_name]
    assert len({p.spec.node_name for p in bound}) == 3
    cond = pending.condition("PodScheduled")
    assert cond is not None and (cond.status, cond.reason) == ("False", "Unschedulable")
    assert cond.message == (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. "
        "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )
    failed = [e for e in timeline(plane.store) if e.reason == "FailedScheduling"]
    assert len(failed) == 1 and failed[0].type == "Warning"
    # idle means idle: the parked pod is not retried without a reason
    assert plane.run_until_idle() == 0
    plane.apply(
        [
            object_from_dict(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": "node-4"},
                    "status": {
                        "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                        "addresses": [{"type": "InternalIP", "address": "172.18.0.9"}],
                    },
                }
            )
        ]
    )
    plane.run_until_idle()
    now = plane.store.get("Pod", pending.key)
    assert isinstance(now, Pod) and now.spec.node_name == "node-4"
    assert now.status.phase == "Running" and now.status.pod_ip


def test_pending_pod_is_scheduled_when_an_assigned_pod_goes_away() -> None:
    plane = _plane([{"name": "only", "capacity": {"cpu": "1"}}])
    big = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "800m"}}}]}
    plane.apply([_deploy("a", 1, **big)])  # type: ignore[list-item]
    plane.run_until_idle()
    plane.apply([_deploy("b", 1, **big)])  # type: ignore[list-item]
    plane.run_until_idle()
    (b,) = _pods(plane, "b-")
    assert not b.spec.node_name
    assert "1 Insufficient cpu" in (b.condition("PodScheduled").message or "")  # type: ignore[union-attr]
    plane.delete("Deployment", "default/a")
    plane.run_until_idle()
    (b,) = _pods(plane, "b-")
    assert b.spec.node_name == "only" and b.status.phase == "Running"


def test_same_seed_same_placement() -> None:
    def placement(seed: int) -> list[tuple[str, str]]:
        plane = _plane(5, seed=seed)
        plane.apply([_deploy("a", 7), _deploy("b", 4)])  # type: ignore[list-item]
        plane.run_until_idle()
        return sorted((p.name, p.spec.node_name or "") for p in _pods(plane, ""))

    assert placement(3) == placement(3)


def test_incremental_cache_matches_a_recount() -> None:
    plane = _plane(4)
    req = {
        "containers": [
            {
                "name": "c",
                "image": "x",
                "resources": {"requests": {"cpu": "150m", "memory": "64Mi"}},
            }
        ]
    }
    plane.apply([_deploy("a", 9, **req), _deploy("b", 5)])  # type: ignore[list-item]
    plane.run_until_idle()
    plane.apply([_deploy("a", 3, **req)])  # type: ignore[list-item]
    plane.delete("Deployment", "default/b")
    plane.run_until_idle()
    t = plane.scheduler.table
    cpu = np.zeros(len(t.names), dtype=np.int64)
    count = np.zeros(len(t.names), dtype=np.int64)
    for p in plane.store.list("Pod"):
        assert isinstance(p, Pod)
        if p.spec.node_name:
            i = t.index[p.spec.node_name]
            cpu[i] += pod_info(p).cpu
            count[i] += 1
    assert list(t.req_cpu) == list(cpu) and list(t.req_pods) == list(count)


def test_num_feasible_nodes_to_find_is_adaptive() -> None:
    assert num_feasible_nodes_to_find(5) == 5
    assert num_feasible_nodes_to_find(99) == 99
    assert num_feasible_nodes_to_find(100) == 100
    assert num_feasible_nodes_to_find(200) == 100  # 49% of 200 = 98, at least 100
    assert num_feasible_nodes_to_find(1000) == 420  # 50 - 1000/125 = 42%
    assert num_feasible_nodes_to_find(5000) == 500  # 10%
    assert num_feasible_nodes_to_find(100_000) == 5000  # floor of 5%
    assert num_feasible_nodes_to_find(1000, 10) == 100
    assert num_feasible_nodes_to_find(1000, 100) == 1000
    assert num_feasible_nodes_to_find(1000, 150) == 1000  # above 100 acts as 100


def test_a_percentage_above_100_evaluates_each_node_once() -> None:
    s = scheduler([node(f"n{i:03d}") for i in range(150)], percentage_of_nodes_to_score=150)
    d = decide(s, pod("p"))
    assert (d.nodes_total, d.evaluated, d.feasible) == (150, 150, 150)
    assert d.omitted + len(d.rows) == 150


def test_filtering_stops_early_and_the_start_rotates() -> None:
    s = scheduler([node(f"n{i:04d}") for i in range(1000)])
    d1 = decide(s, pod("p1"))
    assert (d1.nodes_total, d1.evaluated, d1.feasible) == (1000, 420, 420)
    d2 = decide(s, pod("p2"))
    assert d2.evaluated == 420
    assert s._next_start == 840
    # rows are capped, the rest counted
    assert len(d1.rows) == s.record_limit and d1.omitted == 420 - s.record_limit


def test_unfit_nodes_do_not_count_towards_the_sample() -> None:
    nodes = [node(f"n{i:03d}", cpu="1" if i % 2 else "8") for i in range(300)]
    s = scheduler(nodes)
    d = decide(s, pod("p", cpu="2"))
    # 300 nodes: 50 - 2 = 48% -> 144 feasible wanted; half the nodes fit
    assert d.feasible == 144 and d.evaluated == 287


def test_decision_json_round_trips_and_matches_json_dumps() -> None:
    from control.scheduler.decision import Decision, NodeRow

    d = Decision(
        "default/p",
        "n1",
        'Scheduled to n1 "quoted"',
        3,
        3,
        2,
        {"A": 1, "B": 2},
        (NodeRow("n1", None, {"A": 90, "B": 50}, 190), NodeRow("n2", "Taint: {k: v}")),
        omitted=1,
    )
    text = d.to_json()
    assert json.loads(text) == {
        "result": 'Scheduled to n1 "quoted"',
        "node": "n1",
        "nodesTotal": 3,
        "evaluated": 3,
        "feasible": 2,
        "weights": {"A": 1, "B": 2},
        "nodes": [
            {"node": "n1", "filter": None, "scores": {"A": 90, "B": 50}, "total": 190},
            {"node": "n2", "filter": "Taint: {k: v}"},
        ],
        "omitted": 1,
    }
    assert Decision.from_json("default/p", text) == d


def test_decision_text_is_compact_json_dumps() -> None:
    """The hand-built text is byte for byte ``json.dumps`` of the record, with names that
    need escaping and a plugin name with a per cent sign."""
    from control.scheduler.decision import Decision, NodeRow

    weights = {"Least%Allocated": 1, 'Spread"x"': 2, "é": 1}
    rows = (
        NodeRow('n"1', None, {"Least%Allocated": 90, 'Spread"x"': 50, "é": 0}, 190),
        NodeRow("n2", None, {"Least%Allocated": 7, 'Spread"x"': 100, "é": 100}, 307),
        NodeRow("n3", "NodeResourcesFit: Insufficient cpu; 100% used"),
    )
    d = Decision("default/p", 'n"1', "Scheduled to n1", 3, 3, 2, weights, rows, omitted=4)
    expect = {
        "result": d.result,
        "node": d.node,
        "nodesTotal": 3,
        "evaluated": 3,
        "feasible": 2,
        "weights": weights,
        "nodes": [r.to_json() for r in rows],
        "omitted": 4,
    }
    assert d.to_json() == json.dumps(expect, separators=(",", ":"))
