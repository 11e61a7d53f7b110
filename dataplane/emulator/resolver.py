"""A pod's DNS lookups in the emulator: queries are UDP datagrams (TCP after a truncated
answer) walked through the emulated network like any other packet, so each one is
DNATed by kube-proxy to a DNS pod and its answer comes back through conntrack.

* :func:`query` — one question to one server (``dig @SERVER NAME TYPE``): a UDP
  datagram; a truncated (TC) answer is asked again over TCP, as dig and glibc do.
* :func:`resolve` — glibc's stub resolver (``res_nsearch``) for a pod: the names of
  :func:`netmodel.resolvconf.search_order` in turn, each asked of the pod's
  nameservers in order, until one answers with records. NXDOMAIN, NODATA and SERVFAIL go
  on to the next name; no answer at all (a REJECT's ICMP port unreachable, a DROP's
  timeout) ends the lookup, as ``res_nsearch`` gives up on ECONNREFUSED and timeouts.
  CNAMEs are followed within the answer. It asks type A only (what ``gethostbyname`` and
  ``getaddrinfo`` with ``AF_INET`` do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype

from dataplane.emulator.cluster import EmulatedCluster
from dataplane.emulator.trace import Trace
from netmodel.errors import InputError
from netmodel.resolvconf import ResolvConf, search_order

DNS_PORT = 53


@dataclass(frozen=True, slots=True)
class Decoded:
    """The parts of an answer the resolver and its callers read: status, flags, and the
    sections as ``name ttl IN TYPE rdata`` lines."""

    rcode: str
    flags: tuple[str, ...]
    answer: tuple[str, ...]
    authority: tuple[str, ...]
    additional: tuple[str, ...]
    addresses: tuple[str, ...]


_DECODED: dict[bytes, Decoded] = {}
_QUESTIONS: dict[tuple[str, str], tuple[str, str, bytes]] = {}
_MEMO_MAX = 10_000


def decode(response: bytes) -> Decoded:
    """:class:`Decoded` of an answer (dnspython), memoised on everything but the ID
    (decoding is a pure function of the octets; a cluster's answers repeat)."""
    key = response[2:]
    hit = _DECODED.get(key)
    if hit is None:
        m = dns.message.from_wire(response)
        hit = Decoded(
            dns.rcode.to_text(m.rcode()),
            tuple(dns.flags.to_text(m.flags).lower().split()),
            tuple(_section(m.answer)),
            tuple(_section(m.authority)),
            tuple(_section(m.additional)),
            tuple(str(rd) for r in m.answer if r.rdtype == dns.rdatatype.A for rd in r),
        )
        if len(_DECODED) >= _MEMO_MAX:
            _DECODED.clear()
        _DECODED[key] = hit
    return hit


def _question(qname: str, qtype: str) -> tuple[str, str, bytes]:
    """(absolute name, type mnemonic, the question's wire form with ID 0) — built by
    dnspython once per (name, type); each query stamps its own ID on a copy."""
    hit = _QUESTIONS.get((qname, qtype))
    if hit is None:
        try:
            name = dns.name.from_text(qname)
            rdtype = dns.rdatatype.from_text(qtype.upper())
        except (dns.exception.DNSException, ValueError) as e:
            raise InputError(f"{qname!r} {qtype}: {e}", field="NAME") from None
        msg = dns.message.make_query(name, rdtype)
        msg.id = 0
        hit = (name.to_text(), dns.rdatatype.to_text(rdtype), msg.to_wire())
        if len(_QUESTIONS) >= _MEMO_MAX:
            _QUESTIONS.clear()
        _QUESTIONS[(qname, qtype)] = hit
    return hit


@dataclass(frozen=True, slots=True)
class Query:
    """One question asked of one server, and what came back.

    ``response``: the answer's wire form (None: nothing came back; ``error`` says what
    the socket reported). ``traces``: the walks (UDP datagram; then, after TC, the TCP
    SYN and the data segment)."""

    qname: str
    qtype: str
    server: str
    proto: str
    response: bytes | None
    traces: tuple[Trace, ...]
    error: str | None = None
    truncated_udp: bool = False
    query_id: int = 0

    @property
    def message(self) -> dns.message.Message | None:
        return None if self.response is None else dns.message.from_wire(self.response)

    @property
    def decoded(self) -> Decoded | None:
        return None if self.response is None else decode(self.response)

    @property
    def rcode(self) -> str | None:
        d = self.decoded
        return None if d is None else d.rcode

    def records(self, rdtype: str | None = None) -> list[str]:
        """The answer section's records as ``name ttl IN TYPE rdata`` lines (only of
        ``rdtype`` when given)."""
        d = self.decoded
        if d is None:
            return []
        return [r for r in d.answer if rdtype is None or r.split(" ", 4)[3] == rdtype]

    def addresses(self) -> list[str]:
        d = self.decoded
        return [] if d is None else list(d.addresses)

    def path(self) -> list[str]:
        """The namespaces the question crossed, then those its answer crossed."""
        if not self.traces:
            return []
        t = self.traces[-1]
        out = _path(t)
        if t.reply is not None:
            out += _path(t.reply)[1:]
        return out

    def to_json(self, *, hops: bool = True) -> dict[str, Any]:
        m = self.decoded
        out: dict[str, Any] = {
            "qname": self.qname,
            "qtype": self.qtype,
            "server": self.server,
            "proto": self.proto,
            "status": self.rcode,
            "error": self.error,
            "truncated_udp": self.truncated_udp,
            "flags": list(m.flags) if m is not None else [],
            "answer": self.records(),
            "authority": list(m.authority) if m is not None else [],
            "additional": list(m.additional) if m is not None else [],
            "path": self.path(),
            "delivered_to": (
                self.traces[-1].delivered_to.to_json()
                if self.traces and self.traces[-1].delivered_to
                else None
            ),
        }
        if hops:
            out["traces"] = [t.to_json() for t in self.traces]
        return out


def _section(rrsets: list[Any]) -> list[str]:
    return [
        f"{r.name} {r.ttl} IN {dns.rdatatype.to_text(r.rdtype)} {rd}" for r in rrsets for rd in r
    ]


def _path(t: Trace) -> list[str]:
    out: list[str] = []
    for h in t.hops:
        if h.kind != "arp" and (not out or out[-1] != h.netns):
            out.append(h.netns)
    return out


@dataclass(frozen=True, slots=True)
class Resolution:
    """A name looked up the way a pod's libc does (see :func:`resolve`).

    ``status``: ``ok`` (``addresses`` found, by ``answered_name``), ``NXDOMAIN`` /
    ``NODATA`` (every name tried gave that; NODATA when any did), ``error`` (a query got
    no answer: ``error`` says what the socket reported), ``no-nameserver``."""

    name: str
    status: str
    addresses: tuple[str, ...]
    queries: tuple[Query, ...]
    answered_name: str | None = None
    error: str | None = None

    def to_json(self, *, hops: bool = True) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "addresses": list(self.addresses),
            "answered_name": self.answered_name,
            "error": self.error,
            "queries": [q.to_json(hops=hops) for q in self.queries],
        }


