"""app.netpolview reads pods as the node agent does: the emulated view's policy rules and
the agents' cannot differ on a pod that has ended but still shows its address."""

from __future__ import annotations

from app.netpolview import read_policy_pods
from control.store.memory import MemoryStore
from netmodel.objects import Namespace, Pod


def _pod(name: str, ip: str, phase: str) -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": phase, "podIP": ip},
        }
    )


def test_finished_pods_are_left_out_as_the_agent_leaves_them() -> None:
    store = MemoryStore()
    store.create(Namespace.model_validate({"metadata": {"name": "default", "labels": {"a": "b"}}}))
    store.create(_pod("running", "10.244.1.2", "Running"))
    store.create(_pod("done", "10.244.1.3", "Succeeded"))
    store.create(_pod("crashed", "10.244.1.4", "Failed"))
    pods, namespaces = read_policy_pods(store)
    assert [p.name for p in pods] == ["running"]
    assert namespaces == {"default": {"a": "b"}}
