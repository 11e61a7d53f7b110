"""One traffic interface over both backends (:class:`Backend`), so the CLI, labs and
differential tests ask the same question of the emulator and of the kernel.

* :mod:`.base` — the protocol and its outcome values (:class:`PingOutcome`,
  :class:`ConnOutcome`), conntrack read-back helpers;
* :mod:`.emulated` — :class:`EmulatorBackend` over the packet emulator;
* :mod:`.kernel` — :class:`RealBackend` over a realised cluster (:class:`RealTrace`);
* :mod:`.realise` — realising a :class:`~netmodel.view.ClusterView` on the kernel
  (network, rules, pod servers). Imported on demand (``dataplane.backends.realise``):
  it pulls the Linux backend in.
"""

from dataplane.backends.base import (
    Backend,
    ConnOutcome,
    PingOutcome,
    Proto,
    conntrack_key,
)
from dataplane.backends.emulated import EmulatorBackend, emulator_backend, socket_verdict
from dataplane.backends.kernel import RealBackend, RealTrace, RuleHit, real_backend

__all__ = [
    "Backend",
    "ConnOutcome",
    "EmulatorBackend",
    "PingOutcome",
    "Proto",
    "RealBackend",
    "RealTrace",
    "RuleHit",
    "conntrack_key",
    "emulator_backend",
    "real_backend",
    "socket_verdict",
]
