"""Node dumps without the kernel: the listing formats, routing, MASQUERADE's address,
sysctls, per-endpoint masquerade, errors naming file and line, and the CLI."""

from __future__ import annotations

import json
from ipaddress import ip_address
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli.main import cli
from dataplane.netfilter.ipset import parse_ipset_save
from dataplane.netfilter.ipsetlist import parse_ipset_list
from dataplane.netfilter.ipvsadm import parse_ipvsadm
from dataplane.netfilter.ipvslist import parse_ipvsadm_list
from dataplane.nodedump import NodeFlow, NodeTracer, load_node_dump, summarise
from dataplane.nodedump.dump import strip_xt_tables
from netmodel.errors import InputError

DATA = Path(__file__).resolve().parents[2] / "data" / "node-dumps"

IPSET_LIST = """\
Name: KUBE-CLUSTER-IP
Type: hash:ip,port
Revision: 5
Header: family inet hashsize 1024 maxelem 65536
Size in memory: 600
References: 2
Number of entries: 2
Members:
10.96.0.1,tcp:443
10.96.0.10,udp:53

Name: KUBE-LOOP-BACK
Type: hash:ip,port,ip
Revision: 5
Header: family inet hashsize 1024 maxelem 65536
Members:
10.244.1.5,tcp:80,10.244.1.5
"""

IPSET_SAVE = """\
create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536
add KUBE-CLUSTER-IP 10.96.0.1,tcp:443
add KUBE-CLUSTER-IP 10.96.0.10,udp:53
create KUBE-LOOP-BACK hash:ip,port,ip family inet hashsize 1024 maxelem 65536
add KUBE-LOOP-BACK 10.244.1.5,tcp:80,10.244.1.5
"""


def test_ipset_list_means_the_same_as_ipset_save() -> None:
    assert parse_ipset_list(IPSET_LIST, "x") == parse_ipset_save(IPSET_SAVE, "y")


def test_ipset_list_errors_name_file_and_line() -> None:
    bad = IPSET_LIST.replace("10.96.0.10,udp:53", "10.96.0.10")
    with pytest.raises(InputError, match=r"^dump/ipset.txt:10: "):
        parse_ipset_list(bad, "dump/ipset.txt")
    with pytest.raises(InputError, match=r"^f:1: 'Type' before any 'Name:' line"):
        parse_ipset_list("Type: hash:ip\n", "f")


def test_ipvsadm_listing_means_the_same_as_save() -> None:
    listing = (DATA / "kube-proxy-ipvs-listing" / "ipvsadm.txt").read_text()
    save = (
        "-A -t 10.233.0.1:443 -s rr\n"
        "-a -t 10.233.0.1:443 -r 172.31.35.21:6443 -m -w 1\n"
        "-a -t 10.233.0.1:443 -r 172.31.35.37:6443 -m -w 1\n"
        "-a -t 10.233.0.1:443 -r 172.31.35.38:6443 -m -w 1\n"
    )
    assert parse_ipvsadm_list(listing, "x") == parse_ipvsadm(save)


def test_ipvsadm_listing_errors_name_file_and_line() -> None:
    text = "TCP  10.0.0.1:80 rr\n  -> 10.1.0.1:80   Route 1 0 0\n"
    with pytest.raises(InputError, match=r"^d/ipvsadm.txt:2: .*only Masq"):
        parse_ipvsadm_list(text, "d/ipvsadm.txt")
    with pytest.raises(InputError, match=r"^f:1: FWM 7 rr: firewall-mark"):
        parse_ipvsadm_list("FWM 7 rr\n", "f")


def test_ipvs_dump_round_robins_over_the_listed_servers() -> None:
    tracer = NodeTracer(load_node_dump(str(DATA / "kube-proxy-ipvs-listing")))
    flow = NodeFlow("172.31.40.9", "10.233.0.1", 443)
    res = summarise(flow, tracer.origin(flow), tracer.trace(flow))
    assert [e["endpoint"] for e in res["endpoints"]] == [
        "172.31.35.21:6443",
        "172.31.35.37:6443",
        "172.31.35.38:6443",
    ]
    assert all(e["source"] == "172.31.40.9" and not e["masquerade"] for e in res["endpoints"])


# --------------------------------------------------------------------------- a hand-built node


def _write(d: Path, **files: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name.replace("_", "-").replace("-json", ".json").replace("-txt", ".txt")).write_text(
            text
        )
    return d


