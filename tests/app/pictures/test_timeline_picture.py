"""The event timeline as a sequence diagram: lanes, arrows carrying each Event's reason
and store revision, the --for filter that follows ownerReferences; Graphviz and
Mermaid renderings."""

from __future__ import annotations

import re

from conftest import svg_texts

from app.pictures.files import render_graph
from app.pictures.scene import pod_nodes
from app.pictures.sequence import mermaid_id, sequence_graph, sequence_mermaid
from app.pictures.timeline import caused_by, events_caused, sequence
from control.agents import nodelease
from control.clock import FakeClock
from control.events import timeline
from control.runner import ControlPlane
from control.session import Session
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import EndpointSlice, Pod, ReplicaSet


def test_lanes_and_messages_of_the_3_node_apply(web3: Session) -> None:
    events = timeline(web3.store)
    tl = sequence(events, pod_nodes(web3))
    assert tl.lanes[:3] == ("kubectl", "apiserver", "store")
    # kubelets, then kube-proxies, each in the order they first acted
    assert sorted(tl.lanes[-6:-3]) == [f"kubelet node-{i}" for i in (1, 2, 3)]
    assert sorted(tl.lanes[-3:]) == [f"kube-proxy node-{i}" for i in (1, 2, 3)]
    for lane in ("deployment-controller", "replicaset-controller", "default-scheduler"):
        assert lane in tl.lanes
    assert tl.lanes.index("default-scheduler") > tl.lanes.index("replicaset-controller")
    # every write the apiserver recorded: requester -> apiserver, then apiserver -> store
    writes = [e for e in events if e.reason == "Created"]
    stores = [m for m in tl.messages if m.target == "store"]
    assert {m.text for m in stores} >= {f"write rev {e.revision}" for e in writes}
    first = tl.messages[
        tl.messages.index(next(m for m in tl.messages if "deployment/web" in m.text))
    ]
    assert (first.source, first.target, first.text) == (
        "kubectl",
        "apiserver",
        "Created deployment/web",
    )
    # each pod's sandbox and CNI ADD on its own node's kubelet lane
    for p in web3.store.list("Pod"):
        assert isinstance(p, Pod)
        (sandbox,) = [m for m in tl.messages if f"SandboxCreated pod/{p.name}" in m.text]
        assert sandbox.source == sandbox.target == f"kubelet {p.spec.node_name}"
        assert f"CNI ADD: eth0 {p.status.pod_ip}/24" in sandbox.text
        (started,) = [m for m in tl.messages if m.text.startswith(f"Started pod/{p.name}")]
        assert (started.source, started.target) == (f"kubelet {p.spec.node_name}", "apiserver")
    syncs = [m for m in tl.messages if m.text.startswith("SyncProxyRules node/")]
    assert {m.source for m in syncs} == {f"kube-proxy node-{i}" for i in (1, 2, 3)}
    assert [m.sequence for m in tl.messages] == sorted(m.sequence for m in tl.messages)


def test_for_follows_owner_references(web3: Session) -> None:
    deploy = web3.store.get("Deployment", "default/web")
    objects = [o for k in ("ReplicaSet", "Pod", "EndpointSlice") for o in web3.store.list(k)]
    caused = caused_by(deploy, objects)
    # web's own (kube-system's coredns ReplicaSet and pods are not caused by it)
    rs = [
        o
        for o in web3.store.list("ReplicaSet")
        if isinstance(o, ReplicaSet) and o.namespace == "default"
    ]
    pods = [o for o in web3.store.list("Pod") if isinstance(o, Pod) and o.namespace == "default"]
    web_slices = [
        o
        for o in web3.store.list("EndpointSlice")
        if isinstance(o, EndpointSlice) and o.service_name == "web"
    ]
    assert caused == {("Deployment", "default", "web")} | {
        (o.kind, o.namespace or "", o.name) for o in [*rs, *pods, *web_slices]
    }
    mine = events_caused(timeline(web3.store), caused)
    subjects = {(e.involved_object.kind, e.involved_object.name) for e in mine}
    assert ("Service", "web") not in subjects
    assert {e.reason for e in mine} >= {
        "Created",
        "ScalingReplicaSet",
        "SuccessfulCreate",
        "Scheduled",
        "SandboxCreated",
        "Started",
        "SyncProxyRules",
    }
    # Node events are kube-proxy syncs after the web EndpointSlice, nothing else
    assert {e.reason for e in mine if e.involved_object.kind == "Node"} == {"SyncProxyRules"}
    assert not any(e.involved_object.name == "kubernetes" for e in mine)


