"""Emulated network devices, built from :class:`netmodel.network.Interface` values.

A device belongs to one :class:`~dataplane.emulator.host.Host` (a namespace). What a
device does with a frame it transmits is decided by the packet walk
(:mod:`dataplane.emulator.walk`); the devices here hold the state that decision needs:

* :class:`Device` — name, kind, MAC, addresses, MTU, and the bridge it is a port of
  (``master``) with the port's ``hairpin`` flag. A veth knows its ``peer`` device (in
  another host): a frame sent on one end arrives on the other.
* :class:`Bridge` — a Linux bridge: its ports and its forwarding database (MAC → port),
  learned from the source MAC of every frame that enters a port.
* :class:`VxlanDevice` — a VXLAN tunnel endpoint: VNI, UDP port, local underlay address,
  and its FDB (inner destination MAC → remote VTEP address).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import IPv4Interface

from netmodel.ip import IPAddress
from netmodel.network import Interface, InterfaceKind, VxlanParams

BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"


class Epoch:
    """A counter bumped whenever a learned L2 entry (a bridge FDB entry, a neighbour)
    changes; the flow cache compares it to know that the entries a recorded walk relied
    on still hold. One instance is shared by all hosts of a cluster."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


@dataclass(eq=False, slots=True)
class Device:
    """One device of one host. ``peer`` is set for connected veths; ``master`` for bridge
    ports. Identity semantics: two devices are equal only if they are the same object."""

    host_name: str
    name: str
    kind: InterfaceKind
    mac: str
    addresses: tuple[IPv4Interface, ...] = ()
    mtu: int = 1500
    hairpin: bool = False
    up: bool = True
    master: Bridge | None = None
    peer: Device | None = None

    @property
    def noarp(self) -> bool:
        """Devices that never send ARP (loopback; flannel's VXLAN device is NOARP)."""
        return self.kind in ("loopback", "vxlan")

    def label(self) -> str:
        return f"{self.host_name}:{self.name}"


@dataclass(eq=False, slots=True)
class Bridge(Device):
    """A Linux bridge. ``fdb`` maps a MAC to the port it was learned on; change it only
    through :meth:`learn` (which bumps ``epoch``)."""

    ports: dict[str, Device] = field(default_factory=dict)
    fdb: dict[str, Device] = field(default_factory=dict)
    epoch: Epoch = field(default_factory=Epoch)

    def learn(self, mac: str, port: Device) -> bool:
        """Record that ``mac`` lives behind ``port``; True if this was new or moved."""
        if mac == BROADCAST_MAC:
            return False
        if self.fdb.get(mac) is port:
            return False
        self.fdb[mac] = port
        self.epoch.value += 1
        return True


@dataclass(eq=False, slots=True)
class VxlanDevice(Device):
    """A VXLAN device (flannel's ``flannel.1``). ``fdb`` maps an inner destination MAC to
    the remote VTEP's underlay address."""

    vni: int = 1
    port: int = 8472
    local: IPAddress | None = None
    underlay_dev: str = "eth0"
    learning: bool = False
    fdb: dict[str, IPAddress] = field(default_factory=dict)


def make_device(host_name: str, itf: Interface) -> Device:
    """The emulated device for one netmodel interface (peers and masters wired later)."""
    common = {
        "host_name": host_name,
        "name": itf.name,
        "kind": itf.kind,
        "mac": itf.mac.lower(),
        "addresses": tuple(a for a in itf.addresses if a.version == 4),
        "mtu": itf.mtu if itf.kind != "loopback" else 65536,
        "hairpin": itf.hairpin,
        "up": itf.up,
    }
    if itf.kind == "bridge":
        return Bridge(**common)  # type: ignore[arg-type]
    if itf.kind == "vxlan":
        params = itf.vxlan or VxlanParams(vni=1, local=_first_ip(itf), dev="eth0")
        return VxlanDevice(
            **common,  # type: ignore[arg-type]
            vni=params.vni,
            port=params.port,
            local=params.local,
            underlay_dev=params.dev,
            learning=params.learning,
        )
    return Device(**common)  # type: ignore[arg-type]


def _first_ip(itf: Interface) -> IPAddress:
    if not itf.addresses:
        raise ValueError(f"vxlan device {itf.name} has neither parameters nor an address")
    return itf.addresses[0].ip
