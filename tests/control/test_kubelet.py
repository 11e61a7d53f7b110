"""Kubelet and the emulated CNI: addresses from the node's podCIDR, status, teardown."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from control.agents.network import EmulatedCNI, HostLocalRange, host_veth_name, mac_for
from control.clock import FakeClock
from control.events import timeline
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.errors import AllocationError
from netmodel.kinds import object_from_dict
from netmodel.objects import Node, Pod


def _plane(store: MemoryStore | None = None, **spec: Any) -> ControlPlane:
    """Two nodes without cluster DNS (unless asked): the scenarios below predate it and
    count each node's addresses from .2 (coredns's pods would take the first ones)."""
    cluster = ClusterSpec.model_validate({"nodes": 2, "dns": False, **spec})
    plane = ControlPlane(store or MemoryStore(), cluster, seed=1, clock=FakeClock())
    plane.start()
    plane.run_until_idle()
    return plane


def _pod(name: str, node: str, **spec: Any) -> Pod:
    p = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x"}], **spec},
        }
    )
    assert isinstance(p, Pod)
    return p


def _get(plane: ControlPlane, name: str) -> Pod:
    p = plane.store.get("Pod", f"default/{name}")
    assert isinstance(p, Pod)
    return p


def _node(plane: ControlPlane, name: str) -> Node:
    n = plane.store.get("Node", name)
    assert isinstance(n, Node)
    return n


def test_pod_ips_come_from_the_node_podcidr_skipping_the_gateway() -> None:
    plane = _plane()
    plane.apply([_pod(f"p{i}", "node-1") for i in range(5)] + [_pod("q", "node-2")])
    plane.run_until_idle()
    cidr = ipaddress.ip_network(_node(plane, "node-1").spec.pod_cidr or "")
    ips = [ipaddress.ip_address(_get(plane, f"p{i}").status.pod_ip or "") for i in range(5)]
    assert all(ip in cidr for ip in ips)
    assert sorted(ips) == [cidr.network_address + k for k in range(2, 7)]  # .1 is the gateway
    q = _get(plane, "q")
    assert ipaddress.ip_address(q.status.pod_ip or "") in ipaddress.ip_network(
        _node(plane, "node-2").spec.pod_cidr or ""
    )


def test_status_and_events_of_a_started_pod() -> None:
    plane = _plane()
    plane.apply([_pod("web", "node-2")])
    plane.run_until_idle()
    p = _get(plane, "web")
    node = _node(plane, "node-2")
    assert p.status.phase == "Running"
    assert p.status.host_ip == node.internal_ips[0]
    assert [i.ip for i in p.status.pod_ips] == [p.status.pod_ip]
    assert {c.type: c.status for c in p.status.conditions} == {
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    evs = [(e.reason, e.message) for e in timeline(plane.store) if e.involved_object.name == "web"]
    sandbox = next(m for r, m in evs if r == "SandboxCreated")
    assert f"eth0 {p.status.pod_ip}/24" in sandbox and "on cni0" in sandbox
    assert ("Started", "Started container app") in evs


def test_deleted_pod_is_torn_down_and_its_address_comes_round_again() -> None:
    # /28 per node: gateway .1, pods .2 to .14 (13 addresses)
    plane = _plane(nodeCIDRMaskSize=28)
    plane.apply([_pod(f"p{i:02d}", "node-1") for i in range(13)])
    plane.run_until_idle()
    first = _get(plane, "p03").status.pod_ip
    plane.delete("Pod", "default/p03")
    plane.run_until_idle()
    with pytest.raises(Exception, match="not found"):
        _get(plane, "p03")
    reasons = [e.reason for e in timeline(plane.store) if e.involved_object.name == "p03"]
    assert reasons[-3:] == ["Deleting", "Killing", "Deleted"]
    plane.apply([_pod("again", "node-1")])
    plane.run_until_idle()
    assert _get(plane, "again").status.pod_ip == first  # the only free address


def test_exhausted_range_reports_and_retries_when_an_address_frees() -> None:
    plane = _plane(nodeCIDRMaskSize=28)
    plane.apply([_pod(f"p{i:02d}", "node-1") for i in range(14)])
    plane.run_until_idle()
    stuck = [p for p in plane.store.list("Pod") if isinstance(p, Pod) and not p.status.pod_ip]
    assert len(stuck) == 1
    warn = [e for e in timeline(plane.store) if e.reason == "FailedCreatePodSandBox"]
    assert len(warn) == 1 and "no IP addresses available" in warn[0].message
    plane.delete("Pod", "default/p00")
    plane.run_until_idle()
    assert _get(plane, stuck[0].name).status.pod_ip


def test_host_network_pod_uses_the_node_address() -> None:
    plane = _plane()
    plane.apply([_pod("agent", "node-1", hostNetwork=True)])
    plane.run_until_idle()
    p = _get(plane, "agent")
    assert p.status.pod_ip == _node(plane, "node-1").internal_ips[0]
    assert plane.network_plugin.allocated("node-1") == []  # type: ignore[attr-defined]


def test_a_new_control_plane_relearns_addresses_in_use() -> None:
    store = MemoryStore()
    plane = _plane(store)
    plane.apply([_pod(f"p{i}", "node-1") for i in range(3)])
    plane.run_until_idle()
    used = {_get(plane, f"p{i}").status.pod_ip for i in range(3)}
    again = _plane(store)  # same store, fresh components (a restart)
    again.apply([_pod("new", "node-1")])
    again.run_until_idle()
    assert _get(again, "new").status.pod_ip not in used


def test_host_local_is_round_robin_and_skips_gateway() -> None:
    r = HostLocalRange("10.0.0.0/29")  # .1 gateway, .2-.6 usable
    got = [r.allocate(f"p{i}") for i in range(5)]
    assert got == [f"10.0.0.{i}" for i in range(2, 7)]
    with pytest.raises(AllocationError):
        r.allocate("extra")
    assert r.allocate("p1") == "10.0.0.3"  # same owner, same address
    r.release("p1")
    r.release("p3")
    assert r.allocate("x") == "10.0.0.3"  # wraps round to the first free
    assert r.allocate("y") == "10.0.0.5"
    assert r.gateway == "10.0.0.1"


def test_host_local_continues_after_the_last_reserved_address() -> None:
    r = HostLocalRange("10.0.0.0/28")
    a = r.allocate("a")
    r.allocate("b")
    r.release("a")
    assert r.allocate("c") == "10.0.0.4"  # not a's .2: round-robin
    assert a == "10.0.0.2"


def test_cni_result_names_and_mac() -> None:
    plugin = EmulatedCNI()
    node = Node.model_validate({"metadata": {"name": "n"}, "spec": {"podCIDR": "10.244.3.0/24"}})
    res = plugin.add(node, _pod("web", "n"))
    assert (res.ip, res.prefixlen, res.gateway, res.interface) == (
        "10.244.3.2",
        24,
        "10.244.3.1",
        "eth0",
    )
    assert res.mac == "0a:58:0a:f4:03:02" == mac_for("10.244.3.2")
    assert res.host_veth == host_veth_name(_pod("web", "n"))
    assert res.host_veth.startswith("veth") and len(res.host_veth) <= 15
    plugin.delete(node, _pod("web", "n"))
    plugin.delete(node, _pod("web", "n"))  # DEL is idempotent
    assert plugin.allocated("n") == []


def test_pods_bound_to_a_node_before_it_joins_start_when_it_does() -> None:
    plane = _plane()
    plane.apply([_pod("early", "node-9")])
    plane.run_until_idle()
    assert not _get(plane, "early").status.pod_ip  # no such node: nobody runs it
    node = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "node-9"},
            "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.99"}]},
        }
    )
    plane.apply([node])
    plane.run_until_idle()
    p = _get(plane, "early")
    assert p.status.phase == "Running" and p.status.host_ip == "172.18.0.99"
    assert ipaddress.ip_address(p.status.pod_ip or "") in ipaddress.ip_network(
        _node(plane, "node-9").spec.pod_cidr or ""
    )


def _recorded(name: str, node: str, ip: str) -> Pod:
    p = object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x"}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
        }
    )
    assert isinstance(p, Pod)
    return p


def test_calico_keeps_block_addresses_and_new_pods_skip_them() -> None:
    """cni: calico: a recorded address outside the node's podCIDR (a Calico block,
    here inside node-1's podCIDR although the pod runs on node-2) is kept; a new pod
    on node-1 gets host-local's next address that no pod of the cluster holds; the
    attachment is Calico's (/32, gateway 169.254.1.1, cali veth, no bridge)."""
    plane = _plane(cni="calico")
    assert _node(plane, "node-1").spec.pod_cidr == "10.244.0.0/24"
    plane.apply([_recorded("held", "node-2", "10.244.0.2")])
    plane.run_until_idle()
    plane.apply([_pod("new", "node-1")])
    plane.run_until_idle()
    assert _get(plane, "held").status.pod_ip == "10.244.0.2"
    assert _get(plane, "new").status.pod_ip == "10.244.0.3"
    msgs = [e.message for e in timeline(plane.store) if e.reason == "SandboxCreated"]
    assert any(
        "eth0 10.244.0.3/32 gateway 169.254.1.1, veth cali" in m and "routed, proxy ARP" in m
        for m in msgs
    ), msgs


def test_calico_cni_keeps_recorded_addresses_on_nodes_without_a_podcidr() -> None:
    cni = EmulatedCNI(calico=True)
    node = object_from_dict(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "spec": {}}
    )
    assert isinstance(node, Node)
    pod = _recorded("p", "n", "192.168.171.66")
    cni.restore(node, [pod])
    res = cni.add(node, pod)
    assert (res.ip, res.prefixlen, res.gateway, res.bridge) == ("192.168.171.66", 32, "169.254.1.1", "")
    assert res.host_veth.startswith("cali") and len(res.host_veth) == 15
    cni.delete(node, pod)
    with pytest.raises(Exception, match="no podCIDR"):
        cni.add(node, pod)  # gone: a new address would come from the podCIDR
