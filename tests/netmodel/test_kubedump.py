"""``kubectl get -A -o yaml`` dumps as apply input: List documents, server-set metadata,
kinds svclab does not model (skipped, counted), and the Cluster inferred."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from app.cli.main import cli
from netmodel.errors import InputError
from netmodel.manifests import load, load_text, parse_documents

DUMP = Path(__file__).resolve().parents[1] / "data" / "kubectl-dumps" / "small-list.yaml"


def test_dump_is_read_with_the_cluster_inferred() -> None:
    m = load([DUMP])
    assert dict(m.skipped) == {}  # ConfigMap and ServiceAccount come in (generic kinds)
    assert m.cluster is not None
    spec = m.cluster.spec
    assert spec.service_cidr == "10.8.0.0/20"
    assert spec.pod_cidr == "10.4.1.0/24" and spec.node_cidr_mask_size == 24
    assert spec.proxy_mode == "ipvs" and spec.allocation == "recorded"
    assert spec.kubernetes_service is False and spec.node_count == 0
    # a dump is the whole state: the import creates no cluster DNS of its own
    assert spec.dns is False
    assert any("inferred" in w for w in m.warnings)
    assert sorted(o.ref for o in m.objects) == [
        "ConfigMap/kube-system/kube-proxy",
        "Node/worker-1",
        "Service/default/kubernetes",
        "Service/shop/web",
        "ServiceAccount/shop/default",
    ]


def test_service_cidr_objects_win_over_inference() -> None:
    doc = yaml.safe_load(DUMP.read_text())
    doc["items"].append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "ServiceCIDR",
            "metadata": {"name": "kubernetes", "uid": "x"},
            "spec": {"cidrs": ["10.8.0.0/16"]},
        }
    )
    m = load_text(json.dumps(doc), source="dump.json")  # -o json is YAML too
    assert m.cluster is not None and m.cluster.spec.service_cidr == "10.8.0.0/16"
    assert not [w for w in m.warnings if "serviceCIDR" in w]


def test_hand_written_manifests_still_refuse_unknown_kinds() -> None:
    text = "apiVersion: v1\nkind: DaemonSetz\nmetadata: {name: a}\n"
    with pytest.raises(InputError, match="unknown kind 'DaemonSetz'"):
        load_text(text, source="m.yaml")


def test_apply_keeps_recorded_cluster_ips_and_node_ports(tmp_path: Path) -> None:
    run = CliRunner().invoke
    r = run(cli, ["--state", str(tmp_path / "s"), "apply", "-f", str(DUMP)])
    assert r.exit_code == 0, r.output
    assert "skipped" not in r.output
    r = run(cli, ["--state", str(tmp_path / "s"), "get", "svc", "-A", "-o", "json"])
    items = {i["metadata"]["name"]: i for i in json.loads(r.output)["items"]}
    assert items["web"]["spec"]["clusterIP"] == "10.8.12.34"
    assert items["web"]["spec"]["ports"][0]["nodePort"] == 31234
    assert items["kubernetes"]["spec"]["clusterIP"] == "10.8.0.1"


PODS = DUMP.with_name("pods-list.yaml")


def _get(state: Path, kind: str) -> dict[str, dict]:  # type: ignore[type-arg]
    r = CliRunner().invoke(cli, ["--state", str(state), "get", kind, "-A", "-o", "json"])
    assert r.exit_code == 0, r.output
    return {i["metadata"]["name"]: i for i in json.loads(r.output)["items"]}


def test_apply_keeps_recorded_pods_owners_and_pod_ips(tmp_path: Path) -> None:
    """Pods bound to their nodes with their recorded IPs, uids kept (so the owners'
    ReplicaSet and Deployment adopt them instead of replacing them), EndpointSlices
    from those IPs, podCIDRs and ClusterIPs as recorded."""
    s = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(PODS)])
    assert r.exit_code == 0, r.output
    pods = _get(s, "pods")
    assert {n: (p["spec"]["nodeName"], p["status"]["podIP"]) for n, p in pods.items()} == {
        "web-7d9c5b-abcde": ("worker-1", "10.4.1.7"),
        "web-7d9c5b-fghij": ("worker-2", "10.4.2.12"),
    }
    assert pods["web-7d9c5b-abcde"]["metadata"]["uid"] == "p1"
    assert all(p["status"]["phase"] == "Running" for p in pods.values())
    assert list(_get(s, "replicasets")) == ["web-7d9c5b"]
    nodes = _get(s, "nodes")
    assert nodes["worker-2"]["spec"]["podCIDR"] == "10.4.2.0/24"
    assert _get(s, "services")["web"]["spec"]["clusterIP"] == "10.8.3.4"
    (slice_,) = [v for k, v in _get(s, "endpointslices").items() if k.startswith("web-")]
    assert sorted(a for e in slice_["endpoints"] for a in e["addresses"]) == [
        "10.4.1.7",
        "10.4.2.12",
    ]


def test_new_pods_get_free_addresses_beside_recorded_ones(tmp_path: Path) -> None:
    """A later pod on the node is given an address no recorded pod holds; a pod replayed
    later with its address keeps it (the kubelet reserves it, never reallocates)."""
    s = tmp_path / "s"
    doc = yaml.safe_load(PODS.read_text())
    late = next(i for i in doc["items"] if i["metadata"].get("name") == "web-7d9c5b-abcde")
    doc["items"].remove(late)
    # the first apply has a pod on worker-1 without any address: .2 upwards is free
    doc["items"].append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "solo", "namespace": "default", "uid": "p9"},
            "spec": {"nodeName": "worker-1", "containers": [{"name": "c", "image": "x"}]},
        }
    )
    first = tmp_path / "first.yaml"
    first.write_text(yaml.safe_dump(doc))
    run = CliRunner().invoke
    assert run(cli, ["--state", str(s), "apply", "-f", str(first)]).exit_code == 0
    solo_ip = _get(s, "pods")["solo"]["status"]["podIP"]
    # applied later as a plain manifest (a second dump would infer a second Cluster)
    late_doc = tmp_path / "late.yaml"
    del late["metadata"]["uid"]
    late["status"]["podIP"] = "10.4.1.9"
    late["status"]["podIPs"] = [{"ip": "10.4.1.9"}]
    late_doc.write_text(yaml.safe_dump(late))
    r = run(cli, ["--state", str(s), "apply", "-f", str(late_doc)])
    assert r.exit_code == 0, r.output
    pods = _get(s, "pods")
    assert pods["web-7d9c5b-abcde"]["status"]["podIP"] == "10.4.1.9"
    assert pods["solo"]["status"]["podIP"] == solo_ip != "10.4.1.9"
    # one more pod without an address: neither .9 nor solo's
    extra = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "extra", "namespace": "default"},
        "spec": {"nodeName": "worker-1", "containers": [{"name": "c", "image": "x"}]},
    }
    (tmp_path / "extra.yaml").write_text(yaml.safe_dump(extra))
    assert run(cli, ["--state", str(s), "apply", "-f", str(tmp_path / "extra.yaml")]).exit_code == 0
    ips = [p["status"]["podIP"] for p in _get(s, "pods").values()]
    assert len(ips) == len(set(ips)) == 4


@pytest.mark.parametrize(
    ("ip", "node", "refused", "why"),
    [
        ("10.4.9.7", "worker-1", "abcde", "not in the podCIDR of node worker-1 (10.4.1.0/24)"),
        ("10.4.1.1", "worker-1", "abcde", "the gateway of podCIDR 10.4.1.0/24"),
        (
            "10.4.1.255",
            "worker-1",
            "abcde",
            "the network or broadcast address of podCIDR 10.4.1.0/24",
        ),
        # the second holder in the dump's order is the one refused
        ("10.4.2.12", "worker-2", "fghij", "address already held by Pod/default/web-7d9c5b-abcde"),
    ],
)
def test_recorded_pod_ips_outside_the_node_or_taken_are_refused(
    tmp_path: Path, ip: str, node: str, refused: str, why: str
) -> None:
    doc = yaml.safe_load(PODS.read_text())
    pod = next(i for i in doc["items"] if i["metadata"].get("name") == "web-7d9c5b-abcde")
    pod["spec"]["nodeName"] = node
    pod["status"]["podIP"] = ip
    pod["status"]["podIPs"] = [{"ip": ip}]
    f = tmp_path / "dump.yaml"
    f.write_text(yaml.safe_dump(doc))
    s = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert r.exit_code == 1
    (line,) = r.output.strip().splitlines()[-1:]
    field = "status.podIPs[0].ip"
    assert f"Pod/default/web-7d9c5b-{refused}: {field}: Invalid value: '{ip}': {why}" in line, line
    assert str(f) in line
    assert not (s / "cluster.yaml").exists() or not _get(s, "pods")


GKE = DUMP.with_name("gke-routes-list.yaml")


def test_gke_routes_layout_applies_with_a_warning_and_routes_cluster_ips(tmp_path: Path) -> None:
    """The services range inside the cluster's pod range (kube-proxy's clusterCIDR) is
    accepted with a warning; a ClusterIP inside the pod range is DNATed before routing,
    so it reaches both endpoints, on the emulated cluster and at one node (--at)."""
    s = tmp_path / "s"
    run = CliRunner().invoke
    r = run(cli, ["--state", str(s), "apply", "-f", str(GKE)])
    assert r.exit_code == 0, r.output
    assert "warning: serviceCIDR 10.7.240.0/21 lies inside podCIDR 10.4.0.0/14" in r.output
    pods = _get(s, "pods")
    assert {n: p["status"]["podIP"] for n, p in pods.items()} == {
        "client": "10.4.0.6",
        "web-0": "10.4.0.5",
        "web-1": "10.4.1.9",
    }
    # on the applied state, and on a throw-away cluster built from the dump (-f): its
    # Nodes come from the dump, and each runs a kube-proxy all the same
    bases = [["--state", str(s), "trace"], ["trace", "-f", str(GKE)]]
    wheres = (
        ["--from", "pod/default/client"],
        ["--from", "10.128.0.9", "--at", "node/gke-pool-1-a"],
    )
    for base in bases:
        for where in wheres:
            r = run(
                cli,
                [*base, "--proto", "tcp", "--all", "-o", "json", *where, "--to", "10.7.245.17:80"],
            )
            assert r.exit_code == 0, r.output
            out = json.loads(r.output)
            got = sorted(e["endpoint"] for e in out["endpoints"])
            assert got == ["10.4.0.5:8080", "10.4.1.9:8080"], (base, where, out)


# --------------------------------------------------------------------------- real dumps
# (tests/data/kubectl-dumps/SOURCE.md says where each comes from)

DUMPS = DUMP.parent
OPENSHIFT3 = [DUMPS / f"openshift3-{k}.yaml" for k in ("services", "pods", "endpoints")]


def test_openshift3_dump_with_legacy_fields_applies(tmp_path: Path) -> None:
    """OpenShift 3's ``oc get -o yaml`` prints a Service's ``portalIP`` beside its
    ``clusterIP``, a Pod's ``host`` beside its ``nodeName``, and timestamps unquoted:
    read as kube-apiserver reads them, the recorded addresses kept."""
    s = tmp_path / "s"
    argv = ["--state", str(s), "apply"] + [a for f in OPENSHIFT3 for a in ("-f", str(f))]
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 0, r.output
    # the recorded Endpoints are not skipped: compared with what svclab computes from
    # the EndpointSlices (this dump has none: OpenShift 3 predates them)
    assert "skipped" not in r.output
    assert (
        "warning: Endpoints/default/kubernetes: recorded addresses 10.66.219.113, computed "
        "<none>; recorded ports dns-tcp:8053/TCP,dns:8053/UDP,https:8443/TCP, computed <none>"
    ) in r.output
    assert (
        "warning: Endpoints/default/gluster-cluster: recorded, but there is no Service "
        "default/gluster-cluster to compute it from"
    ) in r.output
    assert "serviceCIDR 172.30.0.0/16 inferred" in r.output
    svcs = _get(s, "services")
    assert {n: v["spec"]["clusterIP"] for n, v in svcs.items()} == {
        "kubernetes": "172.30.0.1",
        "router-1": "172.30.210.0",
    }
    assert svcs["kubernetes"]["spec"]["sessionAffinity"] == "ClientIP"
    pods = _get(s, "pods")
    assert {n: (p["spec"]["nodeName"], p["status"]["podIP"]) for n, p in pods.items()} == {
        "hello-pod": ("node2.ose.com", "10.1.0.3"),
        "router-1-1-w27o2": ("node1.ose.com", "10.66.208.229"),
    }


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [("Service", "portalIP", "172.30.0.9"), ("Pod", "host", "node9.ose.com")],
)
def test_legacy_field_disagreeing_is_refused(
    tmp_path: Path, kind: str, field: str, value: str
) -> None:
    src = OPENSHIFT3[0] if kind == "Service" else OPENSHIFT3[1]
    doc = yaml.safe_load(src.read_text())
    doc["items"][0]["spec"][field] = value
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    s = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(bad)])
    assert r.exit_code == 1
    line = r.output.strip().splitlines()[-1]
    assert str(bad) in line and "(document 1)" in line and f"spec.{field}:" in line
    assert "legacy field disagrees" in line
    r = CliRunner().invoke(cli, ["--state", str(s), "get", "pods", "-A"])
    assert "no cluster here yet" in r.output  # nothing was stored


def test_unquoted_timestamps_stay_strings() -> None:
    """As in Kubernetes (YAML read as JSON): ``2017-02-10T16:33:46Z`` unquoted is a string."""
    (pod, _) = parse_documents(OPENSHIFT3[1].read_text(), source="pods.yaml")
    assert pod["metadata"]["creationTimestamp"] == "2017-02-10T16:33:46Z"
    assert pod["status"]["conditions"][0]["lastTransitionTime"] == "2017-02-10T16:33:46Z"
    assert {type(p).__name__ for p in load([OPENSHIFT3[1]]).objects} == {"Pod"}


def test_kind_pods_list_yaml_and_json_mean_the_same(tmp_path: Path) -> None:
    """A kind cluster's ``kubectl get pods -o yaml`` and ``-o json`` (a v1 List, selfLink,
    container statuses): the same Pods, bound to the node with their recorded IPs."""
    got = []
    for ext in ("yaml", "json"):
        s = tmp_path / ext
        r = CliRunner().invoke(
            cli, ["--state", str(s), "apply", "-f", str(DUMPS / f"kind-pods-list.{ext}")]
        )
        assert r.exit_code == 0, r.output
        pods = _get(s, "pods")
        got.append({n: (p["spec"]["nodeName"], p["status"]["podIP"]) for n, p in pods.items()})
    assert got[0] == got[1] == {
        "t1": ("116-control-plane", "10.244.0.5"),
        "t2": ("116-control-plane", "10.244.0.7"),
    }


def test_eks_host_network_pod_keeps_its_node_and_address(tmp_path: Path) -> None:
    """A real DaemonSet Pod (hostNetwork, owned by a DaemonSet the dump lacks) applies
    bound to its node with the node's address, and stays (nothing collects it)."""
    s = tmp_path / "s"
    dump = DUMPS / "eks-aws-node-pod.yaml"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(dump)])
    assert r.exit_code == 0, r.output
    pod = _get(s, "pods")["aws-node-mbmjp"]
    assert pod["spec"]["nodeName"] == "ip-172-31-0-225.ap-southeast-2.compute.internal"
    assert pod["spec"]["hostNetwork"] is True
    assert pod["status"]["podIP"] == "172.31.0.225"
    assert pod["metadata"]["uid"] == "e3776cf9-85ce-40f3-8af5-7d7c95287294"


