"""Pods pinned to named nodes (required node affinity ``matchFields metadata.name In``, as
the DaemonSet controller pins its pods) are decided looking at their nodes only: the
decision is the full walk's, field for field (node, message, counts, the record's rows
and their filter reasons, the rotating start), on clusters with cordoned, tainted, full
and labelled nodes, pinned pods mixed with unpinned ones."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sched_helpers import node, pod, scheduler

from control.scheduler.table import pod_info
from netmodel.objects import Node, Pod


def _nodes(rng: random.Random, n: int) -> list[Node]:
    return [
        node(
            f"n{i:03d}",
            cpu=rng.choice(["500m", "1", "4"]),
            memory=rng.choice(["512Mi", "4Gi"]),
            pods=str(rng.choice([2, 110])),
            labels={"zone": rng.choice(["a", "b"])},
            taints=[{"key": "gpu", "effect": "NoSchedule"}] if rng.random() < 0.1 else None,
            unschedulable=rng.random() < 0.05,
        )
        for i in range(n)
    ]


def _pinned(rng: random.Random, k: int, names: list[str]) -> Pod:
    spec: dict[str, Any] = {}
    if rng.random() < 0.8:
        picked = rng.sample(names, rng.choice([1, 1, 1, 2, 3]))
        if rng.random() < 0.1:
            picked.append("no-such-node")
        terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": picked}]}]
        if rng.random() < 0.2:
            terms[0]["matchExpressions"] = [{"key": "zone", "operator": "In", "values": ["a"]}]
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    if rng.random() < 0.1:
        spec["nodeSelector"] = {"zone": "b"}
    if rng.random() < 0.3:
        spec["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return pod(
        f"p{k}",
        cpu=rng.choice([None, "100m", "1"]),
        memory=rng.choice([None, "128Mi", "1Gi"]),
        owner=f"ds{rng.randrange(3)}",
        **spec,
    )


@pytest.mark.parametrize(("seed", "n_nodes"), [(1, 30), (2, 150), (3, 240)])
def test_pinned_decisions_are_the_full_walks(seed: int, n_nodes: int) -> None:
    rng = random.Random(seed)
    nodes = _nodes(rng, n_nodes)
    names = [n.name for n in nodes]
    fast = scheduler(nodes, seed=seed)
    full = scheduler(nodes, seed=seed, pinned_fast_path=False)
    bound = failed = 0
    for k in range(600):
        p = _pinned(rng, k, names)
        a, b = fast.schedule(p, pod_info(p)), full.schedule(p, pod_info(p))
        assert a.to_json() == b.to_json(), f"attempt {k}"
        assert fast._next_start == full._next_start
        if a.node is None:
            failed += 1
            continue
        bound += 1
        for s in (fast, full):
            info = pod_info(p)
            info.node = a.node
            s.table.add_pod(info)
    assert full.stats.pinned == 0
    assert fast.stats.pinned > 50 and bound > 150 and failed > 30  # every path was taken
