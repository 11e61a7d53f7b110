"""ClusterIP, NodePort, healthCheckNodePort and LoadBalancer IP allocation."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_helpers import make_api, service

from control.events import timeline
from control.store import SqliteStore
from netmodel.errors import AllocationError, InvalidError, NotFoundError
from netmodel.objects import Service


def svc_of(o: object) -> Service:
    assert isinstance(o, Service)
    return o


def test_cluster_ips_are_first_free_and_unique() -> None:
    api = make_api()
    ips = [svc_of(api.create(service(f"s{i}"))).spec.cluster_ip for i in range(5)]
    assert ips == [f"10.96.0.{i}" for i in range(2, 7)]  # .1 is default/kubernetes
    api.delete("Service", "default/s1")  # frees 10.96.0.3
    assert svc_of(api.create(service("again"))).spec.cluster_ip == "10.96.0.3"
    assert svc_of(api.create(service("next"))).spec.cluster_ip == "10.96.0.7"


def test_requested_cluster_ip_honoured_out_of_range_or_taken() -> None:
    api = make_api()
    s = svc_of(api.create(service("a", clusterIP="10.96.100.100")))
    assert s.spec.cluster_ip == "10.96.100.100" and s.spec.cluster_ips == ["10.96.100.100"]
    with pytest.raises(AllocationError) as out:
        api.create(service("b", clusterIP="10.0.0.10"))
    assert str(out.value) == (
        'Service/default/b: spec.clusterIPs: Invalid value: "10.0.0.10": failed to allocate IP '
        "10.0.0.10: the provided IP (10.0.0.10) is not in the valid range. The range of valid "
        "IPs is 10.96.0.0/12"
    )
    with pytest.raises(AllocationError, match="provided IP is already allocated"):
        api.create(service("c", clusterIP="10.96.100.100"))
    with pytest.raises(AllocationError, match="reserved for Service/default/kubernetes"):
        api.create(service("d", clusterIP="10.96.0.1"))
    # the refused ones took nothing
    assert svc_of(api.create(service("e"))).spec.cluster_ip == "10.96.0.2"


def test_headless_gets_no_address() -> None:
    api = make_api()
    free = api.services.cluster_ips.free
    s = svc_of(api.create(service("h", clusterIP="None")))
    assert s.spec.cluster_ip == "None" and s.spec.cluster_ips == ["None"]
    assert s.is_headless
    assert api.services.cluster_ips.free == free


def test_cluster_ip_is_immutable_and_kept_on_update() -> None:
    api = make_api()
    s = svc_of(api.create(service("a")))
    # a manifest without clusterIP (as re-applied) keeps the allocated one
    again = svc_of(api.update(service("a", selector={"app": "x"})))
    assert again.spec.cluster_ip == s.spec.cluster_ip
    with pytest.raises(
        InvalidError, match=r"spec.clusterIP: Invalid value: \"10.96.9.9\": field is immutable"
    ):
        api.update(service("a", clusterIP="10.96.9.9"))
    with pytest.raises(InvalidError, match="field is immutable"):
        api.update(service("a", clusterIP="None"))


def test_node_ports_allocated_requested_and_refused() -> None:
    api = make_api()
    a = svc_of(
        api.create(
            service(
                "a",
                type="NodePort",
                ports=[
                    {"name": "http", "port": 80},
                    {"name": "https", "port": 443, "nodePort": 30443},
                ],
            )
        )
    )
    assert [p.node_port for p in a.spec.ports] == [30000, 30443]
    with pytest.raises(AllocationError) as out:
        api.create(service("b", type="NodePort", ports=[{"port": 80, "nodePort": 30443}]))
    assert (
        "Service/default/b: spec.ports[0].nodePort: Invalid value: 30443: provided port is already allocated"
        in str(out.value)
    )
    with pytest.raises(
        AllocationError,
        match=r"provided port is not in the valid range\. The range of valid ports is 30000-32767",
    ):
        api.create(service("c", type="NodePort", ports=[{"port": 80, "nodePort": 8080}]))
    b = svc_of(api.create(service("b", type="NodePort")))
    assert b.spec.ports[0].node_port == 30001


def test_same_port_number_for_two_protocols_shares_a_node_port() -> None:
    api = make_api()
    dns = svc_of(
        api.create(
            service(
                "dns",
                type="NodePort",
                ports=[
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                ],
            )
        )
    )
    assert [p.node_port for p in dns.spec.ports] == [30000, 30000]
    assert api.services.node_ports.free == 32767 - 30000


def test_node_ports_kept_on_update_and_released_on_type_change() -> None:
    api = make_api()
    a = svc_of(api.create(service("a", type="NodePort", ports=[{"name": "http", "port": 80}])))
    port = a.spec.ports[0].node_port
    assert port == 30000
    re = svc_of(api.update(service("a", type="NodePort", ports=[{"name": "http", "port": 8080}])))
    assert re.spec.ports[0].node_port == port  # matched by port name
    back = svc_of(api.update(service("a", ports=[{"name": "http", "port": 8080}])))
    assert back.spec.ports[0].node_port is None
    assert api.services.node_ports.owner(port) is None
    assert "released nodePort 30000" in timeline(api.store)[-1].message


def test_load_balancer_gets_pool_ip_node_ports_and_health_check() -> None:
    api = make_api()
    lb = svc_of(api.create(service("lb", type="LoadBalancer", externalTrafficPolicy="Local")))
    (ing,) = lb.status.load_balancer.ingress
    assert (ing.ip, ing.ip_mode) == ("172.19.0.1", "VIP")
    assert lb.spec.ports[0].node_port == 30000
    assert lb.spec.health_check_node_port == 30001
    msg = timeline(api.store)[-1].message
    assert msg == (
        "allocated clusterIP 10.96.0.2, nodePort 30000, healthCheckNodePort 30001, "
        "loadBalancer IP 172.19.0.1"
    )
    lb2 = svc_of(api.create(service("lb2", type="LoadBalancer", loadBalancerIP="172.19.0.50")))
    assert lb2.status.load_balancer.ingress[0].ip == "172.19.0.50"
    with pytest.raises(AllocationError, match=r"spec\.loadBalancerIP"):
        api.create(service("lb3", type="LoadBalancer", loadBalancerIP="172.19.0.50"))


def test_allocate_load_balancer_node_ports_false() -> None:
    api = make_api()
    lb = svc_of(
        api.create(
            service(
                "lb",
                type="LoadBalancer",
                allocateLoadBalancerNodePorts=False,
                ports=[{"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 31000}],
            )
        )
    )
    assert [p.node_port for p in lb.spec.ports] == [None, 31000]


def test_load_balancer_ingress_given_in_manifest_is_kept() -> None:
    api = make_api()
    given = service("lb", type="LoadBalancer").evolve(
        status=Service.model_validate(
            {
                "status": {
                    "loadBalancer": {
                        "ingress": [{"ip": "203.0.113.7", "ipMode": "Proxy"}, {"ip": "172.19.0.1"}]
                    }
                }
            }
        ).status
    )
    lb = svc_of(api.create(given))
    assert [(i.ip, i.ip_mode) for i in lb.status.load_balancer.ingress] == [
        ("203.0.113.7", "Proxy"),
        ("172.19.0.1", "VIP"),
    ]
    assert api.services.lb_ips.owner("172.19.0.1") == "Service/default/lb"  # pool IP marked
    other = svc_of(api.create(service("other", type="LoadBalancer")))
    assert other.status.load_balancer.ingress[0].ip == "172.19.0.2"
    # re-applying the same manifest keeps it, a spec-only update keeps the stored status
    kept = svc_of(api.update(service("lb", type="LoadBalancer", selector={"a": "b"})))
    assert kept.status == lb.status


def test_deleting_a_service_frees_everything() -> None:
    api = make_api()
    lb = svc_of(api.create(service("lb", type="LoadBalancer", externalTrafficPolicy="Local")))
    api.delete("Service", "default/lb")
    assert api.services.cluster_ips.owner(lb.spec.cluster_ip or "") is None
    assert api.services.node_ports.free == 32767 - 30000 + 1
    assert api.services.lb_ips.owner("172.19.0.1") is None
    ev = timeline(api.store)[-1]
    assert (ev.reason, ev.message) == (
        "Deleted",
        "released clusterIP 10.96.0.2, nodePort 30000, nodePort 30001, loadBalancer IP 172.19.0.1",
    )
    again = svc_of(api.create(service("lb", type="LoadBalancer", externalTrafficPolicy="Local")))
    assert again.spec.cluster_ip == lb.spec.cluster_ip
    assert again.status == lb.status


def test_full_ranges_refuse_cleanly() -> None:
    # a /29 has no tenth address for kube-dns: no cluster DNS (kubeadm would refuse it)
    api = make_api(
        serviceCIDR="10.96.0.0/29",
        nodePortRange="30000-30001",
        loadBalancerCIDR="172.19.0.0/30",
        dns=False,
    )
    # /29: .1 (kubernetes) .. .6 usable -> 5 more
    for i in range(5):
        api.create(service(f"s{i}"))
    with pytest.raises(AllocationError, match=r"no clusterIP available in 10\.96\.0\.0/29"):
        api.create(service("full"))
    api.delete("Service", "default/s4")
    api.create(
        service("np", type="NodePort", ports=[{"name": "a", "port": 1}, {"name": "b", "port": 2}])
    )
    api.delete("Service", "default/s3")
    with pytest.raises(AllocationError, match="no nodePort available in range 30000-30001"):
        api.create(service("np2", type="NodePort"))


def test_allocations_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteStore(path)
    api = make_api(store)
    a = svc_of(api.create(service("a", type="LoadBalancer", externalTrafficPolicy="Local")))
    store.close()
    store2 = SqliteStore(path)
    api2 = make_api(store2)  # bootstrap again: idempotent
    b = svc_of(api2.create(service("b", type="LoadBalancer", externalTrafficPolicy="Local")))
    assert b.spec.cluster_ip != a.spec.cluster_ip
    assert {p.node_port for p in b.spec.ports} & {p.node_port for p in a.spec.ports} == set()
    assert b.spec.health_check_node_port not in (
        a.spec.health_check_node_port,
        a.spec.ports[0].node_port,
    )
    assert b.status.load_balancer.ingress[0].ip == "172.19.0.2"
    api2.delete("Service", "default/a")
    c = svc_of(api2.create(service("c")))
    assert c.spec.cluster_ip == a.spec.cluster_ip
    store2.close()


def test_deleting_a_service_with_finalizers_only_marks_it_until_they_are_removed() -> None:
    """As kube-apiserver: an object with finalizers is marked (deletionTimestamp) and
    keeps what it holds; the update that removes its last finalizer removes it."""
    api = make_api()
    held = service("held")
    held = held.with_meta(finalizers=["example.com/a", "example.com/b"])
    ip = svc_of(api.create(held)).spec.cluster_ip
    marked = api.delete("Service", "default/held")
    assert marked.metadata.deletion_timestamp is not None
    assert api.services.cluster_ips.owner(ip or "") == "Service/default/held"
    assert api.delete("Service", "default/held") == marked  # marking twice changes nothing
    one = api.update(marked.with_meta(finalizers=["example.com/b"], resource_version=None))
    assert one.metadata.deletion_timestamp == marked.metadata.deletion_timestamp
    api.update(one.with_meta(finalizers=[], resource_version=None))
    with pytest.raises(NotFoundError):
        api.store.get("Service", "default/held")
    assert api.services.cluster_ips.owner(ip or "") is None
