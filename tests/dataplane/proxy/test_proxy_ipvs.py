"""IPVS mode: virtual servers, ipsets and the iptables glue."""

from __future__ import annotations

from proxy_builders import CASES, endpoint, fake_config, service, slice_

from dataplane.proxy import render
from dataplane.proxy.cases import load_case
from dataplane.proxy.ipvs import IpvsRender, RealServer
from dataplane.proxy.normalize import consistency_errors
from dataplane.proxy.snapshot import build_snapshot


def ipvs(services, slices, cfg=None) -> IpvsRender:  # type: ignore[no-untyped-def]
    cfg = cfg or fake_config()
    out = render("ipvs", build_snapshot(services, slices, cfg), cfg)
    assert isinstance(out, IpvsRender)
    return out


def test_overall_case_virtual_servers() -> None:
    case = load_case(CASES / "TestOverallIPTablesRules.yaml")
    out = ipvs(case.services, case.endpointslices, case.node_config)
    by_addr = {(v.ip, v.port): v for v in out.virtual_servers}
    svc5 = by_addr[("172.30.0.45", 80)]
    assert svc5.persistence == 10800 and svc5.scheduler == "rr"
    assert svc5.real_servers == (RealServer("10.180.0.3", 80),)
    # eTP Local without a local endpoint: IPVS falls back to the cluster-wide endpoints
    # (unlike iptables mode, which drops external traffic)
    remote = (RealServer("10.180.0.2", 80),)
    assert by_addr[("1.2.3.4", 80)].real_servers == remote
    assert by_addr[("1.2.3.4", 80)].local_only
    assert by_addr[("192.168.0.2", 3001)].real_servers == remote
    assert by_addr[("172.30.0.42", 80)].real_servers == remote
    # NodePorts match all: a virtual server on every node address of the family
    assert {ip for ip, port in by_addr if port == 3003} == {
        "127.0.0.1",
        "192.168.0.2",
        "192.168.1.2",
        "192.168.99.11",
    }
    # the node (192.168.0.2) is outside svc5's source range: node access is blocked
    assert (
        "-A KUBE-IPVS-OUT-FILTER -s 5.6.7.8 -m ipvs --vaddr 5.6.7.8 --vproto tcp --vport 80 "
        "-j DROP" in out.restore_input
    )
    assert out.restore_input.startswith("*nat\n")
    assert "-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN\n" in out.restore_input
    # a service without endpoints still has its virtual server
    assert by_addr[("172.30.0.46", 80)].real_servers == ()
    assert (
        "-A -t 172.30.0.45:80 -s rr -p 10800\n-a -t 172.30.0.45:80 -r 10.180.0.3:80 -m -w 1\n"
        in (out.ipvsadm_text)
    )
    addrs = set(out.addresses)
    assert {"172.30.0.41/32", "192.168.99.22/32", "1.2.3.4/32", "5.6.7.8/32"} <= addrs
    with_local_ext = ipvs(
        [service("ns1", "e", "172.30.0.9", external_ips=["192.168.0.2"])], [], case.node_config
    )
    # an external IP that already is a node address is not bound to kube-ipvs0
    assert with_local_ext.addresses == ("172.30.0.9/32",)
    assert consistency_errors(out.restore_input) == []


