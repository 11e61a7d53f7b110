"""Property tests of the converged control plane over generated clusters and operation
sequences (create / scale / delete Deployments and Services)."""

from __future__ import annotations

import ipaddress
from typing import Any

from etcd_procs import EtcdCluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from control.clock import FakeClock
from control.runner import ControlPlane
from control.store import Store, open_store
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.errors import NotFoundError
from netmodel.kinds import object_from_dict
from netmodel.objects import EndpointSlice, Node, Pod, Service

APPS = ["a", "b", "c"]


def _deployment(app: str, replicas: int) -> Any:
    return object_from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"dep-{app}"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {
                        "containers": [
                            {
                                "name": "c",
                                "image": "x",
                                "ports": [{"name": "http", "containerPort": 8080}],
                            }
                        ]
                    },
                },
            },
        }
    )


def _service(i: int, app: str, headless: bool, target: int | str) -> Any:
    spec: dict[str, Any] = {"selector": {"app": app}, "ports": [{"port": 80, "targetPort": target}]}
    if headless:
        spec["clusterIP"] = "None"
    return object_from_dict(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"svc-{i}"}, "spec": spec}
    )


ops = st.lists(
    st.one_of(
        st.tuples(st.just("deploy"), st.sampled_from(APPS), st.integers(0, 5)),
        st.tuples(st.just("undeploy"), st.sampled_from(APPS), st.just(0)),
        st.tuples(
            st.just("service"),
            st.integers(0, 2),
            st.tuples(st.sampled_from(APPS), st.booleans(), st.sampled_from([8080, "http"])),
        ),
        st.tuples(st.just("unservice"), st.integers(0, 2), st.just(0)),
    ),
    min_size=1,
    max_size=6,
)


def _apply(plane: ControlPlane, op: tuple[Any, ...]) -> None:
    verb, what, arg = op
    try:
        if verb == "deploy":
            plane.apply([_deployment(what, arg)])
        elif verb == "undeploy":
            plane.delete("Deployment", f"default/dep-{what}")
        elif verb == "service":
            app, headless, target = arg
            existing = f"default/svc-{what}"
            try:
                cur = plane.store.get("Service", existing)
                if isinstance(cur, Service) and cur.is_headless != headless:
                    plane.delete("Service", existing)  # clusterIP cannot change in place
                    plane.run_until_idle()
            except NotFoundError:
                pass
            plane.apply([_service(what, app, headless, target)])
        else:
            plane.delete("Service", f"default/svc-{what}")
    except NotFoundError:
        pass


def _check(plane: ControlPlane, cluster: ClusterSpec) -> None:
    store = plane.store
    # ClusterIPs: unique, inside serviceCIDR
    ips = [
        s.spec.cluster_ip
        for s in store.list("Service")
        if isinstance(s, Service) and s.spec.cluster_ip and not s.is_headless
    ]
    assert len(ips) == len(set(ips))
    assert all(ipaddress.ip_address(ip) in cluster.service_net for ip in ips)
    # podCIDRs: disjoint, inside podCIDR
    nodes = {n.name: n for n in store.list("Node") if isinstance(n, Node)}
    cidrs = [ipaddress.ip_network(n.spec.pod_cidr or "") for n in nodes.values()]
    assert all(c.subnet_of(cluster.pod_net) for c in cidrs)  # type: ignore[arg-type]
    assert not any(a.overlaps(b) for i, a in enumerate(cidrs) for b in cidrs[i + 1 :])
    # pod IPs: unique, inside their node's podCIDR
    pods = [p for p in store.list("Pod") if isinstance(p, Pod)]
    assert all(p.status.phase == "Running" and p.status.pod_ip for p in pods)
    pod_ips = [p.status.pod_ip for p in pods]
    assert len(pod_ips) == len(set(pod_ips))
    for p in pods:
        net = ipaddress.ip_network(nodes[p.spec.node_name or ""].spec.pod_cidr or "")
        assert ipaddress.ip_address(p.status.pod_ip or "") in net
        assert p.status.pod_ip != str(net.network_address + 1)  # not the gateway
    # every selector Service's slices list exactly its ready matching pods
    slices = [s for s in store.list("EndpointSlice") if isinstance(s, EndpointSlice)]
    for svc in store.list("Service"):
        assert isinstance(svc, Service)
        if svc.spec.selector is None:
            continue
        mine = [s for s in slices if s.service_name == svc.name]
        assert mine, f"{svc.name} has no slice"
        assert all(len(s.endpoints) <= 100 for s in mine)
        got = sorted(
            a for s in mine for ep in s.endpoints if ep.conditions.ready for a in ep.addresses
        )
        want = sorted(
            p.status.pod_ip or ""
            for p in pods
            if p.is_ready and all(p.labels.get(k) == v for k, v in svc.spec.selector.items())
        )
        assert got == want, svc.name
        assert all(ep.conditions.ready for s in mine for ep in s.endpoints)
    # no slice outlives its Service
    names = {s.name for s in store.list("Service")}
    assert all(s.service_name in names for s in slices)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 4),
    mask=st.sampled_from([24, 26, 27]),
    seed=st.integers(0, 3),
    operations=ops,
)
def test_converged_cluster_invariants(
    nodes: int, mask: int, seed: int, operations: list[Any]
) -> None:
    _converge_and_check(MemoryStore(), nodes, mask, seed, operations)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 3),
    mask=st.sampled_from([24, 27]),
    seed=st.integers(0, 3),
    operations=ops,
)
def test_converged_cluster_invariants_on_etcd(
    etcd_member: EtcdCluster, nodes: int, mask: int, seed: int, operations: list[Any]
) -> None:
    """The same properties with the cluster in a real etcd (fewer examples: every write
    is a round trip)."""
    etcd_member.wipe()
    store = open_store(etcd_member.url)
    try:
        _converge_and_check(store, nodes, mask, seed, operations)
    finally:
        store.close()


def _converge_and_check(
    store: Store, nodes: int, mask: int, seed: int, operations: list[Any]
) -> None:
    cluster = ClusterSpec.model_validate(
        {"nodes": nodes, "nodeCIDRMaskSize": mask, "serviceCIDR": "10.96.0.0/24"}
    )
    plane = ControlPlane(store, cluster, seed=seed, clock=FakeClock())
    plane.start()
    plane.run_until_idle()
    for op in operations:
        _apply(plane, op)
        plane.run_until_idle()
        _check(plane, cluster)
