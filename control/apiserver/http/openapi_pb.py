"""The OpenAPI v2 document in gnostic's protobuf encoding
(``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``), the only form of
``/openapi/v2`` that kubectl up to 1.2x reads (``apply``, ``explain``, client-side
validation).

The wire format is the ``openapi.v2.Document`` message of gnostic's
``openapiv2/OpenAPIv2.proto`` (github.com/google/gnostic, commit
96635ff3a800e184f8b2f7bf9b3b765d0fa071cd; the same messages earlier lived in
github.com/googleapis/gnostic and now in github.com/google/gnostic-models). No
maintained Python package ships those generated messages, so the part svclab writes is
described here as data (message, field name, number, type), from the field numbers of
that ``.proto``, and the ``protobuf`` library builds the classes at run time, as
:mod:`.proto` does for Kubernetes' ``generated.proto``.

Conventions of that message set (which kubectl's reader, kube-openapi's
``pkg/util/proto``, relies on):

* JSON maps are repeated ``Named*`` (name, value) pairs, in document order;
* vendor extensions (``x-...``) and free values (``default``, ``enum``, ``example``)
  are ``Any`` messages whose ``yaml`` field holds the value as YAML text (svclab writes
  JSON, which is YAML);
* ``type`` is a list (``TypeItem``), ``items`` a list of schemas (``ItemsItem``),
  ``additionalProperties`` either a schema or a boolean.

JSON Schema keys that OpenAPI v2 has no field for (``anyOf``, ``oneOf``, ``const``,
``$defs``, ...; only svclab's pydantic-built ``svclab.dev`` schemas use them) are left
out, as gnostic would refuse them. :func:`decode` is the inverse of :func:`encode` for
every key that is kept.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import yaml
from google.protobuf import descriptor_pb2

from control.apiserver.http.proto import add_fields, message_classes

_PKG = "openapi.v2"
_T = descriptor_pb2.FieldDescriptorProto
STR, BOOL, I64, DBL, MSG = (
    _T.TYPE_STRING,
    _T.TYPE_BOOL,
    _T.TYPE_INT64,
    _T.TYPE_DOUBLE,
    _T.TYPE_MESSAGE,
)

# message -> [(field name, number, type, repeated, message type or None)]
Field = tuple[str, int, int, bool, str | None]


def _s(name: str, number: int) -> Field:
    return (name, number, STR, False, None)


def _m(name: str, number: int, ref: str, repeated: bool = False) -> Field:
    return (name, number, MSG, repeated, ref)


_VX = "vendor_extension"
#: the scalar keys of a Schema: JSON key -> (field, number, type)
_SCHEMA_SCALARS: dict[str, tuple[str, int, int]] = {
    "$ref": ("_ref", 1, STR),
    "format": ("format", 2, STR),
    "title": ("title", 3, STR),
    "description": ("description", 4, STR),
    "multipleOf": ("multiple_of", 6, DBL),
    "maximum": ("maximum", 7, DBL),
    "exclusiveMaximum": ("exclusive_maximum", 8, BOOL),
    "minimum": ("minimum", 9, DBL),
    "exclusiveMinimum": ("exclusive_minimum", 10, BOOL),
    "maxLength": ("max_length", 11, I64),
    "minLength": ("min_length", 12, I64),
    "pattern": ("pattern", 13, STR),
    "maxItems": ("max_items", 14, I64),
    "minItems": ("min_items", 15, I64),
    "uniqueItems": ("unique_items", 16, BOOL),
    "maxProperties": ("max_properties", 17, I64),
    "minProperties": ("min_properties", 18, I64),
    "discriminator": ("discriminator", 26, STR),
    "readOnly": ("read_only", 27, BOOL),
}
#: Schema keys holding free values (``Any``): JSON key -> (field, number, repeated)
_SCHEMA_ANYS: dict[str, tuple[str, int, bool]] = {
    "default": ("default", 5, False),
    "enum": ("enum", 20, True),
    "example": ("example", 30, False),
}
#: the scalar keys of a non-body parameter, per location: JSON key -> (field, number)
_PARAM_SCALARS: dict[str, dict[str, tuple[str, int, int]]] = {
    "query": {
        "required": ("required", 1, BOOL),
        "in": ("in", 2, STR),
        "description": ("description", 3, STR),
        "name": ("name", 4, STR),
        "allowEmptyValue": ("allow_empty_value", 5, BOOL),
        "type": ("type", 6, STR),
        "format": ("format", 7, STR),
        "uniqueItems": ("unique_items", 20, BOOL),
    },
    "path": {
        "required": ("required", 1, BOOL),
        "in": ("in", 2, STR),
        "description": ("description", 3, STR),
        "name": ("name", 4, STR),
        "type": ("type", 5, STR),
        "format": ("format", 6, STR),
        "uniqueItems": ("unique_items", 19, BOOL),
    },
}
_PARAM_SCALARS["header"] = _PARAM_SCALARS["path"]  # same numbering in the .proto
#: NonBodyParameter's oneof: location -> (field, number, message)
_NON_BODY = {
    "header": ("header_parameter_sub_schema", 1, "HeaderParameterSubSchema"),
    "query": ("query_parameter_sub_schema", 3, "QueryParameterSubSchema"),
    "path": ("path_parameter_sub_schema", 4, "PathParameterSubSchema"),
}
_PARAM_VX = {"query": 23, "path": 22, "header": 22}
_OPS = ("get", "put", "post", "delete", "options", "head", "patch")

MESSAGES: dict[str, list[Field]] = {
    "Any": [_s("yaml", 2)],  # field 1 (google.protobuf.Any) is never written
    "NamedAny": [_s("name", 1), _m("value", 2, "Any")],
    "Info": [_s("title", 1), _s("version", 2), _s("description", 3)],
    "Document": [
        _s("swagger", 1),
        _m("info", 2, "Info"),
        _s("host", 3),
        _s("base_path", 4),
        ("schemes", 5, STR, True, None),
        ("consumes", 6, STR, True, None),
        ("produces", 7, STR, True, None),
        _m("paths", 8, "Paths"),
        _m("definitions", 9, "Definitions"),
        _m(_VX, 16, "NamedAny", True),
    ],
    "Definitions": [_m("additional_properties", 1, "NamedSchema", True)],
    "Properties": [_m("additional_properties", 1, "NamedSchema", True)],
    "NamedSchema": [_s("name", 1), _m("value", 2, "Schema")],
    "TypeItem": [("value", 1, STR, True, None)],
    "ItemsItem": [_m("schema", 1, "Schema", True)],
    "AdditionalPropertiesItem": [_m("schema", 1, "Schema"), ("boolean", 2, BOOL, False, None)],
    "Schema": [
        *((f, n, t, False, None) for f, n, t in _SCHEMA_SCALARS.values()),
        *(_m(f, n, "Any", rep) for f, n, rep in _SCHEMA_ANYS.values()),
        ("required", 19, STR, True, None),
        _m("additional_properties", 21, "AdditionalPropertiesItem"),
        _m("type", 22, "TypeItem"),
        _m("items", 23, "ItemsItem"),
        _m("all_of", 24, "Schema", True),
        _m("properties", 25, "Properties"),
        _m(_VX, 31, "NamedAny", True),
    ],
    "Paths": [_m(_VX, 1, "NamedAny", True), _m("path", 2, "NamedPathItem", True)],
    "NamedPathItem": [_s("name", 1), _m("value", 2, "PathItem")],
    "PathItem": [
        _s("_ref", 1),
        *(_m(op, i + 2, "Operation") for i, op in enumerate(_OPS)),
        _m("parameters", 9, "ParametersItem", True),
        _m(_VX, 10, "NamedAny", True),
    ],
    "Operation": [
        ("tags", 1, STR, True, None),
        _s("summary", 2),
        _s("description", 3),
        _s("operation_id", 5),
        ("produces", 6, STR, True, None),
        ("consumes", 7, STR, True, None),
        _m("parameters", 8, "ParametersItem", True),
        _m("responses", 9, "Responses"),
        ("schemes", 10, STR, True, None),
        ("deprecated", 11, BOOL, False, None),
        _m(_VX, 13, "NamedAny", True),
    ],
    "ParametersItem": [_m("parameter", 1, "Parameter"), _m("json_reference", 2, "JsonReference")],
    "JsonReference": [_s("_ref", 1), _s("description", 2)],
    "Parameter": [
        _m("body_parameter", 1, "BodyParameter"),
        _m("non_body_parameter", 2, "NonBodyParameter"),
    ],
    "BodyParameter": [
        _s("description", 1),
        _s("name", 2),
        _s("in", 3),
        ("required", 4, BOOL, False, None),
        _m("schema", 5, "Schema"),
        _m(_VX, 6, "NamedAny", True),
    ],
    "NonBodyParameter": [_m(f, n, msg) for f, n, msg in _NON_BODY.values()],
    **{
        msg: [
            *((f, n, t, False, None) for f, n, t in _PARAM_SCALARS[where].values()),
            _m(_VX, _PARAM_VX[where], "NamedAny", True),
        ]
        for where, (_, _, msg) in _NON_BODY.items()
    },
    "Responses": [
        _m("response_code", 1, "NamedResponseValue", True),
        _m(_VX, 2, "NamedAny", True),
    ],
    "NamedResponseValue": [_s("name", 1), _m("value", 2, "ResponseValue")],
    "ResponseValue": [_m("response", 1, "Response"), _m("json_reference", 2, "JsonReference")],
    "Response": [_s("description", 1), _m("schema", 2, "SchemaItem"), _m(_VX, 5, "NamedAny", True)],
    "SchemaItem": [_m("schema", 1, "Schema")],
}


@functools.cache
def classes() -> dict[str, Any]:
    """The message classes, built once from :data:`MESSAGES`."""
    fd = descriptor_pb2.FileDescriptorProto(
        name="svclab_openapiv2.proto", package=_PKG, syntax="proto3"
    )
    for name, fields in MESSAGES.items():
        add_fields(fd.message_type.add(name=name), _PKG, fields)
    return message_classes(fd, MESSAGES)


# ---------------------------------------------------------------- JSON -> message


def _any(msg: Any, value: Any) -> None:
    msg.yaml = json.dumps(value, separators=(",", ":"))


def _extensions(repeated: Any, obj: dict[str, Any]) -> None:
    for k, v in obj.items():
        if k.startswith("x-"):
            e = repeated.add(name=k)
            _any(e.value, v)


def _schema(msg: Any, s: dict[str, Any]) -> None:
    for key, value in s.items():
        if key in _SCHEMA_SCALARS:
            field, _, typ = _SCHEMA_SCALARS[key]
            if typ == BOOL and not isinstance(value, bool):
                # JSON Schema 2020 ``exclusiveMinimum: 3`` is v2's minimum + flag
                if key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(
                    value, int | float
                ):
                    setattr(msg, "minimum" if "Min" in key else "maximum", float(value))
                    setattr(msg, field, True)
                continue
            if typ == STR and not isinstance(value, str):
                continue
            setattr(msg, field, value)
        elif key in _SCHEMA_ANYS:
            field, _, repeated = _SCHEMA_ANYS[key]
            if repeated:
                for v in value:
                    _any(getattr(msg, field).add(), v)
            else:
                _any(getattr(msg, field), value)
        elif key == "required":
            msg.required.extend(value)
        elif key == "type":
            msg.type.value.extend([value] if isinstance(value, str) else value)
        elif key == "items":
            for item in value if isinstance(value, list) else [value]:
                _schema(msg.items.schema.add(), item)
        elif key == "allOf":
            for sub in value:
                _schema(msg.all_of.add(), sub)
        elif key == "properties":
            props = msg.properties
            props.SetInParent()
            for name, sub in value.items():
                _schema(props.additional_properties.add(name=name).value, sub)
        elif key == "additionalProperties":
            if isinstance(value, bool):
                msg.additional_properties.boolean = value
                msg.additional_properties.SetInParent()
            else:
                _schema(msg.additional_properties.schema, value)
    _extensions(msg.vendor_extension, s)


def _parameter(item: Any, p: dict[str, Any]) -> None:
    if "$ref" in p:
        item.json_reference._ref = p["$ref"]
        return
    where = p.get("in", "query")
    if where == "body":
        b = item.parameter.body_parameter
        for k in ("description", "name", "in"):
            if k in p:
                setattr(b, k, p[k])
        b.required = bool(p.get("required", False))
        _schema(b.schema, p.get("schema", {}))
        _extensions(b.vendor_extension, p)
        return
    field, _, _ = _NON_BODY.get(where, _NON_BODY["query"])
    sub = getattr(item.parameter.non_body_parameter, field)
    scalars = _PARAM_SCALARS.get(where, _PARAM_SCALARS["query"])
    for k, v in p.items():
        if k in scalars:
            setattr(sub, scalars[k][0], v)
    _extensions(sub.vendor_extension, p)


def _operation(msg: Any, op: dict[str, Any]) -> None:
    for k, field in (("summary", "summary"), ("description", "description")):
        if k in op:
            setattr(msg, field, op[k])
    if "operationId" in op:
        msg.operation_id = op["operationId"]
    for k in ("tags", "produces", "consumes", "schemes"):
        getattr(msg, k).extend(op.get(k, []))
    if op.get("deprecated"):
        msg.deprecated = True
    for p in op.get("parameters", []):
        _parameter(msg.parameters.add(), p)
    if "responses" in op:
        msg.responses.SetInParent()
        for code, r in op["responses"].items():
            rv = msg.responses.response_code.add(name=code).value
            if "$ref" in r:
                rv.json_reference._ref = r["$ref"]
                continue
            rv.response.description = r.get("description", "")
            if "schema" in r:
                _schema(rv.response.schema.schema, r["schema"])
            _extensions(rv.response.vendor_extension, r)
    _extensions(msg.vendor_extension, op)


def encode(doc: dict[str, Any]) -> bytes:
    """The serialized ``openapi.v2.Document`` of a Swagger 2.0 JSON document."""
    d = classes()["Document"]()
    d.swagger = doc.get("swagger", "2.0")
    info = doc.get("info", {})
    for k in ("title", "version", "description"):
        if k in info:
            setattr(d.info, k, info[k])
    for k, field in (("host", "host"), ("basePath", "base_path")):
        if k in doc:
            setattr(d, field, doc[k])
    for k in ("schemes", "consumes", "produces"):
        getattr(d, k).extend(doc.get(k, []))
    d.paths.SetInParent()
    for path, item in doc.get("paths", {}).items():
        pi = d.paths.path.add(name=path).value
        for op in _OPS:
            if op in item:
                _operation(getattr(pi, op), item[op])
        for p in item.get("parameters", []):
            _parameter(pi.parameters.add(), p)
        _extensions(pi.vendor_extension, item)
    _extensions(d.paths.vendor_extension, doc.get("paths", {}))
    d.definitions.SetInParent()
    for name, s in doc.get("definitions", {}).items():
        _schema(d.definitions.additional_properties.add(name=name).value, s)
    _extensions(d.vendor_extension, doc)
    return bytes(d.SerializeToString(deterministic=True))


# ---------------------------------------------------------------- message -> JSON


def _value(a: Any) -> Any:
    return yaml.safe_load(a.yaml)


def _ext_json(repeated: Any) -> dict[str, Any]:
    return {e.name: _value(e.value) for e in repeated}


def _schema_json(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, (field, _, _) in _SCHEMA_SCALARS.items():
        v = getattr(msg, field)
        if v:
            out[key] = v
    for key, (field, _, repeated) in _SCHEMA_ANYS.items():
        if repeated:
            if len(getattr(msg, field)):
                out[key] = [_value(a) for a in getattr(msg, field)]
        elif msg.HasField(field):
            out[key] = _value(getattr(msg, field))
    if msg.required:
        out["required"] = list(msg.required)
    if msg.HasField("type"):
        t = list(msg.type.value)
        out["type"] = t[0] if len(t) == 1 else t
    if msg.HasField("items"):
        items = [_schema_json(x) for x in msg.items.schema]
        out["items"] = items[0] if len(items) == 1 else items
    if msg.all_of:
        out["allOf"] = [_schema_json(x) for x in msg.all_of]
    if msg.HasField("properties"):
        out["properties"] = {
            p.name: _schema_json(p.value) for p in msg.properties.additional_properties
        }
    if msg.HasField("additional_properties"):
        ap = msg.additional_properties
        out["additionalProperties"] = (
            _schema_json(ap.schema) if ap.HasField("schema") else ap.boolean
        )
    out.update(_ext_json(msg.vendor_extension))
    return out


def _parameter_json(item: Any) -> dict[str, Any]:
    if item.HasField("json_reference"):
        return {"$ref": item.json_reference._ref}
    p = item.parameter
    if p.HasField("body_parameter"):
        b = p.body_parameter
        out: dict[str, Any] = {
            k: getattr(b, k) for k in ("description", "name", "in") if getattr(b, k)
        }
        if b.required:
            out["required"] = True
        out["schema"] = _schema_json(b.schema)
        out.update(_ext_json(b.vendor_extension))
        return out
    nb = p.non_body_parameter
    for where, (field, _, _) in _NON_BODY.items():
        if nb.HasField(field):
            sub = getattr(nb, field)
            out = {
                k: getattr(sub, f)
                for k, (f, _, _) in _PARAM_SCALARS[where].items()
                if getattr(sub, f)
            }
            out.update(_ext_json(sub.vendor_extension))
            return out
    return {}


def _operation_json(op: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, field in (("summary", "summary"), ("description", "description")):
        if getattr(op, field):
            out[k] = getattr(op, field)
    if op.operation_id:
        out["operationId"] = op.operation_id
    for k in ("tags", "produces", "consumes", "schemes"):
        if getattr(op, k):
            out[k] = list(getattr(op, k))
    if op.deprecated:
        out["deprecated"] = True
    if op.parameters:
        out["parameters"] = [_parameter_json(p) for p in op.parameters]
    if op.HasField("responses"):
        responses: dict[str, Any] = {}
        for r in op.responses.response_code:
            if r.value.HasField("json_reference"):
                responses[r.name] = {"$ref": r.value.json_reference._ref}
                continue
            resp: dict[str, Any] = {"description": r.value.response.description}
            if r.value.response.HasField("schema"):
                resp["schema"] = _schema_json(r.value.response.schema.schema)
            resp.update(_ext_json(r.value.response.vendor_extension))
            responses[r.name] = resp
        out["responses"] = responses
    out.update(_ext_json(op.vendor_extension))
    return out


def decode(data: bytes) -> dict[str, Any]:
    """The Swagger 2.0 JSON document of a serialized ``openapi.v2.Document``: the
    inverse of :func:`encode` (used by tests; kubectl is the real reader)."""
    d = classes()["Document"]()
    d.ParseFromString(data)
    out: dict[str, Any] = {"swagger": d.swagger}
    if d.HasField("info"):
        out["info"] = {
            k: getattr(d.info, k) for k in ("title", "version", "description") if getattr(d.info, k)
        }
    paths: dict[str, Any] = {}
    for p in d.paths.path:
        item: dict[str, Any] = {}
        for op in _OPS:
            if p.value.HasField(op):
                item[op] = _operation_json(getattr(p.value, op))
        if p.value.parameters:
            item["parameters"] = [_parameter_json(x) for x in p.value.parameters]
        item.update(_ext_json(p.value.vendor_extension))
        paths[p.name] = item
    out["paths"] = paths
    out["definitions"] = {
        s.name: _schema_json(s.value) for s in d.definitions.additional_properties
    }
    out.update(_ext_json(d.vendor_extension))
    return out


__all__ = ["MESSAGES", "classes", "decode", "encode"]
