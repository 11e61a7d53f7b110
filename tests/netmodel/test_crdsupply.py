"""Custom resources that come without their CRD (``netmodel.crdsupply``): every kubectl
dump under tests/data reads with nothing skipped; Calico's objects get the CRD svclab
ships (dump or manifest); any other custom kind of a dump gets an inferred, permissive
CRD and one warning line; a hand-written manifest's unknown custom kind is still
refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from netmodel import crdsupply, customresources, kinds
from netmodel.errors import SchemaError
from netmodel.manifests import load, load_text

DUMPS = Path(__file__).resolve().parents[1] / "data" / "kubectl-dumps"
CALICO = DUMPS / "calico-kubeadm-list.yaml"
STORIES = DUMPS.parent / "clusternetworkpolicy" / "user-stories.yaml"


@pytest.fixture(autouse=True)
def _no_custom_rows_left() -> Iterator[None]:
    """Loading registers the CRDs' kinds in the process: each test starts and ends
    without any."""
    for name in {r.crd for r in kinds.custom_rows()}:
        customresources.uninstall(name)
    yield
    for name in {r.crd for r in kinds.custom_rows()}:
        customresources.uninstall(name)


def _dumps() -> list[Path]:
    """Every dump under tests/data/kubectl-dumps: the files, and the k3s support bundle
    (a directory read as one dump)."""
    out = [p for p in sorted(DUMPS.iterdir()) if p.suffix in (".yaml", ".json")]
    return [*out, DUMPS / "k3s-support-bundle"]


@pytest.mark.parametrize("dump", _dumps(), ids=lambda p: p.name)
def test_every_kubectl_dump_under_tests_data_reads_with_nothing_skipped(dump: Path) -> None:
    m = load([dump])
    assert m.skipped == ()


def test_the_calico_dumps_ippool_comes_in_with_the_shipped_crd() -> None:
    m = load([CALICO])
    assert m.skipped == ()
    crd, *_ = m.objects  # the CRD first: its objects follow
    assert (crd.kind, crd.name) == ("CustomResourceDefinition", "ippools.crd.projectcalico.org")
    ann = crd.metadata.annotations
    assert ann[crdsupply.SHIPPED_ANNOTATION] == (
        "netmodel/crddata/crd.projectcalico.org_ippools.yaml"
    )
    [pool] = [o for o in m.objects if o.kind == "IPPool"]
    assert pool.api_version == "crd.projectcalico.org/v1"
    assert pool.store_kind == "ippools.crd.projectcalico.org"
    assert pool.to_dict()["spec"] == {
        "cidr": "192.168.0.0/16",
        "blockSize": 26,
        "ipipMode": "Never",
        "vxlanMode": "Never",
        "natOutgoing": True,
        "nodeSelector": "all()",
    }
    assert "resourceVersion" not in pool.to_dict()["metadata"]  # server fields dropped
    # and still read for what it means to the network (the Cluster's Calico pools)
    assert m.cluster is not None
    assert [(p.cidr, p.nat_outgoing) for p in m.cluster.spec.calico.ip_pools] == [
        ("192.168.0.0/16", True)
    ]
    assert not [w for w in m.warnings if "CustomResourceDefinition" in w]  # shipped: silent


def test_the_shipped_crds_are_calicos_and_the_clusternetworkpolicy() -> None:
    assert crdsupply.shipped_kinds() == [
        ("crd.projectcalico.org", "BlockAffinity"),
        ("crd.projectcalico.org", "IPPool"),
        ("policy.networking.k8s.io", "ClusterNetworkPolicy"),
    ]


def test_a_manifest_of_clusternetworkpolicies_comes_in_with_the_shipped_crd() -> None:
    m = load([STORIES])
    crd, *cnps = m.objects
    assert (crd.kind, crd.name) == (
        "CustomResourceDefinition",
        "clusternetworkpolicies.policy.networking.k8s.io",
    )
    assert crd.metadata.annotations[crdsupply.SHIPPED_ANNOTATION] == (
        "netmodel/crddata/policy.networking.k8s.io_clusternetworkpolicies.yaml"
    )
    assert crd.metadata.annotations["policy.networking.k8s.io/bundle-version"] == "v0.2.0"
    assert [(o.kind, o.name, o.store_kind) for o in cnps] == [
        ("ClusterNetworkPolicy", n, "clusternetworkpolicies.policy.networking.k8s.io")
        for n in (
            "cluster-wide-deny-example",
            "cluster-wide-allow-example",
            "pub-svc-delegate-example",
            "default",
        )
    ]
    assert not m.warnings


def _dump(*items: dict[str, Any]) -> str:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "uid": "u-n1", "resourceVersion": "1"},
        "spec": {"podCIDR": "10.244.0.0/24"},
    }
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node, *items]})


CNP = {
    "apiVersion": "cilium.io/v2",
    "kind": "CiliumNetworkPolicy",
    "metadata": {"name": "allow-web", "namespace": "default", "uid": "u-cnp"},
    "spec": {
        "endpointSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"toPorts": [{"ports": [{"port": "80", "protocol": "TCP"}]}]}],
    },
}
CCNP = {
    "apiVersion": "cilium.io/v2",
    "kind": "CiliumClusterwideNetworkPolicy",
    "metadata": {"name": "deny-all", "uid": "u-ccnp"},
    "spec": {"endpointSelector": {}, "ingress": [{}]},
}


def test_other_custom_kinds_of_a_dump_get_an_inferred_crd_and_one_warning() -> None:
    m = load_text(_dump(CNP, CCNP), source="cilium.yaml")
    assert m.skipped == ()
    crds = {o.name: o.to_dict()["spec"] for o in m.objects if o.kind == "CustomResourceDefinition"}
    assert set(crds) == {
        "ciliumnetworkpolicies.cilium.io",
        "ciliumclusterwidenetworkpolicies.cilium.io",
    }
    cnp = crds["ciliumnetworkpolicies.cilium.io"]
    assert cnp["scope"] == "Namespaced"  # its object has a namespace
    assert crds["ciliumclusterwidenetworkpolicies.cilium.io"]["scope"] == "Cluster"
    assert cnp["names"] == {
        "kind": "CiliumNetworkPolicy",
        "plural": "ciliumnetworkpolicies",
        "singular": "ciliumnetworkpolicy",
    }
    [version] = cnp["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v2", True, True)
    assert version["schema"]["openAPIV3Schema"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    [obj] = [o for o in m.objects if o.kind == "CiliumNetworkPolicy"]
    assert obj.to_dict()["spec"] == CNP["spec"]  # every field kept
    notes = [w for w in m.warnings if "CustomResourceDefinition" in w]
    assert notes == [
        "CiliumNetworkPolicy.cilium.io: no CustomResourceDefinition in the dump for its "
        "1 object(s); added ciliumnetworkpolicies.cilium.io inferred from them (Namespaced, "
        "served as v2, every field kept)",
        "CiliumClusterwideNetworkPolicy.cilium.io: no CustomResourceDefinition in the dump "
        "for its 1 object(s); added ciliumclusterwidenetworkpolicies.cilium.io inferred "
        "from them (Cluster, served as v2, every field kept)",
    ]


def test_a_dump_that_holds_the_crd_gets_nothing_added() -> None:
    crd = crdsupply.inferred_crd("cilium.io", "CiliumNetworkPolicy", crdsupply._Seen(["v2"], True))
    crd["metadata"]["annotations"] = {"mine": "yes"}
    m = load_text(_dump(crd, CNP), source="d.yaml")
    got = [o for o in m.objects if o.kind == "CustomResourceDefinition"]
    assert [o.metadata.annotations for o in got] == [{"mine": "yes"}]
    assert not [w for w in m.warnings if "CustomResourceDefinition" in w]


def test_an_unknown_kind_of_a_built_in_group_is_still_skipped() -> None:
    old = {
        "apiVersion": "extensions/v1beta1",
        "kind": "PodSecurityPolicy",
        "metadata": {"name": "p", "uid": "u-p"},
    }
    m = load_text(_dump(old), source="d.yaml")
    assert dict(m.skipped) == {"PodSecurityPolicy": 1}
    assert not [o for o in m.objects if o.kind == "CustomResourceDefinition"]


def test_a_manifest_gets_the_shipped_crd_but_no_inferred_one() -> None:
    pool = {
        "apiVersion": "crd.projectcalico.org/v1",
        "kind": "IPPool",
        "metadata": {"name": "extra"},
        "spec": {"cidr": "172.20.0.0/16", "natOutgoing": False},
    }
    m = load_text(yaml.safe_dump(pool), source="pool.yaml")
    assert [o.kind for o in m.objects] == ["CustomResourceDefinition", "IPPool"]
    manifest = {k: v for k, v in CNP.items() if k != "metadata"}
    manifest["metadata"] = {"name": "allow-web"}
    with pytest.raises(SchemaError) as err:
        load_text(yaml.safe_dump(manifest), source="cnp.yaml")
    assert str(err.value) == (
        "cnp.yaml (document 1): CiliumNetworkPolicy/allow-web: kind: no matches for kind "
        '"CiliumNetworkPolicy" in version "cilium.io/v2" (ensure CRDs are installed first)'
    )


def test_a_version_the_shipped_crd_does_not_serve_is_inferred() -> None:
    pool = {
        "apiVersion": "crd.projectcalico.org/v2",
        "kind": "IPPool",
        "metadata": {"name": "p", "uid": "u-p"},
        "spec": {"cidr": "10.9.0.0/16"},
    }
    m = load_text(_dump(pool), source="d.yaml")
    [crd] = [o for o in m.objects if o.kind == "CustomResourceDefinition"]
    assert crdsupply.SHIPPED_ANNOTATION not in crd.metadata.annotations
    assert [v["name"] for v in crd.to_dict()["spec"]["versions"]] == ["v2"]


@pytest.mark.parametrize(
    ("kind", "plural"),
    [("IPPool", "ippools"), ("NetworkPolicy", "networkpolicies"), ("Ingress", "ingresses")],
)
def test_kubes_plural_guess(kind: str, plural: str) -> None:
    assert crdsupply.guess_plural(kind) == plural
