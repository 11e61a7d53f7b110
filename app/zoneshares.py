"""Where ``svclab connect``'s connections went, by zone.

A cluster whose nodes carry ``topology.kubernetes.io/zone`` shows, after the
per-endpoint shares, how many connections each zone received (the zone of the node of
the pod that answered), so the effect of ``trafficDistribution`` or topology-aware
routing is read at a glance. Clusters without zones show nothing new.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from control.store.base import Store
from netmodel.cluster import ZONE_LABEL
from netmodel.objects import Node, Pod


def endpoint_zones(store: Store) -> dict[str, str]:
    """Zone by address and by ``pod/NS/NAME``: every pod IP and node IP on a node with a
    zone label. Empty when no node has one (connect then adds nothing)."""
    node_zone: dict[str, str] = {}
    out: dict[str, str] = {}
    for node in store.list("Node"):
        zone = node.labels.get(ZONE_LABEL)
        if zone and isinstance(node, Node):
            node_zone[node.name] = zone
            for a in node.status.addresses:
                if a.type != "Hostname":
                    out[a.address] = zone
    if not node_zone:
        return {}
    for pod in store.list("Pod"):
        if not isinstance(pod, Pod):
            continue
        zone = node_zone.get(pod.spec.node_name or "")
        if zone is None or pod.spec.host_network:
            continue
        out[f"pod/{pod.namespace}/{pod.name}"] = zone
        out[f"pod/{pod.name}"] = zone
        for ip in [p.ip for p in pod.status.pod_ips] or [pod.status.pod_ip or ""]:
            if ip:
                out[ip] = zone
    return out


def _host(label: str) -> str:
    """The address of an ``ip:port`` / ``[ip6]:port`` label (other labels as they are)."""
    if label.startswith("["):
        return label[1 : label.find("]")]
    host, sep, port = label.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else label


def zone_shares(counts: Mapping[str, int], zones: Mapping[str, str]) -> dict[str, Any]:
    """Per zone, the connections that reached an endpoint in it and their share of all
    ``counts`` (endpoint label -> connections). Connections to no known endpoint (a
    verdict such as REJECT) count in the total only."""
    total = sum(counts.values())
    per: Counter[str] = Counter()
    for label, n in counts.items():
        zone = zones.get(label) or zones.get(_host(label))
        if zone is not None:
            per[zone] += n
    return {
        z: {"count": per[z], "share": round(per[z] / total, 6) if total else 0.0}
        for z in sorted(per)
    }


def zone_table(shares: Mapping[str, Any], source_zone: str | None) -> list[list[str]]:
    """The text table of :func:`zone_shares` (ZONE, COUNT, SHARE; the source's zone
    marked)."""
    rows = [["ZONE", "COUNT", "SHARE"]]
    for z, v in shares.items():
        mark = " (source)" if z == source_zone else ""
        rows.append([z + mark, str(v["count"]), f"{v['share']:.3f}"])
    return rows
