"""The EndpointSlice controller: one set of slices per Service with a selector.

Contract (upstream's ``pkg/controller/endpointslice`` behaviour, simplified placement):

* Services without a selector, and ExternalName Services, are left alone: their slices
  (written by users) are never touched. Headless Services get slices, labelled
  ``service.kubernetes.io/headless``.
* Endpoints are the pods of the Service's namespace matching its selector that have a
  pod IP and have not finished (Succeeded/Failed). Conditions: ``serving`` = pod Ready,
  ``terminating`` = deletionTimestamp set, ``ready`` = serving and not terminating
  (or always, with publishNotReadyAddresses). ``nodeName``, ``zone`` (the node's
  ``topology.kubernetes.io/zone``) and ``targetRef`` are filled in.
* Hints (:mod:`control.controllers.topologyhints`): with the topology-mode annotation
  ``Auto``, zones get endpoints in proportion to their nodes' CPU (upstream's
  safeguards remove the hints, with a ``TopologyAwareHintsDisabled`` event, recorded
  when the outcome changes); otherwise ``spec.trafficDistribution`` hints each ready
  endpoint for its own zone (and node, for PreferSameNode). A change to a node's zone
  requeues every Service; a change to its readiness, CPU or control-plane labels the
  Auto Services.
* Ports: each Service port's targetPort is resolved per pod (a number, or a container
  port of that name and protocol; unset means the port). A pod lacking a named port is
  left out of that port. Pods are grouped by their resolved port list; each group gets
  its own slices (different numbers → separate slices), at most :data:`MAX_ENDPOINTS`
  endpoints each.
* Slices are named ``<svc>-<5 chars>`` (seeded), labelled ``kubernetes.io/service-name``
  and ``endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io`` plus
  the Service's own labels, owned by the Service (deleting it collects them).
* Placement keeps endpoints in the slice they are in, fills slices that change anyway
  first, and creates slices only for the rest; a Service with no endpoints keeps one
  empty placeholder slice. Nothing is written when nothing changed.
* Given a clock, every slice a reconcile creates or updates carries upstream's
  ``endpoints.kubernetes.io/last-change-trigger-time`` annotation (UTC, RFC 3339 with
  sub-second digits, Go's ``RFC3339Nano``): the earliest time, since the Service's last
  reconcile, at which a change that queued it (a Pod, Service or Node event) reached
  this controller. A reconcile queued by no change (a relist) clears it, as upstream's
  zero trigger time does. kube-proxy measures the network programming SLI from it
  (:mod:`control.agents.netprog`). Upstream reads the time off the objects (the pod's
  Ready ``lastTransitionTime``, the Service's ``creationTimestamp``), which the API
  keeps to the second only; the time of observation keeps the sub-second part.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from control.clock import Clock, rfc3339_nano
from control.controllers.base import APIClient, Controller, Indexer, controller_ref
from control.controllers.deployment import SAFE_ALPHABET
from control.controllers.topologyhints import (
    EXCLUDED_NODE_LABELS,
    HINTS_DISABLED,
    SAME_ZONE,
    ZoneRatios,
    auto_hints,
    cpu_ratios,
    hints_enabled,
    traffic_distribution_hints,
)
from control.events import Recorder
from control.store.base import WatchEvent, labelled
from netmodel.errors import NotFoundError
from netmodel.objects import (
    Endpoint,
    EndpointConditions,
    EndpointPort,
    EndpointSlice,
    KubeObject,
    Node,
    ObjectMeta,
    ObjectReference,
    Pod,
    Service,
    ServicePort,
)

MAX_ENDPOINTS = 100
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"
HEADLESS_LABEL = "service.kubernetes.io/headless"
#: upstream's ``v1.EndpointsLastChangeTriggerTime``
TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"
ZONE_LABEL = "topology.kubernetes.io/zone"
_RESERVED = {SERVICE_NAME_LABEL, MANAGED_BY_LABEL, HEADLESS_LABEL}

PortKey = tuple[tuple[str, int, str, str | None], ...]


def _extra(model: object, name: str) -> object:
    extra = getattr(model, "model_extra", None) or {}
    return extra.get(name)


def resolve_port(pod: Pod, port: ServicePort) -> int | None:
    """Kubernetes' FindPort: the pod port a Service port targets, or None."""
    target = port.target_port
    if target is None:
        return port.port
    if isinstance(target, int):
        return target
    proto = port.protocol or "TCP"
    for c in pod.spec.containers:
        for cp in c.ports:
            if cp.name == target and (cp.protocol or "TCP") == proto:
                return cp.container_port
    return None


