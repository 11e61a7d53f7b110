"""hostPort on the real backend's realize path (mark.kernel): ``real_backend`` (what
``svclab --real`` and the labs use) hands each pod's ``hostPort`` mappings to the real CNI
``portmap`` plugin, which writes the nat rules itself; kube-proxy's rules are loaded and
reloaded around them without touching them (as kube-proxy's ``iptables-restore
--noflush`` does on a node); the sandbox's container id is the emulator's, so each
node's nat table in the kernel is the emulator's, chain names included; and hostPort
flows (from outside, from another node's pod, hairpinned from the same node, over UDP,
to a node without the pod) have the same outcome on both backends.

The cluster: a DaemonSet ``agent`` with two hostPorts (TCP 30080, UDP 30053) on node-1
and node-2 (not node-3, by node affinity), and a pod ``aa-extra`` with hostPort 30090
on node-1, so node-1's plugin rules hold two pods in ADD order."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import emulation
from control.session import Session
from dataplane.backends import Proto, emulator_backend, real_backend
from dataplane.backends.realise import load_rules, realize_view
from dataplane.linux import rules as linux_rules
from dataplane.linux.netns import is_root
from dataplane.linux.realize import RealCluster
from dataplane.linux.testing import leftovers, realized, unique_cluster_id
from dataplane.proxy.normalize import BUILTIN_CHAINS, parse_tables
from dataplane.proxy.savefmt import save_form
from netmodel.hostports import DNAT_CHAIN, NETWORK, container_id, dn_chain
from netmodel.manifests import load_text
from netmodel.objects import Node, Pod
from netmodel.rulesets import IptablesRules, NftRules
from netmodel.view import ClusterView

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

EXT = "203.0.113.23"
PORTMAP = ("CNI-HOSTPORT-", "CNI-DN-")

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: hostreal}
spec: {nodes: 3, dns: false, proxyMode: MODE}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions: [{key: kubernetes.io/hostname, operator: NotIn, values: [node-3]}]
      containers:
      - name: agent
        image: node-exporter
        ports:
        - {containerPort: 8080, hostPort: 30080}
        - {containerPort: 9053, hostPort: 30053, protocol: UDP}
---
apiVersion: v1
kind: Pod
metadata: {name: aa-extra}
spec:
  nodeName: node-1
  containers: [{name: c, image: x, ports: [{containerPort: 8090, hostPort: 30090}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: client-1}
spec: {nodeName: node-1, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client-2}
spec: {nodeName: node-2, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client-3}
spec: {nodeName: node-3, containers: [{name: c, image: x}]}
"""

MORE = """
apiVersion: v1
kind: Service
metadata: {name: agent}
spec:
  selector: {app: agent}
  ports: [{port: 80, targetPort: 8080}]
"""


def _session(mode: str) -> Session:
    return Session.ephemeral(load_text(MANIFEST.replace("MODE", mode), source="hostreal"))


def _ip(session: Session, kind: str, name: str) -> str:
    o = session.store.get(kind, name)
    if isinstance(o, Node):
        return o.internal_ips[0]
    assert isinstance(o, Pod) and o.status.pod_ip
    return o.status.pod_ip


def _agents(session: Session) -> dict[str, str]:
    """node -> the key of its agent pod."""
    return {
        p.spec.node_name or "": p.key
        for p in session.store.list("Pod")
        if isinstance(p, Pod) and p.labels.get("app") == "agent"
    }


def _canon(rule: str) -> str:
    """A rule in ``iptables-save``'s form where :func:`save_form` knows its matches
    (kube-proxy's, written in its own option order); the portmap plugin's rules (``-m
    multiport``, beyond it) are in that form already in the view."""
    try:
        return save_form(rule)
    except ValueError:
        return rule


def _nat(text: str, *, canon: bool = False) -> dict[str, list[str]]:
    """The nat table's chains and rules (empty built-in chains left out: an nftables-mode
    node without hostPorts has no iptables nat table in the view, and one with its empty
    built-in chains, or none, in the kernel)."""
    table = parse_tables(text).get("nat")
    if table is None:
        return {}
    return {
        c: [_canon(r) if canon else r for r in rs]
        for c, rs in table.rules.items()
        if rs or c not in BUILTIN_CHAINS
    }


