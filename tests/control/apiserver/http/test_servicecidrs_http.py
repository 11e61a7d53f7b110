"""ServiceCIDR, IPAddress and the node Leases as kube-apiserver serves them, driven by the
real kubectl and the official kubernetes Python client against a real ``svclab serve``
(its live control plane: the ServiceCIDR controller and the kubelet are API clients):
the default ServiceCIDR, an IPAddress per ClusterIP, a second ServiceCIDR extending the
range, a deletion held while its addresses are in use, and the kubelet's Lease
renewals. One server for the module."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from serving import WEB, Served

pytestmark = pytest.mark.slow

FINALIZER = "networking.k8s.io/service-cidr-finalizer"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("serve") / "state")
    try:
        s.start()
        s.kubectl("apply", "-f", str(WEB))  # a 3-node cluster: its apiserver bootstraps
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def api(srv: Served) -> client.ApiClient:
    return config.new_client_from_config(str(srv.kubeconfig))


def _json(srv: Served, *args: str) -> Any:
    return json.loads(srv.kubectl(*args, "-o", "json").stdout)


def _until(check: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"{what}: not seen in {timeout}s (last: {last!r})")


def test_kubectl_get_servicecidrs_shows_the_default_one_ready(srv: Served) -> None:
    out = srv.kubectl("get", "servicecidrs").stdout
    assert out.splitlines()[1].split()[0] == "kubernetes"
    cidr = _json(srv, "get", "servicecidr", "kubernetes")
    assert cidr["spec"]["cidrs"] == ["10.96.0.0/12"]
    ready = [c for c in cidr["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    assert ready[0]["message"] == "Kubernetes default Service CIDR is ready"
    # the ServiceCIDR controller (a client of its own) puts the finalizer on it
    _until(
        lambda: (
            FINALIZER
            in _json(srv, "get", "servicecidr", "kubernetes")["metadata"].get("finalizers", [])
        ),
        "the finalizer on the default ServiceCIDR",
    )


def test_kubectl_get_ipaddresses_lists_the_allocations(srv: Served, api: client.ApiClient) -> None:
    srv.kubectl("create", "service", "clusterip", "front", "--tcp=80:8080")
    ip = _json(srv, "get", "service", "front")["spec"]["clusterIP"]
    names = srv.kubectl("get", "ipaddresses", "-o", "name").stdout.split()
    assert f"ipaddress.networking.k8s.io/{ip}" in names
    assert "ipaddress.networking.k8s.io/10.96.0.1" in names  # default/kubernetes
    net = client.NetworkingV1Api(api)
    got = net.read_ip_address(ip)
    assert got.metadata.labels == {
        "ipaddress.kubernetes.io/managed-by": "ipallocator.networking.k8s.io"
    }
    ref = got.spec.parent_ref
    assert (ref.group, ref.resource, ref.namespace, ref.name) == (
        "",
        "services",
        "default",
        "front",
    )
    srv.kubectl("delete", "service", "front")
    with pytest.raises(ApiException) as gone:
        net.read_ip_address(ip)
    assert gone.value.status == 404


def test_a_second_service_cidr_extends_the_range(srv: Served, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "far"},
        "spec": {"clusterIP": "10.200.0.10", "ports": [{"port": 80}]},
    }
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_service("default", body)
    assert refused.value.status == 422
    assert "is not in the valid range" in json.loads(refused.value.body)["message"]
    srv.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "ServiceCIDR",
                "metadata": {"name": "extra"},
                "spec": {"cidrs": ["10.200.0.0/24"]},
            }
        ),
    )
    made = core.create_namespaced_service("default", body)
    assert made.spec.cluster_ip == "10.200.0.10"
    ref = client.NetworkingV1Api(api).read_ip_address("10.200.0.10").spec.parent_ref
    assert (ref.namespace, ref.name) == ("default", "far")
    ready = _until(
        lambda: [
            c
            for c in (
                client.NetworkingV1Api(api).read_service_cidr("extra").status.conditions or []
            )
            if c.type == "Ready" and c.status == "True"
        ],
        "Ready on the new ServiceCIDR",
    )
    assert ready[0].message == "Kubernetes Service CIDR is ready"


def test_deleting_a_service_cidr_in_use_is_held(srv: Served, api: client.ApiClient) -> None:
    net = client.NetworkingV1Api(api)
    if not _exists(lambda: net.read_service_cidr("extra")):
        pytest.fail("needs the ServiceCIDR of test_a_second_service_cidr_extends_the_range")
    _until(
        lambda: FINALIZER in (net.read_service_cidr("extra").metadata.finalizers or []),
        "the finalizer on the new ServiceCIDR",
    )
    srv.kubectl("delete", "servicecidr", "extra", "--wait=false")

    def terminating() -> list[Any]:
        cidr = net.read_service_cidr("extra")
        return [
            c
            for c in (cidr.status.conditions or [])
            if c.type == "Ready" and c.status == "False" and c.reason == "Terminating"
        ]

    held = _until(terminating, "Ready False, Terminating")
    assert held[0].message == (
        "There are still IPAddresses referencing the ServiceCIDR, please remove them or "
        "create a new ServiceCIDR"
    )
    assert net.read_service_cidr("extra").metadata.deletion_timestamp is not None
    srv.kubectl("delete", "service", "far")
    _until(lambda: not _exists(lambda: net.read_service_cidr("extra")), "the ServiceCIDR gone")


def _exists(read: Any) -> bool:
    try:
        read()
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def test_service_cidr_validation_is_kube_apiservers(srv: Served) -> None:
    out = srv.kubectl(
        "apply",
        "-f",
        "-",
        check=False,
        input=json.dumps(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "ServiceCIDR",
                "metadata": {"name": "bad"},
                "spec": {"cidrs": ["10.200.0.1/24"]},
            }
        ),
    )
    assert out.returncode != 0
    assert (
        '"bad" is invalid: spec.cidrs[0]: Invalid value: '
        '"10.200.0.1/24": wrong CIDR format, IP doesn\'t match network IP address'
    ) in out.stderr


def test_the_kubelet_renews_its_node_lease(srv: Served, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    assert core.read_namespace("kube-node-lease").metadata.name == "kube-node-lease"
    coord = client.CoordinationV1Api(api)
    lease = _until(lambda: _lease(coord), "the Lease of node-1")
    assert lease.spec.holder_identity == "node-1"
    assert lease.spec.lease_duration_seconds == 40
    first = lease.spec.renew_time
    renewed = _until(
        lambda: (got := _lease(coord)) is not None and got.spec.renew_time > first and got,
        "a renewal (every 10 s)",
        timeout=40,
    )
    assert 9 <= (renewed.spec.renew_time - first).total_seconds() <= 30
    table = srv.kubectl("get", "leases", "-n", "kube-node-lease").stdout
    assert table.splitlines()[1].split()[0] == "node-1"


def _lease(coord: client.CoordinationV1Api) -> Any:
    try:
        return coord.read_namespaced_lease("node-1", "kube-node-lease")
    except ApiException as e:
        if e.status == 404:
            return None
        raise
