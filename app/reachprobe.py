"""The reachability matrix, probed: for every ordered pair of running pods, the
(protocol, port)s on which a connection from one to the other's pod IP succeeds.

This is how the upstream NetworkPolicy e2e tests (kubernetes
``test/e2e/network/netpol``) measure a cluster: each pod connects to each pod's own
address (never a Service) on each port and protocol, and the outcomes form a truth
table. Here the connections go

* through the **emulated** dataplane (default): the same emulator ``svclab connect``
  walks, built from the same view (:func:`app.emulation.view`), so whatever rules the
  nodes carry (kube-proxy's, a policy agent's) decide, packet by packet;
* through the **kernel** (``real=True``): the cluster ``svclab up --real`` realised,
  brought up to date first (:func:`app.real.ensure_current`), with real sockets in the
  pods' namespaces (:mod:`dataplane.linux.traffic`), as ``svclab connect --real`` opens
  them; the probes run in a thread pool with a short timeout (a REJECTed connection
  fails at once, a DROPped one costs the timeout).

A probe **succeeds** when the destination pod's own server answered it: TCP, the
handshake completed and the answer came from that pod; UDP, the pod's server sent its
datagram back; SCTP (emulated only: see :data:`SCTP_KERNEL`), the association's first
chunk was answered by the pod. Anything else (refused, reset, timeout, answered by
another pod) is a failure. Each emulated probe is forgotten once made (its conntrack
entries removed), so probes do not see each other's state.

The contract ``svclab reach --probe [--real]`` relies on::

    probe_matrix(state_dir, ports=[("TCP", 80), ("UDP", 53)], namespaces=None, real=False)
      -> {("x/a", "y/b"): frozenset({("TCP", 80)}), ...}

Every ordered pair of the selected pods (a pod to itself included) is a key, with the
empty set when nothing succeeded. Protocols are upper case, as NetworkPolicy spells them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from netmodel.errors import BackendError, InputError
from netmodel.netpolicy import PROTOCOLS

if TYPE_CHECKING:
    from control.session import Session
    from netmodel.objects import Pod

Protocol = Literal["TCP", "UDP", "SCTP"]
PortSpec = tuple[str, int]
Matrix = dict[tuple[str, str], frozenset[tuple[str, int]]]

#: how long a kernel probe waits for its answer (a DROPped connection costs this much)
REAL_TIMEOUT = 1.0
#: kernel probes in flight at once
REAL_WORKERS = 32


@dataclass(frozen=True, slots=True)
class ProbePod:
    """One end of a probe: the pod's key (``ns/name``) and its IP."""

    key: str
    ip: str


def _check_ports(ports: Sequence[tuple[str, int]]) -> tuple[tuple[Protocol, int], ...]:
    """``ports`` with protocols upper-cased; an InputError names a bad entry."""
    out: list[tuple[Protocol, int]] = []
    for i, item in enumerate(ports):
        try:
            proto, port = item
        except (TypeError, ValueError):
            raise InputError(
                f"expected (protocol, port), got {item!r}", field=f"ports[{i}]"
            ) from None
        p = str(proto).upper()
        if p not in PROTOCOLS:
            raise InputError(
                f"unsupported protocol {proto!r} (TCP, UDP, SCTP)", field=f"ports[{i}]"
            )
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise InputError(f"port {port!r} is not in 1-65535", field=f"ports[{i}]")
        if (p, port) not in out:
            out.append((p, port))
    if not out:
        raise InputError("no (protocol, port) to probe", field="ports")
    return tuple(out)


def probe_pods(session: Session, namespaces: Sequence[str] | None) -> list[ProbePod]:
    """The running pods (with an IP, on a node, not host-network) of ``namespaces`` (None:
    all), sorted by key. A namespace named that does not exist is an InputError."""
    from app.emulation import running_pods

    if namespaces is not None:
        known = {ns.name for ns in session.store.list("Namespace")}
        missing = sorted(set(namespaces) - known)
        if missing:
            raise InputError(f"namespace {missing[0]} not found", field="namespaces")
    pods: list[Pod] = running_pods(session)
    return sorted(
        (
            ProbePod(p.key, str(p.status.pod_ip))
            for p in pods
            if namespaces is None or p.key.partition("/")[0] in namespaces
        ),
        key=lambda p: p.key,
    )


