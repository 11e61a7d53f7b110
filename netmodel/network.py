"""Network objects as values: namespaces, interfaces, routes, neighbours, FDB entries.

Both backends consume these. The emulator builds its devices from them; the Linux
backend creates the same things in the kernel. Routes with ``proto="kernel"`` are the
connected routes the kernel derives from an address: listed so the emulator's FIB is
explicit, skipped by the Linux backend (the kernel makes them itself).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Interface, IPv4Network, ip_network
from typing import Literal

from netmodel.ip import IPAddress, IPNetwork

InterfaceKind = Literal["loopback", "ethernet", "veth", "bridge", "vxlan", "dummy"]
NetnsRole = Literal["node", "pod", "router", "external"]

DEFAULT_ROUTE = ip_network("0.0.0.0/0")


def stable_mac(*parts: str) -> str:
    """A locally administered unicast MAC derived from ``parts`` (deterministic)."""
    digest = hashlib.sha256("/".join(parts).encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in digest[:5])


@dataclass(frozen=True, slots=True)
class VxlanParams:
    """A VXLAN device as flannel creates it: ``vxlan id 1 local <nodeIP> dev eth0
    dstport 8472 nolearning``."""

    vni: int
    local: IPAddress
    dev: str
    port: int = 8472
    learning: bool = False


@dataclass(frozen=True, slots=True)
class Interface:
    """One network device. ``peer`` names the other end of a veth as (netns, ifname);
    ``master`` the bridge this device is a port of; ``hairpin`` the bridge port flag."""

    name: str
    kind: InterfaceKind
    mac: str
    addresses: tuple[IPv4Interface, ...] = ()
    mtu: int = 1500
    master: str | None = None
    peer: tuple[str, str] | None = None
    hairpin: bool = False
    vxlan: VxlanParams | None = None
    up: bool = True


@dataclass(frozen=True, slots=True)
class Route:
    """A route in the main table. ``dst`` 0.0.0.0/0 is the default route."""

    dst: IPNetwork
    dev: str
    via: IPAddress | None = None
    onlink: bool = False
    src: IPAddress | None = None
    scope: Literal["global", "link", "host"] = "global"
    proto: Literal["kernel", "static"] = "static"

    def describe(self) -> str:
        dst = "default" if self.dst == DEFAULT_ROUTE else str(self.dst)
        text = dst + (f" via {self.via}" if self.via else "") + f" dev {self.dev}"
        if self.proto == "kernel":
            text += " proto kernel"
        if self.scope != "global":
            text += f" scope {self.scope}"
        if self.src:
            text += f" src {self.src}"
        if self.onlink:
            text += " onlink"
        return text


@dataclass(frozen=True, slots=True)
class Neighbor:
    """A permanent neighbour entry (``ip neigh add IP lladdr MAC dev DEV nud permanent``)."""

    ip: IPAddress
    mac: str
    dev: str


@dataclass(frozen=True, slots=True)
class FdbEntry:
    """A bridge / VXLAN forwarding entry; ``dst`` is the remote VTEP for VXLAN devices."""

    mac: str
    dev: str
    dst: IPAddress | None = None


@dataclass(frozen=True, slots=True)
class Netns:
    """One network namespace. ``name`` is logical (``node/node-1``, ``pod/default/web-x``,
    ``router``, ``ext/203.0.113.5``); each backend maps it to its own naming."""

    name: str
    role: NetnsRole
    interfaces: tuple[Interface, ...] = ()
    routes: tuple[Route, ...] = ()
    neighbors: tuple[Neighbor, ...] = ()
    fdb: tuple[FdbEntry, ...] = ()
    sysctls: tuple[tuple[str, str], ...] = ()
    node: str | None = None
    pod: str | None = None  # "ns/name" for pod namespaces

    def interface(self, name: str) -> Interface:
        for i in self.interfaces:
            if i.name == name:
                return i
        raise KeyError(f"{self.name}: no interface {name}")

    def addresses(self) -> list[IPAddress]:
        return [a.ip for i in self.interfaces for a in i.addresses]

    def with_(self, **changes: object) -> Netns:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class VethPair:
    """Both ends of a veth: (netns, ifname) each."""

    a: tuple[str, str]
    b: tuple[str, str]


@dataclass(frozen=True)
class ClusterNetwork:
    """Every namespace of the cluster's network, and the veth pairs that join them."""

    namespaces: dict[str, Netns] = field(default_factory=dict)
    veths: tuple[VethPair, ...] = ()
    overlay: Literal["vxlan", "host-gw"] = "vxlan"
    node_network: IPv4Network | None = None
    #: the pods' network plugin (``netmodel.topology``): ``flannel`` (bridge + overlay)
    #: or ``calico`` (cali veths, proxy ARP, BGP routes to each node's blocks)
    cni: Literal["flannel", "calico"] = "flannel"

    def owner_of(self, ip: IPAddress) -> Netns | None:
        """The namespace holding address ``ip`` (loopback excluded)."""
        for ns in self.namespaces.values():
            for itf in ns.interfaces:
                if itf.kind == "loopback":
                    continue
                if any(a.ip == ip for a in itf.addresses):
                    return ns
        return None
