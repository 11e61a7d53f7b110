"""Cluster DNS is on by default, as kubeadm installs it: the shipped examples, which set
nothing about DNS, answer ``svclab dig`` from a pod with the Service's ClusterIP, and
``dns: false`` gives a cluster without it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from app.cli.main import cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(state: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--state", str(state), *args])


def test_the_examples_answer_dig_with_the_cluster_ip(tmp_path: Path) -> None:
    state = tmp_path / "s"
    assert "dns:" not in "".join(p.read_text() for p in EXAMPLES.glob("*.yaml"))
    res = run(state, "apply", "-f", str(EXAMPLES))
    assert res.exit_code == 0, res.output
    web_ip = json.loads(run(state, "get", "svc", "web", "-o", "json").output)["spec"]["clusterIP"]
    res = run(state, "get", "svc", "kube-dns", "-n", "kube-system", "-o", "json")
    assert res.exit_code == 0, res.output
    dns = json.loads(res.output)
    assert dns["spec"]["clusterIP"] == "10.96.0.10"
    res = run(state, "dig", "pod/default/client", "web", "--search")
    assert res.exit_code == 0, res.output
    assert "status: NOERROR" in res.output
    assert f"web.default.svc.cluster.local.\t\t30\tIN\tA\t{web_ip}\n" in res.output
    assert ";; SERVER: 10.96.0.10#53(10.96.0.10) (UDP)" in res.output
    assert ";; ANSWERED BY: pod/kube-system/coredns-" in res.output


def test_dns_false_makes_a_cluster_without_it(tmp_path: Path) -> None:
    state = tmp_path / "s"
    text = (EXAMPLES / "web.yaml").read_text().replace("nodes: 3", "nodes: 3\n  dns: false")
    (tmp_path / "web.yaml").write_text(text)
    res = run(state, "apply", "-f", str(tmp_path / "web.yaml"), "-f", str(EXAMPLES / "pods.yaml"))
    assert res.exit_code == 0, res.output
    res = run(state, "get", "svc", "-A")
    assert "kube-dns" not in res.output and "kubernetes" in res.output
    assert "coredns" not in run(state, "get", "pods", "-A").output
    # the client's resolv.conf names no nameserver: refused as the other forms are, not
    # an empty answer with exit 0
    for args in (("web", "--search"), ("web.default.svc.cluster.local",)):
        res = run(state, "dig", "pod/default/client", *args)
        assert res.exit_code == 1, res.output
        assert res.output.strip().endswith(
            "pod/default/client: its resolv.conf has no nameserver"
        ), res.output
