"""Every hop of a trace, named by the Kubernetes object and field that made it.

:func:`annotate` fills each :class:`~dataplane.emulator.trace.Hop`'s ``objects`` from the
stored objects (an :class:`ObjectIndex`), for the request, its reply and every branch:

* kube-proxy's rules and NAT: a rule whose comment names a Service port
  (``default/web:http ...``) is that Service's ``spec.ports[i]``; a rule that sends to or
  DNATs to an endpoint (``-> 10.244.0.3:8080``, ``--to-destination``) is also that
  endpoint of its EndpointSlice (``endpoints[j]``) and the Pod behind it
  (``status.podIP``). kube-proxy's own chains (``kubernetes service portals``, a
  built-in chain's policy) are the Node's kube-proxy (``metadata.name``).
* a ``netpol`` hop is the NetworkPolicy rule it names (``spec.ingress[0].from[1]``).
* routes: a node's route to another node's pod range is that Node's ``spec.podCIDR``
  (flannel); a route to one pod's address is that Pod's ``status.podIP``; a pod's
  default route is its node's ``spec.podCIDR`` (the gateway is that range's first
  address, as the bridge CNI plugin sets it); node-network routes are the Node's
  ``status.addresses``.
* VXLAN: the remote Node (``status.addresses``, the tunnel's underlay address); ARP: the
  object owning the address asked for.
* anything else in a pod (send, conntrack, xmit, deliver) is that Pod
  (``status.podIP``), in a node that Node; in the underlay router or an external
  client, the object whose address the packet is addressed to (a Service's ClusterIP,
  NodePort or LoadBalancer ingress, a Node's address, a Pod's address).

Node dumps have no stored objects: :func:`refs_from_rule` names what a rule's comment
names (kube-proxy's ``NS/NAME:PORT``), unresolved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from ipaddress import ip_address, ip_network
from typing import Any

from dataplane.backends.kernel import RealTrace
from dataplane.emulator.trace import Hop, Trace
from netmodel.objectref import ObjectRef
from netmodel.objects import EndpointSlice, Node, Pod, Service

#: kube-proxy's comment: ``NS/NAME:PORT`` (or ``NS/NAME`` for an unnamed port) first
_COMMENT = re.compile(r'--comment\s+(?:"((?:[^"\\]|\\.)*)"|(\S+))')
_SVC_PORT = re.compile(r"^([a-z0-9][-a-z0-9.]*)/([a-z0-9][-a-z0-9.]*)(?::([-a-z0-9]+))?(?:\s|$)")
_TO_ENDPOINT = re.compile(r"-> \[?([0-9a-fA-F.:]+?)\]?:(\d+)")
_DNAT_TO = re.compile(r"--to-destination \[?([0-9a-fA-F.:]+?)\]?:(\d+)")
_ROUTE_DST = re.compile(r"\(route: (\S+)")
_ARP_ADDR = re.compile(r"(?:who-has|learned) (\S+)|^(\S+) is-at")
_VXLAN_DST = re.compile(r"dst (\S+)\)")
#: kube-proxy's nftables chains: ``service-HASH-NS/NAME/PROTO/PORT`` and the like,
#: ``endpoint-HASH-NS/NAME/PROTO/PORT__IP/PORT``
_NFT_CHAIN = re.compile(
    r"(?:service|external|endpoint|firewall)-[A-Z0-9]+-([^/\s]+)/([^/\s]+)/[a-z]+/([^_\s]*)"
    r"(?:__\[?([0-9a-fA-F.:]+?)\]?/(\d+))?"
)
_NAT = re.compile(r"^\[?([0-9a-fA-F.:]+?)\]?:(\d+) -> \[?([0-9a-fA-F.:]+?)\]?:(\d+)")
_JUMP = re.compile(r"-[jg] (\S+)")
_NETPOL = re.compile(r"^([a-z0-9][-a-z0-9.]*)/([a-z0-9][-a-z0-9.]*) ((?:ingress|egress)\S*)")

KUBE_PROXY, CNI, FLANNEL, KUBE_ROUTER = "kube-proxy", "kubelet (CNI ADD)", "flannel", "kube-router"


@dataclass
class ObjectIndex:
    """The stored objects a trace's hops are named by, indexed by what hops carry."""

    services: dict[str, Service]
    #: endpoint address -> (slice, index of the endpoint in it)
    endpoints: dict[str, list[tuple[EndpointSlice, int]]]
    pods_by_ip: dict[str, Pod]
    pods_by_key: dict[str, Pod]
    nodes: dict[str, Node]
    nodes_by_ip: dict[str, Node]
    #: node name -> its podCIDR (a network)
    pod_cidrs: dict[str, Any]
    #: Service address (ClusterIP, LoadBalancer ingress, external IP) -> Service
    service_ips: dict[str, tuple[Service, str]]

    @classmethod
    def of(cls, objects: Iterable[object]) -> ObjectIndex:
        """An index of ``objects`` (a store's Services, EndpointSlices, Pods, Nodes)."""
        idx = cls({}, {}, {}, {}, {}, {}, {}, {})
        for o in objects:
            if isinstance(o, Service):
                idx.services[o.key] = o
                for ip in o.spec.cluster_ips or ([o.spec.cluster_ip] if o.spec.cluster_ip else []):
                    if ip and ip != "None":
                        idx.service_ips[ip] = (o, "spec.clusterIPs")
                for i, ing in enumerate(o.status.load_balancer.ingress):
                    if ing.ip:
                        idx.service_ips[ing.ip] = (o, f"status.loadBalancer.ingress[{i}].ip")
                for i, ip in enumerate(o.spec.external_ips or []):
                    idx.service_ips[ip] = (o, f"spec.externalIPs[{i}]")
            elif isinstance(o, EndpointSlice):
                for j, ep in enumerate(o.endpoints):
                    for a in ep.addresses:
                        idx.endpoints.setdefault(a, []).append((o, j))
            elif isinstance(o, Pod):
                idx.pods_by_key[o.key] = o
                if o.status.pod_ip and not o.spec.host_network:
                    idx.pods_by_ip[o.status.pod_ip] = o
            elif isinstance(o, Node):
                idx.nodes[o.name] = o
                for na in o.status.addresses:
                    idx.nodes_by_ip[na.address] = o
                if o.spec.pod_cidr:
                    idx.pod_cidrs[o.name] = ip_network(o.spec.pod_cidr, strict=False)
        return idx

    @classmethod
    def from_store(cls, store: Any) -> ObjectIndex:
        objs: list[object] = []
        for kind in ("Service", "EndpointSlice", "Pod", "Node"):
            objs.extend(store.list(kind))
        return cls.of(objs)

    # ---- single objects

    def pod_ref(self, pod: Pod, by: str | None = CNI) -> ObjectRef:
        return ObjectRef("Pod", pod.namespace, pod.name, "status.podIP", by, pod.status.pod_ip)

    def node_ref(
        self,
        node: Node,
        field: str,
        by: str | None,
        detail: str | None = None,
        *,
        implicit: bool = False,
    ) -> ObjectRef:
        return ObjectRef("Node", None, node.name, field, by, detail, implicit)

    def service_port(self, ns: str, name: str, port: str | None) -> ObjectRef | None:
        svc = self.services.get(f"{ns}/{name}")
        if svc is None:
            return None
        for i, p in enumerate(svc.spec.ports):
            if (p.name or None) == (port or None):
                return ObjectRef(
                    "Service", ns, name, f"spec.ports[{i}]", KUBE_PROXY, f"port {p.name or p.port}"
                )
        return ObjectRef("Service", ns, name, "spec.ports", KUBE_PROXY, port)

    def endpoint(self, ip: str, port: int, service: str | None) -> list[ObjectRef]:
        """The EndpointSlice endpoint ``ip`` (of ``service``'s slices when known, serving
        ``port``) and the Pod behind it."""
        out: list[ObjectRef] = []
        for sl, j in self.endpoints.get(ip, []):
            if service is not None and f"{sl.namespace}/{sl.service_name}" != service:
                continue
            if sl.ports and not any(p.port == port for p in sl.ports):
                continue
            ep = sl.endpoints[j]
            out.append(
                ObjectRef(
                    "EndpointSlice",
                    sl.namespace,
                    sl.name,
                    f"endpoints[{j}]",
                    KUBE_PROXY,
                    f"endpoint {ip}",
                )
            )
            ref = ep.target_ref
            if ref is not None and ref.kind == "Pod":
                pod = self.pods_by_key.get(f"{ref.namespace}/{ref.name}")
                if pod is not None:
                    out.append(self.pod_ref(pod, None))
            break
        return out

    def owner_of_address(self, addr: str, by: str | None) -> ObjectRef | None:
        """The object an address belongs to: a Pod's, a Node's (its address, or its pod
        range's gateway), a Service's."""
        pod = self.pods_by_ip.get(addr)
        if pod is not None:
            return self.pod_ref(pod, by)
        node = self.nodes_by_ip.get(addr)
        if node is not None:
            return self.node_ref(node, "status.addresses", by, addr)
        svc = self.service_ips.get(addr)
        if svc is not None:
            return ObjectRef("Service", svc[0].namespace, svc[0].name, svc[1], KUBE_PROXY, addr)
        try:
            a = ip_address(addr)
        except ValueError:
            return None
        for name, net in self.pod_cidrs.items():
            if a in net:
                return self.node_ref(self.nodes[name], "spec.podCIDR", by, str(net))
        return None


