"""Where kube-apiserver's proxies connect (control.apiserver.http.proxytargets), the
proxy path rules and forwarded headers (control.apiserver.http.proxy), and a node's
kubelet API answered from the store (control.apiserver.http.kubeletapi): no server."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from control.apiserver.http import kubeletapi
from control.apiserver.http.proxy import clean_path, forwarded_headers, proxy_path
from control.apiserver.http.proxytargets import (
    Target,
    node_target,
    pod_target,
    service_target,
    split_scheme_name_port,
)
from control.apiserver.http.status import APIError
from netmodel.objects import EndpointSlice, Node, Pod, Service


def _svc(ports: list[dict[str, Any]], selector: dict[str, str] | None = None) -> Service:
    spec: dict[str, Any] = {"ports": ports, "clusterIP": "10.96.0.10"}
    if selector is not None:
        spec["selector"] = selector
    return Service.model_validate(
        {"metadata": {"name": "web", "namespace": "default"}, "spec": spec}
    )


def _pod(name: str, ip: str | None, ports: tuple[int, ...] = (8080,)) -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": "node-1",
                "containers": [
                    {"name": "c", "ports": [{"containerPort": p} for p in ports]},
                ],
            },
            "status": {"phase": "Running", **({"podIP": ip} if ip else {})},
        }
    )


def _slice(
    endpoints: list[tuple[str, str, bool | None]], ports: list[dict[str, Any]]
) -> EndpointSlice:
    return EndpointSlice.model_validate(
        {
            "metadata": {
                "name": "web-abc",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "web"},
            },
            "addressType": "IPv4",
            "endpoints": [
                {
                    "addresses": [ip],
                    "conditions": {} if ready is None else {"ready": ready},
                    "targetRef": {"kind": "Pod", "namespace": "default", "name": pod},
                }
                for pod, ip, ready in endpoints
            ],
            "ports": ports,
        }
    )


PODS = {"a": _pod("a", "10.244.1.2"), "b": _pod("b", "10.244.2.2")}


def _pods(name: str) -> Pod | None:
    return PODS.get(name)


def _refused(fn: Any, *args: Any) -> APIError:
    with pytest.raises(APIError) as e:
        fn(*args)
    return e.value


def test_split_scheme_name_port_as_go() -> None:
    assert split_scheme_name_port("web") == ("", "web", "")
    assert split_scheme_name_port("web:80") == ("", "web", "80")
    assert split_scheme_name_port("https:web:443") == ("https", "web", "443")
    assert split_scheme_name_port("http:web:") == ("http", "web", "")
    for bad in ("", ":80", "ftp:web:21", "a:b:c:d", "https::443"):
        assert split_scheme_name_port(bad) is None, bad


def test_service_target_by_port_number_and_name() -> None:
    svc = _svc([{"name": "http", "port": 80, "targetPort": 8080}], {"app": "web"})
    sl = [_slice([("a", "10.244.1.2", True)], [{"name": "http", "port": 8080}])]
    want = Target("http", "10.244.1.2", 8080)
    assert service_target("web:80", svc, sl, _pods) == want
    assert service_target("web:http", svc, sl, _pods) == want
    assert service_target("https:web:80", svc, sl, _pods) == Target("https", "10.244.1.2", 8080)


def test_service_target_picks_only_ready_endpoints_of_existing_pods() -> None:
    svc = _svc([{"name": "http", "port": 80}], {"app": "web"})
    sl = [
        _slice(
            [
                ("a", "10.244.1.2", False),  # not ready
                ("gone", "10.244.3.2", True),  # its pod does not exist
                ("b", "10.244.9.9", True),  # the pod does not hold that address
                ("b", "10.244.2.2", None),  # ready unset counts as ready
            ],
            [{"name": "http", "port": 8080}],
        )
    ]
    rng = random.Random(1)
    picks = {service_target("web:80", svc, sl, _pods, rng).host for _ in range(20)}
    assert picks == {"10.244.2.2"}


def test_service_target_refusals_with_upstream_wording() -> None:
    svc = _svc([{"name": "http", "port": 80}], {"app": "web"})
    sl = [_slice([("a", "10.244.1.2", True)], [{"name": "http", "port": 8080}])]
    e = _refused(service_target, "web:81", svc, sl, _pods)
    assert (e.code, e.message) == (503, 'no service port 81 found for service "web"')
    # the port's name is "http": no endpoint port has the empty name
    e = _refused(service_target, "web", svc, sl, _pods)
    assert (e.code, e.message) == (503, 'no endpoints available for service "web"')
    e = _refused(service_target, "web:grpc", svc, sl, _pods)
    assert (e.code, e.message) == (503, 'no endpoints available for service "web:grpc"')
    e = _refused(service_target, "web:80", svc, [_slice([], [])], _pods)
    assert (e.code, e.message) == (503, 'no endpoints available for service "web"')
    e = _refused(service_target, "web:80", None, [], _pods)
    assert (e.code, e.message) == (404, 'services "web" not found')
    e = _refused(service_target, "web:http", _svc([{"name": "http", "port": 80}]), [], _pods)
    assert (e.code, e.message) == (404, 'endpoints "web" not found')
    e = _refused(service_target, "ftp:web:80", svc, sl, _pods)
    assert (e.code, e.message) == (400, 'invalid service request "ftp:web:80"')


def test_pod_target_ports_and_address_checks() -> None:
    p = _pod("a", "10.244.1.2", (8080, 9090))
    assert pod_target("a", p) == Target("http", "10.244.1.2", 8080)  # first declared
    assert pod_target("a:9090", p) == Target("http", "10.244.1.2", 9090)
    assert pod_target("a:http", p).port == 80  # /etc/services, as Go's dialer
    assert pod_target("https:a:", _pod("a", "10.244.1.2", ())) == Target("https", "10.244.1.2", 443)
    assert _refused(pod_target, "a", None).message == 'pods "a" not found'
    for ip in (None, "127.0.0.1", "169.254.1.1", "0.0.0.0"):
        e = _refused(pod_target, "a", _pod("a", ip))
        assert (e.code, e.message) == (400, "address not allowed"), ip
    e = _refused(pod_target, "a:nosuchport", p)
    assert e.code == 503 and "unknown port" in e.message


def test_node_target_kubelet_or_another_port() -> None:
    n = Node.model_validate(
        {
            "metadata": {"name": "node-1"},
            "status": {
                "addresses": [
                    {"type": "Hostname", "address": "node-1"},
                    {"type": "InternalIP", "address": "172.18.0.2"},
                ]
            },
        }
    )
    assert node_target("node-1", n) == Target("https", "172.18.0.2", 10250, kubelet="node-1")
    assert node_target("node-1:10250", n).kubelet == "node-1"
    assert node_target("node-1:9100", n) == Target("http", "172.18.0.2", 9100)
    assert _refused(node_target, "nope", None).message == 'nodes "nope" not found'
    assert _refused(node_target, "a:b:c:d", n).message == 'invalid node request "a:b:c:d"'


def test_proxy_path_and_cleaning() -> None:
    base = "/api/v1/namespaces/default/services/web:80/proxy"
    assert proxy_path(base + "/", "services") == (base, "/")
    assert proxy_path(base, "services") == (base, "")
    assert proxy_path(base + "/a//b/", "services") == (base, "/a//b/")
    # a Service named "proxy"
    named = "/api/v1/namespaces/default/services/proxy/proxy/x"
    assert proxy_path(named, "services") == (
        "/api/v1/namespaces/default/services/proxy/proxy",
        "/x",
    )
    assert clean_path("") == ""
    assert clean_path("/") == "/"
    assert clean_path("/a//b/./c/../d/") == "/a/b/d/"
    assert clean_path("/../x") == "/x"


def test_forwarded_headers_drop_hop_by_hop_and_credentials() -> None:
    raw = [
        (b"host", b"127.0.0.1:6443"),
        (b"authorization", b"Bearer secret"),
        (b"connection", b"keep-alive, X-Private"),
        (b"x-private", b"1"),
        (b"keep-alive", b"timeout=5"),
        (b"transfer-encoding", b"chunked"),
        (b"content-length", b"3"),
        (b"impersonate-user", b"bob"),
        (b"x-forwarded-for", b"10.0.0.9"),
        (b"accept", b"*/*"),
    ]
    out = forwarded_headers(raw, "127.0.0.1", "/api/v1/x/proxy/", "127.0.0.1:6443")
    names = [n.decode().lower() for n, _ in out]
    assert names == [
        "host",
        "accept",
        "x-forwarded-for",
        "x-forwarded-uri",
        "x-forwarded-host",
        "x-forwarded-proto",
    ]
    d = {n.decode().lower(): v.decode() for n, v in out}
    assert d["x-forwarded-for"] == "10.0.0.9, 127.0.0.1"
    assert d["x-forwarded-uri"] == "/api/v1/x/proxy/"
    assert d["x-forwarded-proto"] == "https"


def test_kubelet_api_from_the_store() -> None:
    pods = [_pod("a", "10.244.1.2"), _pod("b", "10.244.2.2")]
    other = Pod.model_validate(
        {"metadata": {"name": "z", "namespace": "default"}, "spec": {"nodeName": "node-2"}}
    )
    ok = kubeletapi.answer("GET", "/healthz", "node-1", pods)
    assert (ok.status, ok.body) == (200, b"ok")
    listed = kubeletapi.answer("GET", "/pods", "node-1", [*pods, other])
    doc = json.loads(listed.body)
    assert (doc["kind"], doc["apiVersion"], doc["metadata"]) == ("PodList", "v1", {})
    assert [i["metadata"]["name"] for i in doc["items"]] == ["a", "b"]
    assert all("kind" not in i for i in doc["items"])
    assert kubeletapi.answer("POST", "/pods", "node-1", pods).status == 405
    missing = kubeletapi.answer("GET", "/stats/summary", "node-1", pods)
    assert (missing.status, missing.body) == (404, b"404 page not found\n")
