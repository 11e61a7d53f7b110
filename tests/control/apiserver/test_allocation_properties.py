"""Property: any sequence of Service creates, updates and deletes keeps every ClusterIP
unique and inside the serviceCIDR, every NodePort unique and inside the range, every pool
LoadBalancer IP unique; and the allocators agree with the stored Services (also after a
rebuild, as on restart)."""

from __future__ import annotations

import ipaddress
from typing import Any

from api_helpers import make_api, service
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from control.apiserver.services import ServiceAllocators
from netmodel.errors import AllocationError, InvalidError, NotFoundError
from netmodel.objects import Service

CLUSTER = {
    "serviceCIDR": "10.96.0.0/28",
    "nodePortRange": "30000-30011",
    "loadBalancerCIDR": "172.19.0.0/29",
}
NAMES = [f"s{i}" for i in range(8)]

types = st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer"])
cluster_ips = st.one_of(
    st.none(),
    st.just("None"),
    st.integers(0, 17).map(lambda i: f"10.96.0.{i}"),  # in range, edges, one past the end
)
node_ports = st.one_of(st.none(), st.integers(29998, 30013))

create_op = st.tuples(
    st.just("create"),
    st.sampled_from(NAMES),
    types,
    cluster_ips,
    st.lists(node_ports, min_size=1, max_size=3),
    st.sampled_from(["Cluster", "Local"]),
)
update_op = st.tuples(
    st.just("update"), st.sampled_from(NAMES), types, st.lists(node_ports, min_size=1, max_size=3)
)
delete_op = st.tuples(st.just("delete"), st.sampled_from(NAMES))
ops = st.lists(st.one_of(create_op, update_op, delete_op), max_size=40)


def build(
    name: str,
    type_: str,
    ports: list[int | None],
    cluster_ip: str | None = None,
    etp: str = "Cluster",
) -> Service:
    spec: dict[str, Any] = {
        "type": type_,
        "ports": [
            {
                "name": f"p{i}",
                "port": 80 + i,
                **({"nodePort": np} if np and type_ != "ClusterIP" else {}),
            }
            for i, np in enumerate(ports)
        ],
    }
    if cluster_ip is not None and not (cluster_ip == "None" and type_ != "ClusterIP"):
        spec["clusterIP"] = cluster_ip
    if type_ != "ClusterIP":
        spec["externalTrafficPolicy"] = etp
    return service(name, **spec)


def check_invariants(services: list[Service], alloc: ServiceAllocators) -> None:
    net = ipaddress.ip_network(CLUSTER["serviceCIDR"])
    ips = [s.spec.cluster_ip for s in services if s.spec.cluster_ip not in (None, "None")]
    assert len(ips) == len(set(ips)), ips
    for ip in ips:
        addr = ipaddress.ip_address(ip)
        assert addr in net and addr not in (net.network_address, net.broadcast_address)
    ports: list[int] = []
    for s in services:
        ports.extend({p.node_port for p in s.spec.ports if p.node_port})
        if s.spec.health_check_node_port:
            ports.append(s.spec.health_check_node_port)
        if s.service_type == "ClusterIP":
            assert all(p.node_port is None for p in s.spec.ports)
    assert len(ports) == len(set(ports)), ports
    assert all(30000 <= p <= 30011 for p in ports)
    lb = [i.ip for s in services for i in s.status.load_balancer.ingress if i.ip]
    assert len(lb) == len(set(lb))
    # the allocators hold exactly what is stored
    for s in services:
        if s.spec.cluster_ip not in (None, "None"):
            assert alloc.cluster_ips.owner(s.spec.cluster_ip or "") == s.ref
        for p in s.spec.ports:
            if p.node_port:
                assert alloc.node_ports.owner(p.node_port) == s.ref
    assert alloc.cluster_ips.free == 14 - len(ips)
    assert alloc.node_ports.free == 12 - len(ports)
    assert alloc.lb_ips.free == 6 - len(lb)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
@example([("create", "s0", "NodePort", None, [None], "Local"), ("delete", "s0")])
def test_random_service_churn_keeps_allocations_unique_and_in_range(
    steps: list[tuple[Any, ...]],
) -> None:
    api = make_api(**CLUSTER)
    writes = 0
    for step in steps:
        rev = api.store.revision
        key = f"default/{step[1]}"
        try:
            if step[0] == "create":
                _, name, type_, cip, nps, etp = step
                api.create(build(name, type_, nps, cip, etp))
            elif step[0] == "update":
                _, name, type_, nps = step
                api.update(build(name, type_, nps))
            else:
                api.delete("Service", key)
        except (AllocationError, InvalidError, NotFoundError):
            assert api.store.revision == rev  # a refused write stores nothing
        except Exception as e:  # ConflictError: create of an existing name
            assert type(e).__name__ == "ConflictError"
            assert api.store.revision == rev
        else:
            # an accepted create or delete was stored and is visible (an update that
            # changes nothing writes nothing, as in kube-apiserver): not vacuous
            stored = {s.ref for s in api.store.list("Service") if isinstance(s, Service)}
            assert (f"Service/{key}" in stored) == (step[0] != "delete")
            if step[0] != "update":
                assert api.store.revision > rev
                writes += 1
        services = [s for s in api.store.list("Service") if isinstance(s, Service)]
        check_invariants(services, api.services)
    first = steps[0] if steps else ("",)
    if first[0] == "create" and first[3] is None and not any(first[4]):
        assert writes >= 1  # a first Service asking for nothing specific is always stored
    rebuilt = ServiceAllocators(api.cluster)
    rebuilt.rebuild([s for s in api.store.list("Service") if isinstance(s, Service)])
    check_invariants([s for s in api.store.list("Service") if isinstance(s, Service)], rebuilt)
