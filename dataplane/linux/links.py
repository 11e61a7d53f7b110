"""Ensure-style netlink operations in one namespace (pyroute2).

Every ``ensure_*`` makes the kernel match the model value and is idempotent: "already
exists" (EEXIST) and "not found" (ENOENT/ESRCH/ENODEV on delete) are tolerated by
errno; an object that exists with a different kind raises BackendError, and so does
any other netlink error (naming the namespace, the operation and the errno). Routes and
neighbours use ``replace`` (atomic create-or-update). The netlink socket is opened
inside the namespace through :func:`dataplane.linux.nsenter.entered` (no fork).

Routes, neighbours and FDB entries grow with the square of the node count (each node
holds one of each per peer node), and pyroute2 spends about a millisecond of Python per
request on them. :func:`ensure_tables` therefore hands a whole namespace's tables to
``ip -batch`` and ``bridge -batch`` (iproute2 sends them one netlink request after the
other, in C): two processes per namespace instead of thousands of Python round trips.
"""

from __future__ import annotations

import errno
import re
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from ipaddress import IPv4Interface
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from dataplane.linux import nsenter
from dataplane.linux.names import check_ifname
from netmodel.errors import BackendError
from netmodel.network import DEFAULT_ROUTE, FdbEntry, Interface, Neighbor, Route

RTNH_F_ONLINK = 4
NUD_PERMANENT = 0x80
BRIDGE_MODE_HAIRPIN = 1
_UNKNOWN_KIND = "?"
_SCOPES = {"global": 0, "link": 253, "host": 254}


@contextmanager
def tolerate(*codes: int) -> Iterator[None]:
    """Swallow a NetlinkError whose errno is one of ``codes``."""
    try:
        yield
    except NetlinkError as e:
        if e.code not in codes:
            raise


