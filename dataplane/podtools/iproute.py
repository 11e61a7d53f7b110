"""iproute2's ``ip addr``, ``ip route``, ``ip neigh`` and ``ip rule`` for an emulated
namespace, in the text ``ip`` 6.1 (Debian 12) prints; recorded in
``tests/data/podtools/ip-*.out``.

Interface indexes are the order of the namespace's interfaces (``lo`` first, 1), as in a
namespace whose devices were created in that order; a veth's ``@ifN`` is its peer's
index in the peer's namespace and ``link-netnsid 0`` what a pod sees of its node's
(unnamed) namespace. The kernel gives every up, non-loopback device with a MAC an
IPv6 link-local address (EUI-64 of the MAC) and ``lo`` ``::1``: both are printed,
though the emulator routes IPv4 only. Neighbours are the host's table now:
configured ones ``PERMANENT``, those learned by ARP ``REACHABLE`` (the emulator does
not age them).
"""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Interface

from dataplane.emulator.host import Host
from netmodel.network import DEFAULT_ROUTE, ClusterNetwork, Interface, Netns, Route

_LO = Interface("lo", "loopback", "00:00:00:00:00:00", (IPv4Interface("127.0.0.1/8"),))


def interfaces(ns: Netns) -> list[Interface]:
    """The namespace's interfaces in index order (``lo`` first, added if missing)."""
    itfs = list(ns.interfaces)
    if not any(i.kind == "loopback" for i in itfs):
        itfs.insert(0, _LO)
    return itfs


def _index(network: ClusterNetwork, ns_name: str, dev: str) -> int:
    for i, itf in enumerate(interfaces(network.namespaces[ns_name]), 1):
        if itf.name == dev:
            return i
    return 0


def link_local(mac: str) -> str:
    """The EUI-64 IPv6 link-local address the kernel derives from ``mac``."""
    b = [int(x, 16) for x in mac.split(":")]
    b[0] ^= 0x02
    eui = [*b[:3], 0xFF, 0xFE, *b[3:]]
    groups = [f"{(eui[i] << 8) | eui[i + 1]:x}" for i in range(0, 8, 2)]
    # the kernel prints the shortest form: leading zero groups folded into "::"
    while groups and groups[0] == "0":
        groups.pop(0)
    return "fe80::" + ":".join(groups)


def _flags(itf: Interface, netns: Netns) -> str:
    if itf.kind == "loopback":
        return "<LOOPBACK,UP,LOWER_UP>" if itf.up else "<LOOPBACK>"
    flags = ["BROADCAST", "MULTICAST"]
    if itf.up:
        flags += ["UP", "LOWER_UP"]
    return "<" + ",".join(flags) + ">"


def ip_addr(network: ClusterNetwork, netns: str) -> str:
    """``ip addr`` (``ip address show``) of namespace ``netns``."""
    ns = network.namespaces[netns]
    out: list[str] = []
    for idx, itf in enumerate(interfaces(ns), 1):
        name = itf.name
        if itf.peer is not None:
            peer_idx = _index(network, itf.peer[0], itf.peer[1])
            name = f"{itf.name}@if{peer_idx}"
        master = f" master {itf.master}" if itf.master else ""
        if itf.kind == "loopback":
            out.append(
                f"{idx}: {name}: {_flags(itf, ns)} mtu 65536 qdisc noqueue state UNKNOWN "
                "group default qlen 1000\n"
                "    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n"
            )
        else:
            state = "UP" if itf.up else "DOWN"
            if itf.kind in ("vxlan", "dummy") and itf.up:
                state = "UNKNOWN"
            out.append(
                f"{idx}: {name}: {_flags(itf, ns)} mtu {itf.mtu} qdisc noqueue{master} "
                f"state {state} group default qlen 1000\n"
                f"    link/ether {itf.mac} brd ff:ff:ff:ff:ff:ff"
                + (" link-netnsid 0" if itf.peer is not None else "")
                + "\n"
            )
        for a in itf.addresses:
            scope = "host" if itf.kind == "loopback" else "global"
            brd = ""
            if itf.kind != "loopback" and a.network.prefixlen < 31:
                brd = f" brd {a.network.broadcast_address}"
            out.append(
                f"    inet {a.with_prefixlen}{brd} scope {scope} {itf.name}\n"
                "       valid_lft forever preferred_lft forever\n"
            )
        if itf.kind == "loopback":
            out.append(
                "    inet6 ::1/128 scope host \n"
                "       valid_lft forever preferred_lft forever\n"
            )
        elif itf.up:
            out.append(
                f"    inet6 {link_local(itf.mac)}/64 scope link \n"
                "       valid_lft forever preferred_lft forever\n"
            )
    return "".join(out)


def _route_line(r: Route) -> str:
    dst = "default" if r.dst == DEFAULT_ROUTE else str(r.dst)
    text = dst + (f" via {r.via}" if r.via else "") + f" dev {r.dev}"
    if r.proto == "kernel":
        text += " proto kernel"
    if r.scope != "global":
        text += f" scope {r.scope}"
    if r.src:
        text += f" src {r.src}"
    if r.onlink:
        text += " onlink"
    return text + " \n"


def ip_route(ns: Netns) -> str:
    """``ip route`` (the main table) of ``ns``, in the kernel's order: by prefix, the
    default route first (the FIB dumps by destination, not by length)."""
    routes = sorted(ns.routes, key=lambda r: (int(r.dst.network_address), r.dst.prefixlen))
    return "".join(_route_line(r) for r in routes)


def ip_neigh(host: Host, ips_by_int: Mapping[int, str] | None = None) -> str:
    """``ip neigh`` of ``host``: every entry, most recently added first (the kernel's
    hash-table dump order is not stable; svclab's is)."""
    from ipaddress import IPv4Address

    out = []
    for (dev, ip), entry in reversed(list(host.neighbors.items())):
        state = "PERMANENT" if entry.permanent else "REACHABLE"
        out.append(f"{IPv4Address(ip)} dev {dev} lladdr {entry.mac} {state} \n")
    return "".join(out)


IP_RULE = (
    "0:\tfrom all lookup local\n32766:\tfrom all lookup main\n32767:\tfrom all lookup default\n"
)


def ip_rule() -> str:
    """``ip rule``: the kernel's three default rules (no policy routing is modelled)."""
    return IP_RULE
