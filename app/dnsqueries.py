"""DNS questions on either backend, with outcomes that compare across them (what the
labs and the differential tests ask).

* :func:`dig` — one question from a pod to a server (default: the pod's nameserver), as
  :class:`DnsOutcome`: the answer's status, flags and records, and which DNS pod
  answered (emulator: where the walk delivered the question; kernel: the reply source
  of the question's conntrack entry, i.e. the DNAT kube-proxy chose).
* :func:`resolve` — a name looked up by the pod's libc: the emulator's stub resolver
  (:func:`dataplane.emulator.resolver.resolve`) or, on the kernel, Python's
  ``getaddrinfo`` under ``ip netns exec`` (glibc reading ``/etc/netns/<ns>/resolv.conf``).
* :func:`search` — ``dig +search``: the names of the pod's search list
  (:func:`netmodel.resolvconf.search_order`) asked in turn with :func:`dig`, of any type
  and of any server, until one answers with records of that type; real questions on
  either backend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype

from dataplane.backends import EmulatorBackend, RealBackend
from netmodel.errors import InputError

_SRC = re.compile(r"src=(\S+)")


@dataclass(frozen=True, slots=True)
class DnsOutcome:
    """One question and its answer, backend-neutral. ``status``: the rcode's name, or
    ``no-answer`` (``error`` says what the socket reported). ``answer``/``authority``/
    ``additional``: ``name ttl IN TYPE rdata`` lines (the answer sorted: CoreDNS's
    order is not part of the contract). ``server``: the address asked. ``server_pod``:
    ``ns/name`` of the DNS pod that answered. ``conntrack``: on the kernel, the question's conntrack entries as
    ``conntrack -L`` printed them on each node (``node: line``): the DNAT the kernel did,
    what it has to show for the emulator's hops."""

    qname: str
    qtype: str
    status: str
    flags: tuple[str, ...] = ()
    answer: tuple[str, ...] = ()
    authority: tuple[str, ...] = ()
    additional: tuple[str, ...] = ()
    proto: str = "udp"
    truncated_udp: bool = False
    server_pod: str | None = None
    error: str | None = None
    response: bytes | None = field(default=None, repr=False, compare=False)
    conntrack: tuple[str, ...] = field(default=(), compare=False)
    server: str = field(default="", compare=False)

    def key(self) -> tuple[Any, ...]:
        """What must agree between backends (which pod answered is a random choice)."""
        return (
            self.qname,
            self.qtype,
            self.status,
            self.flags,
            self.answer,
            self.authority,
            tuple(sorted(self.additional)),
            self.proto,
            self.truncated_udp,
        )

    @property
    def addresses(self) -> list[str]:
        return [r.rsplit(" ", 1)[1] for r in self.answer if " IN A " in r]

    def to_json(self) -> dict[str, Any]:
        return {
            "qname": self.qname,
            "qtype": self.qtype,
            "status": self.status,
            "flags": list(self.flags),
            "answer": list(self.answer),
            "authority": list(self.authority),
            "additional": list(self.additional),
            "proto": self.proto,
            "truncated_udp": self.truncated_udp,
            "server": self.server,
            "server_pod": self.server_pod,
            "error": self.error,
            "conntrack": list(self.conntrack),
        }


def _lines(rrsets: list[Any]) -> list[str]:
    return [
        f"{r.name} {r.ttl} IN {dns.rdatatype.to_text(r.rdtype)} {rd}" for r in rrsets for rd in r
    ]


def outcome(
    qname: str,
    qtype: str,
    response: bytes | None,
    *,
    proto: str,
    truncated_udp: bool,
    server_pod: str | None,
    error: str | None,
    conntrack: tuple[str, ...] = (),
    server: str = "",
) -> DnsOutcome:
    if response is None:
        return DnsOutcome(
            qname,
            qtype,
            "no-answer",
            proto=proto,
            error=error,
            truncated_udp=truncated_udp,
            server_pod=server_pod,
            conntrack=conntrack,
            server=server,
        )
    m = dns.message.from_wire(response)
    return DnsOutcome(
        qname,
        qtype,
        dns.rcode.to_text(m.rcode()),
        tuple(sorted(dns.flags.to_text(m.flags).lower().split())),
        tuple(sorted(_lines(m.answer))),
        tuple(_lines(m.authority)),
        tuple(_lines(m.additional)),
        proto,
        truncated_udp,
        server_pod,
        None,
        response,
        conntrack,
        server,
    )


def _question(name: str, qtype: str) -> tuple[str, str, dns.message.Message]:
    try:
        qn = dns.name.from_text(name)
        rt = dns.rdatatype.from_text(qtype.upper())
    except Exception as e:
        raise InputError(f"{name!r} {qtype}: {e}", field="NAME") from None
    return qn.to_text(), dns.rdatatype.to_text(rt), dns.message.make_query(qn, rt)


def _server(view: Any, src: str, server: str | None) -> str:
    if server is not None:
        return server
    conf = view.resolv_confs.get(src)
    if conf is None or not conf.nameservers:
        raise InputError(f"{src}: no nameserver (not a pod, or no cluster DNS)", field="SRC")
    return str(conf.nameservers[0])


