"""ServiceCIDR and IPAddress as the ClusterIP allocator's state (KEP-1880), in process:
the default ServiceCIDR, one IPAddress per ClusterIP, a second ServiceCIDR extending the
range, a deletion held by the finalizer while addresses are in use, validation in
kube-apiserver's wording, and a restart over a persistent store that agrees with itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from api_helpers import make_api, obj, service
from etcd_procs import EtcdCluster

from control.runner import ControlPlane
from control.store import MemoryStore, SqliteStore, Store, open_store
from netmodel.cluster import ClusterSpec
from netmodel.errors import AllocationError, InvalidError
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject, Service

SMALL = {"serviceCIDR": "10.96.0.0/28"}  # 14 addresses: .1 kubernetes, .10 kube-dns


def _cidr(name: str, *cidrs: str) -> KubeObject:
    return obj(
        f"""
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {{name: {name}}}
spec: {{cidrs: [{", ".join(cidrs)}]}}
"""
    )


def _ipaddresses(store: Store) -> dict[str, dict[str, Any]]:
    return {o.name: o.to_dict() for o in store.list("IPAddress")}


def _ip(o: KubeObject) -> str:
    assert isinstance(o, Service) and o.spec.cluster_ip
    return o.spec.cluster_ip


def test_default_service_cidr_and_an_ipaddress_per_cluster_ip() -> None:
    api = make_api()
    cidr = api.store.get("ServiceCIDR", "kubernetes").to_dict()
    assert cidr["spec"] == {"cidrs": ["10.96.0.0/12"]}
    assert cidr["status"]["conditions"][0]["type"] == "Ready"
    assert cidr["status"]["conditions"][0]["status"] == "True"
    assert cidr["status"]["conditions"][0]["message"] == "Kubernetes default Service CIDR is ready"
    ip = _ip(api.create(service("web")))
    ips = _ipaddresses(api.store)
    assert sorted(ips) == sorted(["10.96.0.1", "10.96.0.10", ip])
    web = ips[ip]
    assert web["metadata"]["labels"] == {
        "ipaddress.kubernetes.io/managed-by": "ipallocator.networking.k8s.io"
    }
    assert web["spec"]["parentRef"] == {
        "group": "",
        "resource": "services",
        "namespace": "default",
        "name": "web",
    }
    assert web["metadata"]["uid"] and web["metadata"]["creationTimestamp"]
    api.delete("Service", "default/web")
    assert ip not in _ipaddresses(api.store)


def test_refused_and_dry_run_writes_leave_no_ipaddress() -> None:
    api = make_api()
    before = _ipaddresses(api.store)
    api.create(service("dry"), dry_run=True)
    with pytest.raises(InvalidError):
        api.apply([service("ok"), service("bad", type="Nope")])
    assert _ipaddresses(api.store) == before


def test_headless_and_external_name_hold_no_ipaddress() -> None:
    api = make_api()
    before = set(_ipaddresses(api.store))
    api.create(service("headless", clusterIP="None"))
    ip = _ip(api.create(service("flip")))
    assert set(_ipaddresses(api.store)) == before | {ip}
    flip = api.store.get("Service", "default/flip")
    assert isinstance(flip, Service)
    api.update(
        flip.evolve(
            spec=flip.spec.evolve(
                type="ExternalName", external_name="example.com", cluster_ip=None, cluster_ips=[]
            )
        )
    )
    assert set(_ipaddresses(api.store)) == before


def _plane(store: Store | None = None) -> ControlPlane:
    cp = ControlPlane(store or MemoryStore(), ClusterSpec.model_validate(SMALL))
    cp.start()
    cp.run_until_idle()
    return cp


def _fill(cp: ControlPlane) -> None:
    """Take every free address of the default range."""
    n = 0
    while True:
        try:
            cp.apiserver.create(service(f"fill{n}"))
        except AllocationError as e:
            assert "range is full" in str(e)
            return
        n += 1


def test_a_second_service_cidr_extends_the_range() -> None:
    cp = _plane()
    _fill(cp)
    with pytest.raises(AllocationError, match="not in the valid range"):
        cp.apiserver.create(service("pinned", clusterIP="10.100.0.6"))
    cp.apply([_cidr("extra", "10.100.0.0/29")])
    cp.run_until_idle()
    extra = cp.store.get("ServiceCIDR", "extra").to_dict()
    assert extra["metadata"]["finalizers"] == ["networking.k8s.io/service-cidr-finalizer"]
    cond = extra["status"]["conditions"][0]
    assert (cond["type"], cond["status"]) == ("Ready", "True")
    # dynamic allocation uses the new range once the first is full; a pinned address in it
    # is accepted
    assert _ip(cp.apiserver.create(service("more"))) == "10.100.0.1"
    assert _ip(cp.apiserver.create(service("pinned", clusterIP="10.100.0.6"))) == "10.100.0.6"
    ips = _ipaddresses(cp.store)
    assert ips["10.100.0.1"]["spec"]["parentRef"]["name"] == "more"
    assert ips["10.100.0.6"]["spec"]["parentRef"]["name"] == "pinned"


def test_deleting_a_service_cidr_in_use_is_held_by_its_finalizer() -> None:
    cp = _plane()
    _fill(cp)
    cp.apply([_cidr("extra", "10.100.0.0/29")])
    cp.run_until_idle()
    cp.apiserver.create(service("more"))
    cp.delete("ServiceCIDR", "extra")
    cp.run_until_idle()
    held = cp.store.get("ServiceCIDR", "extra").to_dict()
    assert held["metadata"]["deletionTimestamp"]
    cond = held["status"]["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "Terminating")
    assert cond["message"] == (
        "There are still IPAddresses referencing the ServiceCIDR, please remove them or "
        "create a new ServiceCIDR"
    )
    # a ServiceCIDR being deleted gives no new address
    with pytest.raises(AllocationError, match="range is full"):
        cp.apiserver.create(service("none-left"))
    cp.delete("Service", "default/more")
    cp.run_until_idle()
    assert [o.name for o in cp.store.list("ServiceCIDR")] == ["kubernetes"]


def test_deletion_goes_through_when_another_service_cidr_covers_the_addresses() -> None:
    cp = _plane()
    _fill(cp)
    cp.apply([_cidr("extra", "10.100.0.0/29"), _cidr("wider", "10.100.0.0/24")])
    cp.run_until_idle()
    ip = _ip(cp.apiserver.create(service("more")))
    cp.delete("ServiceCIDR", "extra")
    cp.run_until_idle()
    assert [o.name for o in cp.store.list("ServiceCIDR")] == ["kubernetes", "wider"]
    assert cp.apiserver.services.cluster_ips.owner(ip) == "Service/default/more"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_cidr("none"), "ServiceCIDR/none: spec.cidrs: Required value: at least one CIDR required"),
        (
            _cidr("host", "10.100.0.1/24"),
            'ServiceCIDR/host: spec.cidrs[0]: Invalid value: "10.100.0.1/24": wrong CIDR format, '
            "IP doesn't match network IP address",
        ),
        (
            _cidr("bits", "10.100.0.0/33"),
            'ServiceCIDR/bits: spec.cidrs[0]: Invalid value: "10.100.0.0/33": '
            'netip.ParsePrefix("10.100.0.0/33"): bad bits after slash: "33"',
        ),
        (
            _cidr("v6", "2001:db8:0::/64"),
            'ServiceCIDR/v6: spec.cidrs[0]: Invalid value: "2001:db8:0::/64": CIDR not in RFC '
            "5952 canonical format",
        ),
        (
            _cidr("two", "10.100.0.0/24", "10.101.0.0/24"),
            "may specify no more than one IP for each IP family",
        ),
    ],
)
def test_service_cidr_validation(doc: KubeObject, message: str) -> None:
    api = make_api()
    rev = api.store.revision
    with pytest.raises(InvalidError) as out:
        api.create(doc)
    assert message in str(out.value)
    assert api.store.revision == rev


def test_service_cidr_is_immutable_but_may_become_dual_stack() -> None:
    api = make_api()
    api.create(_cidr("extra", "10.100.0.0/24"))
    with pytest.raises(InvalidError, match=r"spec.cidrs\[0\]: Invalid value.*field is immutable"):
        api.update(_cidr("extra", "10.101.0.0/24"))
    api.update(_cidr("extra", "10.100.0.0/24", "2001:db8::/64"))


@pytest.mark.parametrize(
    ("name", "spec", "message"),
    [
        (
            "10.96.0.010",
            {"parentRef": {"resource": "services", "name": "a"}},
            'metadata.name: Invalid value: "10.96.0.010": ParseAddr("10.96.0.010"): unable '
            "to parse IP",
        ),
        (
            "2001:db8:0::1",
            {"parentRef": {"resource": "services", "name": "a"}},
            "must be a canonical format IP address",
        ),
        ("10.96.0.50", {}, "IPAddress/10.96.0.50: spec.parentRef: Required value"),
        (
            "10.96.0.50",
            {"parentRef": {"name": "a"}},
            "spec.parentRef.resource: Required value",
        ),
        (
            "10.96.0.50",
            {"parentRef": {"resource": "services", "name": "a/b"}},
            "spec.parentRef.name: Invalid value: \"a/b\": may not contain '/'",
        ),
    ],
)
def test_ipaddress_validation(name: str, spec: dict[str, Any], message: str) -> None:
    api = make_api()
    doc = obj(
        "apiVersion: networking.k8s.io/v1\nkind: IPAddress\n"
        f"metadata: {{name: '{name}'}}\nspec: {spec}\n"
    )
    with pytest.raises(InvalidError) as out:
        api.create(doc)
    assert message in str(out.value)


def test_ipaddress_parent_ref_is_immutable() -> None:
    api = make_api()
    ip = _ip(api.create(service("web")))
    stored = api.store.get("IPAddress", ip).to_dict()
    stored["spec"]["parentRef"]["name"] = "other"
    with pytest.raises(InvalidError, match=r"spec\.parentRef: Invalid value.*field is immutable"):
        api.update(object_from_dict(stored))


@pytest.mark.parametrize("backend", ["sqlite", "etcd"])
def test_a_restart_over_a_persistent_store_agrees_with_itself(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "etcd":
        etcd: EtcdCluster = request.getfixturevalue("etcd_member")
        etcd.wipe()

    def open_it() -> Store:
        if backend == "etcd":
            return open_store(etcd.url)
        return SqliteStore(tmp_path / "state.db")

    store = open_it()
    cp = _plane(store)
    _fill(cp)
    cp.apply([_cidr("extra", "10.100.0.0/29")])
    cp.run_until_idle()
    more = _ip(cp.apiserver.create(service("more")))
    cp.delete("Service", "default/fill0")
    before = _ipaddresses(store)
    rev = store.revision
    store.close()

    again = open_it()
    cp2 = _plane(again)
    assert again.revision == rev  # consistent: the restart repairs nothing
    assert _ipaddresses(again) == before
    # the allocator knows the second range and what is held in both
    with pytest.raises(AllocationError, match="already allocated"):
        cp2.apiserver.create(service("clash", clusterIP=more))
    assert _ip(cp2.apiserver.create(service("refill"))) == "10.96.0.2"  # fill0's, freed
    assert _ip(cp2.apiserver.create(service("next"))) == "10.100.0.2"
    again.close()


def test_a_restart_repairs_ipaddresses_that_disagree_with_the_services(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = SqliteStore(db)
    api = make_api(store)
    web = _ip(api.create(service("web")))
    # a crash between a Service's write and its IPAddress's, and a stale one left behind
    store.delete("IPAddress", web)
    stale = api.store.get("IPAddress", "10.96.0.1").to_dict()
    stale["metadata"] = {"name": "10.96.0.99", "labels": stale["metadata"]["labels"]}
    stale["spec"]["parentRef"]["name"] = "gone"
    store.create(object_from_dict(stale))
    store.close()

    again = SqliteStore(db)
    make_api(again)
    ips = _ipaddresses(again)
    assert web in ips and ips[web]["spec"]["parentRef"]["name"] == "web"
    assert "10.96.0.99" not in ips
    again.close()
