"""The kubelet's real network plugin: :class:`control.agents.network.NetworkPlugin` over
the real CNI plugins (``bridge`` + ``host-local``; ``lo`` is brought up by the runtime),
run by :class:`dataplane.linux.cni.CniRunner` in a realised node namespace.

Preconditions: the cluster's node namespaces exist (with ``cni0``), i.e. the network was
realised — with or without pods — by :func:`dataplane.linux.realize.realize` under
``cluster_id``. A CNI call for a node that is not realised fails with a
:class:`~netmodel.errors.BackendError`, which the kubelet treats as a failed sandbox and
retries like any other plugin error.

Addresses (``ipam``), so that the emulated and the real cluster give a pod the same IP:

* ``"host-local"``: the real host-local plugin chooses. :class:`EmulatedCNI` models
  host-local's allocator (first address after the gateway, round-robin after the last
  reserved one), so for the same sequence of ADDs and DELs both choose the same address;
  the choice is checked against the model on every ADD (:class:`IpamMismatch` otherwise),
  which makes the plugin a running differential test of the IPAM model.
* ``"emulated"``: :class:`EmulatedCNI` chooses and the address is handed to host-local as
  ``CNI_ARGS IP=...`` (what :func:`~dataplane.linux.realize.realize` does with the model's
  addresses). Agreement by construction, for when the real allocator's state cannot be
  trusted (e.g. its dataDir was wiped).

MAC and host veth. :class:`EmulatedCNI` reports a MAC derived from the IP (``0a:58:...``)
and a host veth named from the pod's uid; the network model
(:func:`netmodel.topology.build`) — what both backends realise — gives the pod's ``eth0``
``stable_mac("pod", key)`` and names the host veth from the pod key. The bridge plugin
takes a MAC (``CNI_ARGS MAC=``) but always names its host veth itself (``veth`` + random
hex). So this plugin passes the *model's* MAC to the real plugin (the pod's ``eth0`` in the
kernel carries exactly the MAC the emulator uses) and reports what the kernel has: that
MAC and the bridge plugin's host veth name. Only the host veth name differs between the
backends; nothing routes or filters on it.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterable
from ipaddress import IPv4Address, IPv4Network, ip_network
from typing import Literal

from control.agents.commands import Program
from control.agents.network import EmulatedCNI, PodNetworkResult
from dataplane.linux.cni import CniResult, CniRunner
from netmodel.errors import BackendError, InvalidError
from netmodel.network import stable_mac
from netmodel.objects import Node, Pod

IpamMode = Literal["host-local", "emulated"]


class IpamMismatch(BackendError):
    """host-local gave a pod another address than the emulated allocator chose: the
    IPAM model and the real plugin disagree (a bug in :class:`EmulatedCNI`)."""


def model_mac(pod: Pod) -> str:
    """The MAC of the pod's ``eth0`` in the network model (and so in both backends)."""
    return stable_mac("pod", pod.key)


