"""Nodes that fail, under the deterministic runner and a FakeClock: a kubelet that stops
renewing its Lease makes its node NotReady after the node-monitor grace period, with the
unreachable taints; its pods turn not ready, their endpoints too, and kube-proxy's rules
drop them; the taint eviction controller deletes them after their tolerationSeconds and
the ReplicaSet replaces them on the other nodes. A kubelet that comes back recovers its
node."""

from __future__ import annotations

from typing import Any

from cp_helpers import deployment, make_plane, service

from control.agents.kubeproxy import EmulatedRules, KubeProxy
from control.controllers.nodelifecycle import UNKNOWN_MESSAGE, UNREACHABLE
from control.events import timeline
from control.runner import ControlPlane
from netmodel.kinds import object_from_dict
from netmodel.objects import EndpointSlice, Node, Pod, Taint

GRACE = 50.0  # kube-controller-manager's default --node-monitor-grace-period
PERIOD = 5.0  # and --node-monitor-period


def _node(plane: ControlPlane, name: str) -> Node:
    n = plane.store.get("Node", name)
    assert isinstance(n, Node)
    return n


def _ready(plane: ControlPlane, name: str) -> str:
    return next(c.status for c in _node(plane, name).status.conditions if c.type == "Ready")


def _pods(plane: ControlPlane) -> dict[str, Pod]:
    return {p.name: p for p in plane.store.list("Pod", "default") if isinstance(p, Pod)}


def _pod(name: str, node: str, tolerations: list[dict[str, Any]] | None = None) -> Pod:
    p = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "app", "image": "x", "ports": [{"containerPort": 8080}]}],
                "tolerations": tolerations or [],
            },
        }
    )
    assert isinstance(p, Pod)
    return p


def _cordon(plane: ControlPlane, *names: str, on: bool) -> None:
    for name in names:
        n = _node(plane, name)
        plane.apiserver.update(n.evolve(spec=n.spec.evolve(unschedulable=on)))
    plane.run_until_idle()


def _endpoints(plane: ControlPlane) -> dict[str, bool]:
    """Address -> ready, over the web Service's EndpointSlices."""
    out: dict[str, bool] = {}
    for s in plane.store.list("EndpointSlice", "default"):
        assert isinstance(s, EndpointSlice)
        if s.metadata.labels.get("kubernetes.io/service-name") != "web":
            continue
        for e in s.endpoints:
            for a in e.addresses:
                out[a] = bool(e.conditions.ready)
    return out


def _advance(plane: ControlPlane, seconds: float) -> None:
    """Advance the clock monitor period by monitor period, converging after each."""
    clock = plane.clock
    assert hasattr(clock, "advance")
    left = seconds
    while left > 0:
        step = min(PERIOD, left)
        clock.advance(step)
        plane.run_until_idle()
        left -= step


