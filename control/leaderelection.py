"""Leader election through a ``coordination.k8s.io/v1`` Lease, as client-go's
``leaderelection`` package does it for kube-controller-manager and kube-scheduler
(Leases ``kube-system/kube-controller-manager`` and ``kube-system/kube-scheduler``).

Contract (client-go's semantics):

* The Lease's spec holds the record: ``holderIdentity``, ``leaseDurationSeconds``,
  ``acquireTime``, ``renewTime`` (MicroTimes) and ``leaseTransitions``.
* A candidate tries every ``retry_period`` seconds. It may take the Lease when it does
  not exist (created with ``leaseTransitions`` 0), when its holder is empty, or when the
  record has not changed for ``lease_duration`` seconds *as this candidate observed it*
  (its own monotonic clock from the moment it first saw that record; the holder's clock
  is never compared with ours). Taking it from another (or no) holder sets
  ``acquireTime`` and adds one to ``leaseTransitions``. Every write is an update conditioned on the
  resourceVersion read, so of two candidates at most one wins.
* The leader renews every ``retry_period``; when no renewal succeeded for
  ``renew_deadline`` seconds it has lost the lease and stops leading (``on_stopped``):
  kube's components then exit, and so do svclab's component processes (their
  supervisor restarts them as candidates).
* ``lease_duration > renew_deadline > retry_period`` (client-go refuses anything else).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from control.agents.nodelease import _parse_micro, micro_time
from control.informers.http import KubeClient
from netmodel.errors import InputError, NotFoundError, SvclabError
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject

log = logging.getLogger("svclab.leaderelection")

NAMESPACE = "kube-system"


@dataclass(frozen=True)
class LeaderElectionConfig:
    """kube-controller-manager's ``--leader-elect-lease-duration``,
    ``--leader-elect-renew-deadline`` and ``--leader-elect-retry-period`` (defaults 15 s,
    10 s, 2 s)."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline:
            raise InputError(
                f"leader election: leaseDuration ({self.lease_duration}s) must be greater "
                f"than renewDeadline ({self.renew_deadline}s)"
            )
        if not self.renew_deadline > self.retry_period > 0:
            raise InputError(
                f"leader election: renewDeadline ({self.renew_deadline}s) must be greater "
                f"than retryPeriod ({self.retry_period}s), itself above 0"
            )


def default_identity() -> str:
    """client-go's: the host name and a unique suffix (here also the process id)."""
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def lease_spec(lease: KubeObject) -> dict[str, Any]:
    spec = (lease.model_extra or {}).get("spec")
    return dict(spec) if isinstance(spec, dict) else {}


class LeaderElector:
    """One candidate for the Lease ``kube-system/NAME`` (see the module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        name: str,
        config: LeaderElectionConfig,
        *,
        identity: str | None = None,
    ) -> None:
        self.client = client
        self.name = name
        self.config = config
        self.identity = identity or default_identity()
        #: the record last read, and when (monotonic) this candidate first saw it
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self.leading = threading.Event()

    @property
    def key(self) -> str:
        return f"{NAMESPACE}/{self.name}"

    def _lease(self, spec: dict[str, Any], meta: dict[str, Any] | None = None) -> KubeObject:
        return object_from_dict(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": meta or {"name": self.name, "namespace": NAMESPACE},
                "spec": spec,
            }
        )

    def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's tryAcquireOrRenew); True when this candidate holds the
        Lease after it."""
        now = time.time()
        duration = max(1, round(self.config.lease_duration))
        try:
            current = self.client.get("Lease", self.key)
        except NotFoundError:
            first: dict[str, Any] = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": duration,
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": 0,
            }
            try:
                self.client.create(self._lease(first))
            except SvclabError as e:
                log.info("lease=%s create failed: %s", self.key, e)
                return False
            self._observe(first)
            return True
        spec = lease_spec(current)
        self._observe(spec)
        holder = str(spec.get("holderIdentity") or "")
        mine = holder == self.identity
        expired = time.monotonic() - self._observed_at > self.config.lease_duration
        if holder and not mine and not expired:
            return False
        new: dict[str, Any] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": duration,
            "renewTime": micro_time(now),
        }
        if not mine:
            new["acquireTime"] = micro_time(now)
            new["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        data = current.to_dict()
        data["spec"] = new
        try:
            self.client.update(type(current).model_validate(data))
        except SvclabError as e:  # 409: another candidate wrote first
            log.info("lease=%s update failed: %s", self.key, e)
            return False
        self._observe(new)
        return True

    def _observe(self, spec: dict[str, Any]) -> None:
        record = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseTransitions"),
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()

    def run(
        self,
        stop: threading.Event,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
    ) -> None:
        """Acquire (retrying every retry period), call ``on_started``, renew until the
        renew deadline passes with no success or ``stop`` is set, then ``on_stopped``
        (only when it led)."""
        log.info("lease=%s attempting to acquire as %s", self.key, self.identity)
        while not stop.is_set():
            if self._attempt():
                break
            stop.wait(self.config.retry_period)
        else:
            return
        self.leading.set()
        log.info("lease=%s acquired by %s", self.key, self.identity)
        on_started()
        last_renew = time.monotonic()
        while not stop.wait(self.config.retry_period):
            if self._attempt():
                last_renew = time.monotonic()
            elif time.monotonic() - last_renew > self.config.renew_deadline:
                log.error("lease=%s lost by %s: leader election lost", self.key, self.identity)
                break
        self.leading.clear()
        on_stopped()

    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except Exception as e:  # the server is away (any transport error): try later
            log.info("lease=%s attempt failed: %s", self.key, e)
            return False


def holder(lease: KubeObject) -> tuple[str, int, float | None]:
    """(holderIdentity, leaseTransitions, renewTime) of a Lease."""
    spec = lease_spec(lease)
    return (
        str(spec.get("holderIdentity") or ""),
        int(spec.get("leaseTransitions") or 0),
        _parse_micro(str(spec.get("renewTime") or "")),
    )


__all__ = ["LeaderElectionConfig", "LeaderElector", "default_identity", "holder", "lease_spec"]
