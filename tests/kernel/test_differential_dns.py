"""Cluster DNS, differential against an independent oracle: one cluster realised by both
backends from the same ClusterView, every question asked from the same pod of each, and
each answer compared, record set by record set, with what :mod:`tests.dnsoracle`
computes from the API objects (Services, EndpointSlices, Namespaces as Kubernetes JSON)
by the Kubernetes DNS specification and CoreDNS's kubernetes plugin: rcode, answer and
additional records with their TTLs, the SOA of NXDOMAIN and NODATA, ``aa``. The servers
under test (the emulator's DNS pods and the real DNS server processes) share one
answering code; the oracle shares none of it, so a fault in that code fails here on
both backends.

The kernel side is real packets from the client pod's namespace through kube-proxy's
DNAT to a DNS pod's process, parsed with dnspython. Then: truncation and TCP, malformed
messages, ``dig +search`` walks and the pod's own libc (``getent hosts``,
``getaddrinfo`` under ``ip netns exec`` reading ``/etc/netns/<ns>/resolv.conf``)
against the oracle's search order, a connection by name, and the clean-up of
``/etc/netns`` and of the DNS server processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from app import dnsqueries, emulation
from control.session import Session
from dataplane.backends import EmulatorBackend, RealBackend, emulator_backend, real_backend
from dataplane.linux import dnsclient, netns
from dataplane.linux.netns import is_root
from dataplane.linux.servers import is_ours
from netmodel.manifests import load_text
from tests.dnsoracle import TTL, Expected, Oracle

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

D = "cluster.local"
CLIENT = "pod/default/client"

UPSTREAM = {"example.com": ["203.0.113.80"]}
MANY = "\n".join(
    f"  - addresses: [10.250.0.{i}]\n    conditions: {{ready: true}}" for i in range(1, 41)
)
SCENARIO = f"""
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {{nodes: 2, dns: true, dnsUpstream: {{example.com: [203.0.113.80]}}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: other}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: web, image: nginx, ports: [{{containerPort: 8080}}]}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec: {{selector: {{app: web}}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: db-0, labels: {{app: db}}}}
spec: {{hostname: db-0, subdomain: db, containers: [{{name: pg, image: pg, ports: [{{containerPort: 5432}}]}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: db-1, labels: {{app: db}}}}
spec: {{containers: [{{name: pg, image: pg, ports: [{{containerPort: 5432}}]}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: db}}
spec: {{clusterIP: None, selector: {{app: db}}, ports: [{{name: pg, port: 5432}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: search}}
spec: {{type: ExternalName, externalName: example.com}}
---
apiVersion: v1
kind: Service
metadata: {{name: many}}
spec: {{clusterIP: None, ports: [{{port: 9000}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: many-1, labels: {{kubernetes.io/service-name: many}}}}
addressType: IPv4
ports: [{{port: 9000}}]
endpoints:
{MANY}
---
apiVersion: v1
kind: Service
metadata: {{name: mixed}}
spec: {{clusterIP: None, ports: [{{name: api, port: 7000}}, {{name: dns, port: 5353, protocol: UDP}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: mixed-a, labels: {{kubernetes.io/service-name: mixed}}}}
addressType: IPv4
ports: [{{name: api, port: 7000}}, {{name: dns, port: 5353, protocol: UDP}}]
endpoints:
  - addresses: [10.251.0.1]
    hostname: alpha
    conditions: {{ready: true}}
  - addresses: [10.251.0.2]
    conditions: {{ready: false}}
  - addresses: [10.251.0.3]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: mixed-b, labels: {{kubernetes.io/service-name: mixed}}}}
addressType: IPv4
ports: [{{name: api, port: 7001}}]
endpoints:
  - addresses: [10.251.0.4]
    conditions: {{ready: true}}
  - addresses: [10.251.0.5]
    hostname: beta
    conditions: {{ready: false}}
---
apiVersion: v1
kind: Service
metadata: {{name: empty}}
spec: {{clusterIP: None, ports: [{{port: 1}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: api, namespace: other}}
spec: {{ports: [{{name: https, port: 443}}, {{name: metrics, port: 9090, protocol: UDP}}, {{name: alt, port: 8080}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec: {{containers: [{{name: c, image: busybox}}]}}
"""

QUESTIONS = [
    (f"web.default.svc.{D}", "A"),
    (f"Web.Default.svc.{D}", "A"),
    (f"web.default.svc.{D}", "AAAA"),
    (f"web.default.svc.{D}", "TXT"),
    (f"_http._tcp.web.default.svc.{D}", "SRV"),
    (f"_http._udp.web.default.svc.{D}", "SRV"),
    (f"_nope._tcp.web.default.svc.{D}", "SRV"),
    (f"web.default.svc.{D}", "SRV"),
    (f"db.default.svc.{D}", "A"),
    (f"db.default.svc.{D}", "SRV"),
    (f"_pg._tcp.db.default.svc.{D}", "SRV"),
    (f"db-0.db.default.svc.{D}", "A"),
    (f"db-0.db.default.svc.{D}", "SRV"),
    (f"db-0.web.default.svc.{D}", "A"),
    (f"mixed.default.svc.{D}", "A"),
    (f"mixed.default.svc.{D}", "SRV"),
    (f"_api._tcp.mixed.default.svc.{D}", "SRV"),
    (f"_dns._udp.mixed.default.svc.{D}", "SRV"),
    (f"_dns._tcp.mixed.default.svc.{D}", "SRV"),
    (f"alpha.mixed.default.svc.{D}", "A"),
    (f"beta.mixed.default.svc.{D}", "A"),
    (f"10-251-0-2.mixed.default.svc.{D}", "A"),
    (f"10-251-0-3.mixed.default.svc.{D}", "A"),
    (f"empty.default.svc.{D}", "A"),
    (f"api.other.svc.{D}", "A"),
    (f"api.other.svc.{D}", "SRV"),
    (f"_metrics._udp.api.other.svc.{D}", "SRV"),
    (f"search.default.svc.{D}", "A"),
    (f"search.default.svc.{D}", "SRV"),
    (f"nope.default.svc.{D}", "A"),
    (f"default.svc.{D}", "A"),
    (f"svc.{D}", "A"),
    (f"web.nope.svc.{D}", "A"),
    (f"web_1.default.svc.{D}", "A"),
    (f"x.y.web.default.svc.{D}", "A"),
    (f"web.default.nope.{D}", "A"),
    (f"10-244-0-9.default.pod.{D}", "A"),
    (f"10-244-0-9.nope.pod.{D}", "A"),
    (f"10-244-0.default.pod.{D}", "A"),
    (f"dns-version.{D}", "TXT"),
    (D, "SOA"),
    (D, "NS"),
    (f"ns.dns.{D}", "A"),
    ("10.0.96.10.in-addr.arpa", "PTR"),
    ("1.0.251.10.in-addr.arpa", "PTR"),
    ("example.com", "A"),
    ("example.com", "MX"),
    ("nope.example.net", "A"),
    (f"many.default.svc.{D}", "A"),  # > 512 octets: TC, then TCP
]
BACKENDS = ["emulator", "kernel"]


@pytest.fixture(scope="module")
def backends() -> Iterator[tuple[EmulatorBackend, RealBackend, Session]]:
    session = Session.ephemeral(load_text(SCENARIO, source="dns.yaml"))
    view = emulation.view(session)
    with emulator_backend(view) as emu, real_backend(view) as real:
        yield emu, real, session


@pytest.fixture(scope="module")
def oracle(backends: tuple[EmulatorBackend, RealBackend, Session]) -> Oracle:
    """The oracle over the API objects as stored (Kubernetes JSON)."""
    store = backends[2].store
    return Oracle(
        namespaces=[n.to_dict() for n in store.list("Namespace")],
        services=[s.to_dict() for s in store.list("Service")],
        slices=[s.to_dict() for s in store.list("EndpointSlice")],
        upstream=UPSTREAM,
        domain=D,
    )


def _dns_pods(session: Session) -> set[str]:
    return {p.key for p in session.store.list("Pod") if p.namespace == "kube-system"}


def _records(rrsets: list[dns.rrset.RRset]) -> set[tuple[str, int, str, str]]:
    return {
        (r.name.to_text(), r.ttl, dns.rdatatype.to_text(r.rdtype), rd.to_text())
        for r in rrsets
        for rd in r
    }


def observed(response: bytes) -> Expected:
    """An answer on the wire as the oracle states answers (dnspython parses it; the
    SOA's serial, the store revision, is left out)."""
    m = dns.message.from_wire(response)
    soa = [r for r in m.authority if r.rdtype == dns.rdatatype.SOA]
    soa_text = None
    if soa:
        (rd,) = list(soa[0])
        assert soa[0].ttl == TTL and rd.minimum == TTL
        soa_text = f"{rd.mname} {rd.rname}"
    answer = set()
    for owner, ttl, rtype, text in _records(m.answer):
        if rtype == "SOA":
            f = text.split()
            text = " ".join([*f[:2], "*", *f[3:]])
        answer.add((owner, ttl, rtype, text))
    return Expected(
        dns.rcode.to_text(m.rcode()),
        frozenset(answer),
        frozenset(_records(m.additional)),
        soa_text,
        bool(m.flags & dns.flags.AA),
    )


def ask(
    backends: tuple[EmulatorBackend, RealBackend, Session], which: str, name: str, qtype: str
) -> dnsqueries.DnsOutcome:
    emu, real, session = backends
    o = dnsqueries.dig(emu if which == "emulator" else real, CLIENT, name, qtype)
    assert o.response is not None, f"{which}: no answer: {o.error}"
    assert o.server_pod in _dns_pods(session)  # DNATed to a DNS pod and answered by it
    return o


@pytest.mark.parametrize("which", BACKENDS)
@pytest.mark.parametrize(("name", "qtype"), QUESTIONS, ids=[f"{q[0]}/{q[1]}" for q in QUESTIONS])
def test_answers_are_the_oracles(
    backends: tuple[EmulatorBackend, RealBackend, Session],
    oracle: Oracle,
    which: str,
    name: str,
    qtype: str,
) -> None:
    o = ask(backends, which, name, qtype)
    assert observed(o.response or b"") == oracle.answer(name, qtype)


@pytest.mark.parametrize("which", BACKENDS)
def test_every_name_the_objects_define_answers_as_the_oracle_says(
    backends: tuple[EmulatorBackend, RealBackend, Session], oracle: Oracle, which: str
) -> None:
    """Names the oracle derives from the objects (every Service, named port and headless
    endpoint, e.g. the dashed names of endpoints without a hostname), of A, SRV, AAAA."""
    names = oracle.names()
    assert len(names) > 50
    wrong = []
    for name in names:
        for qtype in ("A", "SRV", "AAAA"):
            got = observed(ask(backends, which, name, qtype).response or b"")
            if got != oracle.answer(name, qtype):
                wrong.append(f"{name} {qtype}: {got} != {oracle.answer(name, qtype)}")
    assert wrong == []


def test_both_backends_answer_the_same_through_dnsqueries(
    backends: tuple[EmulatorBackend, RealBackend, Session], oracle: Oracle
) -> None:
    """``dnsqueries.dig`` and ``resolve`` (what the labs call) on the emulator and on
    the kernel: the same outcome, which is the oracle's."""
    emu, real, _ = backends
    for name, qtype in ((f"_http._tcp.web.default.svc.{D}", "SRV"), (f"db.default.svc.{D}", "A")):
        e = dnsqueries.dig(emu, CLIENT, name, qtype)
        k = dnsqueries.dig(real, CLIENT, name, qtype)
        assert e.key() == k.key()
        assert observed(k.response or b"") == oracle.answer(name, qtype)
    for name in ("web", "nope"):
        e_found = dnsqueries.resolve(emu, CLIENT, name)
        k_found = dnsqueries.resolve(real, CLIENT, name)
        want = oracle.addresses(name, "default")
        assert (e_found.status, e_found.addresses) == (k_found.status, k_found.addresses)
        assert list(k_found.addresses) == want and (k_found.status == "ok") == bool(want)


def test_truncation_and_tcp_on_both(backends: tuple[EmulatorBackend, RealBackend, Session]) -> None:
    emu, real, _ = backends
    for be in (emu, real):
        o = dnsqueries.dig(be, CLIENT, f"many.default.svc.{D}")
        assert o.truncated_udp and o.proto == "tcp" and len(o.addresses) == 40
        o = dnsqueries.dig(be, CLIENT, f"web.default.svc.{D}", tcp=True)
        assert o.proto == "tcp" and o.status == "NOERROR" and not o.truncated_udp


def _raw(labels: list[bytes], flags: int = 0x0100) -> bytes:
    q = b"".join(len(x).to_bytes(1, "big") + x for x in labels) + b"\0\0\x01\0\x01"
    return b"\x43\x21" + flags.to_bytes(2, "big") + b"\0\x01\0\0\0\0\0\0" + q


@pytest.mark.parametrize(
    ("wire", "rcode"),
    [
        (_raw([b"a" * 64, b"cluster", b"local"]), "FORMERR"),  # a label over 63 octets
        (_raw([b"a" * 63] * 5), "FORMERR"),  # a name over 255 octets
        (_raw([b"web"], flags=0x2100), "NOTIMP"),  # opcode NOTIFY
    ],
    ids=["long-label", "long-name", "notify"],
)
def test_malformed_questions_on_both(
    backends: tuple[EmulatorBackend, RealBackend, Session], wire: bytes, rcode: str
) -> None:
    emu, real, _ = backends
    t = emu.cluster.trace(CLIENT, "10.96.0.10:53", "udp", payload=wire)
    assert t.reply is not None and t.reply.received is not None
    got_emu = dns.message.from_wire(t.reply.received.payload)
    raw = dnsclient.query(real.cluster.netns(CLIENT), "10.96.0.10", wire)
    assert raw.response is not None, raw.error
    got_real = dns.message.from_wire(raw.response)
    assert dns.rcode.to_text(got_emu.rcode()) == dns.rcode.to_text(got_real.rcode()) == rcode
    assert got_emu.id == got_real.id == 0x4321


LIBC_NAMES = [
    "web",
    "web.default",
    f"web.default.svc.{D}",
    "db-0.db",
    "db",
    "mixed",
    "alpha.mixed",
    "api.other",
    "api",
    "search",
    "example.com",
    "example.com.",
    "nope",
    "web.nope",
    "empty",
]


@pytest.mark.parametrize("name", LIBC_NAMES)
def test_libc_and_the_stub_resolver_find_what_the_oracle_finds(
    backends: tuple[EmulatorBackend, RealBackend, Session], oracle: Oracle, name: str
) -> None:
    """The kernel pod's glibc (``getaddrinfo``: its search list, ndots:5, CNAMEs) and
    the emulator's stub resolver, each against the oracle's search order."""
    emu, real, _ = backends
    want = oracle.addresses(name, "default")
    for be in (emu, real):
        found = dnsqueries.resolve(be, CLIENT, name)
        assert (found.status, list(found.addresses)) == ("ok" if want else "not-found", want)


SEARCHES = [
    ("web", "A", None),
    ("web.default", "A", None),
    ("api.other", "SRV", None),
    ("_pg._tcp.db", "SRV", None),
    ("_api._tcp.mixed", "SRV", None),
    ("web", "AAAA", None),
    ("nope", "A", None),
    ("search", "A", None),
    ("example.com", "A", None),
    ("web", "A", "dns-pod"),
]


@pytest.mark.parametrize("which", BACKENDS)
@pytest.mark.parametrize(("name", "qtype", "server"), SEARCHES)
def test_dig_search_walks_the_list_the_oracle_walks(
    backends: tuple[EmulatorBackend, RealBackend, Session],
    oracle: Oracle,
    which: str,
    name: str,
    qtype: str,
    server: str | None,
) -> None:
    """``dnsqueries.search`` (``svclab dig --search``): the names asked, of the type
    asked, of the server asked, and each answer, as the oracle has them."""
    emu, real, session = backends
    be = emu if which == "emulator" else real
    srv = None
    if server == "dns-pod":  # a DNS pod's own address, not kube-dns's ClusterIP
        pod = sorted(_dns_pods(session))[0]
        srv = str(session.store.get("Pod", pod).status.pod_ip)  # type: ignore[attr-defined]
    found = dnsqueries.search(be, CLIENT, name, qtype, server=srv)
    status, asked, answered = oracle.search(name, "default", qtype)
    assert found.status == status and found.answered_name == answered
    assert [(q.qname, q.qtype) for q in found.queries] == [(a, qtype) for a in asked]
    for q in found.queries:
        assert observed(q.response or b"") == oracle.answer(q.qname, qtype)
        if srv is not None:  # asked of that pod: no DNAT on the way
            assert q.server_pod == pod
            assert not any("dst=10.96.0.10" in c for c in q.conntrack)


def test_getent_and_a_connection_by_name(
    backends: tuple[EmulatorBackend, RealBackend, Session],
) -> None:
    _, real, session = backends
    ns = real.cluster.netns(CLIENT)
    web_ip = session.store.get("Service", "default/web").spec.cluster_ip  # type: ignore[attr-defined]
    assert Path(f"/etc/netns/{ns}/resolv.conf").read_text().startswith("nameserver 10.96.0.10\n")
    assert dnsclient.getent_hosts(ns, f"web.default.svc.{D}") == [web_ip]
    addrs, err = dnsclient.getaddrinfo(ns, "web")
    assert err is None and addrs == [web_ip]
    (o,) = real.connect(CLIENT, addrs[0], 80)
    assert o.verdict == "delivered" and (o.pod or "").startswith("default/web-")


def test_teardown_removes_etc_netns_and_the_dns_servers() -> None:
    session = Session.ephemeral(load_text(SCENARIO, source="dns.yaml"))
    view = emulation.view(session)
    with real_backend(view) as real:
        names = list(real.cluster.namespaces.values())
        pids = [int(p.read_text()) for p in real.cluster.state.servers_dir.glob("dns-*.pid")]
        assert len(pids) == 2 and all(is_ours(p) for p in pids)
        assert any(Path(f"/etc/netns/{n}").exists() for n in names)
    assert not any(Path(f"/etc/netns/{n}").exists() for n in names)
    assert not any(is_ours(p) for p in pids)
    assert not set(names) & set(netns.list_ours(include_held=True))
