"""The hints the EndpointSlice controller writes on endpoints (``hints.forZones``,
``hints.forNodes``), as kube-controller-manager 1.35 writes them.

Two sources, in upstream's order of precedence:

* **Topology-aware routing** (:func:`auto_hints`): the Service carries
  ``service.kubernetes.io/topology-mode: Auto`` (or the older
  ``service.kubernetes.io/topology-aware-hints``; value ``Auto`` or ``auto``,
  :func:`hints_enabled`). Endpoints are shared among zones in proportion to the
  allocatable CPU of the ready nodes in each zone (:func:`cpu_ratios`; nodes labelled
  ``node-role.kubernetes.io/control-plane`` or ``…/master`` are left out). Each ready
  endpoint is first hinted for its own zone; then zones holding more than their share
  give endpoints to zones holding less. Upstream's safeguards remove every hint
  instead (and say why, :class:`HintsOutcome.event`): a node without a zone or
  allocatable CPU, ready nodes in fewer than two zones, fewer ready endpoints than
  zones, a zone's minimum share (its share less the 20% overload allowance) that
  cannot be met, or a ready endpoint without a zone.
* **spec.trafficDistribution** (:func:`traffic_distribution_hints`), used when the
  annotation does not ask for Auto: with ``PreferSameZone`` (or the deprecated
  ``PreferClose``) every ready endpoint with a zone is hinted for its own zone; with
  ``PreferSameNode`` also for its own node. Any other value, or none, removes hints.

Not-ready endpoints get no hints. The functions are pure: endpoints in, endpoints out
(the same objects where nothing changes), in the order given.

Differences from upstream, all in Auto mode: upstream keeps the hints of slices it is
not otherwise rewriting when they still fit the allocation and hands out only the
rest, and visits zones in Go's random map order; here the allocation is recomputed
over every endpoint on every reconcile, visiting endpoints in slice order and zones in
name order (so a tie is broken towards the first zone by name). The share each zone
gets is the same; which endpoint is lent to another zone can differ.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from control.scheduler.quantity import milli_value
from netmodel.objects import Endpoint, EndpointHints, ForNode, ForZone, Node

ZONE_LABEL = "topology.kubernetes.io/zone"
TOPOLOGY_MODE_ANNOTATION = "service.kubernetes.io/topology-mode"
TOPOLOGY_HINTS_ANNOTATION = "service.kubernetes.io/topology-aware-hints"
#: nodes with one of these labels do not count towards a zone's capacity
EXCLUDED_NODE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
#: the most any endpoint should be overloaded (upstream's ``overloadThreshold``)
OVERLOAD_THRESHOLD = 0.2
#: trafficDistribution values that mean "hint each endpoint for its own zone"
SAME_ZONE = frozenset({"PreferClose", "PreferSameZone", "PreferSameNode"})

# upstream's event messages (topologycache/event.go)
NO_ZONE_SPECIFIED = "One or more endpoints do not have a zone specified"
NO_ALLOCATED_HINTS = "No hints allocated for zones"
HINTS_ENABLED = "Topology Aware Hints has been enabled"
HINTS_DISABLED = "Topology Aware Hints has been disabled"
INSUFFICIENT_NODE_INFO = (
    "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes"
)
ONE_ZONE_ONLY = "Nodes only ready in one zone"
TOO_FEW_ENDPOINTS = "Insufficient number of endpoints"
MIN_EXCEEDS_OVERLOAD = (
    "Unable to allocate minimum required endpoints to each zone without exceeding "
    "overload threshold"
)


def hints_enabled(annotations: Mapping[str, str]) -> bool:
    """The Service asks for topology-aware routing: ``topology-mode`` (or, when that is
    absent, ``topology-aware-hints``) is ``Auto`` or ``auto``."""
    value = annotations.get(TOPOLOGY_MODE_ANNOTATION)
    if value is None:
        value = annotations.get(TOPOLOGY_HINTS_ANNOTATION)
    return value in ("Auto", "auto")


def is_ready(ep: Endpoint) -> bool:
    """Upstream's EndpointReady: ``conditions.ready`` is set and true."""
    return ep.conditions.ready is True


