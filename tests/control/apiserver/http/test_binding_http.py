"""pods/binding over HTTPS with the official kubernetes Python client: the pod gets its
node, the Binding's annotations and PodScheduled True; a second binding, a stale uid or
resourceVersion precondition get 409 with kube-apiserver's wording, nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from serving import Served

pytestmark = pytest.mark.slow

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "manual"},
    # a scheduler nobody runs: the pod stays unbound until this test binds it
    "spec": {"schedulerName": "by-hand", "containers": [{"name": "c", "image": "nginx"}]},
}


@pytest.fixture(scope="module")
def v1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.CoreV1Api]:
    base: Path = tmp_path_factory.mktemp("bind")
    s = Served(base / "state")
    try:
        s.start()
        yield client.CoreV1Api(config.new_client_from_config(str(s.kubeconfig)))
    finally:
        s.stop()


def _binding(node: str, **meta: str) -> client.V1Binding:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name="manual", **meta),  # type: ignore[arg-type]
        target=client.V1ObjectReference(kind="Node", name=node),
    )


def _bind(v1: client.CoreV1Api, body: client.V1Binding) -> dict[str, object]:
    # the response is a Status, which the client cannot read as a V1Binding: raw JSON
    resp = v1.create_namespaced_pod_binding("manual", "default", body, _preload_content=False)
    out: dict[str, object] = json.loads(resp.data)
    return out


def test_binding_subresource(v1: client.CoreV1Api) -> None:
    pod = v1.create_namespaced_pod("default", POD)
    uid, rv = pod.metadata.uid, pod.metadata.resource_version
    with pytest.raises(ApiException) as e:  # a uid precondition that does not hold
        _bind(v1, _binding("node-1", uid="not-the-uid"))
    assert e.value.status == 409
    assert "Precondition failed: UID in precondition: not-the-uid" in str(e.value.body)
    with pytest.raises(ApiException) as e:  # a stale resourceVersion
        _bind(v1, _binding("node-1", uid=uid, resource_version="1"))
    assert e.value.status == 409 and "ResourceVersion in the precondition (1)" in str(e.value.body)
    assert v1.read_namespaced_pod("manual", "default").metadata.resource_version == rv

    body = _binding("node-1", uid=uid, resource_version=rv)
    body.metadata.annotations = {"example.com/why": "by hand"}
    assert _bind(v1, body)["status"] == "Success"
    bound = v1.read_namespaced_pod("manual", "default")
    assert bound.spec.node_name == "node-1"
    assert bound.metadata.annotations == {"example.com/why": "by hand"}
    assert ("PodScheduled", "True") in [(c.type, c.status) for c in bound.status.conditions]

    with pytest.raises(ApiException) as e:
        _bind(v1, _binding("node-2"))
    assert e.value.status == 409
    assert 'pod manual is already assigned to node \\"node-1\\"' in str(e.value.body)
