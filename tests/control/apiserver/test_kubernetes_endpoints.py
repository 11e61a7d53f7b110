"""The apiserver's own EndpointSlice ``default/kubernetes``: created at bootstrap with the
Cluster's apiserver address and port ``https`` 6443, rendered by kube-proxy on every node
as a DNAT to ADDRESS:6443 (traced, in every proxy mode), refused there on both backends
(nothing listens on 6443), stable across restarts of a persistent cluster, absent with
``kubernetesService: false``, and listed by ``svclab get``."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_helpers import make_api
from click.testing import CliRunner

from app.cli.main import cli
from app.emulation import emulator, view
from control.apiserver.endpoints import SECURE_PORT
from control.session import Session
from dataplane.backends import EmulatorBackend
from dataplane.backends.realise import server_ports
from dataplane.netfilter import Flow, FlowTracer
from dataplane.proxy.naming import svc_chain
from netmodel.cluster import ClusterSpec, cluster_from_dict
from netmodel.errors import InputError
from netmodel.manifests import load_text
from netmodel.objects import EndpointSlice, Node, Service

KUBERNETES = "10.96.0.1"
#: upstream kube-proxy's chain for default/kubernetes:https (tcp)
KUBERNETES_CHAIN = "KUBE-SVC-NPX46M4PTMTKRN6Y"

CLUSTER = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {{nodes: 3, proxyMode: {mode}{extra}}}
"""
#: one pod pinned to each node, so every node forwards a pod's connection
PODS = "".join(
    f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: client-{i}}}\n"
    f"spec: {{nodeName: node-{i}, containers: [{{name: c, image: busybox}}]}}\n"
    for i in (1, 2, 3)
)


def manifest(mode: str = "iptables", extra: str = "", pods: bool = True) -> str:
    return CLUSTER.format(mode=mode, extra=extra) + (PODS if pods else "")


def the_slice(store_get: object) -> EndpointSlice:
    assert isinstance(store_get, EndpointSlice)
    return store_get


def test_bootstrap_creates_the_slice_once() -> None:
    api = make_api(nodes=3)
    sl = the_slice(api.store.get("EndpointSlice", "default/kubernetes"))
    assert sl.labels == {"kubernetes.io/service-name": "kubernetes"}
    assert sl.metadata.owner_references == []
    assert sl.address_type == "IPv4"
    assert [(e.addresses, e.conditions.ready, e.node_name) for e in sl.endpoints] == [
        (["172.18.0.2"], True, None)
    ]
    assert [(p.name, p.port, p.protocol) for p in sl.ports] == [("https", 6443, "TCP")]
    svc = api.store.get("Service", "default/kubernetes")
    assert isinstance(svc, Service) and svc.spec.selector is None
    assert svc.spec.cluster_ip == KUBERNETES
    revision = api.store.revision
    api.bootstrap()
    assert api.store.revision == revision  # idempotent: nothing written


def test_bootstrap_repairs_a_drifted_slice_and_keeps_user_labels() -> None:
    api = make_api(nodes=2)
    sl = the_slice(api.store.get("EndpointSlice", "default/kubernetes"))
    wrong = sl.evolve(
        metadata=sl.metadata.evolve(labels={"team": "x"}),
        endpoints=[e.evolve(addresses=["172.18.0.99"]) for e in sl.endpoints],
    )
    api.store.update(wrong, expected_version=sl.resource_version)
    api.bootstrap()
    fixed = the_slice(api.store.get("EndpointSlice", "default/kubernetes"))
    assert fixed.endpoints == sl.endpoints and fixed.ports == sl.ports
    assert fixed.labels == {"team": "x", "kubernetes.io/service-name": "kubernetes"}
    api.store.delete("EndpointSlice", "default/kubernetes")
    api.bootstrap()
    assert the_slice(api.store.get("EndpointSlice", "default/kubernetes")).endpoints == sl.endpoints


