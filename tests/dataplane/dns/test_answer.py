"""Cluster DNS answers against what CoreDNS's kubernetes plugin (kubeadm's Corefile:
``pods insecure``, ``ttl 30``, ``forward .``) answers, per its documentation and tests:
record kinds, NXDOMAIN vs NODATA, TTLs and SOA, truncation, and malformed questions."""

from __future__ import annotations

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from dataplane.dns import DnsZone, ZoneAnswerer, answer_wire
from netmodel.dnszone import EndpointRecord, PortRecord, ServiceRecord

D = "cluster.local"
PG = (PortRecord("pg", "tcp", 5432),)
SOA = f"{D}. 30 IN SOA ns.dns.{D}. hostmaster.{D}. 7 7200 1800 86400 30"


def zone(**extra: ServiceRecord) -> DnsZone:
    services = {
        ("default", "web"): ServiceRecord(
            "default",
            "web",
            ("10.96.0.20",),
            ports=(PortRecord("http", "tcp", 80), PortRecord("dns", "udp", 53)),
        ),
        ("default", "db"): ServiceRecord(
            "default",
            "db",
            headless=True,
            ports=PG,
            endpoints=(
                EndpointRecord("10.244.1.5", "db-0", PG),
                EndpointRecord("10.244.2.6", None, PG),
            ),
        ),
        ("default", "empty"): ServiceRecord("default", "empty", headless=True, ports=PG),
        ("default", "ext"): ServiceRecord("default", "ext", external_name="example.com"),
        ("default", "far"): ServiceRecord("default", "far", external_name="far.example.org"),
    }
    for name, rec in extra.items():
        services[("default", name)] = rec
    return DnsZone(
        domain=D,
        namespaces=frozenset({"default", "kube-system"}),
        services=services,
        dns_ip="10.96.0.10",
        upstream={"example.com": ("203.0.113.80",)},
        serial=7,
    )


def ask(
    name: str,
    qtype: str = "A",
    *,
    z: DnsZone | None = None,
    tcp: bool = False,
    payload: int | None = None,
) -> dns.message.Message:
    q = dns.message.make_query(name, qtype, use_edns=payload is not None, payload=payload or 0)
    wire = answer_wire(z or zone(), q.to_wire(), tcp=tcp)
    assert wire is not None
    r = dns.message.from_wire(wire)
    assert r.id == q.id
    return r


def lines(section: list) -> list[str]:  # type: ignore[type-arg]
    return [
        f"{r.name} {r.ttl} IN {dns.rdatatype.to_text(r.rdtype)} {rd}" for r in section for rd in r
    ]


def status(r: dns.message.Message) -> str:
    return dns.rcode.to_text(r.rcode())


def test_clusterip_service_a_record_ttl_30_authoritative() -> None:
    r = ask(f"web.default.svc.{D}")
    assert status(r) == "NOERROR"
    assert lines(r.answer) == [f"web.default.svc.{D}. 30 IN A 10.96.0.20"]
    assert r.flags & dns.flags.AA and r.flags & dns.flags.RA and r.flags & dns.flags.QR
    assert not r.authority


def test_names_match_case_insensitively_and_are_echoed_as_asked() -> None:
    r = ask(f"WEB.Default.SVC.{D}")
    assert lines(r.answer) == [f"WEB.Default.SVC.{D}. 30 IN A 10.96.0.20"]


@pytest.mark.parametrize(
    ("name", "qtype"),
    [
        (f"web.default.svc.{D}", "AAAA"),  # IPv4-only Service
        (f"web.default.svc.{D}", "TXT"),
        (f"web.default.svc.{D}", "MX"),
        (f"web.default.svc.{D}", "TYPE65280"),  # an unknown type
        (f"web.default.svc.{D}", "PTR"),
        (f"default.svc.{D}", "A"),  # an existing namespace
        (f"svc.{D}", "A"),
        (f"pod.{D}", "A"),
        (f"default.pod.{D}", "A"),
        (f"{D}", "A"),  # the zone apex
        (f"10-1-2-3.default.pod.{D}", "AAAA"),
    ],
)
def test_existing_names_without_that_type_are_nodata_with_the_soa(name: str, qtype: str) -> None:
    r = ask(name, qtype)
    assert status(r) == "NOERROR" and not r.answer
    assert lines(r.authority) == [SOA]


