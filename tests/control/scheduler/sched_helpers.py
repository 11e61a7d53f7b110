"""Helpers for scheduler tests: a scheduler over hand-made nodes, pods from dicts."""

from __future__ import annotations

from typing import Any

from control.apiserver.server import APIServer
from control.clock import FakeClock
from control.events import Recorder
from control.scheduler import Scheduler
from control.scheduler.table import pod_info
from control.store.base import WatchEvent
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.objects import Node, Pod


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> Node:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    return Node.model_validate(
        {
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": {"taints": taints or [], "unschedulable": unschedulable, "podCIDR": None},
            "status": {"allocatable": alloc, "capacity": alloc},
        }
    )


def pod(
    name: str,
    *,
    cpu: str | None = None,
    memory: str | None = None,
    labels: dict[str, str] | None = None,
    node_name: str | None = None,
    owner: str | None = None,
    **spec: Any,
) -> Pod:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
            }
        ]
    return Pod.model_validate(
        {
            "metadata": meta,
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}],
                **spec,
            },
        }
    )


def scheduler(nodes: list[Node], *, seed: int = 0, **kw: Any) -> Scheduler:
    store = MemoryStore()
    clock = FakeClock()
    rec = Recorder(store, clock)
    api = APIServer(store, ClusterSpec(nodes=0), clock=clock, recorder=rec)
    s = Scheduler(api, rec, clock, seed=seed, **kw)
    s.handle([WatchEvent("ADDED", n, i + 1) for i, n in enumerate(nodes)])
    return s


def place(s: Scheduler, *pods: Pod) -> None:
    """Account already-bound pods in the scheduler's cache."""
    s.handle([WatchEvent("ADDED", p, 1) for p in pods])


def decide(s: Scheduler, p: Pod):  # type: ignore[no-untyped-def]
    return s.schedule(p, pod_info(p))
