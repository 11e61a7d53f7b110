"""Service admission: ClusterIPs, NodePorts, healthCheckNodePorts and LoadBalancer IPs.

Contract (checked by ``tests/control/apiserver``):

* ClusterIPs come from the Cluster's serviceCIDR, first free address first. The first
  address is reserved for ``default/kubernetes``. A requested clusterIP is honoured if it
  is free and inside the range, else :class:`AllocationError`. ``None`` means headless (no
  address). clusterIP never changes on update.
* NodePorts come from the Cluster's nodePortRange, for NodePort and LoadBalancer
  Services (LoadBalancer with ``allocateLoadBalancerNodePorts: false`` only gets the ones
  it asks for). A requested nodePort is honoured if free, a taken one is refused. On
  update, ports that name a port of the stored Service keep its nodePort (as the
  Kubernetes apiserver does). Ports with the same port number share one nodePort.
* LoadBalancer + externalTrafficPolicy Local gets a healthCheckNodePort from the same range.
* LoadBalancer Services get ``status.loadBalancer.ingress`` = one IP of the Cluster's
  loadBalancerCIDR (``spec.loadBalancerIP`` honoured if free and inside), ipMode VIP,
  unless the object already carries an ingress list: that is kept as given (replayed
  clusters), its addresses inside the pool marked taken when free.
* Everything taken or freed goes through a :class:`Journal`, so a refused batch gives
  back what it took and frees nothing.
* With a store (the apiserver's), the ClusterIP allocator is KEP-1880's: its ranges are
  the stored ServiceCIDRs (:mod:`.servicecidrs`; re-read when the store's revision
  moved), and each ClusterIP taken or freed writes or deletes its IPAddress object once
  the Service's write is durable (:meth:`Journal.commit`); :meth:`repair` makes the
  IPAddress objects agree with the stored Services after a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from control.apiserver import servicecidrs
from control.apiserver.allocators import ClusterIPRanges, IPAllocator, Journal, PortAllocator
from control.apiserver.defaults import NODE_PORT_TYPES
from control.store.base import Store
from netmodel.cluster import ClusterSpec
from netmodel.errors import AllocationError, InvalidError
from netmodel.objects import (
    LoadBalancerIngress,
    LoadBalancerStatus,
    Service,
    ServicePort,
    ServiceStatus,
)

KUBERNETES_SERVICE = "Service/default/kubernetes"


def _owner(svc: Service) -> str:
    return svc.ref


def requested_cluster_ip(svc: Service) -> str | None:
    """``spec.clusterIP``, else ``spec.clusterIPs[0]``, else None ("" counts as unset)."""
    ip = svc.spec.cluster_ip or (svc.spec.cluster_ips[0] if svc.spec.cluster_ips else None)
    return ip or None


def needs_node_ports(svc: Service) -> bool:
    return svc.service_type in NODE_PORT_TYPES


def _allocates_node_ports(svc: Service) -> bool:
    if svc.service_type == "NodePort":
        return True
    return svc.service_type == "LoadBalancer" and (
        svc.spec.allocate_load_balancer_node_ports is not False
    )


def needs_health_check(svc: Service) -> bool:
    return svc.service_type == "LoadBalancer" and svc.spec.external_traffic_policy == "Local"


class ServiceAllocators:
    """The three allocators of the Service range, rebuilt from stored Services."""

    def __init__(
        self,
        cluster: ClusterSpec,
        *,
        store: Store | None = None,
        now: Callable[[], str] | None = None,
    ) -> None:
        """``store``: keep the allocator's state as ServiceCIDR and IPAddress objects
        there (``now`` stamps their creationTimestamp); without it, the Cluster's
        serviceCIDR is the only range and no object is written."""
        self.cluster_ips = ClusterIPRanges(
            IPAllocator(
                cluster.service_net,
                what="clusterIP",
                reserved=1,
                reserved_for=KUBERNETES_SERVICE,
            )
        )
        self.store = store
        self._now = now or (lambda: "")
        self._cidrs_at = -1  # the store revision the ranges were read at
        lo, hi = cluster.port_range
        self.node_ports = PortAllocator(lo, hi, what="nodePort")
        self.lb_ips = IPAllocator(cluster.lb_net, what="loadBalancer IP")
        #: ``allocation: recorded``: Services are replayed as recorded (a real cluster's
        #: dump, an upstream test case): empty nodePorts / healthCheckNodePort / LB ingress
        #: stay empty, given ones are kept as they are (not allocated, so not checked for
        #: conflicts: upstream's tests give two Services one healthCheckNodePort).
        self.recorded = cluster.allocation == "recorded"

    # ---- restart

    def sync_ranges(self) -> None:
        """Read the stored ServiceCIDRs into the ClusterIP allocator, when the store
        moved since the last read (a ServiceCIDR created or deleted)."""
        if self.store is None or self.store.revision == self._cidrs_at:
            return
        self.cluster_ips.sync(servicecidrs.cidrs_of(self.store))
        self._cidrs_at = self.store.revision

    def repair(self) -> int:
        """Make the stored IPAddress objects agree with the ClusterIPs held (see
        :func:`.servicecidrs.repair`); the number of writes."""
        if self.store is None:
            return 0
        return servicecidrs.repair(self.store, self.cluster_ips.held(), self._now)

    def _took_ip(self, journal: Journal, ip: str, owner: str) -> None:
        journal.took(self.cluster_ips, ip, owner)
        if self.store is not None:
            journal.after_commit(partial(servicecidrs.record, self.store, ip, owner, self._now))

    def _release_ip(self, journal: Journal, ip: str, owner: str) -> None:
        journal.release_later(self.cluster_ips, ip, owner)
        if self.store is not None:
            journal.after_commit(partial(servicecidrs.forget, self.store, ip, owner))

    def rebuild(self, services: list[Service]) -> None:
        """Mark every address and port of the stored Services taken (in key order)."""
        self.sync_ranges()
        for svc in services:
            owner = _owner(svc)
            ip = requested_cluster_ip(svc)
            if ip and ip != "None":
                self.cluster_ips.occupy(ip, owner)
            for p in svc.spec.ports:
                if p.node_port:
                    self.node_ports.occupy(p.node_port, owner)
            if svc.spec.health_check_node_port:
                self.node_ports.occupy(svc.spec.health_check_node_port, owner)
            for ing in svc.status.load_balancer.ingress:
                if ing.ip:
                    self.lb_ips.occupy(ing.ip, owner)

    # ---- admission

    def admit(
        self, svc: Service, current: Service | None, journal: Journal
    ) -> tuple[Service, list[str]]:
        """Allocate what ``svc`` (defaulted, validated) needs; ``current`` is the stored
        object on update. Returns the object to store and what was allocated/released (for
        the Event message). Raises :class:`InvalidError` / :class:`AllocationError`."""
        notes: list[str] = []
        spec_changes: dict[str, Any] = {}
        self._cluster_ip(svc, current, journal, spec_changes, notes)
        ports = self._node_ports(svc, current, journal, notes)
        if ports is not None:
            spec_changes["ports"] = ports
        hc = self._health_check(svc, current, journal, notes)
        if hc != svc.spec.health_check_node_port:
            spec_changes["health_check_node_port"] = hc
        owner = _owner(svc)
        held = {p.node_port for p in (ports or svc.spec.ports) if p.node_port}
        if hc:
            held.add(hc)
        for port in sorted(self._held_ports(current) - held):
            if self.node_ports.owner(port) == owner:
                journal.release_later(self.node_ports, port, owner)
                notes.append(f"released nodePort {port}")
        if spec_changes:
            svc = svc.evolve(spec=svc.spec.evolve(**spec_changes))
        status = self._load_balancer(svc, current, journal, notes)
        if status is not svc.status:
            svc = svc.evolve(status=status)
        return svc, notes

    def release(self, svc: Service, journal: Journal) -> list[str]:
        """Schedule everything ``svc`` holds for release once its deletion is written."""
        owner = _owner(svc)
        notes: list[str] = []
        ip = requested_cluster_ip(svc)
        if ip and ip != "None" and self.cluster_ips.owner(ip) == owner:
            self._release_ip(journal, ip, owner)
            notes.append(f"clusterIP {ip}")
        ports = sorted({p.node_port for p in svc.spec.ports if p.node_port})
        if svc.spec.health_check_node_port:
            ports.append(svc.spec.health_check_node_port)
        for port in ports:
            if self.node_ports.owner(port) == owner:
                journal.release_later(self.node_ports, port, owner)
                notes.append(f"nodePort {port}")
        for ing in svc.status.load_balancer.ingress:
            if ing.ip and self.lb_ips.owner(ing.ip) == owner:
                journal.release_later(self.lb_ips, ing.ip, owner)
                notes.append(f"loadBalancer IP {ing.ip}")
        return notes

    def restatus(self, svc: Service, current: Service, journal: Journal) -> None:
        """A status-only write changed the ingress list: take the new pool addresses that
        are free, schedule the dropped ones for release."""
        owner = _owner(svc)
        new_ips = {i.ip for i in svc.status.load_balancer.ingress if i.ip}
        old_ips = {i.ip for i in current.status.load_balancer.ingress if i.ip}
        for ip in sorted(new_ips - old_ips):
            if self.lb_ips.occupy(ip, owner):
                journal.took(self.lb_ips, ip, owner)
        for ip in sorted(old_ips - new_ips):
            if self.lb_ips.owner(ip) == owner:
                journal.release_later(self.lb_ips, ip, owner)

    # ---- pieces

    def _cluster_ip(
        self,
        svc: Service,
        current: Service | None,
        journal: Journal,
        changes: dict[str, Any],
        notes: list[str],
    ) -> None:
        owner = _owner(svc)
        want = requested_cluster_ip(svc)
        have = requested_cluster_ip(current) if current is not None else None
        if svc.service_type == "ExternalName":
            if have and have != "None" and self.cluster_ips.owner(have) == owner:
                self._release_ip(journal, have, owner)
                notes.append(f"released clusterIP {have}")
            return
        if have is not None:
            if want is not None and want != have:
                raise InvalidError(
                    f'Invalid value: "{want}": field is immutable',
                    obj=svc.ref,
                    field="spec.clusterIP",
                )
            changes["cluster_ip"] = have
            changes["cluster_ips"] = [have]
            return
        if want == "None":
            changes["cluster_ip"] = "None"
            changes["cluster_ips"] = ["None"]
            return
        self.sync_ranges()
        try:
            if want is not None:
                was_mine = self.cluster_ips.owner(want) == owner
                ip = self.cluster_ips.allocate(want, owner)
                if not was_mine:
                    self._took_ip(journal, ip, owner)
                ip = want  # stored as written (a legacy form with leading zeros stays)
            elif owner == KUBERNETES_SERVICE:
                ip = str(self.cluster_ips.network.network_address + 1)
                ip = self.cluster_ips.allocate(ip, owner)
                self._took_ip(journal, ip, owner)
            else:
                ip = self.cluster_ips.allocate_next(owner)
                self._took_ip(journal, ip, owner)
        except AllocationError as e:
            raise AllocationError(
                f'Invalid value: "{want or ""}": {e.reason}', obj=svc.ref, field="spec.clusterIPs"
            ) from None
        changes["cluster_ip"] = ip
        changes["cluster_ips"] = [ip]
        notes.append(f"clusterIP {ip}")

    def _take_port(
        self, svc: Service, port: int, journal: Journal, field: str, notes: list[str]
    ) -> None:
        owner = _owner(svc)
        if self.node_ports.owner(port) == owner:
            return
        try:
            self.node_ports.allocate(port, owner)
        except AllocationError as e:
            raise AllocationError(
                f"Invalid value: {port}: {e.reason}", obj=svc.ref, field=field
            ) from None
        journal.took(self.node_ports, port, owner)
        notes.append(f"{field.rsplit('.', 1)[-1]} {port}")

    def _next_port(self, svc: Service, journal: Journal, field: str, notes: list[str]) -> int:
        owner = _owner(svc)
        try:
            port = self.node_ports.allocate_next(owner)
        except AllocationError as e:
            raise AllocationError(e.reason, obj=svc.ref, field=field) from None
        journal.took(self.node_ports, port, owner)
        notes.append(f"{field.rsplit('.', 1)[-1]} {port}")
        return port

    def _held_ports(self, svc: Service | None) -> set[int]:
        if svc is None:
            return set()
        held = {p.node_port for p in svc.spec.ports if p.node_port}
        if svc.spec.health_check_node_port:
            held.add(svc.spec.health_check_node_port)
        return held

    def _node_ports(
        self, svc: Service, current: Service | None, journal: Journal, notes: list[str]
    ) -> list[ServicePort] | None:
        """New port list (None if unchanged). Mirrors kube-apiserver's initNodePorts and
        patchAllocatedValues."""
        if self.recorded:
            return None
        if not needs_node_ports(svc):
            if any(p.node_port for p in svc.spec.ports):
                return [p.evolve(node_port=None) for p in svc.spec.ports]
            return None
        ports = list(svc.spec.ports)
        if current is not None and needs_node_ports(current):
            used = {p.node_port for p in current.spec.ports if p.node_port} & {
                p.node_port for p in ports if p.node_port
            }
            by_name = {p.name or "": p.node_port for p in current.spec.ports if p.node_port}
            for i, p in enumerate(ports):
                old = by_name.get(p.name or "")
                if not p.node_port and old and old not in used:
                    ports[i] = p.evolve(node_port=old)
        by_port: dict[int, int] = {}
        allocate = _allocates_node_ports(svc)
        for i, p in enumerate(ports):
            field = f"spec.ports[{i}].nodePort"
            if not p.node_port and not allocate:
                continue
            shared = by_port.get(p.port)
            if shared is None:
                requested = next(
                    (q.node_port for q in ports[i:] if q.port == p.port and q.node_port), None
                )
                if requested:
                    self._take_port(svc, requested, journal, field, notes)
                    np = requested
                else:
                    np = self._next_port(svc, journal, field, notes)
                by_port[p.port] = np
                if p.node_port != np:
                    ports[i] = p.evolve(node_port=np)
            elif not p.node_port:
                ports[i] = p.evolve(node_port=shared)
            elif p.node_port != shared:
                self._take_port(svc, p.node_port, journal, field, notes)
        if all(a is b for a, b in zip(ports, svc.spec.ports, strict=True)):
            return None
        return ports

    def _health_check(
        self, svc: Service, current: Service | None, journal: Journal, notes: list[str]
    ) -> int | None:
        field = "spec.healthCheckNodePort"
        want = svc.spec.health_check_node_port
        if self.recorded:
            return want
        if not needs_health_check(svc):
            return None
        have = current.spec.health_check_node_port if current is not None else None
        if want:
            self._take_port(svc, want, journal, field, notes)
            return want
        if have:
            return have
        return self._next_port(svc, journal, field, notes)

    def _load_balancer(
        self, svc: Service, current: Service | None, journal: Journal, notes: list[str]
    ) -> ServiceStatus:
        owner = _owner(svc)
        given = svc.status.load_balancer.ingress
        old = current.status.load_balancer.ingress if current is not None else []
        old_ips = {i.ip for i in old if i.ip}
        if self.recorded and (given or svc.service_type != "LoadBalancer"):
            return svc.status
        if svc.service_type != "LoadBalancer":
            for ip in sorted(old_ips):
                if self.lb_ips.owner(ip) == owner:
                    journal.release_later(self.lb_ips, ip, owner)
                    notes.append(f"released loadBalancer IP {ip}")
            if given:
                return svc.status.evolve(load_balancer=LoadBalancerStatus())
            return svc.status
        if given:
            ingress = [i.evolve(ip_mode="VIP") if i.ip and not i.ip_mode else i for i in given]
            for ing in ingress:
                if ing.ip and ing.ip not in old_ips and self.lb_ips.occupy(ing.ip, owner):
                    journal.took(self.lb_ips, ing.ip, owner)
            new_ips = {i.ip for i in ingress if i.ip}
            for ip in sorted(old_ips - new_ips):
                if self.lb_ips.owner(ip) == owner:
                    journal.release_later(self.lb_ips, ip, owner)
            if all(a is b for a, b in zip(ingress, given, strict=True)):
                return svc.status
            return svc.status.evolve(load_balancer=LoadBalancerStatus(ingress=ingress))
        if old:
            return svc.status.evolve(load_balancer=LoadBalancerStatus(ingress=list(old)))
        if self.recorded:
            return svc.status
        want = svc.spec.load_balancer_ip
        try:
            if want:
                was_mine = self.lb_ips.owner(want) == owner
                ip = self.lb_ips.allocate(want, owner)
                if not was_mine:
                    journal.took(self.lb_ips, ip, owner)
            else:
                ip = self.lb_ips.allocate_next(owner)
                journal.took(self.lb_ips, ip, owner)
        except AllocationError as e:
            field = "spec.loadBalancerIP" if want else "status.loadBalancer.ingress"
            raise AllocationError(e.reason, obj=svc.ref, field=field) from None
        notes.append(f"loadBalancer IP {ip}")
        ingress_list = [LoadBalancerIngress(ip=ip, ip_mode="VIP")]
        return svc.status.evolve(load_balancer=LoadBalancerStatus(ingress=ingress_list))
