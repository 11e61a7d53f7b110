"""Strict field validation of Kubernetes manifests, as ``kubectl --validate=strict`` does.

The schema is not written here: it comes from the official kubernetes Python client,
whose generated models carry ``openapi_types`` (field -> type) and ``attribute_map``
(field -> wire name). :func:`check` walks a manifest against them and raises a
:class:`~netmodel.errors.SchemaError` naming the first unknown field or wrong type by
its path (``spec.ports[0].targtPort``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from netmodel import kinds
from netmodel.errors import SchemaError


class _KnownKinds(Mapping[tuple[str, str], str]):
    """(apiVersion, kind) -> kubernetes client model class name, for every kind
    ``svclab apply`` takes: a live view of :data:`netmodel.kinds.ROWS` (rows registered
    at run time are seen)."""

    def __init__(self) -> None:
        self._rows: list[kinds.KindRow] = []
        self._cached: dict[tuple[str, str], str] = {}

    def _table(self) -> dict[tuple[str, str], str]:
        # Rebuilt only when ROWS changed (a row registered or dropped): the comparison
        # is by identity first, so it costs one pass over the rows, not a new dict per
        # manifest checked.
        if self._rows != kinds.ROWS:
            self._rows = list(kinds.ROWS)
            self._cached = {
                (r.api_version, r.kind): r.model for r in self._rows if r.apply and r.model
            }
        return self._cached

    def __getitem__(self, key: tuple[str, str]) -> str:
        return self._table()[key]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


KNOWN_KINDS: Mapping[tuple[str, str], str] = _KnownKinds()

_LIST = re.compile(r"^[Ll]ist\[(.+)\]$")
_DICT = re.compile(r"^(?:dict\(str, (.+)\)|Dict\[str, (.+)\])$")


@functools.cache
def _model(name: str) -> Any:
    models = importlib.import_module("kubernetes.client.models")
    return getattr(models, name)


@functools.cache
def _fields(name: str) -> dict[str, str]:
    """wire name -> openapi type string, for one model class: its ``openapi_types`` and
    ``attribute_map``, read from the model's source (:func:`_source_tables`) or, when
    they cannot be read there, from the imported class."""
    tables = _source_tables(name)
    if tables is None:
        cls = _model(name)
        tables = cls.openapi_types, cls.attribute_map
    types, wire = tables
    return {wire[attr]: typ for attr, typ in types.items()}


#: ``openapi_types`` or ``attribute_map`` of a generated model: a class-level literal
#: dict of strings (``    NAME: ClassVar[Dict[str, str]] = {`` ... ``    }``)
_TABLE = r"^    {}(?:: [^=\n]+)? = (\{{.*?^    \}})"


@functools.cache
def _model_files() -> dict[str, Path] | None:
    """Model class name -> its module's file in the installed kubernetes client (from
    the imports its ``models`` package lists for type checkers); None when the client's
    files cannot be found or read so."""
    spec = importlib.util.find_spec("kubernetes")  # the package is not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    models = Path(next(iter(spec.submodule_search_locations))) / "client" / "models"
    try:
        text = (models / "__init__.py").read_text()
    except OSError:
        return None
    pairs = re.findall(r"^\s*from kubernetes\.client\.models\.(\w+) import (\w+)$", text, re.M)
    return {cls: models / f"{module}.py" for module, cls in pairs} or None


def _source_tables(name: str) -> tuple[dict[str, str], dict[str, str]] | None:
    """A model's ``(openapi_types, attribute_map)`` read as data from its source file,
    without importing it: importing the client's models builds a pydantic class for
    every model a kind's tree reaches (about a second for the kinds of an application,
    the largest part of reading its manifests). None when the file or either table is
    not found in the form the generator writes (then the class is imported); a test
    checks that both ways give the same tables for every kind's models."""
    files = _model_files()
    path = files.get(name) if files is not None else None
    if path is None:
        return None
    try:
        src = path.read_text()
    except OSError:
        return None
    tables = []
    for attr in ("openapi_types", "attribute_map"):
        m = re.search(_TABLE.format(attr), src, re.M | re.S)
        if m is None:
            return None
        try:
            table = json.loads(m.group(1))
        except ValueError:
            return None
        if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in table.items()
        ):
            return None
        tables.append(table)
    types, wire = tables
    if types.keys() != wire.keys():
        return None
    return types, wire


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


@functools.cache
def _container(typ: str) -> tuple[str, str] | None:
    """``("list", item type)`` or ``("dict", value type)`` for a container type string,
    None for any other (parsed once per distinct type string)."""
    m = _LIST.match(typ)
    if m:
        return "list", m.group(1)
    m = _DICT.match(typ)
    if m:
        return "dict", m.group(1) or m.group(2)
    return None


