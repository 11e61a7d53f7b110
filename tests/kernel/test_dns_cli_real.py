"""``svclab dig --real`` and names as destinations of ``connect --real``: the question
from the real pod's namespace, the name resolved by the pod's own libc. Every option of
``dig`` with ``--real`` is evaluated, never dropped: ``--server`` with and without
``--search``, the TYPE with ``--search``, ``--hops`` (the conntrack entries of each
question), ``--tcp``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from app import real
from app.cli.main import cli
from control.session import Session
from dataplane.linux.netns import is_root
from dataplane.linux.testing import leftovers
from netmodel.objects import Pod

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 2, dns: true}
---
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec: {containers: [{name: web, image: nginx, ports: [{containerPort: 80}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec: {containers: [{name: c, image: busybox}]}
"""


def test_dig_and_connect_by_name_on_the_kernel(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(MANIFEST)
    runner = CliRunner()
    r = runner.invoke(
        cli,
        [
            "dig",
            "pod/client",
            "web.default.svc.cluster.local",
            "-o",
            "json",
            "--real",
            "-f",
            str(f),
        ],
    )
    assert r.exit_code == 0, r.output
    j = json.loads(r.stdout)
    assert j["status"] == "NOERROR" and j["answer"][0].startswith(
        "web.default.svc.cluster.local. 30 IN A "
    )
    assert j["server_pod"].startswith("kube-system/coredns-")
    r = runner.invoke(
        cli,
        [
            "connect",
            "pod/default/client",
            "web:80",
            "-n",
            "2",
            "-o",
            "json",
            "--real",
            "-f",
            str(f),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "web resolved to " in r.stderr
    conns = json.loads(r.stdout)["connections"]
    assert [c["pod"] for c in conns] == ["default/web", "default/web"]
    r = runner.invoke(
        cli, ["connect", "pod/default/client", "nope:80", "-n", "1", "--real", "-f", str(f)]
    )
    assert r.exit_code == 1 and "cannot resolve 'nope'" in r.stderr


D = "cluster.local"


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A state dir with the cluster applied and realised (``up --real``); the real cluster
    is always removed."""
    tmp = tmp_path_factory.mktemp("digreal")
    f = tmp / "m.yaml"
    f.write_text(MANIFEST)
    d = tmp / "state"
    assert dig_cli(d, "apply", "-f", str(f))[0] == 0
    try:
        code, out, err = dig_cli(d, "up", "--real")
        assert code == 0, out + err
        yield d
    finally:
        record = real.RealRecord.read(d)
        real.down(d)
        if record is not None:
            assert leftovers(record.cluster_id) == []


def dig_cli(state: Path, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["--state", str(state), *args])
    return r.exit_code, r.stdout, r.stderr


def _dns_pod(state: Path) -> tuple[str, str]:
    s = Session.open(state)
    try:
        pods = sorted(
            (p.key, str(p.status.pod_ip))
            for p in s.store.list("Pod")
            if isinstance(p, Pod) and p.namespace == "kube-system"
        )
    finally:
        s.close()
    return pods[0]


def test_real_dig_search_asks_the_server_given(state: Path) -> None:
    """``--real --search --server IP``: every name of the search list asked of IP (a DNS
    pod's own address: that pod answers, no DNAT in the conntrack entries); an address
    where nothing listens gets no answer (exit 9)."""
    pod, ip = _dns_pod(state)
    args = ["dig", "--real", "pod/client", "web.default", "--search", "-o", "json", "--hops"]
    code, out, err = dig_cli(state, *args, "--server", ip)
    assert code == 0, out + err
    j = json.loads(out)
    assert j["status"] == "ok" and j["addresses"] and j["answered_name"] == f"web.default.svc.{D}."
    assert [q["server"] for q in j["queries"]] == [ip, ip]
    assert {q["server_pod"] for q in j["queries"]} == {pod}
    conntrack = [c for q in j["queries"] for c in q["conntrack"]]
    assert conntrack and all(f"dst={ip} " in c and "10.96.0.10" not in c for c in conntrack)
    code, out, _ = dig_cli(state, *args)  # the pod's nameserver: DNATed from the ClusterIP
    conntrack = [c for q in json.loads(out)["queries"] for c in q["conntrack"]]
    assert code == 0 and conntrack and all("dst=10.96.0.10 " in c for c in conntrack)
    code, out, _ = dig_cli(
        state, "dig", "--real", "pod/client", "web", "--search", "--server", "192.0.2.53"
    )
    assert code == 9 and ";; communications error to 192.0.2.53#53" in out


def test_real_dig_server_without_search(state: Path) -> None:
    pod, ip = _dns_pod(state)
    code, out, _ = dig_cli(
        state, "dig", "--real", "pod/client", f"web.default.svc.{D}", "--server", ip
    )
    assert code == 0 and f";; SERVER: {ip}#53({ip}) (UDP)" in out
    assert f";; ANSWERED BY: pod/{pod}" in out


def test_real_dig_search_asks_the_type_given(state: Path) -> None:
    code, out, err = dig_cli(
        state, "dig", "--real", "pod/client", "_http._tcp.web", "SRV", "--search", "-o", "json"
    )
    assert code == 0, out + err
    j = json.loads(out)
    assert j["status"] == "ok" and j["qtype"] == "SRV"
    assert [q["qtype"] for q in j["queries"]] == ["SRV"]
    assert j["queries"][0]["answer"] == [
        f"_http._tcp.web.default.svc.{D}. 30 IN SRV 0 100 80 web.default.svc.{D}."
    ]
    code, out, _ = dig_cli(state, "dig", "--real", "pod/client", "web", "AAAA", "--search")
    assert code == 0 and out.count("; <<>> svclab dig <<>> @10.96.0.10 ") == 4
    assert f"web.default.svc.{D}. AAAA" in out and "status: NOERROR" in out


def test_real_dig_hops_are_the_conntrack_entries(state: Path) -> None:
    """``--real --hops``: what the kernel kept of the question, on the node of the client
    (the DNAT from kube-dns's ClusterIP to the DNS pod that answered)."""
    name = f"web.default.svc.{D}"
    code, plain, _ = dig_cli(state, "dig", "--real", "pod/client", name)
    assert code == 0 and ";; CONNTRACK:" not in plain
    code, out, _ = dig_cli(state, "dig", "--real", "pod/client", name, "--hops")
    assert code == 0
    lines = [x for x in out.splitlines() if x.startswith(";; CONNTRACK: node-")]
    answered = [x for x in out.splitlines() if x.startswith(";; ANSWERED BY: pod/")]
    assert lines and answered
    pod = answered[0].split("pod/", 1)[1]
    s = Session.open(state)
    try:
        pod_ip = str(s.store.get("Pod", pod).status.pod_ip)  # type: ignore[attr-defined]
    finally:
        s.close()
    assert any("udp" in x and "dst=10.96.0.10 " in x and f"src={pod_ip} " in x for x in lines)
    code, out, _ = dig_cli(state, "dig", "--real", "pod/client", name, "--hops", "-o", "json")
    assert code == 0 and json.loads(out)["conntrack"]
    code, out, _ = dig_cli(state, "dig", "--real", "pod/client", name, "-o", "json")
    assert code == 0 and "conntrack" not in json.loads(out)


def test_real_dig_tcp(state: Path) -> None:
    code, out, _ = dig_cli(
        state, "dig", "--real", "pod/client", f"web.default.svc.{D}", "--tcp", "--hops"
    )
    assert code == 0 and "(TCP)" in out
    assert any(" tcp " in x for x in out.splitlines() if x.startswith(";; CONNTRACK:"))
    code, _, err = dig_cli(state, "dig", "--real", "pod/client", "web", "--tcp", "--search")
    assert code == 2 and "drop --tcp" in err