def _socket_error(trace: Trace) -> str:
    """What a UDP socket reports when no DNS answer came back."""
    r = trace.reply
    if r is not None and r.packet.proto == "icmp":
        return "connection refused" if r.packet.icmp_code == 3 else "host unreachable"
    if trace.verdict == "REJECT":
        return "connection refused"
    return "timed out"


def query(
    cluster: EmulatedCluster,
    src: str,
    server: str,
    qname: str,
    qtype: str = "A",
    *,
    tcp: bool = False,
    query_id: int | None = None,
    record: bool = True,
) -> Query:
    """Ask ``server`` (an IP) ``qname`` (absolute or not: a final dot is added) of type
    ``qtype`` from namespace ``src``; see the module docstring. ``record`` False walks
    the UDP question and its answer without keeping their hops."""
    qtext, ttext, template = _question(qname, qtype)
    qid = query_id if query_id is not None else cluster.dns_id()
    wire = qid.to_bytes(2, "big") + template[2:]
    dst = f"{server}:{DNS_PORT}"
    if not tcp:
        t = cluster.trace(src, dst, "udp", payload=wire, record=record)
        got = _payload(t)
        if got is None:
            return Query(qtext, ttext, server, "udp", None, (t,), _socket_error(t), False, qid)
        if not got[2] & 0x02:  # TC
            return Query(qtext, ttext, server, "udp", got, (t,), None, False, qid)
        first: tuple[Trace, ...] = (t,)
    else:
        first = ()
    syn, data = cluster.stream(src, dst, None, len(wire).to_bytes(2, "big") + wire)
    traces = (*first, syn) if data is None else (*first, syn, data)
    got = _payload(data) if data is not None else None
    if got is None or len(got) < 2:
        err = "connection refused" if syn.reply is not None else "timed out"
        return Query(qtext, ttext, server, "tcp", None, traces, err, bool(first), qid)
    return Query(qtext, ttext, server, "tcp", got[2:], traces, None, bool(first), qid)


def _payload(t: Trace) -> bytes | None:
    r = t.reply
    if r is None or r.received is None or r.received.proto == "icmp" or not r.received.payload:
        return None
    return r.received.payload


def resolve(
    cluster: EmulatedCluster, src: str, name: str, conf: ResolvConf, qtype: str = "A"
) -> Resolution:
    """Look ``name`` up from namespace ``src`` with resolver configuration ``conf``,
    as glibc does (see the module docstring)."""
    if not conf.nameservers:
        return Resolution(name, "no-nameserver", (), (), error="no nameserver in resolv.conf")
    queries: list[Query] = []
    nodata = False
    for candidate in search_order(name, conf):
        for server in conf.nameservers:
            q = query(cluster, src, server, candidate, qtype)
            queries.append(q)
            if q.response is not None:
                break
        else:
            return Resolution(name, "error", (), tuple(queries), error=queries[-1].error)
        d = q.decoded
        assert d is not None
        if d.rcode == "NOERROR":
            found = [r for r in q.records() if f" IN {qtype.upper()} " in r]
            if found:
                addrs = tuple(r.rsplit(" ", 1)[1] for r in found)
                return Resolution(name, "ok", addrs, tuple(queries), answered_name=candidate)
            nodata = True
    return Resolution(name, "NODATA" if nodata else "NXDOMAIN", (), tuple(queries))