def _check_value(value: Any, typ: str, path: str) -> None:
    if value is None:
        return
    container = _container(typ)
    if container is not None and container[0] == "list":
        if not isinstance(value, list):
            raise SchemaError(f"expected array, got {_type_name(value)}", field=path)
        for i, item in enumerate(value):
            _check_value(item, container[1], f"{path}[{i}]")
        return
    if container is not None:
        if not isinstance(value, dict):
            raise SchemaError(f"expected object, got {_type_name(value)}", field=path)
        inner = container[1]
        for k, v in value.items():
            # resource quantities (dict(str, str)) may be written as plain numbers
            if inner == "str" and isinstance(v, int | float) and not isinstance(v, bool):
                continue
            _check_value(v, inner, f"{path}.{k}")
        return
    if typ in ("str", "bytes"):  # bytes: base64 text on the wire
        if not isinstance(value, str):
            raise SchemaError(f"expected string, got {_type_name(value)}", field=path)
    elif typ == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"expected integer, got {_type_name(value)}", field=path)
    elif typ == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SchemaError(f"expected number, got {_type_name(value)}", field=path)
    elif typ == "bool":
        if not isinstance(value, bool):
            raise SchemaError(f"expected boolean, got {_type_name(value)}", field=path)
    elif typ == "datetime" or typ == "date":
        if not isinstance(value, str):
            raise SchemaError(f"expected timestamp string, got {_type_name(value)}", field=path)
    elif typ == "object":
        return  # IntOrString, RawExtension, free-form
    else:
        _check_object(value, typ, path)


def _check_object(value: Any, model: str, path: str) -> None:
    if not isinstance(value, dict):
        raise SchemaError(f"expected object, got {_type_name(value)}", field=path or None)
    fields = _fields(model)
    for key, item in value.items():
        sub = f"{path}.{key}" if path else str(key)
        typ = fields.get(key)
        if typ is None:
            raise SchemaError("unknown field", field=sub)
        _check_value(item, typ, sub)


def _custom_schema(api: str, kind: str) -> Mapping[str, Any] | None:
    """A custom resource version's openAPIV3Schema (None for any other kind)."""
    from netmodel.customresources import CustomResource

    cls = kinds.class_for(api, kind)
    if cls is None or not issubclass(cls, CustomResource):
        return None
    v = cls.version_spec(api)
    if v is None:
        return None
    return ((v.get("schema") or {}).get("openAPIV3Schema")) or {}


def check(doc: Mapping[str, Any]) -> None:
    """Raise SchemaError if ``doc`` is not a known kind or has a field its schema lacks."""
    api, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise SchemaError("missing kind", field="kind")
    if not isinstance(api, str) or not api:
        raise SchemaError("missing apiVersion", field="apiVersion")
    custom = _custom_schema(api, kind)
    if custom is not None:  # a custom resource: its CRD's structural schema
        from netmodel import structural

        _, unknown = structural.prune(doc, custom)
        if unknown:
            raise SchemaError("unknown field", field=unknown[0])
        return
    model = KNOWN_KINDS.get((api, kind))
    if model is None and "." in api.partition("/")[0] and "/" in api:
        # a group no built-in kind is in (nor a registered CRD): kube's RESTMapper
        raise SchemaError(
            f'no matches for kind "{kind}" in version "{api}" (ensure CRDs are installed first)',
            field="kind",
        )
    if model is None:
        known = sorted({k for _, k in KNOWN_KINDS})
        if kind in known:
            raise SchemaError(f"no kind {kind!r} in apiVersion {api!r}", field="apiVersion")
        raise SchemaError(f"unknown kind {kind!r} (svclab knows {', '.join(known)})", field="kind")
    _check_object(dict(doc), model, "")


def _prune_value(value: Any, typ: str, path: str, unknown: list[str]) -> Any:
    m = _LIST.match(typ)
    if m and isinstance(value, list):
        return [_prune_value(v, m.group(1), f"{path}[{i}]", unknown) for i, v in enumerate(value)]
    m = _DICT.match(typ)
    if m and isinstance(value, dict):
        inner = m.group(1) or m.group(2)
        return {k: _prune_value(v, inner, f"{path}.{k}", unknown) for k, v in value.items()}
    if typ in ("str", "bytes", "int", "float", "bool", "datetime", "date", "object") or m:
        return value
    if not isinstance(value, dict):
        return value
    fields = _fields(typ)
    out = {}
    for key, item in value.items():
        sub = f"{path}.{key}" if path else str(key)
        t = fields.get(key)
        if t is None:
            unknown.append(sub)
            continue
        out[key] = _prune_value(item, t, sub, unknown)
    return out


def prune(doc: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``doc`` without the fields its schema lacks, and their paths (``spec.foo``), for
    kube-apiserver's ``fieldValidation=Warn|Ignore``. A kind without a schema is
    returned as it is."""
    custom = _custom_schema(str(doc.get("apiVersion")), str(doc.get("kind")))
    if custom is not None:
        from netmodel import structural

        return structural.prune(doc, custom)
    model = KNOWN_KINDS.get((str(doc.get("apiVersion")), str(doc.get("kind"))))
    if model is None:
        return dict(doc), []
    unknown: list[str] = []
    return _prune_value(dict(doc), model, "", unknown), unknown
