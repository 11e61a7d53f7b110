"""What the emulated tools do, beyond their layout (test_podtools_formats.py): they go
through the emulated dataplane and say what the cluster did. curl through a Service
lands on one of its pods, whose answer and access log name the client address and port
it saw; the explanation names the Service, the rule that chose the endpoint and the
same pod; a host-network pod's node tools print the node's rules and conntrack table;
kubelet's files; what is refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from podtools_helpers import DATA, EXAMPLES, ROOT, Shell, recorded

from dataplane.podtools import NOT_FOUND, hosts_file
from dataplane.podtools.nodetools import ipset_list
from netmodel.objects import Pod, Service

HOST_POD = """
apiVersion: v1
kind: Pod
metadata: {name: debugger}
spec:
  hostNetwork: true
  nodeSelector: {kubernetes.io/hostname: node-1}
  containers: [{name: debugger, image: nicolaka/netshoot}]
"""


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Shell:
    extra = tmp_path_factory.mktemp("podtools") / "host.yaml"
    extra.write_text(HOST_POD)
    return Shell([*EXAMPLES, str(extra)])


def _web_ip(shell: Shell) -> str:
    svc = shell.session.store.get("Service", "default/web")
    assert isinstance(svc, Service) and svc.spec.cluster_ip
    return svc.spec.cluster_ip


def _web_pods(shell: Shell) -> dict[str, str]:
    return {
        p.key: p.status.pod_ip or ""
        for p in shell.session.store.list("Pod")
        if isinstance(p, Pod) and p.metadata.labels.get("app") == "web"
    }


def test_curl_reaches_a_web_pod_which_logs_the_client_it_saw(shell: Shell) -> None:
    before = len(shell.world.access_log)
    code, out, err = shell.run("client", ["curl", "-s", "web"])
    assert (code, err) == (0, b"")
    pod, ip, port = out.decode().split()
    assert pod in _web_pods(shell)
    client_ip = shell.pod("client").ip
    assert ip == client_ip  # pod to ClusterIP: kube-proxy does not masquerade
    [log] = shell.world.access_log[before:]
    assert log.pod == pod
    assert log.text == f'{client_ip}:{port} -> {_web_pods(shell)[pod]}:8080 "GET / HTTP/1.1" 200 {len(out)}'


def test_the_explanation_names_the_service_rule_and_pod(shell: Shell) -> None:
    code, out, err = shell.run("client", ["curl", "-s", "web"], {"SVCLAB_TRACE": "1"})
    assert code == 0
    pod = out.decode().split()[0]
    text = err.decode()
    assert f"* svclab: {_web_ip(shell)}:80 is Service default/web:http\n" in text
    chosen = re.search(r"^\* svclab: chosen by: (.*)$", text, re.M)
    assert chosen is not None and "KUBE-SEP-" in chosen.group(1)
    assert f"default/web:http -> {_web_pods(shell)[pod]}:8080" in chosen.group(1)
    assert f"(pod {pod}, node " in text
    assert "web resolved to " in text and "DNS question udp" in text
    # curl -v says the same, after curl's own lines
    _, _, verr = shell.run("client", ["curl", "-sv", "web"])
    assert verr.index(b"* Closing connection 0") < verr.index(b"* svclab: ")


def test_sh_c_runs_one_command_with_its_assignments(shell: Shell) -> None:
    code, _, err = shell.run("client", ["sh", "-c", "SVCLAB_TRACE=1 curl -s web"])
    assert code == 0 and b"* svclab: chosen by" in err
    code, _, err = shell.run("client", ["sh", "-c", "curl -s web | head -1"])
    assert code == 2 and b"one simple command" in err


def test_an_unknown_command_exits_127(shell: Shell) -> None:
    code, out, err = shell.run("client", ["/usr/bin/tcpdump", "-i", "eth0"])
    assert (code, out) == (127, b"")
    assert err == NOT_FOUND.format(cmd="tcpdump").encode()
    assert err.startswith(b"sh: tcpdump: not found in an emulated pod (svclab: the network tools are curl,")


def test_nslookup_and_getent_answer_the_cluster_ip(shell: Shell) -> None:
    web = _web_ip(shell)
    code, out, _ = shell.run("client", ["nslookup", "web"])
    assert code == 0 and f"Name:\tweb.default.svc.cluster.local\nAddress: {web}\n" in out.decode()
    code, out, _ = shell.run("client", ["getent", "hosts", "web"])
    assert out == f"{web:<15} web.default.svc.cluster.local\n".encode()
    code, out, _ = shell.run("client", ["dig", "+short", "web.default.svc.cluster.local"])
    assert out == f"{web}\n".encode()


def test_ip_neigh_shows_what_the_pod_learned(shell: Shell) -> None:
    shell.run("client", ["curl", "-s", "web"])
    gw = shell.pod("client").ip.rsplit(".", 1)[0] + ".1"
    _, out, _ = shell.run("client", ["ip", "neigh"])
    assert re.search(rf"^{re.escape(gw)} dev eth0 lladdr [0-9a-f:]+ REACHABLE \n", out.decode(), re.M)


def test_a_host_network_pod_prints_its_nodes_rules_and_conntrack(shell: Shell) -> None:
    pod = shell.pod("debugger")
    assert pod.host_network and pod.netns == "node/node-1"
    code, out, _ = shell.run("debugger", ["iptables-save"])
    rules = shell.world.rulesets["node-1"].text  # type: ignore[union-attr]
    assert code == 0 and out.count(b"\n-A ") == rules.count("\n-A ") > 10
    assert out.startswith(b"# Generated by iptables-save v1.8.9 (nf_tables) on ")
    # the form iptables-save prints (svclab rules prints the same)
    assert (
        f'-A KUBE-SERVICES -d {_web_ip(shell)}/32 -p tcp -m comment --comment "default/web:http '
        'cluster IP" -m tcp --dport 80 -j KUBE-SVC-'
    ).encode() in out
    # ClusterFirst on the host network: the node's resolv.conf, which names no server
    code, _, err = shell.run("debugger", ["curl", "-sS", "web"], {"SVCLAB_TRACE": "1"})
    assert code == 6 and b"no nameserver in resolv.conf" in err
    code, out, _ = shell.run("debugger", ["curl", "-s", _web_ip(shell)])
    assert code == 0
    code, out, err = shell.run("debugger", ["conntrack", "-L"])
    assert code == 0 and f"dst={_web_ip(shell)} sport=".encode() in out
    n = out.count(b"\n")
    assert err == f"conntrack v1.4.7 (conntrack-tools): {n} flow entries have been shown.\n".encode()
    _, out, _ = shell.run("debugger", ["hostname"])
    assert out == b"node-1\n"
    _, out, _ = shell.run("debugger", ["cat", "/etc/hosts"])
    assert out.startswith(b"# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n")
    assert out.endswith(f"{pod.ip}\tnode-1\n".encode())


def test_node_tools_are_refused_in_a_pods_namespace(shell: Shell) -> None:
    for argv in (["iptables-save"], ["conntrack", "-L"], ["nft", "list", "ruleset"]):
        code, out, err = shell.run("client", argv)
        assert code == 1 and out == b"" and b"hostNetwork pod" in err


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        (["curl", "-s", "-o", "/tmp/page", "web"], 23, b"no file system"),
        (["ping", "10.244.0.4"], 2, b"give -c COUNT"),
        (["wget", "web"], 1, b"runs as -qO-"),
        (["ip", "addr", "add", "10.0.0.1/24", "dev", "eth0"], 255, b"not emulated"),
        (["cat", "/etc/passwd"], 1, b"/etc/resolv.conf, /etc/hosts"),
        (["dig", "+trace", "web"], 1, b"not emulated"),
    ],
)
def test_what_is_not_emulated_is_refused(shell: Shell, argv: list[str], code: int, words: bytes) -> None:
    got, out, err = shell.run("client", argv)
    assert got == code and words in err and out == b""


def test_hosts_file_with_subdomain_and_aliases() -> None:
    pod = Pod.model_validate(
        {
            "metadata": {"name": "db-0", "namespace": "shop"},
            "spec": {
                "hostname": "db-0",
                "subdomain": "db",
                "hostAliases": [{"ip": "192.0.2.1", "hostnames": ["foo", "bar"]}],
                "containers": [{"name": "db"}],
            },
            "status": {"podIP": "10.244.1.7"},
        }
    )
    text = hosts_file(pod, "cluster.local")
    assert text.endswith(
        "fe00::2\tip6-allrouters\n10.244.1.7\tdb-0.db.shop.svc.cluster.local\tdb-0\n"
        "\n# Entries added by HostAliases.\n192.0.2.1\tfoo\tbar\n"
    )


def test_ipset_list_of_the_recorded_save() -> None:
    """The recorded ``ipset save`` text listed as ``ipset list`` listed it, but for the
    kernel's memory figures (not modelled: 0)."""
    rec = (DATA / "ipset-list-and-save.out").read_text()
    listing, rest = rec.split("===\n")
    save = rest.split("conntrack")[0]
    want = re.sub(r"Size in memory: \d+", "Size in memory: 0", listing)
    assert ipset_list(save) == want