def _with_hints(ep: Endpoint, hints: EndpointHints | None) -> Endpoint:
    return ep if ep.hints == hints else ep.evolve(hints=hints)


def _zone_hint(zone: str) -> EndpointHints:
    return EndpointHints(for_zones=[ForZone(name=zone)])


# --------------------------------------------------------------------------- trafficDistribution


def traffic_distribution_hints(
    endpoints: Sequence[Endpoint], traffic_distribution: str | None
) -> list[Endpoint]:
    """``endpoints`` hinted for ``spec.trafficDistribution`` (upstream's trafficdist
    heuristics). A ready endpoint gets ``forZones: [its zone]`` when it has a zone and,
    for PreferSameNode, ``forNodes: [its node]`` when it has a node name; no hint at all
    when it has neither. Without a recognised value every hint is removed. Not-ready
    endpoints keep what they carry under a recognised value, as upstream leaves them."""
    if traffic_distribution not in SAME_ZONE:
        return [_with_hints(ep, None) for ep in endpoints]
    same_node = traffic_distribution == "PreferSameNode"
    out = []
    for ep in endpoints:
        if not is_ready(ep):
            out.append(ep)
            continue
        fields: dict[str, Any] = {}  # only what is set, so the wire form omits the rest
        if ep.zone is not None:
            fields["for_zones"] = [ForZone(name=ep.zone)]
        if same_node and ep.node_name is not None:
            fields["for_nodes"] = [ForNode(name=ep.node_name)]
        out.append(_with_hints(ep, EndpointHints(**fields) if fields else None))
    return out


# --------------------------------------------------------------------------- Auto


@dataclass(frozen=True, slots=True)
class ZoneRatios:
    """Each zone's share of the allocatable CPU of the ready nodes, or None with the
    reason hints cannot be given (upstream's ``cpuRatiosByZone`` and SetNodes)."""

    ratios: dict[str, float] | None
    reason: str | None = None


def _node_ready(node: Node) -> bool:
    for c in node.status.conditions:
        if c.type == "Ready":
            return c.status == "True"
    return False


def cpu_ratios(nodes: Iterable[Node]) -> ZoneRatios:
    """Per zone, its ready nodes' allocatable CPU over the total (control-plane nodes and
    nodes that are not Ready left out). Any counted node without a zone or without
    allocatable CPU makes the information insufficient; so do fewer than two zones."""
    cpu: dict[str, int] = {}
    for node in nodes:
        labels = node.labels
        if any(k in labels for k in EXCLUDED_NODE_LABELS) or not _node_ready(node):
            continue
        zone = labels.get(ZONE_LABEL, "")
        text = node.status.allocatable.get("cpu")
        try:
            milli = milli_value(text) if text is not None else 0
        except ValueError:
            milli = 0
        if not zone or milli == 0:
            return ZoneRatios(None, INSUFFICIENT_NODE_INFO)
        cpu[zone] = cpu.get(zone, 0) + milli
    total = sum(cpu.values())
    if total == 0 or len(cpu) < 2:
        return ZoneRatios(None, INSUFFICIENT_NODE_INFO)
    return ZoneRatios({z: m / total for z, m in cpu.items()})


@dataclass(frozen=True, slots=True)
class _Allocation:
    minimum: int
    maximum: int
    desired: float


def _allocations(ratios: Mapping[str, float], n: int) -> dict[str, _Allocation] | str:
    """Per zone its minimum, maximum and desired number of endpoints, or the reason
    there is none (upstream's getAllocations)."""
    if len(ratios) > n:
        return f"{TOO_FEW_ENDPOINTS} ({n} endpoints, {len(ratios)} zones)"
    remaining = n
    mins: dict[str, tuple[int, float]] = {}
    for zone in sorted(ratios):
        desired = ratios[zone] * n
        minimum = math.ceil(desired * (1 / (1 + OVERLOAD_THRESHOLD)))
        mins[zone] = (minimum, max(desired, float(minimum)))
        remaining -= minimum
        if remaining < 0:
            return f"{MIN_EXCEEDS_OVERLOAD} ({n} endpoints, {len(ratios)} zones)"
    spare = remaining  # n - sum of minimums
    return {z: _Allocation(m, m + spare, d) for z, (m, d) in mins.items()}


