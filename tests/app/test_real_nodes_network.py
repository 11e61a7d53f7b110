"""What ``svclab serve --real`` realises for the Nodes the API holds
(:func:`app.realnode.nodes_network`) is what ``svclab up --real`` realises for them
(:func:`app.emulation.view`'s network): the same namespaces, interfaces, addresses,
routes, neighbours, FDB entries and veths, whichever overlay; so a node added while
served is built as ``up`` would have built it, and the nodes already there are left as
they are."""

from __future__ import annotations

import pytest

from app import emulation
from app.realnode import nodes_network
from control.session import Session
from netmodel.manifests import load_text
from netmodel.objects import Node

CLUSTER = """\
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: grow}}
spec: {{nodes: 3, dns: false, overlay: {overlay}}}
"""


@pytest.mark.parametrize("overlay", ["vxlan", "host-gw"])
def test_the_nodes_network_is_the_view_s_without_pods(overlay: str) -> None:
    session = Session.ephemeral(load_text(CLUSTER.format(overlay=overlay), source="c.yaml"))
    try:
        view = emulation.view(session, external_clients=["172.18.0.200"])
        nodes = [n for n in session.store.list("Node") if isinstance(n, Node)]
        assert len(nodes) == 3 and all(n.spec.pod_cidr for n in nodes)
        got = nodes_network(session.cluster.spec, reversed(nodes), ["172.18.0.200"])
    finally:
        session.close()
    assert dict(got.namespaces) == dict(view.network.namespaces)
    assert got.veths == view.network.veths
    assert got.overlay == view.network.overlay