def test_recordings_are_what_the_helper_reads() -> None:
    assert recorded("curl-s").command == "curl -s http://web:8080/"
    assert (ROOT / "tests" / "data" / "podtools" / "record.py").exists()
    assert Path(EXAMPLES[0]).exists()


def test_ipvs_node_tools_list_the_virtual_servers_and_sets(tmp_path: Path) -> None:
    """In IPVS mode a host-network pod's ``ipvsadm -Ln`` lists what kube-proxy loaded
    (read back by svclab's own ``ipvsadm -L -n`` parser, written for pasted listings,
    to the same virtual servers as the ipvsadm-save text), and ``ipset list`` its sets."""
    from dataplane.netfilter.ipvsadm import parse_ipvsadm
    from dataplane.netfilter.ipvslist import parse_ipvsadm_list
    from netmodel.rulesets import IpvsRules

    web = tmp_path / "web.yaml"
    web.write_text(Path(EXAMPLES[0]).read_text().replace("nodes: 3", "nodes: 3\n  proxyMode: ipvs"))
    host = tmp_path / "host.yaml"
    host.write_text(HOST_POD)
    sh = Shell([str(web), *EXAMPLES[1:], str(host)])
    rules = sh.world.rulesets["node-1"]
    assert isinstance(rules, IpvsRules)
    code, out, _ = sh.run("debugger", ["ipvsadm", "-Ln"])
    assert code == 0
    listed = parse_ipvsadm_list(out.decode())
    assert listed == parse_ipvsadm(rules.ipvsadm) and len(listed) > 3
    assert f"TCP  {_web_ip(sh)}:80 rr\n".encode() in out
    code, out, _ = sh.run("debugger", ["ipset", "list"])
    assert code == 0 and b"Name: KUBE-CLUSTER-IP\nType: hash:ip,port\n" in out
    assert f"{_web_ip(sh)},tcp:80".encode() in out


def test_nc_n_takes_addresses_only(shell: Shell) -> None:
    code, _, err = shell.run("client", ["nc", "-nvz", "web", "80"])
    assert code == 1 and err == b'nc: getaddrinfo for host "web" port 80: Name or service not known\n'
    code, _, err = shell.run("client", ["nc", "-nvz", _web_ip(shell), "80"])
    assert code == 0 and err.startswith(f"Connection to {_web_ip(shell)} 80 port [tcp/http] succeeded!".encode())
