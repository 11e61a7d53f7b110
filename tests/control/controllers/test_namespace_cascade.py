"""Namespace deletion: the Namespace turns Terminating, everything in it is deleted (with
Events, watchers see it go), then the Namespace; nothing new may be created in it
meanwhile; the system namespaces may not be deleted."""

from __future__ import annotations

import pytest
from cp_helpers import deployment, make_plane, objs, service

from control.clock import FakeClock
from control.controllers.namespace import CONTENT_KINDS
from control.controllers.podgc import QUARANTINE_SECONDS
from control.events import timeline
from control.runner import ControlPlane
from control.session import Session
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.errors import InputError, InvalidError
from netmodel.kinds import object_from_dict
from netmodel.manifests import load_text
from netmodel.objects import KubeObject, Namespace, Service

NAMESPACE = "{apiVersion: v1, kind: Namespace, metadata: {name: shop}}"


def _in(ns: str, obj: KubeObject) -> KubeObject:
    return obj.with_meta(namespace=ns)


def _shop(plane: ControlPlane) -> None:
    plane.apply(
        [
            *objs(NAMESPACE),
            _in("shop", deployment("web", 3)),
            _in("shop", service("web", {"app": "web"}, type="NodePort")),
        ]
    )
    plane.run_until_idle()


def _contents(plane: ControlPlane, ns: str) -> dict[str, list[str]]:
    out = {k: [o.name for o in plane.store.list(k, ns)] for k in CONTENT_KINDS}
    return {k: v for k, v in out.items() if v}


def _ns_events(plane: ControlPlane, ns: str, since: int = 0) -> list[tuple[str, str, str, str]]:
    """(component, kind, reason, name) of every Event about ``ns`` or something in it,
    from the ``since``-th Event of the timeline on."""
    return [
        (e.source_component, e.involved_object.kind, e.reason, e.involved_object.name)
        for e in timeline(plane.store)[since:]
        if e.involved_object.namespace == ns
        or (e.involved_object.kind == "Namespace" and e.involved_object.name == ns)
    ]


def test_deleting_a_namespace_removes_everything_in_it_then_the_namespace() -> None:
    plane = make_plane(2)
    plane.apply([deployment("web", 2), service("web", {"app": "web"})])  # in default
    _shop(plane)
    before = _contents(plane, "shop")
    assert set(before) == {"Deployment", "ReplicaSet", "Service", "EndpointSlice", "Pod"}
    assert len(before["Pod"]) == 3
    default_before = _contents(plane, "default")
    svc = plane.store.get("Service", "shop/web")
    assert isinstance(svc, Service)
    node_port = svc.spec.ports[0].node_port
    seen = len(timeline(plane.store))

    marked = plane.delete("Namespace", "shop")
    assert isinstance(marked, Namespace)
    assert marked.status["phase"] == "Terminating" and marked.metadata.deletion_timestamp
    plane.run_until_idle()

    assert _contents(plane, "shop") == {}
    assert [n.name for n in plane.store.list("Namespace") if n.name == "shop"] == []
    assert _contents(plane, "default") == default_before  # other namespaces untouched

    new = _ns_events(plane, "shop", since=seen)
    assert ("apiserver", "Namespace", "Deleting", "shop") in new
    assert new[-1] == ("namespace-controller", "Namespace", "Deleted", "shop")
    by_controller = {(k, r) for c, k, r, _ in new if c == "namespace-controller"}
    assert {
        ("Deployment", "Deleted"),
        ("ReplicaSet", "Deleted"),
        ("Service", "Deleted"),
        ("EndpointSlice", "Deleted"),
        ("Pod", "Deleting"),  # bound pods are marked; their kubelets finish them
    } <= by_controller
    pods_done = {n for c, k, r, n in new if (c, k, r) == ("kubelet", "Pod", "Deleted")}
    assert pods_done == set(before["Pod"])
    rev = plane.store.revision
    assert plane.run_until_idle() == 0 and plane.store.revision == rev
    # the Service's NodePort was freed: another Service may take it
    reuse = [{"port": 80, "targetPort": 8080, "nodePort": node_port}]
    plane.apply([service("again", {"app": "web"}, reuse, type="NodePort")])