@pytest.mark.parametrize(
    ("spec", "address"),
    [
        ({"nodes": 3}, "172.18.0.2"),
        # natural name order, not declaration order: node-2 (.3) before node-10 (.2)
        ({"nodes": [{"name": "node-10"}, {"name": "node-2"}]}, "172.18.0.3"),
        # a control-plane node wins over names
        (
            {
                "nodes": [
                    {"name": "a"},
                    {"name": "z", "labels": {"node-role.kubernetes.io/control-plane": ""}},
                ]
            },
            "172.18.0.3",
        ),
        # the first IPv4 address of the chosen node
        ({"nodes": [{"name": "a", "addresses": ["172.18.5.5", "172.18.5.6"]}]}, "172.18.5.5"),
        # named by the Cluster
        ({"nodes": 3, "advertiseAddress": "172.18.0.4"}, "172.18.0.4"),
        # no node, no apiserver address
        ({"nodes": 0}, None),
    ],
)
def test_advertise_address_rule(spec: dict[str, object], address: str | None) -> None:
    assert ClusterSpec.model_validate(spec).apiserver_address() == address
    api = make_api(**spec)
    slices = [s for s in api.store.list("EndpointSlice") if s.key == "default/kubernetes"]
    assert [the_slice(s).endpoints[0].addresses[0] for s in slices] == (
        [address] if address else []
    )


@pytest.mark.parametrize(
    ("address", "error"),
    [
        ("172.18.0.9", r"spec: advertiseAddress 172\.18\.0\.9 is not the \(first\) address"),
        ("apiserver", r"spec\.advertiseAddress: invalid IP address 'apiserver'"),
        ("fd00::1", r"spec\.advertiseAddress: 'fd00::1' is not an IPv4 address"),
    ],
)
def test_advertise_address_must_be_a_node_ipv4_address(address: str, error: str) -> None:
    doc = {"kind": "Cluster", "spec": {"nodes": 2, "advertiseAddress": address}}
    with pytest.raises(InputError, match=error):
        cluster_from_dict(doc, file="c.yaml")


def test_iptables_rules_on_every_node_dnat_to_the_apiserver() -> None:
    s = Session.ephemeral(load_text(manifest(), source="k.yaml"))
    s.converge()
    assert svc_chain("default/kubernetes:https", "tcp") == KUBERNETES_CHAIN
    nodes = [n for n in s.store.list("Node") if isinstance(n, Node)]
    assert len(nodes) == 3
    for node in nodes:
        text = s.rules.nodes[node.name].save_text
        assert f":{KUBERNETES_CHAIN} " in text and "has no endpoints" not in text
        tracer = FlowTracer(text, ["127.0.0.1", *node.internal_ips])
        pod_src = node.spec.pod_cidr.rsplit(".", 1)[0] + ".200"  # type: ignore[union-attr]
        for src in (pod_src, node.internal_ips[0]):
            res = tracer.trace(Flow(src, KUBERNETES, 443))
            assert [e.endpoint for e in res.endpoints] == [f"172.18.0.2:{SECURE_PORT}"], (
                node.name,
                src,
            )


@pytest.mark.parametrize("mode", ["iptables", "ipvs", "nftables"])
def test_every_node_sends_the_service_to_the_apiserver_and_is_refused(mode: str) -> None:
    s = Session.ephemeral(load_text(manifest(mode), source="k.yaml"))
    emu = emulator(s)
    for i in (1, 2, 3):
        for src in (f"node/node-{i}", f"pod/default/client-{i}"):
            t = emu.trace(src, f"{KUBERNETES}:443")
            assert t.received is not None, (src, t.reason)
            assert (str(t.received.dst), t.received.dport) == ("172.18.0.2", SECURE_PORT)
            assert t.delivered_to is not None and t.delivered_to.netns == "node/node-1"
            # the node that first saw the packet DNATed it (its own rules)
            nat = [h for h in t.hops if h.nat and h.nat.endswith(f"-> 172.18.0.2:{SECURE_PORT}")]
            assert nat and nat[0].netns == f"node/node-{i}", (src, [h.netns for h in nat])
            # nothing listens on 6443: the node answers with a reset
            assert t.reason == f"no listener on tcp/{SECURE_PORT}"
            assert t.reply is not None and t.reply.received is not None
            assert "RST" in t.reply.received.flags


