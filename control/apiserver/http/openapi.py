"""OpenAPI v3 (``/openapi/v3`` and one document per group/version) and v2
(``/openapi/v2``, JSON or gnostic protobuf, see :mod:`.openapi_pb`), built from a maintained source: the official kubernetes Python
client's generated models (``openapi_types``, ``attribute_map`` and the field
descriptions in their docstrings), which are generated from kube-apiserver's published
OpenAPI spec. svclab's own ``svclab.dev`` kinds come from their pydantic models; a
custom resource's from its CustomResourceDefinition (the documents are built again when
a CRD comes or goes).

What kubectl reads from it:

* ``explain``: the schemas (``x-kubernetes-group-version-kind``, descriptions, types);
* ``apply`` / ``edit``: each PATCH operation lists ``fieldValidation`` (so kubectl
  validates on the server) and its patch content types (strategic merge for built-in
  kinds, with the ``x-kubernetes-patch-merge-key`` / ``-strategy`` of
  :data:`.patch.MERGE_KEYS`, the same the server's strategic merge uses).

Documents are built once per process and cached with their hash (the
``serverRelativeURL`` of the v3 index carries it, as kube-apiserver's does).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import re
from typing import Any

from starlette.responses import Response

from control.apiserver.http import openapi_pb
from control.apiserver.http import patch as patches
from control.apiserver.http.resources import RESOURCES, Resource, group_versions, in_group_version
from control.apiserver.http.status import APIError
from netmodel import kinds

_LIST = re.compile(r"^[Ll]ist\[(.+)\]$")
_DICT = re.compile(r"^(?:dict\(str, (.+)\)|Dict\[str, (.+)\])$")
_DESC = re.compile(
    r"^\s*Gets the \w+ of this \w+\.\s*(?:# noqa: E501)?\s*\n(.*?)\n\s*:return:", re.S
)
_VERSION = re.compile(
    r"^(Core|Events|Storage|Discovery|Apps|Rbac|Authorization)?(V\d+(?:alpha\d+|beta\d+)?)(.+)$"
)

PB_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
#: what kube-apiserver answers protobuf requests with (either spelling asked)
PB_V2_CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def _models() -> Any:
    return importlib.import_module("kubernetes.client.models")


def def_name(model: str) -> str:
    """``V1Container`` -> ``io.k8s.api.v1.Container``; ``CoreV1Event`` ->
    ``io.k8s.api.core.v1.Event`` (kubectl explain shows the last part)."""
    m = _VERSION.match(model)
    if not m:
        return f"io.k8s.api.{model}"
    pkg, ver, rest = m.groups()
    return f"io.k8s.api.{pkg.lower() + '.' if pkg else ''}{ver.lower()}.{rest}"


def _field(cls: Any, attr: str) -> Any:
    return (getattr(cls, "model_fields", None) or {}).get(attr)


def _description(cls: Any, attr: str) -> str:
    f = _field(cls, attr)
    if f is not None:
        return str(f.description or "")
    prop = getattr(cls, attr, None)  # older clients: the getter's docstring
    doc = getattr(prop, "__doc__", None) or ""
    m = _DESC.search(doc)
    if not m:
        return ""
    text = m.group(1).replace("# noqa: E501", "")
    return " ".join(line.strip() for line in text.splitlines()).strip()


class _Builder:
    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}

    def type_schema(
        self, typ: str, parents: tuple[str, ...], field: str, kind: str
    ) -> dict[str, Any]:
        m = _LIST.match(typ)
        if m:
            s: dict[str, Any] = {
                "type": "array",
                "items": self.type_schema(m.group(1), (*parents, field), "", kind),
            }
            mk = patches.merge_key(parents, field, kind)
            if mk:
                s["x-kubernetes-patch-merge-key"] = mk
                s["x-kubernetes-patch-strategy"] = "merge"
                s["x-kubernetes-list-type"] = "map"
                s["x-kubernetes-list-map-keys"] = [mk]
            elif field in patches.SET_LISTS:
                s["x-kubernetes-patch-strategy"] = "merge"
                s["x-kubernetes-list-type"] = "set"
            return s
        m = _DICT.match(typ)
        if m:
            inner = m.group(1) or m.group(2)
            return {
                "type": "object",
                "additionalProperties": self.type_schema(inner, parents, "", kind),
            }
        simple = {
            "str": {"type": "string"},
            "bytes": {"type": "string", "format": "byte"},
            "int": {"type": "integer", "format": "int64"},
            "float": {"type": "number", "format": "double"},
            "bool": {"type": "boolean"},
            "datetime": {"type": "string", "format": "date-time"},
            "date": {"type": "string", "format": "date"},
            "object": {"x-kubernetes-int-or-string": True}
            if field in ("targetPort", "port", "maxSurge", "maxUnavailable")
            else {"type": "object"},
        }
        if typ in simple:
            return dict(simple[typ])
        return {
            "allOf": [
                {
                    "$ref": f"#/components/schemas/{self.model(typ, (*parents, field) if field else parents, kind)}"
                }
            ]
        }

    def model(self, name: str, parents: tuple[str, ...], kind: str) -> str:
        dn = def_name(name)
        # merge keys depend on the path (ports of containers vs of a Service): a model
        # reached under another parent gets its own name only when that changes it
        if dn in self.schemas:
            return dn
        cls = getattr(_models(), name)
        self.schemas[dn] = {}  # cycle guard
        props: dict[str, Any] = {}
        required: list[str] = []
        for attr, typ in cls.openapi_types.items():
            f = _field(cls, attr)
            if f is not None and f.is_required():
                required.append(cls.attribute_map[attr])
            wire_name = cls.attribute_map[attr]
            s = self.type_schema(typ, parents, wire_name, kind)
            desc = _description(cls, attr)
            if desc:
                s["description"] = desc
            props[wire_name] = s
        self.schemas[dn] = {"type": "object", "properties": props}
        if required:
            self.schemas[dn]["required"] = required
        return dn

    def resource(self, r: Resource) -> str | None:
        if r.crd:
            return self.custom(r)
        if r.model is None:
            return None
        dn = self.model(r.model, (), r.kind)
        self.schemas[dn]["x-kubernetes-group-version-kind"] = [
            {"group": r.group, "version": r.version, "kind": r.kind}
        ]
        self.schemas[dn].setdefault(
            "description", f"{r.kind} ({r.group_version}), served by svclab."
        )
        return dn


    def custom(self, r: Resource) -> str | None:
        """A custom resource's schema: its CRD version's ``openAPIV3Schema``, under
        kube-apiserver's definition name (the group reversed, ``com.example.v1.Widget``),
        with apiVersion, kind and metadata as kube-apiserver adds them."""
        from netmodel.customresources import CustomResource
        from netmodel.kinds import class_for

        cls = class_for(r.api_version, r.kind)
        if cls is None or not issubclass(cls, CustomResource):
            return None
        v = cls.version_spec(r.api_version) or {}
        schema = json.loads(json.dumps(((v.get("schema") or {}).get("openAPIV3Schema")) or {}))
        schema.setdefault("type", "object")
        props = schema.setdefault("properties", {})
        meta = self.model("V1ObjectMeta", (), r.kind)
        props["apiVersion"] = {
            "type": "string",
            "description": "APIVersion defines the versioned schema of this representation "
            "of an object.",
        }
        props["kind"] = {
            "type": "string",
            "description": "Kind is a string value representing the REST resource this "
            "object represents.",
        }
        props["metadata"] = {
            "allOf": [{"$ref": f"#/components/schemas/{meta}"}],
            "description": "Standard object's metadata. More info: "
            "https://git.k8s.io/community/contributors/devel/sig-architecture/"
            "api-conventions.md#metadata",
        }
        schema["x-kubernetes-group-version-kind"] = [
            {"group": r.group, "version": r.version, "kind": r.kind}
        ]
        dn = ".".join([*reversed(r.group.split(".")), r.version, r.kind])
        self.schemas[dn] = schema
        return dn


def _pydantic_schema(model: Any, prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    raw = model.model_json_schema(
        by_alias=True, ref_template=f"#/components/schemas/{prefix}{{model}}"
    )
    defs = raw.pop("$defs", {})
    return raw, {prefix + k: v for k, v in defs.items()}


def _svclab_schemas() -> dict[str, Any]:
    from netmodel.cluster import Cluster
    from netmodel.proxyconfig import KubeProxyConfiguration

    out: dict[str, Any] = {}
    for model, kind in ((Cluster, "Cluster"), (KubeProxyConfiguration, "KubeProxyConfiguration")):
        schema, defs = _pydantic_schema(model, "dev.svclab.v1alpha1.")
        out.update(defs)
        schema["x-kubernetes-group-version-kind"] = [
            {"group": "svclab.dev", "version": "v1alpha1", "kind": kind}
        ]
        schema.setdefault("description", f"svclab's {kind} document.")
        props = schema.setdefault("properties", {})
        props["metadata"] = {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "description": "Standard object's metadata.",
        }
        props["apiVersion"] = {"type": "string", "description": "svclab.dev/v1alpha1"}
        props["kind"] = {"type": "string", "description": kind}
        schema.pop("additionalProperties", None)
        out[f"dev.svclab.v1alpha1.{kind}"] = schema
    return out


def _param(name: str, desc: str, where: str = "query") -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "description": desc,
        "schema": {"type": "string", "uniqueItems": True},
    }


_WRITE_PARAMS = [
    _param("dryRun", "When present, indicates that modifications should not be persisted."),
    _param(
        "fieldManager",
        "fieldManager is a name associated with the actor or entity that is making these changes.",
    ),
    _param(
        "fieldValidation",
        "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (default), Strict.",
    ),
]


def _ops(r: Resource, ref: str | None) -> dict[str, Any]:
    gvk = {"group": r.group, "version": r.version, "kind": r.kind}
    base = f"/api/{r.version}" if not r.group else f"/apis/{r.group}/{r.version}"
    coll = f"{base}/namespaces/{{namespace}}/{r.name}" if r.namespaced else f"{base}/{r.name}"
    content = (
        {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}
        if ref
        else {"application/json": {"schema": {"type": "object"}}}
    )

    def op(
        action: str,
        verb: str,
        extra: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        o: dict[str, Any] = {
            "operationId": f"{verb}{r.kind}",
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
            "responses": {
                "200": {"description": "OK", "content": content},
                "401": {"description": "Unauthorized"},
            },
            "parameters": list(extra or []),
        }
        if body is not None:
            o["requestBody"] = {"content": body, "required": True}
        return o

    paths: dict[str, Any] = {}
    c: dict[str, Any] = {}
    if "list" in r.verbs:
        c["get"] = op(
            "list",
            "list",
            [
                _param(
                    "labelSelector",
                    "A selector to restrict the list of returned objects by their labels.",
                ),
                _param(
                    "fieldSelector",
                    "A selector to restrict the list of returned objects by their fields.",
                ),
                _param("limit", "limit"),
                _param("continue", "continue"),
                _param("watch", "watch"),
                _param("resourceVersion", "resourceVersion"),
            ],
        )
    if "create" in r.verbs:
        c["post"] = op("post", "create", _WRITE_PARAMS, content)
    if "deletecollection" in r.verbs:
        c["delete"] = op("deletecollection", "deletecollection")
    if c:
        paths[coll] = c
    item: dict[str, Any] = {}
    if "get" in r.verbs:
        item["get"] = op("get", "read")
    if "update" in r.verbs:
        item["put"] = op("put", "replace", _WRITE_PARAMS, content)
    if "patch" in r.verbs:
        types = [patches.JSON_PATCH, patches.MERGE_PATCH, patches.APPLY_YAML]
        if r.group != "svclab.dev" and not r.crd:  # custom resources: no strategic merge
            types.insert(2, patches.STRATEGIC)
        item["patch"] = op(
            "patch",
            "patch",
            [*_WRITE_PARAMS, _param("force", 'Force is going to "force" Apply requests.')],
            {t: {"schema": {"type": "object"}} for t in types},
        )
    if "delete" in r.verbs:
        item["delete"] = op(
            "delete",
            "delete",
            [
                _param("dryRun", "dryRun"),
                _param("propagationPolicy", "propagationPolicy"),
                _param("gracePeriodSeconds", "gracePeriodSeconds"),
            ],
        )
    if item:
        item["parameters"] = [
            {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
        ]
        if r.namespaced:
            item["parameters"].append(
                {"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"}}
            )
        paths[f"{coll}/{{name}}"] = item
    return paths


@functools.cache
def v3_document(group: str, version: str) -> bytes:
    b = _Builder()
    paths: dict[str, Any] = {}
    svclab = group == "svclab.dev"
    extra = _svclab_schemas() if svclab else {}
    for r in in_group_version(group, version):
        ref = b.resource(r) if not svclab else f"dev.svclab.v1alpha1.{r.kind}"
        paths.update(_ops(r, ref))
    if not svclab:
        b.model("V1Status", (), "Status")
        b.model("V1DeleteOptions", (), "DeleteOptions")
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {**b.schemas, **extra}},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


@functools.cache
def v3_index() -> bytes:
    paths = {}
    for g, versions in group_versions().items():
        for v in versions:
            h = hashlib.sha512(v3_document(g, v)).hexdigest()[:64].upper()
            p = _gv_path(g, v)
            paths[p] = {"serverRelativeURL": f"/openapi/v3/{p}?hash={h}"}
    return json.dumps({"paths": paths}, separators=(",", ":")).encode()


def _to_v2(obj: Any) -> Any:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if k == "$ref" and isinstance(v, str):
                out[k] = v.replace("#/components/schemas/", "#/definitions/")
            else:
                out[k] = _to_v2(v)
        if "allOf" in out and len(out["allOf"]) == 1:
            ref: dict[str, Any] = out.pop("allOf")[0]
            desc = out.get("description")
            out = dict(ref)
            if desc:
                out["description"] = desc
        return out
    if isinstance(obj, list):
        return [_to_v2(x) for x in obj]
    return obj


_V2_PRODUCES = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]


def _v2_parameter(p: dict[str, Any]) -> dict[str, Any]:
    """A v3 parameter (type under ``schema``) in v2's shape (type inline)."""
    out = {k: v for k, v in p.items() if k != "schema"}
    out.update(p.get("schema", {}))
    return out