def _chain_maker(chain: str, verdict: str) -> str | None:
    """The component whose rule it is: by its chain, or for a rule in a built-in chain
    by the chain it jumps to (kube-proxy's ``KUBE-*``, kube-router's policy chains,
    flannel's ``FLANNEL-*``); None for anything else."""
    target = verdict.removeprefix("jump ").removeprefix("goto ")
    for name in (chain, target):
        if name.startswith(("KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-")):
            return KUBE_ROUTER
        if name.startswith("KUBE-"):
            return KUBE_PROXY
        if name.startswith("FLANNEL"):
            return FLANNEL
    return None


def _comment(rule: str) -> str | None:
    m = _COMMENT.search(rule)
    if m is None:
        return None
    return m.group(1) if m.group(1) is not None else m.group(2)


def refs_from_rule(rule: str, chain: str = "") -> list[ObjectRef]:
    """What a rule names without the objects at hand (a node dump): the Service port of
    kube-proxy's comment ``NS/NAME:PORT`` or of its nftables chain name
    (``service-HASH-NS/NAME/PROTO/PORT``), the field left as ``spec.ports`` with the port
    name as detail; the endpoint a rule sends to or DNATs to is in the detail too (a
    dump does not name the EndpointSlice)."""
    m = _SVC_PORT.match(_comment(rule) or "")
    if m is not None:
        ns, name, port = m.group(1), m.group(2), m.group(3)
    else:
        n = _NFT_CHAIN.match(chain)
        if n is None:
            return []
        ns, name, port = n.group(1), n.group(2), n.group(3) or None
    said = [f"port {port}"] if port else []
    ep = _TO_ENDPOINT.search(_comment(rule) or "") or _DNAT_TO.search(rule)
    if ep is not None:  # the EndpointSlice's name is not in the dump: the address is
        said.append(f"endpoint {ep.group(1)}:{ep.group(2)}")
    return [ObjectRef("Service", ns, name, "spec.ports", KUBE_PROXY, ", ".join(said) or None)]


