"""control.controllers.podsbynode: the pod-by-node index three controllers share."""

from __future__ import annotations

from control.controllers.podsbynode import PodsByNode


def test_bind_moves_and_unbind_forgets() -> None:
    idx = PodsByNode()
    idx.bind("ns/a", "node-1")
    idx.bind("ns/b", "node-1")
    idx.bind("ns/a", "node-2")  # rescheduled: moves
    assert idx.on("node-1") == ["ns/b"]
    assert idx.on("node-2") == ["ns/a"]
    assert idx.node_of("ns/a") == "node-2"
    idx.unbind("ns/b")
    assert idx.on("node-1") == [] and list(idx) == ["node-2"]
    idx.unbind("ns/missing")  # never bound: nothing
    idx.clear()
    assert list(idx) == [] and idx.node_of("ns/a") is None


def test_on_is_a_copy_safe_to_mutate_under() -> None:
    idx = PodsByNode()
    for k in ("ns/a", "ns/b", "ns/c"):
        idx.bind(k, "n")
    for key in idx.on("n"):
        idx.unbind(key)
    assert idx.on("n") == []
