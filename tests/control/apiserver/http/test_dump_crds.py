"""A kubectl dump's custom resources without their CRD, applied with ``svclab apply`` and
then served by ``svclab serve`` to the real kubectl and the official Python client:
the Calico dump's IPPool through the CRD svclab ships (its schema validates what is
written later), a Cilium policy through an inferred CRD that keeps every field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crdhelpers
import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from serving import ROOT, Served

pytestmark = pytest.mark.slow

CALICO = ROOT / "tests" / "data" / "kubectl-dumps" / "calico-kubeadm-list.yaml"

CNP = {
    "apiVersion": "cilium.io/v2",
    "kind": "CiliumNetworkPolicy",
    "metadata": {"name": "allow-web", "namespace": "default", "uid": "u-cnp"},
    "spec": {
        "endpointSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"toPorts": [{"ports": [{"port": "80", "protocol": "TCP"}]}]}],
    },
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One state: the Calico dump and a dump holding a Cilium policy applied with
    ``svclab apply``, then served."""
    tmp = tmp_path_factory.mktemp("dumpcrds")
    s = Served(tmp / "state")
    out = s.svclab("apply", "-f", str(CALICO))
    assert out.returncode == 0, out.stderr
    assert "skipped" not in out.stderr
    assert "customresourcedefinition/ippools.crd.projectcalico.org created" in out.stdout
    assert "ippool/default-ipv4-ippool created" in out.stdout
    cilium = tmp / "cilium.yaml"
    node = yaml.safe_load(CALICO.read_text())["items"][0]
    cilium.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node, CNP]}))
    out = s.svclab("apply", "-f", str(cilium))
    assert out.returncode == 0, out.stderr
    s.cilium_stderr = out.stderr  # type: ignore[attr-defined]
    with crdhelpers.running(s):
        yield s


@pytest.fixture(scope="module")
def api(srv: Served) -> client.ApiClient:
    return config.new_client_from_config(str(srv.kubeconfig))


def test_the_inferred_crd_is_named_in_one_warning_line(srv: Served) -> None:
    lines = [ln for ln in srv.cilium_stderr.splitlines() if "CustomResourceDefinition" in ln]  # type: ignore[attr-defined]
    assert lines == [
        "warning: CiliumNetworkPolicy.cilium.io: no CustomResourceDefinition in the dump for "
        "its 1 object(s); added ciliumnetworkpolicies.cilium.io inferred from them "
        "(Namespaced, served as v2, every field kept)"
    ]


def test_kubectl_gets_the_dumps_ippool(srv: Served) -> None:
    lines = srv.kubectl("get", "ippools").stdout.splitlines()
    assert lines[0].split() == ["NAME", "AGE"] and lines[1].split()[0] == "default-ipv4-ippool"
    got = json.loads(srv.kubectl("get", "ippool", "default-ipv4-ippool", "-o", "json").stdout)
    assert got["apiVersion"] == "crd.projectcalico.org/v1"
    recorded = next(i for i in yaml.safe_load(CALICO.read_text())["items"] if i["kind"] == "IPPool")
    assert got["spec"] == recorded["spec"]
    assert got["metadata"]["uid"] == recorded["metadata"]["uid"]  # kept, as for every kind


def test_the_shipped_crd_is_calicos_and_validates_later_writes(
    srv: Served, api: client.ApiClient
) -> None:
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(
        "ippools.crd.projectcalico.org"
    )
    assert crd.spec.scope == "Cluster" and crd.spec.names.kind == "IPPool"
    assert crd.metadata.annotations["svclab.dev/shipped-from"] == (
        "netmodel/crddata/crd.projectcalico.org_ippools.yaml"
    )
    props = crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"].properties
    assert props["natOutgoing"].type == "boolean" and props["cidr"].type == "string"
    co = client.CustomObjectsApi(api)
    bad = {
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "IPPool",
        "metadata": {"name": "bad"},
        "spec": {"cidr": "172.20.0.0/16", "natOutgoing": "yes"},
    }
    with pytest.raises(ApiException) as ei:
        co.create_cluster_custom_object("crd.projectcalico.org", "v1", "ippools", bad)
    assert ei.value.status == 422
    st: dict[str, Any] = json.loads(ei.value.body)
    assert st["details"]["causes"][0]["field"] == "spec.natOutgoing"
    listed = co.list_cluster_custom_object("crd.projectcalico.org", "v1", "ippools")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["default-ipv4-ippool"]


def test_the_inferred_crd_keeps_every_field(srv: Served, api: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    got = co.get_namespaced_custom_object(
        "cilium.io", "v2", "default", "ciliumnetworkpolicies", "allow-web"
    )
    assert got["spec"] == CNP["spec"]
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(
        "ciliumnetworkpolicies.cilium.io"
    )
    assert crd.spec.scope == "Namespaced"
    assert crd.metadata.annotations["svclab.dev/inferred-from"] == "kubectl-dump"
    names = srv.kubectl("get", "ciliumnetworkpolicies", "-A", "-o", "name").stdout.split()
    assert names == ["ciliumnetworkpolicy.cilium.io/allow-web"]


def test_the_ip_pool_still_gives_the_clusters_calico_pools(srv: Served) -> None:
    cluster = yaml.safe_load((Path(srv.state) / "cluster.yaml").read_text())
    assert cluster["spec"]["cni"] == "calico"
    assert cluster["spec"]["calico"]["ipPools"] == [
        {"cidr": "192.168.0.0/16", "natOutgoing": True, "vxlanMode": "Never"}
    ]
