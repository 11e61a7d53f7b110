"""Cluster DNS: what CoreDNS (kubeadm's configuration) answers, and how pods ask.

* :mod:`netmodel.dnszone` — the snapshot of the cluster DNS answers from (:class:`DnsZone`);
* :mod:`.answer` — the answers, wire format in and out (:func:`answer_wire`);
* :mod:`.server` — a caching answering function over a zone (:class:`ZoneAnswerer`);
* :mod:`netmodel.resolvconf` — kubelet's resolv.conf per pod and glibc's search order;
* :mod:`.dig` — dig-like text of a query and its answer.
"""

from dataplane.dns.answer import answer_wire
from dataplane.dns.server import ZoneAnswerer
from netmodel.dnszone import DnsZone, build_zone
from netmodel.resolvconf import ResolvConf, pod_resolv_conf, search_order

__all__ = [
    "DnsZone",
    "ResolvConf",
    "ZoneAnswerer",
    "answer_wire",
    "build_zone",
    "pod_resolv_conf",
    "search_order",
]
