"""The kubelet's probe manager: when each container's probes run, and what their results
mean (kubelet's prober workers), as a state machine on a clock it is given.

One :class:`Worker` per running container and probe kind (``readiness``, ``liveness``,
``startup``), made when the container (re)starts at clock time ``t0``:

* it first probes at ``t0 + initialDelaySeconds``, then every ``periodSeconds``;
* until the startup probe succeeded (a container without one has started at once) the
  liveness and readiness workers do not probe; once it succeeded the startup worker
  stops;
* a result only counts after ``successThreshold`` successes or ``failureThreshold``
  failures in a row; until then the previous result stands. A readiness worker starts at
  failure (the container is not ready before its first success), liveness and startup at
  success;
* a liveness or startup result of failure means the container must be killed
  (:attr:`Outcome.kill`); the worker then holds (no more probes) until the container
  restarts, when the kubelet makes fresh workers (:meth:`ProbeManager.start`).

The manager only keeps time and counts; running a probe is a :class:`Prober`'s job (the
node host's: the emulated pod servers, or real connections on the kernel's nodes), and
the kubelet writes what the results mean (container ``ready``/``started``, restarts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from netmodel.objects import Container, Pod, Probe

KINDS = ("startup", "liveness", "readiness")
#: the word kubelet's events use for a kind (``Readiness probe failed: ...``)
TITLE = {"startup": "Startup", "liveness": "Liveness", "readiness": "Readiness"}


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe's result; ``message`` says why it failed (kubelet's event text after
    ``<Kind> probe failed: ``)."""

    ok: bool
    message: str = ""


class Prober(Protocol):
    """Runs one probe of ``container`` of ``pod`` now, within ``probe.timeoutSeconds``."""

    def probe(self, pod: Pod, container: Container, kind: str, probe: Probe) -> ProbeResult: ...

    def forget(self, pod: Pod) -> None:
        """The pod is gone from the node (its health state may go)."""
        ...


@dataclass(slots=True)
class Worker:
    """The probe of one kind of one container run (see the module docstring)."""

    pod: str
    container: str
    kind: str
    probe: Probe
    next_at: float
    result: bool
    run: int = 0  # how many results equal to ``last`` in a row
    last: bool | None = None
    on_hold: bool = False

    @property
    def period(self) -> float:
        return float(self.probe.period_seconds or 10)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one probe's result changed: the container's readiness or started flag (the
    kubelet writes the status), or that it must be killed."""

    changed: bool = False
    kill: bool = False


@dataclass(slots=True)
class _Container:
    workers: dict[str, Worker] = field(default_factory=dict)


class ProbeManager:
    """The probe workers of one node's containers (see the module docstring)."""

    def __init__(self, *, initial_delays: bool = True) -> None:
        #: (pod key, container name) -> its workers by kind
        self._containers: dict[tuple[str, str], _Container] = {}
        #: False: a probe's first run is not delayed (the deterministic runner, whose
        #: clock moves only when told: there a pod would otherwise never turn Ready)
        self.initial_delays = initial_delays

    def start(self, pod_key: str, container: Container, t0: float) -> None:
        """Container ``container`` of ``pod_key`` (re)started at ``t0``: fresh workers
        for each of its probes (none: nothing is probed, it is ready once running)."""
        ws: dict[str, Worker] = {}
        for kind in KINDS:
            probe: Probe | None = getattr(container, f"{kind}_probe")
            if probe is None:
                continue
            ws[kind] = Worker(
                pod_key,
                container.name,
                kind,
                probe,
                next_at=t0
                + (float(probe.initial_delay_seconds or 0) if self.initial_delays else 0.0),
                # readiness starts failed until a probe passes; where the clock only
                # moves when told (no initial delays) a pod is ready at its start
                # unless a probe fails, as nothing may ever wake the first probe
                result=kind != "readiness" or not self.initial_delays,
            )
        if ws:
            self._containers[(pod_key, container.name)] = _Container(ws)
        else:
            self._containers.pop((pod_key, container.name), None)

    def stop(self, pod_key: str, container: str | None = None) -> None:
        """No more probes of ``pod_key``'s containers (or of one of them): killed, gone."""
        for k in [k for k in self._containers if k[0] == pod_key]:
            if container is None or k[1] == container:
                del self._containers[k]

    def has(self, pod_key: str, container: str) -> bool:
        return (pod_key, container) in self._containers

    def started(self, pod_key: str, container: str) -> bool:
        """Whether the container has started: its startup probe (if any) succeeded."""
        c = self._containers.get((pod_key, container))
        w = c.workers.get("startup") if c else None
        return w is None or (w.result and w.last is True)

    def ready(self, pod_key: str, container: str) -> bool:
        """Whether the container is ready: started, and its readiness probe (if any)
        passes (a running container without probes is ready)."""
        if not self.started(pod_key, container):
            return False
        c = self._containers.get((pod_key, container))
        w = c.workers.get("readiness") if c else None
        return w is None or w.result

    def _active(self) -> list[Worker]:
        out: list[Worker] = []
        for (pod, name), c in self._containers.items():
            started = self.started(pod, name)
            for kind, w in c.workers.items():
                if w.on_hold:
                    continue
                if kind == "startup" and started:
                    continue
                if kind != "startup" and not started:
                    continue
                out.append(w)
        return out

    def due(self, now: float) -> list[Worker]:
        """The workers whose probe is due by ``now``, earliest first."""
        return sorted((w for w in self._active() if w.next_at <= now), key=lambda w: w.next_at)

    def next_due(self) -> float | None:
        """When the next probe is due (None: no probe will run)."""
        return min((w.next_at for w in self._active()), default=None)

    def observe(self, w: Worker, result: ProbeResult, now: float) -> Outcome:
        """Count ``result`` of ``w``'s probe run at ``now``; schedule its next run."""
        w.next_at = max(w.next_at + w.period, now)
        if w.last is result.ok:
            w.run += 1
        else:
            w.last, w.run = result.ok, 1
        threshold = (
            (w.probe.success_threshold or 1) if result.ok else (w.probe.failure_threshold or 3)
        )
        if w.run < threshold:
            return Outcome()
        if w.kind == "startup" and result.ok:
            changed = not w.result or w.run == threshold
            w.result = True
            return Outcome(changed=changed)
        if w.result == result.ok:
            return Outcome()
        w.result = result.ok
        if not result.ok and w.kind in ("liveness", "startup"):
            w.on_hold, w.run = True, 0
            return Outcome(changed=True, kill=True)
        return Outcome(changed=True)


__all__ = ["KINDS", "TITLE", "Outcome", "ProbeManager", "ProbeResult", "Prober", "Worker"]