def test_typed_node_list_of_a_pre_1_0_cluster(tmp_path: Path) -> None:
    """What the API returns for ``/api/v1/nodes`` on a 2015 cluster (Kubernetes v0.19):
    a ``NodeList`` whose items carry no kind or apiVersion, and ``LegacyHostIP``
    addresses. The items are Nodes, the legacy address their InternalIP (so the node
    network is inferred from it)."""
    dump = DUMPS / "k8s-0.19-vagrant-nodelist.json"
    m = load([dump])
    assert [(type(o).__name__, o.metadata.name) for o in m.objects] == [
        ("Node", "10.245.1.3"),
        ("Node", "10.245.1.4"),
        ("Node", "10.245.1.5"),
    ]
    assert m.cluster is not None and m.cluster.spec.node_network == "10.245.1.0/24"
    s = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(dump)])
    assert r.exit_code == 0, r.output
    nodes = _get(s, "nodes")
    assert {n: v["status"]["addresses"] for n, v in nodes.items()}["10.245.1.4"] == [
        {"type": "InternalIP", "address": "10.245.1.4"}
    ]
    assert nodes["10.245.1.3"]["metadata"]["uid"] == "d94d0f69-4239-11e5-9586-0800279dd272"


def test_typed_lists_unfold_with_kind_and_api_version() -> None:
    text = json.dumps(
        {
            "kind": "ServiceList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "7"},
            "items": [
                {
                    "metadata": {"name": "a", "namespace": "default", "uid": "u1"},
                    "spec": {"clusterIP": "10.0.0.1", "ports": [{"port": 80}]},
                }
            ],
        }
    )
    (doc,) = parse_documents(text, source="svcs.json")
    assert (doc["kind"], doc["apiVersion"], doc["metadata"]["name"]) == ("Service", "v1", "a")
