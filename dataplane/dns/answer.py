"""Cluster DNS's answers: CoreDNS's kubernetes plugin as kubeadm configures it, over a
:class:`~netmodel.dnszone.DnsZone`. Pure: bytes in, bytes out (wire format by
dnspython).

kubeadm's Corefile is ``kubernetes <domain> in-addr.arpa ip6.arpa { pods insecure;
fallthrough in-addr.arpa ip6.arpa; ttl 30 }``, ``forward . /etc/resolv.conf``,
``cache 30``. What that answers (``<d>`` is the cluster domain; owner names are echoed as
asked, matching is case-insensitive):

==================================  ==================================================
name                                answer
==================================  ==================================================
``svc.ns.svc.<d>``                  A: the ClusterIP; headless: every ready endpoint's
                                    IP (none ready: NXDOMAIN); ExternalName: a CNAME to
                                    the external name (followed when svclab can: the
                                    target's A records are added; a loop of
                                    ExternalNames stops at the first name met again,
                                    a chain after 8 CNAMEs); SRV: one record per
                                    port (headless: per endpoint and port), additional
                                    A records for the targets
``host.svc.ns.svc.<d>``             a headless endpoint: ``host`` is its ``hostname``,
                                    or its IP with dashes (``10-244-1-5``) when it has
                                    none; ClusterIP Services have no such names
``_port._proto.svc.ns.svc.<d>``     SRV (and A) for the named port ``port`` of
                                    protocol ``proto``; SRV weights are 100 divided by
                                    the number of records, priority 0
``a-b-c-d.ns.pod.<d>``              A a.b.c.d (``pods insecure``: no check that such a
                                    pod exists; the namespace must)
``ns.svc.<d>``, ``ns.pod.<d>``      NODATA when the namespace exists, else NXDOMAIN
``<d>``, ``svc.<d>``, ``pod.<d>``   NODATA; ``<d>`` answers SOA and NS
                                    (``ns.dns.<d>``, whose A is kube-dns's ClusterIP)
``dns-version.<d>``                 TXT ``"1.1.0"`` (the DNS schema version)
reverse (``in-addr.arpa``)          PTR of a ClusterIP (the Service's name) or of a
                                    headless endpoint IP (its endpoint name); other
                                    addresses fall through to the upstream
anything else in ``<d>``            NXDOMAIN
==================================  ==================================================

A name that exists but has no record of the asked type (AAAA of an IPv4 Service, TXT,
MX, ANY, ...) is NODATA: NOERROR, no answer. NXDOMAIN and NODATA carry the zone's SOA
(``ns.dns.<d>. hostmaster.<d>. SERIAL 7200 1800 86400 30``) in the authority section.
Every TTL is 30. Answers from the zone have flags ``qr aa rd ra`` (``rd`` as asked).

Names outside the cluster's zones go to the upstream CoreDNS forwards to. svclab never
asks the host's resolver: the upstream is the Cluster's static ``dnsUpstream`` table (A
records for listed names, NODATA for their other types, NXDOMAIN for other names; flags
``qr rd ra``, TTL 30, as CoreDNS's ``cache 30`` caps it).

Protocol (miekg/dns, the server CoreDNS runs on): a message that does not decode (a
label longer than 63 octets, a name longer than 255, a truncated header) is answered
FORMERR when it has at least an ID; a message with other than one question FORMERR;
an opcode other than QUERY NOTIMP; a response (QR set) is ignored; a class other than
IN is REFUSED. Over UDP an answer larger than 512 octets (or than the query's EDNS
buffer size) is truncated to the records that fit, with the TC flag, so the client asks
again over TCP.
"""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Address

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from netmodel.dnszone import DnsZone, EndpointRecord, ServiceRecord

TTL = 30
UDP_LIMIT = 512
SCHEMA_VERSION = "1.1.0"
#: SOA timers CoreDNS's kubernetes plugin writes (refresh, retry, expire, minimum = ttl)
SOA_TIMERS = (7200, 1800, 86400, TTL)