def test_a_connection_is_refused_on_both_backends() -> None:
    s = Session.ephemeral(load_text(manifest(), source="k.yaml"))
    v = view(s)
    emu = EmulatorBackend(v)
    for src in ("pod/default/client-2", "node/node-3", "node/node-1"):
        assert [o.verdict for o in emu.connect(src, KUBERNETES, 443, n=2)] == ["refused"] * 2
    # the real backend starts servers only in pods, on their containerPorts: no node
    # namespace listens on 6443 either, so the kernel resets the connection (refused)
    servers = server_ports(v.listeners)
    assert all(not ns.startswith("node/") for ns in v.listeners)
    assert not any(port == SECURE_PORT for ports in servers.values() for port, _ in ports)


def test_no_service_and_no_slice_when_the_cluster_says_so() -> None:
    api = make_api(nodes=2, kubernetesService=False, dns=False)  # no system Service at all
    assert [s.key for s in api.store.list("Service")] == []
    assert [s.key for s in api.store.list("EndpointSlice")] == []
    assert api.reconcile_kubernetes_endpoints() is None
    s = Session.ephemeral(
        load_text(manifest(extra=", kubernetesService: false, dns: false"), source="k")
    )
    s.converge()
    assert s.store.list("EndpointSlice") == []
    for state in s.rules.nodes.values():
        assert KUBERNETES_CHAIN not in state.save_text and KUBERNETES not in state.save_text


def test_the_endpointslice_controller_leaves_it_alone() -> None:
    web = (
        "---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\n"
        "spec: {selector: {app: web}, ports: [{port: 80}]}\n"
    )
    s = Session.ephemeral(load_text(manifest() + web, source="k.yaml"))
    s.converge()
    sl = the_slice(s.store.get("EndpointSlice", "default/kubernetes"))
    assert sl.metadata.generation == 1
    assert "endpointslice.kubernetes.io/managed-by" not in sl.labels
    others = [x for x in s.store.list("EndpointSlice") if x.key != "default/kubernetes"]
    # the controller's own slices: web's and kube-dns's (cluster DNS, on by default)
    assert sorted(the_slice(x).service_name for x in others) == ["kube-dns", "web"]


def test_stable_across_restarts_of_a_persistent_cluster(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Session.open(state, must_exist=False)
    first.apply(load_text(manifest(pods=False), source="k.yaml"))
    before = the_slice(first.store.get("EndpointSlice", "default/kubernetes"))
    first.close()
    for _ in range(2):
        again = Session.open(state)
        again.converge()
        after = the_slice(again.store.get("EndpointSlice", "default/kubernetes"))
        # the same object, not rewritten: same uid and resourceVersion
        assert after == before
        assert after.endpoints[0].addresses == ["172.18.0.2"]
        # a converged persistent store starts no control plane: the node's rules are
        # rendered from the store when asked for (control.noderules)
        assert again.lazy_rules is not None
        assert f"172.18.0.2:{SECURE_PORT}" in again.lazy_rules.state("node-3").save_text
        again.close()


def test_cli_get_endpointslices_shows_it(tmp_path: Path) -> None:
    state, cfile = tmp_path / "state", tmp_path / "c.yaml"
    cfile.write_text(manifest(pods=False))
    runner = CliRunner()
    res = runner.invoke(cli, ["--state", str(state), "apply", "-f", str(cfile)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["--state", str(state), "get", "endpointslices", "-n", "default"])
    assert res.exit_code == 0, res.output
    header, *rows = res.output.splitlines()
    assert header.split()[:4] == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS"]
    assert [r.split()[:4] for r in rows] == [["kubernetes", "IPv4", "6443", "172.18.0.2"]]