ADDRS = json.dumps(
    [
        {"ifname": "lo", "addr_info": [{"local": "127.0.0.1", "prefixlen": 8, "scope": "host"}]},
        {
            "ifname": "eth0",
            "addr_info": [
                {"local": "192.0.2.10", "prefixlen": 24, "scope": "global"},
                {"local": "198.51.100.10", "prefixlen": 24, "scope": "global"},
            ],
        },
        {"ifname": "cni0", "addr_info": [{"local": "10.244.1.1", "prefixlen": 24}]},
        {"ifname": "wg0", "addr_info": [{"local": "10.99.0.1", "prefixlen": 24}]},
    ]
)
ROUTES = json.dumps(
    [
        {"dst": "default", "gateway": "198.51.100.1", "dev": "eth0"},
        {"dst": "default", "gateway": "10.99.0.254", "dev": "wg0", "table": "100"},
        {"dst": "203.0.113.0/24", "type": "blackhole"},
        {"dst": "192.0.2.10", "type": "local", "dev": "eth0", "table": "local"},
    ]
)
RULES = json.dumps(
    [
        {"priority": 0, "src": "all", "table": "local"},
        {"priority": 100, "src": "all", "fwmark": "0x10", "fwmask": "0x10", "table": "100"},
        {"priority": 32766, "src": "all", "table": "main"},
        {"priority": 32767, "src": "all", "table": "default"},
    ]
)
RULES_SAVE = """\
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -s 10.244.1.66/32 -j MARK --set-xmark 0x10/0x10
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:SVC - [0:0]
-A PREROUTING -d 10.96.0.5/32 -p tcp --dport 80 -j SVC
-A OUTPUT -d 10.96.0.5/32 -p tcp --dport 80 -j SVC
-A SVC -m statistic --mode random --probability 0.5 -j MARK --set-xmark 0x4000/0x4000
-A SVC -p tcp -m statistic --mode random --probability 0.5 -j DNAT --to-destination 192.0.2.10:8080
-A SVC -p tcp -j DNAT --to-destination 10.244.1.7:80
-A POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE
-A POSTROUTING -s 10.244.0.0/16 ! -o cni0 -j MASQUERADE
COMMIT
"""


@pytest.fixture
def node(tmp_path: Path) -> Path:
    return _write(
        tmp_path / "node",
        iptables_save_txt=RULES_SAVE,
        ip_addr_json=ADDRS,
        ip_route_json=ROUTES,
        ip_rule_json=RULES,
        sysctl_txt="net.ipv4.ip_forward = 1\n",
    )


def _trace(d: Path, src: str, dst: str, port: int, proto: str = "tcp") -> dict[str, object]:
    tracer = NodeTracer(load_node_dump(str(d)))
    flow = NodeFlow(src, dst, port, proto)
    return summarise(flow, tracer.origin(flow), tracer.trace(flow))


def test_masquerade_takes_the_output_interface_address_in_the_next_hops_subnet(node: Path) -> None:
    # a pod to the internet: out eth0 via 198.51.100.1 -> eth0's address in that subnet
    res = _trace(node, "10.244.1.5", "8.8.8.8", 443)
    assert res["masquerade"] is True and res["source"] == "198.51.100.10"
    assert res["out_dev"] == ["eth0"]


def test_policy_routing_by_fwmark_picks_the_other_table(node: Path) -> None:
    res = _trace(node, "10.244.1.66", "8.8.8.8", 443)
    assert res["out_dev"] == ["wg0"] and res["source"] == "10.99.0.1"


def test_blackhole_route_drops_with_the_reason(node: Path) -> None:
    res = _trace(node, "10.244.1.5", "203.0.113.9", 443)
    assert res["verdict"] == "DROP"
    assert res["reasons"] and "blackhole" in res["reasons"][0]  # type: ignore[index]


def test_arriving_multicast_is_not_forwarded(node: Path) -> None:
    """Without multicast routing the kernel forwards no group traffic; the all-hosts
    group and the limited broadcast are delivered to the node (the flannel-nftables
    dump checks the first two against the kernel)."""
    res = _trace(node, "10.244.1.5", "239.1.2.3", 5000, "udp")
    assert res["verdict"] == "DROP"
    assert "not forwarded" in res["reasons"][0]  # type: ignore[index]
    for group in ("224.0.0.1", "255.255.255.255"):
        res = _trace(node, "10.244.1.5", group, 5000, "udp")
        assert (res["verdict"], res["out_dev"]) == ("ACCEPT", None), group
    res = _trace(node, "192.0.2.10", "239.1.2.3", 5000, "udp")  # the node's own: sent
    assert (res["verdict"], res["out_dev"]) == ("ACCEPT", ["eth0"])