A = dns.rdatatype.A
SRV = dns.rdatatype.SRV
CNAME = dns.rdatatype.CNAME
#: the most CNAMEs an ExternalName chain is chased through (CoreDNS stops adding
#: records to a chain past 7 earlier ones)
MAX_CNAME_CHAIN = 8
PTR = dns.rdatatype.PTR
TXT = dns.rdatatype.TXT
SOA = dns.rdatatype.SOA
NS = dns.rdatatype.NS
IN = dns.rdataclass.IN

RdataType = dns.rdatatype.RdataType
RR = tuple[str, RdataType, str]  # owner (absolute), type, rdata text


class _Result:
    """What a lookup found: rcode, answer and additional records, and whether the
    cluster's zone (aa) answered."""

    __slots__ = ("additional", "answer", "authoritative", "rcode", "zone_apex")

    def __init__(self) -> None:
        self.rcode: dns.rcode.Rcode = dns.rcode.NOERROR
        self.answer: list[RR] = []
        self.additional: list[RR] = []
        self.authoritative = True
        self.zone_apex: str | None = None


def answer_wire(zone: DnsZone, wire: bytes, *, tcp: bool = False) -> bytes | None:
    """The answer to one DNS message ``wire`` (see the module docstring); None when
    nothing is sent back (a response, or fewer than the 12 octets of a header)."""
    if len(wire) < 12:
        return None
    if wire[2] & 0x80:  # QR: a response
        return None
    try:
        query = dns.message.from_wire(wire)
    except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
        return _bare(wire, dns.rcode.FORMERR)
    if query.opcode() != dns.opcode.QUERY:
        return _bare(wire, dns.rcode.NOTIMP)
    if len(query.question) != 1:
        return _bare(wire, dns.rcode.FORMERR)
    resp = dns.message.make_response(query, our_payload=1232)
    resp.flags |= dns.flags.RA
    q = query.question[0]
    if q.rdclass != IN:
        resp.set_rcode(dns.rcode.REFUSED)
        return resp.to_wire()
    result = lookup(zone, q.name, q.rdtype)
    if result.authoritative:
        resp.flags |= dns.flags.AA
    resp.set_rcode(result.rcode)
    for section, rrs in ((resp.answer, result.answer), (resp.additional, result.additional)):
        for owner, rtype, text in rrs:
            _add(section, owner, rtype, text)
    if result.zone_apex is not None and not result.answer:
        _add(resp.authority, result.zone_apex, SOA, _soa_text(zone))
    limit = 65535 if tcp else max(UDP_LIMIT, query.payload if query.edns >= 0 else UDP_LIMIT)
    return _fit(resp, limit)


def _add(section: list[dns.rrset.RRset], owner: str, rtype: RdataType, text: str) -> None:
    rd = dns.rdata.from_text(IN, rtype, text)
    name = dns.name.from_text(owner)
    for rrset in section:
        if rrset.name == name and rrset.rdtype == rtype:
            rrset.add(rd, TTL)
            return
    rrset = dns.rrset.RRset(name, IN, rtype)
    rrset.add(rd, TTL)
    section.append(rrset)


def _bare(wire: bytes, rcode: dns.rcode.Rcode) -> bytes:
    """A header-only answer with the query's ID (what a server can say about a message
    it could not read)."""
    msg = dns.message.Message(id=int.from_bytes(wire[:2], "big"))
    msg.flags = dns.flags.QR | dns.flags.RA | (int.from_bytes(wire[2:4], "big") & dns.flags.RD)
    msg.set_rcode(rcode)
    return msg.to_wire()