def dig(
    be: EmulatorBackend | RealBackend,
    src: str,
    name: str,
    qtype: str = "A",
    *,
    server: str | None = None,
    tcp: bool = False,
) -> DnsOutcome:
    """Ask ``name`` of type ``qtype`` from pod ``src`` (see the module docstring)."""
    srv = _server(be.view, src, server)
    if isinstance(be, EmulatorBackend):
        from dataplane.emulator.resolver import query

        q = query(be.cluster, src, srv, name, qtype, tcp=tcp)
        d = q.traces[-1].delivered_to if q.traces else None
        return outcome(
            q.qname,
            q.qtype,
            q.response,
            proto=q.proto,
            truncated_udp=q.truncated_udp,
            server_pod=d.pod if d else None,
            error=q.error,
            server=srv,
        )
    from dataplane.linux import dnsclient
    from dataplane.linux.conntrack import parse_line

    qname, qt, msg = _question(name, qtype)
    raw = dnsclient.query(be.cluster.netns(src), srv, msg.to_wire(), tcp=tcp)
    # this question's flow: its source port and the address asked (an entry of an
    # earlier question from the same port to another address may still be listed)
    flows = {
        node: kept
        for node, entries in be.flows_conntrack([raw.sport], raw.proto, settle=0.0)
        .get(raw.sport, {})
        .items()
        if (kept := [e for e in entries if parse_line(e).field("orig", "dst") == srv])
    }
    return outcome(
        qname,
        qt,
        raw.response,
        proto=raw.proto,
        truncated_udp=raw.truncated_udp,
        server_pod=_answered_by(be, flows),
        error=raw.error,
        conntrack=tuple(f"{node}: {e}" for node, es in sorted(flows.items()) for e in es),
        server=srv,
    )


def _answered_by(be: RealBackend, flows: dict[str, list[str]]) -> str | None:
    """The pod whose address is the reply source of the question's conntrack entry."""
    by_ip = {str(r.ip): pod for pod, r in be.cluster.pods.items()}
    for entries in flows.values():
        for e in entries:
            found = _SRC.findall(e)
            if len(found) >= 2 and found[1] in by_ip:
                return by_ip[found[1]]
    return None


@dataclass(frozen=True, slots=True)
class Search:
    """A ``dig +search`` walk: every question asked, in order, and how it ended.
    ``status``: ``ok`` (``answered_name`` answered with records of the type asked),
    ``NXDOMAIN`` / ``NODATA`` (every name gave one of those; NODATA when any did), or
    ``error`` (a question got no answer: the walk stops there, as glibc's does)."""

    name: str
    qtype: str
    status: str
    queries: tuple[DnsOutcome, ...]
    answered_name: str | None = None

    @property
    def records(self) -> list[str]:
        """The answering question's records of the type asked."""
        if self.status != "ok":
            return []
        return [r for r in self.queries[-1].answer if f" IN {self.qtype} " in r]


def search(
    be: EmulatorBackend | RealBackend,
    src: str,
    name: str,
    qtype: str = "A",
    *,
    server: str | None = None,
) -> Search:
    """``name`` through pod ``src``'s search list, each candidate a :func:`dig` of type
    ``qtype`` to ``server`` (default: each of the pod's nameservers in turn, the next
    only when one does not answer). See :class:`Search`."""
    from netmodel.resolvconf import search_order

    conf = be.view.resolv_confs.get(src)
    if conf is None:
        raise InputError(f"{src}: not a pod", field="SRC")
    servers = [server] if server is not None else [str(n) for n in conf.nameservers]
    if not servers:
        raise InputError(f"{src}: its resolv.conf has no nameserver", field="SRC")
    qt = _question(name, qtype)[1]
    asked: list[DnsOutcome] = []
    nodata = False
    for candidate in search_order(name, conf):
        for srv in servers:
            o = dig(be, src, candidate, qt, server=srv)
            asked.append(o)
            if o.status != "no-answer":
                break
        else:
            return Search(name, qt, "error", tuple(asked))
        if o.status == "NOERROR":
            if any(f" IN {qt} " in r for r in o.answer):
                return Search(name, qt, "ok", tuple(asked), answered_name=o.qname)
            nodata = True
    return Search(name, qt, "NODATA" if nodata else "NXDOMAIN", tuple(asked))


@dataclass(frozen=True, slots=True)
class Lookup:
    """A libc lookup's outcome: the addresses, or the error (``status`` ``ok`` or not)."""

    name: str
    status: str
    addresses: tuple[str, ...]
    queries: int | None = None


def resolve(be: EmulatorBackend | RealBackend, src: str, name: str) -> Lookup:
    """``name`` looked up from pod ``src`` by its libc (see the module docstring).
    ``status`` is ``ok`` or ``not-found`` (NXDOMAIN/NODATA everywhere) or ``error``
    (no answer: ``getaddrinfo``'s EAI_AGAIN)."""
    if isinstance(be, EmulatorBackend):
        from dataplane.emulator.resolver import resolve as stub

        conf = be.cluster.resolv_confs.get(src)
        if conf is None:
            raise InputError(f"{src}: not a pod", field="SRC")
        r = stub(be.cluster, src, name, conf)
        status = {"ok": "ok", "NXDOMAIN": "not-found", "NODATA": "not-found"}.get(r.status, "error")
        return Lookup(name, status, tuple(sorted(r.addresses)), len(r.queries))
    from dataplane.linux import dnsclient

    addrs, err = dnsclient.getaddrinfo(be.cluster.netns(src), name)
    if err is None:
        return Lookup(name, "ok", tuple(sorted(addrs)))
    low = err.lower()
    status = "not-found" if ("not known" in low or "no address" in low) else "error"
    return Lookup(name, status, ())
