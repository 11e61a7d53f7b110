"""The node lifecycle controller's cordon pass: spec.unschedulable and the
node.kubernetes.io/unschedulable:NoSchedule taint go together, other taints untouched."""

from __future__ import annotations

from cp_helpers import make_plane

from control.runner import ControlPlane
from netmodel.objects import Node, Taint


def _node(plane: ControlPlane, name: str = "node-2") -> Node:
    n = plane.store.get("Node", name)
    assert isinstance(n, Node)
    return n


def _set(plane: ControlPlane, **spec: object) -> None:
    n = _node(plane)
    plane.apiserver.update(n.evolve(spec=n.spec.evolve(**spec)))
    plane.run_until_idle()


def test_cordon_taints_and_uncordon_untaints_keeping_other_taints() -> None:
    plane = make_plane(3)
    own = Taint(key="example.com/gpu", value="yes", effect="NoSchedule")
    _set(plane, taints=[own])
    assert _node(plane).spec.taints == [own]
    _set(plane, unschedulable=True)
    assert [(t.key, t.effect) for t in _node(plane).spec.taints] == [
        ("example.com/gpu", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
    rv = _node(plane).resource_version
    plane.node_lifecycle.reconcile("node-2")  # settled: nothing written
    assert _node(plane).resource_version == rv
    _set(plane, unschedulable=False)
    assert _node(plane).spec.taints == [own]
    # the other nodes were never cordoned and carry no taint
    assert _node(plane, "node-1").spec.taints == []