def _fit(resp: dns.message.Message, limit: int) -> bytes:
    """``resp`` on the wire within ``limit`` octets: as is if it fits, else truncated
    (additional section dropped, then answer records from the end) with TC set."""
    try:
        return resp.to_wire(max_size=limit)
    except dns.exception.TooBig:
        pass
    resp.flags |= dns.flags.TC
    resp.additional = []
    rows = [(rrset, rd) for rrset in resp.answer for rd in rrset]
    while True:
        rows.pop() if rows else None
        rebuilt: list[dns.rrset.RRset] = []
        for rrset, rd in rows:
            if not rebuilt or rebuilt[-1].name != rrset.name or rebuilt[-1].rdtype != rrset.rdtype:
                rebuilt.append(dns.rrset.RRset(rrset.name, rrset.rdclass, rrset.rdtype))
            rebuilt[-1].add(rd, rrset.ttl)
        resp.answer = rebuilt
        try:
            return resp.to_wire(max_size=limit)
        except dns.exception.TooBig:
            if not rows:
                resp.authority = []
                return resp.to_wire(max_size=limit)


def _soa_text(zone: DnsZone) -> str:
    d = zone.domain
    return f"ns.dns.{d}. hostmaster.{d}. {zone.serial} " + " ".join(map(str, SOA_TIMERS))


# ---------------------------------------------------------------------- lookups


def lookup(
    zone: DnsZone, qname: dns.name.Name, qtype: RdataType, chain: frozenset[str] = frozenset()
) -> _Result:
    """The records for one question (see the module docstring). ``chain``: the names an
    ExternalName CNAME chain has already passed through (lower case, absolute)."""
    owner = qname.to_text()
    labels = [lab.decode("ascii", "replace").lower() for lab in qname.labels[:-1]]
    dom = zone.domain.split(".")
    res = _Result()
    if labels[-len(dom) :] == dom:
        res.zone_apex = zone.domain + "."
        _cluster(zone, owner, labels[: len(labels) - len(dom)], qtype, res, chain)
        return res
    if labels[-2:] == ["in-addr", "arpa"] and qtype == PTR and _reverse(zone, owner, labels, res):
        return res
    res.authoritative = False
    _upstream(zone, owner, ".".join(labels), qtype, res)
    return res


def _cluster(
    zone: DnsZone,
    owner: str,
    rel: list[str],
    qtype: RdataType,
    res: _Result,
    chain: frozenset[str] = frozenset(),
) -> None:
    d = zone.domain
    if not rel:
        if qtype == SOA:
            res.answer.append((owner, SOA, _soa_text(zone)))
        elif qtype == NS:
            res.answer.append((owner, NS, f"ns.dns.{d}."))
            if zone.dns_ip:
                res.additional.append((f"ns.dns.{d}.", A, zone.dns_ip))
        return
    if rel == ["dns-version"]:
        if qtype == TXT:
            res.answer.append((owner, TXT, f'"{SCHEMA_VERSION}"'))
        return
    if rel == ["ns", "dns"]:
        if zone.dns_ip and qtype == A:
            res.answer.append((owner, A, zone.dns_ip))
        return
    kind, rest = rel[-1], rel[:-1]
    if kind not in ("svc", "pod"):
        res.rcode = dns.rcode.NXDOMAIN
        return
    if not rest:
        return  # svc.<d>, pod.<d>: NODATA
    ns = rest[-1]
    if ns not in zone.namespaces:
        res.rcode = dns.rcode.NXDOMAIN
        return
    rest = rest[:-1]
    if not rest:
        return  # an existing namespace: NODATA
    if kind == "pod":
        ip = _dashed_ip(rest[0]) if len(rest) == 1 else None
        if ip is None:
            res.rcode = dns.rcode.NXDOMAIN
        elif qtype == A:
            res.answer.append((owner, A, ip))
        return
    svc = zone.services.get((ns, rest[-1]))
    if svc is None:
        res.rcode = dns.rcode.NXDOMAIN
        return
    base = f"{svc.name}.{svc.namespace}.svc.{d}."
    if len(rest) == 1:
        _service(zone, owner, base, svc, qtype, res, None, chain)
    elif len(rest) == 2:
        eps = [e for e in svc.endpoints if _endpoint_name(e) == rest[0]]
        if not svc.headless or not eps:
            res.rcode = dns.rcode.NXDOMAIN
        elif qtype == A:
            res.answer.append((owner, A, eps[0].ip))
        elif qtype == SRV:
            _srv_endpoints(base, owner, eps, None, res)
    elif len(rest) == 3 and rest[0].startswith("_") and rest[1].startswith("_"):
        port = (rest[0][1:], rest[1][1:])
        if not any((p.name, p.proto) == port for p in svc.ports) and svc.external_name is None:
            res.rcode = dns.rcode.NXDOMAIN
            return
        _service(zone, owner, base, svc, qtype, res, port, chain)
    else:
        res.rcode = dns.rcode.NXDOMAIN


