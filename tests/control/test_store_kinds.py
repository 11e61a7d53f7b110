"""Store kinds are unique per (group, resource): built-in kinds are stored under their
kind name, and a custom resource under ``<plural>.<group>`` even when a built-in kind
has its kind name; the apiserver and the stores find it there, never by its ``kind``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from control.apiserver import APIServer
from control.clock import FakeClock
from control.events import Recorder
from control.store import MemoryStore, SqliteStore, Store
from netmodel import customresources, kinds
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import GenericObject, Service


def test_builtin_store_kinds_are_unique_per_group_and_resource() -> None:
    """No two built-in rows with distinct (group, plural) share a store kind unless one
    shares the other's store (events.k8s.io Events), and each keeps its kind name."""
    owner: dict[str, tuple[str, str]] = {}
    for r in kinds.ROWS:
        if r.store_kind is None or not r.owns_store:
            continue
        assert r.store_kind == r.kind, f"{r.api_version} {r.kind}: stored as {r.store_kind}"
        held = owner.setdefault(r.store_kind, (r.group, r.plural))
        assert held == (r.group, r.plural), (
            f"store kind {r.store_kind!r} is both {held} and {(r.group, r.plural)}"
        )
    for r in kinds.ROWS:
        if r.store_kind is not None and not r.owns_store:
            assert r.store_kind in owner, f"{r.api_version} {r.kind} shares no owned store"
            assert r.plural == owner[r.store_kind][1], r
    assert set(kinds.KINDS) == set(owner)


def _memory(tmp: Path) -> Store:
    return MemoryStore()


def _sqlite(tmp: Path) -> Store:
    return SqliteStore(tmp / "state.db")


@pytest.fixture(params=[_memory, _sqlite], ids=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opener: Callable[[Path], Store] = request.param
    s = opener(tmp_path)
    yield s
    s.close()


SERVICES_CRD = {
    "group": "example.com",
    "scope": "Namespaced",
    "names": {"plural": "services", "kind": "Service"},
    "versions": [
        {
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {
                "openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                }
            },
        }
    ],
}


@pytest.fixture
def widget_services() -> Iterator[str]:
    """A custom resource whose kind name is a built-in kind's: Service in example.com
    (a CustomResourceDefinition's rows, as the apiserver installs them)."""
    assert customresources.install("services.example.com", SERVICES_CRD) is None
    yield "services.example.com"
    customresources.uninstall("services.example.com")


def test_a_custom_resource_named_as_a_builtin_kind_keeps_its_own_store(
    store: Store, widget_services: str
) -> None:
    clock = FakeClock()
    api = APIServer(store, ClusterSpec(), clock=clock, recorder=Recorder(store, clock))
    api.bootstrap()
    custom = object_from_dict(
        {
            "apiVersion": "example.com/v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"colour": "red"},
        }
    )
    assert isinstance(custom, GenericObject) and custom.store_kind == widget_services
    api.create(custom)
    builtin = store.get("Service", "default/kubernetes")
    assert isinstance(builtin, Service)  # the built-in store is untouched
    with pytest.raises(Exception, match="not found"):
        store.get("Service", "default/web")
    got = store.get("services.example.com", "default/web")
    assert got.to_dict()["spec"] == {"colour": "red"}
    changed = object_from_dict({**got.to_dict(), "spec": {"colour": "blue"}})
    api.update(changed)
    assert store.get("services.example.com", "default/web").to_dict()["spec"] == {"colour": "blue"}
    api.delete("services.example.com", "default/web")
    assert store.list("services.example.com") == []
    assert [s.name for s in store.list("Service", "default")] == ["kubernetes"]
