"""The cluster view: everything a backend needs to realise the cluster, as pure values.

Built from the control plane's state by :func:`app.emulation.view`; consumed alike by the
emulator (:mod:`dataplane.backends.emulated`) and the kernel
(:mod:`dataplane.backends.kernel`, :mod:`dataplane.backends.realise`), so both see the
same cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from netmodel.dnszone import DnsZone
from netmodel.hostports import PortMapping
from netmodel.network import ClusterNetwork
from netmodel.resolvconf import ResolvConf
from netmodel.rulesets import RulesetInput


@dataclass(frozen=True)
class ClusterView:
    """Everything a backend needs to realise the cluster."""

    network: ClusterNetwork
    rulesets: Mapping[str, RulesetInput]
    listeners: Mapping[str, frozenset[tuple[str, int]]]
    local_addresses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    node_ips: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: cluster DNS: the zone its pods answer from (None: ``dns: false``), the pod
    #: namespaces that serve it on port 53, and each pod namespace's resolv.conf
    dns_zone: DnsZone | None = None
    dns_servers: frozenset[str] = frozenset()
    resolv_confs: Mapping[str, ResolvConf] = field(default_factory=dict)
    #: pod key -> the ``hostPort`` mappings its runtime passes to the CNI ``portmap``
    #: plugin (pods with none left out), in the order the plugin's ADDs ran on each
    #: node: the order of that node's rules in :attr:`rulesets`
    port_mappings: Mapping[str, tuple[PortMapping, ...]] = field(default_factory=dict)
    #: pod addresses whose ingress a NetworkPolicy isolates: another node's packets to
    #: them may be refused by design, so a readiness check reaches them from their own
    #: node only (always let in, :mod:`netmodel.netpolicy`)
    guarded: frozenset[str] = frozenset()
    #: pod namespace (``pod/NS/NAME``) -> the TCP ports of :attr:`listeners` where its
    #: server speaks gRPC's health service (its ``grpc`` probes' ports); pods with none
    #: may be left out
    grpc_ports: Mapping[str, frozenset[int]] = field(default_factory=dict)
