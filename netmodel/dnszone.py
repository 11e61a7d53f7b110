"""What cluster DNS answers from: a frozen snapshot of the cluster's Services,
EndpointSlices and Namespaces (:class:`DnsZone`), the view CoreDNS's kubernetes plugin
keeps through its informers.

Both backends answer from the same snapshot: the emulator holds it in memory, the real
DNS pods read its JSON form (:meth:`DnsZone.to_json` / :meth:`DnsZone.from_json`).

What is kept, per Service: its ClusterIPs (none for headless and ExternalName), its
``externalName``, its ports (name, protocol, port) and, for headless Services, the
endpoints CoreDNS publishes: the addresses of the EndpointSlices labelled with the
Service's name whose ``ready`` condition is not false (Kubernetes reads an unset
``ready`` as ready; ``publishNotReadyAddresses`` Services have every endpoint ready in
their slices already), each with its ``hostname`` and its slice's ports.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from netmodel.objects import EndpointSlice, Namespace, Service


@dataclass(frozen=True, slots=True)
class PortRecord:
    """A named (or unnamed: ``name`` empty) port with its protocol (lowercase)."""

    name: str
    proto: str
    port: int


@dataclass(frozen=True, slots=True)
class EndpointRecord:
    """A ready endpoint address of a headless Service, with its slice's ports."""

    ip: str
    hostname: str | None
    ports: tuple[PortRecord, ...]


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    namespace: str
    name: str
    cluster_ips: tuple[str, ...] = ()
    headless: bool = False
    external_name: str | None = None
    ports: tuple[PortRecord, ...] = ()
    endpoints: tuple[EndpointRecord, ...] = ()


@dataclass(frozen=True)
class DnsZone:
    """The cluster as cluster DNS sees it (see the module docstring).

    ``domain``: the cluster domain (no trailing dot). ``dns_ip``: kube-dns's ClusterIP
    (the address of ``ns.dns.<domain>``). ``upstream``: the static upstream resolver's
    table (name -> IPv4 addresses) for names outside the cluster's zones. ``serial``: the
    SOA serial (the store revision the snapshot was taken at)."""

    domain: str = "cluster.local"
    namespaces: frozenset[str] = frozenset()
    services: Mapping[tuple[str, str], ServiceRecord] = field(default_factory=dict)
    dns_ip: str | None = None
    upstream: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    serial: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "namespaces": sorted(self.namespaces),
            "dnsIP": self.dns_ip,
            "serial": self.serial,
            "upstream": {k: list(v) for k, v in sorted(self.upstream.items())},
            "services": [_svc_json(s) for _, s in sorted(self.services.items())],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DnsZone:
        services = {}
        for s in data.get("services", []):
            rec = ServiceRecord(
                namespace=s["namespace"],
                name=s["name"],
                cluster_ips=tuple(s.get("clusterIPs", [])),
                headless=bool(s.get("headless", False)),
                external_name=s.get("externalName"),
                ports=tuple(PortRecord(*p) for p in s.get("ports", [])),
                endpoints=tuple(
                    EndpointRecord(
                        e["ip"], e.get("hostname"), tuple(PortRecord(*p) for p in e["ports"])
                    )
                    for e in s.get("endpoints", [])
                ),
            )
            services[(rec.namespace, rec.name)] = rec
        return cls(
            domain=data["domain"],
            namespaces=frozenset(data.get("namespaces", [])),
            services=services,
            dns_ip=data.get("dnsIP"),
            upstream={k: tuple(v) for k, v in data.get("upstream", {}).items()},
            serial=int(data.get("serial", 1)),
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)


def _svc_json(s: ServiceRecord) -> dict[str, Any]:
    return {
        "namespace": s.namespace,
        "name": s.name,
        "clusterIPs": list(s.cluster_ips),
        "headless": s.headless,
        "externalName": s.external_name,
        "ports": [[p.name, p.proto, p.port] for p in s.ports],
        "endpoints": [
            {
                "ip": e.ip,
                "hostname": e.hostname,
                "ports": [[p.name, p.proto, p.port] for p in e.ports],
            }
            for e in s.endpoints
        ],
    }


def build_zone(
    *,
    domain: str,
    namespaces: Iterable[Namespace],
    services: Iterable[Service],
    slices: Iterable[EndpointSlice],
    dns_ip: str | None = None,
    upstream: Mapping[str, Iterable[str]] | None = None,
    serial: int = 1,
) -> DnsZone:
    """The snapshot CoreDNS would hold for these objects (see the module docstring).
    Namespaces being deleted still answer (CoreDNS does not look at their phase)."""
    by_service: dict[tuple[str, str], list[EndpointSlice]] = {}
    for sl in slices:
        name = sl.service_name
        if name and sl.address_type == "IPv4":
            by_service.setdefault((sl.namespace, name), []).append(sl)
    records: dict[tuple[str, str], ServiceRecord] = {}
    for svc in services:
        key = (svc.namespace, svc.name)
        ports = tuple(
            PortRecord(p.name or "", (p.protocol or "TCP").lower(), p.port) for p in svc.spec.ports
        )
        if svc.service_type == "ExternalName":
            name = (svc.spec.external_name or "").rstrip(".")
            records[key] = ServiceRecord(key[0], key[1], external_name=name, ports=ports)
            continue
        ips = tuple(
            i for i in (svc.spec.cluster_ips or [svc.spec.cluster_ip or ""]) if i and i != "None"
        )
        endpoints: list[EndpointRecord] = []
        if svc.is_headless:
            seen: set[str] = set()
            for sl in sorted(by_service.get(key, []), key=lambda s: s.name):
                sports = tuple(
                    PortRecord(p.name or "", (p.protocol or "TCP").lower(), p.port or 0)
                    for p in sl.ports
                )
                for ep in sl.endpoints:
                    if ep.conditions.ready is False:
                        continue
                    for addr in ep.addresses:
                        if addr not in seen:
                            seen.add(addr)
                            endpoints.append(EndpointRecord(addr, ep.hostname, sports))
        records[key] = ServiceRecord(
            key[0],
            key[1],
            cluster_ips=() if svc.is_headless else ips,
            headless=svc.is_headless,
            ports=ports,
            endpoints=tuple(endpoints),
        )
    return DnsZone(
        domain=domain.rstrip(".").lower(),
        namespaces=frozenset(n.name for n in namespaces),
        services=records,
        dns_ip=dns_ip,
        upstream={k.rstrip(".").lower(): tuple(v) for k, v in (upstream or {}).items()},
        serial=serial,
    )
