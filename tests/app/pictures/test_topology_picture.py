"""svclab's topology picture: every node, device, address, pod and Service is drawn, for
the 3-node example and a 20-node cluster, as SVG and PNG."""

from __future__ import annotations

import pytest
from conftest import png_size, svg_points_size, svg_texts, svg_titles

from app.pictures.files import render_graph
from app.pictures.scene import TooManyNodesError, scene
from app.pictures.topology import topology_graph
from control.session import Session
from netmodel.errors import InputError
from netmodel.manifests import load_text
from netmodel.objects import Node, Pod
from netmodel.topology import host_veth_name


def _expected_labels(session: Session) -> list[str]:
    labels = []
    for n in session.store.list("Node"):
        assert isinstance(n, Node)
        labels += [n.name, n.internal_ips[0], f"podCIDR {n.spec.pod_cidr}"]
    for p in session.store.list("Pod"):
        assert isinstance(p, Pod)
        labels += [f"pod {p.key}", host_veth_name(p.key)]
    return labels


@pytest.mark.parametrize("name", ["web3", "cluster20"])
def test_the_topology_svg_holds_every_node_pod_and_service(
    name: str, request: pytest.FixtureRequest
) -> None:
    session: Session = request.getfixturevalue(name)
    svg = render_graph(topology_graph(scene(session)), "svg")
    texts = svg_texts(svg)
    joined = "\n".join(texts)
    for label in _expected_labels(session):
        assert label in texts or label in joined, label
    pods = [p for p in session.store.list("Pod") if isinstance(p, Pod)]
    for p in pods:
        assert f"eth0 {p.status.pod_ip}/24" in texts
    nodes = [n for n in session.store.list("Node") if isinstance(n, Node)]
    # each node: its eth0, its cni0 (the podCIDR's gateway), its flannel.1 with VNI 1
    for n in nodes:
        assert f"{n.internal_ips[0]}/16" in texts  # the node's eth0
    assert texts.count("cni0 (bridge)") == len(nodes)
    assert texts.count("flannel.1 (VXLAN)") == len(nodes)
    assert texts.count("VNI 1, UDP 8472") == len(nodes)
    assert f"routes to {len(nodes) - 1} peer podCIDRs" in texts
    assert "Service default/web" in texts
    # each web pod is joined to the web Service by an edge labelled with its endpoint IP,
    # each coredns pod (cluster DNS is on by default) to kube-system/kube-dns
    titles = svg_titles(svg)
    web = [p for p in pods if p.labels.get("app") == "web"]
    dns = [p for p in pods if p.labels.get("k8s-app") == "kube-dns"]
    assert len(dns) == 2 and len(web) + len(dns) == len(pods)
    for p in web:
        assert f"pod/{p.key}#eth0->svc#default/web" in titles
    for p in dns:
        assert f"pod/{p.key}#eth0->svc#kube-system/kube-dns" in titles


def test_the_png_is_the_svg_at_96_dpi(cluster20: Session) -> None:
    g = topology_graph(scene(cluster20))
    width_pt, height_pt = svg_points_size(render_graph(g, "svg"))
    width, height = png_size(render_graph(g, "png"))
    assert abs(width - width_pt * 96 / 72) <= 2 and abs(height - height_pt * 96 / 72) <= 2
    assert height > width / 4  # 20 nodes stack downwards (left to right layout): legible


def test_host_gw_nodes_list_their_routes_to_the_peers() -> None:
    text = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: hg}
spec: {nodes: 3, overlay: host-gw}
"""
    session = Session.ephemeral(load_text(text, source="hg"))
    texts = svg_texts(render_graph(topology_graph(scene(session)), "svg"))
    assert "flannel.1 (VXLAN)" not in texts
    assert texts.count("host-gw routes") == 3
    assert "10.244.1.0/24 via 172.18.0.3" in texts  # node-1's route to node-2's podCIDR


def test_one_node_alone(cluster20: Session) -> None:
    node = next(p for p in cluster20.store.list("Pod") if isinstance(p, Pod)).spec.node_name
    assert node is not None
    sc = scene(cluster20, node=node)
    texts = svg_texts(render_graph(topology_graph(sc), "svg"))
    assert node in texts and "19 other nodes" in texts and "routes to 19 peer podCIDRs" in texts
    others = {n.name for n in cluster20.store.list("Node")} - {node}
    assert not others & set(texts)
    assert any(t.endswith("endpoint(s) off the picture") for t in texts)


def test_a_cluster_too_big_to_draw_is_refused_with_a_hint(web3: Session) -> None:
    with pytest.raises(TooManyNodesError, match=r"3 nodes, too many .* --node NAME"):
        scene(web3, max_nodes=2)
    with pytest.raises(InputError, match="node nope not found"):
        scene(web3, node="nope")


def test_calico_nodes_show_their_block_routes_and_cali_veths() -> None:
    from pathlib import Path as _Path

    from netmodel.manifests import load
    from netmodel.topology import calico_veth_name

    dump = _Path(__file__).resolve().parents[2] / "data" / "kubectl-dumps" / "calico-kubeadm-list.yaml"
    session = Session.ephemeral(load([dump]))
    texts = svg_texts(render_graph(topology_graph(scene(session)), "svg"))
    assert texts.count("Calico routes (BGP)") == 2 and not any("cni0" in t for t in texts)
    assert "192.168.35.128/26 via 10.0.0.11" in texts  # calico-cp's route to the worker
    assert calico_veth_name("default/web-0") in texts and "proxy ARP" in texts
    assert "eth0 192.168.171.66/32" in texts
