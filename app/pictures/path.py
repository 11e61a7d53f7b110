"""A packet's path drawn over the topology: the interfaces its trace crossed, in order,
as numbered arrows (request in red, reply in blue), with notes where a rule rewrote it
(the DNAT rule that chose the endpoint, the MASQUERADE/SNAT of the source) and where it
was encapsulated (VXLAN, with outer addresses and VNI).

Pure. The input is a trace's JSON form (:meth:`dataplane.emulator.trace.Trace.to_json`,
the CLI's contract), so any trace with that shape can be drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import graphviz

from app.pictures.scene import Scene
from app.pictures.topology import point_id, service_id, topology_graph

REQUEST_COLOUR = "#c62828"
REPLY_COLOUR = "#1565c0"
#: rule verdicts that make NAT decisions (iptables upper case, nftables lower case)
NAT_VERDICTS = ("DNAT", "SNAT", "MASQUERADE")


@dataclass(frozen=True, slots=True)
class Note:
    """Something that happened at one point of the path (``kind``: dnat, snat, vxlan)."""

    point: str
    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class Path:
    """The graph nodes a packet crossed, in order, and the notes along the way."""

    points: tuple[str, ...]
    notes: tuple[Note, ...]


def _ns(pid: str) -> str:
    return pid.rsplit("#", 1)[0]


def _is_pod(pid: str) -> bool:
    return pid.startswith("pod/")


def _veth_of(scene: Scene, pod_netns: str) -> str | None:
    ns = scene.network.namespaces.get(pod_netns)
    if ns is None:
        return None
    for itf in ns.interfaces:
        if itf.peer is not None and itf.name == "eth0":
            return point_id(itf.peer[0], itf.peer[1])
    return None


def _point(scene: Scene, netns: str, dev: str) -> str | None:
    if netns == "router":
        return "router"
    ns = scene.network.namespaces.get(netns)
    if ns is None:
        return None
    if ns.role in ("pod", "external"):
        return point_id(netns, "eth0")
    if dev in ("eth0", "cni0", "flannel.1") or any(
        i.name == dev and (i.master == "cni0" or (i.name.startswith("cali") and i.peer))
        for i in ns.interfaces
    ):
        return point_id(netns, dev)
    return None


def trace_path(scene: Scene, hops: Sequence[Mapping[str, Any]]) -> Path:
    """The path of one direction of a trace (its ``hops``) over ``scene``'s graph.

    ARP exchanges are left out (they are not the packet); a step between a pod and its
    node goes through the pod's host-side veth."""
    points: list[str] = []
    notes: list[Note] = []
    visit: set[str] = set()  # the points of the current stay in one namespace
    nat_rule: Mapping[str, Any] | None = None  # the NAT rule the next rewrite comes from

    def place(p: str) -> None:
        if points and points[-1] == p:
            return
        if points and _ns(points[-1]) != _ns(p):
            visit.clear()
        if p in visit:
            return
        visit.add(p)
        points.append(p)

    def add(pid: str) -> None:
        if points and _is_pod(points[-1]) != _is_pod(pid):
            pod = points[-1] if _is_pod(points[-1]) else pid
            veth = _veth_of(scene, _ns(pod))
            if veth is not None:
                node = scene.network.namespaces.get(_ns(veth))
                bridged = node is not None and any(i.name == "cni0" for i in node.interfaces)
                # into a pod: over its node's bridge (flannel), or routed straight to its
                # cali veth (Calico)
                between = [veth] if pod != pid or not bridged else [f"{_ns(veth)}#cni0", veth]
                for p in between:
                    place(p)
        place(pid)

    for h in hops:
        kind = h.get("kind")
        if kind == "arp":
            continue
        netns = str(h.get("netns", ""))
        devs = [h.get("dev_in"), h.get("dev_out")]
        if kind in ("send", "deliver") and not any(devs) and netns.startswith(("pod/", "ext/")):
            devs = ["eth0"]
        for dev in devs:
            if dev:
                pid = _point(scene, netns, str(dev))
                if pid is not None:
                    add(pid)
        here = points[-1] if points else point_id(netns, "eth0")
        verdict = str(h.get("verdict") or "").upper()
        if kind == "rule" and verdict in NAT_VERDICTS:
            nat_rule = h
        elif kind == "nat" and h.get("conntrack") == "NEW":
            notes.append(_nat_note(here, h, nat_rule))
            nat_rule = None
        elif kind == "vxlan":
            notes.append(Note(here, "vxlan", str(h.get("vxlan") or "")))
    return Path(tuple(points), tuple(notes))


