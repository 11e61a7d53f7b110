"""What the tools share: the pod's emulated world, name lookup as glibc does it, and one
TCP connection through the emulated dataplane.

* :class:`Emulated` — the emulated cluster a pod's commands run in, the Services by
  address (to name the one a connection went to), each node's rules (for the tools of
  host-network pods), a wall clock (dig's ``WHEN``), the pod servers' access log and,
  when the cluster holds a NetworkPolicy, what names the policy verdicts of a walk
  (:class:`PolicyVerdicts`).
* :func:`lookup` — ``getaddrinfo`` for ``AF_INET``: an IP literal as it is; else
  ``/etc/hosts`` (the pod's file, kubelet's) and then DNS: the pod's resolver
  (:func:`dataplane.emulator.resolver.resolve`: the search list, each question a UDP
  datagram walked through kube-proxy's rules to a DNS pod).
* :func:`tcp_exchange` — connect, send a request, read the answer, close: the SYN and
  the data segment walked through the emulator (:meth:`EmulatedCluster.stream`), what
  the client socket reports as :func:`dataplane.backends.emulated.socket_verdict` says,
  and the answering pod server's reply (:mod:`.podserver`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from typing import Protocol

from dataplane.backends.emulated import socket_verdict
from dataplane.emulator.cluster import EmulatedCluster
from dataplane.emulator.resolver import Resolution, resolve
from dataplane.emulator.trace import Trace
from dataplane.podtools import podserver
from dataplane.podtools.target import PodTarget
from netmodel.netpolicy import Decision
from netmodel.rulesets import RulesetInput

#: simulated one-way latency of a link (as :data:`dataplane.backends.emulated.LINK_LATENCY`)
LINK_LATENCY = 0.05e-3
#: Linux's SYN retransmissions before connect() fails with ETIMEDOUT
#: (``net.ipv4.tcp_syn_retries`` 6: 1+2+4+8+16+32+64 s)
SYN_GIVE_UP = 127.0


class PolicyVerdicts(Protocol):
    """The NetworkPolicy verdicts of a walk, as a trace names them (the application
    supplies it: :func:`app.netpolview.attribute` and :func:`app.netpolview.decisions`
    over the cluster's policy agent)."""

    def attribute(self, trace: Trace) -> Trace:
        """``trace`` with a ``netpol`` hop after each rule that decided a verdict."""
        ...

    def decisions(self, trace: Trace) -> tuple[Decision, ...]:
        """The verdicts that name a policy, in walk order."""
        ...


@dataclass(slots=True)
class Emulated:
    """The emulated world a pod's commands run in (see the module docstring).

    ``services``: ``(ip, port, proto)`` -> ``ns/name:port`` for every Service address a
    client may connect to (ClusterIPs; NodePorts on node addresses). ``rulesets``: per
    node name, the rules kube-proxy loaded there (host-network pods' ``iptables-save``,
    ``nft list ruleset``, ``ipvsadm -Ln``, ``ipset list``). ``access_log``: the pod
    servers' log lines, appended as they answer (:class:`podserver.LogLine`).
    ``policy``: None when the cluster holds no NetworkPolicy."""

    cluster: EmulatedCluster
    services: Mapping[tuple[str, int, str], str] = field(default_factory=dict)
    rulesets: Mapping[str, RulesetInput] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    access_log: list[podserver.LogLine] = field(default_factory=list)
    policy: PolicyVerdicts | None = None


@dataclass(frozen=True, slots=True)
class Lookup:
    """A name looked up: ``addresses`` (empty: failed, ``error`` says how as
    ``gai_strerror`` words it), the canonical name, where the answer came from
    (``literal``, ``hosts``, ``dns``) and the DNS resolution when DNS was asked."""

    name: str
    addresses: tuple[str, ...]
    canonical: str
    source: str
    error: str | None = None
    resolution: Resolution | None = None


#: gai_strerror texts (glibc)
EAI_NONAME = "Name or service not known"
EAI_AGAIN = "Temporary failure in name resolution"


def hosts_lookup(hosts: str, name: str) -> tuple[str, str] | None:
    """The first IPv4 line of a hosts file naming ``name`` (canonical name or alias,
    case-insensitive): (address, canonical name)."""
    want = name.lower().rstrip(".")
    for line in hosts.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) < 2:
            continue
        try:
            IPv4Address(words[0])
        except ValueError:
            continue
        if want in (w.lower() for w in words[1:]):
            return words[0], words[1]
    return None