def test_creating_in_a_terminating_namespace_is_refused_and_changes_nothing() -> None:
    plane = make_plane(1)
    # a pod bound to a node that never registers keeps the namespace Terminating
    # until the pod GC's quarantine runs out
    stuck = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "stuck", "namespace": "shop"},
            "spec": {"nodeName": "node-9", "containers": [{"name": "c"}]},
        }
    )
    plane.apply([*objs(NAMESPACE), stuck])
    plane.run_until_idle()
    plane.delete("Namespace", "shop")
    plane.run_until_idle()
    ns = plane.store.get("Namespace", "shop")
    assert isinstance(ns, Namespace) and ns.status["phase"] == "Terminating"
    (cond,) = ns.status["conditions"]
    assert (cond["type"], cond["reason"], cond["message"]) == (
        "NamespaceContentRemaining",
        "SomeResourcesRemain",
        "Some resources are remaining: pods has 1 resource instances",
    )

    rev = plane.store.revision
    with pytest.raises(InputError) as err:
        plane.apply([_in("shop", service("late", {"app": "x"})), *objs(NAMESPACE)])
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.endswith(
        "Service/shop/late: Forbidden: unable to create new content in namespace shop "
        "because it is being terminated"
    )
    with pytest.raises(InvalidError, match="namespace shop because it is being terminated"):
        plane.apiserver.create(_in("shop", deployment("late", 1)))
    assert plane.store.revision == rev  # nothing stored, no Event
    plane.apply([_in("default", service("late", {"app": "x"}))])  # elsewhere: fine

    plane.delete("Namespace", "shop")  # deleting again: a no-op
    assert plane.store.revision == rev + 3  # the Service, its Created Event, its IPAddress

    assert isinstance(plane.clock, FakeClock)
    plane.clock.advance(QUARANTINE_SECONDS)
    plane.run_until_idle()  # the pod GC removes the pod, then the namespace goes
    assert plane.store.list("Pod", "shop") == []
    assert "shop" not in {n.name for n in plane.store.list("Namespace")}
    plane.apply(objs(NAMESPACE))  # and it can be made again, Active
    again = plane.store.get("Namespace", "shop")
    assert isinstance(again, Namespace) and again.status["phase"] == "Active"


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-public"])
def test_system_namespaces_may_not_be_deleted(name: str) -> None:
    plane = make_plane(1)
    if name == "kube-public":
        plane.apply(objs(NAMESPACE.replace("shop", name)))
        plane.run_until_idle()
    rev = plane.store.revision
    with pytest.raises(InvalidError) as err:
        plane.delete("Namespace", name)
    assert str(err.value) == f"Namespace/{name}: Forbidden: this namespace may not be deleted"
    assert plane.store.revision == rev
    ns = plane.store.get("Namespace", name)
    assert ns.metadata.deletion_timestamp is None


def test_a_restarted_control_plane_finishes_a_namespace_deletion() -> None:
    store, clock = MemoryStore(), FakeClock()
    cluster = ClusterSpec.model_validate({"nodes": 2})
    plane = ControlPlane(store, cluster, clock=clock)
    plane.start()
    _shop(plane)
    plane.apiserver.delete("Namespace", "shop")  # marked; no controller runs after this

    again = ControlPlane(store, cluster, clock=clock)
    again.run_until_idle()
    assert _contents(again, "shop") == {}
    assert "shop" not in {n.name for n in store.list("Namespace")}


def _manifest() -> str:
    return f"""
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {{nodes: 2}}
---
{NAMESPACE}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: web, image: nginx, ports: [{{containerPort: 8080}}]}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: shop}}
spec: {{type: NodePort, selector: {{app: web}}, ports: [{{port: 80, targetPort: 8080}}]}}
"""


def test_kube_proxies_drop_the_services_of_a_deleted_namespace() -> None:
    s = Session.ephemeral(load_text(_manifest(), source="shop.yaml"))
    svc = s.store.get("Service", "shop/web")
    assert isinstance(svc, Service) and svc.spec.cluster_ip
    cip = svc.spec.cluster_ip
    assert all(cip in st.save_text for st in s.rules.nodes.values())
    s.plane.delete("Namespace", "shop")
    s.converge()
    assert all(cip not in st.save_text for st in s.rules.nodes.values())
    assert all("shop/web" not in st.save_text for st in s.rules.nodes.values())
