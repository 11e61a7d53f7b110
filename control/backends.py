"""One traffic interface over both backends, so labs and differential tests ask the same
question of the emulator and of the kernel.

A :class:`Backend` is built from a :class:`control.emulation.ClusterView` (the same
network, rules and listeners for both). Endpoint names are logical (``pod/NS/NAME``,
``node/NAME``, ``ext/IP``); destinations are IPs (a Service VIP, a node IP, a pod IP).

Outcomes are plain values that compare across backends:

* :class:`PingOutcome` — did the echo reply come back, from which address, with which TTL;
* :class:`ConnOutcome` — which pod answered (``ns/name``) and the source address it saw,
  or why nothing answered (``verdict``: "delivered", "refused", "timeout", "unreachable",
  "DROP", "REJECT", ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Protocol

from control.emulation import ClusterView
from dataplane.emulator.cluster import EmulatedCluster

Proto = Literal["tcp", "udp"]


@dataclass(frozen=True, slots=True)
class PingOutcome:
    ok: bool
    reply_from: str | None
    ttl: int | None


@dataclass(frozen=True, slots=True)
class ConnOutcome:
    verdict: str
    pod: str | None  # ns/name of the answering pod
    source_seen: str | None
    endpoint: str | None = None  # ip:port that answered, when known


class Backend(Protocol):
    name: str

    def ping(self, src: str, dst: str, count: int = 1) -> list[PingOutcome]: ...

    def connect(
        self, src: str, dst: str, dport: int, proto: Proto = "tcp", n: int = 1
    ) -> list[ConnOutcome]: ...

    def close(self) -> None: ...


class EmulatorBackend:
    """The emulated cluster behind the Backend interface."""

    name = "emulator"

    def __init__(self, view: ClusterView, *, seed: int = 0) -> None:
        self.view = view
        self.cluster = EmulatedCluster(
            view.network, view.rulesets, view.listeners, view.local_addresses, seed=seed
        )

    def ping(self, src: str, dst: str, count: int = 1) -> list[PingOutcome]:
        return [
            PingOutcome(r.ok, r.reply_from if r.ok else None, r.ttl)
            for r in self.cluster.ping(src, dst, count)
        ]

    def connect(
        self, src: str, dst: str, dport: int, proto: Proto = "tcp", n: int = 1
    ) -> list[ConnOutcome]:
        out = []
        for r in self.cluster.connect(src, dst, proto, dport, n, close=True, record=False):
            verdict = "delivered" if r.established else r.verdict
            out.append(ConnOutcome(verdict, r.pod, r.source_seen, r.endpoint))
        return out

    def close(self) -> None:
        pass


@contextmanager
def emulator_backend(view: ClusterView, *, seed: int = 0) -> Iterator[EmulatorBackend]:
    b = EmulatorBackend(view, seed=seed)
    try:
        yield b
    finally:
        b.close()