def _with_node(doc: dict, name: str, cidr: str, ip: str) -> dict:  # type: ignore[type-arg]
    doc = json.loads(json.dumps(doc))
    node = next(i for i in doc["items"] if i["kind"] == "Node")
    node = json.loads(json.dumps(node))
    node["metadata"].update(name=name, uid=f"uid-{name}")
    node["spec"].update(podCIDR=cidr, podCIDRs=[cidr])
    node["status"]["addresses"] = [{"type": "InternalIP", "address": ip}]
    doc["items"].append(node)
    return doc


def test_a_later_dump_of_the_same_cluster_applies_as_an_update(tmp_path: Path) -> None:
    """The same dump twice: nothing changes. An updated dump whose inferred ranges reach
    past the stored (inferred) ones (a Node whose podCIDR is outside the podCIDR the
    first dump implied): the stored Cluster widens, cluster.yaml says so, the new
    Node is created and the old objects are kept."""
    s = tmp_path / "s"
    run = CliRunner().invoke
    assert run(cli, ["--state", str(s), "apply", "-f", str(PODS)]).exit_code == 0
    r = run(cli, ["--state", str(s), "apply", "-f", str(PODS)])
    assert r.exit_code == 0, r.output
    assert "cluster.svclab.dev/imported unchanged" in r.output
    assert "pod/web-7d9c5b-abcde unchanged" in r.output
    before = yaml.safe_load((s / "cluster.yaml").read_text())["spec"]
    doc = _with_node(yaml.safe_load(PODS.read_text()), "worker-3", "10.4.7.0/24", "10.128.0.77")
    f = tmp_path / "later.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = run(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert r.exit_code == 0, r.output
    assert "cluster.svclab.dev/imported configured" in r.output
    assert "node/worker-3 created" in r.output
    after = yaml.safe_load((s / "cluster.yaml").read_text())["spec"]
    assert (before["podCIDR"], after["podCIDR"]) == ("10.4.0.0/22", "10.4.0.0/21")
    assert after["serviceCIDR"] == before["serviceCIDR"]
    nodes = _get(s, "nodes")
    assert nodes["worker-3"]["spec"]["podCIDR"] == "10.4.7.0/24"
    assert _get(s, "pods")["web-7d9c5b-abcde"]["status"]["podIP"] == "10.4.1.7"