def _nat_text(view: ClusterView, node: str) -> str:
    rs = view.rulesets[node]
    if isinstance(rs, IptablesRules):
        return rs.text
    assert isinstance(rs, NftRules)
    return rs.iptables


def _dn_counters(cluster: RealCluster, node: str) -> dict[tuple[str, str], int]:
    """(chain, rule) -> packets of the portmap plugin's CNI-DN-* and CNI-HOSTPORT-DNAT
    rules on ``node``."""
    return {
        (r.chain, r.rule): r.packets
        for r in linux_rules.rule_counters(
            cluster.node_netns(node), table="nat", backend=cluster.iptables_backend
        )
        if r.chain.startswith("CNI-DN-") or r.chain == DNAT_CHAIN
    }


@pytest.mark.parametrize(
    ("mode", "backend"), [("iptables", "nft"), ("nftables", "nft"), ("iptables", "legacy")]
)
def test_host_ports_through_the_real_plugin_agree_with_the_emulator(
    mode: str, backend: linux_rules.IptablesBackend
) -> None:
    session = _session(mode)
    view = emulation.view(session, external_clients=[EXT])
    agents = _agents(session)
    assert sorted(agents) == ["node-1", "node-2"]
    n1, n2, n3 = (_ip(session, "Node", f"node-{i}") for i in (1, 2, 3))
    cid = unique_cluster_id("hp")
    try:
        with (
            emulator_backend(view, seed=3) as emu,
            real_backend(view, cluster_id=cid, iptables_backend=backend) as real,
        ):
            cluster = real.cluster
            # the plugin's ADD wrote the rules, under the emulator's container id
            for node in ("node-1", "node-2", "node-3"):
                kernel = linux_rules.iptables_save(
                    cluster.node_netns(node), counters=False, table="nat", backend=backend
                )
                wanted = _nat(_nat_text(view, node), canon=True)
                assert _nat(kernel) == wanted, f"{node}: kernel nat table != emulator's"
            if backend == "legacy":  # the plugin used the cluster's back end, not nft's
                for node in ("node-1", "node-2"):
                    nft_side = linux_rules.iptables_save(
                        cluster.node_netns(node), counters=False, table="nat"
                    )
                    assert "CNI-" not in nft_side, f"{node}: portmap wrote to iptables-nft"
            chain = dn_chain(NETWORK, container_id(agents["node-1"]))
            assert chain in _nat(_nat_text(view, "node-1"))
            dnat = _nat(_nat_text(view, "node-1"))[DNAT_CHAIN]
            assert "aa-extra" not in dnat[0] and container_id("default/aa-extra") in dnat[0]

            flows: list[tuple[str, str, int, Proto, str | None, bool | None]] = [
                (f"ext/{EXT}", n1, 30080, "tcp", agents["node-1"], False),
                (f"ext/{EXT}", n2, 30053, "udp", agents["node-2"], False),
                (f"ext/{EXT}", n1, 30090, "tcp", "default/aa-extra", False),
                ("pod/default/client-2", n1, 30080, "tcp", agents["node-1"], False),
                ("pod/default/client-3", n2, 30053, "udp", agents["node-2"], False),
                ("pod/default/client-1", n1, 30080, "tcp", agents["node-1"], True),  # hairpin
                ("pod/default/client-2", n2, 30053, "udp", agents["node-2"], True),  # hairpin
                ("node/node-3", n2, 30080, "tcp", agents["node-2"], False),
                (f"ext/{EXT}", n3, 30080, "tcp", None, None),  # node-3 has no agent
                (f"ext/{EXT}", n2, 30090, "tcp", None, None),  # only node-1 maps 30090
            ]
            for src, dst, port, proto, pod, masq in flows:
                [e] = emu.connect(src, dst, port, proto, 1)
                [r] = real.connect(src, dst, port, proto, 1, sports=[e.sport or 0])
                where = f"{src} -> {dst}:{port}/{proto}"
                assert e.key() == r.key(), f"{where}: emulator {e} vs kernel {r}"
                if pod is None:
                    assert e.verdict != "delivered", where
                else:
                    assert (e.verdict, e.pod, e.masquerade) == ("delivered", pod, masq), where

            # kube-proxy's rules change (a Service is added) and are loaded again: the
            # plugin's rules are kept as they are, counters and all (rewritten, they
            # would start from zero)
            before = _dn_counters(cluster, "node-1")
            agent1 = _ip(session, "Pod", agents["node-1"])
            rule = f"-A {chain} -p tcp -m tcp --dport 30080 -j DNAT --to-destination {agent1}:8080"
            assert before[(chain, rule)] >= 3  # the three connections to node-1:30080
            session.apply(load_text(MORE, source="more"))
            view2 = emulation.view(session, external_clients=[EXT])
            assert view2.rulesets["node-1"] != view.rulesets["node-1"]
            load_rules(cluster, view2)
            if mode == "iptables":
                save = linux_rules.iptables_save(
                    cluster.node_netns("node-1"), counters=False, table="nat", backend=backend
                )
                assert "default/agent" in save, "the new Service's rules were not loaded"
            assert _dn_counters(cluster, "node-1") == before
            for node in ("node-1", "node-2", "node-3"):
                kernel = linux_rules.iptables_save(
                    cluster.node_netns(node), counters=False, table="nat", backend=backend
                )
                assert _nat(kernel) == _nat(_nat_text(view2, node), canon=True), node
    finally:
        assert leftovers(cid) == []


