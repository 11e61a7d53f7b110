"""A pod's ``hostPort`` is served on its node's address through the CNI ``portmap``
plugin's rules (:mod:`netmodel.hostports`): a trace from outside the cluster to
``nodeIP:hostPort`` is DNATed by the pod's ``CNI-DN-…`` chain to ``podIP:containerPort``
and delivered to the pod; the other node, which has no such pod, refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli.main import cli

APP = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: hostport}
spec: {nodes: 2, dns: false, proxyMode: MODE}
---
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  nodeName: node-2
  containers: [{name: c, image: nginx, ports: [{containerPort: 8080, hostPort: 30080}]}]
"""


def run(state: Path, *args: str) -> Result:
    res = CliRunner().invoke(cli, ["--state", str(state), *args])
    assert res.exit_code == 0, res.output
    return res


def _wide(state: Path, kind: str) -> dict[str, list[str]]:
    rows = run(state, "get", kind, "-o", "wide").output.splitlines()[1:]
    return {r.split()[0]: r.split() for r in rows}


@pytest.mark.parametrize("mode", ["iptables", "nftables", "ipvs"])
def test_trace_to_node_host_port_reaches_the_pod(tmp_path: Path, mode: str) -> None:
    """In every kube-proxy mode: the plugin's iptables rules sit beside kube-proxy's
    (in its nat table, beside its nft ruleset, in IPVS mode's iptables glue)."""
    app = tmp_path / "app.yaml"
    app.write_text(APP.replace("MODE", mode))
    state = tmp_path / "st"
    run(state, "apply", "-f", str(app))
    pod_ip = _wide(state, "pods")["web"][5]
    nodes = _wide(state, "nodes")
    node2, node1 = nodes["node-2"][5], nodes["node-1"][5]
    out = run(state, "trace", "--from", "203.0.113.7", "--to", f"{node2}:30080").output
    head = out.splitlines()[:2]
    assert "=> delivered (SYN-ACK)" in head[0], out
    assert f"delivered to {pod_ip}:8080 (pod default/web, node node-2)" in head[1], out
    assert "-j CNI-HOSTPORT-DNAT" in out
    assert f"-j DNAT --to-destination {pod_ip}:8080" in out and "nat/CNI-DN-" in out
    # node-1 carries no pod with that hostPort: nothing listens there
    other = run(state, "trace", "--from", "203.0.113.7", "--to", f"{node1}:30080").output
    assert "no listener on tcp/30080" in other.splitlines()[0], other
    assert "CNI-DN-" not in other


def test_host_ip_limits_the_host_port_to_that_address(tmp_path: Path) -> None:
    """``ports[].hostIP`` is passed to the plugin, whose DNAT then also matches
    ``-d hostIP/32``: the node's address serves the port only when it is that one."""
    node2 = "172.18.0.3"  # node-2's address in a 2-node cluster (checked below)
    for host_ip, served in ((node2, True), ("172.18.0.99", False)):
        state = tmp_path / f"st-{host_ip}"  # a pod's ports cannot change: a cluster each
        app = tmp_path / "app.yaml"
        app.write_text(
            APP.replace("MODE", "iptables").replace(
                "hostPort: 30080}", f"hostPort: 30080, hostIP: {host_ip}}}"
            )
        )
        run(state, "apply", "-f", str(app))
        assert _wide(state, "nodes")["node-2"][5] == node2
        out = run(state, "trace", "--from", "203.0.113.7", "--to", f"{node2}:30080").output
        if served:
            assert "=> delivered (SYN-ACK)" in out.splitlines()[0], out
            assert f"-d {node2}/32 -p tcp -m tcp --dport 30080 -j DNAT" in out
        else:
            assert "no listener on tcp/30080" in out.splitlines()[0], out