class _Namer:
    """Names the hops of one trace (the request, its reply, the branches)."""

    def __init__(self, idx: ObjectIndex, destination: ObjectRef | None, request_dst: str) -> None:
        self.idx = idx
        self.destination = destination
        self.request_dst = request_dst
        self.last_service: str | None = None
        self.last_nat: tuple[ObjectRef, ...] = ()
        #: the destination of the last packet a hop carried (the underlay's hops name
        #: the node a VXLAN packet goes to, not the Service inside it)
        self.last_dst: str | None = None

    def netns_owner(self, netns: str, by: str | None = None) -> tuple[ObjectRef, ...]:
        """The Pod or Node whose network namespace it is; outside them, the owner of the
        last packet's destination, else the request's destination."""
        if netns.startswith("pod/"):
            pod = self.idx.pods_by_key.get(netns[4:])
            if pod is not None:
                return (replace(self.idx.pod_ref(pod, by or CNI), implicit=True),)
        elif netns.startswith("node/"):
            node = self.idx.nodes.get(netns[5:])
            if node is not None:
                return (self.idx.node_ref(node, "metadata.name", by, implicit=True),)
        elif self.last_dst is not None and self.last_dst != self.request_dst:
            ref = self.idx.owner_of_address(self.last_dst, None)
            if ref is not None:
                return (ref,)
        return (self.destination,) if self.destination is not None else ()

    def rule(self, h: Hop) -> tuple[ObjectRef, ...]:
        rule = h.rule or ""
        out: list[ObjectRef] = []
        text = _comment(rule)
        m = _SVC_PORT.match(text or "")
        if m is not None:
            ref = self.idx.service_port(m.group(1), m.group(2), m.group(3))
            if ref is not None:
                out.append(ref)
                self.last_service = f"{m.group(1)}/{m.group(2)}"
        ep = _TO_ENDPOINT.search(text or "") or _DNAT_TO.search(rule)
        if ep is not None:
            out.extend(self.idx.endpoint(ep.group(1), int(ep.group(2)), self.last_service))
        if not out:  # nftables: the chain, or the chain a verdict map sent the packet to
            for name in (h.chain or "", (h.verdict or "").split(" ")[-1]):
                n = _NFT_CHAIN.match(name)
                if n is None:
                    continue
                ref = self.idx.service_port(n.group(1), n.group(2), n.group(3) or None)
                if ref is not None:
                    out.append(ref)
                    self.last_service = f"{n.group(1)}/{n.group(2)}"
                if n.group(4):
                    out.extend(self.idx.endpoint(n.group(4), int(n.group(5)), self.last_service))
                break
            if "dnat to" in rule:
                self.last_nat = tuple(out)
        if "-j DNAT" in rule or "-j REDIRECT" in rule:
            self.last_nat = tuple(out)
        if out:
            return tuple(out)
        return self.netns_owner(h.netns, _chain_maker(h.chain or "", h.verdict or ""))

    def nat(self, h: Hop) -> tuple[ObjectRef, ...]:
        """A destination rewrite from a Service address (IPVS's scheduler, or a DNAT rule
        before it) is that Service port and the endpoint chosen; else what the last
        DNAT rule named."""
        m = _NAT.match(h.nat or "")
        if m is not None:
            svc = self.idx.service_ips.get(m.group(1))
            if svc is not None:
                s_, port = svc[0], int(m.group(2))
                for i, sp in enumerate(s_.spec.ports):
                    if sp.port == port:
                        refs = [
                            ObjectRef(
                                "Service",
                                s_.namespace,
                                s_.name,
                                f"spec.ports[{i}]",
                                KUBE_PROXY,
                                f"port {sp.name or sp.port}",
                            ),
                            *self.idx.endpoint(m.group(3), int(m.group(4)), s_.key),
                        ]
                        self.last_nat = tuple(refs)
                        return self.last_nat
        return self.last_nat or self.netns_owner(h.netns, KUBE_PROXY)

    def netpol(self, h: Hop) -> tuple[ObjectRef, ...]:
        m = _NETPOL.match(h.note or "")
        if m is None:
            return self.netns_owner(h.netns)
        ns, name, path = m.groups()
        return (ObjectRef("NetworkPolicy", ns, name, f"spec.{path}", KUBE_ROUTER),)

    def route(self, h: Hop) -> tuple[ObjectRef, ...]:
        m = _ROUTE_DST.search(h.route or "")
        dst = m.group(1) if m else None
        if dst is not None and dst != "default":
            try:
                net = ip_network(dst, strict=False)
            except ValueError:
                net = None
            if net is not None:
                for name, cidr in self.idx.pod_cidrs.items():
                    if net == cidr:
                        return (
                            self.idx.node_ref(
                                self.idx.nodes[name], "spec.podCIDR", FLANNEL, str(cidr)
                            ),
                        )
                if net.num_addresses == 1:
                    ref = self.idx.owner_of_address(str(net.network_address), CNI)
                    if ref is not None:
                        return (ref,)
        if h.netns.startswith("pod/"):
            pod = self.idx.pods_by_key.get(h.netns[4:])
            if pod is not None and pod.spec.node_name in self.idx.pod_cidrs:
                node = self.idx.nodes[pod.spec.node_name]
                return (
                    self.idx.pod_ref(pod),
                    self.idx.node_ref(node, "spec.podCIDR", CNI, node.spec.pod_cidr),
                )
        if h.netns.startswith("node/"):
            here = self.idx.nodes.get(h.netns[5:])
            if here is not None:
                addr = here.status.addresses[0].address if here.status.addresses else None
                return (self.idx.node_ref(here, "status.addresses", None, addr),)
        return self.netns_owner(h.netns)

    def by_address(self, addr: str | None, h: Hop, by: str | None) -> tuple[ObjectRef, ...]:
        if addr:
            ref = self.idx.owner_of_address(addr.rstrip(","), by)
            if ref is not None:
                return (ref,)
        return self.netns_owner(h.netns)

    def name(self, h: Hop) -> tuple[ObjectRef, ...]:
        if h.packet is not None:
            self.last_dst = str(h.packet.dst)
        if h.kind in ("rule", "policy"):
            if h.kind == "policy":
                return self.netns_owner(h.netns)
            return self.rule(h)
        if h.kind == "nat":
            return self.nat(h)
        if h.kind == "netpol":
            return self.netpol(h)
        if h.kind == "route":
            return self.route(h)
        if h.kind == "vxlan":
            m = _VXLAN_DST.search(h.vxlan or "")
            return self.by_address(m.group(1) if m else None, h, FLANNEL)
        if h.kind == "arp":
            m = _ARP_ADDR.search(h.arp or "")
            addr = (m.group(1) or m.group(2)) if m else None
            return self.by_address(addr, h, None)
        return self.netns_owner(h.netns)

    def trace(self, t: Trace) -> Trace:
        hops = tuple(replace(h, objects=self.name(h)) for h in t.hops)
        reply = self.trace(t.reply) if t.reply is not None else None
        branches = tuple(
            (p, _Namer(self.idx, self.destination, self.request_dst).trace(b))
            for p, b in t.branches
        )
        return replace(t, hops=hops, reply=reply, branches=branches)


