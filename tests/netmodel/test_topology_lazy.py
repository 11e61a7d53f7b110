"""build_lazy derives, one namespace at a time, exactly what build derives at once."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network

import pytest

from netmodel.topology import PodInfo, build, build_lazy, node_info


def _inputs(n_nodes: int) -> tuple[list, list]:  # type: ignore[type-arg]
    nodes = [
        node_info(f"node-{i}", f"172.18.0.{i + 2}", f"10.244.{i}.0/24") for i in range(n_nodes)
    ]
    nodes.append(node_info("bare", "172.18.0.99", None))  # no podCIDR yet
    pods = [
        PodInfo(
            f"ns{j % 2}/p{j}", f"node-{j % n_nodes}", IPv4Address(f"10.244.{j % n_nodes}.{j + 2}")
        )
        for j in range(3 * n_nodes)
    ]
    pods.append(PodInfo("default/lost", "gone", IPv4Address("10.244.200.2")))  # no such node
    return nodes, pods


@pytest.mark.parametrize("overlay", ["vxlan", "host-gw"])
def test_lazy_network_equals_eager(overlay: str) -> None:
    nodes, pods = _inputs(4)
    net = IPv4Network("172.18.0.0/16")
    clients = ["203.0.113.7", "198.51.100.1"]
    eager = build(net, nodes, pods, overlay=overlay, external_clients=clients)  # type: ignore[arg-type]
    lazy = build_lazy(net, nodes, pods, overlay=overlay, external_clients=clients)  # type: ignore[arg-type]
    assert list(lazy.namespaces) == list(eager.namespaces)
    assert lazy.veths == eager.veths
    # ownership and single interfaces are answered without building a namespace
    addrs = [a for ns in eager.namespaces.values() for a in ns.addresses()]
    for a in [*addrs, IPv4Address("10.96.0.1")]:
        want = eager.owner_of(a)
        assert lazy.owner_name(a) == (want.name if want else None)
    for ns in eager.namespaces.values():
        for itf in ns.interfaces:
            assert lazy.interface(ns.name, itf.name) == itf
    assert lazy.namespaces.built() == {}  # type: ignore[attr-defined]
    for name, ns in eager.namespaces.items():
        assert lazy.namespaces[name] == ns
