"""The cluster drawn as a graph (Graphviz ``dot``, left to right): the underlay router,
each node as a box holding eth0 (node address), flannel.1 (VXLAN VNI, VTEP) or its
host-gw routes, the cni0 bridge (the podCIDR's gateway), one veth per pod and the pod's
eth0 with its IP (under Calico: the routes to the other nodes' blocks and one ``cali``
veth per pod, with proxy ARP); external clients on the underlay; Services on the right, each an
arrow to the pods behind its endpoints.

Pure: :func:`topology_graph` turns a :class:`~app.pictures.scene.Scene` into a
``graphviz.Digraph``; :func:`point_id` names the graph node of an interface so that
:mod:`app.pictures.path` can draw a packet over it.
"""

from __future__ import annotations

import graphviz

from app.pictures.scene import Scene, ServiceBox
from netmodel.network import Interface, Netns
from netmodel.topology import pod_ns

FONT = "Helvetica"
#: how many routes a node box lists before "... N more"
MAX_ROUTES = 4


def point_id(netns: str, dev: str) -> str:
    """The graph node of interface ``dev`` in ``netns`` (the router is one node)."""
    if netns == "router":
        return "router"
    return f"{netns}#{dev}"


def _addrs(itf: Interface) -> str:
    return ", ".join(str(a) for a in itf.addresses)


def new_graph(name: str) -> graphviz.Digraph:
    g = graphviz.Digraph(name, engine="dot")
    g.attr(rankdir="LR", fontname=FONT, fontsize="11", nodesep="0.15", ranksep="0.5")
    g.attr("node", fontname=FONT, fontsize="10", shape="box", style="rounded,filled")
    g.attr("edge", fontname=FONT, fontsize="9", color="#555555", arrowsize="0.6")
    return g


def _node_box(g: graphviz.Digraph, scene: Scene, ns: Netns) -> None:
    node = next(n for n in scene.nodes if n.name == ns.node)
    label = f"{node.name}\\n{node.ip}\\npodCIDR {node.pod_cidr or '(none yet)'}"
    with g.subgraph(name=f"cluster_{ns.name}") as c:
        c.attr(label=label, style="rounded", color="#3b6ea5", fontcolor="#1b3a5c")
        eth0 = ns.interface("eth0")
        c.node(point_id(ns.name, "eth0"), f"eth0\\n{_addrs(eth0)}", fillcolor="#dbe8f6")
        names = {i.name for i in ns.interfaces}
        if "cni0" in names:
            cni0 = ns.interface("cni0")
            c.node(
                point_id(ns.name, "cni0"),
                f"cni0 (bridge)\\n{_addrs(cni0)}\\nMTU {cni0.mtu}",
                fillcolor="#e6f2e6",
            )
        if "flannel.1" in names:
            fl = ns.interface("flannel.1")
            assert fl.vxlan is not None
            peers = scene.peers or sum(1 for r in ns.routes if r.dev == "flannel.1")
            c.node(
                point_id(ns.name, "flannel.1"),
                f"flannel.1 (VXLAN)\\nVNI {fl.vxlan.vni}, UDP {fl.vxlan.port}\\n"
                f"{_addrs(fl)}  VTEP {fl.mac}\\nroutes to {peers} peer podCIDRs",
                fillcolor="#fbeedd",
            )
            c.edge(
                point_id(ns.name, "eth0"),
                point_id(ns.name, "flannel.1"),
                dir="none",
                style="dashed",
                label="encap",
            )
            if "cni0" in names:
                c.edge(
                    point_id(ns.name, "flannel.1"),
                    point_id(ns.name, "cni0"),
                    dir="none",
                    style="dotted",
                    label="routed",
                )
        elif "cni0" in names:
            # the routes to the peers' podCIDRs (not the default route)
            routes = [
                r
                for r in ns.routes
                if r.dev == "eth0" and r.via is not None and r.dst is not None and r.dst.prefixlen
            ]
            lines = [f"{r.dst} via {r.via}" for r in routes[:MAX_ROUTES]]
            if len(routes) > MAX_ROUTES:
                lines.append(f"... {len(routes) - MAX_ROUTES} more")
            if scene.peers:
                lines = [f"{scene.peers} peer podCIDRs via their node IPs"]
            rid = point_id(ns.name, "routes")
            c.node(
                rid,
                "host-gw routes\\n" + "\\l".join(lines) + "\\l",
                shape="note",
                fillcolor="#fbeedd",
            )
            c.edge(point_id(ns.name, "eth0"), rid, dir="none", style="dotted")
            c.edge(rid, point_id(ns.name, "cni0"), dir="none", style="dotted")
        cali = [
            i
            for i in ns.interfaces
            if i.kind == "veth" and i.master is None and i.peer and i.name.startswith("cali")
        ]
        if cali and "cni0" not in names:
            _calico(c, scene, ns, cali)
        for itf in ns.interfaces:
            if itf.kind != "veth" or itf.master != "cni0" or itf.peer is None:
                continue
            vid = point_id(ns.name, itf.name)
            c.node(
                vid,
                itf.name,
                shape="box",
                style="filled",
                fillcolor="#f4f4f4",
                fontsize="8",
                height="0.2",
            )
            c.edge(point_id(ns.name, "cni0"), vid, dir="none")
            pod_netns = scene.network.namespaces.get(itf.peer[0])
            if pod_netns is not None:
                _pod_box(c, pod_netns, itf.peer[1], vid)


