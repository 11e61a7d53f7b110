"""The skb mark does not cross nodes inside a VXLAN tunnel: the kernel scrubs it when
the encapsulated packet leaves the sender's namespace, and the decapsulated packet is
that same skb. A node's connection to a ClusterIP whose endpoint is on another node is
masqueraded once, by the sender (KUBE-MARK-MASQ, then MASQUERADE out of the VXLAN
device), never again by the receiver's KUBE-POSTROUTING."""

from __future__ import annotations

import pytest

from app import emulation
from control.session import Session
from netmodel.manifests import load_text
from netmodel.objects import Pod, Service

SCENARIO = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: mark}}
spec: {{nodes: 2, {net}}}
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


@pytest.mark.parametrize(
    ("net", "tunnel_address"),
    [
        ("overlay: vxlan", "10.244.0.0"),  # flannel.1's address
        (
            "cni: calico, calico: {ipPools: [{cidr: 10.244.0.0/16, vxlanMode: Always}], "
            "blockAffinities: [{node: node-1, cidr: 10.244.0.0/26}, "
            "{node: node-2, cidr: 10.244.1.0/26}]}",
            "10.244.0.0",  # vxlan.calico's
        ),
    ],
    ids=["flannel", "calico"],
)
def test_a_node_to_a_remote_endpoint_is_masqueraded_once(net: str, tunnel_address: str) -> None:
    session = Session.ephemeral(load_text(SCENARIO.format(net=net), source="mark"))
    [vip] = [s.spec.cluster_ip for s in session.store.list("Service")
             if isinstance(s, Service) and s.name == "web"]
    [web] = [p for p in session.store.list("Pod") if isinstance(p, Pod) and p.name == "web"]
    emu = emulation.emulator(session)
    t = emu.trace("node/node-1", str(vip), "tcp", 80)
    assert t.verdict == "delivered" and t.delivered_to is not None
    assert t.delivered_to.ip == web.status.pod_ip
    assert t.source_seen == tunnel_address
    snat_nodes = {h.netns for h in t.hops_of("nat") if "rewrite source" in (h.note or "")}
    assert snat_nodes == {"node/node-1"}