def _service(
    zone: DnsZone,
    owner: str,
    base: str,
    svc: ServiceRecord,
    qtype: RdataType,
    res: _Result,
    port: tuple[str, str] | None,
    chain: frozenset[str] = frozenset(),
) -> None:
    if svc.external_name is not None:
        target = svc.external_name + "."
        res.answer.append((owner, CNAME, target))
        # a chain of ExternalName Services is chased at most MAX_CNAME_CHAIN links and
        # never back to a name it passed through (a loop: its CNAMEs, each once)
        passed = chain | {owner.lower()}
        if (
            qtype in (A, dns.rdatatype.AAAA)
            and target.lower() not in passed
            and len(passed) < MAX_CNAME_CHAIN
        ):
            chase = lookup(zone, dns.name.from_text(target), qtype, passed)
            res.answer += [rr for rr in chase.answer if rr[1] in (A, CNAME)]
        return
    if svc.headless:
        if not svc.endpoints:
            res.rcode = dns.rcode.NXDOMAIN
            return
        if qtype == A:
            res.answer += [(owner, A, e.ip) for e in svc.endpoints]
        elif qtype == SRV:
            _srv_endpoints(base, owner, svc.endpoints, port, res)
        return
    if qtype == A:
        res.answer += [(owner, A, ip) for ip in svc.cluster_ips if ":" not in ip]
    elif qtype == SRV:
        ports = [p for p in svc.ports if port is None or (p.name, p.proto) == port]
        weight = 100 // max(1, len(ports))
        for p in ports:
            res.answer.append((owner, SRV, f"0 {weight} {p.port} {base}"))
        if ports:
            res.additional += [(base, A, ip) for ip in svc.cluster_ips if ":" not in ip]


def _srv_endpoints(
    base: str,
    owner: str,
    endpoints: Sequence[EndpointRecord],
    port: tuple[str, str] | None,
    res: _Result,
) -> None:
    rows = [(e, p) for e in endpoints for p in e.ports if port is None or (p.name, p.proto) == port]
    weight = 100 // max(1, len(rows))
    for e, p in rows:
        target = f"{_endpoint_name(e)}.{base}"
        res.answer.append((owner, SRV, f"0 {weight} {p.port} {target}"))
        res.additional.append((target, A, e.ip))


def _endpoint_name(e: EndpointRecord) -> str:
    return e.hostname or e.ip.replace(".", "-")


def _dashed_ip(label: str) -> str | None:
    parts = label.split("-")
    if len(parts) != 4:
        return None
    try:
        return str(IPv4Address(".".join(parts)))
    except ValueError:
        return None


def _reverse(zone: DnsZone, owner: str, labels: list[str], res: _Result) -> bool:
    octets = labels[:-2]
    if len(octets) != 4:
        return False
    ip = ".".join(reversed(octets))
    d = zone.domain
    for svc in zone.services.values():
        base = f"{svc.name}.{svc.namespace}.svc.{d}."
        if ip in svc.cluster_ips:
            res.answer.append((owner, PTR, base))
        for e in svc.endpoints:
            if e.ip == ip:
                res.answer.append((owner, PTR, f"{_endpoint_name(e)}.{base}"))
    if res.answer:
        res.zone_apex = "in-addr.arpa."
        return True
    return False


def _upstream(zone: DnsZone, owner: str, name: str, qtype: RdataType, res: _Result) -> None:
    ips = zone.upstream.get(name)
    if ips is None:
        res.rcode = dns.rcode.NXDOMAIN
    elif qtype == A:
        res.answer += [(owner, A, ip) for ip in ips]