def test_the_svg_has_a_lane_head_per_lane_and_numbered_arrows(web3: Session) -> None:
    tl = sequence(timeline(web3.store), pod_nodes(web3))
    texts = svg_texts(render_graph(sequence_graph(tl, title="apply"), "svg"))
    for lane in tl.lanes:
        assert lane in texts
    numbered = [t for t in texts if re.match(r"^\d+\. ", t)]
    assert len(numbered) == len(tl.messages)
    for j, m in enumerate(tl.messages):
        if m.target == "store":  # arrows carry the store revision
            assert f"{j + 1}. {m.text}" in numbered


def test_mermaid_text_is_well_formed(web3: Session) -> None:
    tl = sequence(timeline(web3.store), pod_nodes(web3))
    text = sequence_mermaid(tl, title="apply of web.yaml")
    lines = text.splitlines()
    assert lines[0] == "sequenceDiagram" and lines[1] == "    title apply of web.yaml"
    declared: set[str] = set()
    arrows = 0
    for line in lines[2:]:
        if line == "    autonumber":
            continue
        if m := re.fullmatch(r"    (actor|participant) ([A-Za-z0-9_]+) as ([^;#\n]+)", line):
            assert m[2] not in declared
            declared.add(m[2])
            continue
        m = re.fullmatch(r"    ([A-Za-z0-9_]+)->>([A-Za-z0-9_]+): ([^;#\n]+)", line)
        assert m, line
        assert m[1] in declared and m[2] in declared, line
        arrows += 1
    assert arrows == len(tl.messages)
    assert declared == {mermaid_id(lane) for lane in tl.lanes}


def test_20_nodes_share_node_lanes(cluster20: Session) -> None:
    tl = sequence(timeline(cluster20.store), pod_nodes(cluster20))
    assert "kube-proxy (20 nodes)" in tl.lanes
    kubelets = [lane for lane in tl.lanes if lane.startswith("kubelet")]
    assert len(kubelets) == 1 and re.fullmatch(r"kubelet \(\d+ nodes\)", kubelets[0])
    syncs = [m for m in tl.messages if "SyncProxyRules" in m.text]
    assert {m.text.split(":", 1)[0] for m in syncs} == {f"node-{i}" for i in range(1, 21)}
    assert len(tl.lanes) <= 12  # legible: one lane per component, not per node
    texts = svg_texts(render_graph(sequence_graph(tl), "svg"))
    assert "kube-proxy (20 nodes)" in texts


def test_writes_without_events_leave_the_steps_after_them_steps() -> None:
    """A kubelet's Lease renewal is a write without an Event: the sandbox another
    kubelet creates after it is still a step of that kubelet (no write), its status
    write still one (requester -> apiserver -> store)."""
    clock = FakeClock()
    cluster = ClusterSpec.model_validate({"nodes": 2, "dns": False})
    plane = ControlPlane(MemoryStore(), cluster, seed=1, clock=clock)
    plane.start()
    plane.run_until_idle()
    clock.advance(nodelease.RENEW_INTERVAL)  # every Lease is due at the next sync
    rev = plane.store.revision
    pods = [
        object_from_dict(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"p{i}", "namespace": "default"},
                "spec": {"nodeName": f"node-{i}", "containers": [{"name": "c", "image": "x"}]},
            }
        )
        for i in (1, 2)
    ]
    plane.apply(pods)
    plane.run_until_idle()
    events = [e for e in timeline(plane.store) if e.sequence > rev]
    renewed = [
        o for o in plane.store.list("Lease", nodelease.NAMESPACE) if o.resource_version > rev
    ]
    assert len(renewed) == 2  # written, with no Event
    assert not any(e.involved_object.kind == "Lease" for e in events)
    tl = sequence(events, {f"default/p{i}": f"node-{i}" for i in (1, 2)})
    for i in (1, 2):
        (sandbox,) = [m for m in tl.messages if m.text.startswith(f"SandboxCreated pod/p{i}")]
        assert sandbox.source == sandbox.target == f"kubelet node-{i}"
        (started,) = [m for m in tl.messages if m.text.startswith(f"Started pod/p{i}")]
        assert (started.source, started.target) == (f"kubelet node-{i}", "apiserver")
    assert not any("lease" in m.text for m in tl.messages)
