"""The Cluster document: defaults, node list, address plan validation."""

from __future__ import annotations

import pytest

from netmodel.errors import InputError
from netmodel.manifests import load_text


def cluster(spec: str):  # type: ignore[no-untyped-def]
    m = load_text(
        f"apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {spec}\n", source="c.yaml"
    )
    assert m.cluster is not None
    return m.cluster.spec


def test_defaults() -> None:
    s = cluster("{}")
    assert str(s.service_net) == "10.96.0.0/12"
    assert str(s.pod_net) == "10.244.0.0/16"
    assert s.node_cidr_mask_size == 24
    assert s.port_range == (30000, 32767)
    assert str(s.node_net) == "172.18.0.0/16"
    assert s.overlay == "vxlan" and s.proxy_mode == "iptables"


def test_node_count_gives_named_nodes_with_consecutive_addresses() -> None:
    entries = cluster("{nodes: 3}").node_entries()
    assert [e.name for e in entries] == ["node-1", "node-2", "node-3"]
    assert [e.addresses for e in entries] == [["172.18.0.2"], ["172.18.0.3"], ["172.18.0.4"]]
    assert cluster("{nodes: 3}").node_names() == ["node-1", "node-2", "node-3"]


def test_node_list_with_several_addresses() -> None:
    s = cluster("{nodes: [{name: test-node, addresses: [192.168.0.2, 192.168.1.2]}]}")
    assert s.node_entries()[0].addresses == ["192.168.0.2", "192.168.1.2"]
    assert s.node_names() == ["test-node"]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("{serviceCIDR: 10.0.0.0/8}", "serviceCIDR 10.0.0.0/8 overlaps podCIDR 10.244.0.0/16"),
        ("{podCIDR: 10.244.0.0/33}", "spec.podCIDR: invalid CIDR"),
        ("{podCIDR: 10.244.0.1/16}", "spec.podCIDR: invalid CIDR"),
        (
            "{nodes: 300}",
            "300 nodes need 300 podCIDRs of /24 but podCIDR 10.244.0.0/16 holds only 256",
        ),
        ("{nodePortRange: 32767-30000}", "spec.nodePortRange: invalid port range"),
        ("{overlay: calico}", "spec.overlay"),
        ("{nodez: 1}", "spec.nodez: unknown field"),
        ("{nodes: [{name: a}, {name: a}]}", "duplicate node name"),
    ],
)
def test_bad_cluster(spec: str, fragment: str) -> None:
    with pytest.raises(InputError) as err:
        cluster(spec)
    assert fragment in str(err.value)
    assert str(err.value).startswith("c.yaml (document 1): Cluster/svclab")


def test_dns_fields() -> None:
    s = cluster("{}")
    assert s.cluster_domain == "cluster.local" and s.dns is True and s.dns_upstream == {}
    assert s.dns_service_ip() == "10.96.0.10"
    assert cluster("{dns: false}").dns is False
    s = cluster(
        "{dns: true, clusterDomain: Corp.Internal., dnsUpstream: {Example.COM.: [192.0.2.1]}}"
    )
    assert s.cluster_domain == "corp.internal" and s.dns
    assert s.dns_upstream == {"example.com": ["192.0.2.1"]}


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("{clusterDomain: 'cluster..local'}", "spec.clusterDomain: invalid cluster domain"),
        ("{clusterDomain: 'under_score.local'}", "spec.clusterDomain: invalid cluster domain"),
        ("{dns: maybe}", "spec.dns"),
        ("{dnsUpstream: {example.com: [not-an-ip]}}", "invalid IP address 'not-an-ip'"),
        ("{dnsUpstream: {example.com: ['2001:db8::1']}}", "is not an IPv4 address"),
        ("{dnsUpstream: {'bad_name.com': [192.0.2.1]}}", "invalid name 'bad_name.com'"),
        ("{dnsUpstream: {a.svc.cluster.local: [192.0.2.1]}}", "inside the cluster domain"),
        ("{dns: true, serviceCIDR: 10.96.0.0/29}", "no tenth address for kube-dns"),
        # DNS is on by default, as kubeadm installs it: kubeadm init refuses a service
        # subnet without ten addresses; the error says how to opt out
        ("{serviceCIDR: 10.96.0.0/29}", "serviceCIDR 10.96.0.0/29 has no tenth address"),
        ("{serviceCIDR: 10.96.0.0/29}", "or set dns: false"),
    ],
)
def test_bad_dns_fields(spec: str, fragment: str) -> None:
    with pytest.raises(InputError) as err:
        cluster(spec)
    assert fragment in str(err.value)
    assert str(err.value).startswith("c.yaml (document 1): Cluster/svclab")


