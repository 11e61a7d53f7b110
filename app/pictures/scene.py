"""What a picture of the cluster shows, read from a session's store: the nodes (address,
podCIDR), the running pods, each Service with its ports and endpoints, and the network
namespaces :func:`netmodel.topology.build` derives from them.

Building the network is quadratic in the number of nodes (each node routes to every
peer), so a whole-cluster scene stops at :data:`MAX_NODES` nodes and asks for ``--node``;
a one-node scene builds that node alone and counts its peers.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

from control.session import Session
from netmodel.errors import InputError
from netmodel.network import ClusterNetwork
from netmodel.objects import EndpointSlice, Node, Pod, Service
from netmodel.topology import NodeInfo, PodInfo, build, node_info, spec_blocks

#: the most nodes one picture draws (a 60-node graph is already a poster)
MAX_NODES = 60


class TooManyNodesError(InputError):
    """The cluster is too big to draw whole: the message names ``--node``."""


@dataclass(frozen=True, slots=True)
class EndpointRef:
    """One endpoint of a Service: its address, the pod behind it (``ns/name``), readiness."""

    ip: str
    pod: str | None
    ready: bool


@dataclass(frozen=True, slots=True)
class ServiceBox:
    """A Service as drawn: ``ns/name``, type, ClusterIP, ports as ``80/TCP->8080`` text."""

    key: str
    type: str
    cluster_ip: str | None
    ports: tuple[str, ...]
    endpoints: tuple[EndpointRef, ...]


@dataclass(frozen=True)
class Scene:
    """Everything the topology picture draws. ``network`` holds the namespaces of the
    drawn nodes and their pods; ``peers`` is how many other nodes there are when
    ``focus`` names one node."""

    nodes: tuple[NodeInfo, ...]
    pods: tuple[PodInfo, ...]
    network: ClusterNetwork
    services: tuple[ServiceBox, ...]
    focus: str | None = None
    peers: int = 0


def _nodes(session: Session) -> list[NodeInfo]:
    out = []
    for n in session.store.list("Node"):
        assert isinstance(n, Node)
        if n.internal_ips:
            out.append(node_info(n.name, n.internal_ips[0], n.spec.pod_cidr))
    return sorted(out, key=lambda n: n.name)


def _pods(session: Session) -> list[PodInfo]:
    return sorted(
        (
            PodInfo(p.key, p.spec.node_name or "", IPv4Address(p.status.pod_ip or ""))
            for p in session.store.list("Pod")
            if isinstance(p, Pod)
            and p.status.pod_ip
            and p.spec.node_name
            and not p.spec.host_network
        ),
        key=lambda p: p.key,
    )


def pod_nodes(session: Session) -> dict[str, str]:
    """``ns/name`` of each scheduled pod to its node (the kubelet lane of its steps)."""
    return {
        p.key: p.spec.node_name
        for p in session.store.list("Pod")
        if isinstance(p, Pod) and p.spec.node_name
    }


def services(session: Session) -> tuple[ServiceBox, ...]:
    """Every Service, its ports and the endpoints its EndpointSlices list."""
    slices: dict[str, list[EndpointSlice]] = {}
    for s in session.store.list("EndpointSlice"):
        assert isinstance(s, EndpointSlice)
        if s.service_name:
            slices.setdefault(f"{s.namespace}/{s.service_name}", []).append(s)
    out = []
    for svc in session.store.list("Service"):
        assert isinstance(svc, Service)
        ports = tuple(
            f"{p.port}/{p.protocol or 'TCP'}"
            + (f"->{p.target_port}" if p.target_port not in (None, p.port) else "")
            + (f" nodePort {p.node_port}" if p.node_port else "")
            for p in svc.spec.ports
        )
        eps = tuple(
            EndpointRef(
                ip=addr,
                pod=(
                    f"{e.target_ref.namespace}/{e.target_ref.name}"
                    if e.target_ref is not None and e.target_ref.kind == "Pod"
                    else None
                ),
                ready=e.conditions.ready is not False,
            )
            for s in sorted(slices.get(svc.key, []), key=lambda s: s.name)
            for e in s.endpoints
            for addr in e.addresses
        )
        out.append(ServiceBox(svc.key, svc.service_type, svc.spec.cluster_ip, ports, eps))
    return tuple(sorted(out, key=lambda s: s.key))


def scene(
    session: Session,
    *,
    node: str | None = None,
    network: ClusterNetwork | None = None,
    max_nodes: int = MAX_NODES,
) -> Scene:
    """The scene of the whole cluster, or of ``node`` alone; ``network`` when the caller
    already has the cluster's network (a trace's emulator), else it is built here.

    Raises :class:`TooManyNodesError` when the network is to be built for more than
    ``max_nodes`` nodes and no ``node`` was named, :class:`InputError` when ``node``
    does not exist."""
    nodes = _nodes(session)
    pods = _pods(session)
    spec = session.cluster.spec
    node_net = spec.node_net
    assert isinstance(node_net, IPv4Network)
    if node is not None:
        focus = [n for n in nodes if n.name == node]
        if not focus:
            raise InputError(f"node {node} not found", field="--node")
        mine = [p for p in pods if p.node == node]
        net = build(
            node_net,
            focus,
            mine,
            overlay=spec.overlay,
            cni=spec.cni,
            blocks=spec_blocks(spec, nodes, pods),
        )
        peers = sum(1 for n in nodes if n.name != node and n.pod_cidr is not None)
        return Scene(tuple(focus), tuple(mine), net, services(session), node, peers)
    if network is None and len(nodes) > max_nodes:
        raise TooManyNodesError(
            f"the cluster has {len(nodes)} nodes, too many to draw in one picture "
            f"(at most {max_nodes}): draw one node with --node NAME"
        )
    if network is None:
        network = build(
            node_net,
            nodes,
            pods,
            overlay=spec.overlay,
            cni=spec.cni,
            blocks=spec_blocks(spec, nodes, pods),
        )
    return Scene(tuple(nodes), tuple(pods), network, services(session))