def test_a_dump_of_a_different_cluster_is_refused_naming_the_field(tmp_path: Path) -> None:
    """Another proxy mode: one line naming the Cluster and the field; nothing stored
    changes."""
    s = tmp_path / "s"
    run = CliRunner().invoke
    assert run(cli, ["--state", str(s), "apply", "-f", str(DUMP)]).exit_code == 0
    stored = (s / "cluster.yaml").read_text()
    f = tmp_path / "other.yaml"
    f.write_text(DUMP.read_text().replace("mode: ipvs", "mode: iptables"))
    r = run(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert r.exit_code == 1
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: Cluster/imported: spec.proxyMode: the dump gives 'iptables'")
    assert (s / "cluster.yaml").read_text() == stored


def test_a_hand_written_cluster_is_not_widened_by_a_dump(tmp_path: Path) -> None:
    s = tmp_path / "s"
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nmetadata: {name: imported}\n"
        "spec: {serviceCIDR: 10.8.0.0/16, podCIDR: 10.4.0.0/22, nodeNetwork: 10.128.0.0/24,"
        " allocation: recorded, kubernetesService: false, nodes: 0}\n"
    )
    run = CliRunner().invoke
    assert run(cli, ["--state", str(s), "apply", "-f", str(cluster)]).exit_code == 0
    doc = _with_node(yaml.safe_load(PODS.read_text()), "worker-3", "10.4.7.0/24", "10.128.0.77")
    f = tmp_path / "later.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = run(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert r.exit_code == 1
    assert "Cluster/imported: spec.podCIDR: the dump needs 10.4.0.0/21, outside 10.4.0.0/22" in (
        r.output
    )
    assert "node/worker-3" not in r.output