def _nat_note(point: str, nat: Mapping[str, Any], rule: Mapping[str, Any] | None) -> Note:
    """The note of a connection's NAT decision (a ``nat`` hop of a NEW connection): the
    rewrite, and the rule that asked for it (iptables, nftables) or IPVS's choice."""
    source = "source" in str(nat.get("note") or "")
    if rule is not None:
        label = str(rule.get("verdict")).upper()
        where = f"{rule.get('table')}/{rule.get('chain')}" + (
            f" #{rule['rule_number']}" if rule.get("rule_number") else ""
        )
        why = f"{where}\\n{_wrap(str(rule.get('rule') or ''))}"
    else:
        label = "SNAT" if source else "DNAT"
        why = f"{nat.get('table')} {nat.get('hook')}: {nat.get('note') or ''}"
    text = f"{label}{' (source)' if source else ''} {nat.get('nat') or ''}\\n{why}"
    return Note(point, "snat" if source else "dnat", text)


def _wrap(text: str, width: int = 60) -> str:
    """Break a long rule into lines of about ``width`` characters, at spaces."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return "\\l".join(lines) + ("\\l" if lines else "")


def involved_nodes(scene: Scene, paths: Sequence[Path]) -> set[str]:
    """The nodes whose boxes a path crosses."""
    names = set()
    for p in paths:
        for pid in p.points:
            ns = scene.network.namespaces.get(pid.rsplit("#", 1)[0])
            if ns is not None and ns.node:
                names.add(ns.node)
    return names


def restrict(scene: Scene, nodes: set[str], service_ips: set[str]) -> Scene:
    """The scene cut down to ``nodes`` (and their pods) and the Services at
    ``service_ips``: a 20-node cluster's trace shows the two nodes it crossed."""
    net = scene.network
    keep = {
        k: ns
        for k, ns in net.namespaces.items()
        if ns.role in ("router", "external") or ns.node in nodes
    }
    return replace(
        scene,
        nodes=tuple(n for n in scene.nodes if n.name in nodes),
        pods=tuple(p for p in scene.pods if p.node in nodes),
        network=replace(net, namespaces=keep),
        services=tuple(s for s in scene.services if s.cluster_ip in service_ips),
    )


def _draw(g: graphviz.Digraph, path: Path, colour: str, prefix: str) -> None:
    for i, (a, b) in enumerate(zip(path.points, path.points[1:], strict=False), 1):
        g.edge(
            a,
            b,
            label=f"{prefix}{i}",
            color=colour,
            fontcolor=colour,
            penwidth="2.2",
            constraint="false",
            arrowsize="0.8",
        )
    fills = {"dnat": "#ffe0e0", "snat": "#ffe9c7", "vxlan": "#e0f0ff"}
    for j, note in enumerate(path.notes):
        nid = f"note#{prefix}{j}"
        g.node(
            nid,
            note.text,
            shape="note",
            style="filled",
            fillcolor=fills[note.kind],
            fontsize="8",
            color=colour,
        )
        g.edge(note.point, nid, style="dotted", dir="none", color=colour)


def path_graph(scene: Scene, trace: Mapping[str, Any]) -> graphviz.Digraph:
    """The topology of the nodes a trace crossed with its request path (red, numbered
    1, 2, ...) and its reply path (blue, r1, r2, ...), and the NAT and VXLAN notes."""
    request = trace_path(scene, trace.get("hops", []))
    reply_json = trace.get("reply") or {}
    reply = trace_path(scene, reply_json.get("hops", [])) if reply_json else Path((), ())
    dst = str((trace.get("packet") or {}).get("dst", ""))
    small = restrict(scene, involved_nodes(scene, [request, reply]), {dst})
    g = topology_graph(small)
    summary = (trace.get("packet") or {}).get("summary", "")
    delivered = trace.get("delivered_to") or {}
    where = f" to pod {delivered['pod']}" if delivered.get("pod") else ""
    masq = f"; source seen {trace.get('source_seen')}" if trace.get("source_seen") else ""
    g.attr(
        label=f"{summary}: {trace.get('verdict')}{where}{masq}\\n"
        "red: request (1, 2, ...)   blue: reply (r1, r2, ...)",
        labelloc="t",
    )
    if dst and any(s.cluster_ip == dst for s in small.services) and request.points:
        svc = next(s for s in small.services if s.cluster_ip == dst)
        g.edge(
            request.points[0],
            service_id(svc.key),
            style="dotted",
            color=REQUEST_COLOUR,
            label=f"to {dst}",
            constraint="false",
        )
    _draw(g, request, REQUEST_COLOUR, "")
    _draw(g, reply, REPLY_COLOUR, "r")
    return g
