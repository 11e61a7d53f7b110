"""The strategy protocol (:class:`Strategy`) and the no-op strategy every kind's own
strategy subclasses (:class:`GenericStrategy`): kept apart from the table of strategies
(:mod:`.strategy`) so that the modules that write a kind's strategy can subclass it
without importing that table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from control.apiserver.admission import Allocations, BatchView
from control.apiserver.allocators import Journal
from control.apiserver.http import tables
from control.apiserver.http.resources import Resource
from control.apiserver.validation import Problems
from netmodel.cluster import ClusterSpec
from netmodel.errors import InputError
from netmodel.objects import KubeObject


@dataclass(frozen=True)
class Marked:
    """A graceful deletion: the object as it stays stored, marked (deletionTimestamp and
    whatever else the kind sets), and the message of its ``Deleting`` Event."""

    obj: KubeObject
    message: str


class Strategy(Protocol):
    """One kind's rules. ``default`` returns the object with unset fields filled in
    (idempotent); ``validate`` / ``validate_update`` raise the first problem through
    ``p`` (an :class:`~netmodel.errors.InvalidError`) and return None for a valid object
    (``stored``: the version an update replaces, None on create); ``keep_assigned``
    returns an update's object with the fields the control plane assigned and the update
    leaves unset taken from ``current``.

    Allocations: ``admit`` takes what a create (``old`` None) or an update needs from
    ``alloc`` and returns the object with it filled in, and notes (``clusterIP
    10.96.0.10``) for the Event; ``restatus`` does so for a status write (it may refuse
    the write, or return the object to store instead: a custom resource's status pruned
    and defaulted); ``release`` frees what a removed object held (notes for the Event).
    All through ``journal``,
    which the apiserver commits when the write succeeds and rolls back otherwise.
    ``check_created`` checks the objects of this kind one ``apply`` creates, once the
    whole batch is admitted, against ``batch``: ``[(index into objs, error)]`` for the
    first problem, or nothing.

    Deletion: ``graceful_delete`` returns the :class:`Marked` object a delete leaves
    stored (a bound Pod for its kubelet, a Namespace for its controller), or None: then
    the generic rules apply (finalizers and foreground deletion only mark it, when
    ``honours_finalizers``; else it is removed at once, the Event saying
    ``deleted_message``). It may refuse (InvalidError) to delete at all.

    Tables: ``table_columns`` and ``table_row`` are the Table (``kubectl get``) of the
    resource ``res`` serving this kind: kube-apiserver's columns
    (:mod:`.http.tables`), or the kind's own."""

    #: whether create sets ``metadata.generation`` and a spec change bumps it
    counts_generation: bool
    #: whether its writes are recorded as Events (Events are not)
    records_events: bool
    #: whether its objects keep a Terminating Namespace from being finalized (Events do
    #: not: the timeline outlives what it describes)
    holds_namespace: bool
    #: whether finalizers and foreground deletion only mark its objects
    honours_finalizers: bool
    #: whether a DELETE answers with the deleted object (kube's ReturnDeletedObject)
    #: rather than a Status
    returns_deleted_object: bool
    #: the field that binds its objects to a node (``spec.nodeName``), or names one
    #: (``metadata.name``): a watch selecting on it is a node's (the kubelet's)
    node_field: str | None

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject: ...

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None: ...

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None: ...

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject: ...

    def keeps_given_status(self, obj: KubeObject) -> bool:
        """Whether an update keeps the status ``obj`` brings (else the stored one)."""
        ...

    def admit(
        self, obj: KubeObject, old: KubeObject | None, alloc: Allocations, journal: Journal
    ) -> tuple[KubeObject, list[str]]: ...

    def restatus(
        self, obj: KubeObject, old: KubeObject, alloc: Allocations, journal: Journal
    ) -> KubeObject | None: ...

    def release(self, obj: KubeObject, alloc: Allocations, journal: Journal) -> list[str]: ...

    def check_created(
        self, objs: Sequence[KubeObject], batch: BatchView
    ) -> list[tuple[int, InputError]]: ...

    def graceful_delete(self, obj: KubeObject, *, force: bool, now: str) -> Marked | None: ...

    def deleted_message(self, obj: KubeObject, *, force: bool) -> str: ...

    def table_columns(self, res: Resource) -> list[dict[str, Any]]: ...

    def table_row(self, res: Resource, obj: Any, now: float) -> list[Any]: ...


class GenericStrategy:
    """No defaults, no checks beyond the metadata ones, nothing assigned, nothing
    allocated; deleted at once unless finalizers hold it; kube-apiserver's Table columns
    (name and age for a kind without columns of its own). Kinds served through the
    generic path count no generation (kube-apiserver counts none for ConfigMaps and the
    like); typed kinds without rules of their own (RBAC) do, as svclab always has.
    Strategies of other kinds subclass it and override what their kind does."""

    records_events: bool = True
    holds_namespace: bool = True
    honours_finalizers: bool = True
    returns_deleted_object: bool = False
    node_field: str | None = None

    counts_generation: bool = False

    def __init__(self, *, counts_generation: bool | None = None) -> None:
        if counts_generation is not None:  # else the class's own
            self.counts_generation = counts_generation

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        return obj

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        return None

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        return None

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        return obj

    def keeps_given_status(self, obj: KubeObject) -> bool:
        return False

    def admit(
        self, obj: KubeObject, old: KubeObject | None, alloc: Allocations, journal: Journal
    ) -> tuple[KubeObject, list[str]]:
        return obj, []

    def restatus(
        self, obj: KubeObject, old: KubeObject, alloc: Allocations, journal: Journal
    ) -> KubeObject | None:
        return None

    def release(self, obj: KubeObject, alloc: Allocations, journal: Journal) -> list[str]:
        return []

    def check_created(
        self, objs: Sequence[KubeObject], batch: BatchView
    ) -> list[tuple[int, InputError]]:
        return []

    def graceful_delete(self, obj: KubeObject, *, force: bool, now: str) -> Marked | None:
        return None

    def deleted_message(self, obj: KubeObject, *, force: bool) -> str:
        return "deleted"

    def table_columns(self, res: Resource) -> list[dict[str, Any]]:
        return tables.columns(res)

    def table_row(self, res: Resource, obj: Any, now: float) -> list[Any]:
        return tables.row_cells(res, obj, now)