def lookup(world: Emulated, pod: PodTarget, name: str) -> Lookup:
    """``getaddrinfo(name, AF_INET)`` from ``pod`` (see the module docstring)."""
    try:
        IPv4Address(name)
        return Lookup(name, (name,), name, "literal")
    except ValueError:
        pass
    hit = hosts_lookup(pod.hosts, name)
    if hit is not None:
        return Lookup(name, (hit[0],), hit[1], "hosts")
    res = resolve(world.cluster, pod.netns, name, pod.resolv_conf)
    if res.status == "ok":
        canonical = (res.answered_name or name).rstrip(".")
        return Lookup(name, res.addresses, canonical, "dns", resolution=res)
    error = EAI_NONAME if res.status in ("NXDOMAIN", "NODATA") else EAI_AGAIN
    return Lookup(name, (), name, "dns", error, res)


@dataclass(frozen=True, slots=True)
class Exchange:
    """One TCP connection as the client saw it. ``verdict``: ``delivered``,
    ``refused``, ``unreachable``, ``timeout`` (see :mod:`dataplane.backends.base`).
    ``local``: the client's address and port; ``seen``: the address and port the server
    saw; ``answer``: the bytes the server sent; ``rtt``: the simulated round trip of
    the handshake (seconds). ``policy``: the NetworkPolicy rules that decided the
    connection (empty when none did; ``syn`` then carries their ``netpol`` hops)."""

    verdict: str
    ip: str
    port: int
    local: tuple[str, int]
    syn: Trace
    data: Trace | None = None
    pod: str | None = None
    seen: tuple[str, int] | None = None
    answer: bytes = b""
    rtt: float = 0.0
    policy: tuple[Decision, ...] = ()

    @property
    def error(self) -> str:
        """strerror of the failed connect(): ECONNREFUSED, ENETUNREACH (ICMP net
        unreachable, or no route in the pod), EHOSTUNREACH (other ICMP unreachables),
        ETIMEDOUT."""
        if self.verdict == "refused":
            return "Connection refused"
        if self.verdict == "timeout":
            return "Connection timed out"
        r = self.syn.reply
        got = r.received if r is not None else None
        if got is None or (got.proto == "icmp" and got.icmp_code == 0):
            return "Network is unreachable"
        return "No route to host"


def _links(t: Trace | None) -> int:
    if t is None:
        return 0
    names = [h.netns for h in t.hops if h.kind != "arp"]
    crossed = sum(1 for a, b in itertools.pairwise(names) if a != b)
    return crossed + _links(t.reply)


def tcp_exchange(
    world: Emulated, pod: PodTarget, ip: str, port: int, request: bytes, *, zero_io: bool = False
) -> Exchange:
    """Connect from ``pod`` to ``ip:port``, send ``request`` (may be empty), read the
    answer and close (see the module docstring); the answering pod server logs what it
    answered. ``zero_io``: connect and close at once (``nc -z``): nothing sent, nothing
    answered."""
    cluster = world.cluster
    data: Trace | None
    if zero_io:
        syn, data = cluster.trace(pod.netns, ip, "tcp", port), None
    else:
        syn, data = cluster.stream(pod.netns, f"{ip}:{port}", None, request)
    verdict = socket_verdict(syn, "tcp", pod.netns)
    local = (str(syn.packet.src), syn.packet.sport)
    rtt = LINK_LATENCY * _links(syn)
    policy: tuple[Decision, ...] = ()
    if world.policy is not None:
        policy = world.policy.decisions(syn)
        syn = world.policy.attribute(syn)
    if zero_io and verdict == "delivered":
        d = syn.delivered_to
        r = syn.received
        seen = (str(r.src), r.sport) if r is not None else None
        pod_name = d.pod if d else None
        return Exchange(
            "delivered", ip, port, local, syn, None, pod_name, seen, rtt=rtt, policy=policy
        )
    if verdict != "delivered" or data is None:
        failed = verdict if verdict != "delivered" else "timeout"
        return Exchange(failed, ip, port, local, syn, rtt=rtt, policy=policy)
    d = syn.delivered_to
    received = data.received if data.received is not None else syn.received
    assert received is not None and d is not None
    seen = (str(received.src), received.sport)
    answer = podserver.answer(d.pod or d.netns, seen, (d.ip, d.port), request)
    if answer.log is not None:
        world.access_log.append(answer.log)
    return Exchange("delivered", ip, port, local, syn, data, d.pod, seen, answer.data, rtt, policy)