def endpoint_ports(svc: Service, pod: Pod) -> PortKey:
    """The resolved (name, port, protocol, appProtocol) list of one pod for ``svc``."""
    out = []
    for p in svc.spec.ports:
        n = resolve_port(pod, p)
        if n is not None:
            out.append((p.name or "", n, p.protocol or "TCP", p.app_protocol))
    return tuple(out)


def slice_port_key(sl: EndpointSlice) -> PortKey:
    return tuple((p.name or "", p.port or 0, p.protocol or "TCP", p.app_protocol) for p in sl.ports)


def pod_endpoint(svc: Service, pod: Pod, zone: str | None) -> Endpoint:
    serving = pod.is_ready
    terminating = pod.metadata.deletion_timestamp is not None
    publish = bool(_extra(svc.spec, "publishNotReadyAddresses"))
    ready = publish or (serving and not terminating)
    hostname = _extra(pod.spec, "hostname")
    subdomain = _extra(pod.spec, "subdomain")
    ips = [i.ip for i in pod.status.pod_ips] or [pod.status.pod_ip or ""]
    return Endpoint(
        addresses=[ips[0]],
        conditions=EndpointConditions(ready=ready, serving=serving, terminating=terminating),
        node_name=pod.spec.node_name,
        zone=zone,
        hostname=str(hostname) if hostname and subdomain == svc.name else None,
        target_ref=ObjectReference(
            kind="Pod", namespace=pod.namespace, name=pod.name, uid=pod.metadata.uid
        ),
    )


def _ep_key(ep: Endpoint) -> str:
    if ep.target_ref is not None and ep.target_ref.name:
        return ep.target_ref.name
    return ep.addresses[0] if ep.addresses else ""


@dataclass
class _Plan:
    create: list[EndpointSlice] = field(default_factory=list)
    update: list[EndpointSlice] = field(default_factory=list)
    delete: list[EndpointSlice] = field(default_factory=list)


