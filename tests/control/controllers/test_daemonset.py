"""The DaemonSet controller under the deterministic runner: one pod per eligible node
(nodeSelector, node affinity, taints and the tolerations the controller adds), nodes
coming, going and changing, rolling updates (maxUnavailable, maxSurge), OnDelete, the
status, and the apiserver's defaults and validation of DaemonSets."""

from __future__ import annotations

from typing import Any

import pytest
from cp_helpers import make_plane, pods

from control.clock import FakeClock
from control.controllers.daemonset import REVISION_HASH_LABEL, target_node
from control.controllers.history import template_patch
from control.runner import ControlPlane
from netmodel.apps import ControllerRevision
from netmodel.daemonset import TEMPLATE_GENERATION_ANNOTATION, DaemonSet
from netmodel.errors import InvalidError
from netmodel.kinds import object_from_dict
from netmodel.objects import Node, NodeAddress, NodeStatus, ObjectMeta, Pod, Taint

MAX_ROUNDS = 200


def _ds(
    name: str = "agent",
    *,
    image: str = "agent:1",
    spec: dict[str, Any] | None = None,
    pod: dict[str, Any] | None = None,
) -> DaemonSet:
    labels = {"app": name}
    d = object_from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "main", "image": image}], **(pod or {})},
                },
                **(spec or {}),
            },
        }
    )
    assert isinstance(d, DaemonSet)
    return d


def _stored(plane: ControlPlane, name: str = "agent") -> DaemonSet:
    d = plane.store.get("DaemonSet", f"default/{name}")
    assert isinstance(d, DaemonSet)
    return d


def _per_node(plane: ControlPlane, name: str = "agent") -> dict[str, list[Pod]]:
    out: dict[str, list[Pod]] = {}
    for p in pods(plane, f"{name}-"):
        out.setdefault(target_node(p) or "", []).append(p)
    return out


def _node(plane: ControlPlane, name: str) -> Node:
    n = plane.store.get("Node", name)
    assert isinstance(n, Node)
    return n


def _set_node(plane: ControlPlane, name: str, **changes: Any) -> None:
    """Relabel or taint a node through the apiserver."""
    n = _node(plane, name)
    if "labels" in changes:
        n = n.with_meta(labels=changes["labels"])
    if "taints" in changes:
        n = n.evolve(spec=n.spec.evolve(taints=changes["taints"]))
    plane.apiserver.update(n)


def _image(p: Pod) -> str | None:
    return p.spec.containers[0].image


