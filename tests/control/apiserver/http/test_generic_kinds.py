"""ConfigMap, Secret and ServiceAccount through the generic path, driven by the real
kubectl and the official kubernetes Python client against a real ``svclab serve``:
create, get (kubectl's columns), list + watch (what an informer does), kube-apiserver's
defaulting (Secret type, stringData) and its 422 answers. One server for the module."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from serving import Served

pytestmark = pytest.mark.slow

CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
    "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')"
)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    s = Served(tmp_path_factory.mktemp("serve") / "state")
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def v1(srv: Served) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(srv.kubeconfig)))


def _json(srv: Served, *args: str) -> Any:
    return json.loads(srv.kubectl(*args, "-o", "json").stdout)


def test_kubectl_create_configmap_get_and_its_columns(srv: Served) -> None:
    out = srv.kubectl("create", "configmap", "cfg", "--from-literal=a=1", "--from-literal=b=2")
    assert out.stdout.strip() == "configmap/cfg created"
    cm = _json(srv, "get", "configmap", "cfg")
    assert cm["data"] == {"a": "1", "b": "2"}
    assert cm["metadata"]["namespace"] == "default" and cm["metadata"]["uid"]
    assert "generation" not in cm["metadata"]  # kube-apiserver counts none for ConfigMaps
    table = srv.kubectl("get", "cm", "cfg").stdout.splitlines()
    assert table[0].split() == ["NAME", "DATA", "AGE"]
    assert table[1].split()[:2] == ["cfg", "2"]
    again = srv.kubectl("create", "configmap", "cfg", check=False)
    assert again.returncode != 0
    assert 'configmaps "cfg" already exists' in again.stderr


def test_kubectl_create_secret_generic_is_opaque_and_base64(srv: Served) -> None:
    srv.kubectl("create", "secret", "generic", "s1", "--from-literal=password=hunter2")
    sec = _json(srv, "get", "secret", "s1")
    assert sec["type"] == "Opaque"
    assert base64.b64decode(sec["data"]["password"]) == b"hunter2"
    table = srv.kubectl("get", "secrets", "s1").stdout.splitlines()
    assert table[0].split() == ["NAME", "TYPE", "DATA", "AGE"]
    assert table[1].split()[:3] == ["s1", "Opaque", "1"]


def test_kubectl_create_serviceaccount(srv: Served) -> None:
    out = srv.kubectl("create", "serviceaccount", "bot")
    assert out.stdout.strip() == "serviceaccount/bot created"
    assert _json(srv, "get", "sa", "bot")["metadata"]["name"] == "bot"
    assert srv.kubectl("get", "serviceaccounts").stdout.splitlines()[0].split() == [
        "NAME",
        "SECRETS",
        "AGE",
    ]
    srv.kubectl("delete", "sa", "bot")
    gone = srv.kubectl("get", "sa", "bot", check=False)
    assert 'serviceaccounts "bot" not found' in gone.stderr


def test_secret_string_data_is_merged_into_data_and_never_returned(
    v1: client.CoreV1Api,
) -> None:
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name="s2"),
        data={"user": base64.b64encode(b"old").decode(), "keep": base64.b64encode(b"k").decode()},
        string_data={"user": "admin", "token": "t0k"},
    )
    made = v1.create_namespaced_secret("default", body)
    assert made.string_data is None and made.type == "Opaque"
    got = v1.read_namespaced_secret("s2", "default")
    assert {k: base64.b64decode(v) for k, v in got.data.items()} == {
        "user": b"admin",  # stringData wins over data
        "keep": b"k",
        "token": b"t0k",
    }
    assert got.string_data is None
    # a patch with stringData is merged the same way
    v1.patch_namespaced_secret("s2", "default", {"stringData": {"keep": "new"}})
    got = v1.read_namespaced_secret("s2", "default")
    assert base64.b64decode(got.data["keep"]) == b"new" and got.string_data is None


def _invalid(e: ApiException) -> dict[str, Any]:
    assert e.status == 422, e.body
    body: dict[str, Any] = json.loads(e.body)
    assert body["reason"] == "Invalid"
    return body


def test_invalid_objects_get_kube_apiservers_422_with_causes(v1: client.CoreV1Api) -> None:
    bad = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="bad"), data={"a b": "1"})
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_config_map("default", bad)
    body = _invalid(ei.value)
    assert body["message"] == (
        f'ConfigMap "bad" is invalid: data[a b]: Invalid value: "a b": {CONFIG_KEY_MSG}'
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": f'Invalid value: "a b": {CONFIG_KEY_MSG}',
            "field": "data[a b]",
        }
    ]
    bad_name = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="Bad_Name"))
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_config_map("default", bad_name)
    assert (
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"'
        in (_invalid(ei.value)["message"])
    )
    tls = client.V1Secret(
        metadata=client.V1ObjectMeta(name="t"), type="kubernetes.io/tls", string_data={"x": "y"}
    )
    with pytest.raises(ApiException) as ei:
        v1.create_namespaced_secret("default", tls)
    assert _invalid(ei.value)["message"] == 'Secret "t" is invalid: data[tls.crt]: Required value'
    with pytest.raises(ApiException) as ei:
        v1.read_namespaced_config_map("bad", "default")
    assert ei.value.status == 404  # nothing was stored


def test_an_immutable_configmap_keeps_its_data(v1: client.CoreV1Api) -> None:
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="frozen"), data={"a": "1"})
    cm.immutable = True
    v1.create_namespaced_config_map("default", cm)
    with pytest.raises(ApiException) as ei:
        v1.patch_namespaced_config_map("frozen", "default", {"data": {"a": "2"}})
    assert _invalid(ei.value)["message"] == (
        'ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    )
    # metadata may still change
    v1.patch_namespaced_config_map("frozen", "default", {"metadata": {"labels": {"x": "y"}}})
    got = v1.read_namespaced_config_map("frozen", "default")
    assert got.data == {"a": "1"} and got.metadata.labels == {"x": "y"}


def test_a_configmap_informer_lists_then_watches(v1: client.CoreV1Api) -> None:
    """What a SharedInformer does: a list (its first sync), then a watch from the list's
    resourceVersion that sees later writes."""
    v1.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="pre"), data={"p": "1"})
    )
    listing = v1.list_namespaced_config_map("default")  # the informer's first list
    assert {c.metadata.name: c.data for c in listing.items}["pre"] == {"p": "1"}
    seen: list[tuple[str, str, dict[str, str] | None]] = []

    def run() -> None:
        w = watch.Watch()
        for ev in w.stream(
            v1.list_namespaced_config_map,
            "default",
            resource_version=listing.metadata.resource_version,
            timeout_seconds=15,
        ):
            seen.append((ev["type"], ev["object"].metadata.name, ev["object"].data))
            if ev["type"] == "DELETED" and ev["object"].metadata.name == "w1":
                w.stop()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    v1.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="w1"), data={"k": "v"})
    )
    v1.patch_namespaced_config_map("w1", "default", {"data": {"k": "v2"}})
    v1.delete_namespaced_config_map("w1", "default")
    t.join(20)
    assert [s for s in seen if s[1] == "w1"] == [
        ("ADDED", "w1", {"k": "v"}),
        ("MODIFIED", "w1", {"k": "v2"}),
        ("DELETED", "w1", {"k": "v2"}),
    ]


def test_deleting_a_namespace_deletes_its_configmaps_secrets_and_serviceaccounts(
    srv: Served,
) -> None:
    srv.kubectl("create", "namespace", "tmp")
    srv.kubectl("-n", "tmp", "create", "configmap", "c", "--from-literal=a=1")
    srv.kubectl("-n", "tmp", "create", "secret", "generic", "s", "--from-literal=a=1")
    srv.kubectl("-n", "tmp", "create", "serviceaccount", "sa")
    out = srv.kubectl("delete", "namespace", "tmp", "--timeout=30s", check=False)
    assert out.returncode == 0, out.stderr
    gone = srv.kubectl("get", "namespace", "tmp", check=False)
    assert 'namespaces "tmp" not found' in gone.stderr
    assert srv.kubectl("get", "cm", "-n", "tmp", "-o", "name").stdout == ""
