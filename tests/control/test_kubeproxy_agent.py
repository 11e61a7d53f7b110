"""The kube-proxy agent through the whole control plane: a Deployment and Services of
every kind give rules on every node whose endpoints are exactly the ready pods (checked by
tracing flows through each node's applied rules, not by reading text), and scaling or
deleting pods updates them with partial syncs that end where a fresh full render is."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

from app.cli.rules_cmd import node_rules
from control.agents.kubeproxy import IPVS_DEPRECATION
from control.session import Session
from dataplane.netfilter import Flow, FlowTracer, parse_save
from dataplane.proxy import IptablesRender, normalize
from netmodel.manifests import load_text
from netmodel.objects import Deployment, Node, Pod, Service

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 3, dns: false}   # the endpoint sets below predate cluster DNS
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx, ports: [{name: http, containerPort: 8080}]}]
"""
SERVICES = {
    "plain": "{}",
    "nodeport": "{type: NodePort}",
    "lb": "{type: LoadBalancer}",
    "etp-local": "{type: NodePort, externalTrafficPolicy: Local}",
    "itp-local": "{internalTrafficPolicy: Local}",
    "sticky": "{sessionAffinity: ClientIP}",
}
EXTERNAL = "203.0.113.9"


def manifest() -> str:
    text = MANIFEST
    for name, extra in SERVICES.items():
        spec = extra[1:-1]
        text += (
            f"---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\n"
            f"spec: {{selector: {{app: web}}, ports: [{{port: 80, targetPort: http}}]"
            f"{', ' + spec if spec else ''}}}\n"
        )
    return text


def tracer(s: Session, node: Node) -> FlowTracer:
    text = s.rules.nodes[node.name].save_text
    return FlowTracer(text, ["127.0.0.1", *node.internal_ips])


def reached(t: FlowTracer, src: str, dst: str, port: int) -> set[str]:
    return {e.endpoint for e in t.trace(Flow(src, dst, port)).endpoints}


def ready(s: Session, node: str | None = None) -> set[str]:
    return {
        f"{p.status.pod_ip}:8080"
        for p in s.store.list("Pod")
        if isinstance(p, Pod)
        and p.is_ready
        and not p.is_terminating
        and (node is None or p.spec.node_name == node)
    }


def check_every_node(s: Session) -> None:
    s.converge()
    nodes = [n for n in s.store.list("Node") if isinstance(n, Node)]
    svc = {n: s.store.get("Service", f"default/{n}") for n in SERVICES}
    for node in nodes:
        t = tracer(s, node)
        cidr = ip_network(node.spec.pod_cidr or "")
        pod_src = str(cidr.network_address + 200)  # a pod address on this node
        nip = node.internal_ips[0]
        local = ready(s, node.name)
        for name in ("plain", "nodeport", "lb", "etp-local", "sticky"):
            sv = svc[name]
            assert isinstance(sv, Service)
            assert reached(t, pod_src, sv.spec.cluster_ip or "", 80) == ready(s), (node.name, name)
        np = svc["nodeport"].spec.ports[0].node_port  # type: ignore[attr-defined]
        assert reached(t, EXTERNAL, nip, np) == ready(s)
        lb = svc["lb"].status.load_balancer.ingress[0].ip  # type: ignore[attr-defined]
        assert reached(t, EXTERNAL, lb, 80) == ready(s)
        lp = svc["etp-local"].spec.ports[0].node_port  # type: ignore[attr-defined]
        res = t.trace(Flow(EXTERNAL, nip, lp))
        if local:
            assert {e.endpoint for e in res.endpoints} == local and not res.masquerade
        else:
            assert res.verdict == "DROP" and not res.endpoints
        itp = svc["itp-local"].spec.cluster_ip  # type: ignore[attr-defined]
        res = t.trace(Flow(pod_src, itp, 80))
        assert {e.endpoint for e in res.endpoints} == local or (not local and res.verdict == "DROP")


def chains(text: str) -> dict[tuple[str, str], list[str]]:
    rs = parse_save(text)
    return {
        (t, c): [r.spec for r in chain.rules]
        for t, table in rs.tables.items()
        for c, chain in table.chains.items()
        if c.startswith("KUBE-")
    }


def applied_equals_full_render(s: Session) -> None:
    """The node's ruleset after every sync so far (full, then partial ones applied
    --noflush) holds exactly the KUBE-* chains and rules a fresh kube-proxy's full sync
    loads, and no stale chain."""
    for name, state in s.rules.nodes.items():
        fresh = node_rules(s, name, "iptables")
        assert isinstance(fresh, IptablesRender)
        want = chains(fresh.restore_input)
        have = {k: v for k, v in chains(state.save_text).items() if k[1] != "KUBE-PROXY-CANARY"}
        assert have == want, name
        assert normalize(fresh.restore_input)  # the full render normalises (consistent text)


def test_rules_follow_the_ready_pods_with_partial_syncs() -> None:
    s = Session.ephemeral(load_text(manifest(), source="agent.yaml"))
    check_every_node(s)
    applied_equals_full_render(s)
    assert all(st.syncs == 1 for st in s.rules.nodes.values())

    dep = s.store.get("Deployment", "default/web")
    assert isinstance(dep, Deployment)
    s.plane.apiserver.update(dep.evolve(spec=dep.spec.evolve(replicas=5)))
    check_every_node(s)
    assert len(ready(s)) == 5
    for proxy in s.proxies.values():
        assert isinstance(proxy.last, IptablesRender) and proxy.last.partial
    applied_equals_full_render(s)

    victim = sorted(ready(s))[0].split(":")[0]
    pod = next(p for p in s.store.list("Pod") if isinstance(p, Pod) and p.status.pod_ip == victim)
    s.plane.delete("Pod", pod.key)
    check_every_node(s)
    assert len(ready(s)) == 5 and ip_address(victim)  # the ReplicaSet replaced it
    applied_equals_full_render(s)
    events = [e for e in s.store.list("Event") if getattr(e, "reason", "") == "SyncProxyRules"]
    assert any("partial sync" in e.message for e in events)  # type: ignore[attr-defined]


def test_ipvs_mode_records_upstreams_deprecation_warning_once_per_node() -> None:
    """kube-proxy 1.35 warns that its IPVS proxier is deprecated (KEP-5495): a Warning
    Event per node, reason IPVSDeprecation; iptables mode records none."""
    ipvs = manifest().replace("spec: {nodes: 3, dns: false}", "spec: {nodes: 3, dns: false, proxyMode: ipvs}")
    s = Session.ephemeral(load_text(ipvs, source="ipvs.yaml"))
    warned = [e for e in s.store.list("Event") if getattr(e, "reason", "") == "IPVSDeprecation"]
    assert sorted(e.involved_object.name for e in warned) == ["node-1", "node-2", "node-3"]  # type: ignore[attr-defined]
    assert {(e.type, e.message) for e in warned} == {("Warning", IPVS_DEPRECATION)}  # type: ignore[attr-defined]
    dep = s.store.get("Deployment", "default/web")
    assert isinstance(dep, Deployment)
    s.plane.apiserver.update(dep.evolve(spec=dep.spec.evolve(replicas=4)))
    s.converge()
    assert all(p.full_syncs >= 2 for p in s.proxies.values())  # IPVS mode: full every sync
    again = [e for e in s.store.list("Event") if getattr(e, "reason", "") == "IPVSDeprecation"]
    assert len(again) == 3

    plain = Session.ephemeral(load_text(manifest(), source="agent.yaml"))
    assert not [e for e in plain.store.list("Event") if getattr(e, "reason", "") == "IPVSDeprecation"]
