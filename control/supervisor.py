"""The component supervisor of ``svclab serve --components processes``: one OS process
per identity group (:mod:`control.components`), as Kubernetes' binaries are split —
kube-controller-manager, kube-scheduler, and per node a kubelet, a kube-proxy and a
kube-router (the NetworkPolicy agent).

Contract:

* :meth:`Supervisor.set_nodes` says which Nodes exist; the supervisor runs one kubelet,
  one kube-proxy and one kube-router process per node (or per pool of nodes, see
  :func:`nodes_per_process`) and stops those of a node that is gone.
* A process that exits while still wanted is started again after a back-off: 1 s,
  doubling up to 30 s; a process that ran :data:`Supervisor.HEALTHY_AFTER` seconds
  starts again from 1 s. Each exit and restart is logged (``svclab.supervisor``).
* A process is stopped by closing its standard input (its entry point ends on EOF), then
  SIGTERM, then SIGKILL; so a child also ends when the supervisor dies.
* The command of a process comes from ``command(group, nodes)`` (the composition root
  gives it); the supervisor never imports a component.
"""

from __future__ import annotations

import contextlib
import logging
import math
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from control.components import (
    CONTROLLER_MANAGER_GROUP,
    KUBE_PROXY_GROUP,
    KUBE_ROUTER_GROUP,
    KUBELET_GROUP,
    SCHEDULER_GROUP,
)

log = logging.getLogger("svclab.supervisor")

#: up to this many nodes, each node's kubelet and kube-proxy are processes of their own
POOL_ABOVE = 16


def nodes_per_process(nodes: int) -> int:
    """Nodes per kubelet (and per kube-proxy) process: 1 up to :data:`POOL_ABOVE` nodes;
    above, the nodes are pooled so that each group has at most POOL_ABOVE processes
    (a 2-core machine cannot run thousands of interpreters)."""
    return 1 if nodes <= POOL_ABOVE else math.ceil(nodes / POOL_ABOVE)


#: (group, nodes) -> the argv of that process
Command = Callable[[str, tuple[str, ...]], list[str]]


@dataclass
class Child:
    """One supervised process."""

    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    backoff: float = 0.0
    next_start: float = 0.0
    started_at: float = 0.0
    nodes: tuple[str, ...] = ()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


@dataclass
class _Pools:
    """First-fit pools of nodes for one node group."""

    size: int
    pools: list[list[str]] = field(default_factory=list)

    def update(self, nodes: Iterable[str]) -> None:
        want = list(nodes)
        keep = set(want)
        for pool in self.pools:
            pool[:] = [n for n in pool if n in keep]
        placed = {n for pool in self.pools for n in pool}
        for n in want:
            if n in placed:
                continue
            free: list[str] | None = next((p for p in self.pools if len(p) < self.size), None)
            if free is None:
                free = []
                self.pools.append(free)
            free.append(n)
        while self.pools and not self.pools[-1]:
            self.pools.pop()


