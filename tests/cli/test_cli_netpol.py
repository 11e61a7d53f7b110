"""NetworkPolicy is enforced on every emulated walk: ``svclab apply`` stores a policy,
each node's view carries kube-router's rules for it (:mod:`dataplane.netpol`), and
``svclab trace``/``connect`` go through kube-proxy's DNAT and then the destination's
ingress policy. A trace names the deciding policy and rule exactly as
:func:`netmodel.netpolicy.decide` does; a denied connection is refused (REJECT,
icmp-port-unreachable), as the kernel refuses it."""

from __future__ import annotations

import json
from ipaddress import ip_address
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from app.cli.main import cli
from netmodel.netpolicy import PolicyPod, decide, named_ports, policy_from_wire

APP = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: netpol}
spec: {nodes: 2, dns: false, proxyMode: MODE}
---
apiVersion: v1
kind: Namespace
metadata: {name: front, labels: {team: web}}
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  nodeName: node-2
  containers: [{name: c, image: nginx, ports: [{name: http, containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: fe, namespace: front, labels: {app: fe}}
spec:
  nodeName: node-1
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: intruder, namespace: other, labels: {app: x}}
spec:
  nodeName: node-1
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-frontend}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from:
    - podSelector: {matchLabels: {app: nothing}}
    - namespaceSelector: {matchLabels: {team: web}}
    ports: [{port: http}]
"""


def run(state: Path, *args: str) -> Result:
    res = CliRunner().invoke(cli, ["--state", str(state), *args])
    assert res.exit_code == 0, res.output
    return res


def reference(state: Path, src: str, dst: str, port: int) -> str:
    """What :func:`decide` says of ``src`` -> ``dst``:``port`` (pod keys), from the
    manifests and the addresses the cluster gave the pods."""
    docs = list(yaml.safe_load_all(APP))
    ips = {
        f"{r.split()[0]}/{r.split()[1]}": r.split()[6]
        for r in run(state, "get", "pods", "-A", "-o", "wide").output.splitlines()[1:]
    }
    pods = {
        f"{d['metadata'].get('namespace', 'default')}/{d['metadata']['name']}": PolicyPod(
            d["metadata"].get("namespace", "default"),
            d["metadata"]["name"],
            d["metadata"]["labels"],
            ip_address(ips[f"{d['metadata'].get('namespace', 'default')}/{d['metadata']['name']}"]),
            d["spec"]["nodeName"],
            named_ports(d["spec"]["containers"]),
        )
        for d in docs
        if d["kind"] == "Pod"
    }
    policies = [policy_from_wire(d) for d in docs if d["kind"] == "NetworkPolicy"]
    namespaces = {
        d["metadata"]["name"]: d["metadata"].get("labels", {})
        for d in docs
        if d["kind"] == "Namespace"
    }
    return decide(pods[src], pods[dst], "TCP", port, policies, namespaces).deciding.describe()


@pytest.mark.parametrize("mode", ["iptables", "nftables", "ipvs"])
def test_trace_through_a_service_names_the_deciding_policy_rule(tmp_path: Path, mode: str) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(APP.replace("MODE", mode))
    state = tmp_path / "st"
    run(state, "apply", "-f", str(app))

    allowed = json.loads(
        run(
            state, "trace", "--from", "pod/front/fe", "--to", "svc/default/web:80", "-o", "json"
        ).output
    )
    assert allowed["verdict"] == "delivered" and allowed["delivered_to"]["pod"] == "default/web"
    hops = allowed["hops"]
    netpol = [h for h in hops if h["kind"] == "netpol"]
    expected = reference(state, "front/fe", "default/web", 8080)
    assert (
        expected
        == "default/allow-frontend ingress[0].from[1] (namespaceSelector team=web) → ACCEPT"
    )
    assert [h["note"] for h in netpol] == ["not isolated for egress → ACCEPT", expected]
    # the policy sees the packet after kube-proxy's DNAT, on the destination's node
    dnat = next(
        i for i, h in enumerate(hops) if "DNAT" in (h.get("verdict") or "") or h["kind"] == "nat"
    )
    assert dnat < hops.index(netpol[-1]) and netpol[-1]["netns"] == "node/node-2"
    rule_before = hops[hops.index(netpol[-1]) - 1]
    assert rule_before["chain"].startswith("KUBE-NWPLCY-") and rule_before["rule"].endswith(
        "-j MARK --set-xmark 0x10000/0x10000"
    )

    denied_text = run(
        state, "trace", "--from", "pod/other/intruder", "--to", "svc/default/web:80"
    ).output
    assert "=> REJECT (rejected in FORWARD (icmp-port-unreachable))" in denied_text.splitlines()[0]
    expected = reference(state, "other/intruder", "default/web", 8080)
    assert expected == "default/allow-frontend (ingress, no rule matched) → DROP"
    lines = [ln for ln in denied_text.splitlines() if "  netpol  " in ln]
    assert lines[-1].split("netpol", 1)[1].strip() == expected
    assert "-j REJECT --reject-with icmp-port-unreachable" in denied_text

    # connect: the allowed client reaches web every time, the other is refused every time
    ok = json.loads(
        run(state, "connect", "pod/front/fe", "svc/default/web:80", "-n", "4", "-o", "json").output
    )
    refused = json.loads(
        run(
            state, "connect", "pod/other/intruder", "svc/default/web:80", "-n", "4", "-o", "json"
        ).output
    )
    assert {c["verdict"] for c in ok["connections"]} == {"delivered"}
    assert {c["verdict"] for c in refused["connections"]} == {"REJECT"}


def test_without_a_policy_nothing_of_kube_router_is_in_the_walk(tmp_path: Path) -> None:
    app = tmp_path / "app.yaml"
    app.write_text(
        APP.replace("MODE", "iptables").split("---\napiVersion: networking.k8s.io/v1")[0]
    )
    state = tmp_path / "st"
    run(state, "apply", "-f", str(app))
    out = run(state, "trace", "--from", "pod/other/intruder", "--to", "svc/default/web:80").output
    assert (
        "=> delivered" in out.splitlines()[0] and "KUBE-ROUTER" not in out and "netpol" not in out
    )