@pytest.mark.parametrize(
    "name",
    [
        f"nope.default.svc.{D}",  # no such Service
        f"web.nope.svc.{D}",  # no such namespace
        f"nope.svc.{D}",
        f"web.default.{D}",  # missing "svc"
        f"x.web.default.svc.{D}",  # endpoint names exist only for headless Services
        f"db-1.db.default.svc.{D}",  # no endpoint of that hostname
        f"10-244-1-5.db.default.svc.{D}",  # that endpoint has a hostname: only db-0
        f"empty.default.svc.{D}",  # headless without ready endpoints
        f"_http._udp.web.default.svc.{D}",  # no such port/protocol
        f"a.b.c.web.default.svc.{D}",
        f"10-1-2.default.pod.{D}",  # not an IPv4 address
        f"10-1-2-3.nope.pod.{D}",  # no such namespace
        f"web_1.default.svc.{D}",  # a bad label: looked up, not found
        f"-web.default.svc.{D}",
    ],
)
def test_missing_names_are_nxdomain_with_the_soa(name: str) -> None:
    r = ask(name)
    assert status(r) == "NXDOMAIN" and not r.answer
    assert lines(r.authority) == [SOA]
    assert r.flags & dns.flags.AA


def test_headless_service_answers_every_ready_endpoint() -> None:
    r = ask(f"db.default.svc.{D}")
    assert sorted(lines(r.answer)) == [
        f"db.default.svc.{D}. 30 IN A 10.244.1.5",
        f"db.default.svc.{D}. 30 IN A 10.244.2.6",
    ]


def test_headless_endpoints_by_hostname_or_dashed_ip() -> None:
    assert lines(ask(f"db-0.db.default.svc.{D}").answer) == [
        f"db-0.db.default.svc.{D}. 30 IN A 10.244.1.5"
    ]
    assert lines(ask(f"10-244-2-6.db.default.svc.{D}").answer) == [
        f"10-244-2-6.db.default.svc.{D}. 30 IN A 10.244.2.6"
    ]


def test_srv_of_a_clusterip_named_port() -> None:
    r = ask(f"_http._tcp.web.default.svc.{D}", "SRV")
    assert lines(r.answer) == [
        f"_http._tcp.web.default.svc.{D}. 30 IN SRV 0 100 80 web.default.svc.{D}."
    ]
    assert lines(r.additional) == [f"web.default.svc.{D}. 30 IN A 10.96.0.20"]


def test_srv_of_a_service_name_lists_every_port() -> None:
    r = ask(f"web.default.svc.{D}", "SRV")
    assert sorted(lines(r.answer)) == [
        f"web.default.svc.{D}. 30 IN SRV 0 50 53 web.default.svc.{D}.",
        f"web.default.svc.{D}. 30 IN SRV 0 50 80 web.default.svc.{D}.",
    ]


def test_srv_of_a_headless_service_one_per_endpoint_with_their_names() -> None:
    r = ask(f"_pg._tcp.db.default.svc.{D}", "SRV")
    assert sorted(lines(r.answer)) == [
        f"_pg._tcp.db.default.svc.{D}. 30 IN SRV 0 50 5432 10-244-2-6.db.default.svc.{D}.",
        f"_pg._tcp.db.default.svc.{D}. 30 IN SRV 0 50 5432 db-0.db.default.svc.{D}.",
    ]
    assert sorted(lines(r.additional)) == [
        f"10-244-2-6.db.default.svc.{D}. 30 IN A 10.244.2.6",
        f"db-0.db.default.svc.{D}. 30 IN A 10.244.1.5",
    ]


