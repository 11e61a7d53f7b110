"""kubelet's resolv.conf per dnsPolicy and dnsConfig, and glibc's search order."""

from __future__ import annotations

from typing import Any

import pytest

from netmodel.cluster import ClusterSpec
from netmodel.errors import InputError
from netmodel.objects import Pod
from netmodel.resolvconf import ResolvConf, pod_resolv_conf, search_order

DNS = ClusterSpec(dns=True)


def pod(ns: str = "shop", **spec: Any) -> Pod:
    return Pod.model_validate(
        {"metadata": {"name": "p", "namespace": ns}, "spec": {"containers": [], **spec}}
    )


def test_cluster_first_is_the_default() -> None:
    conf = pod_resolv_conf(pod(), DNS)
    assert conf.render() == (
        "nameserver 10.96.0.10\n"
        "search shop.svc.cluster.local svc.cluster.local cluster.local\n"
        "options ndots:5\n"
    )
    assert conf.ndots == 5


def test_cluster_domain_and_service_cidr_are_followed() -> None:
    spec = ClusterSpec(dns=True, cluster_domain="corp.internal", service_cidr="10.100.0.0/16")
    conf = pod_resolv_conf(pod("a"), spec)
    assert conf.nameservers == ("10.100.0.10",)
    assert conf.searches == ("a.svc.corp.internal", "svc.corp.internal", "corp.internal")


def test_host_network_cluster_first_gets_the_node_file_unless_with_host_net() -> None:
    assert pod_resolv_conf(pod(hostNetwork=True), DNS) == ResolvConf()
    conf = pod_resolv_conf(pod(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet"), DNS)
    assert conf.nameservers == ("10.96.0.10",)


def test_default_policy_and_a_cluster_without_dns_get_the_nodes_empty_file() -> None:
    assert pod_resolv_conf(pod(dnsPolicy="Default"), DNS).render() == ""
    assert pod_resolv_conf(pod(), ClusterSpec(dns=False)).render() == ""


def test_dns_config_is_merged() -> None:
    conf = pod_resolv_conf(
        pod(
            dnsConfig={
                "nameservers": ["10.96.0.10", "192.0.2.53"],
                "searches": ["corp.example", "svc.cluster.local"],
                "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
            }
        ),
        DNS,
    )
    assert conf.render() == (
        "nameserver 10.96.0.10\nnameserver 192.0.2.53\n"
        "search shop.svc.cluster.local svc.cluster.local cluster.local corp.example\n"
        "options ndots:2 edns0\n"
    )
    assert conf.ndots == 2


def test_none_policy_takes_only_dns_config() -> None:
    conf = pod_resolv_conf(
        pod(dnsPolicy="None", dnsConfig={"nameservers": ["192.0.2.53"], "searches": ["x.y"]}),
        DNS,
    )
    assert conf.render() == "nameserver 192.0.2.53\nsearch x.y\n"
    assert conf.ndots == 1


def test_at_most_three_nameservers() -> None:
    ns = [f"192.0.2.{i}" for i in range(1, 6)]
    conf = pod_resolv_conf(pod(dnsConfig={"nameservers": ns}), DNS)
    assert conf.nameservers == ("10.96.0.10", "192.0.2.1", "192.0.2.2")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"dnsPolicy": "ClusterFirstPlease"}, "spec.dnsPolicy"),
        ({"dnsConfig": {"nameservers": "10.0.0.1"}}, "spec.dnsConfig.nameservers"),
        ({"dnsConfig": {"options": [{"value": "1"}]}}, "spec.dnsConfig.options[0]"),
    ],
)
def test_bad_dns_settings_name_the_pod_and_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as e:
        pod_resolv_conf(pod(**spec), DNS)
    assert e.value.field == field and e.value.obj == "Pod/shop/p"


CF = ResolvConf(
    ("10.96.0.10",),
    ("a.svc.cluster.local", "svc.cluster.local", "cluster.local"),
    (("ndots", "5"),),
)


@pytest.mark.parametrize(
    ("name", "order"),
    [
        (
            "web",
            ["web.a.svc.cluster.local.", "web.svc.cluster.local.", "web.cluster.local.", "web."],
        ),
        ("web.a.svc.cluster.local.", ["web.a.svc.cluster.local."]),
        (
            "a.b.c.d.e.f",  # 5 dots: as is first
            [
                "a.b.c.d.e.f.",
                "a.b.c.d.e.f.a.svc.cluster.local.",
                "a.b.c.d.e.f.svc.cluster.local.",
                "a.b.c.d.e.f.cluster.local.",
            ],
        ),
    ],
)
def test_search_order_follows_ndots(name: str, order: list[str]) -> None:
    assert search_order(name, CF) == order


def test_search_order_with_ndots_1() -> None:
    conf = ResolvConf(("1.1.1.1",), ("corp",), ())
    assert search_order("example.com", conf) == ["example.com.", "example.com.corp."]
    assert search_order("host", conf) == ["host.corp.", "host."]