class Supervisor:
    """Runs and restarts the component processes (see the module docstring)."""

    BACKOFF_INITIAL = 1.0
    BACKOFF_MAX = 30.0
    HEALTHY_AFTER = 10.0
    STOP_TIMEOUT = 10.0

    def __init__(
        self,
        command: Command,
        *,
        kube_proxies: bool = True,
        extra: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.command = command
        self.kube_proxies = kube_proxies
        self.children: dict[str, Child] = {}
        self._lock = threading.Lock()
        self._node_groups = [
            KUBELET_GROUP,
            *([KUBE_PROXY_GROUP] if kube_proxies else []),
            KUBE_ROUTER_GROUP,
        ]
        self._pools: dict[str, _Pools] = {}
        #: processes the user stopped (``svclab kubelet stop``): killed, not restarted
        self.held: frozenset[str] = frozenset()
        for group in (CONTROLLER_MANAGER_GROUP, SCHEDULER_GROUP):
            self._want(group, group, ())
        #: further processes of a group (e.g. a second controller-manager), by name
        for name, group in extra:
            self._want(name, group, ())

    def _want(self, name: str, group: str, nodes: tuple[str, ...]) -> None:
        argv = self.command(group, nodes)
        child = self.children.get(name)
        if child is not None and child.argv == argv:
            return
        if child is not None:
            self._stop_child(child)  # its nodes changed: start it again with the new set
        self.children[name] = Child(name, argv, nodes=nodes)

    def set_nodes(self, nodes: Iterable[str]) -> None:
        """The Nodes that exist now: start, restart (a pool's set changed) or stop the
        node processes accordingly (at the next :meth:`tick`)."""
        names = sorted(set(nodes))
        with self._lock:
            for group in self._node_groups:
                pools = self._pools.get(group)
                if pools is None:
                    pools = self._pools[group] = _Pools(nodes_per_process(len(names)))
                pools.update(names)
                wanted: set[str] = set()
                for i, pool in enumerate(pools.pools):
                    if not pool:
                        continue
                    name = f"{group}/{pool[0]}" if pools.size == 1 else f"{group}/pool-{i}"
                    wanted.add(name)
                    self._want(name, group, tuple(pool))
                for name in [n for n in self.children if n.startswith(f"{group}/")]:
                    if name not in wanted:
                        child = self.children.pop(name)
                        self._stop_child(child)
                        log.info("process=%s stopped: its node is gone", name)

    def hold(self, names: Iterable[str]) -> None:
        """The processes (by name, e.g. ``kubelet/node-2``) to keep stopped: a running one
        is killed at the next :meth:`tick`, as a crash would end it, and none is started
        until it is no longer held (then it starts at once)."""
        with self._lock:
            held = frozenset(names)
            for name in held - self.held:
                log.info("process=%s held: stopped until released", name)
            for name in self.held - held:
                child = self.children.get(name)
                if child is not None:
                    child.next_start = 0.0
                    child.backoff = 0.0
                log.info("process=%s released", name)
            self.held = held

    def tick(self) -> None:
        """Start what is due, note what exited (and schedule its restart)."""
        now = time.monotonic()
        with self._lock:
            for child in self.children.values():
                proc = child.proc
                if child.name in self.held:
                    if proc is not None:
                        proc.kill()
                        proc.wait()
                        child.proc = None
                        log.warning("process=%s pid=%d killed (held)", child.name, proc.pid)
                    continue
                if proc is not None:
                    code = proc.poll()
                    if code is None:
                        if now - child.started_at > self.HEALTHY_AFTER:
                            child.backoff = 0.0
                        continue
                    child.proc = None
                    child.backoff = (
                        self.BACKOFF_INITIAL
                        if child.backoff == 0.0
                        else min(child.backoff * 2, self.BACKOFF_MAX)
                    )
                    child.next_start = now + child.backoff
                    log.warning(
                        "process=%s pid=%d exited code=%s: restarting in %.1fs (back-off)",
                        child.name,
                        proc.pid,
                        code,
                        child.backoff,
                    )
                    continue
                if now < child.next_start:
                    continue
                child.proc = subprocess.Popen(child.argv, stdin=subprocess.PIPE)
                child.started_at = now
                if child.next_start:
                    child.restarts += 1
                log.info(
                    "process=%s pid=%d started%s",
                    child.name,
                    child.proc.pid,
                    f" (restart {child.restarts})" if child.restarts else "",
                )

    def run(self, stop: threading.Event, every: float = 0.2) -> None:
        while not stop.is_set():
            self.tick()
            stop.wait(every)
        self.stop()

    @classmethod
    def _stop_child(cls, child: Child) -> None:
        proc, child.proc = child.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(cls.STOP_TIMEOUT / 2)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(cls.STOP_TIMEOUT / 2)
            except subprocess.TimeoutExpired:
                log.warning("process=%s pid=%d did not stop: killed", child.name, proc.pid)
                proc.kill()
                proc.wait()

    def stop(self) -> None:
        """Stop every process (all asked at once, then waited for)."""
        with self._lock:
            children = list(self.children.values())
            for child in children:
                if child.proc is not None and child.proc.stdin is not None:
                    with contextlib.suppress(OSError):
                        child.proc.stdin.close()
            for child in children:
                self._stop_child(child)

    def pids(self) -> dict[str, int]:
        with self._lock:
            return {c.name: c.pid for c in self.children.values() if c.pid is not None}


__all__ = ["POOL_ABOVE", "Child", "Command", "Supervisor", "nodes_per_process"]
