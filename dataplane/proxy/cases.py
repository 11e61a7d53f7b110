"""Read the shared kube-proxy reference cases (``tests/data/kube-proxy/cases/*.yaml``).

A case file carries a ``node:`` block (the upstream fake proxier's settings), complete
``services`` / ``endpointslices`` and expectations (README.md there describes the
schema). :func:`load_case` turns one into typed objects and a :class:`NodeProxyConfig`;
keys starting with ``x-`` (annotations of the case authors) are dropped first.

Upstream's nftables fake proxier is set up differently from the iptables one (it has
``nodePortAddresses`` and ``serviceCIDRs``): a case's ``nftables.node`` block states
those settings, laid over ``node:`` for :attr:`Case.nftables_config`.

Addresses are kept as the case records them: the objects are decoded, not admitted, so a
ClusterIP outside the fake's Service range (upstream's tests use ``10.20.30.41``) reaches
the renderer as it reached upstream's proxier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dataplane.proxy.model import IPFamily, LocalDetector, NodeProxyConfig
from netmodel.ip import parse_cidr_sloppy, parse_ip_sloppy
from netmodel.manifests import decode
from netmodel.objects import EndpointSlice, Service


def strip_extensions(value: Any) -> Any:
    """``value`` with every mapping key starting with ``x-`` removed, recursively."""
    if isinstance(value, dict):
        return {
            k: strip_extensions(v)
            for k, v in value.items()
            if not (isinstance(k, str) and k.startswith("x-"))
        }
    if isinstance(value, list):
        return [strip_extensions(v) for v in value]
    return value


def node_config_from_case(
    node: Mapping[str, Any], feature_gates: Mapping[str, bool] | None = None
) -> NodeProxyConfig:
    """A :class:`NodeProxyConfig` from a case's ``node:`` block (and ``feature_gates``)."""
    family = IPFamily(node.get("ipFamily", "IPv4"))
    det = node.get("localDetector") or {}
    detector = None
    if det.get("mode") in ("ClusterCIDR", "NodeCIDR") and det.get("clusterCIDR"):
        detector = LocalDetector(det["mode"], det["clusterCIDR"])
    mark_text = str(node.get("masqueradeMark", "0x00004000"))
    counters = node.get("nfacctCounters") or {}
    ips = []
    for text in node.get("localIPs", []):
        ip = parse_ip_sloppy(str(text))
        if ip is not None:
            ips.append(str(ip))
    npa = []
    for text in node.get("nodePortAddresses") or []:
        net = parse_cidr_sloppy(str(text))
        if net is not None:
            npa.append(str(net))
    service_cidrs = []
    for text in node.get("serviceCIDRs") or []:
        net = parse_cidr_sloppy(str(text))
        if net is not None:
            service_cidrs.append(str(net))
    return NodeProxyConfig(
        node_name=str(node.get("name", "test-node")),
        node_ips=tuple(ips),
        primary_ip=str(node.get("nodeIP", "192.168.0.2")),
        ip_family=family,
        local_detector=detector,
        masquerade_all=bool(node.get("masqueradeAll", False)),
        masquerade_bit=int(mark_text, 0).bit_length() - 1,
        masquerade_mark=mark_text,
        localhost_node_ports=bool(node.get("localhostNodePorts", True)),
        node_port_addresses=tuple(npa),
        service_cidrs=tuple(service_cidrs),
        conntrack_tcp_be_liberal=bool(node.get("conntrackTCPLiberal", False)),
        random_fully=bool(node.get("iptablesHasRandomFully", False)),
        nfacct_counters=frozenset(k for k, v in counters.items() if v),
        large_cluster_threshold=int(node.get("largeClusterEndpointsThreshold", 1000)),
        load_balancer_ip_mode=bool((feature_gates or {}).get("LoadBalancerIPMode", True)),
    )


@dataclass(frozen=True)
class Case:
    """One case file, decoded. ``raw`` is the whole document (``x-`` keys stripped)."""

    name: str
    node_config: NodeProxyConfig
    services: tuple[Service, ...]
    endpointslices: tuple[EndpointSlice, ...]
    raw: Mapping[str, Any]

    @property
    def nftables_config(self) -> NodeProxyConfig:
        """The node of the case's nftables leg: ``node:`` with ``nftables.node`` laid over
        it (upstream's nftables fake proxier has its own ``nodePortAddresses`` and
        ``serviceCIDRs``); the same as :attr:`node_config` when there is none."""
        nft = self.raw.get("nftables")
        over = nft.get("node") if isinstance(nft, Mapping) else None
        if not over:
            return self.node_config
        node = {**(self.raw.get("node") or {}), **over}
        return node_config_from_case(node, self.raw.get("feature_gates"))


def load_case(path: str | Path) -> Case:
    """Load one case file; objects go through svclab's strict manifest decoder."""
    doc = strip_extensions(yaml.safe_load(Path(path).read_text()))
    services = tuple(
        obj
        for i, d in enumerate(doc.get("services") or [], start=1)
        if isinstance(obj := decode(d, source=str(path), index=i), Service)
    )
    slices = tuple(
        obj
        for i, d in enumerate(doc.get("endpointslices") or [], start=1)
        if isinstance(obj := decode(d, source=str(path), index=i), EndpointSlice)
    )
    return Case(
        name=str(doc.get("name", Path(path).stem)),
        node_config=node_config_from_case(doc.get("node") or {}, doc.get("feature_gates")),
        services=services,
        endpointslices=slices,
        raw=doc,
    )
