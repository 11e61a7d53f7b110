"""Node IPAM: each Node gets a podCIDR of ``nodeCIDRMaskSize`` bits carved from the
Cluster's podCIDR (kube-controller-manager's range allocator).

Contract:

* :meth:`NodeIPAM.reconcile` is level-triggered and idempotent. A Node without
  spec.podCIDR gets the first free subnet (spec.podCIDR and spec.podCIDRs, written through
  the apiserver with compare-and-swap). A Node that already has one keeps it: the subnet
  (or every subnet it covers, for a user-given CIDR of another size) is marked taken.
  A Node that is gone gives its subnets back.
* Subnets are disjoint and inside the podCIDR, and never overlap a serviceCIDR carved
  out of the podCIDR (GKE routes-based layouts). A user-given podCIDR that overlaps another
  Node's is not taken twice: the Node gets a Warning Event ``CIDRNotAvailable``.
* Running out is a state, not a crash: the Node gets the condition
  ``NetworkUnavailable=True`` (reason ``NoCIDRAvailable``) and a Warning Event
  ``CIDRNotAvailable``; once a subnet frees up, the next reconcile assigns it and flips
  the condition to False.
* State is rebuilt from the stored Nodes when constructed (in node order), so
  assignments are stable across restarts; nothing of its own is persisted.
"""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network
from typing import Protocol

from control.apiserver.allocators import Bitmap
from control.apiserver.server import APIServer
from control.clock import Clock, rfc3339
from control.controllers.base import APIClient
from control.events import Recorder
from netmodel.cluster import ClusterSpec, natural_key
from netmodel.errors import NotFoundError
from netmodel.ip import IPNetwork, parse_cidr
from netmodel.objects import Condition, Node

COMPONENT = "nodeipam-controller"
CONDITION = "NetworkUnavailable"
NO_CIDR = "NoCIDRAvailable"
#: the owner of node subnets that overlap a serviceCIDR carved out of the podCIDR
SERVICE_RANGE = "<serviceCIDR>"


class NodeIPAMClient(APIClient, Protocol):
    """What node IPAM needs of an API client besides writes: a recorder and a clock."""

    @property
    def recorder(self) -> Recorder: ...

    @property
    def clock(self) -> Clock: ...


