"""Cluster DNS: what CoreDNS (kubeadm's configuration) answers, and how pods ask.

* :mod:`.zone` — the snapshot of the cluster DNS answers from (:class:`DnsZone`);
* :mod:`.answer` — the answers, wire format in and out (:func:`answer_wire`);
* :mod:`.server` — a caching answering function over a zone (:class:`ZoneAnswerer`);
* :mod:`.resolvconf` — kubelet's resolv.conf per pod and glibc's search order;
* :mod:`.dig` — dig-like text of a query and its answer.
"""

from dataplane.dns.answer import answer_wire
from dataplane.dns.resolvconf import ResolvConf, pod_resolv_conf, search_order
from dataplane.dns.server import ZoneAnswerer
from dataplane.dns.zone import DnsZone, build_zone

__all__ = [
    "DnsZone",
    "ResolvConf",
    "ZoneAnswerer",
    "answer_wire",
    "build_zone",
    "pod_resolv_conf",
    "search_order",
]
