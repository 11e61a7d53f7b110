"""hostPort on both backends (mark.kernel): the real CNI ``portmap`` plugin, chained by
:class:`~dataplane.linux.cni.CniRunner` after ``bridge``, writes exactly the nat rules
:mod:`netmodel.hostports` models (same chains, same rules, same order, read back with
``iptables-save``) and its DEL removes the pod's part; and a hostPort flow (from outside
to the pod's node, from another node's pod, from a pod on the same node, hairpinned and
masqueraded, and to a node without the pod) has the same outcome on the kernel and in
the emulator from one view."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Network

import pytest

from app import emulation
from control.session import Session
from dataplane.backends import emulator_backend, real_backend
from dataplane.linux import rules as linux_rules
from dataplane.linux.cni import CniRunner
from dataplane.linux.netns import is_root
from dataplane.linux.realize import RealCluster
from dataplane.linux.testing import realized, sample_network
from dataplane.proxy.normalize import parse_tables
from netmodel.hostports import (
    DNAT_CHAIN,
    MASQ_CHAIN,
    NETWORK,
    SETMARK_CHAIN,
    HostPortPod,
    PortMapping,
    dn_chain,
    merge_nat,
    portmap_rules,
)
from netmodel.manifests import load_text
from netmodel.objects import Node, Pod

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

CIDR = IPv4Network("10.244.0.0/24")
EXT = "203.0.113.7"


@pytest.fixture
def empty_node() -> Iterator[RealCluster]:
    """One node without pods (cni0 exists, like a node flannel has set up)."""
    with realized(sample_network(1, 0).network) as c:
        yield c


def _nat(text: str) -> dict[str, list[str]]:
    """The nat table of iptables-save text (the model's text is in that form too; its
    ``-m multiport`` is beyond :func:`save_form`), SVCLAB-* (the harness's own) left out."""
    table = parse_tables(text).get("nat")
    if table is None:
        return {}
    return {
        c: [r for r in rs if "-j SVCLAB-" not in r]
        for c, rs in table.rules.items()
        if not c.startswith("SVCLAB-")
    }


def test_portmap_plugin_writes_the_modelled_rules_and_del_removes_them(
    empty_node: RealCluster,
) -> None:
    cni = CniRunner(empty_node.cluster_id)
    netns = empty_node.node_netns("n0")
    before = linux_rules.iptables_save(netns, counters=False, table="nat")
    mappings = (
        PortMapping(30080, 8080, "tcp"),
        PortMapping(5353, 53, "udp"),
        PortMapping(8443, 443, "tcp", "10.0.0.10"),
    )
    got = cni.add("n0", "default/web", CIDR, port_mappings=mappings)
    cni.add("n0", "default/plain", CIDR)  # no mappings: no portmap call, no rules
    pm = portmap_rules(
        NETWORK, [HostPortPod(cni.names.container_id("default/web"), got.ip, CIDR, mappings)]
    )
    assert pm is not None
    kernel = _nat(linux_rules.iptables_save(netns, counters=False, table="nat"))
    assert kernel == _nat(merge_nat(before, pm))
    chain = dn_chain(NETWORK, cni.names.container_id("default/web"))
    assert any("--to-destination 10.244.0.2:8080" in r for r in kernel[chain])
    assert cni.add("n0", "default/web", CIDR, port_mappings=mappings) == got  # cached
    cni.delete("n0", "default/web", CIDR)
    after = _nat(linux_rules.iptables_save(netns, counters=False, table="nat"))
    assert chain not in after and after[DNAT_CHAIN] == []  # the pod's part is gone
    assert {MASQ_CHAIN, SETMARK_CHAIN} <= set(after)  # the shared chains stay


SCENARIO = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: hostport}
spec: {nodes: 2, dns: false, overlay: host-gw}
---
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  nodeName: node-2
  containers: [{name: c, image: x, ports: [{containerPort: 8080, hostPort: 30080}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: near}
spec:
  nodeName: node-2
  containers: [{name: c, image: x}]
---
apiVersion: v1
kind: Pod
metadata: {name: far}
spec:
  nodeName: node-1
  containers: [{name: c, image: x}]
"""


def test_host_port_flows_agree_between_kernel_and_emulator() -> None:
    session = Session.ephemeral(load_text(SCENARIO, source="hostport"))
    view = emulation.view(session, external_clients=[EXT])

    def ip(kind: str, name: str) -> str:
        o = session.store.get(kind, name)
        if isinstance(o, Node):
            return o.internal_ips[0]
        assert isinstance(o, Pod) and o.status.pod_ip
        return o.status.pod_ip

    node1, node2, web = ip("Node", "node-1"), ip("Node", "node-2"), ip("Pod", "default/web")
    with (
        emulator_backend(view, seed=7) as emu,
        real_backend(view, cni="bridge-plugin") as real,
    ):
        for src, dst, pod, masq in (
            (f"ext/{EXT}", node2, "default/web", False),
            ("pod/default/far", node2, "default/web", False),
            ("pod/default/near", node2, "default/web", True),  # hairpin: CNI-HOSTPORT-MASQ
            (f"ext/{EXT}", node1, None, None),
        ):
            [e] = emu.connect(src, dst, 30080, "tcp", 1)
            [r] = real.connect(src, dst, 30080, "tcp", 1, sports=[e.sport or 0])
            where = f"{src} -> {dst}:30080"
            assert e.key() == r.key(), f"{where}: emulator {e} vs kernel {r}"
            if pod is None:
                assert e.verdict != "delivered", where
            else:
                assert (e.verdict, e.pod, e.masquerade) == ("delivered", pod, masq), where
        assert f"-j DNAT --to-destination {web}:8080" in view.rulesets["node-2"].text  # type: ignore[union-attr]
