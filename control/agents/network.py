"""The kubelet's network plugin interface (CNI semantics) and its emulated implementation.

:class:`NetworkPlugin` is what the kubelet calls: ``add`` when a pod sandbox is created
(CNI ADD: give the pod an interface and an address), ``delete`` when it is torn down
(CNI DEL: idempotent, frees the address), ``restore`` after a restart (re-learn the
addresses pods already hold). The real implementation (CNI plugins run in network
namespaces, under ``dataplane/linux``) drops in behind the same three methods.

:class:`EmulatedCNI` models the ``bridge`` + ``host-local`` plugin pair as kubenet /
flannel configure them:

* IPAM is host-local over the node's ``spec.podCIDR``: the gateway is the first address
  (it sits on the node's bridge ``cni0``), pods get addresses from the second on, the
  network and broadcast addresses are never handed out. Like host-local, allocation is
  round-robin: it continues after the last address reserved and wraps around, so a
  freed address is reused once the range comes round again.
* The pod's interface is ``eth0``, one end of a veth pair whose host end (``veth`` + 8
  hex characters, derived from the pod) is enslaved to ``cni0``; its MAC is derived
  from its IPv4 address (``0a:58:`` + the four octets), as the bridge plugin did.
* State is per node and in memory; :meth:`EmulatedCNI.restore` rebuilds it from pods
  that carry a ``status.podIP`` (host-local's last-reserved pointer is then taken to be
  the highest address in use: as host-local says of a lost pointer, "we just lose
  round-robin this one time").

``EmulatedCNI(calico=True)`` is the cluster's ``cni: calico`` (see
:mod:`netmodel.topology`): the pod's ``eth0`` holds its address as a ``/32`` with the
gateway 169.254.1.1, the host end is ``cali`` + 11 hex digits, and there is no bridge.
A recorded address (a replayed dump's pod, from Calico's block IPAM) is kept as it is,
wherever it lies (the apiserver checked it against the IP pools); the node needs no
podCIDR for it. A new pod gets the next free address of its node's podCIDR as
host-local would hand it out, skipping every address another pod of the cluster holds
(Calico's own block allocator is not modelled).
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from netmodel.errors import AllocationError, InvalidError
from netmodel.objects import Node, Pod

BRIDGE = "cni0"
POD_INTERFACE = "eth0"


@dataclass(frozen=True, slots=True)
class PodNetworkResult:
    """What CNI ADD returns for one pod (its ``eth0``)."""

    ip: str
    prefixlen: int
    gateway: str
    interface: str = POD_INTERFACE
    host_veth: str = ""
    mac: str = ""
    bridge: str = BRIDGE

    @property
    def cidr(self) -> str:
        return f"{self.ip}/{self.prefixlen}"


@runtime_checkable
class NetworkPlugin(Protocol):
    """CNI as the kubelet sees it. Every method is called for one node's pods only."""

    def add(self, node: Node, pod: Pod) -> PodNetworkResult:
        """CNI ADD: attach ``pod`` to ``node``'s pod network. Calling it again for a pod
        already attached returns the same result. Raises a SvclabError when the node has
        no podCIDR yet or its range is exhausted."""
        ...

    def delete(self, node: Node, pod: Pod) -> None:
        """CNI DEL: detach ``pod`` and free its address. Idempotent."""
        ...

    def restore(self, node: Node, pods: Iterable[Pod]) -> None:
        """Re-learn the attachments of ``pods`` (bound to ``node``, with a podIP) after a
        restart, so later ADDs never hand out an address in use."""
        ...


@runtime_checkable
class SandboxCollector(Protocol):
    """A network plugin that can list what it holds outside the kubelet's memory (the
    kernel's sandboxes), so that a restarted kubelet removes the sandboxes of pods that
    went away while it was down (force-deleted, finished): kubelet's clean-up of
    orphaned pods after a restart."""

    def remove_orphans(self, node: Node, keep: Collection[str]) -> list[str]:
        """Tear down (CNI DEL, the pod's processes stopped) every sandbox held on
        ``node`` whose pod key is not in ``keep``; returns those keys, sorted."""
        ...