def test_local_route_in_another_table_is_not_a_local_address(tmp_path: Path) -> None:
    """Cilium's ``local default dev lo table 2004`` (reached by ``fwmark 0x200/0xf00``
    only, cilium-kpr-gke-dpv2 checks it against the kernel) does not make every address
    the node's own: a pod's flow still arrives and is forwarded."""
    routes = [
        *json.loads(ROUTES),
        {"type": "local", "dst": "default", "dev": "lo", "table": "2004", "scope": "host"},
    ]
    rules = [{"priority": 9, "src": "all", "fwmark": "0x200", "fwmask": "0xf00", "table": "2004"}]
    d = _write(
        tmp_path / "n",
        iptables_save_txt=RULES_SAVE,
        ip_addr_json=ADDRS,
        ip_route_json=json.dumps(routes),
        ip_rule_json=json.dumps(rules + json.loads(RULES)),
    )
    tracer = NodeTracer(load_node_dump(str(d)))
    flow = NodeFlow("10.244.1.5", "8.8.8.8", 443, "tcp")
    assert tracer.origin(flow) == "in"
    res = _trace(d, "10.244.1.5", "8.8.8.8", 443)
    assert (res["verdict"], res["out_dev"]) == ("ACCEPT", ["eth0"])


def test_pasted_ip_text_and_inverted_rules(node: Path) -> None:
    """``ip addr``/``ip route``/``ip rule`` text in ``ip-*.txt`` (read when the JSON is
    absent; tests/kernel/test_ip_text.py checks the reading against ``ip -j``); an
    inverted rule (``ip -j`` prints its "not" as null) is inverted; errors name file:line."""
    from dataplane.nodedump.iptext import route_text

    for f in ("ip-addr.json", "ip-route.json", "ip-rule.json"):
        (node / f).unlink()
    (node / "ip-addr.txt").write_text(
        "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\n    inet 127.0.0.1/8 scope host lo\n"
        "2: eth0@if9: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n"
        "    link/ether 02:42:c9:fc:42:45 brd ff:ff:ff:ff:ff:ff\n"
        "    inet 198.51.100.10/24 brd 198.51.100.255 scope global eth0\n"
        "       valid_lft forever preferred_lft forever\n"
        "3: wg0: <POINTOPOINT,UP> mtu 1420\n    inet 10.99.0.1/24 scope global wg0\n"
    )
    (node / "ip-route.txt").write_text(
        "default via 198.51.100.1 dev eth0 proto dhcp src 198.51.100.10 metric 100\n"
        "default via 10.99.0.254 dev wg0 table 100\n"
    )
    (node / "ip-rule.txt").write_text(
        "0:\tfrom all lookup local\n"
        "10:\tnot from all fwmark 0x10/0x10 lookup 100\n"
        "32766:\tfrom all lookup main\n"
    )
    # unmarked traffic is NOT marked 0x10: the inverted rule sends it by table 100
    res = _trace(node, "10.244.1.5", "8.8.8.8", 443)
    assert res["out_dev"] == ["wg0"] and res["source"] == "10.99.0.1"
    (node / "ip-route.txt").write_text("10.1.0.0/16 proto static\n  nexthop via 1.2.3.4\n")
    with pytest.raises(InputError, match=r"ip-route\.txt:2: nexthop via 1\.2\.3\.4: multipath"):
        load_node_dump(str(node))
    assert route_text("local 10.0.0.1 dev lo table local", "x")[0]["type"] == "local"


def test_per_endpoint_masquerade_and_source(node: Path) -> None:
    """The mark is set on half the branches; SNAT happens only where the packet leaves:
    the local endpoint (INPUT) is never source-NATed; the top-level flag is all-branches."""
    res = _trace(node, "192.0.2.77", "10.96.0.5", 80)
    eps = {e["endpoint"]: e for e in res["endpoints"]}  # type: ignore[union-attr]
    local, pod = eps["192.0.2.10:8080"], eps["10.244.1.7:80"]
    assert local["masquerade"] is False and local["source"] == "192.0.2.77"
    assert local["probability"] == 0.5
    assert pod["masquerade"] is False  # marked on one branch only
    assert sorted(pod["source"]) == ["10.244.1.1", "192.0.2.77"]
    assert res["masquerade"] is False