@contextmanager
def _session(state_dir: Path) -> Iterator[Session]:
    from control.session import Session

    # as `svclab connect`: the kube-proxies' syncs are not recorded as events
    session = Session.open(state_dir, read_only=True)
    try:
        yield session
    finally:
        session.close()


def probe_matrix(
    state_dir: Path,
    *,
    ports: Sequence[tuple[str, int]],
    namespaces: Sequence[str] | None = None,
    real: bool = False,
) -> Matrix:
    """For each ordered pair (source pod key, destination pod key) of the running pods of
    ``namespaces`` (None: every namespace) in the cluster of ``state_dir``, the
    (PROTOCOL, port)s of ``ports`` on which a connection to the destination's pod IP
    succeeded (see the module docstring): through the emulator, or with ``real`` through
    the kernel of the cluster ``svclab up --real`` realised from ``state_dir``.

    Raises :class:`InputError` for a bad ``ports`` entry or an unknown namespace,
    :class:`BackendError` when ``real`` asks the kernel for SCTP and it has none."""
    wanted = _check_ports(ports)
    with _session(Path(state_dir)) as session:
        pods = probe_pods(session, namespaces)
        if real:
            return _probe_kernel(session, pods, wanted)
        return _probe_emulated(session, pods, wanted)


def _empty(pods: Sequence[ProbePod]) -> dict[tuple[str, str], set[tuple[str, int]]]:
    return {(s.key, d.key): set() for s in pods for d in pods}


def _probe_emulated(
    session: Session, pods: Sequence[ProbePod], ports: Sequence[tuple[Protocol, int]]
) -> Matrix:
    from app import emulation
    from dataplane.backends import EmulatorBackend

    found = _empty(pods)
    if not pods:
        return {}
    view = emulation.view(session, lazy=True)
    be = EmulatorBackend(
        view, seed=session.cluster.spec.seed, compiled_cache=emulation.compiled_cache(session)
    )
    for s in pods:
        for d in pods:
            for proto, port in ports:
                (r,) = be.cluster.iter_connect(
                    f"pod/{s.key}",
                    d.ip,
                    proto.lower(),  # type: ignore[arg-type]
                    port,
                    1,
                    record=False,
                    complete=False,
                    release=True,
                )
                if r.established and r.pod == d.key:
                    found[(s.key, d.key)].add((proto, port))
    return {k: frozenset(v) for k, v in found.items()}


def _probe_kernel(
    session: Session, pods: Sequence[ProbePod], ports: Sequence[tuple[Protocol, int]]
) -> Matrix:
    from app import real as real_cluster
    from dataplane.backends import RealBackend
    from dataplane.linux.traffic import sctp_refused

    if any(proto == "SCTP" for proto, _ in ports):
        why = sctp_refused()
        if why is not None:
            raise BackendError(f"SCTP probes on the kernel: {why}")
        raise BackendError("SCTP probes on the kernel: the pod servers serve TCP and UDP only")
    found = _empty(pods)
    if not pods:
        return {}
    view, cluster = real_cluster.ensure_current(session)
    be = RealBackend(view, cluster, timeout=REAL_TIMEOUT)
    jobs = [(s, d, proto, port) for s in pods for d in pods for proto, port in ports]

    def one(job: tuple[ProbePod, ProbePod, Protocol, int]) -> bool:
        s, d, proto, port = job
        (o,) = be.connect(f"pod/{s.key}", d.ip, port, proto.lower(), 1)  # type: ignore[arg-type]
        return o.verdict == "delivered" and o.pod == d.key

    with ThreadPoolExecutor(max_workers=min(REAL_WORKERS, len(jobs))) as pool:
        for job, ok in zip(jobs, pool.map(one, jobs), strict=True):
            if ok:
                s, d, proto, port = job
                found[(s.key, d.key)].add((proto, port))
    return {k: frozenset(v) for k, v in found.items()}


__all__ = ["REAL_TIMEOUT", "Matrix", "ProbePod", "probe_matrix", "probe_pods"]