def annotate(trace: Any, idx: ObjectIndex) -> Any:
    """``trace`` (a :class:`Trace`, or an object holding one as ``.trace``, such as a
    trace to a DNS name; or the kernel's :class:`~dataplane.backends.kernel.RealTrace`,
    whose rule hits are named as the emulator's rule hops) with every hop's ``objects``
    filled; see the module docstring."""
    if isinstance(trace, RealTrace):
        return _annotate_real(trace, idx)
    inner = getattr(trace, "trace", None)
    if isinstance(inner, Trace):
        trace.trace = annotate(inner, idx)
        return trace
    if not isinstance(trace, Trace):
        return trace
    return _Namer(idx, _destination(trace, idx), str(trace.packet.dst)).trace(trace)


def _annotate_real(trace: RealTrace, idx: ObjectIndex) -> RealTrace:
    """The kernel's rule hits named like the emulator's rule hops, in their order."""
    namer = _Namer(idx, idx.owner_of_address(str(trace.flow.get("to", "")), None), "")
    hits = []
    for r in trace.rules:
        target = _JUMP.search(r.rule)
        hop = Hop(
            kind="rule",
            netns=f"node/{r.node}",
            table=r.table,
            chain=r.chain,
            rule=r.rule,
            verdict=f"jump {target.group(1)}" if target else None,
        )
        hits.append(replace(r, objects=namer.name(hop)))
    return replace(trace, rules=tuple(hits))


def _destination(trace: Trace, idx: ObjectIndex) -> ObjectRef | None:
    """The object the request is addressed to: a Service port by its NodePort on a node's
    address, else the owner of the destination address."""
    p = trace.packet
    dst = str(p.dst)
    if dst in idx.nodes_by_ip and p.proto in ("tcp", "udp", "sctp"):
        for svc in idx.services.values():
            for i, sp in enumerate(svc.spec.ports):
                if sp.node_port == p.dport and (sp.protocol or "TCP").lower() == p.proto:
                    return ObjectRef(
                        "Service",
                        svc.namespace,
                        svc.name,
                        f"spec.ports[{i}].nodePort",
                        KUBE_PROXY,
                        f"nodePort {sp.node_port}",
                    )
    return idx.owner_of_address(dst, None)


__all__ = ["ObjectIndex", "annotate", "refs_from_rule"]