def test_a_query_for_a_port_name_answers_the_service() -> None:
    r = ask(f"_http._tcp.web.default.svc.{D}")
    assert lines(r.answer) == [f"_http._tcp.web.default.svc.{D}. 30 IN A 10.96.0.20"]


def test_pod_records_pods_insecure() -> None:
    r = ask(f"10-244-9-9.default.pod.{D}")
    assert lines(r.answer) == [f"10-244-9-9.default.pod.{D}. 30 IN A 10.244.9.9"]


def test_externalname_is_a_cname_followed_through_the_upstream() -> None:
    r = ask(f"ext.default.svc.{D}")
    assert lines(r.answer) == [
        f"ext.default.svc.{D}. 30 IN CNAME example.com.",
        "example.com. 30 IN A 203.0.113.80",
    ]
    r = ask(f"far.default.svc.{D}", "CNAME")
    assert lines(r.answer) == [f"far.default.svc.{D}. 30 IN CNAME far.example.org."]
    r = ask(f"far.default.svc.{D}")  # the target is unknown upstream: the CNAME alone
    assert status(r) == "NOERROR"
    assert lines(r.answer) == [f"far.default.svc.{D}. 30 IN CNAME far.example.org."]


def test_externalname_loops_and_long_chains_end() -> None:
    """ExternalName Services that name each other (or themselves) are a CNAME loop: the
    chase stops at the first name it already passed, each CNAME once; a longer chain
    stops after 8 CNAMEs. Each answer comes back (it once recursed until Python gave up)."""
    loop = zone(
        a=ServiceRecord("default", "a", external_name=f"b.default.svc.{D}"),
        b=ServiceRecord("default", "b", external_name=f"A.default.svc.{D}"),
        me=ServiceRecord("default", "me", external_name=f"me.default.svc.{D}"),
        **{f"c{i}": ServiceRecord("default", f"c{i}", external_name=f"c{i + 1}.default.svc.{D}")
           for i in range(12)},
    )
    r = ask(f"a.default.svc.{D}", z=loop)
    assert status(r) == "NOERROR"
    assert lines(r.answer) == [
        f"a.default.svc.{D}. 30 IN CNAME b.default.svc.{D}.",
        # the target as the Service names it; compression writes it as the owner above
        f"b.default.svc.{D}. 30 IN CNAME a.default.svc.{D}.",
    ]
    r = ask(f"me.default.svc.{D}", "AAAA", z=loop)
    assert lines(r.answer) == [f"me.default.svc.{D}. 30 IN CNAME me.default.svc.{D}."]
    r = ask(f"c0.default.svc.{D}", z=loop)
    assert lines(r.answer) == [
        f"c{i}.default.svc.{D}. 30 IN CNAME c{i + 1}.default.svc.{D}." for i in range(8)
    ]


def test_zone_apex_soa_ns_and_schema_version() -> None:
    assert lines(ask(D, "SOA").answer) == [SOA]
    r = ask(D, "NS")
    assert lines(r.answer) == [f"{D}. 30 IN NS ns.dns.{D}."]
    assert lines(r.additional) == [f"ns.dns.{D}. 30 IN A 10.96.0.10"]
    assert lines(ask(f"ns.dns.{D}").answer) == [f"ns.dns.{D}. 30 IN A 10.96.0.10"]
    assert lines(ask(f"dns-version.{D}", "TXT").answer) == [f'dns-version.{D}. 30 IN TXT "1.1.0"']


def test_reverse_lookups_of_clusterips_and_headless_endpoints() -> None:
    assert lines(ask("20.0.96.10.in-addr.arpa", "PTR").answer) == [
        f"20.0.96.10.in-addr.arpa. 30 IN PTR web.default.svc.{D}."
    ]
    assert lines(ask("6.2.244.10.in-addr.arpa", "PTR").answer) == [
        f"6.2.244.10.in-addr.arpa. 30 IN PTR 10-244-2-6.db.default.svc.{D}."
    ]
    r = ask("9.9.9.10.in-addr.arpa", "PTR")  # falls through to the upstream
    assert status(r) == "NXDOMAIN" and not r.flags & dns.flags.AA