class EndpointSliceController(Controller):
    """Writes the EndpointSlices of selector Services; see the module docstring."""

    name = "endpointslice-controller"
    kinds = frozenset({"Service", "Pod", "EndpointSlice", "Node"})
    #: what :meth:`prime_deferred` can start without (see there)
    deferrable_kinds = frozenset({"Pod"})

    def __init__(
        self, api: APIClient, recorder: Recorder, *, seed: int = 0, clock: Clock | None = None
    ) -> None:
        super().__init__(api, recorder)
        self.seed = seed
        #: stamps the trigger-time annotation (None: no annotation, as before)
        self.clock = clock
        # Service key -> when the first change since its last reconcile reached us
        self._trigger: dict[str, float] = {}
        self._event_time: float | None = None
        self._rngs: dict[str, random.Random] = {}
        self._zones: dict[str, str] = {}
        # node name -> what of it the Auto allocation reads (readiness, CPU, exclusion)
        self._capacity: dict[str, tuple[object, ...]] = {}
        self._ratios: ZoneRatios | None = None  # the zones' CPU shares, until a node changes
        # Service key -> the last hints event recorded about it (Auto mode)
        self._hint_events: dict[str, tuple[str, str]] = {}
        self._svc_event: tuple[str, str] | None = None  # this reconcile's hints event
        # slices as this controller last wrote them (upstream's endpointSliceTracker):
        # their watch events need no reconcile
        self._written: dict[str, str | None] = {}
        self._deleted: set[str] = set()
        # pod key -> (pod, variant, endpoint): one Endpoint per pod state, shared by services
        self._endpoints: dict[str, tuple[Pod, tuple[object, ...], Endpoint]] = {}
        # after prime_deferred, until the first Pod event: the pods' listing, to be made
        self._pods_later: Callable[[], list[KubeObject]] | None = None

    def _own_write(self, event: WatchEvent) -> bool:
        key = event.object.key
        if event.type == "DELETED":
            self._written.pop(key, None)
            if key in self._deleted:
                self._deleted.discard(key)
                return True
            return False
        return self._written.get(key) == event.object.metadata.resource_version

    def indexers(self) -> dict[str, Indexer]:
        def index(obj: KubeObject) -> Iterator[str]:
            ns = obj.namespace
            if obj.kind == "Pod":
                yield f"pod:{ns}"
                for k, v in obj.labels.items():
                    yield f"pod:{ns}:{k}={v}"
            elif obj.kind == "Service":
                sel = obj.spec.selector if isinstance(obj, Service) else None
                if sel is None:
                    return
                if not sel:
                    yield f"svc-all:{ns}"
                else:  # index by one pair; candidates are then checked in full
                    k, v = min(sel.items())
                    yield f"svc:{ns}:{k}={v}"
            elif obj.kind == "EndpointSlice" and obj.labels.get(MANAGED_BY_LABEL) == MANAGED_BY:
                svc = obj.labels.get(SERVICE_NAME_LABEL)
                if svc:
                    yield f"slice:{ns}/{svc}"

        return {"by": index}

    # ---- event → keys

    def _services_for(self, pod: KubeObject) -> Iterator[str]:
        ns = pod.namespace
        cands: list[KubeObject] = list(self.cache.by_index("by", f"svc-all:{ns}"))
        for k, v in pod.labels.items():
            cands += self.cache.by_index("by", f"svc:{ns}:{k}={v}")
        for svc in cands:
            assert isinstance(svc, Service)
            sel = svc.spec.selector or {}
            if all(pod.labels.get(k) == v for k, v in sel.items()):
                yield svc.key

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        keys = self._keys_for(event, old)
        now = self._event_time
        if now is None:
            return keys
        keys = list(keys)
        for key in keys:
            self._trigger.setdefault(key, now)
        return keys

    def _keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        obj = event.object
        if obj.kind == "Service":
            return [obj.key]
        if obj.kind == "Pod":
            deleted = event.type == "DELETED"
            if deleted:
                self._endpoints.pop(obj.key, None)
            now = None if deleted else _endpoint_view(obj)
            before = _endpoint_view(old) if old is not None else None
            if now == before and (now is None or (old is not None and old.labels == obj.labels)):
                return []  # not an endpoint before or after, or nothing an endpoint shows
            keys = set(self._services_for(obj))
            if old is not None and old.labels != obj.labels:
                keys |= set(self._services_for(old))
            return sorted(keys)
        if obj.kind == "EndpointSlice":
            if self._own_write(event):
                return []
            svc = obj.labels.get(SERVICE_NAME_LABEL)
            if obj.labels.get(MANAGED_BY_LABEL) == MANAGED_BY and svc:
                return [f"{obj.namespace}/{svc}"]
            return []
        if obj.kind == "Node":
            zone = None if event.type == "DELETED" else obj.labels.get(ZONE_LABEL)
            had = self._zones.get(obj.name)
            if zone is None:
                self._zones.pop(obj.name, None)
            else:
                self._zones[obj.name] = zone
            capacity = None if event.type == "DELETED" else _capacity_view(obj)
            had_capacity = self._capacity.pop(obj.name, None)
            if capacity is not None:
                self._capacity[obj.name] = capacity
            if had == zone and had_capacity == capacity:
                return []
            self._ratios = None
            return [
                s.key
                for s in self.cache.list("Service")
                if isinstance(s, Service)
                and s.spec.selector is not None
                and (had != zone or hints_enabled(s.metadata.annotations))
            ]
        return []

    def subject(self, key: str) -> KubeObject | None:
        return self.cache.get("Service", key)

    def handle(self, events: Sequence[WatchEvent]) -> None:
        if self._pods_later is not None and any(ev.object.kind == "Pod" for ev in events):
            later, self._pods_later = self._pods_later, None
            for pod in later():  # the pods as they were before these events
                self.cache.put(pod)
        self._event_time = self.clock.now() if self.clock is not None else None
        try:
            super().handle(events)
        finally:
            self._event_time = None

    def resync(self, objects: Iterable[KubeObject]) -> None:
        self._pods_later = None
        super().resync(objects)

    def prime_deferred(
        self,
        objects: Iterable[KubeObject],
        pods: Callable[[], list[KubeObject]],
        deleting: bool,
    ) -> None:
        """:meth:`prime` with every kind but Pod; ``pods()`` lists the pods as they were
        at the revision ``objects`` were listed at (``deleting`` is not needed). Called when the first Pod event
        comes (until then no pod changed, so the pods that listing would give are the
        store's); meanwhile a Service's pods are read from the store by its selector
        (:func:`control.store.base.labelled`: on SQLite, only those pods are decoded),
        the same pods the cache would give. So a change that touches no pod, a new
        Service, never decodes the other pods."""
        del deleting
        self.prime(objects)
        self._pods_later = pods

    def prime(self, objects: Iterable[KubeObject]) -> None:
        """:meth:`Controller.prime`: the cache and the nodes' zones, as :meth:`resync`
        leaves them, without working out the keys each object would queue (for every
        pod, the Services selecting it)."""
        self._pods_later = None
        self.cache.clear()
        self.queue.clear()
        self._zones.clear()
        self._capacity.clear()
        self._ratios = None
        for obj in objects:
            self.cache.put(obj)
            if obj.kind == "Node":
                zone = obj.labels.get(ZONE_LABEL)
                if zone is not None:
                    self._zones[obj.name] = zone
                self._capacity[obj.name] = _capacity_view(obj)

    # ---- reconcile

    def _selected_pods(self, svc: Service) -> list[Pod]:
        ns = svc.namespace
        sel = svc.spec.selector or {}
        if self._pods_later is not None:  # no pod changed since the listing: the store's
            return [p for p in labelled(self.store, "Pod", ns, sel) if isinstance(p, Pod)]
        if not sel:
            pool = self.cache.by_index("by", f"pod:{ns}")
        else:
            best = min(
                sel.items(), key=lambda kv: self.cache.index_size("by", f"pod:{ns}:{kv[0]}={kv[1]}")
            )
            pool = self.cache.by_index("by", f"pod:{ns}:{best[0]}={best[1]}")
        return [
            p
            for p in pool
            if isinstance(p, Pod) and all(p.labels.get(k) == v for k, v in sel.items())
        ]

    def desired(self, svc: Service) -> dict[PortKey, dict[str, Endpoint]]:
        """Endpoints by resolved port list (the groups that get their own slices)."""
        groups: dict[PortKey, dict[str, Endpoint]] = {}
        headless_no_ports = not svc.spec.ports and svc.is_headless
        for pod in self._selected_pods(svc):
            if not pod.status.pod_ip or pod.status.phase in ("Succeeded", "Failed"):
                continue
            ports: PortKey = () if headless_no_ports else endpoint_ports(svc, pod)
            ep = self._endpoint(svc, pod)
            groups.setdefault(ports, {})[_ep_key(ep)] = ep
        return groups

    def _endpoint(self, svc: Service, pod: Pod) -> Endpoint:
        zone = self._zones.get(pod.spec.node_name or "")
        variant = (
            zone,
            bool(_extra(svc.spec, "publishNotReadyAddresses")),
            _extra(pod.spec, "subdomain") == svc.name,
        )
        hit = self._endpoints.get(pod.key)
        if hit is not None and hit[0] is pod and hit[1] == variant:
            return hit[2]
        ep = pod_endpoint(svc, pod, zone)
        self._endpoints[pod.key] = (pod, variant, ep)
        return ep

    def reconcile(self, key: str) -> None:
        trigger = self._trigger.pop(key, None)
        try:
            svc = self.store.get("Service", key)
        except NotFoundError:
            self._rngs.pop(key, None)
            return  # its slices are owned by it: the garbage collector removes them
        if not isinstance(svc, Service) or svc.spec.selector is None:
            return
        if svc.service_type == "ExternalName" or svc.metadata.deletion_timestamp is not None:
            return
        self._svc_event = None
        existing = [
            s
            for s in self.cache.by_index("by", f"slice:{svc.namespace}/{svc.name}")
            if isinstance(s, EndpointSlice)
        ]
        plan = self.plan(svc, existing)
        if self.clock is not None:
            plan.create = [_stamped(sl, trigger) for sl in plan.create]
            plan.update = [_stamped(sl, trigger) for sl in plan.update]
        for sl in plan.create:
            stored = self.api.create(sl, component=self.name)
            self._written[stored.key] = stored.metadata.resource_version
        for sl in plan.update:
            stored = self.api.update(sl, component=self.name)
            self._written[stored.key] = stored.metadata.resource_version
        for sl in plan.delete:
            self._written.pop(sl.key, None)
            self.api.delete("EndpointSlice", sl.key, component=self.name)
            self._deleted.add(sl.key)
        self._record_hints_event(svc)

    # ---- hints

    def _zone_ratios(self) -> ZoneRatios:
        if self._ratios is None:
            self._ratios = cpu_ratios(n for n in self.cache.list("Node") if isinstance(n, Node))
        return self._ratios

    def hinted(
        self, svc: Service, groups: dict[PortKey, dict[str, Endpoint]]
    ) -> dict[PortKey, dict[str, Endpoint]]:
        """``groups`` with the hints ``svc`` asks for (none asked: ``groups`` itself, as
        :meth:`desired` never sets hints). Auto mode works over every endpoint of the
        Service, in the order the groups and their endpoints are placed."""
        auto = hints_enabled(svc.metadata.annotations)
        td = svc.spec.traffic_distribution
        if not auto:
            last = self._hint_events.pop(svc.key, None)
            if last is not None and last[0] == "TopologyAwareHintsEnabled":
                self._svc_event = (
                    "TopologyAwareHintsDisabled",
                    f"{HINTS_DISABLED}, addressType: IPv4",
                )
            if td not in SAME_ZONE:
                return groups
            return {
                pk: dict(zip(eps, traffic_distribution_hints(list(eps.values()), td), strict=True))
                for pk, eps in groups.items()
            }
        order = [(pk, k) for pk in sorted(groups, key=repr) for k in sorted(groups[pk])]
        had = self._hint_events.get(svc.key, ("", ""))[0] == "TopologyAwareHintsEnabled"
        outcome = auto_hints([groups[pk][k] for pk, k in order], self._zone_ratios(), had_hints=had)
        if outcome.event is not None:
            reason, message = outcome.event
            self._svc_event = (reason, f"{message}, addressType: IPv4")
        out: dict[PortKey, dict[str, Endpoint]] = {pk: {} for pk in groups}
        for (pk, k), ep in zip(order, outcome.endpoints, strict=True):
            out[pk][k] = ep
        return out

    def _record_hints_event(self, svc: Service) -> None:
        """Record the Auto outcome's event when it differs from the last one recorded
        about ``svc`` (upstream records a disabling event on every sync)."""
        event, self._svc_event = self._svc_event, None
        if event is None or self._hint_events.get(svc.key) == event:
            return
        self._hint_events[svc.key] = event
        reason, message = event
        kind = "Normal" if reason == "TopologyAwareHintsEnabled" else "Warning"
        self.recorder.record(self.name, svc, reason, message, type_=kind)

    # ---- placement

    def _labels(self, svc: Service) -> dict[str, str]:
        labels = {k: v for k, v in svc.labels.items() if k not in _RESERVED}
        labels[SERVICE_NAME_LABEL] = svc.name
        labels[MANAGED_BY_LABEL] = MANAGED_BY
        if svc.is_headless:
            labels[HEADLESS_LABEL] = ""
        return labels

    def _new_name(self, svc: Service, taken: set[str]) -> str:
        rng = self._rngs.get(svc.key)
        if rng is None:
            rng = self._rngs[svc.key] = random.Random(f"{self.seed}/slices/{svc.key}")
        base = f"{svc.name[:57]}-"
        while True:
            name = base + "".join(rng.choices(SAFE_ALPHABET, k=5))
            if name in taken or self.cache.get("EndpointSlice", f"{svc.namespace}/{name}"):
                continue
            try:
                self.store.get("EndpointSlice", f"{svc.namespace}/{name}")
            except NotFoundError:
                taken.add(name)
                return name

    def plan(self, svc: Service, existing: list[EndpointSlice]) -> _Plan:
        """What to create, update and delete so the slices match the desired endpoints."""
        groups = self.hinted(svc, self.desired(svc))
        labels = self._labels(svc)
        owner = [controller_ref(svc)]
        taken = {s.name for s in existing}
        plan = _Plan()

        def finish(sl: EndpointSlice, eps: list[Endpoint], ports: list[EndpointPort]) -> None:
            new = sl.evolve(endpoints=eps, ports=ports, address_type="IPv4").with_meta(
                labels=labels, owner_references=owner
            )
            if not _same(new, sl):
                plan.update.append(new)

        spare: list[EndpointSlice] = []

        def make(eps: list[Endpoint], ports: list[EndpointPort]) -> None:
            if spare:  # reuse a slice that would be deleted (e.g. the placeholder)
                finish(spare.pop(0), eps, ports)
                return
            plan.create.append(
                EndpointSlice(
                    metadata=ObjectMeta(
                        name=self._new_name(svc, taken),
                        generate_name=f"{svc.name[:57]}-",
                        namespace=svc.namespace,
                        labels=labels,
                        owner_references=owner,
                    ),
                    address_type="IPv4",
                    endpoints=eps,
                    ports=ports,
                )
            )

        by_ports: dict[PortKey, list[EndpointSlice]] = {}
        for sl in sorted(existing, key=lambda s: s.name):
            by_ports.setdefault(slice_port_key(sl), []).append(sl)

        if not groups:  # one empty placeholder slice, as upstream keeps
            keep = next(iter(by_ports.get((), [])), None) or next(iter(existing), None)
            if keep is None:
                make([], [])
            else:
                finish(keep, [], [])
            plan.delete += [s for s in existing if s is not keep]
            return plan

        for pk in sorted(by_ports):
            if pk not in groups:
                spare += by_ports[pk]
        for pk in sorted(groups, key=repr):
            want = groups[pk]
            ports = [
                EndpointPort(name=n, port=num, protocol=proto, app_protocol=app)
                for n, num, proto, app in pk
            ]
            placed: set[str] = set()
            changed: list[tuple[EndpointSlice, list[Endpoint]]] = []
            unchanged: list[tuple[EndpointSlice, list[Endpoint]]] = []
            for sl in by_ports.get(pk, []):
                keep_eps: list[Endpoint] = []
                dirty = False
                for ep in sl.endpoints:
                    k = _ep_key(ep)
                    d = want.get(k)
                    if d is None or k in placed:
                        dirty = True
                        continue
                    dirty = dirty or d != ep
                    keep_eps.append(d)
                    placed.add(k)
                (changed if dirty else unchanged).append((sl, keep_eps))
            rest = [want[k] for k in sorted(want) if k not in placed]
            for sl, eps in [*changed, *unchanged]:
                room = MAX_ENDPOINTS - len(eps)
                if rest and room > 0:
                    eps.extend(rest[:room])
                    del rest[:room]
                if eps:
                    finish(sl, eps, ports)
                else:
                    spare.append(sl)
            for i in range(0, len(rest), MAX_ENDPOINTS):
                make(rest[i : i + MAX_ENDPOINTS], ports)
        plan.delete += spare
        return plan