def test_a_small_service_range_without_cluster_dns_is_accepted() -> None:
    s = cluster("{dns: false, serviceCIDR: 10.96.0.0/29}")
    assert s.dns is False and str(s.service_net) == "10.96.0.0/29"


def test_service_range_carved_out_of_the_pod_range_is_accepted_with_a_warning() -> None:
    """GKE routes-based clusters: the services range is a block of the cluster range."""
    s = cluster("{podCIDR: 10.4.0.0/14, serviceCIDR: 10.7.240.0/20}")
    (warning,) = s.layout_warnings()
    assert "serviceCIDR 10.7.240.0/20 lies inside podCIDR 10.4.0.0/14" in warning
    assert cluster("{}").layout_warnings() == []
    # the other way round (pods inside the service range) is still refused
    with pytest.raises(InputError, match=r"serviceCIDR 10\.4\.0\.0/14 overlaps podCIDR"):
        cluster("{podCIDR: 10.7.240.0/20, serviceCIDR: 10.4.0.0/14}")


def test_calico_is_explicit_and_reads_back_the_same() -> None:
    s = cluster("{}")
    assert s.cni == "flannel" and [str(p) for p in s.calico_pools] == ["10.244.0.0/16"]
    s = cluster(
        "{cni: calico, podCIDR: 10.244.0.0/16, calico: {ipPools: [192.168.0.0/16], "
        "blockSize: 26, blockAffinities: [{node: node-1, cidr: 192.168.3.64/26}]}}"
    )
    assert s.cni == "calico" and [str(p) for p in s.calico_pools] == ["192.168.0.0/16"]
    from netmodel.cluster import Cluster, cluster_from_dict

    again = cluster_from_dict(Cluster(spec=s).to_dict())
    assert again.spec == s and "overlay" not in Cluster(spec=s).to_dict()["spec"]


def test_calico_pools_carry_nat_outgoing() -> None:
    # a CIDR alone is a pool without natOutgoing (Calico's API default)
    s = cluster("{cni: calico, calico: {ipPools: [10.9.0.0/16, {cidr: 10.8.0.0/16, natOutgoing: true}]}}")
    assert [(p.cidr, p.nat_outgoing) for p in s.calico_ip_pools] == [
        ("10.9.0.0/16", False), ("10.8.0.0/16", True)
    ]
    # no pools: calico-node's default pool, the podCIDR with natOutgoing
    s = cluster("{cni: calico}")
    assert [(p.cidr, p.nat_outgoing) for p in s.calico_ip_pools] == [("10.244.0.0/16", True)]
    from netmodel.cluster import Cluster, cluster_from_dict

    again = cluster_from_dict(Cluster(spec=s).to_dict())
    assert again.spec == s


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("{cni: calico, overlay: vxlan}", "overlay is flannel's backend"),
        ("{cni: weave}", "spec.cni"),
        ("{cni: calico, calico: {ipPools: [10.96.0.0/16]}}", "calico.ipPools 10.96.0.0/16 overlaps serviceCIDR"),
        ("{cni: calico, calico: {ipPools: [172.18.5.0/24]}}", "overlaps nodeNetwork"),
        ("{cni: calico, calico: {blockSize: 8}}", "blockSize 8 must be between 20 and 32"),
        (
            "{cni: calico, calico: {blockAffinities: [{node: a, cidr: 192.168.0.0/26}]}}",
            "calico.blockAffinities[0].cidr 192.168.0.0/26 is in no IP pool (10.244.0.0/16)",
        ),
        ("{calico: {ipPools: [192.168.0.0/16]}}", "calico settings need cni: calico"),
        ("{cni: calico, calico: {ipPools: [10.9.0.0/33]}}", "calico.ipPools.0.cidr"),
        (
            "{cni: calico, calico: {ipPools: [{cidr: 10.9.0.0/16, natOutgoing: maybe}]}}",
            "calico.ipPools.0.natOutgoing",
        ),
        ("{cni: calico, calico: {ipPools: [{cidr: 10.9.0.0/16, ipip: x}]}}", "ipip"),
    ],
)
def test_bad_calico_settings(spec: str, fragment: str) -> None:
    with pytest.raises(InputError) as err:
        cluster(spec)
    assert fragment in str(err.value)
    assert str(err.value).startswith("c.yaml (document 1): Cluster/svclab")
