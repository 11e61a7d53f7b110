"""Structural schemas (``apiextensions.k8s.io/v1``): what a custom resource may hold.

A CustomResourceDefinition's version carries an ``openAPIV3Schema``; kube-apiserver
requires it to be *structural* (every field typed, ``type: object`` at the root,
``metadata`` restricted to ``name`` / ``generateName``) and then, for each custom
resource, in this order:

* :func:`prune` drops every field the schema does not specify (kept: ``apiVersion``,
  ``kind``, ``metadata`` at the root, whatever sits under
  ``x-kubernetes-preserve-unknown-fields: true``, and ``x-kubernetes-embedded-resource``'s
  apiVersion/kind/metadata), returning their paths (``fieldValidation=Warn|Strict``);
* :func:`default` fills in each absent property that has a ``default`` (and a ``null``
  one whose schema is not ``nullable``), the defaults themselves defaulted;
* :func:`validate` checks types (``x-kubernetes-int-or-string``, ``nullable``),
  ``required``, ``enum``, bounds (``minimum`` / ``maximum``, exclusive or not,
  ``multipleOf``, ``minLength`` / ``maxLength``, ``minItems`` / ``maxItems``,
  ``minProperties`` / ``maxProperties``), ``pattern``, ``uniqueItems`` and the items of
  an ``x-kubernetes-list-type: set`` list being distinct, and returns
  each problem as ``(field path, message)`` in kube-apiserver's wording
  (``spec.replicas: Invalid value: "string": spec.replicas in body must be of type
  integer: "string"``).

:func:`structural_problems` gives the CRD-side checks (the schema itself), as
``(path, message)`` relative to the schema. Only the subset of OpenAPI v3 that
kube-apiserver accepts in a CRD is understood; ``$ref`` is refused there.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from netmodel.errors import InvalidError

#: the root fields every object keeps, whatever its schema says
ROOT_FIELDS = ("apiVersion", "kind", "metadata")

_TYPES = ("object", "array", "string", "integer", "number", "boolean")


def _quote(value: object) -> str:
    """A value as field.Error prints it: strings quoted, numbers and booleans bare."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def _type_of(value: Any) -> str:
    """The JSON type name kube-openapi reports for a value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --------------------------------------------------------------------------- pruning


def prune(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``obj`` without the fields ``schema`` does not specify, and their paths."""
    unknown: list[str] = []
    out = dict(obj)
    kept = {k: out.pop(k) for k in ROOT_FIELDS if k in out}
    pruned = _prune(out, schema, "", unknown, root=True)
    return {**kept, **(pruned if isinstance(pruned, dict) else {})}, unknown


def _prune(
    value: Any, schema: Mapping[str, Any], path: str, unknown: list[str], *, root: bool = False
) -> Any:
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            return [_prune(v, items, f"{path}[{i}]", unknown) for i, v in enumerate(value)]
        return value
    if not isinstance(value, dict):
        return value
    props = schema.get("properties")
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    out: dict[str, Any] = {}
    for key, item in value.items():
        sub = _join(path, key)
        if isinstance(props, Mapping) and key in props:
            out[key] = _prune(item, props[key] or {}, sub, unknown)
        elif isinstance(additional, Mapping):
            out[key] = _prune(item, additional, sub, unknown)
        elif preserve or additional is True or (embedded and key in ROOT_FIELDS):
            out[key] = item
        else:
            unknown.append(sub)
    return out


# --------------------------------------------------------------------------- defaulting


