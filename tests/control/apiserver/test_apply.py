"""apply: all-or-nothing batches; delete and the two-step deletion of bound Pods; Events."""

from __future__ import annotations

import pytest
from api_helpers import make_api, obj, service

from control.events import timeline
from netmodel.errors import InputError, InvalidError, NotFoundError
from netmodel.manifests import load_text
from netmodel.objects import Node, Pod, Service

GOOD = """
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, ports: [{containerPort: 8080}]}]}
"""

BAD_LAST = (
    GOOD
    + """
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec:
  ports: [{port: 80, protocol: HTTP}]
"""
)


def test_apply_creates_then_reports_unchanged_and_configured() -> None:
    api = make_api()
    objs = list(load_text(GOOD).objects)
    first = api.apply(objs, source="shop.yaml")
    assert [(a, o.ref) for a, o in first] == [
        ("created", "Namespace/shop"),
        ("created", "Service/shop/web"),
        ("created", "Deployment/shop/web"),
    ]
    assert all(o.resource_version > 0 for _, o in first)
    rev = api.store.revision
    again = api.apply(objs, source="shop.yaml")
    assert [a for a, _ in again] == ["unchanged"] * 3
    assert [o for _, o in again] == [o for _, o in first]
    assert api.store.revision == rev
    changed = list(load_text(GOOD.replace("replicas: 2", "replicas: 3")).objects)
    third = api.apply(changed)
    assert [a for a, _ in third] == ["unchanged", "unchanged", "configured"]
    assert third[2][1].metadata.generation == 2


def test_apply_with_one_bad_object_stores_nothing() -> None:
    api = make_api()
    rev = api.store.revision
    events = len(timeline(api.store))
    free_ips, free_ports = api.services.cluster_ips.free, api.services.node_ports.free
    objs = list(load_text(BAD_LAST).objects)
    with pytest.raises(InputError) as out:
        api.apply(objs, source="shop.yaml")
    assert str(out.value) == (
        "shop.yaml (document 4): Service/shop/api: spec.ports[0].protocol: Unsupported value: "
        '"HTTP": supported values: "SCTP", "TCP", "UDP"'
    )
    err = out.value
    assert (err.file, err.document, err.obj, err.field) == (
        "shop.yaml",
        4,
        "Service/shop/api",
        "spec.ports[0].protocol",
    )
    assert api.store.revision == rev
    assert len(timeline(api.store)) == events
    with pytest.raises(NotFoundError):
        api.store.get("Namespace", "shop")
    # allocations made while admitting the good objects were given back
    assert (api.services.cluster_ips.free, api.services.node_ports.free) == (free_ips, free_ports)
    web = api.apply(list(load_text(GOOD).objects))[1][1]
    assert isinstance(web, Service)
    assert (web.spec.cluster_ip, web.spec.ports[0].node_port) == ("10.96.0.2", 30000)


def test_apply_allocation_conflict_inside_the_batch_is_refused() -> None:
    api = make_api()
    a = service("a", type="NodePort", ports=[{"port": 80, "nodePort": 30080}])
    b = service("b", type="NodePort", ports=[{"port": 80, "nodePort": 30080}])
    with pytest.raises(
        InputError, match=r"^document 2: Service/default/b: spec.ports\[0\].nodePort: "
    ):
        api.apply([a, b], documents=[1, 2])
    assert api.services.node_ports.owner(30080) is None


def test_apply_uses_given_document_numbers_and_ignores_resource_version() -> None:
    api = make_api()
    s = api.create(service("a"))
    replayed = service("a", selector={"app": "x"}).with_meta(resource_version="1")
    ((action, out),) = api.apply([replayed], source="dump.yaml", documents=[7])
    assert action == "configured" and out.metadata.uid == s.metadata.uid
    with pytest.raises(InputError, match=r"^dump.yaml \(document 7\): Service/default/b: "):
        api.apply([service("b", type="Bogus")], source="dump.yaml", documents=[7])


def test_every_write_records_an_event() -> None:
    api = make_api()
    s = api.create(service("web", type="NodePort"), component="tester")
    api.update(service("web", type="NodePort", selector={"app": "w"}), component="tester")
    api.delete("Service", "default/web", component="tester")
    evs = [e for e in timeline(api.store) if e.involved_object.name == "web"]
    assert [(e.source_component, e.reason, e.message) for e in evs] == [
        ("tester", "Created", "allocated clusterIP 10.96.0.2, nodePort 30000"),
        ("tester", "Updated", "updated spec.selector"),
        ("tester", "Deleted", "released clusterIP 10.96.0.2, nodePort 30000"),
    ]
    assert evs[0].involved_object.uid == s.metadata.uid
    assert [e.revision for e in evs] == sorted(e.revision for e in evs)


def pod(name: str, node: str | None = None) -> Pod:
    p = obj(
        f"{{apiVersion: v1, kind: Pod, metadata: {{name: {name}}}, spec: {{containers: [{{name: c}}]}}}}"
    )
    assert isinstance(p, Pod)
    return p.evolve(spec=p.spec.evolve(node_name=node)) if node else p


