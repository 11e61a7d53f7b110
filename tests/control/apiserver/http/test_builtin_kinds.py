"""The built-in kinds without a controller in svclab (issue 23), driven by the real
kubectl and the official kubernetes Python client against one ``svclab serve``:
create and apply of every kind, kube-apiserver's defaults and empty status structs read
back and deserialized by the client's own models, ``kubectl get`` columns, one refused
object per validated kind with kube-apiserver's 422 message, ``kubectl create
job|cronjob|ingress|poddisruptionbudget|priorityclass|quota`` (protobuf bodies),
``kubectl explain``, and a Service read back with ``status.loadBalancer``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from serving import Served

pytestmark = pytest.mark.slow


#: one object of each kind (kind -> manifest); all are created by ``kubectl apply``
OBJECTS: list[dict[str, Any]] = [
    {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "np"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [
                {
                    "from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                    "ports": [{"port": 80}, {"port": 8000, "endPort": 8080}],
                }
            ],
            "egress": [{"to": [{"namespaceSelector": {}}]}],
        },
    },
    {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {"name": "nginx"},
        "spec": {"controller": "k8s.io/ingress-nginx"},
    },
    {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "ing"},
        "spec": {
            "ingressClassName": "nginx",
            "tls": [{"hosts": ["*.example.com"], "secretName": "tls"}],
            "rules": [
                {
                    "host": "web.example.com",
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "web", "port": {"number": 80}}},
                            }
                        ]
                    },
                }
            ],
        },
    },
    {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "pdb"},
        "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}},
    },
    {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "hpa"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "maxReplicas": 5,
        },
    },
    {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "lr"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"cpu": "100m"}}]},
    },
    {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "rq"},
        "spec": {"hard": {"pods": "10", "limits.cpu": "4"}},
    },
    {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv1"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/data"},
            "storageClassName": "standard",
        },
    },
    {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "pvc"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    },
    {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "pt"},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        },
    },
    {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
    },
    {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "standard",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "rancher.io/local-path",
    },
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "runc"},
        "handler": "runc",
    },
    {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "lock"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "vwc"},
        "webhooks": [
            {
                "name": "check.example.com",
                "clientConfig": {"service": {"namespace": "default", "name": "hook"}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
        ],
    },
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("serve") / "state")
    try:
        s.start()
        manifest = "---\n".join(yaml.safe_dump(o) for o in OBJECTS)
        out = s.kubectl("apply", "-f", "-", input=manifest)
        assert out.stdout.count("created") == len(OBJECTS), out.stdout
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def api(srv: Served) -> client.ApiClient:
    return config.new_client_from_config(str(srv.kubeconfig))


def _get(srv: Served, kind: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(srv.kubectl("get", kind, name, "-o", "json").stdout)
    return out


def test_kube_apiserver_defaults_and_empty_status_structs(srv: Served) -> None:
    np = _get(srv, "networkpolicy", "np")
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert np["spec"]["ingress"][0]["ports"] == [
        {"port": 80, "protocol": "TCP"},
        {"port": 8000, "endPort": 8080, "protocol": "TCP"},
    ]
    assert np["metadata"]["generation"] == 1
    assert _get(srv, "ingress", "ing")["status"] == {"loadBalancer": {}}
    assert _get(srv, "pdb", "pdb")["status"] == {
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "disruptionsAllowed": 0,
        "expectedPods": 0,
    }
    hpa = _get(srv, "hpa", "hpa")
    assert hpa["spec"]["minReplicas"] == 1
    assert hpa["spec"]["metrics"] == [
        {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80},
            },
        }
    ]
    assert hpa["status"] == {"desiredReplicas": 0}
    lr = _get(srv, "limitrange", "lr")["spec"]["limits"][0]
    assert lr["default"] == {"cpu": "2"} and lr["defaultRequest"] == {"cpu": "2"}
    assert _get(srv, "quota", "rq")["status"] == {}
    pv = _get(srv, "pv", "pv1")
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["volumeMode"] == "Filesystem" and pv["status"] == {"phase": "Pending"}
    pvc = _get(srv, "pvc", "pvc")
    assert pvc["spec"]["volumeMode"] == "Filesystem" and pvc["status"] == {"phase": "Pending"}
    pc = _get(srv, "priorityclass", "high")
    assert pc["preemptionPolicy"] == "PreemptLowerPriority" and pc["value"] == 1000
    sc = _get(srv, "storageclass", "standard")
    assert (sc["reclaimPolicy"], sc["volumeBindingMode"]) == ("Delete", "Immediate")
    hook = _get(srv, "validatingwebhookconfiguration", "vwc")["webhooks"][0]
    assert hook["failurePolicy"] == "Fail" and hook["matchPolicy"] == "Equivalent"
    assert hook["timeoutSeconds"] == 10 and hook["clientConfig"]["service"]["port"] == 443
    assert hook["namespaceSelector"] == {} and hook["objectSelector"] == {}


def test_the_python_clients_models_read_every_kind_back(api: client.ApiClient) -> None:
    """Each kind as the server sends it deserializes into the official client's model,
    and the model serializes back to exactly what the server sent: no field the model
    does not know, none lost, every type right."""
    net = client.NetworkingV1Api(api)
    core = client.CoreV1Api(api)
    kw: dict[str, Any] = {"_preload_content": False}
    reads = [
        (net.read_namespaced_network_policy("np", "default", **kw), "V1NetworkPolicy"),
        (net.read_namespaced_ingress("ing", "default", **kw), "V1Ingress"),
        (net.read_ingress_class("nginx", **kw), "V1IngressClass"),
        (
            client.PolicyV1Api(api).read_namespaced_pod_disruption_budget("pdb", "default", **kw),
            "V1PodDisruptionBudget",
        ),
        (
            client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(
                "hpa", "default", **kw
            ),
            "V2HorizontalPodAutoscaler",
        ),
        (core.read_namespaced_limit_range("lr", "default", **kw), "V1LimitRange"),
        (core.read_namespaced_resource_quota("rq", "default", **kw), "V1ResourceQuota"),
        (core.read_persistent_volume("pv1", **kw), "V1PersistentVolume"),
        (
            core.read_namespaced_persistent_volume_claim("pvc", "default", **kw),
            "V1PersistentVolumeClaim",
        ),
        (core.read_namespaced_pod_template("pt", "default", **kw), "V1PodTemplate"),
        (client.SchedulingV1Api(api).read_priority_class("high", **kw), "V1PriorityClass"),
        (client.StorageV1Api(api).read_storage_class("standard", **kw), "V1StorageClass"),
        (client.NodeV1Api(api).read_runtime_class("runc", **kw), "V1RuntimeClass"),
        (client.CoordinationV1Api(api).read_namespaced_lease("lock", "default", **kw), "V1Lease"),
        (
            client.AdmissionregistrationV1Api(api).read_validating_webhook_configuration(
                "vwc", **kw
            ),
            "V1ValidatingWebhookConfiguration",
        ),
        (core.read_namespaced_service("kubernetes", "default", **kw), "V1Service"),
    ]
    for resp, model in reads:
        raw = json.loads(resp.data)
        obj = api.deserialize(json.dumps(raw), model, "application/json")
        assert type(obj).__name__ == model
        assert _plain(api.sanitize_for_serialization(obj)) == _plain(raw), model


def _plain(d: Any) -> Any:
    """JSON with the client's datetime rendering evened out (``...Z`` vs ``+00:00``)."""
    return json.loads(json.dumps(d, default=str).replace("+00:00", "Z"))