class NodeIPAM:
    """The podCIDR allocator of one cluster. See the module docstring."""

    def __init__(self, api: APIServer | NodeIPAMClient, cluster: ClusterSpec | None = None) -> None:
        self.api = api
        if cluster is None:
            assert isinstance(api, APIServer), "an API client must be given the cluster"
            cluster = api.cluster
        self.pod_net: IPNetwork = cluster.pod_net
        self.mask = cluster.node_cidr_mask_size
        self._shift = self.pod_net.max_prefixlen - self.mask
        self._bits = Bitmap(2 ** (self.mask - self.pod_net.prefixlen))
        self._held: dict[str, list[int]] = {}  # node -> subnets it holds
        self._wanted: dict[str, list[int]] = {}  # node -> subnets its podCIDR(s) cover
        # a serviceCIDR carved out of the podCIDR (GKE routes-based): its subnets are
        # never handed out (upstream's range allocator filters the service range out)
        for offset in self._offsets(cluster.service_net) or []:
            self._bits.allocate(offset, SERVICE_RANGE)
        for node in self._nodes():
            if node.spec.pod_cidr:
                self._occupy(node)

    # ------------------------------------------------------------------ reconcile

    def reconcile(self, node_key: str) -> None:
        """Give the Node a podCIDR if it has none; account for the one it has; free the
        subnets of a Node that no longer exists."""
        try:
            node = self.api.store.get(Node.KIND, node_key)
        except NotFoundError:
            self._release(node_key)
            return
        assert isinstance(node, Node)
        if node.spec.pod_cidr:
            self._occupy(node)
            return
        self._release(node.name)  # a podCIDR removed by hand: start over
        offset = self._bits.allocate_next(node.name)
        if offset is None:
            self._exhausted(node)
            return
        cidr = str(self.subnet(offset))
        self._held[node.name] = self._wanted[node.name] = [offset]
        try:
            updated = self.api.update(
                node.evolve(spec=node.spec.evolve(pod_cidr=cidr, pod_cidrs=[cidr])),
                component=COMPONENT,
            )
        except BaseException:
            self._release(node.name)
            raise
        assert isinstance(updated, Node)
        self._clear_condition(updated)

    def sync_all(self) -> None:
        """Reconcile every stored Node (in natural name order) and free the subnets of
        Nodes that are gone."""
        nodes = self._nodes()
        present = {n.name for n in nodes}
        for name in [n for n in self._held if n not in present]:
            self._release(name)
        for node in nodes:
            self.reconcile(node.key)

    # ------------------------------------------------------------------ queries

    def subnet(self, offset: int) -> IPNetwork:
        base = int(self.pod_net.network_address) + (offset << self._shift)
        cls = IPv4Network if self.pod_net.version == 4 else IPv6Network
        return cls((base, self.mask))

    @property
    def free(self) -> int:
        return self._bits.free

    def owner(self, cidr: str) -> str | None:
        """The node holding the subnet that contains ``cidr``'s first address."""
        offsets = self._offsets(parse_cidr(cidr, strict=False))
        return self._bits.owner(offsets[0]) if offsets else None

    # ------------------------------------------------------------------ internals

    def _nodes(self) -> list[Node]:
        nodes = [n for n in self.api.store.list(Node.KIND) if isinstance(n, Node)]
        return sorted(nodes, key=lambda n: natural_key(n.name))

    def _offsets(self, net: IPNetwork) -> list[int] | None:
        """The subnet offsets ``net`` covers, or None if it is not inside the podCIDR."""
        if net.version != self.pod_net.version or not net.subnet_of(self.pod_net):  # type: ignore[arg-type]
            return None
        first = (int(net.network_address) - int(self.pod_net.network_address)) >> self._shift
        count = max(1, 2 ** (self.mask - net.prefixlen)) if net.prefixlen <= self.mask else 1
        return list(range(first, first + count))

    def _occupy(self, node: Node) -> None:
        cidrs = node.spec.pod_cidrs or ([node.spec.pod_cidr] if node.spec.pod_cidr else [])
        wanted: list[int] = []
        for cidr in cidrs:
            try:
                offsets = self._offsets(parse_cidr(cidr, strict=False))
            except ValueError:
                offsets = None
            if offsets is not None:
                wanted.extend(offsets)
        if self._wanted.get(node.name) == wanted:
            return
        self._release(node.name)
        taken = [o for o in wanted if self._bits.allocate(o, node.name)]
        self._held[node.name] = taken
        self._wanted[node.name] = wanted
        clash = sorted(
            {self._bits.owner(o) or "" for o in wanted if o not in taken} - {node.name, ""}
        )
        if clash:
            self.api.recorder.record(
                COMPONENT,
                node,
                "CIDRNotAvailable",
                f"Node {node.name} status is now: CIDRNotAvailable (podCIDR {node.spec.pod_cidr} "
                f"overlaps the podCIDR of {', '.join(clash)})",
                type_="Warning",
            )

    def _release(self, name: str) -> None:
        self._wanted.pop(name, None)
        for offset in self._held.pop(name, []):
            self._bits.release(offset, name)

    def _exhausted(self, node: Node) -> None:
        current = next((c for c in node.status.conditions if c.type == CONDITION), None)
        if current is not None and current.status == "True" and current.reason == NO_CIDR:
            return  # already said so
        message = f"no podCIDR of /{self.mask} left in {self.pod_net}"
        cond = Condition(
            type=CONDITION,
            status="True",
            reason=NO_CIDR,
            message=message,
            last_transition_time=rfc3339(self.api.clock.now()),
        )
        self._set_condition(node, cond)
        self.api.recorder.record(
            COMPONENT,
            node,
            "CIDRNotAvailable",
            f"Node {node.name} status is now: CIDRNotAvailable ({message})",
            type_="Warning",
        )

    def _clear_condition(self, node: Node) -> None:
        current = next((c for c in node.status.conditions if c.type == CONDITION), None)
        if current is None or current.reason != NO_CIDR or current.status == "False":
            return
        cond = current.evolve(
            status="False",
            reason="CIDRAssigned",
            message=f"podCIDR {node.spec.pod_cidr} assigned",
            last_transition_time=rfc3339(self.api.clock.now()),
        )
        self._set_condition(node, cond)

    def _set_condition(self, node: Node, cond: Condition) -> None:
        others = [c for c in node.status.conditions if c.type != CONDITION]
        status = node.status.evolve(conditions=[*others, cond])
        self.api.update_status(node.evolve(status=status), component=COMPONENT)