def _portmap_part(text: str) -> dict[str, list[str]]:
    """The portmap plugin's chains and the jumps to them of a nat table."""
    return {
        c: [r for r in rs if linux_rules.foreign_rule(r, PORTMAP)]
        for c, rs in _nat(text).items()
        if c.startswith(PORTMAP) or any(linux_rules.foreign_rule(r, PORTMAP) for r in rs)
    }


def test_the_plugin_writes_the_rules_before_any_rule_is_loaded() -> None:
    """Realising the network alone (the kubelet's part: CNI ADD, no kube-proxy rules
    loaded) leaves each node with the plugin's part of the emulator's nat table, so no
    one but the plugin wrote it."""
    session = _session("iptables")
    view = emulation.view(session)
    with realized(view.network, port_mappings=view.port_mappings) as cluster:
        for node in ("node-1", "node-2", "node-3"):
            kernel = linux_rules.iptables_save(
                cluster.node_netns(node), counters=False, table="nat"
            )
            assert "KUBE-" not in kernel
            assert _portmap_part(kernel) == _portmap_part(_nat_text(view, node)), node
        assert _portmap_part(_nat_text(view, "node-1"))  # not vacuous


def test_a_deleted_host_port_pod_takes_its_rules_with_it() -> None:
    """Realising a view without a hostPort pod runs the plugin's DEL for it: its
    ``CNI-DN-…`` chain and its ``CNI-HOSTPORT-DNAT`` rule leave the node; the other
    pod's stay; the node's nat table is again the emulator's."""
    session = _session("iptables")
    view = emulation.view(session)
    cid = unique_cluster_id("hp")
    try:
        with real_backend(view, cluster_id=cid) as real:
            netns = real.cluster.node_netns("node-1")
            gone = dn_chain(NETWORK, container_id("default/aa-extra"))
            assert gone in linux_rules.iptables_save(netns, counters=False, table="nat")
            session.plane.apiserver.delete("Pod", "default/aa-extra", force=True)
            view2 = emulation.view(session)
            assert "default/aa-extra" not in view2.port_mappings
            realize_view(view2, cluster_id=cid)
            kernel = linux_rules.iptables_save(netns, counters=False, table="nat")
            assert gone not in kernel
            assert _nat(kernel) == _nat(_nat_text(view2, "node-1"), canon=True)
    finally:
        assert leftovers(cid) == []