def test_bound_pod_deletion_is_two_steps() -> None:
    api = make_api()
    api.create(pod("a", node="node-1"))
    marked = api.delete("Pod", "default/a")
    assert isinstance(marked, Pod) and marked.is_terminating
    # as kube-apiserver: the time of the delete plus the grace period (30 s by default)
    assert marked.metadata.deletion_timestamp == "2026-01-01T00:00:30Z"
    assert (marked.metadata.model_extra or {})["deletionGracePeriodSeconds"] == 30
    stored = api.store.get("Pod", "default/a")
    assert stored == marked
    rev = api.store.revision
    assert api.delete("Pod", "default/a") == marked  # marking again is a no-op
    assert api.store.revision == rev
    api.finalize_pod_deletion("default/a")
    with pytest.raises(NotFoundError):
        api.store.get("Pod", "default/a")
    api.finalize_pod_deletion("default/a")  # idempotent
    reasons = [e.reason for e in timeline(api.store) if e.involved_object.name == "a"]
    assert reasons == ["Created", "Deleting", "Deleted"]


def test_unbound_pod_is_deleted_at_once() -> None:
    api = make_api()
    api.create(pod("a"))
    api.delete("Pod", "default/a")
    with pytest.raises(NotFoundError):
        api.store.get("Pod", "default/a")


def test_pod_node_name_is_set_once() -> None:
    api = make_api()
    p = api.create(pod("a"))
    assert isinstance(p, Pod)
    bound = api.update(p.evolve(spec=p.spec.evolve(node_name="node-1")))
    assert isinstance(bound, Pod) and bound.spec.node_name == "node-1"
    with pytest.raises(InvalidError, match=r"spec\.nodeName: Forbidden"):
        api.update(bound.evolve(spec=bound.spec.evolve(node_name="node-2")))


def test_system_namespaces_cannot_be_deleted() -> None:
    api = make_api()
    with pytest.raises(InvalidError, match="Namespace/default: Forbidden"):
        api.delete("Namespace", "default")


def test_reapplying_a_manifest_keeps_what_the_control_plane_assigned() -> None:
    api = make_api()
    node_yaml = "{apiVersion: v1, kind: Node, metadata: {name: extra, labels: {zone: a}}}"
    pod_yaml = "{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c}]}}"
    api.apply([obj(node_yaml), obj(pod_yaml)])
    n = api.store.get("Node", "extra")
    assert isinstance(n, Node)
    cidr = "10.244.9.0/24"
    api.update(n.evolve(spec=n.spec.evolve(pod_cidr=cidr, pod_cidrs=[cidr])))
    p = api.store.get("Pod", "default/p")
    assert isinstance(p, Pod)
    api.update(p.evolve(spec=p.spec.evolve(node_name="node-1")))
    results = api.apply([obj(node_yaml), obj(pod_yaml)])
    assert [a for a, _ in results] == ["unchanged", "unchanged"]
    node, pod_ = (o for _, o in results)
    assert isinstance(node, Node) and node.spec.pod_cidr == cidr
    assert isinstance(pod_, Pod) and pod_.spec.node_name == "node-1"


def test_bootstrap_nodes_from_the_cluster() -> None:
    api = make_api(
        nodes=[
            {
                "name": "cp",
                "labels": {"node-role.kubernetes.io/control-plane": ""},
                "taints": [
                    {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
                ],
            },
            {"name": "w1", "capacity": {"cpu": "8"}},
        ]
    )
    made = api.bootstrap_nodes()
    assert [n.name for n in made] == ["cp", "w1"]
    cp, w1 = made
    assert cp.labels["kubernetes.io/hostname"] == "cp" and cp.labels["kubernetes.io/os"] == "linux"
    assert [(t.key, t.effect) for t in cp.spec.taints] == [
        ("node-role.kubernetes.io/control-plane", "NoSchedule")
    ]
    assert cp.internal_ips == ["172.18.0.2"] and w1.internal_ips == ["172.18.0.3"]
    assert w1.status.capacity == {"cpu": "8", "memory": "16Gi", "pods": "110"}
    assert w1.status.allocatable == w1.status.capacity
    assert [(c.type, c.status) for c in w1.status.conditions] == [("Ready", "True")]
    rev = api.store.revision
    assert api.bootstrap_nodes() == made  # idempotent
    assert api.store.revision == rev


def test_bad_taint_in_the_cluster_is_an_input_error() -> None:
    api = make_api(nodes=[{"name": "n", "taints": [{"key": "k", "effect": "Sometimes"}]}])
    with pytest.raises(InputError, match=r"^Cluster: spec\.nodes\[0\]\.taints\[0\]\.effect: "):
        api.bootstrap_nodes()


def test_delete_with_a_stale_resource_version_precondition_changes_nothing() -> None:
    """The garbage collector deletes with the resourceVersion it decided on: a dependent
    updated meanwhile (e.g. orphaned) is not deleted from an old view of it."""
    from netmodel.errors import ConflictError

    api = make_api()
    created = api.create(service("web"))
    seen = created.resource_version
    api.update(created.with_meta(labels={"orphaned": "yes"}))
    rev = api.store.revision
    with pytest.raises(ConflictError, match=rf"precondition \({seen}\)"):
        api.delete("Service", "default/web", expected_version=seen)
    assert api.store.revision == rev
    assert api.store.get("Service", "default/web").labels == {"orphaned": "yes"}
    current = api.store.get("Service", "default/web").resource_version
    api.delete("Service", "default/web", expected_version=current)
    with pytest.raises(NotFoundError):
        api.store.get("Service", "default/web")
