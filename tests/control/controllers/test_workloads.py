"""Deployment and ReplicaSet controllers: create, scale up and down, roll, status, names."""

from __future__ import annotations

import re

from cp_helpers import deployment, make_plane, pods, reasons

from control.controllers.deployment import TEMPLATE_HASH_LABEL, pod_template_hash
from control.controllers.replicaset import deletion_order
from netmodel.objects import (
    Condition,
    Deployment,
    ObjectMeta,
    Pod,
    PodSpec,
    PodStatus,
    ReplicaSet,
)

POD_NAME = re.compile(r"^web-([bcdfghjklmnpqrstvwxz2456789]+)-[bcdfghjklmnpqrstvwxz2456789]{5}$")


def _rs(plane) -> list[ReplicaSet]:  # type: ignore[no-untyped-def]
    return [r for r in plane.store.list("ReplicaSet") if isinstance(r, ReplicaSet)]


def test_deployment_creates_an_owned_replicaset_named_by_template_hash() -> None:
    plane = make_plane(3)
    plane.apply([deployment("web", 3)])
    plane.run_until_idle()
    d = plane.store.get("Deployment", "default/web")
    assert isinstance(d, Deployment)
    (rs,) = _rs(plane)
    h = pod_template_hash(d.spec.template)
    assert rs.name == f"web-{h}"
    assert rs.labels[TEMPLATE_HASH_LABEL] == h
    assert rs.spec.selector.match_labels == {"app": "web", TEMPLATE_HASH_LABEL: h}
    ref = rs.metadata.controller_ref()
    assert ref is not None and (ref.kind, ref.name, ref.uid) == (
        "Deployment",
        "web",
        d.metadata.uid,
    )
    assert rs.spec.replicas == 3
    assert "ScalingReplicaSet" in reasons(plane, "Deployment", "web")


def test_template_hash_is_the_templates_whatever_was_asked_before() -> None:
    """The hash is remembered per template object: asking again gives the same hash,
    an equal template made apart the same, a changed template (or another collision
    count) its own, and the pod-template-hash label does not count."""
    t = deployment("web", 3).spec.template
    h = pod_template_hash(t)
    assert pod_template_hash(t) == h
    assert pod_template_hash(t.model_copy(deep=True)) == h
    assert pod_template_hash(t, 1) != h and pod_template_hash(t, 1) == pod_template_hash(t, 1)
    labelled = t.evolve(metadata=t.metadata.evolve(labels={**t.metadata.labels, "v": "2"}))
    assert pod_template_hash(labelled) != h
    hashed = t.evolve(
        metadata=t.metadata.evolve(labels={**t.metadata.labels, TEMPLATE_HASH_LABEL: h})
    )
    assert pod_template_hash(hashed) == h
    assert pod_template_hash(t, 0) == h


def test_replicaset_pods_are_named_labelled_and_owned() -> None:
    plane = make_plane(3)
    plane.apply([deployment("web", 3)])
    plane.run_until_idle()
    (rs,) = _rs(plane)
    ps = pods(plane, "web-")
    assert len(ps) == 3
    for p in ps:
        m = POD_NAME.match(p.name)
        assert m is not None and m.group(1) == rs.labels[TEMPLATE_HASH_LABEL]
        assert p.labels == {"app": "web", TEMPLATE_HASH_LABEL: rs.labels[TEMPLATE_HASH_LABEL]}
        ref = p.metadata.controller_ref()
        assert ref is not None and (ref.kind, ref.name, ref.uid) == (
            "ReplicaSet",
            rs.name,
            rs.metadata.uid,
        )
        assert p.status.phase == "Running" and p.is_ready
    assert reasons(plane, "ReplicaSet", rs.name).count("SuccessfulCreate") == 3


def test_status_counts_replicas_ready_and_available() -> None:
    plane = make_plane(2)
    plane.apply([deployment("web", 4)])
    plane.run_until_idle()
    d = plane.store.get("Deployment", "default/web")
    assert isinstance(d, Deployment)
    s = d.status
    assert (s.replicas, s.ready_replicas, s.available_replicas, s.updated_replicas) == (4, 4, 4, 4)
    assert s.observed_generation == d.metadata.generation
    (rs,) = _rs(plane)
    assert (rs.status.replicas, rs.status.ready_replicas, rs.status.available_replicas) == (4, 4, 4)


def test_scale_up_then_down() -> None:
    plane = make_plane(3)
    plane.apply([deployment("web", 2)])
    plane.run_until_idle()
    first = {p.name for p in pods(plane, "web-")}
    plane.apply([deployment("web", 5)])
    plane.run_until_idle()
    after_up = {p.name for p in pods(plane, "web-")}
    assert len(after_up) == 5 and first <= after_up
    plane.apply([deployment("web", 1)])
    plane.run_until_idle()
    left = pods(plane, "web-")
    assert len(left) == 1 and all(p.status.phase == "Running" for p in left)
    (rs,) = _rs(plane)
    assert reasons(plane, "ReplicaSet", rs.name).count("SuccessfulDelete") == 4
    d = plane.store.get("Deployment", "default/web")
    assert isinstance(d, Deployment) and d.status.replicas == 1