def _calico(c: graphviz.Digraph, scene: Scene, ns: Netns, cali: list[Interface]) -> None:
    """Calico's side of a node: its routes to the other nodes' blocks, and each pod's
    ``cali`` veth (proxy ARP, a /32 route) with the pod behind it."""
    routes = [r for r in ns.routes if r.dev == "eth0" and r.via is not None and r.dst.prefixlen]
    lines = [f"{r.dst} via {r.via}" for r in routes[:MAX_ROUTES]]
    if len(routes) > MAX_ROUTES:
        lines.append(f"... {len(routes) - MAX_ROUTES} more")
    rid = point_id(ns.name, "routes")
    c.node(
        rid,
        "Calico routes (BGP)\\n" + "\\l".join(lines or ["(no peer blocks)"]) + "\\l",
        shape="note",
        fillcolor="#fbeedd",
    )
    c.edge(point_id(ns.name, "eth0"), rid, dir="none", style="dotted")
    for itf in cali:
        assert itf.peer is not None
        vid = point_id(ns.name, itf.name)
        c.node(
            vid,
            f"{itf.name}\\nproxy ARP",
            shape="box",
            style="filled",
            fillcolor="#f4f4f4",
            fontsize="8",
            height="0.2",
        )
        c.edge(rid, vid, dir="none", style="dotted", label="/32")
        pod_netns = scene.network.namespaces.get(itf.peer[0])
        if pod_netns is not None:
            _pod_box(c, pod_netns, itf.peer[1], vid)


def _pod_box(c: graphviz.Digraph, ns: Netns, dev: str, veth_id: str) -> None:
    itf = ns.interface(dev)
    c.node(
        point_id(ns.name, dev),
        f"pod {ns.pod}\\n{dev} {_addrs(itf)}",
        fillcolor="#fff7c2",
        shape="box",
    )
    c.edge(veth_id, point_id(ns.name, dev), dir="none", label="veth")


def _service(g: graphviz.Digraph, svc: ServiceBox, drawn: set[str]) -> None:
    sid = service_id(svc.key)
    ports = ", ".join(svc.ports)
    ip = svc.cluster_ip or "no ClusterIP"
    targets = [(ep, point_id(pod_ns(ep.pod), "eth0") if ep.pod else "") for ep in svc.endpoints]
    hidden = sum(1 for _, t in targets if t not in drawn)
    more = f"\\n{hidden} endpoint(s) off the picture" if hidden else ""
    g.node(
        sid,
        f"Service {svc.key}\\n{svc.type} {ip}\\n{ports}{more}",
        shape="box3d",
        style="filled",
        fillcolor="#e9e1f5",
    )
    for ep, target in targets:
        if target in drawn:
            g.edge(
                target,
                sid,
                dir="back",
                color="#7a4fb5",
                style="dashed" if not ep.ready else "solid",
                label=ep.ip,
            )


def service_id(key: str) -> str:
    """The graph node of Service ``ns/name``."""
    return f"svc#{key}"


def topology_graph(scene: Scene, *, services: bool = True) -> graphviz.Digraph:
    """The scene as a graph. Node ids come from :func:`point_id`; every label names a
    device with its addresses, a node with its address and podCIDR, or a Service."""
    g = new_graph("topology")
    title = "cluster topology" + (f": node {scene.focus}" if scene.focus else "")
    g.attr(label=title, labelloc="t")
    underlay = scene.network.node_network
    g.node("router", f"underlay\\n{underlay or ''}", shape="cylinder", fillcolor="#eeeeee")
    drawn: set[str] = set()
    for ns in scene.network.namespaces.values():
        if ns.role == "node":
            _node_box(g, scene, ns)
            g.edge("router", point_id(ns.name, "eth0"), dir="none")
        elif ns.role == "external":
            eid = point_id(ns.name, "eth0")
            g.node(eid, f"client {ns.name[4:]}", shape="oval", fillcolor="#ffffff")
            g.edge(eid, "router", dir="none")
        elif ns.role == "pod":
            drawn.add(point_id(ns.name, "eth0"))
    if scene.focus and scene.peers:
        g.node("peers", f"{scene.peers} other nodes", shape="folder", fillcolor="#eeeeee")
        g.edge("router", "peers", dir="none", style="dashed")
    if services:
        for svc in scene.services:
            _service(g, svc, drawn)
    return g