def _v2_operation(op: dict[str, Any]) -> dict[str, Any]:
    """A v3 operation in v2's shape: the request body becomes the ``body`` parameter
    (its media types ``consumes``), each response carries its JSON schema."""
    out: dict[str, Any] = {
        k: v for k, v in op.items() if k not in ("parameters", "requestBody", "responses")
    }
    params = [_v2_parameter(p) for p in op.get("parameters", [])]
    body = op.get("requestBody")
    if body is not None:
        out["consumes"] = list(body["content"])
        first = next(iter(body["content"].values()))
        params.insert(
            0, {"name": "body", "in": "body", "required": True, "schema": first["schema"]}
        )
    out["produces"] = list(_V2_PRODUCES)
    if params:
        out["parameters"] = params
    responses: dict[str, Any] = {}
    for code, r in op.get("responses", {}).items():
        resp = {"description": r.get("description", "")}
        content = r.get("content", {})
        if "application/json" in content:
            resp["schema"] = content["application/json"]["schema"]
        responses[code] = resp
    out["responses"] = responses
    return out


def _v2_paths(paths: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, item in paths.items():
        v2: dict[str, Any] = {}
        for k, v in item.items():
            v2[k] = [_v2_parameter(p) for p in v] if k == "parameters" else _v2_operation(v)
        out[path] = v2
    return out


@functools.cache
def v2_document() -> bytes:
    """The Swagger 2.0 document: every group/version's v3 schemas and paths, in v2's
    shape (kubectl 1.2x reads the schemas for ``explain``/``apply`` and the PATCH
    operations' parameters for ``--dry-run=server`` and ``--validate``)."""
    defs: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for g, versions in group_versions().items():
        for v in versions:
            doc = json.loads(v3_document(g, v))
            defs.update(doc["components"]["schemas"])
            paths.update(_v2_paths(doc["paths"]))
    out = {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": _to_v2(paths),
        "definitions": _to_v2(defs),
    }
    return json.dumps(out, separators=(",", ":")).encode()


#: what ``/openapi/v2`` answers in, as kube-openapi's handler negotiates it:
#: (type, subtype, Content-Type sent back, the body)
_V2_TYPES: tuple[tuple[str, str, str, str], ...] = (
    ("application", "json", "application/json", "json"),
    ("application", PB_V2.split("/", 1)[1], PB_V2_CONTENT_TYPE, "pb"),
    ("application", PB_V2_CONTENT_TYPE.split("/", 1)[1], PB_V2_CONTENT_TYPE, "pb"),
)


def _accept_clauses(accept: str) -> list[tuple[str, str]]:
    """(type, subtype) of each media range of ``Accept``, best first: by q, then the
    more specific (no wildcard) first, then in the order given (as goautoneg sorts)."""
    clauses: list[tuple[float, int, int, str, str]] = []
    for i, part in enumerate((accept or "*/*").split(",")):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0]
        if not media:
            continue
        typ, _, sub = media.partition("/")
        q = 1.0
        for f in fields[1:]:
            k, _, v = f.partition("=")
            if k.strip() == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        if q <= 0:
            continue
        sub = sub or "*"
        clauses.append((-q, (typ == "*") + (sub == "*"), i, typ, sub))
    return [(t, s) for _, _, _, t, s in sorted(clauses)]


