"""Defaulting and metadata the apiserver fills in on create and update."""

from __future__ import annotations

import uuid

from api_helpers import make_api, obj, service

from control.events import timeline
from netmodel.objects import Deployment, Namespace, Pod, Service


def test_bootstrap_is_idempotent_and_makes_the_kubernetes_service() -> None:
    api = make_api()
    rev = api.store.revision
    api.bootstrap()
    assert api.store.revision == rev
    names = [n.name for n in api.store.list("Namespace")]
    assert names == ["default", "kube-node-lease", "kube-system", "svclab-system"]
    k = api.store.get("Service", "default/kubernetes")
    assert isinstance(k, Service)
    assert k.spec.cluster_ip == "10.96.0.1"
    assert k.spec.cluster_ips == ["10.96.0.1"]
    (port,) = k.spec.ports
    assert (port.name, port.port, port.target_port, port.protocol) == ("https", 443, 6443, "TCP")
    ns = api.store.get("Namespace", "default")
    assert isinstance(ns, Namespace)
    assert ns.labels["kubernetes.io/metadata.name"] == "default"
    assert ns.status["phase"] == "Active"


def test_service_defaults() -> None:
    api = make_api()
    s = api.create(service("web", ports=[{"port": 80}]))
    assert isinstance(s, Service)
    spec = s.spec
    assert spec.type == "ClusterIP"
    assert (spec.ports[0].protocol, spec.ports[0].target_port) == ("TCP", 80)
    assert spec.session_affinity == "None"
    assert spec.session_affinity_config is None
    assert spec.internal_traffic_policy == "Cluster"
    assert spec.external_traffic_policy is None  # only for NodePort / LoadBalancer
    assert spec.ip_families == ["IPv4"]
    assert spec.ip_family_policy == "SingleStack"
    assert spec.cluster_ips == [spec.cluster_ip]
    assert spec.allocate_load_balancer_node_ports is None
    assert s.to_dict()["spec"]["ports"] == [
        {"port": 80, "protocol": "TCP", "targetPort": 80}
    ]  # defaults are real, emitted fields


def test_service_type_specific_defaults() -> None:
    api = make_api()
    np = api.create(service("np", type="NodePort", sessionAffinity="ClientIP"))
    assert isinstance(np, Service)
    assert np.spec.external_traffic_policy == "Cluster"
    cfg = np.spec.session_affinity_config
    assert cfg is not None and cfg.client_ip is not None
    assert cfg.client_ip.timeout_seconds == 10800
    lb = api.create(service("lb", type="LoadBalancer"))
    assert isinstance(lb, Service)
    assert lb.spec.allocate_load_balancer_node_ports is True
    assert lb.spec.external_traffic_policy == "Cluster"
    assert lb.spec.health_check_node_port is None  # only with externalTrafficPolicy Local
    ext = api.create(service("ext", type="ExternalName", externalName="example.com", ports=[]))
    assert isinstance(ext, Service)
    assert ext.spec.cluster_ip is None and ext.spec.ip_families == []


def test_workload_and_pod_defaults() -> None:
    api = make_api()
    d = api.create(
        obj("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, ports: [{containerPort: 8080}]}]}
""")
    )
    assert isinstance(d, Deployment)
    assert d.spec.replicas == 1
    assert d.to_dict()["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
    }
    port = d.spec.template.spec.containers[0].ports[0]
    assert "protocol" in port.to_dict() and port.protocol == "TCP"
    p = api.create(
        obj("{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c}]}}")
    )
    assert isinstance(p, Pod)
    assert p.status.phase == "Pending"
    assert p.spec.scheduler_name == "default-scheduler"


def test_metadata_on_create_is_deterministic() -> None:
    def run() -> list[tuple[str, str | None, str | None, int | None]]:
        api = make_api()
        a = api.create(service("web"))
        b = api.create(
            obj(
                "{apiVersion: v1, kind: Pod, metadata: {generateName: web-}, spec: {containers: [{name: c}]}}"
            )
        )
        c = api.create(
            obj(
                "{apiVersion: v1, kind: Pod, metadata: {generateName: web-}, spec: {containers: [{name: c}]}}"
            )
        )
        return [
            (o.key, o.metadata.uid, o.metadata.creation_timestamp, o.metadata.generation)
            for o in (a, b, c)
        ]

    first = run()
    assert first == run()
    (svc_key, svc_uid, ts, gen), (pod_key, _, _, _), (pod2_key, _, _, _) = first
    assert svc_key == "default/web" and ts == "2026-01-01T00:00:00Z" and gen == 1
    assert svc_uid is not None and uuid.UUID(svc_uid).version == 5
    assert pod_key.startswith("default/web-") and len(pod_key) == len("default/web-") + 5
    assert pod_key != pod2_key


def test_generation_counts_spec_changes_only() -> None:
    api = make_api()
    s = api.create(service("web", selector={"app": "a"}))
    s2 = api.update(s.with_meta(labels={"team": "x"}))
    assert s2.metadata.generation == 1 and s2.resource_version > s.resource_version
    assert isinstance(s2, Service)
    s3 = api.update(s2.evolve(spec=s2.spec.evolve(selector={"app": "b"})))
    assert s3.metadata.generation == 2
    assert s3.metadata.uid == s.metadata.uid
    assert s3.metadata.creation_timestamp == s.metadata.creation_timestamp


def test_noop_update_writes_nothing() -> None:
    api = make_api()
    s = api.create(service("web"))
    rev = api.store.revision
    assert api.update(s) == s
    assert api.store.revision == rev


def test_update_keeps_status_and_update_status_keeps_spec() -> None:
    api = make_api()
    p = api.create(
        obj("{apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: [{name: c}]}}")
    )
    assert isinstance(p, Pod)
    running = p.evolve(status=p.status.evolve(phase="Running", pod_ip="10.244.0.5"))
    events_before = len(timeline(api.store))
    s1 = api.update_status(running)
    assert isinstance(s1, Pod) and s1.status.phase == "Running"
    assert len(timeline(api.store)) == events_before  # no event unless asked
    # a spec update carrying a stale status does not undo the status write
    s2 = api.update(p.with_meta(labels={"a": "b"}, resource_version=None))
    assert isinstance(s2, Pod)
    assert s2.status.phase == "Running" and s2.labels == {"a": "b"}
    # update_status ignores everything but status
    s3 = api.update_status(
        s2.with_meta(labels={"x": "y"}).evolve(status=s2.status.evolve(phase="Succeeded"))
    )
    assert isinstance(s3, Pod)
    assert s3.labels == {"a": "b"} and s3.status.phase == "Succeeded"
    rev = api.store.revision
    api.update_status(s3, reason="Started", message="container started", component="kubelet")
    assert api.store.revision == rev  # unchanged status: no write, no event
    s4 = api.update_status(
        s3.evolve(status=s3.status.evolve(phase="Running")),
        component="kubelet",
        reason="Started",
        message="container started",
    )
    last = timeline(api.store)[-1]
    assert (last.source_component, last.reason, last.involved_object.name) == (
        "kubelet",
        "Started",
        s4.name,
    )


def test_external_ips_make_a_cluster_ip_service_externally_accessible() -> None:
    api = make_api()
    s = api.create(service("ext", externalIPs=["203.0.113.10"], externalTrafficPolicy="Local"))
    assert isinstance(s, Service) and s.spec.external_traffic_policy == "Local"
    d = api.create(service("ext2", externalIPs=["203.0.113.11"]))
    assert isinstance(d, Service) and d.spec.external_traffic_policy == "Cluster"