def test_a_lost_kubelets_node_turns_not_ready_its_pods_leave_the_rules_and_are_replaced() -> None:
    plane = make_plane(3)
    sink = EmulatedRules()
    proxy = KubeProxy("node-1", plane.cluster, None, sink, plane.recorder, clock=plane.clock)
    plane.add_agent(proxy)
    _cordon(plane, "node-1", "node-3", on=True)  # the web pods all start on node-2
    plane.apply(
        [
            deployment("web", 3, labels={"app": "web", "tier": "rs"}),
            service("web", {"app": "web"}),
            _pod(
                "stay",
                "node-2",
                [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}],
            ),
            _pod(
                "brief",
                "node-2",
                [
                    {
                        "key": UNREACHABLE,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 60,
                    }
                ],
            ),
        ]
    )
    plane.run_until_idle()
    pods = _pods(plane)
    assert len(pods) == 5 and all(
        p.spec.node_name == "node-2" and p.is_ready for p in pods.values()
    )
    ips = {p.status.pod_ip for p in pods.values()}
    assert set(_endpoints(plane)) == ips and all(_endpoints(plane).values())
    rules = sink.nodes["node-1"].save_text
    assert all(f"--to-destination {ip}:8080" in rules for ip in ips)
    _cordon(plane, "node-1", "node-3", on=False)
    assert {p.spec.node_name for p in _pods(plane).values()} == {"node-2"}  # nothing moved

    plane.kubelets.stop("node-2")
    _advance(plane, GRACE)  # the last renewal was at the start: exactly the grace period
    assert _ready(plane, "node-2") == "True"
    assert _node(plane, "node-2").spec.taints == []
    _advance(plane, PERIOD)  # the next check is past it
    node = _node(plane, "node-2")
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason, ready.message) == (
        "Unknown",
        "NodeStatusUnknown",
        UNKNOWN_MESSAGE,
    )
    assert [(t.key, t.effect) for t in node.spec.taints] == [
        (UNREACHABLE, "NoSchedule"),
        (UNREACHABLE, "NoExecute"),
    ]
    assert _ready(plane, "node-1") == _ready(plane, "node-3") == "True"
    pods = _pods(plane)
    assert len(pods) == 5 and not any(p.is_ready for p in pods.values())
    assert set(_endpoints(plane)) == ips and not any(_endpoints(plane).values())
    rules = sink.nodes["node-1"].save_text
    assert not any(f"--to-destination {ip}:8080" in rules for ip in ips)

    # tolerationSeconds 60: gone 60 s after the taint came; the default 300 s: the rest
    _advance(plane, 55)
    assert not _pods(plane)["brief"].is_terminating
    _advance(plane, PERIOD)
    assert _pods(plane)["brief"].is_terminating
    _advance(plane, 300 - 60 - PERIOD)
    web_pods = [p for p in _pods(plane).values() if p.name.startswith("web-")]
    assert not any(p.is_terminating for p in web_pods)
    _advance(plane, PERIOD)
    pods = _pods(plane)
    gone = [p for p in pods.values() if p.spec.node_name == "node-2" and p.is_terminating]
    assert sorted(p.name for p in gone if p.name.startswith("web-")) == sorted(
        p.name for p in web_pods
    )
    assert not pods["stay"].is_terminating  # tolerates unreachable for ever
    fresh = [p for p in pods.values() if p.name.startswith("web-") and not p.is_terminating]
    assert len(fresh) == 3 and all(p.spec.node_name in ("node-1", "node-3") for p in fresh)
    assert all(p.is_ready for p in fresh)
    assert all(_endpoints(plane)[p.status.pod_ip or ""] for p in fresh)
    rules = sink.nodes["node-1"].save_text
    assert all(f"--to-destination {p.status.pod_ip}:8080" in rules for p in fresh)
    reasons = [(e.reason, e.involved_object.name) for e in timeline(plane.store)]
    assert ("NodeNotReady", "node-2") in reasons
    assert ("TaintManagerEviction", "brief") in reasons

    # the kubelet comes back: Ready again, the taints go, its pods run again
    plane.kubelets.restart("node-2")
    plane.run_until_idle()
    assert _ready(plane, "node-2") == "True"
    assert _node(plane, "node-2").spec.taints == []
    pods = _pods(plane)
    assert pods["stay"].is_ready and "brief" not in pods
    assert not any(p.spec.node_name == "node-2" and p.is_terminating for p in pods.values())
    _advance(plane, GRACE + PERIOD)  # and it keeps renewing
    assert _ready(plane, "node-2") == "True"


def test_no_execute_taints_evict_per_toleration() -> None:
    plane = make_plane(2)
    forever = {"key": "example.com/maint", "operator": "Exists", "effect": "NoExecute"}
    plane.apply(
        [
            _pod("plain", "node-1"),
            _pod("forever", "node-1", [forever]),
            _pod("thirty", "node-1", [{**forever, "tolerationSeconds": 30}]),
            _pod("other", "node-2"),
        ]
    )
    plane.run_until_idle()
    n = _node(plane, "node-1")
    plane.apiserver.update(n.evolve(spec=n.spec.evolve(taints=[_taint("example.com/maint")])))
    plane.run_until_idle()
    pods = _pods(plane)
    assert "plain" not in pods  # not tolerated: deleted now (its kubelet finished it)
    assert not pods["forever"].is_terminating and not pods["thirty"].is_terminating
    assert not pods["other"].is_terminating
    plane.clock.advance(29)  # type: ignore[attr-defined]
    plane.run_until_idle()
    assert not _pods(plane)["thirty"].is_terminating
    plane.clock.advance(1)  # type: ignore[attr-defined]
    plane.run_until_idle()
    pods = _pods(plane)
    assert not pods["forever"].is_terminating
    # the node's kubelet is alive: the evicted pods are gone
    assert sorted(pods) == ["forever", "other"]


def test_a_countdown_ends_when_the_taint_goes() -> None:
    plane = make_plane(1)
    tol = {"key": "example.com/maint", "operator": "Exists", "effect": "NoExecute"}
    plane.apply([_pod("thirty", "node-1", [{**tol, "tolerationSeconds": 30}])])
    plane.run_until_idle()
    n = _node(plane, "node-1")
    tainted = n.spec.evolve(taints=[*n.spec.taints, _taint("example.com/maint")])
    plane.apiserver.update(n.evolve(spec=tainted))
    plane.run_until_idle()
    plane.clock.advance(20)  # type: ignore[attr-defined]
    plane.run_until_idle()
    n = _node(plane, "node-1")
    plane.apiserver.update(n.evolve(spec=n.spec.evolve(taints=[])))
    plane.run_until_idle()
    plane.clock.advance(20)  # type: ignore[attr-defined]
    plane.run_until_idle()
    assert not _pods(plane)["thirty"].is_terminating
    reasons = [
        (e.reason, e.message) for e in timeline(plane.store) if e.involved_object.name == "thirty"
    ]
    assert ("TaintManagerEviction", "Cancelling deletion of Pod default/thirty") in reasons


def _taint(key: str) -> Taint:
    return Taint(key=key, effect="NoExecute")
