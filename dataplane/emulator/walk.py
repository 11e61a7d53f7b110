"""The packet walk: one packet, hop by hop, across namespaces, until it is delivered to a
socket, dropped, rejected or finds no route.

The steps follow the kernel's IPv4 path (names in brackets):

* **local output** [ip_local_out]: route lookup (local table, then main) → a TCP
  segment with data longer than the MSS is cut to its first segment [tcp_sendmsg sizes
  segments to min(the peer's MSS, the route's MTU - 40); the emulator's SYNs advertise
  :data:`PEER_MSS`]: that segment is walked, carrying the whole data as payload (what the
  peer's socket reads once the stream is reassembled) → OUTPUT hook →
  re-route if NAT changed the destination [ip_route_me_harder] → MTU check (a DF packet
  larger than the egress MTU fails with EMSGSIZE: verdict ``frag-needed``, no packet) →
  **output**.
* **output** [ip_output]: POSTROUTING hook → neighbour resolution (ARP on the link, once;
  permanent entries as configured; NOARP devices need an entry) → device transmit.
* **device transmit**: a veth hands the frame to its peer; a bridge device looks its FDB
  up (or floods); a VXLAN device encapsulates (outer UDP to port 8472 of the VTEP its FDB
  names for the inner destination MAC) and sends the outer packet through local output
  of the same namespace; loopback re-enters the stack.
* **bridge input** [br_handle_frame]: learn the source MAC; with
  ``bridge-nf-call-iptables`` an IPv4 frame first crosses PREROUTING [br_netfilter]; if
  NAT changed the destination and the new route leaves through the same bridge, the
  frame is re-addressed to the new neighbour and bridged again (this is how a pod reaches
  itself through its Service: the frame goes back out the ingress port, which needs the
  port's ``hairpin`` flag); otherwise a frame for the bridge's own MAC goes up to the IP
  layer (PREROUTING not repeated) and any other frame is forwarded by FDB (FORWARD and
  POSTROUTING hooks under br_netfilter; never back out the ingress port unless hairpin).
* **IP input** [ip_rcv]: PREROUTING → local table: a local destination crosses INPUT and
  is delivered (a UDP packet to a VXLAN port is decapsulated and re-enters on the VXLAN
  device; a packet IPVS takes in INPUT — verdict STOLEN, destination rewritten to a
  remote real server — is routed by IPVS itself, TTL-checked and decremented, and
  leaves through OUTPUT and **output**); a source address that is local on a
  non-loopback device is a martian (dropped).
  Otherwise **forward** [ip_forward] when ``ip_forward`` is on: route (no route → ICMP net
  unreachable), TTL ≤ 1 → ICMP time exceeded, DF and larger than the egress MTU → ICMP
  fragmentation needed with the next-hop MTU, TTL decremented, FORWARD hook, **output**.

Kernel-generated answers (ICMP errors, REJECT's answer) and endpoint answers are not
walked here: :class:`WalkResult` carries them (``answer``) with the host that sends them,
and the caller walks them back with :meth:`Walker.send`.

**Flow cache.** Walks without a trace of packets of known connections are recorded and
the next identical packet is replayed (:mod:`dataplane.emulator.flowcache`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dataplane.emulator.devices import BROADCAST_MAC, Bridge, Device, Epoch, VxlanDevice
from dataplane.emulator.fib import RouteResult
from dataplane.emulator.flowcache import Flow, FlowCache
from dataplane.emulator.hooks import HookName, PacketFilter, ReplayStep, Skb, Tunnel
from dataplane.emulator.host import Host
from dataplane.emulator.ports import EPHEMERAL_PORTS
from dataplane.emulator.trace import Hop
from dataplane.emulator.traffic import Endpoints, Reception, icmp_error
from netmodel.ip import IPAddress
from netmodel.packet import (
    ICMP_DEST_UNREACH,
    ICMP_FRAG_NEEDED,
    ICMP_HOST_UNREACH,
    ICMP_NET_UNREACH,
    ICMP_TIME_EXCEEDED,
    Frame,
    Packet,
    VxlanEncap,
)

#: the MSS the emulator's SYNs advertise (a 1500-octet MTU: what Linux puts in the
#: options :data:`dataplane.emulator.pcap.SYN_OPTIONS` writes)
PEER_MSS = 1460
#: IPv4 and TCP headers without options
TCP_IP_HEADERS = 40

VXLAN_OVERHEAD = 50
_NO_FLAGS: frozenset[str] = frozenset()
MAX_STEPS = 512
_ICMP_ERROR_TYPES = frozenset({3, 4, 5, 11, 12})
_REJECT_CODES = {
    "icmp-net-unreachable": 0,
    "icmp-host-unreachable": 1,
    "icmp-proto-unreachable": 2,
    "icmp-port-unreachable": 3,
    "icmp-net-prohibited": 9,
    "icmp-host-prohibited": 10,
    "icmp-admin-prohibited": 13,
}


class Answer(NamedTuple):
    """A packet to walk back: sent by ``host``; ``related`` is the conntrack attachment
    of the packet it answers (kernel-generated errors inherit it, as ``nf_ct_attach``
    does), None for endpoint answers."""

    host: str
    packet: Packet
    related: object | None = None


class Delivery(NamedTuple):
    """Where the packet was delivered: the host, the packet as the socket saw it, and
    what the socket layer did with it."""

    host: str
    packet: Packet
    reception: Reception
    dev: str = ""


@dataclass(slots=True)
class WalkResult:
    """The outcome of one walk (see the module docstring)."""

    verdict: str
    reason: str
    hops: list[Hop]
    delivered: Delivery | None = None
    answer: Answer | None = None
    chosen_by: str | None = None
    src_rewritten: bool = False
    mtu: int | None = None


@dataclass(slots=True)
class _Walk:
    record: bool
    hops: list[Hop] = field(default_factory=list)
    verdict: str = ""
    reason: str = ""
    delivered: Delivery | None = None
    answer: Answer | None = None
    chosen_by: str | None = None
    src_rewritten: bool = False
    mtu: int | None = None
    steps: int = 0
    log: list[ReplayStep | None] | None = None
    stolen: bool = False  # the last hook's verdict was STOLEN (IPVS took the packet)
    # untraced, but the rule that chooses an endpoint is wanted: the hooks where one
    # may be chosen (_CHOICE_HOOKS) run traced, without hops, until one is found
    choice: bool = False

    def unreplayable(self) -> None:
        if self.log is not None:
            self.log.append(None)

    def end(self, verdict: str, reason: str) -> None:
        if not self.verdict:
            self.verdict = verdict
            self.reason = reason


_CHOICE_HOOKS = frozenset({"PREROUTING", "OUTPUT", "INPUT"})

_PROTO_SALT = {"tcp": 6, "udp": 17, "icmp": 1, "sctp": 132}


def vxlan_source_port(pkt: Packet) -> int:
    """The outer UDP source port: a hash of the inner flow inside the ephemeral range
    (so one flow keeps one port, as ``udp_flow_src_port`` does). Deterministic across
    runs (no string hashing)."""
    ports = (pkt.sport << 16 | pkt.dport) if pkt.proto != "icmp" else pkt.icmp_id
    key = (pkt.src._ip * 0x9E3779B1 ^ pkt.dst._ip * 0x85EBCA77 ^ ports * 0xC2B2AE3D  # type: ignore[union-attr]
           ^ _PROTO_SALT.get(pkt.proto, 0)) & 0xFFFFFFFFFFFF
    lo, hi = EPHEMERAL_PORTS
    return lo + zlib.crc32(key.to_bytes(6, "little")) % (hi - lo + 1)


_new_tuple = tuple.__new__

_UNSEEN: Any = object()  # a host whose filter was not looked up yet


class Walker:
    """Moves packets between the hosts (see the module docstring).

    ``filters`` holds the netfilter of each host; ``endpoints`` the socket layer."""

    def __init__(
        self,
        hosts: Mapping[str, Host],
        filters: Mapping[str, PacketFilter],
        endpoints: Endpoints,
        epoch: Epoch | None = None,
        arp_skip: Callable[[str, IPAddress], bool] | None = None,
    ) -> None:
        """``epoch`` is the L2 change counter the hosts share (see
        :class:`~dataplane.emulator.devices.Epoch`); by default the first host's.
        ``arp_skip(netns, addr)``: True when ``netns`` certainly does not answer ARP for
        ``addr`` and need not be looked up in ``hosts`` (a lazy ``hosts`` then does not
        build every host an ARP request is flooded to)."""
        self.arp_skip = arp_skip
        self.hosts = hosts
        self.epoch = epoch or next(iter(hosts.values())).epoch if hosts else Epoch()
        self.filters = filters
        self.endpoints = endpoints
        self.flows = FlowCache(self.epoch)
        #: each host's filter, looked up in ``filters`` when a packet first reaches the
        #: host (``filters`` may be a lazy mapping that builds it then)
        self._filter_of: dict[Host, PacketFilter | None] = {}

    # ------------------------------------------------------------------ entry point

    def send(
        self,
        host: str,
        pkt: Packet,
        *,
        related: object | None = None,
        record: bool = True,
        choice: bool = False,
    ) -> WalkResult:
        """Send ``pkt`` from a socket (or the kernel) of ``host`` and follow it to its
        end. ``related`` attaches the conntrack entry of the packet an error answers.

        Fast path: without ``record``, a packet identical to one whose recorded walk
        crossed only known connections and ended in delivery is replayed from the flow
        cache — every conntrack entry on the way is looked up and updated as the full
        walk would, the nat table and the rule, route, neighbour and FDB lookups are
        skipped (valid while the entries the walk relied on are unchanged; see
        :func:`~dataplane.emulator.replay.replay_safe` for which rulesets qualify).

        ``choice`` (without ``record``): no hops either, but ``chosen_by`` is found:
        only the hooks where the nat table or IPVS picks an endpoint (PREROUTING,
        OUTPUT, INPUT) run traced, and only until the choice is seen. The walk and
        every random draw are the same as with ``record``."""
        key = (host, pkt)
        if not record and related is None and "SYN" not in pkt.flags:
            # SYNs open connections: never replayed, never recorded
            flow = self.flows.get(key)
            if flow is not None and self.flows.replay(flow, pkt):
                return self._replayed(flow)
            w = _Walk(record, log=[] if self.flows.seen_before(key) else None)
        else:
            w = _Walk(record, choice=choice and not record)
        h = self.hosts[host]
        if record:
            w.hops.append(Hop("send", h.name, packet=pkt))
        self._local_out(w, h, pkt, Skb(related=related))
        if not w.verdict:
            w.end("DROP", "the walk ended without a decision")
        if w.log is not None:
            d = w.delivered
            ok = (w.verdict == "delivered" and d is not None
                  and (w.answer is None or w.answer.related is None))
            if ok and d is not None:
                self.flows.remember(key, w.log, d.host, d.dev, d.packet, w.src_rewritten)
            else:
                self.flows.forget(key)
        return WalkResult(
            verdict=w.verdict,
            reason=w.reason,
            hops=w.hops,
            delivered=w.delivered,
            answer=w.answer,
            chosen_by=w.chosen_by,
            src_rewritten=w.src_rewritten,
            mtu=w.mtu,
        )

    @property
    def replayed(self) -> int:
        """How many sends the flow cache answered (statistics)."""
        return self.flows.replayed

    def forget_flows(self) -> None:
        """Drop the flow cache (needed whenever state is replaced rather than updated:
        a restored snapshot)."""
        self.flows.clear()

    def _replayed(self, flow: Flow) -> WalkResult:
        """The outcome of a replayed walk: the socket layer receives the packet anew."""
        host = flow.host
        delivered = flow.delivered
        rec = self.endpoints.receive(host, delivered)
        ans = rec.answer
        # positional, named tuples through tuple.__new__: this runs once per replayed packet
        return WalkResult(
            "unreachable" if rec.kind == "refused" else "delivered",
            rec.note,
            [],
            _new_tuple(Delivery, (host, delivered, rec, flow.dev)),
            _new_tuple(Answer, (host, ans, None)) if ans is not None else None,
            None,
            flow.src_rewritten,
        )

    # ------------------------------------------------------------------ helpers

    def _drop(self, w: _Walk, host: Host, why: str, verdict: str = "DROP", **kw: object) -> None:
        if w.record:
            w.hops.append(Hop("drop", host.name, verdict=verdict, note=why, **kw))  # type: ignore[arg-type]
        w.end(verdict, why)

    def _step(self, w: _Walk, host: Host) -> bool:
        """Count a step; False (and the walk ended) past :data:`MAX_STEPS`."""
        w.steps += 1
        if w.steps <= MAX_STEPS:
            return True
        self._drop(w, host, f"more than {MAX_STEPS} steps: forwarding loop")
        return False

    def _hook(
        self,
        w: _Walk,
        host: Host,
        hook: HookName,
        pkt: Packet,
        indev: str | None,
        outdev: str | None,
        skb: Skb,
        physout: str | None = None,
    ) -> Packet | None:
        """Run one netfilter hook; None when the packet did not survive it (the walk has
        then ended: DROP, or REJECT with its answer). The bridge ports are the skb's
        ingress port and ``physout`` (br_netfilter's FORWARD and POSTROUTING)."""
        f = self._filter_of.get(host, _UNSEEN)
        if f is _UNSEEN:
            f = self._filter_of[host] = self.filters.get(host.name)
        if f is None:
            return pkt
        if w.log is None and not w.record and not (
            w.choice and w.chosen_by is None and hook in _CHOICE_HOOKS
        ):
            # the fast path: no trace steps, no flow-cache log, no HookOutcome
            new, verdict, reject_with = f.quick(hook, pkt, indev, outdev, skb, skb.physin,
                                                physout)
            if new is None:
                self._refused(w, host, hook, pkt, skb, verdict, reject_with)
                return None
            w.stolen = verdict == "STOLEN"
            if new is not pkt and new.src is not pkt.src and new.src != pkt.src and (
                skb.tunnel is None
            ):
                w.src_rewritten = True
            return new
        traced = w.record or (w.choice and w.chosen_by is None and hook in _CHOICE_HOOKS)
        out = f.run(hook, pkt, indev, outdev, skb, record=traced, log=w.log,
                    physin=skb.physin, physout=physout, hops_wanted=w.record)
        if traced:
            if out.hops:
                w.hops.extend(out.hops)
            if out.chosen_by is not None and w.chosen_by is None:
                w.chosen_by = out.chosen_by
        if out.verdict == "ACCEPT" or out.verdict == "STOLEN":
            w.stolen = out.verdict == "STOLEN"
            new = out.packet
            if new is not pkt and new.src is not pkt.src and new.src != pkt.src and (
                skb.tunnel is None
            ):
                w.src_rewritten = True
            return new
        self._refused(w, host, hook, pkt, skb, out.verdict, out.reject_with)
        return None

    def _refused(self, w: _Walk, host: Host, hook: HookName, pkt: Packet, skb: Skb,
                 verdict: str, reject_with: str | None) -> None:
        """End the walk for a packet a hook did not let through (REJECT: with its
        answer)."""
        if verdict == "REJECT":
            with_ = reject_with or "icmp-port-unreachable"
            answer = self._reject_answer(host, pkt, with_)
            if answer is not None:
                w.answer = Answer(host.name, answer, skb.ct)
            w.end("REJECT", f"rejected in {hook} ({with_})")
            return
        w.end("DROP", f"dropped in {hook}")

    def _reject_answer(self, host: Host, pkt: Packet, with_: str) -> Packet | None:
        if with_ == "tcp-reset":
            if pkt.proto != "tcp" or "RST" in pkt.flags:
                return None
            return Packet(
                src=pkt.dst,
                dst=pkt.src,
                proto="tcp",
                sport=pkt.dport,
                dport=pkt.sport,
                flags=frozenset({"RST", "ACK"} if "ACK" not in pkt.flags else {"RST"}),
                length=40,
            )
        return self._icmp_error(host, pkt, ICMP_DEST_UNREACH, _REJECT_CODES.get(with_, 3))

    def _icmp_error(self, host: Host, pkt: Packet, icmp_type: int, code: int) -> Packet | None:
        """``icmp_send``: None for packets that never get an error (ICMP errors
        themselves). The source is the offending packet's destination if that is local,
        else the address routing selects towards the sender."""
        if pkt.proto == "icmp" and pkt.icmp_type in _ICMP_ERROR_TYPES:
            return None
        if host.is_local(pkt.dst):
            src: IPAddress | None = pkt.dst
        else:
            src = host.fib.lookup(pkt.src).src or host.primary_address()
        if src is None:
            return None
        return icmp_error(pkt, icmp_type, code, src=src)

    def _error_answer(
        self, w: _Walk, host: Host, pkt: Packet, skb: Skb, icmp_type: int, code: int
    ) -> None:
        err = self._icmp_error(host, pkt, icmp_type, code)
        if err is None:
            return
        w.answer = Answer(host.name, err, skb.ct)
        if w.record:
            note = f"next-hop MTU {w.mtu}" if w.mtu is not None else None
            w.hops.append(Hop("icmp", host.name, packet=err, note=note))

    # ------------------------------------------------------------------ local output

    def _local_out(self, w: _Walk, host: Host, pkt: Packet, skb: Skb) -> None:
        if not self._step(w, host):
            return
        rt = host.fib.lookup(pkt.dst)
        if rt.type == "unreachable":
            self._drop(w, host, f"connect: Network is unreachable ({pkt.dst})", "no-route")
            return
        note = None
        if pkt.proto == "tcp" and pkt.payload and rt.type == "unicast":
            mss = min(PEER_MSS, host.devices[rt.dev].mtu - TCP_IP_HEADERS)  # type: ignore[index]
            if pkt.length > TCP_IP_HEADERS + mss:
                note = f"{pkt.length - TCP_IP_HEADERS} octets of data: segments of MSS {mss}"
                pkt = pkt.evolve(length=TCP_IP_HEADERS + mss)
        if w.record:
            w.hops.append(
                Hop("route", host.name, dev_out=rt.dev, route=rt.description, note=note)
            )
        out = self._hook(w, host, "OUTPUT", pkt, None, rt.dev, skb)
        if out is None:
            return
        if out is not pkt and out.dst != pkt.dst:
            rt = host.fib.lookup(out.dst)
            if rt.type == "unreachable":
                self._drop(w, host, f"no route to {out.dst} after NAT", "no-route")
                return
            if w.record:
                w.hops.append(
                    Hop("route", host.name, dev_out=rt.dev, route=rt.description,
                        note="re-routed: NAT changed the destination")
                )
        if rt.type == "unicast" and out.df:
            dev = host.devices[rt.dev]  # type: ignore[index]
            if out.length > dev.mtu:
                w.mtu = dev.mtu
                self._drop(
                    w, host,
                    f"message too long: {out.length} bytes > MTU {dev.mtu} of {dev.name} (EMSGSIZE)",
                    "frag-needed", dev_out=dev.name,
                )
                return
        self._ip_output(w, host, out, rt, skb)

    def _ip_output(self, w: _Walk, host: Host, pkt: Packet, rt: RouteResult, skb: Skb) -> None:
        assert rt.dev is not None and rt.nexthop is not None
        dev = host.devices[rt.dev]
        out = self._hook(w, host, "POSTROUTING", pkt, None, dev.name, skb)
        if out is None:
            return
        if rt.type == "local":
            if w.record:
                w.hops.append(Hop("xmit", host.name, dev_out="lo", packet=out))
            self._ip_rcv(w, host, host.devices["lo"], out, skb)
            return
        mac = self._resolve(w, host, dev, rt.nexthop, out.src)
        if mac is None:
            if w.verdict == "unreachable" and not host.is_local(out.src):
                # a forwarded packet whose next hop never answered: the sender is told
                self._error_answer(w, host, out, skb, ICMP_DEST_UNREACH, ICMP_HOST_UNREACH)
            return
        self._dev_xmit(w, host, dev, dev.mac, mac, out, skb.tunnel)

    # ------------------------------------------------------------------ neighbours / ARP

    def _resolve(
        self, w: _Walk, host: Host, dev: Device, nexthop: IPAddress, src: IPAddress
    ) -> str | None:
        """The MAC of ``nexthop`` on ``dev``: from the neighbour table, else by ARP."""
        if dev.kind == "loopback":
            return dev.mac
        entry = host.neighbors.get((dev.name, nexthop._ip))  # type: ignore[union-attr]
        if entry is not None:
            return entry.mac
        if dev.noarp:
            self._drop(
                w, host, f"no neighbour entry for {nexthop} on NOARP device {dev.name}",
                "unreachable", dev_out=dev.name,
            )
            return None
        sender = src if host.is_local(src) else host.fib.select_source(dev.name, nexthop)
        if sender is None:
            self._drop(w, host, f"no address to send ARP from on {dev.name}", "unreachable")
            return None
        request = Frame(dev.mac, BROADCAST_MAC, arp=("who-has", str(sender), str(nexthop)))
        if w.record:
            w.hops.append(
                Hop("arp", host.name, dev_out=dev.name, frame=request,
                    arp=f"who-has {nexthop} tell {sender}")
            )
        found = self._arp_flood(w, dev, request, nexthop, [])
        if found is None:
            self._drop(
                w, host, f"no ARP reply for {nexthop} on {dev.name} (host unreachable)",
                "unreachable", dev_out=dev.name,
            )
            return None
        rx_host, rx_dev, path = found
        rx_host.learn_neighbor(rx_dev.name, sender, dev.mac)
        for bridge, port in path:
            bridge.learn(rx_dev.mac, port)
        reply = Frame(rx_dev.mac, dev.mac, arp=("is-at", str(nexthop), str(sender)))
        host.learn_neighbor(dev.name, nexthop, rx_dev.mac)
        if w.record:
            proxy = "" if rx_host.is_local(nexthop) else " (proxy ARP)"
            w.hops.append(
                Hop("arp", rx_host.name, dev_out=rx_dev.name, frame=reply,
                    arp=f"{nexthop} is-at {rx_dev.mac}{proxy}")
            )
            w.hops.append(
                Hop("arp", host.name, dev_in=dev.name,
                    arp=f"learned {nexthop} lladdr {rx_dev.mac} REACHABLE")
            )
        return rx_dev.mac

    def _arp_flood(
        self,
        w: _Walk,
        out: Device,
        frame: Frame,
        target: IPAddress,
        path: list[tuple[Bridge, Device]],
    ) -> tuple[Host, Device, list[tuple[Bridge, Device]]] | None:
        """Broadcast an ARP request out of ``out``; the first host owning ``target``
        answers. Bridges on the way learn the sender and flood to their other ports."""
        if isinstance(out, Bridge):
            for port in out.ports.values():
                hit = self._arp_link(w, port, frame, target, [*path, (out, port)])
                if hit is not None:
                    return hit
            return None
        return self._arp_link(w, out, frame, target, path)

    def _arp_link(
        self,
        w: _Walk,
        out: Device,
        frame: Frame,
        target: IPAddress,
        path: list[tuple[Bridge, Device]],
    ) -> tuple[Host, Device, list[tuple[Bridge, Device]]] | None:
        peer = out.peer
        if peer is None:
            return None
        if peer.master is None and self.arp_skip is not None and self.arp_skip(peer.host_name, target):
            return None
        rx = self.hosts[peer.host_name]
        bridge = peer.master
        if bridge is None:
            return (rx, peer, path) if rx.answers_arp(peer, target) else None
        learned = bridge.learn(frame.src_mac, peer)
        if rx.owns_on(bridge, target):
            if w.record and learned:
                w.hops.append(Hop("arp", rx.name, dev_in=peer.name,
                                  bridge=f"{bridge.name}: learned {frame.src_mac} on {peer.name}"))
            return rx, bridge, path
        ports = [p for p in bridge.ports.values() if p is not peer]
        if w.record:
            text = f"{bridge.name}: ARP broadcast flooded to {', '.join(p.name for p in ports)}"
            if learned:
                text = f"{bridge.name}: learned {frame.src_mac} on {peer.name}; " + text.split(": ", 1)[1]
            w.hops.append(Hop("arp", rx.name, dev_in=peer.name, bridge=text))
        for p in ports:
            hit = self._arp_link(w, p, frame, target, [*path, (bridge, p)])
            if hit is not None:
                return hit
        return None

    # ------------------------------------------------------------------ link layer

    def _dev_xmit(
        self,
        w: _Walk,
        host: Host,
        dev: Device,
        src_mac: str,
        dst_mac: str,
        pkt: Packet,
        tunnel: Tunnel | None,
    ) -> None:
        if isinstance(dev, VxlanDevice):
            self._vxlan_xmit(w, host, dev, src_mac, dst_mac, pkt)
            return
        if isinstance(dev, Bridge):
            port = dev.fdb.get(dst_mac)
            if port is None:
                w.unreplayable()
                port = self._port_toward(dev, dst_mac, None)
                if port is None:
                    self._drop(w, host, f"{dev.name}: unknown unicast {dst_mac}, flooded, nobody took it")
                    return
                if w.record:
                    w.hops.append(Hop("bridge", host.name, dev_out=port.name,
                                      bridge=f"{dev.name}: {dst_mac} unknown, flooded; reached via {port.name}"))
            elif w.record:
                w.hops.append(Hop("bridge", host.name, dev_in=dev.name, dev_out=port.name,
                                  bridge=f"{dev.name}: {dst_mac} is on {port.name} (fdb)"))
            self._link_xmit(w, host, port, src_mac, dst_mac, pkt, tunnel)
            return
        self._link_xmit(w, host, dev, src_mac, dst_mac, pkt, tunnel)

    def _port_toward(self, bridge: Bridge, mac: str, exclude: Device | None) -> Device | None:
        """The port behind which ``mac`` lives (what flooding would find)."""
        for port in bridge.ports.values():
            if port is exclude:
                continue
            if self._behind(port, mac, 0):
                return port
        return None

    def _behind(self, out: Device, mac: str, depth: int) -> bool:
        peer = out.peer
        if peer is None or depth > 8:
            return False
        if peer.mac == mac:
            return True
        if peer.master is not None:
            if peer.master.mac == mac:
                return True
            return any(
                self._behind(p, mac, depth + 1)
                for p in peer.master.ports.values()
                if p is not peer
            )
        return False

    def _link_xmit(
        self,
        w: _Walk,
        host: Host,
        dev: Device,
        src_mac: str,
        dst_mac: str,
        pkt: Packet,
        tunnel: Tunnel | None,
    ) -> None:
        if not self._step(w, host):
            return
        if w.record:
            w.hops.append(
                Hop("xmit", host.name, dev_out=dev.name, packet=pkt,
                    frame=_wire_frame(src_mac, dst_mac, pkt, tunnel))
            )
        peer = dev.peer
        if peer is None or not dev.up:
            self._drop(w, host, f"{dev.name} has no link")
            return
        if pkt.mark and peer.host_name != host.name:
            # a veth into another namespace scrubs the skb (skb_scrub_packet with xnet:
            # the mark is cleared): marks never travel between namespaces
            pkt = _with_mark(pkt, 0)
        self._l2_rcv(w, self.hosts[peer.host_name], peer, src_mac, dst_mac, pkt, tunnel)

    def _l2_rcv(
        self,
        w: _Walk,
        host: Host,
        dev: Device,
        src_mac: str,
        dst_mac: str,
        pkt: Packet,
        tunnel: Tunnel | None,
    ) -> None:
        if dev.master is not None:
            self._bridge_rcv(w, host, dev.master, dev, src_mac, dst_mac, pkt, tunnel)
            return
        if dst_mac == dev.mac or dst_mac == BROADCAST_MAC:
            self._ip_rcv(w, host, dev, pkt, Skb(tunnel=tunnel))
            return
        self._drop(w, host, f"{dev.name}: frame for {dst_mac} is not for this host", dev_in=dev.name)

    # ------------------------------------------------------------------ bridge

    def _bridge_rcv(
        self,
        w: _Walk,
        host: Host,
        br: Bridge,
        port: Device,
        src_mac: str,
        dst_mac: str,
        pkt: Packet,
        tunnel: Tunnel | None,
    ) -> None:
        if br.learn(src_mac, port) and w.record:
            w.hops.append(Hop("bridge", host.name, dev_in=port.name,
                              bridge=f"{br.name}: learned {src_mac} on {port.name}"))
        if not (host.bridge_nf_call_iptables and host.name in self.filters):
            if dst_mac == br.mac:
                if w.record:
                    w.hops.append(Hop("bridge", host.name, dev_in=port.name,
                                      bridge=f"{br.name}: for the bridge's own MAC, up to the host"))
                self._ip_rcv(w, host, br, pkt, Skb(tunnel=tunnel))
                return
            self._bridge_forward(w, host, br, port, src_mac, dst_mac, pkt, None, tunnel)
            return
        # br_netfilter: PREROUTING at the bridge, the IP layer will not repeat it
        skb = Skb(tunnel=tunnel, bridged=True, physin=port.name)
        out = self._hook(w, host, "PREROUTING", pkt, br.name, None, skb)
        if out is None:
            return
        if out is not pkt and out.dst != pkt.dst:
            rt = host.fib.lookup(out.dst)
            if rt.type == "unicast" and rt.dev == br.name and rt.nexthop is not None:
                if w.record:
                    w.hops.append(Hop("route", host.name, dev_out=br.name, route=rt.description,
                                      note="br_netfilter: NAT changed the destination"))
                mac = self._resolve(w, host, br, rt.nexthop, out.src)
                if mac is None:
                    return
                if w.record:
                    w.hops.append(Hop("bridge", host.name, dev_in=port.name,
                                      bridge=f"{br.name}: new destination is on this bridge: "
                                             f"frame re-addressed to {mac} and bridged"))
                self._bridge_forward(w, host, br, port, src_mac, mac, out, skb, tunnel)
                return
            self._ip_rcv(w, host, br, out, skb)
            return
        if dst_mac == br.mac:
            if w.record:
                w.hops.append(Hop("bridge", host.name, dev_in=port.name,
                                  bridge=f"{br.name}: for the bridge's own MAC, up to the host"))
            self._ip_rcv(w, host, br, out, skb)
            return
        self._bridge_forward(w, host, br, port, src_mac, dst_mac, out, skb, tunnel)

    def _bridge_forward(
        self,
        w: _Walk,
        host: Host,
        br: Bridge,
        inport: Device,
        src_mac: str,
        dst_mac: str,
        pkt: Packet,
        skb: Skb | None,
        tunnel: Tunnel | None,
    ) -> None:
        out = br.fdb.get(dst_mac)
        how = "fdb"
        if out is None:
            w.unreplayable()
            out = self._port_toward(br, dst_mac, None)
            how = "flooded"
            if out is None:
                self._drop(w, host, f"{br.name}: unknown unicast {dst_mac}, flooded, nobody took it")
                return
        if out is inport:
            if not inport.hairpin:
                self._drop(w, host, f"{br.name}: {dst_mac} is behind the ingress port "
                                    f"{inport.name} and hairpin mode is off", dev_in=inport.name)
                return
            text = f"{br.name}: hairpin: {dst_mac} is behind the ingress port, sent back out {out.name}"
        elif how == "fdb":
            text = f"{br.name}: forwarded {inport.name} -> {out.name} ({dst_mac} in fdb)"
        else:
            text = f"{br.name}: {dst_mac} unknown, flooded; reached via {out.name}"
        if w.record:
            w.hops.append(Hop("bridge", host.name, dev_in=inport.name, dev_out=out.name, bridge=text))
        if skb is not None:
            fwd = self._hook(w, host, "FORWARD", pkt, br.name, br.name, skb, out.name)
            if fwd is None:
                return
            post = self._hook(w, host, "POSTROUTING", fwd, None, br.name, skb, out.name)
            if post is None:
                return
            pkt = post
        self._link_xmit(w, host, out, src_mac, dst_mac, pkt, tunnel)

    # ------------------------------------------------------------------ IP input

    def _ip_rcv(self, w: _Walk, host: Host, dev: Device, pkt: Packet, skb: Skb) -> None:
        if not self._step(w, host):
            return
        if not skb.bridged:
            out = self._hook(w, host, "PREROUTING", pkt, dev.name, None, skb)
            if out is None:
                return
            pkt = out
        if dev.kind != "loopback" and host.is_local(pkt.src):
            self._drop(w, host, f"martian source {pkt.src} (a local address) on {dev.name}",
                       dev_in=dev.name)
            return
        if host.is_local(pkt.dst):
            out = self._hook(w, host, "INPUT", pkt, dev.name, None, skb)
            if out is None:
                return
            if w.stolen:
                w.stolen = False
                self._ipvs_xmit(w, host, dev, out, skb)
                return
            self._local_deliver(w, host, dev, out, skb)
            return
        self._forward(w, host, dev, pkt, skb)

    def _ipvs_xmit(self, w: _Walk, host: Host, indev: Device, pkt: Packet, skb: Skb) -> None:
        """IPVS took the packet in INPUT (NAT forwarding, ``ip_vs_nat_xmit``) after
        rewriting its destination to a remote real server: it routes it itself (no
        route: ICMP host unreachable), sends ICMP time exceeded for TTL <= 1 and
        decrements the TTL otherwise, checks the MTU (DF: ICMP fragmentation needed),
        then hands it to OUTPUT and on to POSTROUTING and the device."""
        rt = host.fib.lookup(pkt.dst)
        if rt.type != "unicast" or rt.dev is None:
            self._error_answer(w, host, pkt, skb, ICMP_DEST_UNREACH, ICMP_HOST_UNREACH)
            self._drop(w, host, f"IPVS: no route to the real server {pkt.dst}", "no-route",
                       dev_in=indev.name)
            return
        if w.record:
            w.hops.append(Hop("route", host.name, dev_in=indev.name, dev_out=rt.dev,
                              route=rt.description,
                              note="IPVS took the packet (STOLEN) and routes it to the real "
                                   "server itself"))
        if pkt.ttl <= 1:
            self._error_answer(w, host, pkt, skb, ICMP_TIME_EXCEEDED, 0)
            self._drop(w, host, f"IPVS: TTL {pkt.ttl} would expire: ICMP time exceeded",
                       "ttl-exceeded", dev_in=indev.name)
            return
        outdev = host.devices[rt.dev]
        if pkt.df and pkt.length > outdev.mtu:
            w.mtu = outdev.mtu
            self._error_answer(w, host, pkt, skb, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED)
            self._drop(w, host, f"IPVS: {pkt.length} bytes with DF > MTU {outdev.mtu} of "
                                f"{outdev.name}: ICMP fragmentation needed",
                       "frag-needed", dev_in=indev.name, dev_out=outdev.name)
            return
        pkt = _with_ttl(pkt, pkt.ttl - 1)
        if w.record:
            w.hops.append(Hop("forward", host.name, dev_in=indev.name, dev_out=outdev.name,
                              packet=pkt, note=f"IPVS NAT forwarding: TTL decremented to "
                                               f"{pkt.ttl}, sent through OUTPUT"))
        out = self._hook(w, host, "OUTPUT", pkt, None, rt.dev, skb)
        if out is None:
            return
        if out is not pkt and out.dst != pkt.dst:
            rt = host.fib.lookup(out.dst)
            if rt.type == "unreachable":
                self._drop(w, host, f"no route to {out.dst} after NAT", "no-route")
                return
        self._ip_output(w, host, out, rt, skb)

    def _forward(self, w: _Walk, host: Host, indev: Device, pkt: Packet, skb: Skb) -> None:
        if not host.ip_forward:
            self._drop(w, host, f"not for this host and net.ipv4.ip_forward=0 ({pkt.dst})",
                       dev_in=indev.name)
            return
        rt = host.fib.lookup(pkt.dst)
        if rt.type != "unicast" or rt.dev is None:
            self._error_answer(w, host, pkt, skb, ICMP_DEST_UNREACH, ICMP_NET_UNREACH)
            self._drop(w, host, f"no route to {pkt.dst}", "no-route", dev_in=indev.name)
            return
        if w.record:
            w.hops.append(Hop("route", host.name, dev_in=indev.name, dev_out=rt.dev,
                              route=rt.description))
        if pkt.ttl <= 1:
            self._error_answer(w, host, pkt, skb, ICMP_TIME_EXCEEDED, 0)
            self._drop(w, host, f"TTL {pkt.ttl} would expire: ICMP time exceeded",
                       "ttl-exceeded", dev_in=indev.name)
            return
        outdev = host.devices[rt.dev]
        if pkt.df and pkt.length > outdev.mtu:
            w.mtu = outdev.mtu
            self._error_answer(w, host, pkt, skb, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED)
            self._drop(
                w, host,
                f"{pkt.length} bytes with DF > MTU {outdev.mtu} of {outdev.name}: "
                f"ICMP fragmentation needed (next-hop MTU {outdev.mtu})",
                "frag-needed", dev_in=indev.name, dev_out=outdev.name,
            )
            return
        pkt = _with_ttl(pkt, pkt.ttl - 1)
        if w.record:
            w.hops.append(Hop("forward", host.name, dev_in=indev.name, dev_out=outdev.name,
                              packet=pkt, note=f"ip_forward: TTL decremented to {pkt.ttl}"))
        out = self._hook(w, host, "FORWARD", pkt, indev.name, outdev.name, skb)
        if out is None:
            return
        self._ip_output(w, host, out, rt, skb)

    # ------------------------------------------------------------------ local delivery

    def _local_deliver(self, w: _Walk, host: Host, dev: Device, pkt: Packet, skb: Skb) -> None:
        if pkt.proto == "udp" and skb.tunnel is not None:
            vx = host.vxlan_for_port(pkt.dport, pkt.dst)
            if vx is not None:
                self._vxlan_rcv(w, host, vx, pkt, skb.tunnel)
                return
        self._receive(w, host, dev.name, pkt)

    def _receive(self, w: _Walk, host: Host, dev: str, pkt: Packet) -> None:
        """Hand ``pkt`` to the socket layer; an answer it produces is the walk's."""
        rec = self.endpoints.receive(host.name, pkt)
        if w.record:
            w.hops.append(Hop("deliver", host.name, dev_in=dev, packet=pkt,
                              note=f"{rec.kind}: {rec.note}"))
        w.delivered = Delivery(host.name, pkt, rec, dev)
        if rec.answer is not None:
            w.answer = Answer(host.name, rec.answer)
        w.end("unreachable" if rec.kind == "refused" else "delivered", rec.note)

    # ------------------------------------------------------------------ VXLAN

    def _vxlan_xmit(
        self, w: _Walk, host: Host, vx: VxlanDevice, src_mac: str, dst_mac: str, pkt: Packet
    ) -> None:
        remote = vx.fdb.get(dst_mac)
        if remote is None or vx.local is None:
            self._drop(w, host, f"{vx.name}: no FDB entry for {dst_mac}", dev_out=vx.name)
            return
        sport = vxlan_source_port(pkt)
        # the outer packet keeps the skb mark (same namespace: skb_scrub_packet keeps it)
        outer = Packet(vx.local, remote, "udp", sport, vx.port, 64, pkt.length + VXLAN_OVERHEAD,
                       _NO_FLAGS, None, None, 0, b"", pkt.mark, None, False)
        inner = Tunnel(src_mac, dst_mac, pkt, vx.vni)
        if w.record:
            w.hops.append(
                Hop("vxlan", host.name, dev_out=vx.name, packet=outer,
                    vxlan=f"encap VNI {vx.vni}: {vx.local}:{sport} > {remote}:{vx.port} "
                          f"(fdb {dst_mac} dst {remote})")
            )
        self._local_out(w, host, outer, Skb(tunnel=inner))

    def _vxlan_rcv(
        self, w: _Walk, host: Host, vx: VxlanDevice, outer: Packet, inner: Tunnel
    ) -> None:
        if inner.vni != vx.vni:
            self._drop(w, host, f"{vx.name}: VNI {inner.vni} is not {vx.vni}", dev_in=vx.name)
            return
        if w.record:
            w.hops.append(
                Hop("vxlan", host.name, dev_in=vx.name, packet=inner.packet,
                    vxlan=f"decap VNI {vx.vni} from {outer.src}:{outer.sport}")
            )
        pkt = inner.packet
        if pkt.mark != outer.mark:
            # one skb: the inner packet carries the mark the outer one arrived with (the
            # sender's was scrubbed when the packet left its namespace), not the mark
            # the sender's rules gave it before encapsulation
            pkt = _with_mark(pkt, outer.mark)
        self._l2_rcv(w, host, vx, inner.src_mac, inner.dst_mac, pkt, None)


def _with_mark(p: Packet, mark: int) -> Packet:
    return Packet(p.src, p.dst, p.proto, p.sport, p.dport, p.ttl, p.length, p.flags,
                  p.icmp_type, p.icmp_code, p.icmp_id, p.payload, mark, p.inner, p.df)


def _with_ttl(p: Packet, ttl: int) -> Packet:
    """``p`` with another TTL (the constructor called directly: ``replace`` is slow)."""
    return Packet(p.src, p.dst, p.proto, p.sport, p.dport, ttl, p.length, p.flags,
                  p.icmp_type, p.icmp_code, p.icmp_id, p.payload, p.mark, p.inner, p.df)


def _wire_frame(src_mac: str, dst_mac: str, pkt: Packet, tunnel: Tunnel | None) -> Frame:
    """The frame a capture on the link sees: VXLAN packets as the outer headers with the
    inner frame (``encap`` names the outer addresses and ports)."""
    if tunnel is None:
        return Frame(src_mac, dst_mac, pkt)
    return Frame(
        src_mac,
        dst_mac,
        tunnel.packet,
        encap=VxlanEncap(
            outer_src=pkt.src,
            outer_dst=pkt.dst,
            vni=tunnel.vni,
            udp_sport=pkt.sport,
            udp_dport=pkt.dport,
            inner_src_mac=tunnel.src_mac,
            inner_dst_mac=tunnel.dst_mac,
        ),
    )