def pod_sandbox_id(pod: Pod) -> str:
    """The identity CNI calls are keyed by (the pod's uid, else namespace/name)."""
    return pod.metadata.uid or pod.key


def host_veth_name(pod: Pod) -> str:
    """``veth`` + 8 hex characters derived from the pod (15-character limit kept)."""
    return "veth" + hashlib.sha256(f"{pod.key}/{pod_sandbox_id(pod)}".encode()).hexdigest()[:8]


def mac_for(ip: str) -> str:
    octets = ipaddress.IPv4Address(ip).packed
    return "0a:58:" + ":".join(f"{b:02x}" for b in octets)


@dataclass
class HostLocalRange:
    """host-local IPAM over one subnet: gateway = first address, allocation from the
    second, round-robin after the last reserved address."""

    cidr: str
    net: ipaddress.IPv4Network = field(init=False)
    by_owner: dict[str, int] = field(default_factory=dict)
    by_ip: dict[int, str] = field(default_factory=dict)
    last_reserved: int | None = None

    def __post_init__(self) -> None:
        net = ipaddress.ip_network(self.cidr)
        if not isinstance(net, ipaddress.IPv4Network):
            raise InvalidError(f"podCIDR {self.cidr}: only IPv4 is emulated")
        if net.num_addresses < 4:
            raise InvalidError(f"podCIDR {self.cidr} is too small for a gateway and a pod")
        self.net = net

    @property
    def base(self) -> int:
        return int(self.net.network_address)

    @property
    def gateway(self) -> str:
        return str(self.net.network_address + 1)

    @property
    def first(self) -> int:
        """The first address host-local may hand out (range start = network + 1)."""
        return self.base + 1

    @property
    def last(self) -> int:
        """The last one (broadcast - 1)."""
        return int(self.net.broadcast_address) - 1

    def allocate(self, owner: str) -> str:
        have = self.by_owner.get(owner)
        if have is not None:
            return str(ipaddress.IPv4Address(have))
        gw = self.base + 1
        size = self.last - self.first + 1
        start = self.first if self.last_reserved is None else self.last_reserved + 1
        for step in range(size):
            cand = start + step
            if cand > self.last:
                cand = self.first + (cand - self.last - 1) % size
            if cand == gw or cand in self.by_ip:
                continue
            self.by_owner[owner] = cand
            self.by_ip[cand] = owner
            self.last_reserved = cand
            return str(ipaddress.IPv4Address(cand))
        raise AllocationError(f"no IP addresses available in range set: {self.net}")

    def reserve(self, owner: str, ip: str) -> bool:
        """Mark ``ip`` as held by ``owner`` (restore); False if it is not ours to hold."""
        n = int(ipaddress.IPv4Address(ip))
        if not (self.first <= n <= self.last) or n == self.base + 1:
            return False
        holder = self.by_ip.get(n)
        if holder is not None and holder != owner:
            return False
        self.by_owner[owner] = n
        self.by_ip[n] = owner
        return True

    def release(self, owner: str) -> None:
        n = self.by_owner.pop(owner, None)
        if n is not None:
            self.by_ip.pop(n, None)

    def in_use(self) -> list[str]:
        return [str(ipaddress.IPv4Address(n)) for n in sorted(self.by_ip)]