def _most(values: Mapping[str, float]) -> tuple[str, float]:
    best, num = "", 0.0
    for zone in sorted(values):
        if values[zone] > num:
            best, num = zone, values[zone]
    return best, num


def _giving_receiving(
    allocations: Mapping[str, _Allocation], allocated: Mapping[str, int]
) -> tuple[dict[str, int], dict[str, int]]:
    """How many endpoints each zone gives away and each receives (upstream's
    getGivingAndReceivingZones: whole endpoints, while both sides have at least half an
    endpoint to move and one of them a whole one)."""
    giving_f: dict[str, float] = {}
    receiving_f: dict[str, float] = {}
    for zone, a in allocations.items():
        have = float(allocated.get(zone, 0))
        if have > a.desired:
            giving_f[zone] = have - a.desired
        elif have < a.desired:
            receiving_f[zone] = a.desired - have
    giving: dict[str, int] = {}
    receiving: dict[str, int] = {}
    while True:
        gz, give = _most(giving_f)
        rz, take = _most(receiving_f)
        if not gz or not rz or (give < 1.0 and take < 1.0) or give < 0.5 or take < 0.5:
            break
        giving[gz] = giving.get(gz, 0) + 1
        giving_f[gz] -= 1
        receiving[rz] = receiving.get(rz, 0) + 1
        receiving_f[rz] -= 1
    return giving, receiving


@dataclass(frozen=True, slots=True)
class HintsOutcome:
    """The endpoints after :func:`auto_hints`; ``per_zone`` is how many ready endpoints
    each zone was given (empty when hints were removed); ``event`` is the (reason,
    message) upstream records on the Service, or None."""

    endpoints: list[Endpoint]
    per_zone: dict[str, int]
    event: tuple[str, str] | None


def auto_hints(
    endpoints: Sequence[Endpoint], ratios: ZoneRatios, *, had_hints: bool = False
) -> HintsOutcome:
    """``endpoints`` (every endpoint of one Service and address type, in slice order)
    hinted for topology-aware routing; see the module docstring. ``had_hints``: the
    Service's endpoints were hinted before (no "enabled" event then)."""

    def removed(message: str) -> HintsOutcome:
        return HintsOutcome(
            [_with_hints(ep, None) for ep in endpoints],
            {},
            ("TopologyAwareHintsDisabled", message),
        )

    if ratios.ratios is None:
        return removed(ratios.reason or INSUFFICIENT_NODE_INFO)
    ready = [i for i, ep in enumerate(endpoints) if is_ready(ep)]
    allocations = _allocations(ratios.ratios, len(ready))
    if isinstance(allocations, str):
        return removed(allocations)
    out = list(endpoints)
    allocated: dict[str, int] = {}
    for i, ep in enumerate(endpoints):
        if not is_ready(ep):
            out[i] = _with_hints(ep, None)
            continue
        if not ep.zone:
            return removed(NO_ZONE_SPECIFIED)
        allocated[ep.zone] = allocated.get(ep.zone, 0) + 1
        out[i] = _with_hints(ep, _zone_hint(ep.zone))
    giving, receiving = _giving_receiving(allocations, allocated)
    for i in ready:
        if not giving or not receiving:
            break
        zone = endpoints[i].zone or ""
        if giving.get(zone, 0) <= 0:
            continue
        target = next(z for z in sorted(receiving) if receiving[z] > 0)
        out[i] = _with_hints(endpoints[i], _zone_hint(target))
        for table, key in ((giving, zone), (receiving, target)):
            table[key] -= 1
            if table[key] == 0:
                del table[key]
        allocated[target] = allocated.get(target, 0) + 1
        allocated[zone] -= 1
    if not allocated:
        return removed(NO_ALLOCATED_HINTS)
    event = None if had_hints else ("TopologyAwareHintsEnabled", HINTS_ENABLED)
    return HintsOutcome(out, allocated, event)