def test_ip_forward_zero_drops_forwarded_traffic(node: Path) -> None:
    (node / "sysctl.txt").write_text("net.ipv4.ip_forward = 0\n")
    res = _trace(node, "10.244.1.5", "8.8.8.8", 443)
    assert res["verdict"] == "DROP" and res["reasons"] == ["net.ipv4.ip_forward=0"]
    # local delivery is not forwarding
    assert _trace(node, "10.244.1.5", "192.0.2.10", 22)["verdict"] == "ACCEPT"


def test_route_localnet_decides_a_dnat_to_loopback(tmp_path: Path) -> None:
    save = RULES_SAVE.replace("192.0.2.10:8080", "127.0.0.1:8080").replace(
        "--probability 0.5 -j DNAT", "--probability 1 -j DNAT"
    )
    d = _write(tmp_path / "n", iptables_save_txt=save, ip_addr_json=ADDRS, ip_route_json=ROUTES)
    (d / "sysctl.txt").write_text("net.ipv4.conf.all.route_localnet = 0\n")
    res = _trace(d, "192.0.2.77", "10.96.0.5", 80)
    assert res["verdict"] == "DROP" and "martian destination" in res["reasons"][0]  # type: ignore[index]
    (d / "sysctl.txt").write_text("net.ipv4.conf.eth0.route_localnet = 1\n")
    assert _trace(d, "192.0.2.77", "10.96.0.5", 80)["verdict"] == "ACCEPT"


def test_errors_name_the_dump_file_and_line(node: Path) -> None:
    (node / "iptables-save.txt").write_text(
        RULES_SAVE.replace("-j SVC\n-A OUTPUT", "-j NOPE\n-A OUTPUT")
    )
    with pytest.raises(InputError, match=rf"^{node}/iptables-save.txt:\d+: "):
        load_node_dump(str(node))
    (node / "iptables-save.txt").write_text(RULES_SAVE)
    (node / "ip-route.json").write_text("[{\n")
    with pytest.raises(InputError, match=rf"^{node}/ip-route.json:\d+: not JSON"):
        load_node_dump(str(node))
    (node / "ip-route.json").write_text(ROUTES)
    (node / "sysctl.txt").write_text("net.ipv4.ip_forward 1\n")
    with pytest.raises(InputError, match=rf"^{node}/sysctl.txt:1: expected"):
        load_node_dump(str(node))


def test_strip_xt_tables_keeps_line_numbers() -> None:
    text = "table ip nat {\n\tchain X {\n\t}\n}\ntable inet kube-proxy {\n}\n"
    out = strip_xt_tables(text)
    assert out.splitlines() == ["", "", "", "", "table inet kube-proxy {", "}"]


# --------------------------------------------------------------------------- CLI