def test_a_refused_later_dump_leaves_the_stored_cluster_as_it_was(tmp_path: Path) -> None:
    """The later dump would widen the podCIDR but one of its Pods is refused: nothing
    stored changes, cluster.yaml included."""
    s = tmp_path / "s"
    run = CliRunner().invoke
    assert run(cli, ["--state", str(s), "apply", "-f", str(PODS)]).exit_code == 0
    stored = (s / "cluster.yaml").read_text()
    doc = _with_node(yaml.safe_load(PODS.read_text()), "worker-3", "10.4.7.0/24", "10.128.0.77")
    pod = next(i for i in doc["items"] if i["metadata"].get("name") == "web-7d9c5b-abcde")
    pod = json.loads(json.dumps(pod))
    pod["metadata"].update(name="web-7d9c5b-new", uid="uid-new")
    pod["status"]["podIP"] = "10.4.7.9"  # not in worker-1's podCIDR
    pod["status"]["podIPs"] = [{"ip": "10.4.7.9"}]
    doc["items"].append(pod)
    f = tmp_path / "later.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = run(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert r.exit_code == 1
    assert "not in the podCIDR of node worker-1" in r.output
    assert (s / "cluster.yaml").read_text() == stored
    assert "worker-3" not in _get(s, "nodes")


def _calico_pod_dump(tmp_path: Path, *, cluster: str | None = None) -> Path:
    """The pods dump with web's pod given a Calico block address outside its node's
    podCIDR (and Calico's annotations); ``cluster``: a Cluster document put first."""
    doc = yaml.safe_load(PODS.read_text())
    pod = next(i for i in doc["items"] if i["metadata"].get("name") == "web-7d9c5b-abcde")
    pod["metadata"].setdefault("annotations", {}).update(
        {
            "cni.projectcalico.org/podIP": "10.4.3.66/32",
            "cni.projectcalico.org/podIPs": "10.4.3.66/32",
            "cni.projectcalico.org/containerID": "0f1e2d3c",
        }
    )
    pod["status"]["podIP"] = "10.4.3.66"
    pod["status"]["podIPs"] = [{"ip": "10.4.3.66"}]
    f = tmp_path / "calico.yaml"
    text = yaml.safe_dump(doc)
    f.write_text(f"{cluster}\n---\n{text}" if cluster else text)
    return f