class NsLink:
    """A netlink (rtnetlink) session bound to one namespace. Use as a context manager."""

    def __init__(self, netns: str) -> None:
        self.netns = netns
        with nsenter.entered(netns):
            self.ipr = IPRoute()
        # ifname -> (index, kind), filled by a link dump on first use, by a lookup on a
        # miss (a link another session made, e.g. a veth's peer end: kind unknown until
        # asked), and kept up to date by this session's own creations and deletions. A session is short-lived (realize
        # closes its sessions before the CNI plugins run), so nothing deletes a link
        # under it. Saves one netlink round trip per name lookup, which dominated
        # realising hundreds of devices.
        self._known: dict[str, tuple[int, str | None]] | None = None

    def __enter__(self) -> NsLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.ipr.close()

    @contextmanager
    def _op(self, what: str) -> Iterator[None]:
        """Report a netlink failure as BackendError naming namespace and operation."""
        try:
            yield
        except NetlinkError as e:
            raise BackendError(
                f"netns {self.netns}: {what}: {errno.errorcode.get(e.code, e.code)} {e.args[-1]}"
            ) from e

    # ------------------------------------------------------------------ queries
    def _table(self) -> dict[str, tuple[int, str | None]]:
        if self._known is None:
            self._known = {}
            for x in self.ipr.get_links():
                info = x.get_attr("IFLA_LINKINFO")
                kind = None if info is None else info.get_attr("IFLA_INFO_KIND")
                self._known[str(x.get_attr("IFLA_IFNAME"))] = (int(x["index"]), kind)
        return self._known

    def _learn(self, ifname: str, kind: str) -> int:
        """Record a link this session just created (one lookup) and return its index."""
        found = self.ipr.link_lookup(ifname=ifname)
        if not found:
            raise BackendError(f"netns {self.netns}: no interface {ifname}")
        self._table()[ifname] = (found[0], kind)
        return int(found[0])

    def index(self, ifname: str) -> int | None:
        known = self._table().get(ifname)
        if known is not None:
            return known[0]
        found = self.ipr.link_lookup(ifname=ifname)  # made by another session (a veth's
        if not found:  # peer end), or absent
            return None
        self._table()[ifname] = (int(found[0]), _UNKNOWN_KIND)
        return int(found[0])

    def must_index(self, ifname: str) -> int:
        idx = self.index(ifname)
        if idx is None:
            raise BackendError(f"netns {self.netns}: no interface {ifname}")
        return idx

    def kind(self, index: int) -> str | None:
        for idx, kind in self._table().values():
            if idx == index and kind != _UNKNOWN_KIND:
                return kind
        link = self.ipr.get_links(index)[0]
        info = link.get_attr("IFLA_LINKINFO")
        return None if info is None else info.get_attr("IFLA_INFO_KIND")

    def links(self) -> list[Any]:
        return list(self.ipr.get_links())

    def peer_index(self, ifname: str) -> int | None:
        """The index of veth ``ifname``'s peer in the peer's namespace (``IFLA_LINK``),
        or None when there is no such link or it has no peer."""
        idx = self.index(ifname)
        if idx is None:
            return None
        link = self.ipr.get_links(idx)[0].get_attr("IFLA_LINK")
        return None if link is None else int(link)

    def addresses(self) -> list[Any]:
        return list(self.ipr.get_addr(family=2))

    def routes(self) -> list[Any]:
        return list(self.ipr.get_routes(family=2, table=254))

    def neighbours(self) -> list[Any]:
        return list(self.ipr.get_neighbours(family=2))

    def fdb_entries(self) -> list[Any]:
        return list(self.ipr.fdb("dump"))

    # ------------------------------------------------------------------ links
    def _created(self, ifname: str, kind: str) -> int | None:
        """Index of an existing ``ifname`` if it has ``kind``; None if absent."""
        idx = self.index(ifname)
        if idx is not None and self.kind(idx) != kind:
            raise BackendError(
                f"netns {self.netns}: {ifname} exists as {self.kind(idx)}, expected {kind}"
            )
        return idx

    def ensure_bridge(self, itf: Interface) -> int:
        check_ifname(itf.name)
        idx = self._created(itf.name, "bridge")
        if idx is None:
            with self._op(f"bridge {itf.name}"), tolerate(errno.EEXIST):
                self.ipr.link("add", ifname=itf.name, kind="bridge", address=itf.mac, mtu=itf.mtu)
            idx = self._learn(itf.name, "bridge")
        return idx

    def ensure_dummy(self, itf: Interface) -> int:
        check_ifname(itf.name)
        idx = self._created(itf.name, "dummy")
        if idx is None:
            with self._op(f"dummy {itf.name}"), tolerate(errno.EEXIST):
                self.ipr.link("add", ifname=itf.name, kind="dummy", address=itf.mac, mtu=itf.mtu)
            idx = self._learn(itf.name, "dummy")
        return idx

    def ensure_veth(self, itf: Interface, peer_netns: str, peer: Interface) -> int:
        """Create a veth whose peer is born directly in ``peer_netns`` (it never exists
        in the root namespace, so a crash cannot leave it there)."""
        check_ifname(itf.name)
        check_ifname(peer.name)
        idx = self._created(itf.name, "veth")
        if idx is None:
            spec = {
                "ifname": peer.name,
                "net_ns_fd": nsenter.netns_path(peer_netns),
                "address": peer.mac,
                "mtu": peer.mtu,
            }
            with self._op(f"veth {itf.name} <-> {peer_netns}/{peer.name}"):
                self.ipr.link(
                    "add", ifname=itf.name, kind="veth", address=itf.mac, mtu=itf.mtu, peer=spec
                )
            idx = self._learn(itf.name, "veth")
        return idx

    def ensure_vxlan(self, itf: Interface) -> int:
        check_ifname(itf.name)
        vx = itf.vxlan
        if vx is None:
            raise BackendError(f"netns {self.netns}: {itf.name} has no VXLAN parameters")
        idx = self._created(itf.name, "vxlan")
        if idx is None:
            with self._op(f"vxlan {itf.name}"):
                self.ipr.link(
                    "add",
                    ifname=itf.name,
                    kind="vxlan",
                    address=itf.mac,
                    mtu=itf.mtu,
                    vxlan_id=vx.vni,
                    vxlan_local=str(vx.local),
                    vxlan_link=self.must_index(vx.dev),
                    vxlan_port=vx.port,
                    vxlan_learning=int(vx.learning),
                )
            idx = self._learn(itf.name, "vxlan")
        return idx

    def configure(self, itf: Interface) -> None:
        """Apply the attributes that may drift on an existing link: MAC, MTU, master,
        hairpin, addresses, up. Setting a value to what it already is is a no-op."""
        idx = self.must_index(itf.name)
        with self._op(f"configure {itf.name}"):
            if itf.kind != "loopback":
                attrs: dict[str, Any] = {"address": itf.mac, "mtu": itf.mtu}
                if itf.master is not None:
                    attrs["master"] = self.must_index(itf.master)
                if itf.up and not itf.addresses:
                    attrs["state"] = "up"  # one round trip instead of two
                self.ipr.link("set", index=idx, **attrs)
                if itf.master is not None and itf.hairpin:
                    self.ipr.brport("set", index=idx, mode=BRIDGE_MODE_HAIRPIN)
            for addr in itf.addresses:
                self.ensure_addr(idx, addr)
            if itf.up and (itf.kind == "loopback" or itf.addresses):
                self.ipr.link("set", index=idx, state="up")

    def ensure_addr(self, index: int, addr: IPv4Interface) -> None:
        """Add ``addr``; a loopback address (127/8) gets scope host, as the kernel gives
        ``lo``'s own: with scope global it would be a candidate source address for
        routes out of a device without one (Calico's ``cali…`` veths), and the kernel
        would pick 127.0.0.1 before the node's address."""
        extra: dict[str, Any] = {"scope": 254} if addr.ip.is_loopback else {}
        with self._op(f"address {addr}"), tolerate(errno.EEXIST):
            self.ipr.addr(
                "add",
                index=index,
                address=str(addr.ip),
                prefixlen=addr.network.prefixlen,
                **extra,
            )

    def set_up(self, ifname: str) -> None:
        with self._op(f"set {ifname} up"):
            self.ipr.link("set", index=self.must_index(ifname), state="up")

    def delete_link(self, ifname: str) -> None:
        idx = self.index(ifname)
        if idx is not None:
            with tolerate(errno.ENODEV, errno.ENOENT):
                self.ipr.link("del", index=idx)
            self._table().pop(ifname, None)

    # ------------------------------------------------------------------ tables
    def ensure_route(self, route: Route) -> None:
        """``ip route replace``; kernel-made connected routes (proto kernel) are skipped."""
        if route.proto == "kernel":
            return
        spec: dict[str, Any] = {
            "dst": "0.0.0.0/0" if route.dst == DEFAULT_ROUTE else str(route.dst),
            "oif": self.must_index(route.dev),
            "scope": _SCOPES[route.scope],
        }
        if route.via is not None:
            spec["gateway"] = str(route.via)
        if route.onlink:
            spec["flags"] = RTNH_F_ONLINK
        if route.src is not None:
            spec["prefsrc"] = str(route.src)
        with self._op(f"route {route.describe()}"):
            self.ipr.route("replace", **spec)

    def ensure_neigh(self, n: Neighbor) -> None:
        """``ip neigh replace IP lladdr MAC dev DEV nud permanent``."""
        with self._op(f"neighbour {n.ip}"):
            self.ipr.neigh(
                "replace",
                dst=str(n.ip),
                lladdr=n.mac,
                ifindex=self.must_index(n.dev),
                state=NUD_PERMANENT,
            )

    def ensure_fdb(self, f: FdbEntry) -> None:
        """``bridge fdb append MAC dev DEV dst IP`` (the kernel ignores an exact duplicate)."""
        spec: dict[str, Any] = {"ifindex": self.must_index(f.dev), "lladdr": f.mac}
        if f.dst is not None:
            spec["dst"] = str(f.dst)
        with self._op(f"fdb {f.mac}"), tolerate(errno.EEXIST):
            self.ipr.fdb("append", **spec)