class EmulatedCNI:
    """bridge + host-local, emulated (see the module docstring), or Calico's attachment
    (``calico``). One instance serves all nodes; state is kept per node name."""

    def __init__(self, *, calico: bool = False) -> None:
        self._ranges: dict[str, HostLocalRange] = {}
        self.calico = calico
        #: calico: recorded addresses kept as they are, by sandbox id
        self._kept: dict[str, str] = {}
        #: calico: every address in use in the cluster -> its sandbox id
        self._held: dict[str, str] = {}
        #: one instance may serve the kubelets of several threads (``svclab serve``)
        self._lock = threading.RLock()

    def note(self, pod: Pod, *, gone: bool = False) -> None:
        """calico: learn (or, ``gone``, forget) an address some pod of the cluster holds,
        as Calico's IPAM reads its blocks from the datastore (the live driver feeds it
        every Pod it sees); nothing for flannel, whose ranges are per node."""
        ip = pod.status.pod_ip
        if not self.calico or not ip or pod.spec.host_network:
            return
        owner = pod_sandbox_id(pod)
        with self._lock:
            if gone:
                if self._held.get(ip) == owner:
                    del self._held[ip]
            else:
                self._held.setdefault(ip, owner)

    @property
    def needs_pod_cidr(self) -> bool:
        """Whether a recorded address can only be kept on a node with a podCIDR."""
        return not self.calico

    def _result(self, pod: Pod, ip: str, r: HostLocalRange | None) -> PodNetworkResult:
        if self.calico:
            from netmodel.topology import CALICO_GATEWAY, calico_veth_name

            return PodNetworkResult(
                ip=ip,
                prefixlen=32,
                gateway=str(CALICO_GATEWAY),
                host_veth=calico_veth_name(pod.key),
                mac=mac_for(ip),
                bridge="",
            )
        assert r is not None
        return PodNetworkResult(
            ip=ip,
            prefixlen=r.net.prefixlen,
            gateway=r.gateway,
            host_veth=host_veth_name(pod),
            mac=mac_for(ip),
        )

    def _range(self, node: Node) -> HostLocalRange:
        cidr = node.spec.pod_cidr
        if not cidr:
            raise InvalidError(f"node {node.name} has no podCIDR yet", obj=node.ref)
        r = self._ranges.get(node.name)
        if r is None or r.cidr != cidr:
            r = self._ranges[node.name] = HostLocalRange(cidr)
        return r

    def add(self, node: Node, pod: Pod) -> PodNetworkResult:
        with self._lock:
            return self._add(node, pod)

    def _add(self, node: Node, pod: Pod) -> PodNetworkResult:
        owner = pod_sandbox_id(pod)
        kept = self._kept.get(owner)
        if kept is not None:
            return self._result(pod, kept, None)
        r = self._range(node)
        ip = r.allocate(owner)
        while self.calico and self._held.get(ip, owner) != owner:
            # another node's pod holds it (a Calico block inside this podCIDR): skip it
            r.release(owner)
            r.reserve(f"held-elsewhere/{ip}", ip)
            ip = r.allocate(owner)
        if self.calico:
            self._held[ip] = owner
        return self._result(pod, ip, r)

    def delete(self, node: Node, pod: Pod) -> None:
        with self._lock:
            self._delete(node, pod)

    def _delete(self, node: Node, pod: Pod) -> None:
        owner = pod_sandbox_id(pod)
        kept = self._kept.pop(owner, None)
        if kept is not None and self._held.get(kept) == owner:
            del self._held[kept]
        r = self._ranges.get(node.name)
        if r is not None:
            ip = r.by_owner.get(owner)
            r.release(owner)
            key = None if ip is None else str(ipaddress.IPv4Address(ip))
            if key is not None and self._held.get(key) == owner:
                del self._held[key]

    def restore(self, node: Node, pods: Iterable[Pod]) -> None:
        with self._lock:
            self._restore(node, pods)

    def _restore(self, node: Node, pods: Iterable[Pod]) -> None:
        if self.calico:
            rest = []
            for pod in pods:
                ip = pod.status.pod_ip
                if not ip or pod.spec.host_network:
                    continue
                owner = pod_sandbox_id(pod)
                self._held[ip] = owner
                if node.spec.pod_cidr and ipaddress.IPv4Address(ip) in self._range(node).net:
                    rest.append(pod)
                else:
                    self._kept[owner] = ip
            if not node.spec.pod_cidr:
                return
            pods = rest
        r = self._range(node)
        top: int | None = None
        for pod in pods:
            ip = pod.status.pod_ip
            if ip and not pod.spec.host_network and r.reserve(pod_sandbox_id(pod), ip):
                n = int(ipaddress.IPv4Address(ip))
                top = n if top is None else max(top, n)
        if top is not None and (r.last_reserved is None or top > r.last_reserved):
            r.last_reserved = top

    def allocated(self, node_name: str) -> list[str]:
        """The addresses in use on a node (for tests and ``describe node``)."""
        r = self._ranges.get(node_name)
        return r.in_use() if r else []