def test_a_calico_block_address_is_kept_in_a_cluster_inferred_as_calico(tmp_path: Path) -> None:
    """Calico's block IPAM gives a Pod an address from a /26 block affine to its node,
    outside the node's podCIDR. The dump shows Calico (the Pod's annotations), so the
    Cluster is inferred with ``cni: calico`` and the address is kept as recorded."""
    f = _calico_pod_dump(tmp_path)
    s = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load((s / "cluster.yaml").read_text())["spec"]["cni"] == "calico"
    pods = _get(s, "pods")
    assert pods["web-7d9c5b-abcde"]["status"]["podIP"] == "10.4.3.66"
    assert pods["web-7d9c5b-abcde"]["spec"]["nodeName"] == "worker-1"
    again = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert again.exit_code == 0, again.output  # the stored Cluster reads back the same


def test_a_calico_block_address_is_refused_in_a_flannel_cluster_saying_why(
    tmp_path: Path,
) -> None:
    """A Cluster written with ``cni: flannel`` routes each node's podCIDR only: the
    Calico address is refused, and the message names Calico's annotation and the fix."""
    cluster = (
        "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c}\n"
        "spec: {cni: flannel, serviceCIDR: 10.8.0.0/20, podCIDR: 10.4.0.0/16, "
        "nodes: 0, allocation: recorded, kubernetesService: false}"
    )
    f = _calico_pod_dump(tmp_path, cluster=cluster)
    s = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert r.exit_code == 1
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert "status.podIPs[0].ip" in line
    assert "not in the podCIDR of node worker-1 (10.4.1.0/24)" in line
    assert "Calico's block IPAM (cni.projectcalico.org/podIP: 10.4.3.66/32)" in line
    assert "cni: calico" in line
    assert not (s / "cluster.yaml").exists() or "worker-1" not in _get(s, "nodes")


def test_empty_lists_encoded_with_null_items_are_empty() -> None:
    """The API server encodes an empty list's ``items`` as ``null`` (a Go nil slice): no
    objects, nothing skipped (they were counted as objects of kind ``ServiceList``)."""
    docs = "\n---\n".join(
        json.dumps({"kind": kind, "apiVersion": "v1", "metadata": {}, "items": None})
        for kind in ("ServiceList", "List")
    )
    assert parse_documents(docs, source="x") == []
    m = load_text(docs, source="x")
    assert not m.objects and not m.skipped


K3S = DUMPS / "k3s-support-bundle"


def _recorded(kind: str) -> dict[tuple[str | None, str], dict]:  # type: ignore[type-arg]
    files = [K3S / f"{kind}.json"] if kind == "nodes" else sorted((K3S / kind).glob("*.json"))
    out = {}
    for f in files:
        for i in json.loads(f.read_text())["items"] or []:
            out[(i["metadata"].get("namespace"), i["metadata"]["name"])] = i
    return out


def _owner_kinds(obj: dict) -> list[str]:  # type: ignore[type-arg]
    return [o["kind"] for o in obj["metadata"].get("ownerReferences") or []]


def test_k3s_support_bundle_applies_and_reads_back_as_recorded(tmp_path: Path) -> None:
    """A real k3s cluster's API objects as a support bundle holds them (one typed list per
    kind and namespace, empty ones ``items: null``): ``apply -f DIR`` takes the whole
    directory, compares its recorded Endpoints with the ones svclab computes, and
    Services, EndpointSlices, Nodes and Pods read back as recorded (SOURCE.md: where it
    comes from)."""
    s = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(K3S)])
    assert r.exit_code == 0, r.output
    # nothing skipped: the 4 recorded Endpoints are compared with the ones svclab
    # computes from the applied EndpointSlices, and agree (no warning)
    assert "skipped" not in r.output
    assert "warning: Endpoints/" not in r.output
    # k3s's cluster range (10.42.0.0/16) is in no object: the one Node's /24 is a lower bound
    assert "warning: podCIDR 10.42.0.0/24 inferred from the Nodes' podCIDRs" in r.output
    for kind in ("services", "endpointslices", "nodes", "pods"):
        want = _recorded(kind)
        if kind == "pods":
            # the bundle holds no Jobs: the garbage collector removes the pods of the two
            # helm-install Jobs, whose owners are gone, as kube-controller-manager's would
            orphans = {k for k, v in want.items() if _owner_kinds(v) == ["Job"]}
            assert len(orphans) == 2
            want = {k: v for k, v in want.items() if k not in orphans}
        got = {(i["metadata"].get("namespace"), n): i for n, i in _get(s, kind).items()}
        assert sorted(got, key=str) == sorted(want, key=str), kind
        for key, rec in want.items():
            back = got[key]
            if kind == "services":
                assert back["spec"] == rec["spec"], key
            elif kind == "endpointslices":
                assert back["addressType"] == rec["addressType"]
                assert back["endpoints"] == rec["endpoints"], key

                def ports(p: list[dict]) -> list[tuple]:  # type: ignore[type-arg]
                    return sorted((x["name"], x["protocol"], x["port"]) for x in p)

                assert ports(back["ports"]) == ports(rec["ports"]), key
            elif kind == "nodes":
                assert back["spec"] == rec["spec"]
                assert back["status"]["addresses"] == rec["status"]["addresses"]
            else:
                assert back["spec"]["nodeName"] == rec["spec"]["nodeName"], key
                assert back["status"]["podIPs"] == rec["status"]["podIPs"], key
    (traefik,) = [v for k, v in _recorded("services").items() if k[1] == "traefik"]
    assert [p["nodePort"] for p in traefik["spec"]["ports"]] == [30885, 30687]


