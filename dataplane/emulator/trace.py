"""Trace values: what one packet did, hop by hop, and the top-level verdict.

A :class:`Trace` is a product output (the CLI prints it, tests assert on it), so it is a
frozen value with a stable JSON form. Its top-level keys are the CLI's contract:

``verdict``       one of :data:`VERDICTS`
``delivered_to``  ``{ip, port, pod, node}`` of the socket that received the packet, or null
``endpoints``     ``[{"endpoint": "ip:port", "probability": p}]`` in rule order
``masquerade``    the source address was rewritten on the way
``source_seen``   the source address the receiving endpoint saw
``hops``          every step (:class:`Hop`), in order
``reply``         the answer's own trace (SYN-ACK, echo reply, RST, ICMP error), or null

A :class:`Hop` is deliberately flat: one ``kind`` and the optional fields that kind uses,
so a table renders it and JSON drops what is unset. ``objects`` (JSON ``object``: one
``{kind, namespace, name, field}``, or a list where several objects share the hop) names
what in the cluster made the hop: the emulator leaves it empty, and the application
layer fills it from the stored objects (``app.hopobjects``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from dataplane.proxy.savefmt import saved_rule
from netmodel.objectref import ObjectRef, objects_json
from netmodel.packet import Frame, Packet

Verdict = Literal[
    "delivered", "DROP", "REJECT", "no-route", "ttl-exceeded", "frag-needed", "unreachable"
]
VERDICTS: tuple[str, ...] = (
    "delivered",
    "DROP",
    "REJECT",
    "no-route",
    "ttl-exceeded",
    "frag-needed",
    "unreachable",
)

HopKind = Literal[
    "send",  # a socket or the kernel generated the packet
    "route",  # a routing decision (``route`` holds the route used)
    "rule",  # a netfilter rule that matched (hook/table/chain/rule_number/rule/verdict)
    "policy",  # a built-in chain's policy applied
    "conntrack",  # conntrack looked the packet up (``conntrack`` holds the state)
    "nat",  # a NAT rewrite happened (``nat`` holds before -> after)
    "bridge",  # a bridge decision (``bridge``: learned/forwarded/flooded/hairpin/local)
    "arp",  # an ARP request or reply, a neighbour learnt, a bridge flooding ARP
    "vxlan",  # VXLAN encapsulation or decapsulation
    "xmit",  # a frame left a device onto a link (``frame`` is what a capture sees)
    "forward",  # ip_forward: TTL decremented
    "deliver",  # handed to a local socket
    "drop",  # dropped (``note`` says why)
    "icmp",  # the kernel generated an ICMP error / TCP reset answer
    "netpol",  # a NetworkPolicy verdict: the rule before it decided (``note`` names it)
]


@dataclass(frozen=True, slots=True)
class Hop:
    """One step of a packet walk. Only the fields meaningful for ``kind`` are set."""

    kind: HopKind
    netns: str
    packet: Packet | None = None
    dev_in: str | None = None
    dev_out: str | None = None
    hook: str | None = None
    table: str | None = None
    chain: str | None = None
    rule_number: int | None = None
    rule: str | None = None
    verdict: str | None = None
    nat: str | None = None
    conntrack: str | None = None
    route: str | None = None
    bridge: str | None = None
    vxlan: str | None = None
    arp: str | None = None
    frame: Frame | None = None
    note: str | None = None
    objects: tuple[ObjectRef, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Every set field; the packet as its summary and header fields; frames by MAC."""
        out: dict[str, Any] = {"kind": self.kind, "netns": self.netns}
        for name in (
            "dev_in",
            "dev_out",
            "hook",
            "table",
            "chain",
            "rule_number",
            "rule",
            "verdict",
            "nat",
            "conntrack",
            "route",
            "bridge",
            "vxlan",
            "arp",
            "note",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = saved_rule(value) if name == "rule" else value
        if self.packet is not None:
            out["packet"] = packet_json(self.packet)
        if self.frame is not None:
            fr: dict[str, Any] = {"src_mac": self.frame.src_mac, "dst_mac": self.frame.dst_mac}
            if self.frame.encap is not None:
                e = self.frame.encap
                fr["vxlan"] = {
                    "outer_src": str(e.outer_src),
                    "outer_dst": str(e.outer_dst),
                    "vni": e.vni,
                    "udp_sport": e.udp_sport,
                    "udp_dport": e.udp_dport,
                }
            out["frame"] = fr
        if self.objects:
            out["object"] = objects_json(self.objects)
        return out

    def detail(self) -> str:
        """A one-line human description (used by :meth:`Trace.render_text`)."""
        parts: list[str] = []
        if self.kind in ("rule", "policy"):
            where = f"{self.table}/{self.chain}" if self.chain else f"{self.table}"
            if self.rule_number is not None:
                where += f" #{self.rule_number}"
            parts.append(f"{self.hook} {where}")
            if self.rule:
                parts.append(saved_rule(self.rule))
            if self.verdict:
                parts.append(f"=> {self.verdict}")
        for text in (
            self.route,
            self.conntrack and self.kind != "conntrack" and f"ct {self.conntrack}",
            self.nat,
            self.bridge,
            self.vxlan,
            self.arp,
        ):
            if text:
                parts.append(text)
        if self.kind not in ("rule", "policy", "netpol") and self.verdict:
            parts.append(self.verdict)
        if self.kind in ("send", "xmit", "deliver", "icmp", "forward") and self.packet:
            parts.append(self.packet.summary())
        if self.note:
            parts.append(self.note)
        return "  ".join(parts)


def made_by(hops: tuple[Hop, ...]) -> list[str]:
    """The text form of the hops' ``objects``: a ``made by`` heading, then one line per run
    of consecutive hops naming the same objects (``#12-14  Service default/web
    spec.ports[0] (port http) <- kube-proxy``); nothing when no hop names any. Implicit
    references (the hop's own Pod or Node) are left out: JSON has them."""
    named = [tuple(r for r in h.objects if not r.implicit) for h in hops]
    if not any(named):
        return []
    out = ["  made by:"]
    i = 0
    while i < len(hops):
        j = i
        while j + 1 < len(hops) and named[j + 1] == named[i]:
            j += 1
        if named[i]:
            where = f"#{i + 1}" if i == j else f"#{i + 1}-{j + 1}"
            for k, ref in enumerate(named[i]):
                by = f" <- {ref.by}" if ref.by else ""
                out.append(f"    {where if k == 0 else '':<9} {ref.text()}{by}")
        i = j + 1
    return out


def packet_json(p: Packet) -> dict[str, Any]:
    """A packet's header as JSON (addresses as strings, flags sorted)."""
    out: dict[str, Any] = {
        "src": str(p.src),
        "dst": str(p.dst),
        "proto": p.proto,
        "ttl": p.ttl,
        "length": p.length,
    }
    if p.proto == "icmp":
        out["icmp_type"] = p.icmp_type
        out["icmp_code"] = p.icmp_code
        out["icmp_id"] = p.icmp_id
    else:
        out["sport"] = p.sport
        out["dport"] = p.dport
    if p.flags:
        out["flags"] = sorted(p.flags)
    if p.mark:
        out["mark"] = hex(p.mark)
    if p.inner is not None:
        out["inner"] = packet_json(p.inner)
    out["summary"] = p.summary()
    return out


@dataclass(frozen=True, slots=True)
class DeliveredTo:
    """The socket that received the packet."""

    ip: str
    port: int
    pod: str | None
    node: str | None
    netns: str

    def to_json(self) -> dict[str, Any]:
        return {"ip": self.ip, "port": self.port, "pod": self.pod, "node": self.node}


@dataclass(frozen=True, slots=True)
class EndpointChance:
    """One reachable endpoint (``ip:port``, or a verdict such as ``REJECT``) and the
    probability of reaching it."""

    endpoint: str
    probability: float

    def to_json(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "probability": round(self.probability, 10)}


@dataclass(frozen=True, slots=True)
class Trace:
    """One packet's walk and, in ``reply``, its answer's walk.

    ``verdict`` is :data:`VERDICTS`; ``reason`` says in words what ended the walk.
    ``chosen_by`` is the rule text that picked the endpoint (a DNAT's jump into a
    ``KUBE-SEP-`` chain, or the IPVS scheduler), when one did. ``packet`` is the packet
    as sent, ``received`` as the receiving socket saw it (after every NAT).
    """

    verdict: str
    packet: Packet
    src: str
    dst: str
    hops: tuple[Hop, ...]
    delivered_to: DeliveredTo | None = None
    source_seen: str | None = None
    masquerade: bool = False
    endpoints: tuple[EndpointChance, ...] = ()
    reply: Trace | None = None
    reason: str = ""
    chosen_by: str | None = None
    received: Packet | None = None
    branches: tuple[tuple[float, Trace], ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """The CLI's JSON form (see the module docstring for the contract)."""
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "reason": self.reason,
            "from": self.src,
            "to": self.dst,
            "packet": packet_json(self.packet),
            "received": packet_json(self.received) if self.received else None,
            "delivered_to": self.delivered_to.to_json() if self.delivered_to else None,
            "endpoints": [e.to_json() for e in self.endpoints],
            "masquerade": self.masquerade,
            "source_seen": self.source_seen,
            "chosen_by": self.chosen_by,
            "hops": [h.to_json() for h in self.hops],
            "reply": self.reply.to_json() if self.reply else None,
        }
        if self.branches:
            out["branches"] = [
                {"probability": round(p, 10), "trace": t.to_json()} for p, t in self.branches
            ]
        return out

    def rules(self) -> list[Hop]:
        """The netfilter rules that matched, in order."""
        return [h for h in self.hops if h.kind == "rule"]

    def hops_of(self, kind: str) -> list[Hop]:
        return [h for h in self.hops if h.kind == kind]

    def render_text(self, *, width: int = 160) -> str:
        """A readable rendering: a summary line, then one table row per hop, then the
        reply the same way."""
        from io import StringIO

        from rich.console import Console
        from rich.table import Table

        # rules are never folded (a user finds each verbatim in 'svclab rules'): the
        # console is as wide as the longest line needs, trailing padding stripped
        longest = max((len(h.detail()) for t in self._chain() for h in t.hops), default=0)
        buf = StringIO()
        console = Console(
            file=buf, width=max(width, longest + 80), color_system=None, soft_wrap=False
        )
        self._render(console, Table, title="request")
        return "\n".join(line.rstrip() for line in buf.getvalue().split("\n"))

    def _chain(self) -> list[Trace]:
        out: list[Trace] = []
        t: Trace | None = self
        while t is not None:
            out.append(t)
            t = t.reply
        return out

    def _render(self, console: Any, table_cls: Any, *, title: str) -> None:
        head = f"{title}: {self.packet.summary()}  [{self.src} -> {self.dst}]  => {self.verdict}"
        if self.reason:
            head += f" ({self.reason})"
        console.print(head, highlight=False, markup=False)
        if self.delivered_to is not None:
            d = self.delivered_to
            where = f"pod {d.pod}" if d.pod else d.netns
            console.print(
                f"  delivered to {d.ip}:{d.port} ({where}, node {d.node}); "
                f"source seen {self.source_seen}; masquerade {self.masquerade}",
                highlight=False,
                markup=False,
            )
        if self.endpoints:
            eps = ", ".join(f"{e.endpoint} ({e.probability:.4f})" for e in self.endpoints)
            console.print(f"  endpoints: {eps}", highlight=False, markup=False)
        table = table_cls(show_header=True, header_style=None, box=None, pad_edge=False)
        table.add_column("#", justify="right")
        table.add_column("netns")
        table.add_column("in")
        table.add_column("out")
        table.add_column("step")
        table.add_column("detail", no_wrap=True, overflow="ignore")
        from rich.text import Text

        for i, h in enumerate(self.hops, 1):
            cells = (str(i), h.netns, h.dev_in or "", h.dev_out or "", h.kind, h.detail())
            table.add_row(*(Text(c) for c in cells))  # plain text: rules hold "[...]"
        console.print(table)
        for line in made_by(self.hops):
            console.print(line, highlight=False, markup=False)
        if self.reply is not None:
            self.reply._render(console, table_cls, title="reply")
