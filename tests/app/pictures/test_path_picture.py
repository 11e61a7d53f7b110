"""A trace drawn over the topology: the hops in order (request red and numbered, reply
blue), the DNAT rule, the masquerade, the VXLAN encapsulation; only the nodes crossed."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import svg_root, svg_texts, svg_titles

from app import emulation
from app.pictures.files import render_graph
from app.pictures.path import REPLY_COLOUR, REQUEST_COLOUR, path_graph, trace_path
from app.pictures.scene import scene
from control.session import Session
from netmodel.manifests import load_text
from netmodel.objects import Pod, Service
from netmodel.topology import host_veth_name


def _pod_on(session: Session, node: str | None = None, *, not_on: str | None = None) -> Pod:
    pods = sorted((p for p in session.store.list("Pod") if isinstance(p, Pod)), key=lambda p: p.key)
    return next(
        p for p in pods if (node is None or p.spec.node_name == node) and p.spec.node_name != not_on
    )


def _trace(session: Session, src: str, dst: str, port: int | None, clients: list[str]) -> Any:
    emu = emulation.emulator(session, external_clients=clients)
    return emu.trace(src, dst, "tcp", port).to_json()


def test_pod_to_service_across_nodes(web3: Session) -> None:
    svc = web3.store.get("Service", "default/web")
    assert isinstance(svc, Service) and svc.spec.cluster_ip
    sc = scene(web3)
    node_of = {p.key: p.spec.node_name for p in web3.store.list("Pod") if isinstance(p, Pod)}
    # the first source pod whose connection the Service sends to another node
    for key in sorted(node_of):
        t = _trace(web3, f"pod/{key}", svc.spec.cluster_ip, 80, [])
        if node_of[t["delivered_to"]["pod"]] != node_of[key]:
            break
    else:
        raise AssertionError("every connection stayed on its node")
    src = web3.store.get("Pod", key)
    assert isinstance(src, Pod)
    dst_pod = t["delivered_to"]["pod"]
    a, b = node_of[key], node_of[dst_pod]
    path = trace_path(sc, t["hops"])
    assert path.points == (
        f"pod/{src.key}#eth0",
        f"node/{a}#{host_veth_name(src.key)}",
        f"node/{a}#cni0",
        f"node/{a}#flannel.1",
        f"node/{a}#eth0",
        "router",
        f"node/{b}#eth0",
        f"node/{b}#flannel.1",
        f"node/{b}#cni0",
        f"node/{b}#{host_veth_name(dst_pod)}",
        f"pod/{dst_pod}#eth0",
    )
    reply = trace_path(sc, t["reply"]["hops"])
    assert reply.points == tuple(reversed(path.points))
    kinds = [(n.kind, n.point) for n in path.notes]
    assert kinds[0] == ("dnat", f"node/{a}#cni0")  # kube-proxy's DNAT in node a's PREROUTING
    assert ("vxlan", f"node/{a}#flannel.1") in kinds and ("vxlan", f"node/{b}#flannel.1") in kinds

    svg = render_graph(path_graph(sc, t), "svg")
    texts = svg_texts(svg)
    assert sorted(int(x) for x in texts if x.isdigit()) == list(range(1, 11))
    assert {f"r{i}" for i in range(1, 11)} <= set(texts)
    assert any(x.startswith(f"DNAT {svc.spec.cluster_ip}:80 -> ") for x in texts)
    assert any(x.startswith("encap VNI 1: ") for x in texts)
    assert any(x.startswith("decap VNI 1 ") for x in texts)
    strokes = [e.get("stroke") for e in svg_root(svg).iter() if e.get("stroke")]
    assert strokes.count(REQUEST_COLOUR) >= 10 and strokes.count(REPLY_COLOUR) >= 10
    # the third node is not drawn: a path picture shows the nodes the packet crossed
    (third,) = {"node-1", "node-2", "node-3"} - {a, b}
    assert third not in texts and a in texts and b in texts


def test_nodeport_from_outside_shows_the_masquerade(cluster20: Session) -> None:
    client = "203.0.113.7"
    pod = _pod_on(cluster20)
    other = next(
        n.name
        for n in sorted(cluster20.store.list("Node"), key=lambda n: n.name)
        if n.name != pod.spec.node_name
    )
    node_ip = cluster20.store.get("Node", other).internal_ips[0]  # type: ignore[attr-defined]
    t = _trace(cluster20, client, node_ip, 30080, [client])
    assert t["masquerade"]
    view = emulation.view(cluster20, external_clients=[client])
    sc = scene(cluster20, network=view.network)
    path = trace_path(sc, t["hops"])
    assert path.points[:3] == (f"ext/{client}#eth0", "router", f"node/{other}#eth0")
    notes = {n.kind: n for n in path.notes}
    assert notes["dnat"].text.startswith(f"DNAT {node_ip}:30080 -> ")
    assert notes["snat"].text.startswith(f"MASQUERADE (source) {client}:")
    texts = svg_texts(render_graph(path_graph(sc, t), "svg"))
    assert f"client {client}" in texts
    drawn_nodes = {x for x in texts if x.startswith("node-")}
    crossed = {other, t["delivered_to"]["node"]}
    assert drawn_nodes == crossed  # 2 of 20 nodes (or 1 when the endpoint is local)
    titles = svg_titles(render_graph(path_graph(sc, t), "svg"))
    assert f"ext/{client}#eth0->router" in titles


NODEPORT = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: np}}
spec: {{nodes: 2, proxyMode: {mode}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web, labels: {{app: web}}}}
spec:
  nodeName: node-1
  containers: [{{name: web, image: x, ports: [{{containerPort: 8080}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  type: NodePort
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080, nodePort: 30080}}]
"""