@functools.cache
def v2_protobuf() -> bytes:
    """:func:`v2_document` as gnostic's ``openapi.v2.Document`` message."""
    return openapi_pb.encode(json.loads(v2_document()))


@functools.cache
def _etag(kind: str) -> str:
    body = v2_document() if kind == "json" else v2_protobuf()
    return '"' + hashlib.sha512(body).hexdigest().upper() + '"'


def _serve_v2(accept: str, if_none_match: str) -> Response:
    """``/openapi/v2`` in JSON or protobuf, whichever ``Accept`` prefers; with the
    ETag kube-apiserver sends (the upper-case hex SHA-512 of the body, quoted) and 304
    when ``If-None-Match`` names it."""
    for typ, sub in _accept_clauses(accept):
        for want_t, want_s, content_type, kind in _V2_TYPES:
            if typ not in (want_t, "*") or sub not in (want_s, "*"):
                continue
            etag = _etag(kind)
            headers = {"ETag": etag, "Vary": "Accept"}
            if etag in (t.strip() for t in if_none_match.split(",")):
                return Response(status_code=304, headers=headers)
            body = v2_document() if kind == "json" else v2_protobuf()
            return Response(body, media_type=content_type, headers=headers)
    raise APIError(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, "
        f"{PB_V2}, {PB_V2_CONTENT_TYPE} (asked for {accept})",
        {},
    )


def serve(path: str, accept: str, if_none_match: str = "") -> Response:
    if path == "/openapi/v2":
        return _serve_v2(accept, if_none_match)
    if path == "/openapi/v3":
        return Response(v3_index(), media_type="application/json")
    if path.startswith("/openapi/v3/"):
        rest = path[len("/openapi/v3/") :].strip("/").split("/")
        if rest[0] == "api" and len(rest) == 2:
            g, v = "", rest[1]
        elif rest[0] == "apis" and len(rest) == 3:
            g, v = rest[1], rest[2]
        else:
            g, v = "-", "-"
        if in_group_version(g, v):
            return Response(
                v3_document(g, v),
                media_type="application/json",
                headers={"Cache-Control": "public, immutable"},
            )
    raise APIError(404, "NotFound", "the server could not find the requested resource", {})


@kinds.on_change
def _forget_documents() -> None:
    """A CRD's versions came or went: every document is built again when next asked."""
    for cached in (v3_document, v3_index, v2_document, v2_protobuf, _etag):
        cached.cache_clear()


__all__ = ["RESOURCES", "serve", "v2_document", "v2_protobuf", "v3_document", "v3_index"]