# ---------------------------------------------------------------------- batched tables
_FAILED_LINE = re.compile(r"Command failed -:(\d+)")


def route_command(route: Route) -> str:
    """The ``ip route replace`` batch line of ``route`` (what :meth:`NsLink.ensure_route`
    sends: default proto, the model's scope, gateway, prefsrc and onlink). Pure."""
    dst = "0.0.0.0/0" if route.dst == DEFAULT_ROUTE else str(route.dst)
    text = f"route replace {dst}"
    if route.via is not None:
        text += f" via {route.via}"
    text += f" dev {route.dev} scope {route.scope}"
    if route.src is not None:
        text += f" src {route.src}"
    if route.onlink:
        text += " onlink"
    return text


def neigh_command(n: Neighbor) -> str:
    """``neigh replace IP lladdr MAC dev DEV nud permanent`` (one batch line). Pure."""
    return f"neigh replace {n.ip} lladdr {n.mac} dev {n.dev} nud permanent"


def fdb_command(f: FdbEntry) -> str:
    """``fdb append MAC dev DEV [dst IP]`` (one ``bridge -batch`` line). Pure."""
    return f"fdb append {f.mac} dev {f.dev}" + (f" dst {f.dst}" if f.dst is not None else "")


def _batch(netns: str, tool: str, lines: Sequence[tuple[str, str]]) -> None:
    """Run ``tool -n NETNS -batch -`` over the (command, what) ``lines``; on the first
    failure raise BackendError naming the namespace, the object and iproute2's error."""
    if not lines:
        return
    text = "".join(f"{cmd}\n" for cmd, _ in lines)
    try:
        proc = subprocess.run(
            [tool, "-n", netns, "-batch", "-"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BackendError(f"netns {netns}: {tool} -batch: {e}") from e
    if proc.returncode == 0:
        return
    err = proc.stderr.strip()
    m = _FAILED_LINE.search(err)
    what = lines[int(m.group(1)) - 1][1] if m and 0 < int(m.group(1)) <= len(lines) else tool
    why = next((x for x in err.splitlines() if x and not _FAILED_LINE.search(x)), err)
    raise BackendError(f"netns {netns}: {what}: {why or f'exit code {proc.returncode}'}")


def ensure_tables(
    netns: str,
    routes: Sequence[Route] = (),
    neighbours: Sequence[Neighbor] = (),
    fdb: Sequence[FdbEntry] = (),
) -> None:
    """What :meth:`NsLink.ensure_route`, :meth:`NsLink.ensure_neigh` and
    :meth:`NsLink.ensure_fdb` do for each entry, for a whole namespace in one ``ip
    -batch`` (routes, then neighbours) and one ``bridge -batch`` (FDB): idempotent
    (``replace``; the kernel ignores an FDB entry appended twice), links must exist and
    be up. Kernel-made connected routes are skipped. Raises BackendError naming the
    first entry the kernel refused."""
    lines = [
        *((route_command(r), f"route {r.describe()}") for r in routes if r.proto != "kernel"),
        *((neigh_command(n), f"neighbour {n.ip}") for n in neighbours),
    ]
    _batch(netns, "ip", lines)
    _batch(netns, "bridge", [(fdb_command(f), f"fdb {f.mac}") for f in fdb])
