"""Manifest loading: typed objects, kept-but-unmodelled fields, one-line strict errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from netmodel.errors import InputError, SchemaError
from netmodel.manifests import load, load_text
from netmodel.objects import Deployment, EndpointSlice, Service

GOOD = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {nodes: 3}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx
        ports: [{containerPort: 8080, name: http}]
        resources: {requests: {cpu: 100m, memory: 64Mi}}
        livenessProbe: {httpGet: {path: /healthz, port: 8080}}
      volumes: [{name: data, emptyDir: {}}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
"""


def test_typed_objects_and_cluster() -> None:
    m = load_text(GOOD, source="good.yaml")
    assert m.cluster is not None and m.cluster.spec.node_count == 3
    dep, svc = m.objects
    assert isinstance(dep, Deployment) and dep.spec.replicas == 3
    assert dep.spec.template.spec.containers[0].ports[0].container_port == 8080
    assert isinstance(svc, Service) and svc.namespace == "shop" and svc.key == "shop/web"
    assert svc.spec.ports[0].target_port == "http"


def test_fields_svclab_does_not_model_are_kept() -> None:
    dep = load_text(GOOD).objects[0]
    out = dep.to_dict()
    container = out["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": 8080}}
    assert out["spec"]["template"]["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]


def test_objects_are_frozen() -> None:
    svc = load_text(GOOD).objects[1]
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        svc.spec.cluster_ip = "10.96.0.5"  # type: ignore[misc]
    assert svc.evolve(kind="Service").spec == svc.spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n"
            "spec: {ports: [{port: 80, targtPort: 1}]}",
            "bad.yaml (document 1): Service/a: spec.ports[0].targtPort: unknown field",
        ),
        (
            "apiVersion: v1\nkind: Servic\nmetadata: {name: a}",
            "bad.yaml (document 1): Servic/a: kind: unknown kind 'Servic'",
        ),
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: '80'}]}",
            "bad.yaml (document 1): Service/a: spec.ports[0].port: expected integer, got string",
        ),
        (
            "apiVersion: v1\nkind: Deployment\nmetadata: {name: a}",
            "bad.yaml (document 1): Deployment/a: apiVersion: no kind 'Deployment' in apiVersion 'v1'",
        ),
        ("a: [", "bad.yaml: malformed YAML: line 1"),
        ("- 1\n- 2", "bad.yaml (document 1): document is a list, not a mapping"),
    ],
)
def test_bad_input_is_one_line_naming_file_document_object_field(text: str, expected: str) -> None:
    with pytest.raises(InputError) as err:
        load_text(text, source="bad.yaml")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(expected), msg


def test_second_document_is_named() -> None:
    text = GOOD + "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {nodeNam: x}\n"
    with pytest.raises(SchemaError) as err:
        load_text(text, source="f.yaml")
    assert str(err.value) == "f.yaml (document 4): Pod/p: spec.nodeNam: unknown field"


def test_directory_and_list_kind(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: discovery.k8s.io/v1\n  kind: EndpointSlice\n  metadata: {name: s}\n"
        "  addressType: IPv4\n  endpoints: [{addresses: [10.0.0.1]}]\n"
    )
    m = load([tmp_path])
    assert any(isinstance(o, EndpointSlice) for o in m.objects)
    assert len(m.sources) == 2


def test_missing_file() -> None:
    with pytest.raises(InputError, match=r"nope\.yaml: no such file"):
        load(["nope.yaml"])


def test_quantities_may_be_numbers() -> None:
    text = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
        "  - name: c\n    resources: {requests: {cpu: 1, memory: 1000}}\n"
    )
    pod = load_text(text).objects[0]
    assert pod.spec.containers[0].resources.requests == {"cpu": "1", "memory": "1000"}  # type: ignore[attr-defined]


def test_scalars_read_as_the_safe_loader_reads_them() -> None:
    """The reader remembers each plain scalar's tag by its text: a text seen plain and
    then quoted (or the other way round), as a key and as a value, keeps the type the
    safe loader gives it each time (timestamps aside: they stay strings)."""
    import yaml

    from netmodel.manifests import parse_documents

    text = (
        "a: 123\nb: '123'\nc: yes\nd: 'yes'\ne: ~\nf: null\ng: '~'\nh: 1.5\ni: '1.5'\n"
        "j: 0x1F\nk: [123, '123', yes, 'yes', 1.5, true, 'true', on]\n"
        "'123': 123\nl: {yes: no, 'no': yes}\n"
        "---\nm: '123'\nn: 123\no: 'null'\np: null\nq: 2017-02-10T16:33:46Z\n"
    )
    want = list(yaml.safe_load_all(text))
    want[1]["q"] = "2017-02-10T16:33:46Z"
    assert parse_documents(text) == want
    assert parse_documents(text)[0]["k"] == [123, "123", True, "yes", 1.5, True, "true", True]
