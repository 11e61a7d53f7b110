"""Incremental kube-proxies end where full renders are, byte for byte.

A cluster of several nodes runs one kube-proxy per node (iptables mode: a full sync,
then partial syncs applied ``--noflush``). After each change of a sequence (Services
added, changed and deleted, Deployments scaled, pods deleted) every node's
``iptables-save`` text equals, byte for byte, what a kube-proxy started afresh on the
store as it is then holds after its first, full sync; and every node's change tracker
holds the snapshot a full build from the objects gives (the trackers share views
between nodes: each node must still see its own local endpoints)."""

from __future__ import annotations

from control.agents.kubeproxy import EmulatedRules, KubeProxy
from control.session import Session
from dataplane.netfilter import parse_save
from dataplane.proxy import IptablesRender, build_snapshot, render_iptables
from netmodel.manifests import load_text
from netmodel.objects import Deployment, EndpointSlice, Node, Pod, Service

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 4}
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
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: nginx, ports: [{containerPort: 9090}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}, ports: [{port: 80, targetPort: http}]}
---
apiVersion: v1
kind: Service
metadata: {name: web-local}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
"""


def _service(name: str, app: str, extra: str = "") -> Service:
    text = (
        f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\n"
        f"spec: {{selector: {{app: {app}}}, ports: [{{port: 80, targetPort: 9090}}]{extra}}}\n"
    )
    (svc,) = load_text(text, source="more.yaml").objects
    assert isinstance(svc, Service)
    return svc


def _fresh(s: Session, node: str) -> tuple[str, str]:
    """(restore payload, iptables-save text) of a kube-proxy started afresh on ``node``."""
    sink = EmulatedRules()
    proxy = KubeProxy(node, s.cluster.spec, s.proxy_config, sink, None, clock=s.clock)
    proxy.resync([*s.store.list("Node"), *s.store.list("Service"), *s.store.list("EndpointSlice")])
    assert proxy.sync() == 1
    assert isinstance(proxy.last, IptablesRender) and not proxy.last.partial
    return proxy.last.restore_input, sink.nodes[node].save_text


def _by_chain(save_text: str) -> str:
    """The save text with each table's chains in name order (iptables-nft-save lists
    chains in creation order: chains a partial sync created come last, on a real node
    too); every rule's text, and the rules' order in each chain, as they are."""
    rs = parse_save(save_text)
    out = []
    for t in sorted(rs.tables):
        for c in sorted(rs.tables[t].chains):
            out.append(f"{t} {c}")
            out.extend(r.spec for r in rs.tables[t].chains[c].rules)
    return "\n".join(out)


def _check(s: Session) -> None:
    s.converge()
    services = [o for o in s.store.list("Service") if isinstance(o, Service)]
    slices = [o for o in s.store.list("EndpointSlice") if isinstance(o, EndpointSlice)]
    nodes = [n.name for n in s.store.list("Node") if isinstance(n, Node)]
    assert sorted(s.rules.nodes) == sorted(nodes)
    for name in nodes:
        proxy = s.proxies[name]
        tracker, cfg = proxy._tracker, proxy.node_config
        assert tracker is not None and cfg is not None
        # the tracker (views shared between nodes) holds what a full build gives
        assert tracker.snapshot == build_snapshot(services, slices, cfg), name
        restore, save = _fresh(s, name)
        # its full render is byte for byte a fresh kube-proxy's first sync
        assert render_iptables(tracker.snapshot, cfg).restore_input == restore, name
        # and the rules the node holds after its partial syncs are those of that sync
        assert _by_chain(s.rules.nodes[name].save_text) == _by_chain(save), name


def _scale(s: Session, name: str, replicas: int) -> None:
    dep = s.store.get("Deployment", f"default/{name}")
    assert isinstance(dep, Deployment)
    s.plane.apiserver.update(dep.evolve(spec=dep.spec.evolve(replicas=replicas)))


def test_incremental_syncs_end_byte_for_byte_where_a_full_render_is() -> None:
    s = Session.ephemeral(load_text(MANIFEST, source="incremental.yaml"))
    _check(s)
    s.plane.apply([_service("api", "api")])
    _check(s)
    s.plane.apply([_service("api-np", "api", ", type: NodePort, externalTrafficPolicy: Local")])
    _check(s)
    _scale(s, "web", 7)
    _check(s)
    _scale(s, "api", 1)
    _check(s)
    pod = next(p for p in s.store.list("Pod") if isinstance(p, Pod) and p.name.startswith("web"))
    s.plane.delete("Pod", pod.key)
    _check(s)
    s.plane.apply([_service("api", "web", ", sessionAffinity: ClientIP")])  # changed
    _check(s)
    s.plane.delete("Service", "default/web")
    _check(s)
    _scale(s, "web", 0)
    _check(s)
    partial = [p.last for p in s.proxies.values()]
    assert all(getattr(r, "partial", False) for r in partial)  # the last syncs were partial
