"""A realised cluster on the Linux kernel (:mod:`dataplane.backends.realise`) behind the
:class:`~dataplane.backends.base.Backend` interface, with what the kernel did with a
connection (:class:`RealTrace`: conntrack entries and rule counters)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from ipaddress import ip_address
from typing import TYPE_CHECKING, Any

from dataplane.backends.base import (
    EPHEMERAL,
    TRACE_PORT_ATTEMPTS,
    ConnOutcome,
    PingOutcome,
    Proto,
    conntrack_selected,
    node_names,
)
from netmodel.errors import InputError
from netmodel.objectref import ObjectRef, objects_json
from netmodel.view import ClusterView

if TYPE_CHECKING:
    from dataplane.linux.cni import CniMode
    from dataplane.linux.realize import RealCluster
    from dataplane.linux.rules import IptablesBackend, RuleCounter


@dataclass(frozen=True, slots=True)
class RuleHit:
    """A rule whose packet counter moved during a connection: by how much."""

    node: str
    table: str
    chain: str
    rule: str
    packets: int
    #: the objects that made the rule (filled by the application layer, as for
    #: :class:`~dataplane.emulator.trace.Hop`)
    objects: tuple[ObjectRef, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node,
            "table": self.table,
            "chain": self.chain,
            "rule": self.rule,
            "packets": self.packets,
        }
        if self.objects:
            out["object"] = objects_json(self.objects)
        return out


@dataclass(frozen=True, slots=True)
class RealTrace:
    """What the kernel did with one connection: the outcome, the conntrack entries of
    the connection on each node (``conntrack -L`` lines), and the rules that matched
    (their counters' increase; nodes in nftables mode have no counters)."""

    flow: dict[str, Any]
    outcome: ConnOutcome
    conntrack: dict[str, list[str]] = field(default_factory=dict)
    rules: tuple[RuleHit, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": "kernel",
            "flow": self.flow,
            **self.outcome.to_json(),
            "delivered": self.outcome.verdict == "delivered",
            "conntrack": self.conntrack,
            "rules": [r.to_json() for r in self.rules],
        }

    def render_text(self) -> str:
        f, o = self.flow, self.outcome
        head = f"{f['proto']} {f['from']} -> {f['to']}:{f['port']} (kernel): {o.verdict}"
        lines = [head]
        if o.verdict == "delivered":
            lines.append(f"  answered by pod/{o.pod}" + (f" at {o.endpoint}" if o.endpoint else ""))
            lines.append(
                f"  source seen {o.source_seen} (client {o.source}:{o.sport})"
                + (" (masquerade)" if o.masquerade else "")
            )
        elif o.detail:
            lines.append(f"  {o.detail}")
        lines.append("conntrack:")
        if not any(self.conntrack.values()):
            lines.append("  (no entry)")
        for node, entries in sorted(self.conntrack.items()):
            lines.extend(f"  node/{node}: {e}" for e in entries)
        lines.append("rules matched (packets):")
        if not self.rules:
            lines.append("  (none counted)")
        lines.extend(
            f"  node/{r.node} {r.table}/{r.chain} +{r.packets}: {r.rule}" for r in self.rules
        )
        made = [
            (i, [o for o in r.objects if not o.implicit]) for i, r in enumerate(self.rules, 1)
        ]
        if any(refs for _, refs in made):  # numbered as the rules above, in their order
            lines.append("made by:")
            lines.extend(
                f"  rule {i}: " + "; ".join(o.text() + (f" <- {o.by}" if o.by else "") for o in refs)
                for i, refs in made
                if refs
            )
        return "\n".join(lines)


class RealBackend:
    """A realised cluster (:mod:`dataplane.backends.realise`) behind the Backend interface.

    ``timeout``: how long a connection or echo request waits for its answer (a DROP
    costs that much). Sources may be logical names or an address of the network;
    destinations an address or a logical name."""

    name = "kernel"

    def __init__(self, view: ClusterView, cluster: RealCluster, *, timeout: float = 1.0) -> None:
        self.view = view
        self.cluster = cluster
        self.timeout = timeout
        self._rng = random.Random()

    # ------------------------------------------------------------------ names
    def source_ns(self, src: str) -> str:
        """The logical namespace a source names (a logical name, or an address in it)."""
        if src in self.view.network.namespaces:
            return src
        try:
            addr = ip_address(src)
        except ValueError:
            raise InputError(f"unknown source {src!r}", field="--from") from None
        owner = self.view.network.owner_of(addr)
        if owner is None:
            raise InputError(
                f"{addr} is no address of the realised network (an external client must be "
                "realised: svclab up --real --external-client IP)",
                field="--from",
            )
        return owner.name

    def dest_ip(self, dst: str) -> str:
        """An address, or a logical namespace's first address."""
        ns = self.view.network.namespaces.get(dst)
        if ns is None:
            return str(ip_address(dst))
        for itf in ns.interfaces:
            if itf.kind != "loopback" and itf.addresses:
                return str(itf.addresses[0].ip)
        raise InputError(f"{dst} has no address", field="--to")

    def _nodes(self) -> list[str]:
        return node_names(self.view)

    def _endpoint(self, pod: str, dst: str, dport: int, proto: str) -> str | None:
        """``ip:port`` that answered: known when the pod listens on one port of ``proto``
        (its server answered on it) or was addressed directly."""
        res = self.cluster.pods.get(pod)
        if res is None:
            return None
        if str(res.ip) == dst:
            return f"{dst}:{dport}"
        ports = [p for pr, p in self.view.listeners.get(f"pod/{pod}", ()) if pr == proto]
        return f"{res.ip}:{ports[0]}" if len(ports) == 1 else None

    # ------------------------------------------------------------------ traffic
    def ping(self, src: str, dst: str, count: int = 1) -> list[PingOutcome]:
        ns, ip = self.source_ns(src), self.dest_ip(dst)
        out = []
        for _ in range(count):
            r = self.cluster.ping(ns, ip, 1, timeout=self.timeout)
            ok = r.received == 1
            out.append(
                PingOutcome(
                    ok,
                    ip if ok else None,
                    r.ttls[0] if ok and r.ttls else None,
                    r.rtts[0] if ok and r.rtts else None,
                    target=ip,
                )
            )
        return out

    def connect(
        self,
        src: str,
        dst: str,
        dport: int,
        proto: Proto = "tcp",
        n: int = 1,
        *,
        sports: Sequence[int] | None = None,
    ) -> list[ConnOutcome]:
        """``n`` connections (``sports``: their source ports, one each; default: the
        kernel's ephemeral choice)."""
        return list(self.iter_connect(src, dst, dport, proto, n, sports=sports))

    def iter_connect(
        self,
        src: str,
        dst: str,
        dport: int,
        proto: Proto = "tcp",
        n: int = 1,
        *,
        sports: Sequence[int] | None = None,
    ) -> Iterator[ConnOutcome]:
        """:meth:`connect`, one outcome at a time, each yielded as soon as its connection
        is closed (nothing is kept between them: memory stays flat however large ``n``).
        Bad arguments are refused before the first connection is made."""
        if sports is not None and len(sports) != n:
            raise InputError(f"{len(sports)} source ports for {n} connections", field="sports")
        ns, ip = self.source_ns(src), self.dest_ip(dst)
        return self._connections(ns, ip, dport, proto, n, sports)

    def _connections(
        self,
        ns: str,
        ip: str,
        dport: int,
        proto: Proto,
        n: int,
        sports: Sequence[int] | None,
    ) -> Iterator[ConnOutcome]:
        from dataplane.linux.traffic import ConnectFailed

        for i in range(n):
            sport = sports[i] if sports is not None else None
            try:
                r = self.cluster.connect(ns, ip, dport, proto, sport=sport, timeout=self.timeout)
            except ConnectFailed as e:
                yield ConnOutcome(e.reason, None, None, sport=sport, detail=str(e))
                continue
            yield (
                ConnOutcome(
                    "delivered",
                    r.pod,
                    str(r.seen_src[0]),
                    self._endpoint(r.pod, ip, dport, proto),
                    source=str(r.local[0]),
                    sport=r.local[1],
                    sport_seen=r.seen_src[1],
                )
            )

    # ------------------------------------------------------------------ state
    def conntrack(self, node: str) -> list[str]:
        """The node's conntrack table (``conntrack -L`` lines)."""
        from dataplane.linux import conntrack

        node = node.removeprefix("node/")
        return [e.render() for e in conntrack.list_entries(self.cluster.node_netns(node))]

    def flow_conntrack(
        self, sport: int, proto: str, *, source: str | None = None, settle: float = 1.0
    ) -> dict[str, list[str]]:
        """Each node's conntrack entries of the connection from source port ``sport``
        (and address ``source``, if given) by original tuple, once TCP entries have left
        the closing states (up to ``settle`` seconds: the last ACK may still be on its
        way)."""
        found = self.flows_conntrack([sport], proto, source=source, settle=settle)
        return found.get(sport, {})

    def flows_conntrack(
        self,
        sports: Iterable[int],
        proto: str,
        *,
        source: str | None = None,
        settle: float = 1.0,
    ) -> dict[int, dict[str, list[str]]]:
        """:meth:`flow_conntrack` for several connections at once (one ``conntrack -L``
        per node): source port -> node -> entries. The overlay's own flows (VXLAN, UDP
        to port 8472) are left out: their source port is a hash that may collide."""
        from dataplane.linux import conntrack

        wanted = {str(p): p for p in sports}
        deadline = time.monotonic() + settle
        while True:
            found: dict[int, dict[str, list[str]]] = {}
            closing = False
            for node in self._nodes():
                for e in conntrack.list_entries(self.cluster.node_netns(node)):
                    port = wanted.get(e.field("orig", "sport") or "")
                    if port is not None and conntrack_selected(e, proto, source):
                        found.setdefault(port, {}).setdefault(node, []).append(e.render())
                        closing |= e.state in ("FIN_WAIT", "CLOSE_WAIT", "LAST_ACK", "CLOSE")
            if not closing or time.monotonic() >= deadline:
                return found
            time.sleep(0.02)

    def counters(self) -> dict[str, list[RuleCounter]]:
        """Every iptables rule of every node with its counters (nftables-mode nodes:
        none; their rules carry no counters), from the cluster's iptables back end
        (legacy: read through libiptc)."""
        from dataplane.linux.rules import rule_counters
        from netmodel.rulesets import IptablesRules

        backend = self.cluster.iptables_backend
        return {
            node: rule_counters(self.cluster.node_netns(node), backend=backend)
            for node in self._nodes()
            if isinstance(self.view.rulesets.get(node), IptablesRules)
        }

    def trace(
        self, src: str, dst: str, dport: int, proto: Proto = "tcp", *, sport: int | None = None
    ) -> RealTrace:
        """One connection with what the kernel did: its outcome, its conntrack entries,
        and the rules whose counters it moved."""
        from dataplane.linux.traffic import PortInUse

        before = self.counters()
        for attempt in range(TRACE_PORT_ATTEMPTS):
            # a port of our own choosing (the conntrack read-back needs it even when the
            # connection fails); one still held by a recent connection: another one
            port = sport if sport is not None else self._rng.randint(*EPHEMERAL)
            try:
                [o] = self.connect(src, dst, dport, proto, 1, sports=[port])
                break
            except PortInUse:
                if sport is not None or attempt == TRACE_PORT_ATTEMPTS - 1:
                    raise
        sport = port
        ct = self.flow_conntrack(sport, proto, source=o.source)
        after = self.counters()
        hits = []
        for node, rules in after.items():
            old = {(r.table, r.chain, r.rule): r.packets for r in before.get(node, [])}
            for r in rules:
                delta = r.packets - old.get((r.table, r.chain, r.rule), 0)
                if delta > 0:
                    hits.append(RuleHit(node, r.table, r.chain, r.rule, delta))
        flow = {"from": src, "to": dst, "port": dport, "proto": proto}
        return RealTrace(flow, o, ct, tuple(hits))

    def diagnose(self, sport: int | None = None, proto: str = "tcp") -> str:
        """Why might a flow have failed? The readiness probes that fail now, the router's
        and nodes' links, routes and neighbours, and (``sport`` given) every node's
        conntrack entries of that source port. Text for assertion and error messages."""
        from dataplane.linux import ready

        net = self.view.network
        kernel = self.cluster.namespaces
        failed = ready.failed_probes(ready.probes(net, self.view.guarded), kernel, timeout=0.3)
        lines = [f"probe failed: {p.src} -> {p.dst} ({p.what})" for p in failed]
        lines.append(f"readiness probes: {len(failed)} failed")
        if sport is not None:
            for port, by_node in self.flows_conntrack([sport], proto).items():
                for node, entries in sorted(by_node.items()):
                    lines += [f"conntrack {node} sport {port}: {e}" for e in entries]
        infra = (n for n, ns in net.namespaces.items() if ns.role in ("router", "node"))
        lines.append(ready.diagnose(infra, kernel))
        return "\n".join(lines)

    def close(self) -> None:
        """Nothing to release (the cluster's owner tears it down)."""


@contextmanager
def real_backend(
    view: ClusterView,
    *,
    cluster_id: str | None = None,
    cni: CniMode = "bridge-plugin",
    timeout: float = 1.0,
    iptables_backend: IptablesBackend = "nft",
) -> Iterator[RealBackend]:
    """Realise ``view`` on fresh network namespaces (network, rules, pod servers) and
    yield its :class:`RealBackend`; always tear it down, also on error or Ctrl-C.
    ``iptables_backend``: ``nft`` or ``legacy`` (:mod:`dataplane.linux.rules`)."""
    from dataplane.backends.realise import new_cluster_id, realize_view
    from dataplane.linux.realize import teardown

    cid = cluster_id or new_cluster_id()
    try:
        cluster, _ = realize_view(view, cluster_id=cid, cni=cni, iptables_backend=iptables_backend)
        b = RealBackend(view, cluster, timeout=timeout)
        yield b
        b.close()
    finally:
        teardown(cid)
