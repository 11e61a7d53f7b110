"""One emulated network namespace (a *host*): devices, FIB, neighbour table, sysctls.

Built from a :class:`netmodel.network.Netns`. The host holds state that the packet walk
reads and updates (neighbour entries learned by ARP, bridge FDBs); it does not move
packets itself (:mod:`dataplane.emulator.walk` does).

Contracts:

* Every namespace has ``lo`` with 127.0.0.1/8 (added if the value lacks it).
* The FIB's local table holds every configured address and 127/8 (:mod:`.fib`).
* Neighbour entries are ``PERMANENT`` (configured, never replaced) or ``REACHABLE``
  (learned from ARP). Entries never expire in the emulator's time scale. Change them
  only through :meth:`Host.learn_neighbor` (which bumps the shared ``epoch``).
  ``neighbors`` is keyed by ``(device name, IPv4 address as an int)``.
* ``ip_forward`` is ``net.ipv4.ip_forward`` (default off), ``bridge_nf_call_iptables`` is
  ``net.bridge.bridge-nf-call-iptables`` (default off, as without ``br_netfilter``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Interface

from dataplane.emulator.devices import Bridge, Device, Epoch, VxlanDevice, make_device
from dataplane.emulator.fib import Fib
from netmodel.ip import IPAddress
from netmodel.network import Interface, Netns

_UNKNOWN = object()  # not looked up yet (None is a valid cached answer)


@dataclass(frozen=True, slots=True)
class NeighEntry:
    """One neighbour: its MAC and whether it was configured (``permanent``)."""

    mac: str
    permanent: bool


class Host:
    """A namespace's devices, routes, neighbours and sysctls (see the module docstring)."""

    def __init__(
        self, ns: Netns, epoch: Epoch | None = None, made: Mapping[str, Device] | None = None
    ) -> None:
        """``epoch`` is bumped on every learned change of a neighbour or FDB entry (shared
        by the hosts of one cluster). ``made``: devices made before the host, by name
        (the far ends of veths whose other end was built first), taken as they are."""
        self.epoch = epoch or Epoch()
        self.name = ns.name
        self.role = ns.role
        self.node = ns.node
        self.pod = ns.pod
        self.sysctls: dict[str, str] = dict(ns.sysctls)
        self.ip_forward = self.sysctls.get("net.ipv4.ip_forward", "0") == "1"
        self.bridge_nf_call_iptables = (
            self.sysctls.get("net.bridge.bridge-nf-call-iptables", "0") == "1"
        )
        itfs = list(ns.interfaces)
        if not any(i.kind == "loopback" for i in itfs):
            itfs.insert(
                0, Interface("lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),))
            )
        made = made or {}
        self.devices: dict[str, Device] = {
            i.name: made.get(i.name) or make_device(ns.name, i) for i in itfs
        }
        for itf in itfs:
            if itf.master is not None:
                bridge = self.devices.get(itf.master)
                if not isinstance(bridge, Bridge):
                    raise ValueError(f"{ns.name}: {itf.name}'s master {itf.master} is no bridge")
                port = self.devices[itf.name]
                bridge.epoch = self.epoch
                port.master = bridge
                bridge.ports[port.name] = port
        for entry in ns.fdb:
            dev = self.devices.get(entry.dev)
            if isinstance(dev, VxlanDevice) and entry.dst is not None:
                dev.fdb[entry.mac.lower()] = entry.dst
            elif isinstance(dev, Bridge) and entry.dst is None:
                raise ValueError(f"{ns.name}: static bridge FDB entries need a port")
        # keyed by the device and the address as an integer: an address object's hash
        # is computed in Python on every lookup, an int's is free
        self.neighbors: dict[tuple[str, int], NeighEntry] = {
            (n.dev, int(n.ip)): NeighEntry(n.mac.lower(), True) for n in ns.neighbors
        }
        self.fib = Fib({d.name: d.addresses for d in self.devices.values()}, ns.routes)
        self.local_addresses: frozenset[IPAddress] = self.fib.local_addresses()
        self.is_local = self.fib.is_local
        self._vxlan_ports: dict[tuple[int, int], VxlanDevice | None] = {}

    # ---- queries

    #: whether an address is in the local table (own address or 127/8): ``Fib.is_local``
    is_local: Callable[[IPAddress], bool]

    def device(self, name: str) -> Device:
        try:
            return self.devices[name]
        except KeyError:
            raise KeyError(f"{self.name}: no device {name}") from None

    def addresses(self) -> Iterator[IPAddress]:
        """Configured non-loopback addresses, device by device."""
        for d in self.devices.values():
            if d.kind == "loopback":
                continue
            for a in d.addresses:
                yield a.ip

    def primary_address(self) -> IPAddress | None:
        return next(self.addresses(), None)

    def owns_on(self, dev: Device, addr: IPAddress) -> bool:
        """Whether the host answers ARP for ``addr`` arriving on ``dev``: Linux's default
        (``arp_ignore=0``) answers for any local address, whichever device holds it."""
        return addr in self.local_addresses and dev.kind != "loopback"

    def answers_arp(self, dev: Device, addr: IPAddress) -> bool:
        """Whether the host answers an ARP request for ``addr`` arriving on ``dev``: for
        its own addresses (:meth:`owns_on`), and by proxy ARP (``arp_fwd_proxy``) when
        ``net.ipv4.conf.{all,DEV}.proxy_arp`` is on, the host forwards, and it routes
        ``addr`` (unicast) out of another device. Calico's host veths answer the pod's
        ARP for its gateway 169.254.1.1 this way."""
        if self.owns_on(dev, addr):
            return True
        if not self.ip_forward or dev.kind == "loopback":
            return False
        conf = self.sysctls
        if "1" not in (
            conf.get(f"net.ipv4.conf.{dev.name}.proxy_arp"),
            conf.get("net.ipv4.conf.all.proxy_arp"),
        ):
            return False
        rt = self.fib.lookup(addr)
        return rt.type == "unicast" and rt.dev != dev.name

    def vxlan_for_port(self, port: int, dst: IPAddress) -> VxlanDevice | None:
        """The VXLAN device bound to UDP ``port`` on local address ``dst``."""
        key = (port, dst._ip)  # type: ignore[union-attr]  # int(dst), without its Python call
        found = self._vxlan_ports.get(key, _UNKNOWN)
        if found is not _UNKNOWN:
            return found  # type: ignore[return-value]
        found = None
        for d in self.devices.values():
            if isinstance(d, VxlanDevice) and d.port == port and d.local in (None, dst):
                found = d
                break
        self._vxlan_ports[key] = found
        return found

    # ---- neighbours

    def neighbor(self, dev: str, ip: IPAddress) -> NeighEntry | None:
        return self.neighbors.get((dev, ip._ip))  # type: ignore[union-attr]

    def learn_neighbor(self, dev: str, ip: IPAddress, mac: str) -> bool:
        """Record ``ip`` is-at ``mac`` on ``dev`` unless a permanent entry exists; True if
        the table changed."""
        key = (dev, ip._ip)  # type: ignore[union-attr]
        old = self.neighbors.get(key)
        if old is not None and (old.permanent or old.mac == mac):
            return False
        self.neighbors[key] = NeighEntry(mac, False)
        self.epoch.value += 1
        return True

    def __repr__(self) -> str:
        return f"Host({self.name!r})"