def test_one_pod_per_node_bound_by_node_affinity_with_the_daemon_tolerations() -> None:
    plane = make_plane(3)
    plane.apply([_ds()])
    plane.run_until_idle()

    per_node = _per_node(plane)
    assert sorted(per_node) == ["node-1", "node-2", "node-3"]
    for node, ps in per_node.items():
        (p,) = ps
        assert p.spec.node_name == node and p.status.phase == "Running" and p.is_ready
        aff = p.spec.affinity.node_affinity  # type: ignore[union-attr]
        terms = aff.required_during_scheduling_ignored_during_execution.node_selector_terms  # type: ignore[union-attr]
        assert [t.model_dump(exclude_defaults=True) for t in terms] == [
            {"match_fields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
        assert {(t.key, t.operator, t.effect) for t in p.spec.tolerations} == {
            ("node.kubernetes.io/not-ready", "Exists", "NoExecute"),
            ("node.kubernetes.io/unreachable", "Exists", "NoExecute"),
            ("node.kubernetes.io/disk-pressure", "Exists", "NoSchedule"),
            ("node.kubernetes.io/memory-pressure", "Exists", "NoSchedule"),
            ("node.kubernetes.io/pid-pressure", "Exists", "NoSchedule"),
            ("node.kubernetes.io/unschedulable", "Exists", "NoSchedule"),
        }
        assert p.labels["pod-template-generation"] == "1"
        ref = p.metadata.controller_ref()
        assert ref is not None and (ref.kind, ref.name) == ("DaemonSet", "agent")
    ds = _stored(plane)
    assert ds.to_dict()["status"] == {
        "currentNumberScheduled": 3,
        "desiredNumberScheduled": 3,
        "numberMisscheduled": 0,
        "numberReady": 3,
        "numberAvailable": 3,
        "updatedNumberScheduled": 3,
        "observedGeneration": 1,
    }
    assert ds.metadata.annotations[TEMPLATE_GENERATION_ANNOTATION] == "1"


def test_host_network_pods_tolerate_network_unavailable_and_take_the_node_address() -> None:
    plane = make_plane(2)
    plane.apply([_ds(pod={"hostNetwork": True})])
    plane.run_until_idle()
    for node, (p,) in _per_node(plane).items():
        assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in {
            (t.key, t.effect) for t in p.spec.tolerations
        }
        assert p.status.pod_ip == _node(plane, node).internal_ips[0] == p.status.host_ip


def test_nodes_coming_going_and_relabelled_are_followed() -> None:
    plane = make_plane(3)
    plane.apply([_ds(pod={"nodeSelector": {"role": "edge"}})])
    plane.run_until_idle()
    assert _per_node(plane) == {}
    assert _stored(plane).status.desired_number_scheduled == 0

    _set_node(plane, "node-2", labels={"role": "edge"})
    plane.run_until_idle()
    assert sorted(_per_node(plane)) == ["node-2"]

    plane.apiserver.create(
        Node(
            metadata=ObjectMeta(name="node-4", labels={"role": "edge"}),
            status=NodeStatus(addresses=[NodeAddress(type="InternalIP", address="172.18.0.40")]),
        )
    )
    plane.run_until_idle()
    assert sorted(_per_node(plane)) == ["node-2", "node-4"]
    (p4,) = _per_node(plane)["node-4"]
    assert p4.status.phase == "Running"

    _set_node(plane, "node-2", labels={"role": "core"})  # no longer eligible: pod goes
    plane.delete("Node", "node-4")  # gone: its pod with it
    plane.run_until_idle()
    assert _per_node(plane) == {}
    s = _stored(plane).status
    assert (s.desired_number_scheduled, s.current_number_scheduled) == (0, 0)


def test_required_node_affinity_selects_nodes() -> None:
    plane = make_plane(3)
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "NotIn", "values": ["node-1"]}
                        ]
                    }
                ]
            }
        }
    }
    plane.apply([_ds(pod={"affinity": affinity})])
    plane.run_until_idle()
    assert sorted(_per_node(plane)) == ["node-2", "node-3"]


def test_taints_noschedule_keeps_running_pods_noexecute_evicts() -> None:
    plane = make_plane(3)
    _set_node(plane, "node-1", taints=[Taint(key="dedicated", value="db", effect="NoSchedule")])
    plane.run_until_idle()
    plane.apply([_ds()])
    plane.run_until_idle()
    assert sorted(_per_node(plane)) == ["node-2", "node-3"]

    # a NoSchedule taint added under a running pod: the pod stays, and is not counted
    _set_node(plane, "node-2", taints=[Taint(key="dedicated", value="db", effect="NoSchedule")])
    plane.run_until_idle()
    assert sorted(_per_node(plane)) == ["node-2", "node-3"]
    s = _stored(plane).status
    assert (s.desired_number_scheduled, s.number_misscheduled) == (1, 1)

    # NoExecute: the pod goes
    _set_node(plane, "node-3", taints=[Taint(key="dedicated", value="db", effect="NoExecute")])
    plane.run_until_idle()
    assert sorted(_per_node(plane)) == ["node-2"]

    # a tolerated taint: pods come back
    tol = [{"key": "dedicated", "operator": "Exists"}]
    cur = _stored(plane)
    spec = _ds(pod={"tolerations": tol}).spec
    plane.apiserver.update(cur.evolve(spec=cur.spec.evolve(template=spec.template)))
    plane.run_until_idle()
    assert sorted(_per_node(plane)) == ["node-1", "node-2", "node-3"]


