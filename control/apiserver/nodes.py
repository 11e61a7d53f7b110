"""Node objects for the nodes a Cluster document declares.

Each node gets labels ``kubernetes.io/hostname`` and ``kubernetes.io/os=linux`` (plus the
entry's labels, and ``topology.kubernetes.io/zone`` from its ``zone``), the entry's taints, capacity (defaults cpu 4, memory 16Gi, pods 110,
overridden per entry) copied to allocatable, its addresses as InternalIP plus a Hostname
address, and a Ready condition. spec.podCIDR is left to the node IPAM controller.
"""

from __future__ import annotations

from pydantic import ValidationError

from netmodel.cluster import DEFAULT_CAPACITY, ClusterSpec, NodeSpecEntry
from netmodel.errors import InputError
from netmodel.objects import (
    Condition,
    Node,
    NodeAddress,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    Taint,
)


def _taints(entry: NodeSpecEntry, index: int) -> list[Taint]:
    out = []
    for j, raw in enumerate(entry.taints):
        try:
            out.append(Taint.model_validate(raw))
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise InputError(
                err["msg"],
                obj="Cluster",
                field=f"spec.nodes[{index}].taints[{j}]" + (f".{where}" if where else ""),
            ) from None
    return out


def node_from_entry(entry: NodeSpecEntry, *, now: str, index: int = 0) -> Node:
    """The Node object for one Cluster node entry (timestamps = ``now``). A malformed
    taint is an :class:`InputError` naming ``spec.nodes[index].taints[j]``."""
    labels = {
        "kubernetes.io/hostname": entry.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **entry.node_labels,
    }
    capacity = {**DEFAULT_CAPACITY, **entry.capacity}
    addresses = [NodeAddress(type="InternalIP", address=a) for a in entry.addresses]
    addresses.append(NodeAddress(type="Hostname", address=entry.name))
    taints = _taints(entry, index)
    ready = Condition(
        type="Ready",
        status="True",
        reason="KubeletReady",
        message="kubelet is posting ready status",
        last_transition_time=now,
    )
    return Node(
        metadata=ObjectMeta(name=entry.name, labels=labels),
        spec=NodeSpec(taints=taints, unschedulable=entry.unschedulable),
        status=NodeStatus(
            addresses=addresses,
            capacity=capacity,
            allocatable=dict(capacity),
            conditions=[ready],
        ),
    )


def nodes_for(cluster: ClusterSpec, *, now: str) -> list[Node]:
    """The Node objects of every node of the Cluster, in declaration order."""
    return [node_from_entry(e, now=now, index=i) for i, e in enumerate(cluster.node_entries())]
