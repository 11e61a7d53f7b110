"""EndpointSlice controller: contents, limits, named ports, untouched user slices."""

from __future__ import annotations

from cp_helpers import deployment, make_plane, pods, service, slices

from control.controllers.endpointslice import (
    HEADLESS_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MAX_ENDPOINTS,
    SERVICE_NAME_LABEL,
    pod_endpoint,
)
from netmodel.kinds import object_from_dict
from netmodel.objects import Condition, EndpointSlice, ObjectMeta, Pod, PodSpec, PodStatus, Service


def _ips(sls: list[EndpointSlice]) -> list[str]:
    return sorted(a for s in sls for ep in s.endpoints for a in ep.addresses)


def test_slice_lists_ready_pods_with_their_target_port() -> None:
    plane = make_plane(3)
    plane.apply([deployment("web", 3), service("web", {"app": "web"})])
    plane.run_until_idle()
    (sl,) = slices(plane, "web")
    svc = plane.store.get("Service", "default/web")
    assert sl.name.startswith("web-") and len(sl.name) == len("web-") + 5
    assert sl.address_type == "IPv4"
    assert sl.labels[SERVICE_NAME_LABEL] == "web"
    assert sl.labels[MANAGED_BY_LABEL] == MANAGED_BY
    ref = sl.metadata.controller_ref()
    assert ref is not None and (ref.kind, ref.name, ref.uid) == ("Service", "web", svc.metadata.uid)
    assert [(p.name, p.port, p.protocol) for p in sl.ports] == [("", 8080, "TCP")]
    by_ip = {p.status.pod_ip: p for p in pods(plane, "web-")}
    assert _ips([sl]) == sorted(by_ip)
    for ep in sl.endpoints:
        pod = by_ip[ep.addresses[0]]
        assert (ep.conditions.ready, ep.conditions.serving, ep.conditions.terminating) == (
            True,
            True,
            False,
        )
        assert ep.node_name == pod.spec.node_name
        assert ep.target_ref is not None
        assert (ep.target_ref.kind, ep.target_ref.name, ep.target_ref.uid) == (
            "Pod",
            pod.name,
            pod.metadata.uid,
        )


def test_at_most_100_endpoints_per_slice() -> None:
    plane = make_plane(3)
    plane.apply([deployment("big", 250), service("big", {"app": "big"})])
    plane.run_until_idle()
    sls = slices(plane, "big")
    assert len(sls) == 3
    assert all(len(s.endpoints) <= MAX_ENDPOINTS for s in sls)
    assert _ips(sls) == sorted(p.status.pod_ip or "" for p in pods(plane, "big-"))
    plane.apply([deployment("big", 40)])
    plane.run_until_idle()
    sls = slices(plane, "big")
    assert all(0 < len(s.endpoints) <= MAX_ENDPOINTS for s in sls)
    assert _ips(sls) == sorted(p.status.pod_ip or "" for p in pods(plane, "big-"))


def test_named_target_port_is_resolved_per_pod_into_separate_slices() -> None:
    plane = make_plane(2)
    plane.apply(
        [
            deployment(
                "a",
                2,
                labels={"app": "x", "v": "a"},
                ports=[{"name": "http", "containerPort": 8080}],
            ),
            deployment(
                "b",
                1,
                labels={"app": "x", "v": "b"},
                ports=[{"name": "http", "containerPort": 9090}],
            ),
            deployment(
                "c",
                1,
                labels={"app": "x", "v": "c"},
                ports=[{"name": "other", "containerPort": 7070}],
            ),
            service("x", {"app": "x"}, [{"name": "web", "port": 80, "targetPort": "http"}]),
        ]
    )
    plane.run_until_idle()
    by_port: dict[tuple[int, ...], list[str]] = {}
    for s in slices(plane, "x"):
        key = tuple(p.port or 0 for p in s.ports)
        by_port.setdefault(key, []).extend(a for ep in s.endpoints for a in ep.addresses)
    ip = {p.name.split("-")[0]: [] for p in pods(plane)}
    for p in pods(plane):
        ip[p.name.split("-")[0]].append(p.status.pod_ip)
    assert sorted(by_port[(8080,)]) == sorted(ip["a"])
    assert sorted(by_port[(9090,)]) == sorted(ip["b"])
    # the pod without an "http" port is left out of that port: a slice without ports
    assert sorted(by_port[()]) == sorted(ip["c"])
    assert all(s.ports[0].name == "web" for s in slices(plane, "x") if s.ports)


