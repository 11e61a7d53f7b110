"""Cluster DNS, differential: one cluster realised by both backends from the same
ClusterView; every question asked from the same pod of both and compared: status,
flags, answer, authority and additional sections, UDP or TCP (after truncation), and
where it went (a DNS pod, chosen by kube-proxy's DNAT). Then the pod's own libc on the
kernel (``getent hosts``, ``getaddrinfo`` under ``ip netns exec`` reading
``/etc/netns/<ns>/resolv.conf``) against the emulator's stub resolver, a connection by
name, and the clean-up of ``/etc/netns`` and of the DNS server processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.rcode
import pytest

from app import dnsqueries, emulation
from control.session import Session
from dataplane.backends import EmulatorBackend, RealBackend, emulator_backend, real_backend
from dataplane.linux import dnsclient, netns
from dataplane.linux.netns import is_root
from dataplane.linux.servers import is_ours
from netmodel.manifests import load_text

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

D = "cluster.local"
CLIENT = "pod/default/client"

MANY = "\n".join(
    f"  - addresses: [10.250.0.{i}]\n    conditions: {{ready: true}}" for i in range(1, 41)
)
SCENARIO = f"""
apiVersion: svclab.dev/v1alpha1
kind: Cluster
spec: {{nodes: 2, dns: true, dnsUpstream: {{example.com: [203.0.113.80]}}}}
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
    (f"web.default.svc.{D}", "SRV"),
    (f"db.default.svc.{D}", "A"),
    (f"_pg._tcp.db.default.svc.{D}", "SRV"),
    (f"db-0.db.default.svc.{D}", "A"),
    (f"search.default.svc.{D}", "A"),
    (f"nope.default.svc.{D}", "A"),
    (f"default.svc.{D}", "A"),
    (f"web.nope.svc.{D}", "A"),
    (f"web_1.default.svc.{D}", "A"),
    (f"10-244-0-9.default.pod.{D}", "A"),
    (f"dns-version.{D}", "TXT"),
    (D, "SOA"),
    ("10.0.96.10.in-addr.arpa", "PTR"),
    ("example.com", "A"),
    ("nope.example.net", "A"),
    (f"many.default.svc.{D}", "A"),  # > 512 octets: TC, then TCP
]


@pytest.fixture(scope="module")
def backends() -> Iterator[tuple[EmulatorBackend, RealBackend, Session]]:
    session = Session.ephemeral(load_text(SCENARIO, source="dns.yaml"))
    view = emulation.view(session)
    with emulator_backend(view) as emu, real_backend(view) as real:
        yield emu, real, session


def _dns_pods(session: Session) -> set[str]:
    return {p.key for p in session.store.list("Pod") if p.namespace == "kube-system"}


@pytest.mark.parametrize(("name", "qtype"), QUESTIONS, ids=[f"{q[0]}/{q[1]}" for q in QUESTIONS])
def test_same_answers_from_both_backends(
    backends: tuple[EmulatorBackend, RealBackend, Session], name: str, qtype: str
) -> None:
    emu, real, session = backends
    e = dnsqueries.dig(emu, CLIENT, name, qtype)
    k = dnsqueries.dig(real, CLIENT, name, qtype)
    assert k.status != "no-answer", k.error
    assert e.key() == k.key()
    dns_pods = _dns_pods(session)
    assert e.server_pod in dns_pods and k.server_pod in dns_pods  # both DNATed to a DNS pod


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


@pytest.mark.parametrize(
    "name",
    [
        "web",
        "web.default",
        f"web.default.svc.{D}",
        "db-0.db",
        "search",
        "example.com",
        "nope",
        "web.nope",
    ],
)
def test_libc_resolves_like_the_stub_resolver(
    backends: tuple[EmulatorBackend, RealBackend, Session], name: str
) -> None:
    emu, real, _ = backends
    e = dnsqueries.resolve(emu, CLIENT, name)
    k = dnsqueries.resolve(real, CLIENT, name)
    assert (e.status, e.addresses) == (k.status, k.addresses)


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