class RealCNI:
    """bridge + host-local for real, behind the kubelet's NetworkPlugin protocol.

    ``cluster_id``: the realised cluster whose node namespaces the plugins run in.
    ``ipam``: see the module docstring. ``mtu``: the pods' MTU (the model's: 1450 under
    VXLAN, 1500 under host-gw). Safe to use from one kubelet thread per node.
    """

    def __init__(self, cluster_id: str, *, ipam: IpamMode = "host-local", mtu: int = 1500) -> None:
        self.cluster_id = cluster_id
        self.ipam: IpamMode = ipam
        self.runner = CniRunner(cluster_id, mtu=mtu)
        self.model = EmulatedCNI()
        #: the kubelet runs evaluated commands for real, in the pod's namespace
        self.container_runtime = NetnsRuntime(self.pod_netns)

    def pod_netns(self, pod: Pod) -> str:
        """The name of the pod's network namespace (made by CNI ADD)."""
        return self.runner.names.netns(f"pod/{pod.key}")

    @staticmethod
    def _pod_cidr(node: Node) -> IPv4Network:
        if not node.spec.pod_cidr:
            raise InvalidError(f"node {node.name} has no podCIDR yet", obj=node.ref)
        net = ip_network(node.spec.pod_cidr)
        if not isinstance(net, IPv4Network):
            raise InvalidError(f"podCIDR {net}: only IPv4 is realised", obj=node.ref)
        return net

    def add(self, node: Node, pod: Pod) -> PodNetworkResult:
        """CNI ADD through the real plugins (idempotent: a pod already attached with its
        address gets its cached result). Raises BackendError when a plugin fails, and
        :class:`IpamMismatch` (ipam ``host-local``) when host-local chose another address
        than the model."""
        cidr = self._pod_cidr(node)
        cached = self.runner.cached(pod.key)
        expected = self.model.add(node, pod)
        requested = IPv4Address(expected.ip) if self.ipam == "emulated" else None
        if cached is not None and self.ipam == "host-local":
            requested = cached.ip  # an attached pod keeps its address
        try:
            res = self.runner.add(
                node.name, pod.key, cidr, requested_ip=requested, mac=model_mac(pod)
            )
        except BaseException:
            self.model.delete(node, pod)
            raise
        if str(res.ip) != expected.ip:
            self.runner.delete(node.name, pod.key, cidr)
            self.model.delete(node, pod)
            raise IpamMismatch(
                f"pod {pod.key} on node {node.name}: host-local gave {res.ip}, "
                f"the emulated allocator chose {expected.ip}"
            )
        return _result(res)

    def delete(self, node: Node, pod: Pod) -> None:
        """CNI DEL (releases the address in host-local, removes the sandbox). Idempotent."""
        self.model.delete(node, pod)
        if node.spec.pod_cidr:
            self.runner.delete(node.name, pod.key, self._pod_cidr(node))

    def restore(self, node: Node, pods: Iterable[Pod]) -> None:
        """After a kubelet restart: host-local keeps its reservations on disk, so only the
        model re-learns the pods' addresses (and, like host-local after a lost pointer,
        continues after the highest one)."""
        self.model.restore(node, pods)

    def allocated(self, node_name: str) -> list[str]:
        """The addresses the model holds on a node (those host-local holds too)."""
        return self.model.allocated(node_name)


class NetnsRuntime:
    """Runs the argv for real: ``ip netns exec <pod netns> argv`` (``netns(pod)`` names the
    namespace). Processes belong to this object: a run it did not start (the kubelet
    restarted) is started again by :meth:`ended`."""

    def __init__(self, netns: Callable[[Pod], str]) -> None:
        self._netns = netns
        self._procs: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def start(self, pod: Pod, name: str, prog: Program, started: float) -> None:
        key = (pod.metadata.uid or pod.key, name)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self._netns(pod), *prog.argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with self._lock:
            old = self._procs.pop(key, None)
            self._procs[key] = proc
        if old is not None and old.poll() is None:
            old.kill()
            old.wait()

    def ended(
        self, pod: Pod, name: str, prog: Program, started: float, now: float
    ) -> tuple[int, float] | None:
        key = (pod.metadata.uid or pod.key, name)
        with self._lock:
            proc = self._procs.get(key)
        if proc is None:
            self.start(pod, name, prog, now)
            return None
        code = proc.poll()
        if code is None:
            return None
        with self._lock:
            self._procs.pop(key, None)
        return (code % 256 if code >= 0 else 128 - code), now

    def due(self, prog: Program, started: float) -> float | None:
        return None

    def any_ended(self) -> bool:
        with self._lock:
            procs = list(self._procs.values())
        return any(p.poll() is not None for p in procs)

    def stop(self, pod: Pod) -> None:
        uid = pod.metadata.uid or pod.key
        with self._lock:
            mine = [k for k in self._procs if k[0] == uid]
            procs = [self._procs.pop(k) for k in mine]
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def running(self) -> int:
        """How many processes it holds (tests check none is left behind)."""
        with self._lock:
            return sum(1 for p in self._procs.values() if p.poll() is None)


def _result(res: CniResult) -> PodNetworkResult:
    return PodNetworkResult(
        ip=str(res.ip),
        prefixlen=res.prefixlen,
        gateway=str(res.gateway),
        host_veth=res.host_veth,
        mac=res.mac,
    )
