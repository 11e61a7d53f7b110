"""The emulator evaluating kube-router's rules agrees with :func:`netmodel.netpolicy.decide`
connection by connection, and a trace's last ``netpol`` hop says what ``decide`` says
of the deciding direction: pods on one node and across nodes, ingress, egress, a policy
of both types, ipBlock with except, named ports, a default deny."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from app import emulation, netpolview
from control.session import Session
from netmodel.manifests import load_text
from netmodel.netpolicy import PolicyPod, decide, named_ports, policy_from_wire
from netmodel.objects import Namespace, Pod

PODS = [  # (namespace, name, labels, node)
    ("x", "a", "{app: a}", "node-1"),
    ("x", "b", "{app: b}", "node-1"),
    ("x", "c", "{app: c}", "node-2"),
    ("y", "a", "{app: a}", "node-2"),
    ("y", "b", "{app: b}", "node-1"),
]
POLICIES = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-from-a-web, namespace: x}
spec:
  podSelector: {matchLabels: {app: b}}
  ingress: [{from: [{podSelector: {matchLabels: {app: a}}}], ports: [{port: web}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: c-both, namespace: x}
spec:
  podSelector: {matchLabels: {app: c}}
  policyTypes: [Ingress, Egress]
  ingress: [{from: [{namespaceSelector: {matchLabels: {ns: y}}}]}]
  egress: [{to: [{podSelector: {}}], ports: [{protocol: TCP, port: 80, endPort: 80}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-egress, namespace: y}
spec:
  podSelector: {matchLabels: {app: b}}
  policyTypes: [Egress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-block, namespace: y}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress: [{from: [{ipBlock: {cidr: 10.244.0.0/16, except: [10.244.1.0/24]}}]}]
"""


def manifests() -> str:
    docs = [
        "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nmetadata: {name: np}\n"
        "spec: {nodes: 2, dns: false}"
    ]
    docs += [
        f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {n}, labels: {{ns: {n}}}}}"
        for n in ("x", "y")
    ]
    for ns, name, labels, node in PODS:
        docs.append(
            f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {labels}}}\n"
            f"spec:\n  nodeName: {node}\n  containers: [{{name: c, image: x, ports: "
            f"[{{name: web, containerPort: 80}}, {{containerPort: 81}}]}}]"
        )
    return "\n---\n".join(docs) + "\n---\n" + POLICIES


@pytest.fixture(scope="module")
def session() -> Session:
    return Session.ephemeral(load_text(manifests(), source="np"))


def test_every_connection_agrees_with_decide_and_names_its_rule(session: Session) -> None:
    store = session.store
    pods = {
        p.key: PolicyPod(
            p.namespace,
            p.name,
            dict(p.metadata.labels),
            ip_address(p.status.pod_ip),
            p.spec.node_name or "",
            named_ports(p.spec.containers),
        )
        for p in store.list("Pod")
        if isinstance(p, Pod)
    }
    policies = [policy_from_wire(o.to_dict()) for o in store.list("NetworkPolicy")]
    namespaces = {
        n.name: dict(n.metadata.labels) for n in store.list("Namespace") if isinstance(n, Namespace)
    }
    agent = emulation.policy_agent_of(session)
    emu = emulation.emulator(session)
    outcomes = set()
    for src in pods.values():
        for dst in pods.values():
            if src is dst:
                continue
            for port in (80, 81):
                want = decide(src, dst, "TCP", port, policies, namespaces)
                t = netpolview.attribute(
                    emu.trace(f"pod/{src.key}", str(dst.ip), "tcp", port), agent, netpolview.node_of
                )
                where = f"{src.key} -> {dst.key}:{port}"
                assert (t.verdict == "delivered") == want.allowed, (
                    f"{where}: {t.verdict}, decide {want}"
                )
                if not want.allowed:
                    assert t.verdict == "REJECT", where
                notes = [h.note for h in t.hops if h.kind == "netpol"]
                assert notes and notes[-1] == want.deciding.describe(), f"{where}: {notes}"
                outcomes.add((want.allowed, want.deciding.direction, want.deciding.policy is None))
    # the cluster exercises allowed and denied, in both directions
    assert {
        (True, "ingress", False),
        (True, "ingress", True),
        (False, "ingress", False),
        (False, "egress", False),
    } <= outcomes
