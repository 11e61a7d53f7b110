"""The CNI runner as the kubelet's real network plugin: host-local's allocation order,
requested addresses, idempotent ADD, DEL releasing the address and the sandbox."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network

import pytest

from dataplane.linux import inspect, nsenter
from dataplane.linux.cni import CniError, CniRunner
from dataplane.linux.netns import is_root
from dataplane.linux.realize import RealCluster
from dataplane.linux.testing import realized, sample_network

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

CIDR = IPv4Network("10.244.0.0/24")


@pytest.fixture
def empty_node() -> Iterator[RealCluster]:
    """One node without pods (cni0 exists, like a node flannel has set up)."""
    with realized(sample_network(1, 0).network) as c:
        yield c


def test_host_local_allocates_in_order_and_add_is_idempotent(empty_node: RealCluster) -> None:
    cni = CniRunner(empty_node.cluster_id, mtu=1450)
    a = cni.add("n0", "default/a", CIDR)
    b = cni.add("n0", "default/b", CIDR)
    assert (a.ip, b.ip) == (IPv4Address("10.244.0.2"), IPv4Address("10.244.0.3"))
    assert a.gateway == IPv4Address("10.244.0.1") and a.prefixlen == 24
    assert cni.add("n0", "default/a", CIDR) == a  # no second plugin ADD, same answer
    node = inspect.dump(empty_node.node_netns("n0"))
    assert {a.host_veth, b.host_veth} <= {line.split()[0] for line in node.links}
    pod = inspect.dump(empty_node.pod_netns("default/a"))
    assert any(line.startswith(f"eth0 veth {a.mac} 1450 ") for line in pod.links)
    assert "lo 127.0.0.1/8" in pod.addresses  # the runtime brought lo up


def test_requested_address_is_honoured_or_refused(empty_node: RealCluster) -> None:
    cni = CniRunner(empty_node.cluster_id)
    got = cni.add("n0", "default/x", CIDR, requested_ip=IPv4Address("10.244.0.77"))
    assert got.ip == IPv4Address("10.244.0.77")
    with pytest.raises(CniError, match=r"10\.244\.0\.77"):
        cni.add("n0", "default/y", CIDR, requested_ip=IPv4Address("10.244.0.77"))
    # a refused ADD leaves no sandbox behind
    assert nsenter.inode(empty_node.pod_netns("default/y")) is None


def test_delete_releases_the_address_and_the_sandbox(empty_node: RealCluster) -> None:
    cni = CniRunner(empty_node.cluster_id)
    first = cni.add("n0", "default/a", CIDR)
    cni.delete("n0", "default/a", CIDR)
    assert nsenter.inode(empty_node.pod_netns("default/a")) is None
    assert cni.cached("default/a") is None
    assert first.host_veth not in {
        line.split()[0] for line in inspect.dump(empty_node.node_netns("n0")).links
    }
    again = cni.add("n0", "default/b", CIDR, requested_ip=first.ip)  # free again
    assert again.ip == first.ip
    cni.delete("n0", "default/a", CIDR)  # DEL is idempotent


def test_many_pods_attach_concurrently(empty_node: RealCluster) -> None:
    from dataplane.linux.cni import PodAttach

    cni = CniRunner(empty_node.cluster_id)
    pods = [PodAttach("n0", f"default/p{i}", CIDR) for i in range(12)]
    results = cni.add_many(pods, workers=6)
    ips = sorted(int(r.ip) for r in results)
    assert ips == list(range(int(IPv4Address("10.244.0.2")), int(IPv4Address("10.244.0.14"))))


def test_a_pod_whose_sandbox_vanished_is_attached_again_with_its_address(
    empty_node: RealCluster,
) -> None:
    cni = CniRunner(empty_node.cluster_id)
    first = cni.add("n0", "default/a", CIDR)
    nsenter.remove_netns(empty_node.pod_netns("default/a"))  # e.g. the runtime restarted
    again = cni.add("n0", "default/a", CIDR, requested_ip=first.ip)
    assert again.ip == first.ip and again.host_veth != first.host_veth
    assert cni.add("n0", "default/b", CIDR).ip == IPv4Address("10.244.0.3")  # nothing leaked
