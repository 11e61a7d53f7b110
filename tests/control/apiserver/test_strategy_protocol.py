"""The apiserver asks a kind's strategy, whatever the kind: a strategy registered for a
kind served through the generic path is asked to admit, to release, how to delete and
for the Table; a kind without one gets the no-op generic strategy."""

from __future__ import annotations

from typing import Any

import pytest
from api_helpers import make_api, obj

from control.apiserver import strategy
from control.apiserver.admission import Allocations
from control.apiserver.allocators import Journal
from control.apiserver.http.resources import by_path
from control.apiserver.strategy import GenericStrategy, Marked, strategy_of
from control.events import timeline
from netmodel.objects import KubeObject


class LeaseStrategy(GenericStrategy):
    """A test kind's rules: a holder annotation on admission, a release note, a lease
    with a holder only marked on delete, and a Table of its holder."""

    def admit(
        self, o: KubeObject, old: KubeObject | None, alloc: Allocations, journal: Journal
    ) -> tuple[KubeObject, list[str]]:
        ann = {**o.metadata.annotations, "test/admitted": "create" if old is None else "update"}
        return o.with_meta(annotations=ann), ["holder slot 1"]

    def release(self, o: KubeObject, alloc: Allocations, journal: Journal) -> list[str]:
        return ["holder slot 1"]

    def graceful_delete(self, o: KubeObject, *, force: bool, now: str) -> Marked | None:
        if force or "holder" not in o.metadata.labels:
            return None
        return Marked(o.with_meta(deletion_timestamp=now), "held by its holder")

    def table_row(self, res: Any, o: Any, now: float) -> list[Any]:
        return [o.name, o.metadata.labels.get("holder", "")]


LEASE = """
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: %s, namespace: default, labels: %s}
spec: {leaseDurationSeconds: 40}
"""


@pytest.fixture
def leases(monkeypatch: pytest.MonkeyPatch) -> LeaseStrategy:
    s = LeaseStrategy()
    monkeypatch.setitem(strategy.STRATEGIES, "Lease", s)
    return s


def test_a_registered_strategy_admits_releases_and_deletes(leases: LeaseStrategy) -> None:
    api = make_api()
    stored = api.create(obj(LEASE % ("a", "{holder: node-1}")))
    assert stored.metadata.annotations["test/admitted"] == "create"
    assert timeline(api.store)[-1].message == "allocated holder slot 1"
    marked = api.delete("Lease", "default/a")
    assert marked.metadata.deletion_timestamp is not None
    assert api.store.get("Lease", "default/a").metadata.deletion_timestamp is not None
    assert timeline(api.store)[-1].message == "held by its holder"
    api.create(obj(LEASE % ("b", "{}")))
    api.delete("Lease", "default/b")
    assert api.store.list("Lease", "default") == [api.store.get("Lease", "default/a")]
    assert timeline(api.store)[-1].message == "released holder slot 1"
    api.create(obj(LEASE % ("c", "{holder: node-2}")))
    api.delete("Lease", "default/c", force=True)  # not graceful: removed at once
    assert [o.name for o in api.store.list("Lease", "default")] == ["a"]


def test_the_table_comes_from_the_strategy(leases: LeaseStrategy) -> None:
    from control.apiserver.http.wire import JSONCache

    res = by_path("coordination.k8s.io", "v1", "leases")
    assert res is not None
    lease = make_api().create(obj(LEASE % ("a", "{holder: node-1}")))
    assert strategy_of("Lease").table_row(res, lease, 0.0) == ["a", "node-1"]
    row = JSONCache().table_row(res, lease, 0.0, {})
    assert row.startswith(b'{"cells":["a","node-1"]')


def test_a_kind_without_a_strategy_gets_the_generic_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lease's own strategy (no Events for heartbeats) taken away: the generic one's rules
    monkeypatch.delitem(strategy.STRATEGIES, "Lease")
    api = make_api()
    api.create(obj(LEASE % ("a", "{holder: node-1}")))
    gone = api.delete("Lease", "default/a")
    assert gone.metadata.deletion_timestamp is None
    assert api.store.list("Lease") == []
    assert timeline(api.store)[-1].message == "deleted"