def test_selectorless_service_keeps_its_user_slices_untouched() -> None:
    plane = make_plane(1)
    user = object_from_dict(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "ext-1",
                "namespace": "default",
                "labels": {SERVICE_NAME_LABEL: "ext"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["192.0.2.10"]}],
            "ports": [{"port": 5432}],
        }
    )
    plane.apply([service("ext", None, [{"port": 5432}]), user])
    plane.run_until_idle()
    stored = plane.store.get("EndpointSlice", "default/ext-1")
    plane.apply([deployment("web", 2), service("web", {"app": "web"})])
    plane.run_until_idle()
    assert [s.name for s in slices(plane, "ext")] == ["ext-1"]
    assert plane.store.get("EndpointSlice", "default/ext-1") == stored


def test_headless_service_gets_labelled_slices() -> None:
    plane = make_plane(1)
    plane.apply([deployment("db", 2), service("db", {"app": "db"}, clusterIP="None")])
    plane.run_until_idle()
    (sl,) = slices(plane, "db")
    assert HEADLESS_LABEL in sl.labels
    assert len(sl.endpoints) == 2


def test_service_matching_nothing_keeps_one_empty_placeholder() -> None:
    plane = make_plane(1)
    plane.apply([service("none", {"app": "nothing"})])
    plane.run_until_idle()
    (sl,) = slices(plane, "none")
    assert sl.endpoints == [] and sl.ports == []
    plane.apply([deployment("nothing", 1)])
    plane.run_until_idle()
    (sl2,) = slices(plane, "none")
    assert sl2.name == sl.name  # the placeholder is reused
    assert len(sl2.endpoints) == 1


def test_nothing_is_written_when_nothing_changed() -> None:
    plane = make_plane(2)
    plane.apply([deployment("web", 3), service("web", {"app": "web"})])
    plane.run_until_idle()
    rev = plane.store.revision
    for s in plane.store.list("Service"):
        plane.endpointslices.queue.add(s.key)
    assert plane.run_until_idle() > 0
    assert plane.store.revision == rev


def test_endpoint_conditions_of_terminating_and_unready_pods() -> None:
    svc = Service.model_validate({"metadata": {"name": "s"}, "spec": {"selector": {"a": "b"}}})
    ready = Condition(type="Ready", status="True")
    base = Pod(
        metadata=ObjectMeta(name="p", namespace="default", uid="u"),
        spec=PodSpec(node_name="n1"),
        status=PodStatus(phase="Running", pod_ip="10.244.0.5", conditions=[ready]),
    )
    c = pod_endpoint(svc, base, None).conditions
    assert (c.ready, c.serving, c.terminating) == (True, True, False)
    dying = base.with_meta(deletion_timestamp="2026-01-01T00:00:00Z")
    c = pod_endpoint(svc, dying, None).conditions
    assert (c.ready, c.serving, c.terminating) == (False, True, True)
    unready = base.evolve(status=base.status.evolve(conditions=[]))
    c = pod_endpoint(svc, unready, None).conditions
    assert (c.ready, c.serving, c.terminating) == (False, False, False)
    publish = Service.model_validate(
        {
            "metadata": {"name": "s"},
            "spec": {"selector": {"a": "b"}, "publishNotReadyAddresses": True},
        }
    )
    assert pod_endpoint(publish, unready, None).conditions.ready is True


def test_pods_without_an_ip_are_not_endpoints() -> None:
    plane = make_plane([{"name": "n1", "capacity": {"cpu": "1"}}])
    plane.apply([deployment("web", 3, requests={"cpu": "400m"}), service("web", {"app": "web"})])
    plane.run_until_idle()
    running = sorted(p.status.pod_ip or "" for p in pods(plane, "web-") if p.status.pod_ip)
    assert len(running) == 2
    assert _ips(slices(plane, "web")) == running


def test_multi_port_service_and_zone_from_the_node() -> None:
    plane = make_plane([{"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"}}])
    ports = [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}]
    plane.apply(
        [
            deployment("web", 2, ports=ports),
            service(
                "web",
                {"app": "web"},
                [
                    {"name": "http", "port": 80, "targetPort": 8080},
                    {"name": "metrics", "port": 9100, "targetPort": "metrics"},
                ],
            ),
        ]
    )
    plane.run_until_idle()
    (sl,) = slices(plane, "web")
    assert [(p.name, p.port) for p in sl.ports] == [("http", 8080), ("metrics", 9090)]
    assert [ep.zone for ep in sl.endpoints] == ["z1", "z1"]


def test_named_port_must_match_the_protocol() -> None:
    from control.controllers.endpointslice import resolve_port
    from netmodel.objects import ServicePort

    p = Pod.model_validate(
        {
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"}],
                    }
                ]
            },
        }
    )
    assert resolve_port(p, ServicePort(port=53, target_port="dns", protocol="UDP")) == 53
    assert resolve_port(p, ServicePort(port=53, target_port="dns", protocol="TCP")) is None
    assert resolve_port(p, ServicePort(port=80)) == 80  # unset targetPort: the port
    assert resolve_port(p, ServicePort(port=80, target_port=8080)) == 8080