@pytest.mark.parametrize(
    ("mode", "dnat_by", "masq_by"),
    [
        ("iptables", "-j DNAT --to-destination 10.244.0.2:8080", "-j MASQUERADE"),
        ("nftables", "dnat to 10.244.0.2:8080", "masquerade"),
        ("ipvs", "ipvs INPUT: schedule rr -> 10.244.0.2:8080", "-j MASQUERADE"),
    ],
)
def test_the_nat_notes_name_what_decided_in_every_proxy_mode(
    mode: str, dnat_by: str, masq_by: str
) -> None:
    client = "203.0.113.5"
    session = Session.ephemeral(load_text(NODEPORT.format(mode=mode), source=mode))
    t = _trace(session, client, "172.18.0.2", 30080, [client])
    view = emulation.view(session, external_clients=[client])
    notes = trace_path(scene(session, network=view.network), t["hops"]).notes
    by_kind = {n.kind: n.text.replace("\\l", " ").replace("\\n", " ") for n in notes}
    assert by_kind["dnat"].startswith("DNAT 172.18.0.2:30080 -> 10.244.0.2:8080 ")
    assert dnat_by in by_kind["dnat"]
    assert by_kind["snat"].startswith(f"MASQUERADE (source) {client}:")
    assert masq_by in by_kind["snat"]


def test_a_calico_path_goes_through_the_cali_veths_and_no_bridge() -> None:
    from pathlib import Path as _Path

    from netmodel.manifests import load
    from netmodel.topology import calico_veth_name

    dump = _Path(__file__).resolve().parents[2] / "data" / "kubectl-dumps" / "calico-kubeadm-list.yaml"
    session = Session.ephemeral(load([dump]))
    t = _trace(session, "pod/default/client", "192.168.171.66", 8080, [])
    assert t["verdict"] == "delivered"
    path = trace_path(scene(session), t["hops"])
    assert not any(p.endswith("#cni0") for p in path.points)
    client, web0 = calico_veth_name("default/client"), calico_veth_name("default/web-0")
    assert list(path.points) == [
        "pod/default/client#eth0",
        f"node/calico-worker#{client}",
        "node/calico-worker#eth0",
        "router",
        "node/calico-cp#eth0",
        f"node/calico-cp#{web0}",
        "pod/default/web-0#eth0",
    ]
