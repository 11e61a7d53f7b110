"""``/openapi/v2`` in gnostic's protobuf (kubectl 1.20's only form): the message
decodes back to the JSON document, and the negotiation is kube-apiserver's."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from control.apiserver.http import openapi, openapi_pb
from control.apiserver.http.status import APIError


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return dict(json.loads(openapi.v2_document()))


@pytest.fixture(scope="module")
def back() -> dict[str, Any]:
    return openapi_pb.decode(openapi.v2_protobuf())


def test_definitions_and_paths_decode_back_to_the_json_document(
    doc: dict[str, Any], back: dict[str, Any]
) -> None:
    assert back["swagger"] == "2.0" and back["info"] == doc["info"]
    for name in (
        "io.k8s.api.v1.Service",
        "io.k8s.api.v1.ServiceSpec",  # ports: merge key, list-map-keys
        "io.k8s.api.v1.ServicePort",  # targetPort: int-or-string, required
        "io.k8s.api.v1.Deployment",  # group-version-kind extension
        "io.k8s.api.v1.PodSpec",
        "io.k8s.api.v1.ObjectMeta",  # additionalProperties (labels)
    ):
        assert back["definitions"][name] == doc["definitions"][name], name
    for path in (
        "/api/v1/namespaces/{namespace}/services/{name}",
        "/apis/apps/v1/namespaces/{namespace}/deployments",
        "/apis/svclab.dev/v1alpha1/clusters/{name}",
    ):
        assert back["paths"][path] == doc["paths"][path], path
    # and all of it, but for the JSON Schema keys v2 has no field for (pydantic's anyOf)
    assert back["paths"] == doc["paths"]
    differ = {n for n in doc["definitions"] if back["definitions"][n] != doc["definitions"][n]}
    assert all(n.startswith("dev.svclab.") for n in differ)


def test_what_kubectl_1_20_reads(back: dict[str, Any]) -> None:
    spec = back["definitions"]["io.k8s.api.v1.ServiceSpec"]["properties"]
    assert spec["ports"]["x-kubernetes-patch-merge-key"] == "port"
    assert spec["clusterIP"]["type"] == "string"
    assert back["definitions"]["io.k8s.api.v1.Deployment"]["x-kubernetes-group-version-kind"] == [
        {"group": "apps", "version": "v1", "kind": "Deployment"}
    ]
    patch = back["paths"]["/api/v1/namespaces/{namespace}/services/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "",
        "version": "v1",
        "kind": "Service",
    }
    assert {"name": "dryRun", "in": "query"}.items() <= next(
        p for p in patch["parameters"] if p.get("name") == "dryRun"
    ).items()
    # kube-openapi's reader refuses a reference to a missing definition, an array
    # without exactly one item schema, and a schema with several types
    refs: list[str] = []

    def walk(s: Any) -> None:
        if isinstance(s, dict):
            if isinstance(s.get("$ref"), str):
                refs.append(s["$ref"])
            if s.get("type") == "array":
                assert isinstance(s.get("items"), dict)
            assert not isinstance(s.get("type"), list)
            for v in s.values():
                walk(v)
        elif isinstance(s, list):
            for v in s:
                walk(v)

    walk(back["definitions"])
    walk(back["paths"])
    assert refs and all(r.removeprefix("#/definitions/") in back["definitions"] for r in refs)


def test_wire_layout_follows_openapiv2_proto() -> None:
    """Independent of the descriptors: Document.swagger is field 1 (tag 0x0a),
    Document.info field 2 (0x12) with Info.title field 1."""
    data = openapi.v2_protobuf()
    assert data.startswith(b"\x0a\x032.0\x12")
    assert b"\x0a\x0aKubernetes" in data[:40]


def test_negotiation_etag_and_304() -> None:
    pb = openapi.serve("/openapi/v2", openapi.PB_V2)
    assert pb.media_type == openapi.PB_V2_CONTENT_TYPE
    assert bytes(pb.body) == openapi.v2_protobuf()
    etag = '"' + hashlib.sha512(openapi.v2_protobuf()).hexdigest().upper() + '"'
    assert pb.headers["etag"] == etag and pb.headers["vary"] == "Accept"
    assert openapi.serve("/openapi/v2", openapi.PB_V2_CONTENT_TYPE).media_type == pb.media_type
    assert openapi.serve("/openapi/v2", openapi.PB_V2, etag).status_code == 304
    assert openapi.serve("/openapi/v2", openapi.PB_V2, '"other"').status_code == 200
    for accept in ("", "*/*", "application/json", "application/*"):
        r = openapi.serve("/openapi/v2", accept)
        assert r.media_type == "application/json" and bytes(r.body) == openapi.v2_document()
    # q decides, then the more specific range
    mixed = f"application/json;q=0.5, {openapi.PB_V2}"
    assert openapi.serve("/openapi/v2", mixed).media_type == openapi.PB_V2_CONTENT_TYPE
    assert openapi.serve("/openapi/v2", f"*/*, {openapi.PB_V2}").media_type == pb.media_type
    with pytest.raises(APIError) as e:
        openapi.serve("/openapi/v2", "text/html")
    assert e.value.code == 406
