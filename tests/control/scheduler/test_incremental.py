"""The incremental scheduler (per-node fit verdicts and resource scores kept per pod
shape, brought up to date row by row) decides exactly as the straightforward evaluation
(every node, every plugin, every attempt): same node, same record, same message."""

from __future__ import annotations

import random

import pytest
from sched_helpers import node, pod, scheduler

from control.clock import FakeClock
from control.runner import ControlPlane
from control.scheduler import Scheduler
from control.scheduler import table as table_module
from control.scheduler.plugins import default_filters, default_scores
from control.scheduler.table import pod_info
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import Node, Pod

CPUS = ["500m", "1", "2", "4", "0"]  # "0": a node without cpu capacity (not "sized")
MEMS = ["512Mi", "1Gi", "4Gi", "16Gi"]
POD_CPUS = [None, "100m", "250m", "1", "3"]
POD_MEMS = [None, "64Mi", "256Mi", "1Gi", "3Gi"]


def _nodes(rng: random.Random, n: int) -> list[Node]:
    return [
        node(
            f"n{i:03d}",
            cpu=rng.choice(CPUS),
            memory=rng.choice(MEMS),
            pods=str(rng.choice([3, 8, 110])),
            taints=[{"key": "gpu", "effect": "NoSchedule"}] if rng.random() < 0.05 else None,
        )
        for i in range(n)
    ]


def _pair(nodes: list[Node], seed: int, **kw: object) -> tuple[Scheduler, Scheduler]:
    fast = scheduler(nodes, seed=seed, **kw)
    plain = scheduler(
        nodes,
        seed=seed,
        filters=default_filters(incremental=False),
        scores=default_scores(incremental=False),
        **kw,
    )
    return fast, plain


@pytest.mark.parametrize(("seed", "n_nodes"), [(1, 40), (2, 150), (3, 150), (4, 7)])
def test_same_decisions_as_the_straightforward_evaluation(
    seed: int, n_nodes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_module, "LOG_LIMIT", 64)  # readers fall behind the log too
    rng = random.Random(seed)
    nodes = _nodes(rng, n_nodes)
    fast, plain = _pair(nodes, seed)
    placed: list[str] = []
    bound = failed = 0
    for k in range(1500):
        r = rng.random()
        if r < 0.12 and placed:  # an assigned pod goes away (its node's row shrinks)
            key = placed.pop(rng.randrange(len(placed)))
            assert fast.table.remove_pod(key) is not None
            assert plain.table.remove_pod(key) is not None
            continue
        if r < 0.14:  # a node changes its capacity or comes back (a new generation)
            i = rng.randrange(len(nodes))
            nodes[i] = node(nodes[i].name, cpu=rng.choice(CPUS), memory=rng.choice(MEMS))
            fast.table.set_node(nodes[i])
            plain.table.set_node(nodes[i])
            continue
        p = pod(
            f"p{k}",
            cpu=rng.choice(POD_CPUS),
            memory=rng.choice(POD_MEMS),
            owner=f"rs{rng.randrange(6)}" if rng.random() < 0.9 else None,
        )
        a, b = fast.schedule(p, pod_info(p)), plain.schedule(p, pod_info(p))
        assert a.to_json() == b.to_json(), f"attempt {k}"
        if a.node is None:
            failed += 1
            continue
        bound += 1
        for s in (fast, plain):
            info = pod_info(p)
            info.node = a.node
            s.table.add_pod(info)
        placed.append(p.key)
    assert bound > 300 and failed > 20  # both paths were exercised


def test_a_burst_of_binds_between_attempts_of_one_shape() -> None:
    """Many rows changed since a shape was last used: recomputed in full, same answer."""
    nodes = [node(f"n{i}", cpu="8", memory="32Gi") for i in range(120)]
    fast, plain = _pair(nodes, 0)
    rng = random.Random(0)
    for k in range(400):
        shape = ("100m", "128Mi") if k % 100 else ("2", "1Gi")  # the big shape is rare
        p = pod(f"p{k}", cpu=shape[0], memory=shape[1], owner=f"rs{k % 3}")
        a, b = fast.schedule(p, pod_info(p)), plain.schedule(p, pod_info(p))
        assert a.to_json() == b.to_json()
        assert a.node is not None
        where = rng.choice([a.node, a.node, nodes[k % 120].name])
        for s in (fast, plain):
            info = pod_info(p)
            info.node = where
            s.table.add_pod(info)


def test_a_converged_control_plane_is_the_same_either_way() -> None:
    """Deployments of several pod shapes on 120 nodes, scaled up then down, with the
    incremental and the straightforward scheduler: the same pods on the same nodes with
    the same decision records and Events."""

    def deploy(name: str, replicas: int, cpu: str, mem: str) -> object:
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
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "x",
                                    "resources": {"requests": {"cpu": cpu, "memory": mem}},
                                }
                            ]
                        },
                    },
                },
            }
        )

    def run(incremental: bool) -> list[tuple[str, str | None, str | None]]:
        plane = ControlPlane(
            MemoryStore(), ClusterSpec.model_validate({"nodes": 120}), seed=5, clock=FakeClock()
        )
        plane.scheduler.filters = default_filters(incremental)
        plane.scheduler.scores = default_scores(incremental)
        plane.start()
        plane.run_until_idle()
        shapes = [("100m", "128Mi"), ("250m", "1Gi"), ("1", "256Mi"), ("50m", "64Mi")]
        for replicas in (150, 40):
            plane.apply(
                [deploy(f"d{i}", replicas, c, m) for i, (c, m) in enumerate(shapes)]  # type: ignore[misc]
            )
            plane.run_until_idle()
        pods = [p for p in plane.store.list("Pod") if isinstance(p, Pod)]
        out = [
            (p.key, p.spec.node_name, p.metadata.annotations.get("svclab.dev/scheduling"))
            for p in pods
        ]
        events = [
            (e.key, None, e.message)  # type: ignore[attr-defined]
            for e in plane.store.list("Event")
        ]
        return sorted(out) + sorted(events)

    assert run(True) == run(False)
