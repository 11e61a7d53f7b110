"""The control-plane driver of a serving process: what makes controllers, scheduler,
kubelets and kube-proxies react to writes with no CLI command.

:class:`RunnerDriver` runs the deterministic runner (:meth:`ControlPlane.run_round`)
on the server's event loop: woken by every write (``kick``) and at least every
``period`` seconds (time-based work: pod GC, namespace cleanup), it runs rounds until
one does no work, pumping the watch hub after each round and yielding to the loop
between rounds, so requests are served while the cluster converges.

The seam: the API calls only ``start()``, ``kick()`` and ``await stop()``. An
informer-based driver (components as API clients) plugs in with the same three.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from control.apiserver.http.app import API

log = logging.getLogger("svclab.driver")


class Driver(Protocol):
    def start(self) -> None: ...

    def kick(self) -> None: ...

    async def stop(self) -> None: ...


class RunnerDriver:
    def __init__(self, api: API, *, period: float = 1.0) -> None:
        self.api = api
        self.period = period
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.busy = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        self.kick()

    def kick(self) -> None:
        if not self.busy:
            self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.period)
            self._wake.clear()
            await self.converge()

    async def converge(self) -> None:
        if not self.api.fixed:
            return
        plane = self.api.session.plane
        self.busy = True
        try:
            for _ in range(10_000):
                try:
                    worked = plane.run_round()
                except Exception:
                    log.exception("control-plane round failed")
                    worked = 0
                self.rounds += 1
                self.api.pump()
                if worked == 0:
                    break
                await asyncio.sleep(0)
        finally:
            self.busy = False


class ApiOnlyDriver:
    """``svclab serve --control-plane none``: no control plane at all (another process
    runs it: another replica's, or ``python -m control.live``), only the watch hub
    kept current. Every ``pump_every`` seconds the hub is pumped, so that writes made
    by other writers of the store reach this server's watchers: another API server
    replica over the same etcd (the etcd store's watch reads etcd's history from the
    revision the hub last read: :meth:`control.store.etcd.EtcdStore.watch`), or CLI
    commands committing to the state directory."""

    def __init__(self, api: API, *, pump_every: float = 0.1) -> None:
        self.api = api
        self.pump_every = pump_every
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def kick(self) -> None:
        return None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.pump_every)
            try:
                if self.api.fixed:
                    self.api.pump()
            except Exception as e:  # the store is away: the next round tries again
                log.warning("watch pump failed: %s: %s", type(e).__name__, e)
