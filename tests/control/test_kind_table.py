"""Every kind table svclab keeps agrees with the one kind table (:mod:`netmodel.kinds`).

The tables are derived from :data:`netmodel.kinds.ROWS`; these tests fail when one of
them is written by hand again and disagrees (an etcd layout entry forgotten, a plural
spelled differently, a kind served but not stored...)."""

from __future__ import annotations

import importlib
import json
from dataclasses import replace

import pytest

from control.apiserver.http import proto, resources, tables
from control.informers import http as informers_http
from control.store import etcd_layout
from netmodel import customresources, kinds, kubedump, schema
from netmodel.kinds import KINDS, KindRow, object_from_dict, register, row
from netmodel.objects import GenericObject, KubeObject


def _owners() -> list[KindRow]:
    return [r for r in kinds.ROWS if r.owns_store]


def test_each_store_kind_has_one_owning_row_and_its_class_or_crd() -> None:
    owners = _owners()
    assert len({r.store_kind for r in owners}) == len(owners)
    assert set(KINDS) == {r.store_kind for r in owners}
    for r in owners:
        assert r.store_kind is not None
        cls = KINDS[r.store_kind]
        assert (
            r.kind,
            r.api_version,
            r.namespaced,
        ) == (cls.KIND, cls.API_VERSION, cls.NAMESPACED), r.kind
        assert cls is r.typed or (r.typed is None and issubclass(cls, GenericObject)), r.kind
        assert r.store_kind == (r.crd or r.kind)
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
    assert {r.store_kind: r.etcd for r in _owners()} == etcd_layout.RESOURCES
    paths = list(etcd_layout.RESOURCES.values())
    assert len(set(paths)) == len(paths), "two kinds under one etcd path"
    for r in _owners():
        assert r.store_kind is not None
        key = etcd_layout.object_key(r.store_kind, "ns/a" if r.namespaced else "a")
        assert etcd_layout.split_key(key) == (r.store_kind, "ns/a" if r.namespaced else "a")


def test_informer_plurals_are_the_owners_plurals() -> None:
    assert {r.store_kind: r.plural for r in _owners()} == informers_http.PLURALS


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
    new = replace(
        row("example.com", "v1", "Widget", "widgets", namespaced=False), crd="widgets.example.com"
    )
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
        assert kinds.unregister("widgets.example.com") == [new]
    assert "Widget" not in KINDS and new not in kinds.ROWS


WIDGETS = {
    "group": "example.com",
    "scope": "Namespaced",
    "names": {"plural": "widgets", "kind": "Service", "shortNames": ["wd"]},
    "versions": [
        {
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object"}},
        },
        {"name": "v1beta1", "served": True, "storage": False},
    ],
}


def _derived_tables_agree() -> None:
    test_each_store_kind_has_one_owning_row_and_its_class_or_crd()
    test_dump_kinds_are_the_dump_rows()
    test_etcd_layout_covers_every_store_kind_and_nothing_else()
    test_informer_plurals_are_the_owners_plurals()
    test_http_resources_are_the_rows()


def test_a_crds_rows_come_and_go_in_every_derived_table() -> None:
    """A CRD's kind named like a built-in one (``Service`` in example.com): its own
    store kind ``<plural>.<group>``, its own class, every table follows it in and out."""
    from control.apiserver.http import openapi

    builtin_service = KINDS["Service"]
    assert customresources.install("widgets.example.com", WIDGETS) is None
    try:
        _derived_tables_agree()
        assert KINDS["Service"] is builtin_service
        assert etcd_layout.RESOURCES["widgets.example.com"] == "example.com/widgets"
        assert etcd_layout.split_key("/registry/example.com/widgets/ns/w") == (
            "widgets.example.com",
            "ns/w",
        )
        assert informers_http.PLURALS["widgets.example.com"] == "widgets"
        v1 = resources.by_path("example.com", "v1", "widgets")
        assert v1 is not None and v1.store_kind == "widgets.example.com"
        assert resources.by_path("example.com", "v1beta1", "widgets") is not None
        obj = object_from_dict(
            {"apiVersion": "example.com/v1", "kind": "Service", "metadata": {"name": "w"}}
        )
        assert obj.store_kind == "widgets.example.com" and obj.key == "default/w"
        assert isinstance(obj, customresources.CustomResource)
        doc = json.loads(openapi.v3_document("example.com", "v1"))
        assert "com.example.v1.Service" in doc["components"]["schemas"]
    finally:
        customresources.uninstall("widgets.example.com")
    _derived_tables_agree()
    assert "widgets.example.com" not in etcd_layout.RESOURCES
    assert resources.by_path("example.com", "v1", "widgets") is None
    assert (
        object_from_dict(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "w"}}
        ).store_kind
        == "Service"
    )