def test_the_added_tolerations_let_pods_onto_unschedulable_and_not_ready_nodes() -> None:
    plane = make_plane(
        [
            {"name": "node-1", "unschedulable": True},
            {
                "name": "node-2",
                "taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}],
            },
            {
                "name": "node-3",
                "taints": [
                    {"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}
                ],
            },
        ]
    )
    plane.apply([_ds("agent"), _ds("hostagent", pod={"hostNetwork": True})])
    plane.run_until_idle()
    assert sorted(_per_node(plane, "agent")) == ["node-1", "node-2"]
    assert sorted(_per_node(plane, "hostagent")) == ["node-1", "node-2", "node-3"]


def _rollout(plane: ControlPlane, n: int, check: Any) -> None:
    for _ in range(MAX_ROUNDS):
        if not plane.run_round():
            return
        check(plane)
    raise AssertionError("no fixed point")


def _update_image(plane: ControlPlane, image: str, name: str = "agent") -> None:
    cur = _stored(plane, name)
    t = cur.spec.template
    c = t.spec.containers[0].evolve(image=image)
    plane.apiserver.update(
        cur.evolve(spec=cur.spec.evolve(template=t.evolve(spec=t.spec.evolve(containers=[c]))))
    )


@pytest.mark.parametrize("unavailable", [1, 2, "50%"])
def test_rolling_update_keeps_at_most_max_unavailable_nodes_without_an_available_pod(
    unavailable: int | str,
) -> None:
    n = 5
    bound = {1: 1, 2: 2, "50%": 3}[unavailable]  # 50% of 5 rounds up
    plane = make_plane(n)
    plane.apply([_ds(spec={"updateStrategy": {"rollingUpdate": {"maxUnavailable": unavailable}}})])
    plane.run_until_idle()
    old_hash = _per_node(plane)["node-1"][0].labels[REVISION_HASH_LABEL]
    _update_image(plane, "agent:2")
    seen_short = 0

    def check(plane: ControlPlane) -> None:
        nonlocal seen_short
        per_node = _per_node(plane)
        avail = sum(
            1 for ps in per_node.values() if any(p.is_ready and not p.is_terminating for p in ps)
        )
        assert avail >= n - bound, per_node
        assert all(len(ps) <= 1 for ps in per_node.values())  # no surge
        seen_short = max(seen_short, n - avail)

    _rollout(plane, n, check)
    per_node = _per_node(plane)
    assert len(per_node) == n
    assert {_image(p) for ps in per_node.values() for p in ps} == {"agent:2"}
    assert {p.labels[REVISION_HASH_LABEL] for ps in per_node.values() for p in ps} != {old_hash}
    assert seen_short == bound  # it did use the budget
    ds = _stored(plane)
    assert ds.metadata.annotations[TEMPLATE_GENERATION_ANNOTATION] == "2"
    assert ds.status.updated_number_scheduled == n and ds.status.observed_generation == 2


def test_rolling_update_with_max_surge_never_leaves_a_node_without_an_available_pod() -> None:
    n = 4
    plane = make_plane(n)
    strategy = {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    plane.apply([_ds(spec={"updateStrategy": strategy})])
    plane.run_until_idle()
    _update_image(plane, "agent:2")
    most = 0

    def check(plane: ControlPlane) -> None:
        nonlocal most
        per_node = _per_node(plane)
        assert len(per_node) == n
        for ps in per_node.values():
            assert any(p.is_ready and not p.is_terminating for p in ps), ps
        doubled = sum(1 for ps in per_node.values() if len(ps) > 1)
        assert doubled <= 1
        most = max(most, doubled)

    _rollout(plane, n, check)
    assert most == 1
    assert {_image(p) for ps in _per_node(plane).values() for p in ps} == {"agent:2"}
    assert all(len(ps) == 1 for ps in _per_node(plane).values())


def test_surge_waits_min_ready_seconds_before_deleting_the_old_pod() -> None:
    plane = make_plane(3)
    strategy = {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    plane.apply([_ds(spec={"updateStrategy": strategy, "minReadySeconds": 30})])
    plane.run_until_idle()
    clock = plane.clock
    assert isinstance(clock, FakeClock)
    clock.advance(30)
    plane.run_until_idle()
    assert _stored(plane).status.number_available == 3
    _update_image(plane, "agent:2")
    steps = []
    for _ in range(5):
        plane.run_until_idle()
        per_node = _per_node(plane)
        steps.append(sorted(n for n, ps in per_node.items() if len(ps) == 2))
        if all(_image(p) == "agent:2" for ps in per_node.values() for p in ps):
            break
        clock.advance(30)
    # one node at a time, each waiting for its new pod to be available 30 s
    assert steps == [["node-1"], ["node-2"], ["node-3"], []]
    s = _stored(plane).status
    assert (s.number_available, s.updated_number_scheduled) == (3, 3)


def test_on_delete_replaces_only_deleted_pods() -> None:
    plane = make_plane(3)
    plane.apply([_ds(spec={"updateStrategy": {"type": "OnDelete"}})])
    plane.run_until_idle()
    _update_image(plane, "agent:2")
    plane.run_until_idle()
    assert {_image(p) for p in pods(plane, "agent-")} == {"agent:1"}
    assert _stored(plane).status.updated_number_scheduled is None  # 0: omitted
    (victim,) = _per_node(plane)["node-2"]
    plane.delete("Pod", victim.key)
    plane.run_until_idle()
    images = {n: _image(p) for n, (p,) in _per_node(plane).items()}
    assert images == {"node-1": "agent:1", "node-2": "agent:2", "node-3": "agent:1"}
    assert _stored(plane).status.updated_number_scheduled == 1


def test_extra_pods_on_a_node_are_deleted_oldest_kept_and_orphans_adopted() -> None:
    plane = make_plane(2)
    plane.apply([_ds()])
    plane.run_until_idle()
    (first,) = _per_node(plane)["node-1"]
    orphan = Pod.model_validate(
        {
            "metadata": {"name": "stray", "namespace": "default", "labels": {"app": "agent"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "agent:1"}]},
        }
    )
    plane.apiserver.create(orphan)
    plane.run_until_idle()
    names = {p.name for p in pods(plane)}
    assert "stray" not in names and first.name in names  # adopted, then the extra deleted
    assert len(_per_node(plane)["node-1"]) == 1


def test_deleting_the_daemonset_deletes_its_pods() -> None:
    plane = make_plane(2)
    plane.apply([_ds()])
    plane.run_until_idle()
    assert len(pods(plane, "agent-")) == 2
    plane.delete("DaemonSet", "default/agent")
    plane.run_until_idle()
    assert pods(plane, "agent-") == []


# --------------------------------------------------------------------------- apiserver


def test_defaults() -> None:
    plane = make_plane(1)
    plane.apply([_ds()])
    d = _stored(plane).to_dict()
    assert d["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    assert d["spec"]["revisionHistoryLimit"] == 10
    assert d["spec"]["template"]["spec"]["restartPolicy"] == "Always"
    assert d["metadata"]["generation"] == 1


@pytest.mark.parametrize(
    ("spec", "pod", "message"),
    [
        (
            {"updateStrategy": {"type": "Rolling"}},
            None,
            'spec.updateStrategy: Unsupported value: "Rolling": supported values: '
            '"RollingUpdate", "OnDelete"',
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}}},
            None,
            "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 1: "
            "may not be set when maxUnavailable is non-zero",
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}}},
            None,
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: "
            "cannot be 0 when maxSurge is 0",
        ),
        (
            {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "120%"}}},
            None,
            'spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: "120%": '
            "must not be greater than 100%",
        ),
        (
            {"minReadySeconds": -1},
            None,
            "spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            None,
            {"restartPolicy": "Never"},
            'spec.template.spec.restartPolicy: Unsupported value: "Never": '
            'supported values: "Always"',
        ),
        (
            {"selector": {"matchLabels": {"app": "other"}}},
            None,
            "spec.template.metadata.labels: Invalid value: ",
        ),
    ],
)
def test_validation(spec: dict[str, Any] | None, pod: dict[str, Any] | None, message: str) -> None:
    plane = make_plane(1)
    with pytest.raises(InvalidError) as e:
        plane.apiserver.create(_ds(spec=spec, pod=pod))
    assert message in str(e.value)
    assert plane.store.list("DaemonSet") == []


