"""The emulated cluster: every namespace of a :class:`~netmodel.network.ClusterNetwork`
with its devices, its netfilter and its sockets, and the operations the CLI offers.

Operations (each returns frozen values from :mod:`.trace` or this module):

* :meth:`EmulatedCluster.trace` — one packet and its answer, hop by hop;
* :meth:`EmulatedCluster.trace_all` — the same for every branch of every random choice
  (``--all``): each reachable endpoint with its probability, in rule order; the cluster's
  state is left as it was;
* :meth:`EmulatedCluster.ping` — ICMP echo requests and their replies (TTL, path);
* :meth:`EmulatedCluster.connect` — N connections opened far enough that conntrack
  reaches ESTABLISHED/ASSURED (TCP: SYN, SYN-ACK, ACK, data both ways);
* :meth:`EmulatedCluster.conntrack` — a node's conntrack table;
* :meth:`EmulatedCluster.pcap` — a trace's frames as a pcap file.

Addresses: ``src``/``dst`` are a logical namespace name (``pod/NS/NAME``,
``node/NAME``, ``router``, ``ext/IP``) or an IP. A source IP must belong to a namespace
(an IP no namespace owns is an external client, which the topology builder must have
added). A destination IP may be anything (a ClusterIP, a NodePort address, ...);
``IP:PORT`` sets the port too.

Determinism: one seed drives source ports, ICMP identifiers and every random rule
decision; time comes from ``clock`` (a :class:`~dataplane.netfilter.conntrack.SimClock`
unless one is given).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from ipaddress import IPv4Interface, ip_address
from pathlib import Path
from random import Random
from typing import Any, Literal

from dataplane.emulator.devices import Bridge, Device, Epoch, make_device
from dataplane.emulator.filters import (
    CompiledRules,
    EngineFilter,
    TrackingFilter,
)
from dataplane.emulator.host import Host
from dataplane.emulator.ports import EPHEMERAL_PORTS, EphemeralPorts
from dataplane.emulator.results import ConnResult, ConntrackEntry, PingResult
from dataplane.emulator.trace import DeliveredTo, EndpointChance, Trace
from dataplane.emulator.traffic import SCTP_INIT, Answerer, Endpoints
from dataplane.emulator.walk import Walker, WalkResult
from dataplane.netfilter.choice import Chooser, NthCounter, RandomChooser, explore
from dataplane.netfilter.conntrack import (
    Clock,
    SimClock,
)
from netmodel.errors import InputError
from netmodel.ip import IPAddress
from netmodel.lazy import LazyMapping
from netmodel.network import ClusterNetwork, Interface, Netns, stable_mac
from netmodel.packet import ICMP_ECHO_REQUEST, Packet
from netmodel.resolvconf import ResolvConf
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules, RulesetInput
from netmodel.topology import LazyClusterNetwork, NodeInfo

Proto = Literal["tcp", "udp", "icmp"]
_P31 = 2**31

__all__ = [
    "ConnResult",
    "ConntrackEntry",
    "EmulatedCluster",
    "IptablesRules",
    "IpvsRules",
    "NftRules",
    "PingResult",
    "RulesetInput",
]


_ADDR_TEXT: dict[IPAddress, str] = {}


def _addr_text(addr: IPAddress) -> str:
    """``str(addr)``, memoised: results name the cluster's few addresses over and over,
    and formatting one is several Python calls."""
    text = _ADDR_TEXT.get(addr)
    if text is None:
        if len(_ADDR_TEXT) > 100_000:
            _ADDR_TEXT.clear()
        text = _ADDR_TEXT[addr] = str(addr)
    return text


class _ProbChooser:
    """A seeded chooser that also multiplies the probabilities of the decisions it took
    (the chance of the branch a single trace followed)."""

    __slots__ = ("inner", "p")

    def __init__(self, inner: Chooser) -> None:
        self.inner = inner
        self.p = 1.0

    def bernoulli(self, threshold: int) -> bool:
        hit = self.inner.bernoulli(threshold)
        q = threshold / _P31
        self.p *= q if hit else 1.0 - q
        return hit

    def nth(self, counter: NthCounter, every: int, packet: int, commit: bool) -> bool:
        hit = self.inner.nth(counter, every, packet, commit)
        q = 1.0 / every
        self.p *= q if hit else 1.0 - q
        return hit

    def uniform(self, n: int) -> int:
        self.p *= 1.0 / n
        return self.inner.uniform(n)



@dataclass(slots=True)
class _Snapshot:
    filters: dict[str, Any]
    neighbors: dict[str, dict[Any, Any]]
    fdbs: dict[tuple[str, str], dict[str, Any]]
    endpoints: Endpoints
    rng: Any
    ports: dict[Any, Any] = field(default_factory=dict)


class EmulatedCluster:
    """The whole emulated network (see the module docstring).

    ``rulesets``: per node name, that node's rules (:data:`RulesetInput`); nodes without
    an entry, pods, the router and external clients accept everything (conntrack still
    tracks their connections). ``listeners``: per namespace name, the ``(proto, port)``
    pairs its sockets listen on. ``local_addresses``: per node name, extra addresses
    (``IP`` or ``IP/32``) that are LOCAL on that node (IPVS binds Service IPs to a
    ``kube-ipvs0`` dummy device: they are added as such a device). ``answerers``: per
    namespace, servers that compute their answer's payload from the request's
    (``(proto, port) -> function``, see :mod:`.traffic`): the DNS pods.
    ``resolv_confs``: per pod namespace, its resolv.conf (:mod:`.resolver` reads it).
    ``compiled_cache``: parsed and compiled rules by ruleset, shared with other
    clusters (e.g. kept on disk, see :mod:`control.rulecache`); by default this
    cluster's own.
    ``port_range``: each namespace's ephemeral ports (``net.ipv4.ip_local_port_range``);
    client sockets take their source ports from it and give them back when they close
    (TCP after TIME_WAIT on ``clock``): see :mod:`.ports`. A socket that finds none
    raises :class:`~dataplane.emulator.ports.AddressNotAvailable` (``EADDRNOTAVAIL``).

    Laziness: ``network``, ``rulesets`` and ``local_addresses`` may be lazy mappings
    (:class:`netmodel.lazy.LazyMapping`); a namespace's host and filter are built when a
    walk or a question first reaches it, and only then are its rules looked up.
    """

    def __init__(
        self,
        network: ClusterNetwork,
        rulesets: Mapping[str, RulesetInput] | None = None,
        listeners: Mapping[str, Iterable[tuple[str, int]]] | None = None,
        local_addresses: Mapping[str, Iterable[str]] | None = None,
        *,
        seed: int = 0,
        clock: Clock | None = None,
        answerers: Mapping[str, Mapping[tuple[str, int], Answerer]] | None = None,
        resolv_confs: Mapping[str, ResolvConf] | None = None,
        compiled_cache: MutableMapping[RulesetInput, CompiledRules] | None = None,
        port_range: tuple[int, int] = EPHEMERAL_PORTS,
    ) -> None:
        self.network = network
        self.clock: Clock = clock or SimClock()
        self.seed = seed
        self._rng = Random(seed)
        self._base_chooser: Chooser = RandomChooser(Random(seed * 7919 + 1))
        self._chooser_box: list[Chooser] = [self._base_chooser]
        # rulesets and local addresses may be lazy mappings (netmodel.lazy): look a
        # node's up only when its host or filter is built
        self._rulesets: Mapping[str, RulesetInput] = rulesets or {}
        self._ruleset_key = {_node_key(k): k for k in self._rulesets}
        self._local = local_addresses or {}
        self._local_key = {_node_key(k): k for k in self._local}
        self.epoch = Epoch()
        #: each namespace's devices, routes and neighbours, built when a walk (or a
        #: question) first reaches it (see :meth:`_make_host`)
        self.hosts: LazyMapping[str, Host] = LazyMapping(network.namespaces, self._make_host)
        self._peer_of: dict[tuple[str, str], tuple[str, str]] = {}
        for pair in network.veths:
            self._peer_of[pair.a] = pair.b
            self._peer_of[pair.b] = pair.a
        #: the veth ends made so far, by (namespace, device): those of built hosts, and
        #: the far ends of their veths (made alone: see _make_host)
        self._veth_ends: dict[tuple[str, str], Device] = {}
        #: per built host, its neighbours and bridge FDBs when it was built
        self._pristine_l2: dict[str, tuple[dict[Any, Any], dict[str, dict[str, Any]]]] = {}
        self._owners: dict[IPAddress, str] | None = None
        unknown = set(self._ruleset_key) - self._node_names()
        if unknown:
            raise InputError(f"no such node(s): {sorted(unknown)}", field="rulesets")
        self._compiled: MutableMapping[RulesetInput, CompiledRules] = (
            compiled_cache if compiled_cache is not None else {}
        )
        #: per built filter, its state and conntrack position when it was built (what an
        #: eagerly built, untouched filter holds at any snapshot)
        self._pristine: dict[str, tuple[object, int]] = {}
        #: each namespace's netfilter, built when a packet (or a question) first reaches
        #: it: only the nodes a walk visits compile their rules
        self.filters: LazyMapping[str, EngineFilter | TrackingFilter] = LazyMapping(
            self.hosts, self._make_filter
        )
        self.endpoints = Endpoints.from_listeners(listeners or {})
        self.endpoints.answerers = {k: dict(v) for k, v in (answerers or {}).items()}
        #: each pod namespace's resolver configuration (what its libc reads)
        self.resolv_confs: Mapping[str, ResolvConf] = (
            resolv_confs if isinstance(resolv_confs, LazyMapping) else dict(resolv_confs or {})
        )
        self.walker = Walker(
            self.hosts, self.filters, self.endpoints, self.epoch, arp_skip=self._cannot_own
        )
        try:
            #: the client sockets' source ports (see :mod:`.ports`)
            self.ports = EphemeralPorts(self._rng, self.clock.now, port_range)
        except ValueError as e:
            raise InputError(str(e), field="port_range") from None
        self._destinations: dict[str, tuple[IPAddress, int | None]] = {}

    def _extra(self, node: str) -> list[IPAddress]:
        key = self._local_key.get(node)
        if key is None:
            return []
        return [ip_address(a.split("/", 1)[0]) for a in self._local[key]]

    # ------------------------------------------------------------------ lazy build

    def _node_names(self) -> set[str]:
        if isinstance(self.network, LazyClusterNetwork) and self.network.plan is not None:
            return {n.name for n in self.network.plan.nodes}
        return {ns.node for ns in self.network.namespaces.values() if ns.role == "node" and ns.node}

    def _node_of(self, ns: str) -> str | None:
        """The node whose namespace ``ns`` is (None: not a node's), building nothing."""
        net = self.network
        if isinstance(net, LazyClusterNetwork) and net.plan is not None:
            what = net.plan.what.get(ns)
            if what is None or what[0] != "node":
                return None
            info = what[1]
            assert isinstance(info, NodeInfo)
            return info.name
        netns = net.namespaces.get(ns)
        return netns.node if netns is not None and netns.role == "node" else None

    def _interface(self, ns: str, name: str) -> Interface:
        if isinstance(self.network, LazyClusterNetwork):
            return self.network.interface(ns, name)
        return self.network.namespaces[ns].interface(name)

    def _owner_name(self, ip: IPAddress) -> str | None:
        if isinstance(self.network, LazyClusterNetwork):
            return self.network.owner_name(ip)
        if self._owners is None:
            owners: dict[IPAddress, str] = {}
            for ns in self.network.namespaces.values():
                for itf in ns.interfaces:
                    if itf.kind != "loopback":
                        for a in itf.addresses:
                            owners.setdefault(a.ip, ns.name)
            self._owners = owners
        return self._owners.get(ip)

    def _cannot_own(self, name: str, addr: IPAddress) -> bool:
        """Whether namespace ``name`` is not built yet and holds no address ``addr``: an
        ARP request flooded to it goes unanswered there, so it need not be built (the
        walker asks before building the far end of a veth that is no bridge port)."""
        if self.hosts.is_built(name):
            return False
        if self._local and self._node_of(name) in self._local_key:
            # a node with extra local addresses (IPVS binds Service addresses, which may
            # be anything, a node's own included): build it and look
            return False
        owner = self._owner_name(addr)
        # an address no namespace holds may still be local somewhere: build and look
        return owner is not None and owner != name

    def _make_host(self, name: str) -> Host:
        """Build namespace ``name``'s host and join its veths to their far ends. A far
        end that is a bridge port is built with its host (its bridge matters to the
        walk); another is made alone, as a device, and taken by its host when that is
        built (so a router with a port per node builds no node)."""
        ns = self.network.namespaces[name]
        node_extra = self._extra(ns.node or "") if ns.role == "node" else []
        made = {
            i.name: dev
            for i in ns.interfaces
            if (dev := self._veth_ends.get((name, i.name))) is not None
        }
        host = Host(_with_dummy(ns, node_extra), self.epoch, made=made)
        ends = [(d, self._peer_of[(name, d)]) for d in host.devices if (name, d) in self._peer_of]
        for d, _ in ends:
            self._veth_ends[(name, d)] = host.devices[d]
        for d, far in ends:
            dev = host.devices[d]
            peer = self._veth_ends.get(far)
            if peer is None:
                itf = self._interface(*far)
                if itf.master is not None:
                    self.hosts[far[0]]
                    peer = self._veth_ends[far]
                else:
                    peer = self._veth_ends[far] = make_device(far[0], itf)
            dev.peer, peer.peer = peer, dev
        self._pristine_l2[name] = (
            dict(host.neighbors),
            {d.name: dict(d.fdb) for d in host.devices.values() if isinstance(d, Bridge)},
        )
        return host

    def _make_filter(self, name: str) -> EngineFilter | TrackingFilter:
        host = self.hosts[name]
        key = self._ruleset_key.get(host.node or "") if host.role == "node" else None
        f: EngineFilter | TrackingFilter
        if key is None:
            f = TrackingFilter(name, self.clock)
        else:
            f = EngineFilter.build(
                name,
                self._rulesets[key],
                local_addrs=host.local_addresses,
                iface_addrs={d.name: [a.ip for a in d.addresses] for d in host.devices.values()},
                clock=self.clock,
                chooser_box=self._chooser_box,
                seed=self.seed,
                cache=self._compiled,
            )
        self._pristine[name] = (f.snapshot(), f.conntrack.mark())
        return f

    # ------------------------------------------------------------------ addresses

    def resolve_source(self, src: str) -> tuple[Host, IPAddress | None]:
        """The namespace a source names and, when it was given as an IP, that address."""
        name = src.strip()
        if name in self.hosts:
            return self.hosts[name], None
        try:
            addr = ip_address(name)
        except ValueError:
            raise InputError(f"unknown source {src!r} (want pod/NS/NAME, node/NAME or an IP)",
                             field="--from") from None
        owner = self.network.owner_of(addr)
        if owner is None:
            raise InputError(
                f"{addr} is no address of the cluster network; an external client must be "
                f"added to the network (topology.build(external_clients=...))",
                field="--from",
            )
        return self.hosts[owner.name], addr

    def resolve_destination(self, dst: str) -> tuple[IPAddress, int | None]:
        """The address (and port, for ``IP:PORT``) a destination names."""
        hit = self._destinations.get(dst)
        if hit is None:
            hit = self._destinations[dst] = self._resolve_destination(dst)
        return hit

    def _resolve_destination(self, dst: str) -> tuple[IPAddress, int | None]:
        name = dst.strip()
        if name in self.hosts:
            host = self.hosts[name]
            addr = host.primary_address()
            if addr is None:
                raise InputError(f"{name} has no address", field="--to")
            return addr, None
        text, port = name, None
        if name.count(":") == 1:
            text, _, p = name.partition(":")
            if not p.isdigit():
                raise InputError(f"bad port in {dst!r}", field="--to")
            port = int(p)
        try:
            return ip_address(text), port
        except ValueError:
            raise InputError(f"unknown destination {dst!r} (want pod/NS/NAME, node/NAME, "
                             f"IP or IP:PORT)", field="--to") from None

    def dns_id(self) -> int:
        """A DNS message ID for a question a socket of the cluster sends (seeded)."""
        return self._rng.randint(0, 65535)

    def _ephemeral(self, netns: str, proto: str, src: IPAddress, dst: IPAddress, dport: int) -> int:
        """A source port for a new client socket (held until :meth:`_close`); raises
        :class:`~dataplane.emulator.ports.AddressNotAvailable` when there is none."""
        return self.ports.connect(netns, proto, src, dst, dport)

    # ------------------------------------------------------------------ packets

    def _request(
        self,
        src: str,
        dst: str,
        proto: str,
        dport: int | None,
        sport: int | None,
        *,
        ttl: int = 64,
        length: int | None = None,
        df: bool = True,
        payload: bytes = b"",
    ) -> tuple[Host, Packet]:
        if proto not in ("tcp", "udp", "icmp", "sctp"):
            raise InputError(
                f"unsupported protocol {proto!r} (tcp, udp, icmp, sctp)", field="--proto"
            )
        host, src_ip = self.resolve_source(src)
        daddr, dst_port = self.resolve_destination(dst)
        if dport is None:
            dport = dst_port
        if proto != "icmp" and dport is None:
            raise InputError("a destination port is needed for tcp/udp/sctp", field="--to")
        if src_ip is None:
            src_ip = host.fib.lookup(daddr).src or host.primary_address()
            if src_ip is None:
                raise InputError(f"{host.name} has no address to send from", field="--from")
        if proto == "icmp":
            ident = self._rng.randint(1, 65535)
            pkt = Packet(src=src_ip, dst=daddr, proto="icmp", icmp_type=ICMP_ECHO_REQUEST,
                         icmp_code=0, icmp_id=ident, ttl=ttl, length=length or 84, df=df)
            return host, pkt
        port = sport if sport is not None else self._ephemeral(host.name, proto, src_ip, daddr,
                                                               dport or 0)
        flags = (
            frozenset({"SYN"}) if proto == "tcp" else SCTP_INIT if proto == "sctp" else frozenset()
        )
        pkt = Packet(src=src_ip, dst=daddr, proto=proto, sport=port, dport=dport or 0,  # type: ignore[arg-type]
                     ttl=ttl, length=length or (28 + len(payload) if payload else 60), flags=flags,
                     df=df, payload=payload)
        return host, pkt

    def _open(self, host: Host, pkt: Packet) -> None:
        if pkt.proto == "icmp":
            self.endpoints.open_ping(host.name, pkt.icmp_id)
        else:
            self.endpoints.open_client(host.name, pkt.proto, pkt.src, pkt.sport, pkt.dst, pkt.dport)

    def _close(self, host: Host, pkt: Packet, *, time_wait: bool = False) -> None:
        """Close the client socket ``pkt`` was sent from and give its source port back:
        at once, or (``time_wait``: TCP, the client closed a connection it had
        established) once its 4-tuple has spent TIME_WAIT (see :mod:`.ports`)."""
        if pkt.proto == "icmp":
            self.endpoints.close_ping(host.name, pkt.icmp_id)
        else:
            self.endpoints.close_client(host.name, pkt.proto, pkt.src, pkt.sport, pkt.dst, pkt.dport)
            self.ports.close(host.name, pkt.proto, pkt.src, pkt.sport, pkt.dst, pkt.dport,
                             time_wait=time_wait)

    def _exchange(
        self, host: Host, pkt: Packet, *, record: bool, choice: bool = False
    ) -> tuple[WalkResult, WalkResult | None]:
        """Walk ``pkt`` and, if anything answered, the answer; and if the answer itself
        was answered (a SYN-ACK reaching a host with no socket for it, which resets it:
        triangular routing), that packet too, so that every conntrack table it crosses
        sees it as the kernel's do."""
        res = self.walker.send(host.name, pkt, record=record, choice=choice)
        reply = None
        if res.answer is not None:
            ans = res.answer
            reply = self.walker.send(ans.host, ans.packet, related=ans.related, record=record)
            if reply.answer is not None:
                back = reply.answer
                self.walker.send(back.host, back.packet, related=back.related, record=False)
        return res, reply

    def exchange(
        self, src: str, pkt: Packet, *, record: bool = True
    ) -> tuple[WalkResult, WalkResult | None]:
        """Walk an arbitrary packet from namespace ``src`` and, if anything answered
        (an endpoint or the kernel), the answer back. Client sockets are not opened:
        open one with :meth:`connect` first when the answer must find it."""
        return self._exchange(self.resolve_source(src)[0], pkt, record=record)

    # ------------------------------------------------------------------ trace

    def trace(
        self,
        src: str,
        dst: str,
        proto: Proto = "tcp",
        dport: int | None = None,
        sport: int | None = None,
        *,
        ttl: int = 64,
        length: int | None = None,
        df: bool = True,
        payload: bytes = b"",
        record: bool = True,
    ) -> Trace:
        """Walk one packet (TCP SYN, UDP datagram or ICMP echo request) from ``src`` to
        ``dst`` and its answer back. ``endpoints`` holds the endpoint reached with the
        probability of the random branch taken (see :meth:`trace_all` for all).
        ``payload``: a UDP datagram's data (the answer's, if any, is in
        ``reply.received.payload``). ``record`` False walks the same path without
        keeping its hops (``hops`` empty: faster)."""
        host, pkt = self._request(
            src, dst, proto, dport, sport, ttl=ttl, length=length, df=df, payload=payload
        )
        chooser = _ProbChooser(self._base_chooser)
        self._chooser_box[0] = chooser
        try:
            self._open(host, pkt)
            res, reply = self._exchange(host, pkt, record=record)
            self._close(host, pkt, time_wait=_handshake_done(reply))
        finally:
            self._chooser_box[0] = self._base_chooser
        trace = self._trace_value(src, dst, pkt, res, reply)
        if trace.delivered_to is not None:
            d = trace.delivered_to
            chance = EndpointChance(f"{d.ip}:{d.port}", chooser.p)
        else:
            chance = EndpointChance(trace.verdict, chooser.p)
        return _replace_trace(trace, endpoints=(chance,))

    def trace_all(
        self,
        src: str,
        dst: str,
        proto: Proto = "tcp",
        dport: int | None = None,
        sport: int | None = None,
        *,
        ttl: int = 64,
        length: int | None = None,
        df: bool = True,
        limit: int = 10_000,
    ) -> Trace:
        """Follow every branch of every random choice. Returns the first branch's trace
        with ``endpoints`` (each reachable endpoint — or verdict, for branches that reach
        none — with its total probability, in rule order) and ``branches`` (each branch's
        probability and trace). The cluster's state afterwards is as before the call."""
        original = self._snapshot()
        if sport is None and proto != "icmp":
            # the port is taken here and given back with the original state
            sport = self._request(src, dst, proto, dport, None)[1].sport
        start = self._snapshot()  # every branch starts here (same ports, same ICMP id)

        def run(explorer: Any) -> Trace:
            self._restore(start)
            self._chooser_box[0] = explorer
            host, pkt = self._request(src, dst, proto, dport, sport, ttl=ttl, length=length, df=df)
            self._open(host, pkt)
            res, reply = self._exchange(host, pkt, record=True)
            return self._trace_value(src, dst, pkt, res, reply)

        try:
            branches = explore(run, limit=limit)
        finally:
            self._chooser_box[0] = self._base_chooser
            self._restore(original)
        totals: dict[str, float] = {}
        for b in branches:
            t = b.result
            key = f"{t.delivered_to.ip}:{t.delivered_to.port}" if t.delivered_to else t.verdict
            totals[key] = totals.get(key, 0.0) + b.probability
        endpoints = tuple(EndpointChance(k, p) for k, p in totals.items())
        first = branches[0].result
        return _replace_trace(
            first,
            endpoints=endpoints,
            branches=tuple((b.probability, b.result) for b in branches),
        )

    def _trace_value(
        self, src: str, dst: str, pkt: Packet, res: WalkResult, reply: WalkResult | None
    ) -> Trace:
        reply_trace = None
        if reply is not None and res.answer is not None:
            ans = res.answer
            reply_trace = self._single(ans.host, str(pkt.src), ans.packet, reply)
        return self._single(src, dst, pkt, res, reply_trace)

    def _single(
        self, src: str, dst: str, pkt: Packet, res: WalkResult, reply: Trace | None = None
    ) -> Trace:
        delivered = None
        seen = None
        if res.delivered is not None:
            d = res.delivered
            h = self.hosts[d.host]
            delivered = DeliveredTo(str(d.packet.dst), d.reception.port, h.pod, h.node, h.name)
            seen = str(d.packet.src)
        reason = res.reason
        if res.mtu is not None and "MTU" not in reason:
            reason += f" (MTU {res.mtu})"
        return Trace(
            verdict=res.verdict,
            packet=pkt,
            src=src,
            dst=dst,
            hops=tuple(res.hops),
            delivered_to=delivered,
            source_seen=seen,
            masquerade=res.src_rewritten,
            reply=reply,
            reason=reason,
            chosen_by=res.chosen_by,
            received=res.delivered.packet if res.delivered else None,
        )

    # ------------------------------------------------------------------ ping / connect

    def ping(self, src: str, dst: str, count: int = 1, *, ttl: int = 64,
             length: int = 84) -> list[PingResult]:
        """``count`` echo requests with one identifier; each result says whether the
        reply came back, its TTL on arrival and the namespaces crossed both ways."""
        host, first = self._request(src, dst, "icmp", None, None, ttl=ttl, length=length)
        self._open(host, first)
        out: list[PingResult] = []
        try:
            for seq in range(1, count + 1):
                res, reply = self._exchange(host, first, record=True)
                trace = self._trace_value(src, dst, first, res, reply)
                ok = (
                    reply is not None
                    and reply.delivered is not None
                    and reply.delivered.reception.kind == "client"
                    and reply.delivered.packet.icmp_type == 0
                )
                rt = trace.reply
                out.append(
                    PingResult(
                        seq=seq,
                        ok=ok,
                        verdict=trace.verdict,
                        ttl=reply.delivered.packet.ttl if ok and reply and reply.delivered else None,
                        reply_from=str(rt.packet.src) if rt is not None else None,
                        path=_path(trace),
                        reply_path=_path(rt) if rt is not None else (),
                        trace=trace,
                    )
                )
        finally:
            self._close(host, first)
        return out

    def connect(
        self,
        src: str,
        dst: str,
        proto: Proto = "tcp",
        dport: int | None = None,
        n: int = 1,
        *,
        close: bool = False,
        record: bool = True,
        complete: bool = True,
    ) -> list[ConnResult]:
        """Open ``n`` connections. TCP: SYN, SYN-ACK, ACK, then a data segment each way
        (conntrack ESTABLISHED and ASSURED); with ``close`` also FIN, FIN-ACK, ACK. UDP:
        two datagrams each way. ICMP: one echo exchange. ``complete`` False stops after
        the first packet and its answer (SYN and SYN-ACK). ``record`` False keeps no
        hops (faster; ``trace`` and ``chosen_by`` are then None)."""
        return list(self.iter_connect(src, dst, proto, dport, n, close=close, record=record,
                                      complete=complete))

    def iter_connect(
        self,
        src: str,
        dst: str,
        proto: Proto = "tcp",
        dport: int | None = None,
        n: int = 1,
        *,
        close: bool = False,
        record: bool = True,
        complete: bool = True,
        choice: bool = False,
        release: bool = False,
    ) -> Iterator[ConnResult]:
        """:meth:`connect`, one result at a time (nothing is kept between them).
        ``choice`` (with ``record`` False): no trace, but ``chosen_by`` is found (see
        :meth:`~dataplane.emulator.walk.Walker.send`); same walk, same draws.
        ``release``: once its result is out, each connection is forgotten: the
        client's socket closed, its port freed, the conntrack entries it created removed
        (what the kernel's are once they time out). Successive connections then meet no
        trace of earlier ones except longer-lived state (``-m recent`` lists, IPVS
        persistence), memory stays flat and the ephemeral range never runs out however
        many connections are opened."""
        for i in range(n):
            # the filters built so far; one a connection builds had an empty table
            marks = {k: f.conntrack.mark() for k, f in self.filters.built().items()} if release else {}
            host, pkt = self._request(src, dst, proto, dport, None)
            self._open(host, pkt)
            res, reply = self._exchange(host, pkt, record=record, choice=choice)
            established = _answered(reply) and (proto != "tcp" or _handshake_done(reply))
            if not complete:
                pass
            elif established and proto == "tcp":
                self._tcp_follow_up(host, pkt, close=close, record=record)
            elif established and proto == "udp":
                self._exchange(host, pkt.evolve(length=pkt.length), record=False)
            trace = self._trace_value(src, dst, pkt, res, reply) if record else None
            d = res.delivered
            endpoint = pod = node = seen = None
            if d is not None and d.reception.kind in ("listener", "kernel"):
                h = self.hosts[d.host]
                endpoint = f"{_addr_text(d.packet.dst)}:{d.reception.port}"
                pod, node, seen = h.pod, h.node, _addr_text(d.packet.src)
            result = ConnResult(
                index=i,
                sport=pkt.sport if proto != "icmp" else pkt.icmp_id,
                source=_addr_text(pkt.src),
                verdict=res.verdict,
                endpoint=endpoint,
                pod=pod,
                node=node,
                chosen_by=res.chosen_by,
                source_seen=seen,
                established=established,
                trace=trace,
            )
            if close or proto != "tcp" or release:
                # released: forgotten at once, as if its TIME_WAIT had passed
                self._close(host, pkt, time_wait=established and proto == "tcp" and not release)
            if release:
                for k, f in self.filters.built().items():
                    f.conntrack.delete_since(marks.get(k, self._pristine[k][1]))
                if d is not None and proto != "icmp":
                    p = d.packet
                    self.endpoints.close_server(d.host, proto, p.dst, p.dport, p.src, p.sport)
            yield result

    def stream(
        self, src: str, dst: str, dport: int | None, payload: bytes
    ) -> tuple[Trace, Trace | None]:
        """A TCP connection that sends ``payload`` once and closes: SYN (traced), ACK, one
        data segment (traced: its answer's data is in ``reply.received.payload``), FIN.
        Returns the SYN's trace and the data segment's (None when the handshake failed).
        What DNS over TCP does after a truncated answer."""
        host, syn = self._request(src, dst, "tcp", dport, None)
        self._open(host, syn)
        ok = False
        try:
            res, reply = self._exchange(host, syn, record=True)
            first = self._trace_value(src, dst, syn, res, reply)
            ok = _handshake_done(reply)
            if not ok:
                return first, None
            ack = syn.evolve(flags=frozenset({"ACK"}), length=40)
            self._exchange(host, ack, record=False)
            data = syn.evolve(
                flags=frozenset({"PSH", "ACK"}), length=40 + len(payload), payload=payload
            )
            res, reply = self._exchange(host, data, record=True)
            second = self._trace_value(src, dst, data, res, reply)
            fin = syn.evolve(flags=frozenset({"FIN", "ACK"}), length=40)
            self._exchange(host, fin, record=False)
            self._exchange(host, ack, record=False)
            return first, second
        finally:
            # the client's FIN went first: its 4-tuple spends TIME_WAIT
            self._close(host, syn, time_wait=ok)

    def _tcp_follow_up(self, host: Host, syn: Packet, *, close: bool, record: bool) -> None:
        ack = syn.evolve(flags=frozenset({"ACK"}), length=40)
        self._exchange(host, ack, record=False)
        data = syn.evolve(flags=frozenset({"PSH", "ACK"}), length=100)
        self._exchange(host, data, record=False)
        if close:
            fin = syn.evolve(flags=frozenset({"FIN", "ACK"}), length=40)
            self._exchange(host, fin, record=False)
            self._exchange(host, ack, record=False)

    # ------------------------------------------------------------------ state

    def conntrack(self, node: str) -> list[ConntrackEntry]:
        """The live conntrack entries of a node (``node/NAME`` or ``NAME``), in insertion
        order."""
        name = node if node.startswith("node/") or node in self.hosts else f"node/{node}"
        f = self.filters.get(name)
        if f is None:
            raise InputError(f"no such node {node!r}", field="--node")
        now = self.clock.now()
        return [ConntrackEntry.of(c, now) for c in f.conntrack.entries()]

    def pcap(self, trace: Trace, path: str | Path) -> int:
        """Write every frame of ``trace`` (and its reply) to a pcap file; returns the
        number of frames written."""
        from dataplane.emulator.pcap import write_pcap

        return write_pcap(trace, path, start=self.clock.now())

    def _snapshot(self) -> _Snapshot:
        return _Snapshot(
            filters={n: f.snapshot() for n, f in self.filters.built().items()},
            neighbors={n: dict(h.neighbors) for n, h in self.hosts.built().items()},
            fdbs={
                (n, d.name): dict(d.fdb)
                for n, h in self.hosts.built().items()
                for d in h.devices.values()
                if isinstance(d, Bridge)
            },
            endpoints=self.endpoints.copy(),
            rng=self._rng.getstate(),
            ports=self.ports.copy(),
        )

    def _restore(self, s: _Snapshot) -> None:
        self.walker.forget_flows()
        for n, f in self.filters.built().items():
            # a filter built since the snapshot goes back to how it was built
            f.restore(s.filters[n] if n in s.filters else self._pristine[n][0])
        for n, h in self.hosts.built().items():
            if n in s.neighbors:
                h.neighbors = dict(s.neighbors[n])
                continue
            # built since the snapshot: back to how it was built
            neighbors, fdbs = self._pristine_l2[n]
            h.neighbors = dict(neighbors)
            for dev, fdb in fdbs.items():
                br = h.devices[dev]
                assert isinstance(br, Bridge)
                br.fdb = dict(fdb)
        for (n, dev), fdb in s.fdbs.items():
            br = self.hosts[n].devices[dev]
            assert isinstance(br, Bridge)
            br.fdb = dict(fdb)
        eps = s.endpoints.copy()
        self.endpoints = eps
        self.walker.endpoints = eps
        self._rng.setstate(s.rng)
        self.ports.restore(s.ports)


def _answered(reply: WalkResult | None) -> bool:
    """Whether an answer reached the client socket."""
    return (
        reply is not None
        and reply.delivered is not None
        and reply.delivered.reception.kind == "client"
    )


def _handshake_done(reply: WalkResult | None) -> bool:
    """Whether the answer to a TCP SYN was a SYN-ACK that reached the client socket
    (the connection is established; false for UDP and ICMP answers)."""
    return (
        reply is not None
        and reply.delivered is not None
        and reply.delivered.reception.kind == "client"
        and "SYN" in reply.delivered.packet.flags
    )


def _node_key(name: str) -> str:
    return name.removeprefix("node/")


def _with_dummy(ns: Netns, extra: list[IPAddress]) -> Netns:
    """``ns`` with the extra LOCAL addresses on a ``kube-ipvs0`` dummy device."""
    have = set(ns.addresses())
    missing = [a for a in extra if a not in have and a.version == 4]
    if not missing:
        return ns
    dummy = Interface(
        "kube-ipvs0",
        "dummy",
        stable_mac(ns.name, "kube-ipvs0"),
        tuple(IPv4Interface(f"{a}/32") for a in missing),
        up=False,
    )
    return ns.with_(interfaces=(*ns.interfaces, dummy))


def _path(trace: Trace) -> tuple[str, ...]:
    """The namespaces the packet itself crossed (ARP exchanges left out)."""
    out: list[str] = []
    for h in trace.hops:
        if h.kind == "arp":
            continue
        if not out or out[-1] != h.netns:
            out.append(h.netns)
    return tuple(out)


def _replace_trace(trace: Trace, **changes: Any) -> Trace:
    from dataclasses import replace

    return replace(trace, **changes)