def default(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with the schema's defaults filled in (absent properties, and ``null``
    ones whose schema is not nullable)."""
    out = _default(dict(obj), schema)
    return out if isinstance(out, dict) else dict(obj)


def _default(value: Any, schema: Mapping[str, Any]) -> Any:
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            return [_default(v, items) for v in value]
        return value
    if not isinstance(value, dict):
        return value
    props = schema.get("properties")
    out = dict(value)
    if isinstance(props, Mapping):
        for key, sub in props.items():
            if not isinstance(sub, Mapping):
                continue
            absent = key not in out or (out[key] is None and not sub.get("nullable"))
            if absent and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = _default(out[key], sub)
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        for key in list(out):
            if not (isinstance(props, Mapping) and key in props):
                out[key] = _default(out[key], additional)
    return out


# --------------------------------------------------------------------------- validation


def validate(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every problem of ``obj`` (pruned and defaulted) against ``schema``, as
    ``(field path, message)``; the root's apiVersion, kind and metadata are not the
    schema's to check."""
    problems: list[tuple[str, str]] = []
    body = {k: v for k, v in obj.items() if k not in ROOT_FIELDS}
    root = dict(schema)
    props = root.get("properties")
    if isinstance(props, Mapping):
        root["properties"] = {k: v for k, v in props.items() if k not in ROOT_FIELDS}
    root["required"] = [r for r in root.get("required") or () if r not in ROOT_FIELDS]
    _validate(body, root, "", problems)
    return problems


def _invalid(path: str, value: object, why: str) -> tuple[str, str]:
    return path, f"Invalid value: {_quote(value)}: {why}"


def _validate(value: Any, schema: Mapping[str, Any], path: str, out: list[tuple[str, str]]) -> None:
    where = path or "body"
    body = f"{where} in body"
    if value is None:
        if schema.get("nullable"):
            return
        want = "integer,string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
        if want:
            out.append(_invalid(path, "null", f'{body} must be of type {want}: "null"'))
        return
    got = _type_of(value)
    if schema.get("x-kubernetes-int-or-string"):
        if got not in ("integer", "string"):
            out.append(_invalid(path, got, f'{body} must be of type integer,string: "{got}"'))
            return
    else:
        want = schema.get("type")
        ok = want is None or want == got or (want == "number" and got == "integer")
        if not ok:
            out.append(_invalid(path, got, f'{body} must be of type {want}: "{got}"'))
            return
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        allowed = ", ".join(_quote(e) for e in enum)
        out.append((path, f"Unsupported value: {_quote(value)}: supported values: {allowed}"))
    if isinstance(value, str):
        _string(value, schema, path, body, out)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _number(value, schema, path, body, out)
    elif isinstance(value, list):
        _array(value, schema, path, body, out)
    elif isinstance(value, dict):
        _object(value, schema, path, body, out)


def _string(
    value: str, schema: Mapping[str, Any], path: str, body: str, out: list[tuple[str, str]]
) -> None:
    lo, hi = schema.get("minLength"), schema.get("maxLength")
    if isinstance(hi, int) and len(value) > hi:
        out.append((path, f"Too long: may not be more than {hi} bytes"))
    if isinstance(lo, int) and len(value) < lo:
        out.append(_invalid(path, value, f"{body} should be at least {lo} chars long"))
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and re.search(pattern, value) is None:
        out.append(_invalid(path, value, f"{body} should match '{pattern}'"))


def _number(
    value: float, schema: Mapping[str, Any], path: str, body: str, out: list[tuple[str, str]]
) -> None:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if isinstance(lo, int | float):
        if schema.get("exclusiveMinimum") and value <= lo:
            out.append(_invalid(path, value, f"{body} should be greater than {lo}"))
        elif value < lo:
            out.append(_invalid(path, value, f"{body} should be greater than or equal to {lo}"))
    if isinstance(hi, int | float):
        if schema.get("exclusiveMaximum") and value >= hi:
            out.append(_invalid(path, value, f"{body} should be less than {hi}"))
        elif value > hi:
            out.append(_invalid(path, value, f"{body} should be less than or equal to {hi}"))
    step = schema.get("multipleOf")
    if isinstance(step, int | float) and step > 0 and (value / step) % 1 != 0:
        out.append(_invalid(path, value, f"{body} should be a multiple of {step}"))