def test_scale_down_removes_pending_pods_before_running_ones() -> None:
    # one node that fits two pods by cpu: the third stays Pending
    plane = make_plane([{"name": "n1", "capacity": {"cpu": "1"}}])
    plane.apply([deployment("web", 3, requests={"cpu": "400m"})])
    plane.run_until_idle()
    running = {p.name for p in pods(plane, "web-") if p.status.phase == "Running"}
    pending = {p.name for p in pods(plane, "web-") if not p.spec.node_name}
    assert len(running) == 2 and len(pending) == 1
    plane.apply([deployment("web", 2, requests={"cpu": "400m"})])
    plane.run_until_idle()
    assert {p.name for p in pods(plane, "web-")} == running


def _p(name: str, *, node: str | None, phase: str, ready: bool, created: str) -> Pod:
    conds = [
        Condition(type="Ready", status="True" if ready else "False", last_transition_time=created)
    ]
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default", creation_timestamp=created),
        spec=PodSpec(node_name=node),
        status=PodStatus(phase=phase, conditions=conds),
    )


def test_deletion_order_follows_kubernetes_ranking() -> None:
    t0, t1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"
    ps = [
        _p("old-ready", node="a", phase="Running", ready=True, created=t0),
        _p("new-ready", node="b", phase="Running", ready=True, created=t1),
        _p("doubled", node="c", phase="Running", ready=True, created=t0),
        _p("doubled2", node="c", phase="Running", ready=True, created=t0),
        _p("not-ready", node="d", phase="Running", ready=False, created=t0),
        _p("pending", node="e", phase="Pending", ready=False, created=t0),
        _p("unscheduled", node=None, phase="Pending", ready=False, created=t0),
    ]
    order = [p.name for p in deletion_order(ps)]
    assert order[:3] == ["unscheduled", "pending", "not-ready"]
    # then pods doubled up on a node (active pods of the set on it, as upstream counts),
    # then the most recently ready, the oldest last
    assert order[3:5] == ["doubled", "doubled2"]
    assert order[5:] == ["new-ready", "old-ready"]


def test_changing_the_template_rolls_to_a_new_replicaset_and_scales_the_old_to_zero() -> None:
    plane = make_plane(3)
    plane.apply([deployment("web", 3)])
    plane.run_until_idle()
    (old,) = _rs(plane)
    plane.apply([deployment("web", 3, image="nginx:1.27")])
    plane.run_until_idle()
    rss = {r.name: r for r in _rs(plane)}
    assert old.name in rss and len(rss) == 2
    new = next(r for n, r in rss.items() if n != old.name)
    assert rss[old.name].spec.replicas == 0
    assert new.spec.replicas == 3
    live = pods(plane, "web-")
    assert len(live) == 3
    assert all(p.labels[TEMPLATE_HASH_LABEL] == new.labels[TEMPLATE_HASH_LABEL] for p in live)
    assert new.metadata.annotations["deployment.kubernetes.io/revision"] == "2"


def test_pod_names_are_deterministic_for_a_seed() -> None:
    def names(seed: int) -> list[str]:
        plane = make_plane(2, seed=seed)
        plane.apply([deployment("web", 4)])
        plane.run_until_idle()
        return sorted(p.name for p in pods(plane, "web-"))

    assert names(7) == names(7)
    assert names(7) != names(8)


def test_orphan_pod_matching_the_selector_is_adopted() -> None:
    plane = make_plane(1)
    plane.apply([deployment("web", 1)])
    plane.run_until_idle()
    (rs,) = _rs(plane)
    h = rs.labels[TEMPLATE_HASH_LABEL]
    stray = Pod.model_validate(
        {
            "metadata": {
                "name": "stray",
                "namespace": "default",
                "labels": {"app": "web", TEMPLATE_HASH_LABEL: h},
            },
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }
    )
    before = {p.name for p in pods(plane, "web-")}
    plane.apiserver.create(stray)
    plane.run_until_idle()
    # adopted (ownerReference added by the ReplicaSet controller), then, being one too
    # many and unscheduled, the first to go
    from control.events import timeline

    evs = [(e.source_component, e.reason, e.message) for e in timeline(plane.store)]
    assert ("replicaset-controller", "Updated", "updated") in [
        (c, r, m) for c, r, m in evs if (c, r) == ("replicaset-controller", "Updated")
    ]
    assert ("replicaset-controller", "SuccessfulDelete", "Deleted pod: stray") in evs
    assert {p.name for p in pods(plane, "")} == before


def test_a_pod_annotation_does_not_wake_its_replicaset_but_readiness_does() -> None:
    plane = make_plane(3)
    plane.apply([deployment("web", 2)])
    plane.run_until_idle()
    rsc = plane.replicasets
    pod = pods(plane, "web-")[0]
    rs_key = f"default/{pod.metadata.controller_ref().name}"  # type: ignore[union-attr]
    annotated = plane.apiserver.update(
        pod.with_meta(annotations={**pod.metadata.annotations, "note": "x"}), component="test"
    )
    plane._pump()
    assert rs_key not in rsc.queue  # nothing the ReplicaSet counts changed
    assert isinstance(annotated, Pod)
    not_ready = [
        c.evolve(status="False") if c.type == "Ready" else c for c in annotated.status.conditions
    ]
    plane.apiserver.update_status(
        annotated.evolve(status=annotated.status.evolve(conditions=not_ready)), component="test"
    )
    plane._pump()
    assert rs_key in rsc.queue
    rsc.sync()  # (before the kubelet makes the pod ready again)
    (rs,) = _rs(plane)
    assert rs.status.ready_replicas == 1