def test_kubectl_get_prints_kube_apiservers_columns(srv: Served) -> None:
    def table(kind: str) -> list[list[str]]:
        lines = srv.kubectl("get", kind).stdout.splitlines()
        return [line.split() for line in lines]

    t = table("networkpolicies")
    assert t[0] == ["NAME", "POD-SELECTOR", "AGE"] and t[1][:2] == ["np", "app=web"]
    t = table("ingress")
    assert t[0] == ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
    assert t[1][:5] == ["ing", "nginx", "web.example.com", "80,", "443"]
    t = table("pdb")
    assert t[0] == [
        "NAME",
        "MIN",
        "AVAILABLE",
        "MAX",
        "UNAVAILABLE",
        "ALLOWED",
        "DISRUPTIONS",
        "AGE",
    ]
    assert t[1][:4] == ["pdb", "50%", "N/A", "0"]
    t = table("hpa")
    assert t[0] == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert t[1][:7] == ["hpa", "Deployment/web", "cpu:", "<unknown>/80%", "1", "5", "0"]
    t = table("quota")
    assert t[0] == ["NAME", "REQUEST", "LIMIT", "AGE"]
    t = table("pv")
    assert t[0][:6] == ["NAME", "CAPACITY", "ACCESS", "MODES", "RECLAIM", "POLICY"]
    assert t[1][:5] == ["pv1", "1Gi", "RWO", "Retain", "Pending"]
    t = table("pvc")
    assert t[1][:2] == ["pvc", "Pending"]
    t = table("priorityclass")
    assert t[0] == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert t[1][:3] == ["high", "1000", "false"] and t[1][-1] == "PreemptLowerPriority"
    t = table("storageclass")
    assert t[1][:3] == ["standard", "(default)", "rancher.io/local-path"]
    assert table("ingressclass")[1][:3] == ["nginx", "k8s.io/ingress-nginx", "<none>"]
    assert table("runtimeclass")[1][:2] == ["runc", "runc"]
    assert table("lease")[1][:2] == ["lock", "me"]
    assert table("podtemplates")[0] == ["NAME", "CONTAINERS", "IMAGES", "POD", "LABELS"]
    assert table("podtemplates")[1] == ["pt", "c", "nginx", "app=web"]
    assert table("validatingwebhookconfigurations")[1][:2] == ["vwc", "1"]
    assert table("limitranges")[0] == ["NAME", "CREATED", "AT"]