def _array(
    value: list[Any], schema: Mapping[str, Any], path: str, body: str, out: list[tuple[str, str]]
) -> None:
    lo, hi = schema.get("minItems"), schema.get("maxItems")
    if isinstance(hi, int) and len(value) > hi:
        out.append((path, f"Too many: {len(value)}: must have at most {hi} items"))
    if isinstance(lo, int) and len(value) < lo:
        out.append(_invalid(path, len(value), f"{body} should have at least {lo} items"))
    if schema.get("uniqueItems") or schema.get("x-kubernetes-list-type") == "set":
        # ``x-kubernetes-list-type: set``: kube-apiserver's list-type check refuses a
        # repeated item in the same words as ``uniqueItems``
        seen: list[Any] = []
        for i, v in enumerate(value):
            if v in seen:
                out.append((f"{path}[{i}]", f"Duplicate value: {_quote(v)}"))
            seen.append(v)
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, v in enumerate(value):
            _validate(v, items, f"{path}[{i}]", out)


def _object(
    value: dict[str, Any],
    schema: Mapping[str, Any],
    path: str,
    body: str,
    out: list[tuple[str, str]],
) -> None:
    # the order kube-openapi's object validator reports in: the property count, each
    # property present, then the required ones missing
    lo, hi = schema.get("minProperties"), schema.get("maxProperties")
    if isinstance(hi, int) and len(value) > hi:
        out.append((path, f"Too many: {len(value)}: must have at most {hi} items"))
    if isinstance(lo, int) and len(value) < lo:
        out.append(_invalid(path, len(value), f"{body} should have at least {lo} properties"))
    props = schema.get("properties")
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        if isinstance(props, Mapping) and isinstance(props.get(key), Mapping):
            _validate(item, props[key], _join(path, key), out)
        elif isinstance(additional, Mapping):
            _validate(item, additional, _join(path, key), out)
    for req in schema.get("required") or ():
        if req not in value:
            out.append((_join(path, str(req)), "Required value"))


class SchemaInvalidError(InvalidError):
    """A custom resource refused by its schema, with every problem found (``causes``:
    ``(field path, message)`` in the order found), as kube-apiserver reports them all.
    One problem reads as any :class:`InvalidError` (``field: why``); several read as
    kube's aggregate, ``[f1: why1, f2: why2]`` with repeats dropped (then no single
    ``field``)."""

    def __init__(
        self,
        message: str,
        *,
        causes: Sequence[tuple[str, str]] = (),
        file: str | None = None,
        document: int | None = None,
        obj: str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message, file=file, document=document, obj=obj, field=field)
        self.causes: tuple[tuple[str, str], ...] = tuple(causes)

    def located(self, *, file: str | None = None, document: int | None = None) -> InvalidError:
        return SchemaInvalidError(
            self.reason,
            causes=self.causes,
            file=self.file or file,
            document=self.document if self.document is not None else document,
            obj=self.obj,
            field=self.field,
        )


def aggregate(causes: Sequence[tuple[str, str]]) -> str:
    """kube's text for a list of field errors: ``field: why`` for one, ``[a, b]`` for
    several (each distinct text once, in order)."""
    texts: list[str] = []
    for path, why in causes:
        text = f"{path}: {why}" if path else why
        if text not in texts:
            texts.append(text)
    return texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"


def refusal(problems: Sequence[tuple[str, str]], obj: str) -> SchemaInvalidError:
    """The error for ``problems`` (non-empty, from :func:`validate`) of object ``obj``."""
    if len({f"{p}: {w}" for p, w in problems}) == 1:
        path, why = problems[0]
        return SchemaInvalidError(why, causes=problems[:1], obj=obj, field=path or None)
    return SchemaInvalidError(aggregate(problems), causes=problems, obj=obj)


# --------------------------------------------------------------------------- the schema itself


