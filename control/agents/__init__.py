"""Node agents (kubelet, kube-proxy) and the protocol every control-plane component keeps.

An :class:`Agent` is what the drivers run — :class:`control.runner.ControlPlane` (the
deterministic runner) and :class:`control.live.LiveControlPlane` (``svclab serve``):

* ``kinds``: the object kinds whose watch events it wants;
* ``handle(events)``: take the new watch events of those kinds, in revision order
  (cheap: note what changed, queue work; no writes);
* ``sync() -> int``: do the queued work, return how many steps were done (0 = idle).
  Writes go through the apiserver (or an API client); their events reach the agent
  before its next ``sync``.

Optional: ``name`` (shown in timing breakdowns) and ``resync(objects)``, called with every
stored object of ``kinds`` when the agent starts or its watch must restart (the store
compacted past it); without ``resync`` the agent gets those objects as ADDED events; and
``prime(objects)``, what the runner calls instead of ``resync`` when it starts the agent
from a converged store (:meth:`control.runner.ControlPlane.start`): the same state, with
no work queued that a converged store does not need; and ``has_start_work(store, pods)``
(``pods``: :func:`pod_summaries`), whether a full start would find work left for it on a
converged store (a retry), so that the converged start starts it at once too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from control.store.base import Store, WatchEvent, scan


@runtime_checkable
class Agent(Protocol):
    @property
    def kinds(self) -> Collection[str]: ...

    def handle(self, events: Sequence[WatchEvent]) -> None: ...

    def sync(self) -> int: ...


class PodSummary(NamedTuple):
    """The fields of a pod that say whether a component has work left for it at start
    (``has_start_work``, see :meth:`control.runner.ControlPlane.start`)."""

    key: str
    node_name: str | None
    deletion_timestamp: str | None
    scheduler_name: str | None
    phase: str | None
    pod_ip: str | None


def pod_summaries(store: Store) -> list[PodSummary]:
    """Every pod's :class:`PodSummary`, in key order, read through
    :func:`~control.store.base.scan` (SQLite: one query, no pod decoded)."""
    paths = [
        ("spec", "nodeName"),
        ("metadata", "deletionTimestamp"),
        ("spec", "schedulerName"),
        ("status", "phase"),
        ("status", "podIP"),
    ]
    return [PodSummary(*row) for row in scan(store, "Pod", paths)]


__all__ = ["Agent", "PodSummary", "pod_summaries"]
