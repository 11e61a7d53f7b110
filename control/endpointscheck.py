"""A kubectl dump's recorded core/v1 Endpoints against the ones svclab computes.

svclab serves Endpoints computed from a Service's EndpointSlices (the endpoints
controller's mirror, :func:`control.apiserver.http.wire.endpoints_for`); it stores none.
A dump's Endpoints are therefore not applied but compared, after apply, with what the
applied Services and EndpointSlices give: each difference is one warning line naming the
object and what differs (ready addresses, not-ready addresses, ports), so a dump whose
Endpoints and EndpointSlices disagree (a stale mirror, a selector-less Service with
hand-written Endpoints, which svclab does not follow) says so instead of being silent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from control.apiserver.http.wire import SERVICE_NAME, endpoints_for
from control.store.base import Store
from netmodel.objects import EndpointSlice, Service

Summary = dict[str, frozenset[str]]


def summary(ep: dict[str, Any]) -> Summary:
    """An Endpoints object's content, order-free: ready and not-ready addresses, and
    ports as ``name:port/protocol``."""
    ready: set[str] = set()
    not_ready: set[str] = set()
    ports: set[str] = set()
    for sub in ep.get("subsets") or []:
        ready.update(str(a.get("ip")) for a in sub.get("addresses") or [])
        not_ready.update(str(a.get("ip")) for a in sub.get("notReadyAddresses") or [])
        for p in sub.get("ports") or []:
            ports.add(f"{p.get('name') or ''}:{p.get('port')}/{p.get('protocol') or 'TCP'}")
    return {
        "addresses": frozenset(ready),
        "notReadyAddresses": frozenset(not_ready),
        "ports": frozenset(ports),
    }


def _text(values: frozenset[str]) -> str:
    return ",".join(sorted(values)) or "<none>"


def differences(recorded: Iterable[dict[str, Any]], store: Store) -> list[str]:
    """One warning per recorded Endpoints that differs from svclab's, in the order
    given: ``Endpoints/NS/NAME: recorded FIELD A, computed B``, or that svclab has no
    Service of that name (then it computes none)."""
    out: list[str] = []
    for ep in recorded:
        meta = ep.get("metadata") or {}
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        ref = f"Endpoints/{ns}/{name}"
        svc = next(
            (s for s in store.list("Service", ns) if isinstance(s, Service) and s.name == name),
            None,
        )
        if svc is None:
            out.append(f"{ref}: recorded, but there is no Service {ns}/{name} to compute it from")
            continue
        slices = [
            s
            for s in store.list("EndpointSlice", ns)
            if isinstance(s, EndpointSlice) and s.labels.get(SERVICE_NAME) == name
        ]
        want, have = summary(ep), summary(endpoints_for(svc, slices))
        diffs = [
            f"recorded {key} {_text(want[key])}, computed {_text(have[key])}"
            for key in ("addresses", "notReadyAddresses", "ports")
            if want[key] != have[key]
        ]
        if diffs:
            out.append(f"{ref}: " + "; ".join(diffs))
    return out