def structural_problems(schema: Any, path: str) -> list[tuple[str, str]]:
    """Why ``schema`` (a CRD version's openAPIV3Schema at ``path``) is not structural,
    as ``(field path, message)`` in kube-apiserver's wording; empty if it is."""
    out: list[tuple[str, str]] = []
    if not isinstance(schema, Mapping):
        return [(path, "Required value: schemas are required")]
    if schema.get("type") != "object":
        if not schema.get("type"):
            out.append((f"{path}.type", "Required value: must not be empty at the root"))
        else:
            out.append(
                (
                    f"{path}.type",
                    f"Invalid value: {_quote(schema.get('type'))}: must be object at the root",
                )
            )
    props = schema.get("properties")
    if isinstance(props, Mapping) and isinstance(props.get("metadata"), Mapping):
        meta = props["metadata"]
        extra = set(meta) - {"type", "properties"}
        fields = set((meta.get("properties") or {}).keys()) - {"name", "generateName"}
        if extra or fields or meta.get("type") not in (None, "object"):
            out.append(
                (
                    f"{path}.properties[metadata]",
                    "Forbidden: must not specify anything other than name and generateName, "
                    "but metadata is implicitly specified",
                )
            )
    _structural(schema, path, out, root=True)
    return out


def _structural(
    s: Mapping[str, Any], path: str, out: list[tuple[str, str]], *, root: bool = False
) -> None:
    if "$ref" in s:
        out.append((f"{path}.$ref", "Forbidden: $ref is not supported"))
    typ = s.get("type")
    int_or_string = bool(s.get("x-kubernetes-int-or-string"))
    preserve = bool(s.get("x-kubernetes-preserve-unknown-fields"))
    if typ is not None and typ not in _TYPES:
        out.append(
            (
                f"{path}.type",
                f"Unsupported value: {_quote(typ)}: supported values: "
                + ", ".join(_quote(t) for t in _TYPES),
            )
        )
    if not root and not typ and not int_or_string and not preserve:
        out.append(
            (f"{path}.type", "Required value: must not be empty for specified object fields")
        )
    if int_or_string and typ:
        out.append(
            (
                f"{path}.type",
                "Invalid value: "
                + _quote(typ)
                + ": must be empty to be structural if x-kubernetes-int-or-string is true",
            )
        )
    props = s.get("properties")
    if isinstance(props, Mapping):
        if typ not in (None, "object"):
            out.append((f"{path}.properties", f"Forbidden: must not be specified for type {typ}"))
        if isinstance(s.get("additionalProperties"), Mapping):
            out.append(
                (
                    f"{path}.additionalProperties",
                    "Forbidden: additionalProperties and properties are mutual exclusive",
                )
            )
        for key, sub in props.items():
            if root and key == "metadata":
                continue
            if isinstance(sub, Mapping):
                _structural(sub, f"{path}.properties[{key}]", out)
    items = s.get("items")
    if typ == "array" and not isinstance(items, Mapping):
        out.append((f"{path}.items", "Required value: must be specified"))
    if isinstance(items, Mapping):
        _structural(items, f"{path}.items", out)
    additional = s.get("additionalProperties")
    if isinstance(additional, Mapping):
        _structural(additional, f"{path}.additionalProperties", out)
    pattern = s.get("pattern")
    if isinstance(pattern, str):
        try:
            re.compile(pattern)
        except re.error as e:
            out.append(
                (
                    f"{path}.pattern",
                    f"Invalid value: {_quote(pattern)}: must be a valid regular expression, but isn't: {e}",
                )
            )
    if "default" in s and s.get("default") is not None:
        problems: list[tuple[str, str]] = []
        _validate(s["default"], s, "", problems)
        for p, m in problems[:1]:
            out.append(
                (
                    f"{path}.default",
                    f"Invalid value: {_quote_default(s['default'])}: {_join(p, m) if p else m}",
                )
            )


def _quote_default(value: Any) -> str:
    if isinstance(value, dict | list):
        return "{...}" if isinstance(value, dict) else "[...]"
    return _quote(value)
