"""Read a namespace's network state back as plain, sorted text lines (links, addresses,
routes, neighbours, FDB), in the spirit of ``ip -br link``/``ip route``: for checking a
realised cluster against its model, for showing it, and for proving that a second
``realize`` changed nothing (two dumps compare equal)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

from dataplane.linux.links import NsLink
from netmodel.errors import BackendError

_SCOPE_NAMES = {0: "global", 253: "link", 254: "host"}
RTPROT_KERNEL = 2
NUD_PERMANENT = 0x80


@dataclass(frozen=True, slots=True)
class NetnsDump:
    """One namespace's state. ``links``: ``name kind mac mtu master up|down`` (+
    ``hairpin`` for a bridge port with hairpin on, ``peer=N`` for veths, the VXLAN
    parameters for VXLAN devices); ``addresses``: ``name ip/len``; ``routes``: like
    ``ip route`` in :meth:`netmodel.network.Route.describe` form (so model and kernel
    compare directly); ``neighbours``: permanent entries ``ip mac dev``; ``fdb``: VXLAN
    entries ``mac dev dst``."""

    links: tuple[str, ...]
    addresses: tuple[str, ...]
    routes: tuple[str, ...]
    neighbours: tuple[str, ...]
    fdb: tuple[str, ...]

    def link(self, name: str) -> str | None:
        return next((x for x in self.links if x.split()[0] == name), None)

    def is_up(self, name: str) -> bool | None:
        """Is link ``name`` up (None: no such link)?"""
        line = self.link(name)
        return None if line is None else line.split()[5] == "up"


@dataclass(frozen=True, slots=True)
class NetnsTables:
    """What readiness compares of a namespace, read by :func:`tables`: ``routes``,
    ``neighbours`` and ``fdb`` exactly as in :class:`NetnsDump`, and which links exist
    and are up."""

    links: frozenset[str]
    up: frozenset[str]
    routes: tuple[str, ...]
    neighbours: tuple[str, ...]
    fdb: tuple[str, ...]

    def is_up(self, name: str) -> bool | None:
        return None if name not in self.links else name in self.up


def _kind(link: Any) -> str:
    info = link.get_attr("IFLA_LINKINFO")
    kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
    return str(kind or ("loopback" if link.get_attr("IFLA_IFNAME") == "lo" else "device"))


def _link_line(link: Any, names: dict[int, str]) -> str:
    name = link.get_attr("IFLA_IFNAME")
    kind = _kind(link)
    master = names.get(link.get_attr("IFLA_MASTER") or 0, "-")
    up = "up" if link["flags"] & 1 else "down"
    parts = [name, kind, link.get_attr("IFLA_ADDRESS"), str(link.get_attr("IFLA_MTU")), master, up]
    if kind == "veth":
        parts.append("peer")  # the peer's index is per namespace; its name is not shown
    info = link.get_attr("IFLA_LINKINFO")
    port = info.get_attr("IFLA_INFO_SLAVE_DATA") if info is not None else None
    if port is not None and port.get_attr("IFLA_BRPORT_MODE"):
        parts.append("hairpin")
    if kind == "vxlan":
        data = link.get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_DATA")
        parts += [
            f"id={data.get_attr('IFLA_VXLAN_ID')}",
            f"local={data.get_attr('IFLA_VXLAN_LOCAL')}",
            f"port={data.get_attr('IFLA_VXLAN_PORT')}",
            f"learning={data.get_attr('IFLA_VXLAN_LEARNING')}",
            f"dev={names.get(data.get_attr('IFLA_VXLAN_LINK') or 0, '-')}",
        ]
    return " ".join(str(p) for p in parts)


def _route_line(r: Any, names: dict[int, str]) -> str:
    dst = r.get_attr("RTA_DST")
    text = "default" if dst is None else f"{dst}/{r['dst_len']}"
    if gw := r.get_attr("RTA_GATEWAY"):
        text += f" via {gw}"
    text += f" dev {names.get(r.get_attr('RTA_OIF') or 0, '?')}"
    if r["proto"] == RTPROT_KERNEL:  # as Route.describe(): only connected routes say so
        text += " proto kernel"
    if r["scope"]:
        text += f" scope {_SCOPE_NAMES.get(r['scope'], r['scope'])}"
    if src := r.get_attr("RTA_PREFSRC"):
        text += f" src {src}"
    if r["flags"] & 4:
        text += " onlink"
    return text


def dump(netns: str) -> NetnsDump:
    """The state of kernel namespace ``netns`` (IPv4 only; IPv6 link-local noise left
    out)."""
    with NsLink(netns) as lk:
        links = lk.links()
        names = {int(x["index"]): str(x.get_attr("IFLA_IFNAME")) for x in links}
        kinds = {int(x["index"]): _kind(x) for x in links}
        addrs = [
            f"{names.get(a['index'], '?')} {a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}"
            for a in lk.addresses()
        ]
        routes = [_route_line(r, names) for r in lk.routes()]
        neigh = [
            f"{n.get_attr('NDA_DST')} {n.get_attr('NDA_LLADDR')} {names.get(n['ifindex'], '?')}"
            for n in lk.neighbours()
            if n["state"] & NUD_PERMANENT
        ]
        fdb = [
            f"{f.get_attr('NDA_LLADDR')} {names.get(f['ifindex'], '?')} {f.get_attr('NDA_DST')}"
            for f in lk.fdb_entries()
            if kinds.get(f["ifindex"]) == "vxlan" and f.get_attr("NDA_DST")
        ]
    return NetnsDump(
        links=tuple(sorted(_link_line(x, names) for x in links)),
        addresses=tuple(sorted(addrs)),
        routes=tuple(sorted(routes)),
        neighbours=tuple(sorted(neigh)),
        fdb=tuple(sorted(fdb)),
    )


def _json_docs(netns: str, argv: list[str], stdin: str) -> list[Any]:
    try:
        proc = subprocess.run(
            [argv[0], "-n", netns, "-j", *argv[1:]],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BackendError(f"netns {netns}: {argv[0]}: {e}") from e
    if proc.returncode != 0:
        raise BackendError(f"netns {netns}: {argv[0]}: {proc.stderr.strip()}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def _json_route_line(r: dict[str, Any]) -> str:
    """:func:`_route_line` for one entry of ``ip -j route``."""
    dst = str(r.get("dst", "default"))
    text = dst if dst == "default" or "/" in dst else f"{dst}/32"
    if gw := r.get("gateway"):
        text += f" via {gw}"
    text += f" dev {r.get('dev', '?')}"
    if r.get("protocol") == "kernel":
        text += " proto kernel"
    if scope := r.get("scope"):
        text += f" scope {scope}"
    if src := r.get("prefsrc"):
        text += f" src {src}"
    if "onlink" in r.get("flags", ()):
        text += " onlink"
    return text


def tables(netns: str) -> NetnsTables:
    """The links, main-table routes, permanent neighbours and VXLAN FDB entries of
    ``netns``, in the same text as :func:`dump`, read by two iproute2 processes (``ip
    -j -batch`` and ``bridge -j fdb``) instead of pyroute2, whose Python decoding of
    every link and bridge-port entry made checking 40 nodes take seconds."""
    links, routes, neigh = _json_docs(
        netns, ["ip", "-batch", "-"], "link show\nroute show table main\nneigh show nud permanent\n"
    )
    [fdb] = _json_docs(netns, ["bridge", "fdb", "show"], "")
    return NetnsTables(
        links=frozenset(str(x["ifname"]) for x in links),
        up=frozenset(str(x["ifname"]) for x in links if "UP" in x.get("flags", ())),
        routes=tuple(sorted(_json_route_line(r) for r in routes)),
        neighbours=tuple(
            sorted(f"{n['dst']} {n.get('lladdr')} {n.get('dev', '?')}" for n in neigh)
        ),
        fdb=tuple(
            sorted(f"{f['mac']} {f.get('ifname', '?')} {f['dst']}" for f in fdb if "dst" in f)
        ),
    )