def test_cli_trace_node_dump_json_all_and_sport(node: Path) -> None:
    r = CliRunner().invoke(
        cli,
        [
            *("trace", "--node-dump", str(node), "--from", "192.0.2.77", "--to", "10.96.0.5:80"),
            *("--all", "--sport", "1234", "-o", "json"),
        ],
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["flow"]["sport"] == 1234
    assert {e["endpoint"] for e in res["endpoints"]} == {"192.0.2.10:8080", "10.244.1.7:80"}


def test_flows_name_the_interface_a_flow_arrives_on(node: Path, tmp_path: Path) -> None:
    """``iif`` in a flows file: the flow arrives there (policy rules by ``iif`` pick the
    table, ``-i`` matches it) instead of on the source's reverse path; an interface the
    dump does not have is refused naming the dump and the flow
    (eks-branch-eni-policy-routing checks it against the kernel)."""
    rules = [{"priority": 10, "src": "all", "iif": "wg0", "table": "100"}, *json.loads(RULES)]
    (node / "ip-rule.json").write_text(json.dumps(rules))
    flows = tmp_path / "flows.yaml"
    flows.write_text(
        '- {from: 10.244.1.5, to: "8.8.8.8:443"}\n'
        '- {from: 10.244.1.5, to: "8.8.8.8:443", iif: wg0}\n'
    )
    r = CliRunner().invoke(cli, ["trace", "--node-dump", str(node), "--flows", str(flows)])
    assert r.exit_code == 0, r.output
    plain, via_wg0 = (json.loads(line) for line in r.output.splitlines())
    assert "iif" not in plain["flow"] and plain["out_dev"] == ["eth0"]
    assert via_wg0["flow"]["iif"] == "wg0" and via_wg0["out_dev"] == ["wg0"]
    one = ["trace", "--node-dump", str(node), "--from", "10.244.1.5", "--to", "8.8.8.8:443"]
    r = CliRunner().invoke(cli, [*one, "--iif", "wg0", "-o", "json"])
    assert r.exit_code == 0 and json.loads(r.output)["out_dev"] == ["wg0"], r.output
    r = CliRunner().invoke(cli, ["trace", "--from", "10.0.0.1", "--to", "10.0.0.2:80", "--iif", "x"])
    assert r.exit_code == 2 and "--iif names an interface of a node dump" in r.output
    flows.write_text('- {name: bad, from: 10.244.1.5, to: "8.8.8.8:443", iif: nope0}\n')
    r = CliRunner().invoke(cli, ["trace", "--node-dump", str(node), "--flows", str(flows)])
    assert r.exit_code == 1
    assert str(node) in r.output and "flow 0 (bad): iif 'nope0'" in r.output


def test_cli_trace_node_dump_text_says_where_snat_happened(node: Path) -> None:
    r = CliRunner().invoke(
        cli, ["trace", "--node-dump", str(node), "--from", "10.244.1.5", "--to", "8.8.8.8:443"]
    )
    assert r.exit_code == 0, r.output
    assert "source NAT on every branch, source seen: 198.51.100.10" in r.output.splitlines()[0]


def test_cli_node_dump_refusals(node: Path) -> None:
    run = CliRunner().invoke
    r = run(cli, ["trace", "--node-dump", str(node), "--from", "svc/a/b", "--to", "1.2.3.4:80"])
    assert r.exit_code == 2 and "no cluster objects" in r.output
    r = run(
        cli,
        [
            "trace",
            "--node-dump",
            str(node),
            "--at",
            "node/x",
            "--from",
            "1.1.1.1",
            "--to",
            "1.2.3.4:1",
        ],
    )
    assert r.exit_code == 2 and "--at" in r.output
    r = run(cli, ["trace", "--node-dump", str(node), "--from", "1.1.1.1", "--to", "1.2.3.4"])
    assert r.exit_code == 2 and "give a port" in r.output
    (node / "iptables-save.txt").write_text("*nat\n-A FOO -j ACCEPT\n")
    r = run(cli, ["trace", "--node-dump", str(node), "--from", "1.1.1.1", "--to", "1.2.3.4:1"])
    assert r.exit_code == 1 and f"{node}/iptables-save.txt:" in r.output
    assert "Traceback" not in r.output


def test_cli_connect_node_dump_commits_each_connection(node: Path) -> None:
    r = CliRunner().invoke(
        cli,
        [
            "connect",
            "192.0.2.77",
            "10.96.0.5:80",
            "-n",
            "40",
            "--node-dump",
            str(node),
            "-o",
            "json",
        ],
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert len(res["connections"]) == 40
    assert set(res["counts"]) == {"192.0.2.10:8080", "10.244.1.7:80"}
    assert len({c["sport"] for c in res["connections"]}) == 40
    assert ip_address(res["connections"][0]["source"])


def test_at_iptables_save_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "node.save"
    bad.write_text("*nat\n-A FOO -j ACCEPT\nCOMMIT\n")
    web = Path(__file__).resolve().parents[3] / "examples" / "web.yaml"
    r = CliRunner().invoke(
        cli,
        [
            *("trace", "-f", str(web), "--at", "node/node-1", "--iptables-save", str(bad)),
            *("--from", "10.0.0.1", "--to", "10.96.0.1:443"),
        ],
    )
    assert r.exit_code == 1
    assert f"{bad}:2: -A FOO -j ACCEPT" in r.output and "<iptables-save>" not in r.output


IIF_SAVE = """\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -i cni0 -d 10.96.0.5/32 -p tcp --dport 80 -j DNAT --to-destination 10.244.1.7:80
-A PREROUTING -d 10.96.0.5/32 -p tcp --dport 80 -j DNAT --to-destination 192.0.2.20:8080
-A POSTROUTING -s 10.244.0.0/16 ! -o cni0 -j MASQUERADE
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -i wg0 -j DROP
COMMIT
"""


def iif_node(d: Path) -> Path:
    """A node whose answer depends on where a flow comes in: ``-i cni0`` picks the pod
    endpoint, any other interface the host one (masqueraded out of eth0), ``-i wg0`` is
    dropped in FORWARD (tests/kernel/test_node_dump_iif.py loads it into the kernel)."""
    addrs = [
        {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
        {"ifname": "eth0", "addr_info": [{"family": "inet", "local": "192.0.2.10", "prefixlen": 24}]},
        {"ifname": "cni0", "addr_info": [{"family": "inet", "local": "10.244.1.1", "prefixlen": 24}]},
        {"ifname": "wg0", "addr_info": [{"family": "inet", "local": "10.99.0.1", "prefixlen": 24}]},
    ]
    routes = [{"dst": "default", "gateway": "192.0.2.1", "dev": "eth0"}]
    return _write(
        d,
        iptables_save_txt=IIF_SAVE,
        ip_addr_json=json.dumps(addrs),
        ip_route_json=json.dumps(routes),
        sysctl_txt="net.ipv4.ip_forward = 1\nnet.ipv4.conf.all.rp_filter = 0\n",
    )


def _connect(d: Path, *extra: str) -> tuple[int, str]:
    argv = ["connect", "10.244.1.5", "10.96.0.5:80", "-n", "6", "--node-dump", str(d)]
    r = CliRunner().invoke(cli, [*argv, *extra])
    return r.exit_code, r.output


def test_cli_connect_node_dump_iif_decides_the_answer(tmp_path: Path) -> None:
    """``connect --node-dump --iif``: the connections arrive on that interface, so ``-i``
    rules see it; without it, on the source's reverse path (cni0 here)."""
    d = iif_node(tmp_path / "n")
    answers = {}
    for iif in (None, "cni0", "eth0", "wg0"):
        code, out = _connect(d, "-o", "json", *(("--iif", iif) if iif else ()))
        assert code == 0, out
        res = json.loads(out)
        assert res.get("iif") == iif
        answers[iif] = {(c["verdict"], c["endpoint"], c["source"]) for c in res["connections"]}
    assert answers[None] == answers["cni0"] == {("ACCEPT", "10.244.1.7:80", "10.244.1.5")}
    assert answers["eth0"] == {("ACCEPT", "192.0.2.20:8080", "192.0.2.10")}
    assert answers["wg0"] == {("DROP", "192.0.2.20:8080", None)}


def test_cli_connect_iif_errors(tmp_path: Path) -> None:
    d = iif_node(tmp_path / "n")
    code, out = _connect(d, "--iif", "eth9")
    assert code == 1 and len(out.strip().splitlines()) == 1, out
    assert out.strip() == (
        f"error: {d}: --iif 'eth9': no interface of that name has an address or a "
        "route in this node dump (it has: cni0, eth0, lo, wg0)"
    )
    r = CliRunner().invoke(cli, ["connect", "10.0.0.1", "10.0.0.2:80", "--iif", "eth0"])
    assert r.exit_code == 2 and "--iif names an interface of a node dump" in r.output


def test_cli_connect_node_dump_jsonl_is_one_line_per_connection(tmp_path: Path) -> None:
    """``-o jsonl`` with ``--node-dump``: one record per connection, then the summary
    (it printed the text table instead)."""
    d = iif_node(tmp_path / "n")
    code, out = _connect(d, "-o", "jsonl", "--iif", "eth0")
    assert code == 0, out
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 7
    assert all(r["endpoint"] == "192.0.2.20:8080" for r in lines[:6])
    assert lines[6]["summary"]["counts"] == {"192.0.2.20:8080": 6}
    assert lines[6]["summary"]["iif"] == "eth0"


MINIKUBE_IPVS = DATA / "kube-proxy-ipvs-minikube-ipset"


def _cli_trace(d: Path, src: str, dst: str) -> dict[str, object]:
    r = CliRunner().invoke(
        cli, ["trace", "--node-dump", str(d), "--from", src, "--to", dst, "--all", "-o", "json"]
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert isinstance(res, dict)
    return res


def _hits_ipset_rule(res: dict[str, object]) -> bool:
    hops = res["hops"]
    assert isinstance(hops, list)
    return any(
        h["chain"] == "KUBE-SERVICES" and "--match-set KUBE-CLUSTER-IP dst,dst" in h["text"]
        for h in hops
    )


def test_minikube_ipvs_dump_with_its_ipset_answers_as_the_write_up_reports() -> None:
    """A real minikube node in IPVS mode (SOURCE.md): its ``ipvsadm`` listing (no header
    lines, as pasted) and ``ipset -L`` listing load; connections to web-svc-cip go round
    robin over the three listed pods in order, after the ``KUBE-CLUSTER-IP dst,dst``
    rule accepted them in nat; a port the set does not hold passes that rule by and
    reaches no pod (tests/kernel/test_node_dump_ipset.py checks the set match against
    the kernel)."""
    dump = load_node_dump(str(MINIKUBE_IPVS))
    members = ("10.96.0.10,tcp:9153", "10.108.218.82,tcp:80", "10.96.0.10,udp:53")
    members += ("10.96.0.10,tcp:53", "10.96.0.1,tcp:443")
    save = "create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536\n"
    save += "".join(f"add KUBE-CLUSTER-IP {m}\n" for m in members)
    assert dump.ipsets == parse_ipset_save(save, "x")
    r = CliRunner().invoke(
        cli,
        [
            *("connect", "172.17.0.7", "10.108.218.82:80", "-n", "6", "-o", "json"),
            *("--node-dump", str(MINIKUBE_IPVS)),
        ],
    )
    assert r.exit_code == 0, r.output
    conns = json.loads(r.output)["connections"]
    assert [c["endpoint"] for c in conns] == [
        f"172.17.0.{i}:8000" for i in (4, 5, 6, 4, 5, 6)
    ]
    assert all(c["source"] == "172.17.0.7" and not c["masquerade"] for c in conns)
    member = _cli_trace(MINIKUBE_IPVS, "172.17.0.7", "10.108.218.82:80")
    assert _hits_ipset_rule(member)
    other = _cli_trace(MINIKUBE_IPVS, "172.17.0.7", "10.108.218.82:81")
    assert not _hits_ipset_rule(other)
    assert other["verdict"] == "ACCEPT" and other["endpoints"] == []


def test_cli_connect_node_dump_summary_is_the_chi_square_test(node: Path) -> None:
    """``connect --node-dump``'s summary: the counts and scipy's chi-square test of equal
    shares, in the JSON document and on the text output's last line."""
    from scipy.stats import chisquare

    argv = ["connect", "192.0.2.77", "10.96.0.5:80", "-n", "40", "--node-dump", str(node)]
    r = CliRunner().invoke(cli, [*argv, "-o", "json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    want = chisquare(list(res["counts"].values()))
    chi = res["chi_square"]
    assert chi["dof"] == 1 and chi["statistic"] == pytest.approx(want.statistic)
    assert chi["p_value"] == pytest.approx(want.pvalue)
    text = CliRunner().invoke(cli, argv)
    assert text.exit_code == 0, text.output
    assert text.output.splitlines()[-1] == (
        f"chi-square vs equal shares: {want.statistic:.3f} (dof 1), p = {want.pvalue:.4f}"
    )


def test_a_node_dump_trace_names_the_service_its_rules_came_from() -> None:
    """A real node's dump (EKS, kube-proxy) has no objects to read: the hops of
    kube-proxy's rules name the Service port their comments name, and the endpoint the
    DNAT picked; the text lists them under "made by"."""
    dump = Path(__file__).parents[2] / "data" / "node-dumps" / "eks-vpc-cni-kube-proxy"
    base = ["trace", "--node-dump", str(dump), "--from", "172.31.23.163", "--to", "10.100.0.1:443"]
    r = CliRunner().invoke(cli, [*base, "-o", "json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    named = [h for h in res["hops"] if h.get("object")]
    assert named and all("KUBE-" in h["chain"] for h in named)
    dnat = next(h for h in res["hops"] if "DNAT" in (h["text"] or ""))
    (ep,) = res["endpoints"]
    assert dnat["object"] == {
        "kind": "Service", "namespace": "default", "name": "kubernetes", "field": "spec.ports",
        "by": "kube-proxy", "detail": f"port https, endpoint {ep['endpoint']}",
    }
    text = CliRunner().invoke(cli, base).output
    assert "made by (rule comments and chain names):" in text
    assert f"Service default/kubernetes spec.ports (port https, endpoint {ep['endpoint']})" in text