def test_owned_restore_input_leaves_the_plugins_rules_alone() -> None:
    """Pure: the restore input that reloads our rules never names a foreign chain nor a
    rule jumping to one, inserts ours before the plugin's jumps in the built-in chains,
    and is empty when the tables already hold the text."""
    save = "\n".join(
        [
            "*nat",
            ":PREROUTING ACCEPT [0:0]",
            ":POSTROUTING ACCEPT [0:0]",
            ":CNI-HOSTPORT-DNAT - [0:0]",
            ":KUBE-OLD - [0:0]",
            ":KUBE-SERVICES - [0:0]",
            "-A PREROUTING -j KUBE-OLD",
            "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
            "-A CNI-HOSTPORT-DNAT -p tcp -j ACCEPT",
            "-A KUBE-OLD -j RETURN",
            "COMMIT",
        ]
    )
    text = "\n".join(
        [
            "*nat",
            ":PREROUTING ACCEPT [0:0]",
            ":KUBE-SERVICES - [0:0]",
            ":CNI-HOSTPORT-DNAT - [0:0]",
            "-A PREROUTING -j KUBE-SERVICES",
            "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
            "-A KUBE-SERVICES -j RETURN",
            "-A CNI-HOSTPORT-DNAT -p tcp -j ACCEPT",
            "COMMIT",
        ]
    )
    foreign = ("CNI-HOSTPORT-", "CNI-DN-")
    got = linux_rules.owned_restore_input(save, text, foreign)
    assert "CNI-" not in got, got
    assert got.splitlines() == [
        "*nat",
        ":KUBE-SERVICES - [0:0]",
        ":KUBE-OLD - [0:0]",
        "-D PREROUTING 1",
        "-I PREROUTING 1 -j KUBE-SERVICES",
        "-A KUBE-SERVICES -j RETURN",
        "-X KUBE-OLD",
        "COMMIT",
    ]
    held = save.replace("-A PREROUTING -j KUBE-OLD", "-A PREROUTING -j KUBE-SERVICES")
    held = held.replace(":KUBE-OLD - [0:0]\n", "").replace("-A KUBE-OLD -j RETURN", "")
    held = held.replace("COMMIT", "-A KUBE-SERVICES -j RETURN\nCOMMIT")
    assert linux_rules.owned_restore_input(held, text, foreign) == ""
    # without the plugin's prefixes its chain would be rewritten too
    assert "CNI-HOSTPORT-DNAT" in linux_rules.owned_restore_input(save, text + "\n", ())


def test_realize_path_passes_mappings_in_the_emulators_order(tmp_path: Path) -> None:
    """Pure: the view names each hostPort pod's mappings in store order, and the attach
    rounds keep a node's mapped pods in that order, one per round."""
    from dataplane.linux.cni import PodAttach
    from dataplane.linux.realize import attach_rounds

    session = _session("iptables")
    view = emulation.view(session)
    agents = _agents(session)
    assert list(view.port_mappings) == ["default/aa-extra", agents["node-1"], agents["node-2"]]
    from ipaddress import IPv4Network

    cidr = IPv4Network("10.244.0.0/24")
    attach = [
        PodAttach(
            node=n, pod_key=k, pod_cidr=cidr, port_mappings=tuple(view.port_mappings.get(k, ()))
        )
        for k, n in [
            (agents["node-1"], "node-1"),
            ("default/client-1", "node-1"),
            ("default/aa-extra", "node-1"),
            (agents["node-2"], "node-2"),
        ]
    ]
    rounds = attach_rounds(attach, list(view.port_mappings))
    assert [[a.pod_key for a in r] for r in rounds] == [
        ["default/client-1", "default/aa-extra", agents["node-2"]],
        [agents["node-1"]],
    ]


def test_a_kube_proxy_mode_switch_removes_its_rules_and_keeps_the_plugins() -> None:
    """kube-proxy's iptables rules replaced by its nftables ones on a realised cluster:
    its KUBE-* chains and its jumps leave the iptables nat table (deleted by number
    among the plugin's jumps, the chains -X'ed), the plugin's rules stay with their
    counters, and the table is again the emulator's; the hostPort still answers."""
    view = emulation.view(_session("iptables"), external_clients=[EXT])
    session = _session("nftables")
    nft_view = emulation.view(session, external_clients=[EXT])
    assert nft_view.network == view.network  # one cluster, another kube-proxy mode
    n1 = _ip(session, "Node", "node-1")
    cid = unique_cluster_id("hp")
    try:
        with real_backend(view, cluster_id=cid) as real:
            cluster = real.cluster
            [c] = real.connect(f"ext/{EXT}", n1, 30090, "tcp", 1)
            assert c.verdict == "delivered"
            before = _dn_counters(cluster, "node-1")
            assert any(before.values())
            load_rules(cluster, nft_view)
            kernel = linux_rules.iptables_save(
                cluster.node_netns("node-1"), counters=False, table="nat"
            )
            assert "KUBE-" not in kernel
            assert _nat(kernel) == _nat(_nat_text(nft_view, "node-1"), canon=True)
            assert _dn_counters(cluster, "node-1") == before
            [c] = real.connect(f"ext/{EXT}", n1, 30090, "tcp", 1)
            assert (c.verdict, c.pod) == ("delivered", "default/aa-extra")
    finally:
        assert leftovers(cid) == []
