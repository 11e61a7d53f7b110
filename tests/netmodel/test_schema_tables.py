"""netmodel.schema reads the kubernetes client's field tables from the models' source,
without importing them: the tables must be the ones the imported classes carry, for
every model any applied kind reaches."""

from __future__ import annotations

import subprocess
import sys

from netmodel import schema

_SCALARS = {"str", "bytes", "int", "float", "bool", "datetime", "date", "object"}


def _reachable() -> set[str]:
    """Every client model the applied kinds' schemas reach (through lists and maps)."""
    todo = list(dict(schema.KNOWN_KINDS).values())
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for typ in schema._model(name).openapi_types.values():
            while (inner := schema._container(typ)) is not None:
                typ = inner[1]
            if typ not in _SCALARS:
                todo.append(typ)
    return seen


def test_source_tables_are_the_imported_classes_tables() -> None:
    names = _reachable()
    assert len(names) > 300  # every kind's tree, not a few top-level models
    for name in sorted(names):
        cls = schema._model(name)
        assert schema._source_tables(name) == (cls.openapi_types, cls.attribute_map), name


def test_checking_a_manifest_imports_no_client_model() -> None:
    """The point of reading the source: checking every kind's fields builds no
    pydantic class of the client (a fresh interpreter, so nothing was imported yet)."""
    code = (
        "import sys\n"
        "from netmodel import schema\n"
        "for model in set(dict(schema.KNOWN_KINDS).values()):\n"
        "    schema._fields(model)\n"
        "schema.check({'apiVersion': 'apps/v1', 'kind': 'Deployment', 'metadata': {'name': 'a'},\n"
        "    'spec': {'selector': {'matchLabels': {'a': 'b'}}, 'template': {'spec':\n"
        "    {'containers': [{'name': 'c', 'image': 'i', 'ports': [{'containerPort': 80}]}]}}}})\n"
        "print(sorted(m for m in sys.modules if m.startswith('kubernetes')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