def _refused(srv: Served, obj: dict[str, Any]) -> str:
    out = srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=False)
    assert out.returncode != 0, f"{obj['kind']} was accepted"
    return out.stderr.strip()


def _obj(kind: str, api_version: str, name: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, **fields}


# (object, kube-apiserver's message after `... is invalid: `)
REFUSED: list[tuple[dict[str, Any], str]] = [
    (
        _obj(
            "NetworkPolicy",
            "networking.k8s.io/v1",
            "bad-np",
            spec={"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]},
        ),
        'spec.ingress[0].ports[0].protocol: Unsupported value: "ICMP": supported values: '
        '"TCP", "UDP", "SCTP"',
    ),
    (
        _obj(
            "NetworkPolicy",
            "networking.k8s.io/v1",
            "bad-np",
            spec={
                "podSelector": {},
                "egress": [
                    {"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}]}
                ],
            },
        ),
        'spec.egress[0].to[0].ipBlock.except[0]: Invalid value: "10.1.0.0/24": '
        "must be a strict subset of `cidr`",
    ),
    (
        _obj(
            "NetworkPolicy",
            "networking.k8s.io/v1",
            "bad-np",
            spec={"podSelector": {}, "ingress": [{"from": [{}]}]},
        ),
        "spec.ingress[0].from[0]: Required value: must specify a peer",
    ),
    (
        _obj(
            "NetworkPolicy",
            "networking.k8s.io/v1",
            "bad-np",
            spec={"podSelector": {}, "ingress": [{"ports": [{"port": 90, "endPort": 80}]}]},
        ),
        "spec.ingress[0].ports[0].endPort: Invalid value: 80: "
        "must be greater than or equal to `port`",
    ),
    (
        _obj(
            "Ingress",
            "networking.k8s.io/v1",
            "bad-ing",
            spec={
                "rules": [
                    {
                        "host": "web.example.com",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "backend": {"service": {"name": "w", "port": {"number": 80}}},
                                }
                            ]
                        },
                    }
                ]
            },
        ),
        "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified",
    ),
    (
        _obj(
            "Ingress",
            "networking.k8s.io/v1",
            "bad-ing",
            spec={"rules": [{"host": "10.0.0.1"}]},
        ),
        'spec.rules[0].host: Invalid value: "10.0.0.1": must be a DNS name, not an IP address',
    ),
    (
        _obj(
            "Ingress",
            "networking.k8s.io/v1",
            "bad-ing",
            spec={"defaultBackend": {"service": {"name": "web", "port": {}}}},
        ),
        "spec.defaultBackend: Required value: port name or number is required",
    ),
    (
        _obj("IngressClass", "networking.k8s.io/v1", "bad-ic", spec={"controller": "nginx"}),
        'spec.controller: Invalid value: "nginx": must be a domain-prefixed path '
        '(such as "acme.io/foo")',
    ),
    (
        _obj(
            "PodDisruptionBudget",
            "policy/v1",
            "bad-pdb",
            spec={"minAvailable": "150%"},
        ),
        'spec.minAvailable: Invalid value: "150%": must not be greater than 100%',
    ),
    (
        _obj(
            "HorizontalPodAutoscaler",
            "autoscaling/v2",
            "bad-hpa",
            spec={
                "scaleTargetRef": {"kind": "Deployment", "name": "web"},
                "minReplicas": 3,
                "maxReplicas": 2,
            },
        ),
        "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`",
    ),
    (
        _obj("PriorityClass", "scheduling.k8s.io/v1", "too-high", value=2_000_000_000),
        "value: Forbidden: maximum allowed value of a user defined priority is 1000000000",
    ),
    (
        _obj(
            "PersistentVolumeClaim",
            "v1",
            "bad-pvc",
            spec={"resources": {"requests": {"storage": "1Gi"}}},
        ),
        "spec.accessModes: Required value: at least 1 access mode is required",
    ),
    (
        _obj(
            "PersistentVolume",
            "v1",
            "bad-pv",
            spec={"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]},
        ),
        "spec: Required value: must specify a volume type",
    ),
    (
        _obj(
            "StorageClass", "storage.k8s.io/v1", "bad-sc", provisioner="x", reclaimPolicy="Recycle"
        ),
        'reclaimPolicy: Unsupported value: "Recycle": supported values: "Delete", "Retain"',
    ),
    (
        _obj("RuntimeClass", "node.k8s.io/v1", "bad-rc", handler="Not_A_Label"),
        'handler: Invalid value: "Not_A_Label": a lowercase RFC 1123 label must consist of',
    ),
    (
        _obj("Lease", "coordination.k8s.io/v1", "bad-lease", spec={"leaseDurationSeconds": 0}),
        "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
    ),
    (
        _obj("ResourceQuota", "v1", "bad-rq", spec={"hard": {"pods": "-1"}}),
        'spec.hard[pods]: Invalid value: "-1": must be greater than or equal to 0',
    ),
    (
        _obj(
            "LimitRange",
            "v1",
            "bad-lr",
            spec={"limits": [{"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}}]},
        ),
        'spec.limits[0].min[cpu]: Invalid value: "2": min value 2 is greater than max value 1',
    ),
    (
        _obj("PodTemplate", "v1", "bad-pt", template={"spec": {"containers": []}}),
        "template.spec.containers: Required value",
    ),
    (
        _obj(
            "CertificateSigningRequest",
            "certificates.k8s.io/v1",
            "csr",
            spec={
                "request": "bm90IGEgY3Ny",
                "signerName": "example.com/x",
                "usages": ["client auth"],
            },
        ),
        'spec.request: Invalid value: "<value omitted>": PEM block type must be CERTIFICATE REQUEST',
    ),
    (
        _obj(
            "ValidatingWebhookConfiguration",
            "admissionregistration.k8s.io/v1",
            "bad-vwc",
            webhooks=[
                {
                    "name": "check.example.com",
                    "clientConfig": {
                        "url": "https://h/x",
                        "service": {"namespace": "d", "name": "h"},
                    },
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        ),
        "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
    ),
]


@pytest.mark.parametrize(
    ("obj", "why"), REFUSED, ids=[f"{o['kind']}-{i}" for i, (o, _) in enumerate(REFUSED)]
)
def test_invalid_objects_are_refused_with_kube_apiservers_message(
    srv: Served, obj: dict[str, Any], why: str
) -> None:
    kind, name = obj["kind"], obj["metadata"]["name"]
    err = _refused(srv, obj)
    assert f'{kind} "{name}" is invalid: {why}' in err, err
    gone = srv.kubectl("get", kind.lower(), name, check=False)
    assert gone.returncode != 0  # nothing was stored


def test_updates_keep_what_kube_apiserver_keeps_immutable(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as ei:
        client.SchedulingV1Api(api).patch_priority_class("high", {"value": 5})
    assert ei.value.status == 422
    assert json.loads(ei.value.body)["message"] == (
        'PriorityClass.scheduling.k8s.io "high" is invalid: value: Forbidden: '
        "may not be changed in an update."
    )
    with pytest.raises(ApiException) as ei:
        client.NetworkingV1Api(api).patch_ingress_class("nginx", {"spec": {"controller": "a.io/b"}})
    assert json.loads(ei.value.body)["message"] == (
        'IngressClass.networking.k8s.io "nginx" is invalid: spec.controller: '
        'Invalid value: "a.io/b": '
        "field is immutable"
    )


def test_a_grouped_kind_is_named_with_its_group_as_kube_apiserver_names_it(
    api: client.ApiClient, srv: Served
) -> None:
    """kube-apiserver names a grouped kind ``Kind.group`` in a 422 and the resource
    ``plural.group`` in a 404/409; a core kind stays bare."""
    bad = _workload("Deployment", "apps/v1", "grouped")
    bad["spec"]["replicas"] = -1
    with pytest.raises(ApiException) as ei:
        client.AppsV1Api(api).create_namespaced_deployment("default", bad)
    body = json.loads(ei.value.body)
    assert ei.value.status == 422 and body["message"] == (
        'Deployment.apps "grouped" is invalid: spec.replicas: Invalid value: -1: '
        "must be greater than or equal to 0"
    ), body
    assert body["details"]["group"] == "apps" and body["details"]["kind"] == "Deployment"
    with pytest.raises(ApiException) as ei:
        client.CoreV1Api(api).create_namespaced_service(
            "default", {"metadata": {"name": "bare"}, "spec": {"ports": [{"port": 0}]}}
        )
    assert json.loads(ei.value.body)["message"].startswith('Service "bare" is invalid: ')
    # the real kubectl: its own "The KIND ..." for a 422, the server's words for a 404
    out = srv.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert out.returncode == 1 and 'The Deployment "grouped" is invalid' in out.stderr
    out = srv.kubectl("get", "deployment", "grouped", check=False)
    assert out.stderr.strip() == (
        'Error from server (NotFound): deployments.apps "grouped" not found'
    ), out.stderr


def test_kubectl_create_sends_protobuf_for_these_kinds(srv: Served) -> None:
    srv.kubectl("create", "job", "once", "--image=busybox", "--", "echo", "hi")
    job = _get(srv, "job", "once")
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert (c["image"], c["command"]) == ("busybox", ["echo", "hi"])
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    srv.kubectl("create", "cronjob", "tick", "--image=busybox", "--schedule=*/5 * * * *")
    cj = _get(srv, "cronjob", "tick")
    assert cj["spec"]["schedule"] == "*/5 * * * *"
    assert cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    srv.kubectl(
        "create",
        "ingress",
        "simple",
        "--class=nginx",
        "--rule=foo.com/bar*=svc1:8080,tls=my-cert",
        "--rule=/path=svc2:http",
    )
    ing = _get(srv, "ingress", "simple")
    assert ing["spec"]["ingressClassName"] == "nginx"
    assert ing["spec"]["tls"] == [{"hosts": ["foo.com"], "secretName": "my-cert"}]
    rule = ing["spec"]["rules"][0]
    assert rule["host"] == "foo.com"
    assert rule["http"]["paths"][0] == {
        "path": "/bar",
        "pathType": "Prefix",
        "backend": {"service": {"name": "svc1", "port": {"number": 8080}}},
    }
    assert ing["spec"]["rules"][1]["http"]["paths"][0]["backend"]["service"] == {
        "name": "svc2",
        "port": {"name": "http"},
    }
    srv.kubectl("create", "poddisruptionbudget", "p2", "--selector=app=web", "--min-available=0")
    assert _get(srv, "pdb", "p2")["spec"]["minAvailable"] == 0
    srv.kubectl("create", "priorityclass", "zero", "--value=0", "--description=low")
    zero = _get(srv, "priorityclass", "zero")
    assert (zero["value"], zero["description"]) == (0, "low")
    srv.kubectl("create", "quota", "q2", "--hard=cpu=1,pods=2", "--scopes=BestEffort")
    q = _get(srv, "quota", "q2")
    assert q["spec"] == {"hard": {"cpu": "1", "pods": "2"}, "scopes": ["BestEffort"]}
    refused = srv.kubectl("create", "priorityclass", "huge", "--value=2000000000", check=False)
    assert refused.returncode != 0
    assert "maximum allowed value of a user defined priority is 1000000000" in refused.stderr


def test_a_service_comes_back_with_status_load_balancer(api: client.ApiClient, srv: Served) -> None:
    core = client.CoreV1Api(api)
    made = core.create_namespaced_service(
        "default",
        client.V1Service(
            metadata=client.V1ObjectMeta(name="lbs"),
            spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)]),
        ),
    )
    assert made.status is not None and made.status.load_balancer is not None
    assert _get(srv, "service", "lbs")["status"] == {"loadBalancer": {}}


@pytest.mark.parametrize(
    ("field", "want"),
    [
        ("networkpolicy.spec.policyTypes", "policyTypes"),
        ("ingress.spec.rules.http.paths.pathType", "pathType"),
        ("poddisruptionbudget.spec.minAvailable", "minAvailable"),
        ("priorityclass.value", "value"),
    ],
)
def test_kubectl_explain_new_kinds(srv: Served, field: str, want: str) -> None:
    out = srv.kubectl("explain", field).stdout
    assert f"FIELD: {want}" in out and "DESCRIPTION:" in out


def _workload(kind: str, api_version: str, name: str) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": name}}, "template": template}
    if kind == "ReplicationController":
        spec["selector"] = {"app": name}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec}


def test_workload_kinds_have_kube_apiservers_columns(srv: Served) -> None:
    """The tables of the kinds other helpers' controllers drive: their columns are the
    apiserver's, whatever the controllers have done to the objects' status."""
    docs = [
        _workload("StatefulSet", "apps/v1", "sts"),
        _workload("DaemonSet", "apps/v1", "ds"),
        _workload("ReplicationController", "v1", "rc"),
    ]
    srv.kubectl("apply", "-f", "-", input="---\n".join(yaml.safe_dump(d) for d in docs))
    srv.kubectl("create", "job", "cols", "--image=busybox")
    srv.kubectl("create", "cronjob", "cols", "--image=busybox", "--schedule=0 * * * *")

    def header(kind: str, *extra: str) -> list[str]:
        return srv.kubectl("get", kind, *extra).stdout.splitlines()[0].split()

    assert header("statefulsets") == ["NAME", "READY", "AGE"]
    assert header("daemonsets") == [
        "NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE", "SELECTOR", "AGE"
    ]  # fmt: skip
    assert header("rc") == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert header("jobs") == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert header("cronjobs") == [
        "NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"
    ]  # fmt: skip
    assert header("jobs", "-o", "wide")[-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    cj = srv.kubectl("get", "cronjob", "cols").stdout.splitlines()[1].split()
    # timezone unset, no active job (Suspend is the CronJob defaulting's: not checked here)
    assert cj[:5] == ["cols", "0", "*", "*", "*"] and (cj[6], cj[8]) == ("<none>", "0")
