"""Each validation rule refuses with one line naming the object and the field."""

from __future__ import annotations

from typing import Any

import pytest
from api_helpers import make_api

from netmodel.errors import InvalidError
from netmodel.kinds import object_from_dict

POD_SPEC: dict[str, Any] = {"containers": [{"name": "c"}]}


def svc(**spec: Any) -> dict[str, Any]:
    spec.setdefault("ports", [{"port": 80}])
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": spec}


def deploy(**spec: Any) -> dict[str, Any]:
    spec.setdefault("selector", {"matchLabels": {"app": "web"}})
    spec.setdefault("template", {"metadata": {"labels": {"app": "web"}}, "spec": POD_SPEC})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": spec,
    }


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {**POD_SPEC, **spec},
    }


def slice_(**fields: Any) -> dict[str, Any]:
    base = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.5"]}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }
    return {**base, **fields}


def node(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n9"}, "spec": spec}


CASES: list[tuple[str, dict[str, Any], str, str]] = [
    # (id, object, field, message fragment)
    ("svc-name-1035", {**svc(), "metadata": {"name": "1web"}}, "metadata.name", "DNS-1035 label"),
    (
        "svc-name-upper",
        {**svc(), "metadata": {"name": "Web"}},
        "metadata.name",
        'Invalid value: "Web"',
    ),
    (
        "label-key",
        {**svc(), "metadata": {"name": "web", "labels": {"-x": "y"}}},
        "metadata.labels",
        "name part must consist",
    ),
    (
        "label-value",
        {**svc(), "metadata": {"name": "web", "labels": {"x": "y y"}}},
        "metadata.labels[x]",
        "a valid label must be",
    ),
    (
        "namespace",
        {**svc(), "metadata": {"name": "web", "namespace": "Prod"}},
        "metadata.namespace",
        "RFC 1123 label",
    ),
    (
        "port-zero",
        svc(ports=[{"port": 0}]),
        "spec.ports[0].port",
        "Invalid value: 0: must be between 1 and 65535, inclusive",
    ),
    ("port-high", svc(ports=[{"port": 70000}]), "spec.ports[0].port", "between 1 and 65535"),
    (
        "protocol",
        svc(ports=[{"port": 80, "protocol": "ICMP"}]),
        "spec.ports[0].protocol",
        'Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
    ),
    (
        "multi-port-names",
        svc(ports=[{"port": 80, "name": "a"}, {"port": 81}]),
        "spec.ports[1].name",
        "Required value",
    ),
    (
        "dup-port-name",
        svc(ports=[{"port": 80, "name": "a"}, {"port": 81, "name": "a"}]),
        "spec.ports[1].name",
        'Duplicate value: "a"',
    ),
    (
        "dup-port-number",
        svc(ports=[{"port": 80, "name": "a"}, {"port": 80, "name": "b"}]),
        "spec.ports[1]",
        "Duplicate value",
    ),
    (
        "target-port-name",
        svc(ports=[{"port": 80, "targetPort": "HTTP_x"}]),
        "spec.ports[0].targetPort",
        "alpha-numeric",
    ),
    (
        "target-port-digits",
        svc(ports=[{"port": 80, "targetPort": "123"}]),
        "spec.ports[0].targetPort",
        "must contain at least one letter (a-z)",
    ),
    (
        "target-port-zero-letters",
        svc(ports=[{"port": 80, "targetPort": "a--b"}]),
        "spec.ports[0].targetPort",
        "consecutive hyphens",
    ),
    (
        "target-port-int",
        svc(ports=[{"port": 80, "targetPort": 65536}]),
        "spec.ports[0].targetPort",
        "between 1 and 65535",
    ),
    ("svc-type", svc(type="Internal"), "spec.type", 'Unsupported value: "Internal"'),
    ("selector-value", svc(selector={"app": "we b"}), "spec.selector[app]", "a valid label"),
    (
        "etp-on-clusterip",
        svc(externalTrafficPolicy="Local"),
        "spec.externalTrafficPolicy",
        "may only be set when `type` is 'NodePort' or 'LoadBalancer'",
    ),
    (
        "etp-value",
        svc(type="NodePort", externalTrafficPolicy="Nearest"),
        "spec.externalTrafficPolicy",
        "Unsupported value",
    ),
    (
        "itp-value",
        svc(internalTrafficPolicy="Node"),
        "spec.internalTrafficPolicy",
        "Unsupported value",
    ),
    ("affinity", svc(sessionAffinity="Cookie"), "spec.sessionAffinity", "Unsupported value"),
    (
        "affinity-timeout",
        svc(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 0}}),
        "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
        "must be greater than 0",
    ),
    (
        "lb-ranges-type",
        svc(loadBalancerSourceRanges=["10.0.0.0/8"]),
        "spec.loadBalancerSourceRanges",
        "may only be used when `type` is 'LoadBalancer'",
    ),
    (
        "lb-ranges-cidr",
        svc(type="LoadBalancer", loadBalancerSourceRanges=["10.0.0.0/33"]),
        "spec.loadBalancerSourceRanges[0]",
        "must be a valid CIDR",
    ),
    (
        "external-ip",
        svc(externalIPs=["1.2.3"]),
        "spec.externalIPs[0]",
        "must be a valid IP address",
    ),
    ("external-ip-loopback", svc(externalIPs=["127.0.0.1"]), "spec.externalIPs[0]", "loopback"),
    (
        "cluster-ip-bad",
        svc(clusterIP="10.96.0.300"),
        "spec.clusterIP",
        "must be a valid IP address",
    ),
    (
        "headless-nodeport",
        svc(type="NodePort", clusterIP="None"),
        "spec.clusterIPs[0]",
        "may not be set to 'None' for NodePort services",
    ),
    (
        "nodeport-on-clusterip",
        svc(ports=[{"port": 80, "nodePort": 30080}]),
        "spec.ports[0].nodePort",
        "Forbidden: may not be used when `type` is 'ClusterIP'",
    ),
    (
        "dup-nodeport",
        svc(
            type="NodePort",
            ports=[
                {"port": 80, "name": "a", "nodePort": 30080},
                {"port": 81, "name": "b", "nodePort": 30080},
            ],
        ),
        "spec.ports[1].nodePort",
        "Duplicate value: 30080",
    ),
    (
        "hc-port-without-local",
        svc(type="LoadBalancer", healthCheckNodePort=30999),
        "spec.healthCheckNodePort",
        "may only be set when",
    ),
    (
        "alloc-lb-ports-type",
        svc(type="NodePort", allocateLoadBalancerNodePorts=False),
        "spec.allocateLoadBalancerNodePorts",
        "Forbidden",
    ),
    (
        "external-name-missing",
        svc(type="ExternalName", ports=[]),
        "spec.externalName",
        "Required value",
    ),
    ("no-ports", svc(ports=[]), "spec.ports", "Required value"),
    ("ip-family", svc(ipFamilies=["IPv6"]), "spec.ipFamilies[0]", "not configured on this cluster"),
    (
        "dual-stack",
        svc(ipFamilyPolicy="RequireDualStack"),
        "spec.ipFamilyPolicy",
        "not configured for dual-stack",
    ),
    (
        "deploy-selector-mismatch",
        deploy(template={"metadata": {"labels": {"app": "other"}}, "spec": POD_SPEC}),
        "spec.template.metadata.labels",
        "`selector` does not match template `labels`",
    ),
    (
        "deploy-empty-selector",
        deploy(selector={}),
        "spec.selector",
        "empty selector is invalid for deployment",
    ),
    (
        "deploy-replicas",
        deploy(replicas=-1),
        "spec.replicas",
        "Invalid value: -1: must be greater than or equal to 0",
    ),
    (
        "deploy-selector-op",
        deploy(
            selector={"matchExpressions": [{"key": "app", "operator": "Near", "values": ["web"]}]}
        ),
        "spec.selector.matchExpressions[0].operator",
        "Unsupported value",
    ),
    (
        "deploy-no-containers",
        deploy(template={"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}),
        "spec.template.spec.containers",
        "Required value",
    ),
    (
        "container-port",
        pod(containers=[{"name": "c", "ports": [{"containerPort": 0}]}]),
        "spec.containers[0].ports[0].containerPort",
        "between 1 and 65535",
    ),
    (
        "container-port-proto",
        pod(containers=[{"name": "c", "ports": [{"containerPort": 80, "protocol": "tcp"}]}]),
        "spec.containers[0].ports[0].protocol",
        'Unsupported value: "tcp"',
    ),
    (
        "container-port-name",
        pod(
            containers=[
                {"name": "c", "ports": [{"containerPort": 80, "name": "http-web-frontend"}]}
            ]
        ),
        "spec.containers[0].ports[0].name",
        "must be no more than 15 characters",
    ),
    (
        "container-port-name-dup",
        pod(
            containers=[
                {
                    "name": "c",
                    "ports": [
                        {"containerPort": 80, "name": "http"},
                        {"containerPort": 81, "name": "http"},
                    ],
                }
            ]
        ),
        "spec.containers[0].ports[1].name",
        "Duplicate value",
    ),
    (
        "container-name-dup",
        pod(containers=[{"name": "c"}, {"name": "c"}]),
        "spec.containers[1].name",
        "Duplicate value",
    ),
    (
        "pod-ip",
        {**pod(), "status": {"podIP": "nope"}},
        "status.podIP",
        "must be a valid IP address",
    ),
    (
        "slice-address-type",
        slice_(addressType="IPv5"),
        "addressType",
        'Unsupported value: "IPv5": supported values: "FQDN", "IPv4", "IPv6"',
    ),
    (
        "slice-address",
        slice_(endpoints=[{"addresses": ["10.0.0.256"]}]),
        "endpoints[0].addresses[0]",
        "must be a valid IP address",
    ),
    (
        "slice-address-family",
        slice_(endpoints=[{"addresses": ["fd00::1"]}]),
        "endpoints[0].addresses[0]",
        "must be a valid IPv4 address",
    ),
    (
        "slice-no-address",
        slice_(endpoints=[{"addresses": []}]),
        "endpoints[0].addresses",
        "Required value",
    ),
    (
        "slice-port-proto",
        slice_(ports=[{"port": 80, "protocol": "ICMP"}]),
        "ports[0].protocol",
        "Unsupported value",
    ),
    (
        "node-podcidr-outside",
        node(podCIDR="10.0.0.0/24"),
        "spec.podCIDR",
        "must be inside the cluster podCIDR 10.244.0.0/16",
    ),
    ("node-podcidr-bad", node(podCIDR="10.244.0.1/24"), "spec.podCIDR", "must be a valid CIDR"),
    (
        "node-podcidrs-mismatch",
        node(podCIDR="10.244.1.0/24", podCIDRs=["10.244.2.0/24"]),
        "spec.podCIDRs[0]",
        "must match spec.podCIDR",
    ),
]


@pytest.mark.parametrize(
    ("data", "field", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_refused_with_one_line_naming_object_and_field(
    data: dict[str, Any], field: str, fragment: str
) -> None:
    api = make_api()
    rev = api.store.revision
    free = api.services.cluster_ips.free
    o = object_from_dict(data)
    with pytest.raises(InvalidError) as info:
        api.create(o)
    err = info.value
    text = str(err)
    assert "\n" not in text
    assert err.obj == o.ref and err.field == field
    assert text.startswith(f"{o.ref}: {field}: ")
    assert fragment in text
    assert api.store.revision == rev  # nothing stored
    assert api.services.cluster_ips.free == free  # nothing allocated


def test_valid_objects_pass() -> None:
    api = make_api()
    for data in (svc(), deploy(), pod(), slice_(), node(podCIDR="10.244.7.0/24")):
        api.create(object_from_dict(data))
    multi = svc(
        ports=[{"port": 80, "name": "http"}, {"port": 80, "name": "dns", "protocol": "UDP"}]
    )
    api.create(object_from_dict({**multi, "metadata": {"name": "multi"}}))


def test_missing_name_is_refused() -> None:
    api = make_api()
    with pytest.raises(
        InvalidError, match=r"metadata.name: Required value: name or generateName is required"
    ):
        api.create(object_from_dict({"apiVersion": "v1", "kind": "Pod", "spec": POD_SPEC}))


def test_immutable_fields_on_update() -> None:
    api = make_api()
    d = api.create(object_from_dict(deploy()))
    changed = object_from_dict(
        deploy(
            selector={"matchLabels": {"app": "web", "v": "2"}},
            template={"metadata": {"labels": {"app": "web", "v": "2"}}, "spec": POD_SPEC},
        )
    )
    with pytest.raises(
        InvalidError, match=r"Deployment/default/web: spec.selector: .*field is immutable"
    ):
        api.update(changed)
    assert api.store.get("Deployment", "default/web") == d
    n = api.create(object_from_dict(node(podCIDR="10.244.3.0/24")))
    with pytest.raises(InvalidError, match=r"Node/n9: spec.podCIDR: Forbidden"):
        api.update(object_from_dict(node(podCIDR="10.244.4.0/24")))
    assert api.store.get("Node", "n9") == n


def test_a_pod_update_checks_the_spec_it_changes() -> None:
    """An update is validated where it differs from the stored pod (which passed): a bad
    container port is refused, an annotation alone is written."""
    api = make_api()
    p = api.create(object_from_dict(pod()))
    noted = api.update(p.with_meta(annotations={"note": "x"}, resource_version=None))
    assert noted.metadata.annotations == {"note": "x"}
    bad_spec = object_from_dict(pod(containers=[{"name": "c", "ports": [{"containerPort": 0}]}]))
    with pytest.raises(InvalidError, match=r"Pod/default/p: spec.containers\[0\].ports"):
        api.update(bad_spec)
    bad_label = noted.with_meta(labels={"-bad": "x"}, resource_version=None)
    with pytest.raises(InvalidError, match=r"Pod/default/p: metadata.labels"):
        api.update(bad_label)
    assert api.store.get("Pod", "default/p") == noted
