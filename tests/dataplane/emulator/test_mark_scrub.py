"""The skb mark never crosses into another namespace: a veth whose peer is in another
namespace scrubs the packet (the kernel's ``skb_scrub_packet`` with ``xnet``), so a mark
one node's rules set is gone when the packet reaches the next node (or the pod). A node
that marks everything it forwards and a node that drops what carries that mark: the
packet between them is delivered."""

from __future__ import annotations

from app import emulation
from control.session import Session
from netmodel.manifests import load_text
from netmodel.objects import Pod
from netmodel.rulesets import IptablesRules

SCENARIO = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: scrub}
spec: {nodes: 2, dns: false}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec: {nodeName: node-1, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web}
spec: {nodeName: node-2, containers: [{name: c, image: x, ports: [{containerPort: 8080}]}]}
"""
MARKER = (
    "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
    "-A FORWARD -j MARK --set-xmark 0x20000/0x20000\n-A OUTPUT -j MARK --set-xmark 0x20000/0x20000\nCOMMIT\n"
)
DROPPER = (
    "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
    "-A INPUT -m mark --mark 0x20000/0x20000 -j DROP\n"
    "-A FORWARD -m mark --mark 0x20000/0x20000 -j DROP\nCOMMIT\n"
)


def test_a_mark_set_on_one_node_is_not_seen_on_the_next() -> None:
    session = Session.ephemeral(load_text(SCENARIO, source="scrub"))
    [web] = [p for p in session.store.list("Pod") if isinstance(p, Pod) and p.name == "web"]
    emu = emulation.emulator(
        session,
        rules_override={"node-1": IptablesRules(MARKER), "node-2": IptablesRules(DROPPER)},
    )
    t = emu.trace("pod/default/client", str(web.status.pod_ip), "tcp", 8080)
    assert t.verdict == "delivered", t.reason
    marked = [
        h
        for h in t.hops
        if h.kind == "rule" and h.netns == "node/node-1" and "MARK" in (h.verdict or "")
    ]
    assert marked, "node-1 marked the packet"
    assert not [h for h in t.hops if h.netns == "node/node-2" and h.verdict == "DROP"]
