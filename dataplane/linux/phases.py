"""Where the time of realising a cluster goes: wall-clock seconds per phase.

:func:`dataplane.linux.realize.realize` and :func:`dataplane.linux.ready.wait_ready`
take an optional :class:`Phases` and add each of their steps to it (namespaces, devices,
tables, CNI calls, sysctls, readiness checks, ...); ``scripts/bench_realize.py`` prints
the breakdown. A phase entered twice adds up. Phases that run on several threads at
once (the CNI plugin execs of :meth:`~dataplane.linux.cni.CniRunner.add_many`) record
their *thread* seconds under :meth:`Phases.add_busy`: summed over the threads, so
larger than the wall time of the phase that contains them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Phases:
    """Seconds per named phase (wall clock, ``time.perf_counter``), in first-seen order,
    and per-step thread seconds summed over worker threads. Thread-safe."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.busy: dict[str, float] = {}
        self._lock = threading.Lock()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to phase ``name`` (also on error)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self.seconds[name] = self.seconds.get(name, 0.0) + elapsed

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Add the time of the ``with`` body to the summed thread time of ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add_busy(name, time.perf_counter() - start)

    def add_busy(self, name: str, seconds: float) -> None:
        with self._lock:
            self.busy[name] = self.busy.get(name, 0.0) + seconds

    def rounded(self, digits: int = 4) -> dict[str, dict[str, float]]:
        """``{"wall": {phase: s}, "thread_sum": {step: s}}``, rounded, for JSON."""
        with self._lock:
            return {
                "wall": {k: round(v, digits) for k, v in self.seconds.items()},
                "thread_sum": {k: round(v, digits) for k, v in self.busy.items()},
            }


@contextmanager
def maybe(phases: Phases | None, name: str) -> Iterator[None]:
    """:meth:`Phases.phase` when ``phases`` is given, else nothing."""
    if phases is None:
        yield
    else:
        with phases.phase(name):
            yield


@contextmanager
def maybe_step(phases: Phases | None, name: str) -> Iterator[None]:
    """:meth:`Phases.step` when ``phases`` is given, else nothing."""
    if phases is None:
        yield
    else:
        with phases.step(name):
            yield