def _stamped(sl: EndpointSlice, trigger: float | None) -> EndpointSlice:
    """``sl`` with the trigger-time annotation set to ``trigger`` (removed if None)."""
    notes = dict(sl.metadata.annotations)
    if trigger is None:
        if TRIGGER_TIME_ANNOTATION not in notes:
            return sl
        del notes[TRIGGER_TIME_ANNOTATION]
    else:
        notes[TRIGGER_TIME_ANNOTATION] = rfc3339_nano(trigger)
    return sl.with_meta(annotations=notes)


def _same(a: EndpointSlice, b: EndpointSlice) -> bool:
    return (
        a.endpoints == b.endpoints
        and a.ports == b.ports
        and a.address_type == b.address_type
        and a.labels == b.labels
        and a.metadata.owner_references == b.metadata.owner_references
    )


def _capacity_view(node: KubeObject) -> tuple[object, ...]:
    """What of a node the Auto allocation reads: Ready, allocatable CPU, and whether a
    control-plane label leaves it out."""
    if not isinstance(node, Node):
        return ()
    ready = next((c.status for c in node.status.conditions if c.type == "Ready"), None)
    return (
        ready,
        node.status.allocatable.get("cpu"),
        any(k in node.labels for k in EXCLUDED_NODE_LABELS),
    )


def _endpoint_view(pod: KubeObject) -> tuple[object, ...] | None:
    """What of a pod an endpoint depends on (other changes need no reconcile); None for
    a pod that is no endpoint of any Service (no IP yet, or finished)."""
    if not isinstance(pod, Pod) or not pod.status.pod_ip:
        return None
    if pod.status.phase in ("Succeeded", "Failed"):
        return None
    return (
        pod.status.pod_ip,
        tuple(i.ip for i in pod.status.pod_ips),
        pod.status.phase,
        pod.is_ready,
        pod.metadata.deletion_timestamp,
        pod.spec.node_name,
        pod.metadata.uid,
        tuple((c.name, tuple(c.ports)) for c in pod.spec.containers),
    )