def test_ipsets_follow_policies() -> None:
    svcs = [
        service(
            "ns1",
            "lb",
            "172.30.0.1",
            type="LoadBalancer",
            etp="Local",
            lb_ips=["5.6.7.8"],
            source_ranges=["192.168.0.0/16"],
            ports=[("p", "TCP", 80, 30080), ("s", "SCTP", 90, 30090)],
            hcnp=31000,
        ),
        service(
            "ns1",
            "ext",
            "172.30.0.2",
            external_ips=["192.168.99.50"],
            ports=[("u", "UDP", 53, None)],
        ),
    ]
    slices = [
        slice_(
            "ns1",
            "lb",
            [endpoint("10.0.0.1", "test-node"), endpoint("10.0.0.2")],
            ports=[("p", "TCP", 8080), ("s", "SCTP", 9090)],
        ),
    ]
    out = ipvs(svcs, slices)
    sets = {name: entries for name, (_, entries) in out.ipsets.items()}
    assert sets["KUBE-CLUSTER-IP"] == [  # snapshot order: ns1/ext, then ns1/lb:p, ns1/lb:s
        "172.30.0.2,udp:53",
        "172.30.0.1,tcp:80",
        "172.30.0.1,sctp:90",
    ]
    assert sets["KUBE-LOOP-BACK"] == ["10.0.0.1,tcp:8080,10.0.0.1", "10.0.0.1,sctp:9090,10.0.0.1"]
    assert sets["KUBE-LOAD-BALANCER-LOCAL"] == ["5.6.7.8,tcp:80", "5.6.7.8,sctp:90"]
    assert sets["KUBE-LOAD-BALANCER-SOURCE-CIDR"][0] == "5.6.7.8,tcp:80,192.168.0.0/16"
    assert sets["KUBE-LOAD-BALANCER-SOURCE-IP"][0] == "5.6.7.8,tcp:80,5.6.7.8"
    assert sets["KUBE-NODE-PORT-LOCAL-TCP"] == sets["KUBE-NODE-PORT-TCP"] == ["30080"]
    assert "192.168.0.2,sctp:30090" in sets["KUBE-NODE-PORT-LOCAL-SCTP-HASH"]
    assert "192.168.0.2,sctp:30090" in sets["KUBE-NODE-PORT-SCTP-HASH"]
    assert sets["KUBE-HEALTH-CHECK-NODE-PORT"] == ["31000"]
    assert sets["KUBE-EXTERNAL-IP"] == ["192.168.99.50,udp:53"]
    assert "create KUBE-NODE-PORT-TCP bitmap:port range 0-65535" in out.ipset_text
    assert "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536" in (
        out.ipset_text
    )
    lb = next(v for v in out.virtual_servers if v.ip == "5.6.7.8" and v.port == 80)
    assert lb.local_only and lb.real_servers == (RealServer("10.0.0.1", 8080),)
    glue = out.restore_input
    assert "-m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL" in glue
    assert "--match-set KUBE-CLUSTER-IP dst,dst ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ" in glue
    # the Local NodePort set returns before the plain one marks for masquerade
    assert glue.index("KUBE-NODE-PORT-LOCAL-TCP dst -j RETURN") < glue.index(
        "KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ"
    )
    assert "--match-set KUBE-EXTERNAL-IP dst,dst -m physdev ! --physdev-is-in" in glue
    assert consistency_errors(glue) == []
    no_detector = ipvs(svcs, slices, fake_config(local_detector=None)).restore_input
    assert "--match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ" in no_detector


def test_scheduler_and_ipv6_set_names() -> None:
    cfg = fake_config(ipvs_scheduler="sh")
    out = ipvs(
        [service("ns1", "a", "172.30.0.1")], [slice_("ns1", "a", [endpoint("10.0.0.1")])], cfg
    )
    assert out.ipvsadm_text.splitlines()[0] == "-A -t 172.30.0.1:80 -s sh"
    from proxy_builders import fake_config_v6

    v6 = ipvs(
        [service("ns1", "a", "fd00::1", ports=[("p", "UDP", 53, None)])],
        [
            slice_(
                "ns1", "a", [endpoint("fd00:10::1")], ports=[("p", "UDP", 53)], address_type="IPv6"
            )
        ],
        fake_config_v6(),
    )
    assert "KUBE-6-CLUSTER-IP" in v6.ipsets and "KUBE-CLUSTER-IP" not in v6.ipsets
    assert (
        v6.ipvsadm_text
        == "-A -u [fd00::1]:53 -s rr\n-a -u [fd00::1]:53 -r [fd00:10::1]:53 -m -w 1\n"
    )
    assert "family inet6" in v6.ipset_text
    assert v6.save_text.startswith("# ipvsadm-save -n\n-A -u [fd00::1]:53")