def test_a_calico_address_outside_every_ip_pool_is_refused(tmp_path: Path) -> None:
    cluster = (
        "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c}\n"
        "spec: {cni: calico, calico: {ipPools: [10.4.0.0/22]}, serviceCIDR: 10.8.0.0/20, "
        "podCIDR: 10.4.0.0/16, nodes: 0, allocation: recorded, kubernetesService: false}"
    )
    f = _calico_pod_dump(tmp_path, cluster=cluster)
    text = f.read_text().replace("10.4.3.66", "10.4.9.66")
    f.write_text(text)
    r = CliRunner().invoke(cli, ["--state", str(tmp_path / "s"), "apply", "-f", str(f)])
    assert r.exit_code == 1
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert "Pod/default/web-7d9c5b-abcde" in line and "status.podIPs[0].ip" in line
    assert "'10.4.9.66': not in any of Calico's IP pools (10.4.0.0/22" in line


CALICO = Path(__file__).resolve().parents[1] / "data" / "kubectl-dumps" / "calico-kubeadm-list.yaml"


def test_a_calico_dump_infers_cni_calico_and_its_ip_pools() -> None:
    m = load([CALICO])
    assert m.cluster is not None
    spec = m.cluster.spec
    assert spec.cni == "calico" and "overlay" not in spec.model_fields_set
    [pool] = spec.calico.ip_pools
    assert (pool.cidr, pool.nat_outgoing) == ("192.168.0.0/16", True)  # the IPPool's own
    assert spec.calico.block_size == 26
    assert spec.pod_cidr == "192.168.0.0/16" and spec.calico.block_affinities == []
    assert m.skipped == ()  # the IPPool comes in too (a custom resource, shipped CRD)
    assert [o.name for o in m.objects if o.kind == "IPPool"] == ["default-ipv4-ippool"]
    # natOutgoing is modelled now: the IPPool (ipipMode/vxlanMode Never) says nothing
    assert not [w for w in m.warnings if "IPPool" in w]


def _calico_items(drop: tuple[str, ...] = ()) -> dict:  # type: ignore[type-arg]
    doc = yaml.safe_load(CALICO.read_text())
    doc["items"] = [i for i in doc["items"] if i["kind"] not in drop]
    return doc  # type: ignore[no-any-return]


def test_block_affinities_are_read_and_pools_inferred_from_pod_addresses() -> None:
    doc = _calico_items(drop=("IPPool", "ConfigMap"))
    for i in doc["items"]:  # podCIDRs from another range, as kubeadm's default is
        if i["kind"] == "Node":
            i["spec"]["podCIDR"] = i["spec"]["podCIDRs"][0] = i["spec"]["podCIDR"].replace(
                "192.168.", "10.244."
            )
    doc["items"].append(
        {
            "apiVersion": "crd.projectcalico.org/v1",
            "kind": "BlockAffinity",
            "metadata": {"name": "calico-cp-192-168-171-64-26", "uid": "b1"},
            "spec": {"node": "calico-cp", "cidr": "192.168.171.64/26", "state": "confirmed"},
        }
    )
    doc["items"].append(
        {
            "apiVersion": "crd.projectcalico.org/v1",
            "kind": "BlockAffinity",
            "metadata": {"name": "calico-worker-192-168-35-128-26", "uid": "b2"},
            "spec": {"node": "calico-worker", "cidr": "192.168.35.128/26", "state": "pending"},
        }
    )
    m = load_text(yaml.safe_dump(doc), source="calico.yaml")
    assert m.cluster is not None
    spec = m.cluster.spec
    assert spec.cni == "calico" and spec.pod_cidr == "10.244.0.0/23"
    [pool] = spec.calico.ip_pools  # inferred: calico-node's default pool, natOutgoing
    assert (pool.cidr, pool.nat_outgoing) == ("192.168.0.0/16", True)
    assert [(a.node, a.cidr) for a in spec.calico.block_affinities] == [
        ("calico-cp", "192.168.171.64/26")  # a pending affinity is not the node's yet
    ]
    assert any("Calico IP pool 192.168.0.0/16 inferred" in w for w in m.warnings)