def test_names_outside_the_cluster_go_to_the_static_upstream() -> None:
    r = ask("example.com")
    assert lines(r.answer) == ["example.com. 30 IN A 203.0.113.80"]
    assert not r.flags & dns.flags.AA and r.flags & dns.flags.RA
    assert status(ask("example.com", "AAAA")) == "NOERROR"
    r = ask("unknown.example.net")
    assert status(r) == "NXDOMAIN" and not r.answer and not r.authority


def _wire(labels: list[bytes], *, qdcount: int = 1, flags: int = 0x0100, qclass: int = 1) -> bytes:
    head = (0x1234).to_bytes(2, "big") + flags.to_bytes(2, "big")
    head += qdcount.to_bytes(2, "big") + b"\0\0\0\0\0\0"
    q = b"".join(len(lab).to_bytes(1, "big") + lab for lab in labels) + b"\0"
    return head + (q + b"\0\x01" + qclass.to_bytes(2, "big")) * qdcount


def _rcode(wire: bytes) -> str:
    out = answer_wire(zone(), wire)
    assert out is not None
    r = dns.message.from_wire(out)
    assert r.id == 0x1234
    return status(r)


def test_malformed_questions_get_formerr() -> None:
    assert _rcode(_wire([b"a" * 64, b"svc", b"cluster", b"local"])) == "FORMERR"  # label > 63
    assert _rcode(_wire([b"a" * 63] * 5)) == "FORMERR"  # name > 255 octets
    assert _rcode(_wire([b"web", b"default"], qdcount=2)) == "FORMERR"
    assert _rcode(_wire([b"web"], qdcount=0)) == "FORMERR"
    assert _rcode(_wire([b"web"])[:-3]) == "FORMERR"  # question cut short


def test_other_opcodes_classes_and_responses() -> None:
    assert _rcode(_wire([b"web"], flags=0x1000)) == "NOTIMP"  # opcode STATUS
    assert _rcode(_wire([b"web"], qclass=3)) == "REFUSED"  # CHAOS
    assert answer_wire(zone(), _wire([b"web"], flags=0x8100)) is None  # a response
    assert answer_wire(zone(), b"\x12\x34\x01") is None  # no header


def _big() -> DnsZone:
    eps = tuple(EndpointRecord(f"10.244.3.{i}", None, PG) for i in range(1, 41))
    return zone(big=ServiceRecord("default", "big", headless=True, ports=PG, endpoints=eps))


def test_answers_over_512_octets_are_truncated_over_udp_whole_over_tcp() -> None:
    z = _big()
    udp = ask(f"big.default.svc.{D}", z=z)
    assert udp.flags & dns.flags.TC
    assert len(udp.to_wire()) <= 512 and 0 < len(udp.answer[0]) < 40
    tcp = ask(f"big.default.svc.{D}", z=z, tcp=True)
    assert not tcp.flags & dns.flags.TC and len(tcp.answer[0]) == 40
    edns = ask(f"big.default.svc.{D}", z=z, payload=4096)  # the client's EDNS buffer
    assert not edns.flags & dns.flags.TC and len(edns.answer[0]) == 40
    srv = ask(f"big.default.svc.{D}", "SRV", z=z)
    assert srv.flags & dns.flags.TC and not srv.additional


def test_answerer_caches_by_question_and_keeps_each_askers_id() -> None:
    answer = ZoneAnswerer(zone())
    for _ in range(2):
        q = dns.message.make_query(f"web.default.svc.{D}", "A")
        out = answer(q.to_wire(), False)
        assert out is not None
        r = dns.message.from_wire(out)
        assert r.id == q.id and lines(r.answer) == [f"web.default.svc.{D}. 30 IN A 10.96.0.20"]


def test_zone_json_round_trip() -> None:
    z = _big()
    assert DnsZone.from_json(z.to_json()) == z
