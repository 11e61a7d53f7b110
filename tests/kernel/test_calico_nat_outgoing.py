"""Calico's ``natOutgoing`` on the kernel and in the emulator, compared flow by flow.

A two-node ``cni: calico`` cluster whose pool has natOutgoing (or not) is realised with
Felix's ``cali-nat-outgoing`` chain and its two ipsets loaded beside kube-proxy's rules
(iptables mode on iptables-nft and iptables-legacy; nftables mode, where Felix's tables
sit in iptables-nft beside kube-proxy's ``ip kube-proxy`` table). For each flow both
backends must agree on what happened and on the source address the other side saw: a
pod pinging another node's address or an external host is seen as its node's address
with natOutgoing and as itself without (and the external host, which has no route to
the pods, then cannot answer); its own node, and pods anywhere, always see the pod.
The cluster's namespaces are this test's own and are always removed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from app import emulation
from control.session import Session
from dataplane.backends import EmulatorBackend, RealBackend, emulator_backend, real_backend
from dataplane.backends.realise import kernel_holds
from dataplane.linux.conntrack import parse_line
from dataplane.linux.netns import is_root, run_in
from netmodel.manifests import load_text
from netmodel.objects import Pod, Service
from netmodel.rulesets import IptablesRules

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

EXT = "203.0.113.9"
NODE1, NODE2 = "172.18.0.2", "172.18.0.3"

SCENARIO = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: calico-nat}}
spec:
  nodes: 2
  cni: calico
  proxyMode: {mode}
  calico:
    ipPools: [{{cidr: 10.244.0.0/16, natOutgoing: {nat}}}]
    blockSize: 28
    blockAffinities:
    - {{node: node-1, cidr: 10.244.0.0/28}}
    - {{node: node-2, cidr: 10.244.1.0/28}}
---
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  nodeName: node-1
  containers: [{{name: c, image: x}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web, labels: {{app: web}}}}
spec:
  nodeName: node-2
  containers: [{{name: c, image: x, ports: [{{containerPort: 8080}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080}}]
"""

#: (natOutgoing, kube-proxy mode, iptables back end)
SETUPS = [(True, "iptables", "nft"), (True, "iptables", "legacy"), (False, "iptables", "nft"),
          (True, "nftables", "nft")]


@dataclass
class Pair:
    emu: EmulatorBackend
    real: RealBackend
    nat: bool
    client: str  # the client pod's address
    web: str
    vip: str  # default/web's ClusterIP


@pytest.fixture(scope="module", params=SETUPS, ids=[f"nat{n}-{m}-{b}" for n, m, b in SETUPS])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    nat, mode, backend = request.param
    text = SCENARIO.format(nat="true" if nat else "false", mode=mode)
    session = Session.ephemeral(load_text(text, source="calico-nat"))
    pods = {p.name: p for p in session.store.list("Pod") if isinstance(p, Pod)}
    [vip] = [s.spec.cluster_ip for s in session.store.list("Service")
             if isinstance(s, Service) and s.name == "web"]
    view = emulation.view(session, external_clients=[EXT])
    with emulator_backend(view, seed=4) as emu, real_backend(view, iptables_backend=backend) as real:
        yield Pair(emu, real, nat, str(pods["client"].status.pod_ip),
                   str(pods["web"].status.pod_ip), str(vip))


def icmp_seen(
    backend: EmulatorBackend | RealBackend, node: str, dst: str, src: str | None = None
) -> set[tuple[str, str]]:
    """(orig src, reply dst) of each ICMP echo to ``dst`` that ``node`` tracks (from
    ``src`` only, if given: the readiness checks' own pings are left out); the reply
    tuple's destination is the source the far side saw."""
    out = set()
    for line in backend.conntrack(node):
        e = parse_line(line)
        if e.proto != "icmp" or e.field("orig", "dst") != dst:
            continue
        if src is None or e.field("orig", "src") == src:
            out.add((e.field("orig", "src") or "", e.field("reply", "dst") or ""))
    return out


def test_the_kernel_holds_felixs_chain_and_sets(pair: Pair) -> None:
    netns = pair.real.cluster.node_netns("node-1")
    backend = pair.real.cluster.iptables_backend
    save = run_in(netns, [f"iptables-{backend}-save", "-t", "nat"]).stdout
    has_rule = "-j cali-nat-outgoing" in save
    assert has_rule is pair.nat
    if pair.nat:
        members = run_in(netns, ["ipset", "list", "cali40masq-ipam-pools"]).stdout
        assert "10.244.0.0/16" in members.split("Members:")[1]
    rules = pair.real.view.rulesets["node-1"]
    if isinstance(rules, IptablesRules):  # realising again would touch nothing
        assert kernel_holds(netns, rules.text, backend)


def test_a_pod_pinging_another_node_is_seen_as_its_node_with_nat_outgoing(pair: Pair) -> None:
    e = pair.emu.ping("pod/default/client", NODE2, 1)
    r = pair.real.ping("pod/default/client", NODE2, 1)
    assert e == r and e[0].ok
    want = {(pair.client, NODE1 if pair.nat else pair.client)}
    c = pair.client
    assert icmp_seen(pair.emu, "node-1", NODE2, c) == icmp_seen(pair.real, "node-1", NODE2, c) == want
    # node-2 itself sees the pod's address only without natOutgoing
    for b in (pair.emu, pair.real):
        assert bool(icmp_seen(b, "node-2", NODE2, c)) is not pair.nat


def test_its_own_node_sees_the_pod(pair: Pair) -> None:
    e = pair.emu.ping("pod/default/client", NODE1, 1)
    r = pair.real.ping("pod/default/client", NODE1, 1)
    assert e == r and e[0].ok
    c = pair.client
    assert icmp_seen(pair.emu, "node-1", NODE1, c) == icmp_seen(pair.real, "node-1", NODE1, c) == {
        (pair.client, pair.client)  # delivered locally: no POSTROUTING, no masquerade
    }


def test_an_external_host_is_reached_from_the_nodes_address_only_with_nat_outgoing(
    pair: Pair,
) -> None:
    e = pair.emu.ping("pod/default/client", EXT, 1)
    r = pair.real.ping("pod/default/client", EXT, 1)
    assert e == r
    assert e[0].ok is pair.nat  # without it the reply to a pod address has no route
    want = {(pair.client, NODE1 if pair.nat else pair.client)}
    c = pair.client
    assert icmp_seen(pair.emu, "node-1", EXT, c) == icmp_seen(pair.real, "node-1", EXT, c) == want


def test_pods_and_services_still_see_the_pod(pair: Pair) -> None:
    for dst, port in [(pair.web, 8080), (pair.vip, 80)]:
        e = pair.emu.connect("pod/default/client", dst, port, "tcp", 2)
        r = pair.real.connect("pod/default/client", dst, port, "tcp", 2,
                              sports=[o.sport or 0 for o in e])
        assert [o.key() for o in e] == [o.key() for o in r]
        assert all(o.verdict == "delivered" and o.source_seen == pair.client for o in e)