def test_a_later_calico_dump_widens_the_inferred_pools(tmp_path: Path) -> None:
    s = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(CALICO)])
    assert r.exit_code == 0, r.output
    doc = _calico_items()
    pool = next(i for i in doc["items"] if i["kind"] == "IPPool")
    doc["items"].append({**pool, "metadata": {"name": "extra", "uid": "p2"},
                         "spec": {**pool["spec"], "cidr": "172.20.0.0/16",
                                  "natOutgoing": False}})
    f = tmp_path / "later.yaml"
    f.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert r.exit_code == 0, r.output
    stored = yaml.safe_load((s / "cluster.yaml").read_text())["spec"]
    assert stored["calico"]["ipPools"] == [
        {"cidr": "192.168.0.0/16", "natOutgoing": True, "vxlanMode": "Never"},
        {"cidr": "172.20.0.0/16", "natOutgoing": False, "vxlanMode": "Never"},
    ]
    # a dump of the same cluster that showed no sign of Calico was inferred as flannel:
    # the Calico dump is then another cluster
    bare = _calico_items(drop=("Pod", "DaemonSet", "IPPool"))
    first = tmp_path / "bare.yaml"
    first.write_text(yaml.safe_dump(bare))
    s2 = tmp_path / "s2"
    r = CliRunner().invoke(cli, ["--state", str(s2), "apply", "-f", str(first)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["--state", str(s2), "apply", "-f", str(CALICO)])
    assert r.exit_code == 1
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert "spec.cni: the dump gives 'calico'" in line and "'flannel'" in line


def test_a_bad_ip_pool_cidr_is_one_line_naming_file_object_and_field(tmp_path: Path) -> None:
    doc = _calico_items()
    pool = next(i for i in doc["items"] if i["kind"] == "IPPool")
    pool["spec"]["cidr"] = "192.168.0.0/33"
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as err:
        load([f])
    assert str(err.value) == (
        f"{f} (document 12): IPPool/default-ipv4-ippool: spec.cidr: invalid CIDR '192.168.0.0/33'"
    )
    s = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert not (s / "state.db").exists()


def _with_pool(tmp_path: Path, **spec: object) -> Path:
    doc = _calico_items()
    pool = next(i for i in doc["items"] if i["kind"] == "IPPool")
    pool["spec"].update(spec)
    f = tmp_path / "pools.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


def test_an_ip_pools_nat_outgoing_is_read_and_encapsulation_named(tmp_path: Path) -> None:
    m = load([_with_pool(tmp_path, natOutgoing=False)])
    assert m.cluster is not None
    assert [p.nat_outgoing for p in m.cluster.spec.calico.ip_pools] == [False]
    doc = _calico_items()
    pool = next(i for i in doc["items"] if i["kind"] == "IPPool")
    del pool["spec"]["natOutgoing"]  # Calico's API default: false
    m = load_text(yaml.safe_dump(doc), source="p.yaml")
    assert m.cluster is not None
    assert [p.nat_outgoing for p in m.cluster.spec.calico.ip_pools] == [False]
    m = load([_with_pool(tmp_path, vxlanMode="Always")])
    assert m.cluster is not None
    [pool] = m.cluster.spec.calico.ip_pools
    assert (pool.nat_outgoing, pool.vxlan_mode) == (True, "Always")
    assert not [w for w in m.warnings if "IPPool" in w]  # VXLAN is modelled
    m = load([_with_pool(tmp_path, ipipMode="Always")])
    (note,) = [w for w in m.warnings if "IPPool" in w]
    assert note == (
        "Calico IPPool default-ipv4-ippool (192.168.0.0/16): ipipMode Always not modelled "
        "(its blocks are routed without encapsulation, as in Calico's BGP mode)"
    )


def test_a_bad_nat_outgoing_is_one_line_naming_file_object_and_field(tmp_path: Path) -> None:
    f = _with_pool(tmp_path, natOutgoing="yes")
    with pytest.raises(InputError) as err:
        load([f])
    assert str(err.value) == (
        f"{f} (document 12): IPPool/default-ipv4-ippool: spec.natOutgoing: "
        "natOutgoing must be true or false, not 'yes'"
    )
    s = tmp_path / "s"
    r = CliRunner().invoke(cli, ["--state", str(s), "apply", "-f", str(f)])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert not (s / "state.db").exists()


def test_a_bad_vxlan_mode_is_one_line_naming_file_object_and_field(tmp_path: Path) -> None:
    f = _with_pool(tmp_path, vxlanMode="Sometimes")
    with pytest.raises(InputError) as err:
        load([f])
    assert str(err.value) == (
        f"{f} (document 12): IPPool/default-ipv4-ippool: spec.vxlanMode: "
        "vxlanMode must be Never, Always or CrossSubnet, not 'Sometimes'"
    )
