"""Every kind table svclab keeps agrees with the one kind table (:mod:`netmodel.kinds`).

The tables are derived from :data:`netmodel.kinds.ROWS`; these tests fail when one of
them is written by hand again and disagrees (an etcd layout entry forgotten, a plural
spelled differently, a kind served but not stored...)."""

from __future__ import annotations

import importlib

import pytest

from control.apiserver.http import proto, resources, tables
from control.informers import http as informers_http
from control.store import etcd_layout
from netmodel import kinds, kubedump, schema
from netmodel.kinds import KINDS, KindRow, object_from_dict, register, row
from netmodel.objects import GenericObject, KubeObject


def _owners() -> list[KindRow]:
    return [r for r in kinds.ROWS if r.owns_store]


def test_each_store_kind_has_one_owning_row_and_its_class() -> None:
    owners = _owners()
    assert len({r.kind for r in owners}) == len(owners)
    assert set(KINDS) == {r.kind for r in owners}
    for r in owners:
        cls = KINDS[r.kind]
        assert (
            r.kind,
            r.api_version,
            r.namespaced,
        ) == (cls.KIND, cls.API_VERSION, cls.NAMESPACED), r.kind
        assert cls is r.typed or (r.typed is None and issubclass(cls, GenericObject)), r.kind
    for r in kinds.ROWS:  # a row that shares a store shares it with an owner of its kind
        if r.stored and not r.owns_store:
            assert r.store_kind in KINDS, r
        if r.typed is not None:
            assert r.kind == r.typed.KIND and r.namespaced == r.typed.NAMESPACED, r


def test_schema_known_kinds_are_the_applied_rows() -> None:
    want = {(r.api_version, r.kind): r.model for r in kinds.ROWS if r.apply}
    assert dict(schema.KNOWN_KINDS) == want
    models = importlib.import_module("kubernetes.client.models")
    for r in kinds.ROWS:
        if r.model is not None:
            assert hasattr(models, r.model), f"{r.kind}: no client model {r.model}"


def test_dump_kinds_are_the_dump_rows() -> None:
    assert frozenset(r.kind for r in kinds.ROWS if r.dump) == kubedump.MODELLED_KINDS


def test_etcd_layout_covers_every_store_kind_and_nothing_else() -> None:
    assert {r.kind: r.etcd for r in _owners()} == etcd_layout.RESOURCES
    paths = list(etcd_layout.RESOURCES.values())
    assert len(set(paths)) == len(paths), "two kinds under one etcd path"
    for r in _owners():
        key = etcd_layout.object_key(r.kind, "ns/a" if r.namespaced else "a")
        assert etcd_layout.split_key(key) == (r.kind, "ns/a" if r.namespaced else "a")


def test_informer_plurals_are_the_owners_plurals() -> None:
    assert {r.kind: r.plural for r in _owners()} == informers_http.PLURALS


def test_http_resources_are_the_rows() -> None:
    assert len(resources.RESOURCES) == len(kinds.ROWS)
    for res, r in zip(resources.RESOURCES, kinds.ROWS, strict=True):
        assert (res.name, res.singular, res.kind, res.group, res.version) == (
            r.plural,
            r.singular,
            r.kind,
            r.group,
            r.version,
        )
        assert res.namespaced == r.namespaced and res.verbs == r.verbs
        assert res.short_names == r.short_names and res.subresources == r.subresources
        assert res.store_kind == r.store_kind and res.model == r.model
        assert resources.by_path(r.group, r.version, r.plural) is res
        assert resources.for_kind(r.api_version, r.kind) is res
        if r.store_kind is not None:
            assert "create" in res.verbs and "watch" in res.verbs


def test_tables_and_protobuf_name_only_known_kinds() -> None:
    plurals = {r.plural for r in kinds.ROWS}
    assert set(tables.TABLES) <= plurals, set(tables.TABLES) - plurals
    known = {r.kind for r in kinds.ROWS}
    assert set(proto.KINDS) <= known, set(proto.KINDS) - known


def test_a_row_registered_at_run_time_is_stored_applied_and_decoded() -> None:
    """A CRD-like row: its generic class is made, the schema and decoder know it, its
    objects keep every field."""
    new = row("example.com", "v1", "Widget", "widgets", namespaced=False)
    register(new)
    try:
        assert ("example.com/v1", "Widget") not in schema.KNOWN_KINDS  # no client model
        obj = object_from_dict(
            {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "w"},
                "spec": {"size": 3, "colours": ["red"]},
            }
        )
        assert isinstance(obj, GenericObject) and isinstance(obj, KubeObject)
        assert obj.key == "w" and obj.ref == "Widget/w"
        assert obj.to_dict()["spec"] == {"size": 3, "colours": ["red"]}
        with pytest.raises(ValueError, match="already known"):
            register(new)
    finally:
        kinds.ROWS.remove(new)
        del KINDS["Widget"]