def test_selector_is_immutable_and_template_generation_counts_template_changes() -> None:
    plane = make_plane(1)
    plane.apply([_ds()])
    cur = _stored(plane)
    plane.apiserver.update(cur.evolve(spec=cur.spec.evolve(min_ready_seconds=0)))
    after = _stored(plane)
    assert after.metadata.annotations[TEMPLATE_GENERATION_ANNOTATION] == "1"
    assert after.metadata.generation == 2
    _update_image(plane, "agent:2")
    after = _stored(plane)
    assert after.metadata.annotations[TEMPLATE_GENERATION_ANNOTATION] == "2"
    assert after.metadata.generation == 3
    sel = type(after.spec.selector).model_validate(
        {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    )  # still matches the template
    with pytest.raises(InvalidError, match=r"spec\.selector: Invalid value: .*field is immutable"):
        plane.apiserver.update(after.evolve(spec=after.spec.evolve(selector=sel)))


# --------------------------------------------------------------------------- revisions


def _revisions(plane: ControlPlane) -> dict[str, tuple[int, str]]:
    """name -> (revision, controller-revision-hash label)"""
    return {
        r.name: (r.revision, r.labels[REVISION_HASH_LABEL])
        for r in plane.store.list("ControllerRevision")
        if isinstance(r, ControllerRevision)
    }


def _pod_hashes(plane: ControlPlane) -> set[str]:
    return {p.labels[REVISION_HASH_LABEL] for p in pods(plane, "agent-")}


def test_revisions_follow_the_template_and_a_rollback_renumbers_the_old_one() -> None:
    plane = make_plane(2)
    plane.apply([_ds()])
    plane.run_until_idle()
    ((name1, (n1, h1)),) = _revisions(plane).items()
    assert (name1, n1) == (f"agent-{h1}", 1) and _pod_hashes(plane) == {h1}
    r1 = plane.store.get("ControllerRevision", f"default/{name1}")
    assert isinstance(r1, ControllerRevision)
    assert r1.data == template_patch(_stored(plane).spec.template)
    ref = r1.metadata.controller_ref()
    assert ref is not None and (ref.kind, ref.name) == ("DaemonSet", "agent")

    _update_image(plane, "agent:2")
    plane.run_until_idle()
    revs = _revisions(plane)
    (h2,) = {h for _, h in revs.values()} - {h1}
    assert revs == {name1: (1, h1), f"agent-{h2}": (2, h2)}
    assert _pod_hashes(plane) == {h2}

    _update_image(plane, "agent:1")  # back: the old revision becomes the newest
    plane.run_until_idle()
    assert _revisions(plane) == {name1: (3, h1), f"agent-{h2}": (2, h2)}
    assert _pod_hashes(plane) == {h1}
    assert {_image(p) for p in pods(plane, "agent-")} == {"agent:1"}


def test_revision_history_limit_and_deletion_with_the_daemonset() -> None:
    plane = make_plane(2)
    plane.apply([_ds(spec={"revisionHistoryLimit": 1})])
    plane.run_until_idle()
    for image in ("agent:2", "agent:3", "agent:4"):
        _update_image(plane, image)
        plane.run_until_idle()
    revs = _revisions(plane)
    assert sorted(n for n, _ in revs.values()) == [3, 4]  # the current one and one old
    plane.delete("DaemonSet", "default/agent")
    plane.run_until_idle()
    assert _revisions(plane) == {} and pods(plane, "agent-") == []
