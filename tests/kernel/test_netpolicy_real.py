"""NetworkPolicy on real nodes (mark.kernel): ``svclab serve --real`` over two real nodes,
with each node's policy agent (kube-router's layout) loading its rules into the node's
namespace as policies are applied with the real kubectl.

A client pod reaches a Service's backend before any policy; once a default-deny and an
allow-from-``role=client`` policy are applied, the backend's node holds the policy's
chain, the client's real connections through the Service still arrive and another pod's
are refused (kube-router REJECTs); the kernel's counters, read back through the
render's origins (``svclab rules --policy-hits``), name the deciding policy and rule for
each. The policies deleted, the other pod reaches the backend again and the node holds
none of kube-router's chains. The cluster is always torn down, with a leak check.

And the loader alone, in a bare namespace: a second load adds no second jump, a policy
gone takes its chain and sets with it, and "no rules" leaves nothing of kube-router."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from ipaddress import ip_address
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servedreal import SVCLAB, served_real, svclab, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "control" / "apiserver" / "http"))
from serving import Served

from app import real
from dataplane.linux import netns
from dataplane.linux.netns import is_root
from dataplane.linux.policyrules import ipset_names, load_policy
from dataplane.linux.realize import RealCluster
from dataplane.linux.rules import iptables_save
from dataplane.netpol.kuberouter import pod_chain, policy_chain, render_policy
from netmodel.manifests import load_text
from netmodel.netpolicy import PolicyPod, policy_from_wire

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: netpol}
spec: {nodes: 2, dns: false}
"""
APP = """\
apiVersion: v1
kind: Pod
metadata: {name: db, labels: {app: db}}
spec:
  nodeName: node-2
  containers: [{name: db, image: agnhost, ports: [{name: sql, containerPort: 8080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, labels: {role: client}}
spec: {nodeName: node-1, containers: [{name: c, image: agnhost}]}
---
apiVersion: v1
kind: Pod
metadata: {name: other, labels: {role: other}}
spec: {nodeName: node-1, containers: [{name: c, image: agnhost}]}
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec: {selector: {app: db}, ports: [{port: 80, targetPort: 8080}]}
"""
DENY_ALL = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all}
spec: {podSelector: {}, policyTypes: [Ingress]}
"""
ALLOW_CLIENT = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-client}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{podSelector: {matchLabels: {role: client}}}]
    ports: [{port: sql}]
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served_real(tmp_path_factory, "netpol", CLUSTER) as s:
        s.kubectl("apply", "-f", "-", input=APP)
        yield s


def node_filter(srv: Served, node: str) -> str:
    record = real.RealRecord.read(srv.state)
    assert record is not None
    cluster = RealCluster.load(record.cluster_id)
    return iptables_save(cluster.node_netns(node), counters=False, table="filter")


def reaches(srv: Served, src: str) -> bool:
    """One connection from ``src`` to the Service is delivered (False while the pods or
    the rules are not there yet)."""
    out = subprocess.run(
        [SVCLAB, "--state", str(srv.state), "connect", "--real", src, "svc/default/db:80",
         "-n", "1", "-o", "json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if out.returncode != 0:
        return False
    return [c["verdict"] for c in json.loads(out.stdout)["connections"]] == ["delivered"]


def verdicts(srv: Served, src: str, n: int = 3) -> list[str]:
    out = svclab(
        srv.state, "connect", "--real", src, "svc/default/db:80", "-n", str(n), "-o", "json"
    )
    return [c["verdict"] for c in json.loads(out)["connections"]]


def hits(srv: Served, node: str) -> dict[str, int]:
    """``svclab rules --policy-hits``: chain + what the rule stands for -> packets."""
    out: dict[str, int] = {}
    for line in svclab(srv.state, "rules", "--node", node, "--policy-hits").splitlines():
        packets, _bytes, chain, what = line.split(" ", 3)
        out[f"{chain} {what}"] = out.get(f"{chain} {what}", 0) + int(packets)
    return out


def counted(before: dict[str, int], after: dict[str, int]) -> set[str]:
    return {k for k, v in after.items() if v > before.get(k, 0)}


def test_policies_applied_while_served_decide_real_connections_by_the_named_rule(
    srv: Served,
) -> None:
    wait_until("client reaches db", lambda: reaches(srv, "pod/default/client"), 120)
    assert verdicts(srv, "pod/default/other") == ["delivered"] * 3  # no policy yet
    assert "KUBE-ROUTER" not in node_filter(srv, "node-2")
    srv.kubectl("apply", "-f", "-", input=DENY_ALL + "---\n" + ALLOW_CLIENT)
    (doc,) = load_text(ALLOW_CLIENT, source="p.yaml").objects
    chain = policy_chain(policy_from_wire(doc.to_dict()), "ingress")
    wait_until(
        "node-2 holds allow-client's chain", lambda: f":{chain} " in node_filter(srv, "node-2")
    )
    assert f":{pod_chain('default', 'db')} " in node_filter(srv, "node-2")

    before = hits(srv, "node-2")
    assert verdicts(srv, "pod/default/client") == ["delivered"] * 3
    allowed = counted(before, hits(srv, "node-2"))
    assert any(
        k.startswith(chain)
        and "default/allow-client ingress[0].from[0] (podSelector role=client) → ACCEPT" in k
        for k in allowed
    ), allowed

    before = hits(srv, "node-2")
    assert verdicts(srv, "pod/default/other") == ["refused"] * 3  # kube-router REJECTs
    denied = counted(before, hits(srv, "node-2"))
    assert any(
        k.startswith(pod_chain("default", "db")) and "(ingress, no rule matched) → DROP" in k
        for k in denied
    ), denied

    srv.kubectl("delete", "networkpolicy", "deny-all", "allow-client")
    wait_until(
        "node-2 holds no kube-router chain", lambda: "KUBE-ROUTER" not in node_filter(srv, "node-2")
    )
    assert verdicts(srv, "pod/default/other") == ["delivered"] * 3


def _pod(name: str, ip: str, labels: dict[str, str]) -> PolicyPod:
    return PolicyPod("default", name, labels, ip_address(ip), node="node-1")


def test_the_loader_replaces_what_a_sync_no_longer_has() -> None:
    (deny,) = load_text(DENY_ALL, source="d.yaml").objects
    (allow,) = load_text(ALLOW_CLIENT, source="a.yaml").objects
    pols = [policy_from_wire(deny.to_dict()), policy_from_wire(allow.to_dict())]
    pods = [
        _pod("db", "10.244.0.2", {"app": "db"}),
        _pod("client", "10.244.0.3", {"role": "client"}),
    ]
    both = render_policy("node-1", "10.0.0.1", pods, pols, {"default": {}})
    one = render_policy("node-1", "10.0.0.1", pods, pols[:1], {"default": {}})
    allow_chain = policy_chain(pols[1], "ingress")
    with netns.temporary("np") as ns:
        load_policy(ns, both.filter, both.ipsets)
        load_policy(ns, both.filter, both.ipsets)  # a second sync, unchanged
        save = iptables_save(ns, counters=False, table="filter")
        assert save.count("-j KUBE-ROUTER-FORWARD") == 1, "one jump, however many loads"
        assert f":{allow_chain} " in save
        sets = set(ipset_names(ns))
        assert set(both.set_names) <= sets
        gone = load_policy(ns, one.filter, one.ipsets)
        save = iptables_save(ns, counters=False, table="filter")
        assert f":{allow_chain} " not in save  # the policy's chain went with it
        assert set(gone) == set(both.set_names) - set(one.set_names) != set()
        assert set(ipset_names(ns)) == set(one.set_names)
        load_policy(ns, None)
        save = iptables_save(ns, counters=False, table="filter")
        assert "KUBE-" not in save
        assert ipset_names(ns) == []
