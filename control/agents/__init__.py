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
no work queued that a converged store does not need.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol, runtime_checkable

from control.store.base import WatchEvent


@runtime_checkable
class Agent(Protocol):
    @property
    def kinds(self) -> Collection[str]: ...

    def handle(self, events: Sequence[WatchEvent]) -> None: ...

    def sync(self) -> int: ...


__all__ = ["Agent"]
