"""Cluster DNS end to end on the emulator: kubeadm's objects bootstrapped, questions
walked through kube-proxy's DNAT to a DNS pod and back through conntrack, the pods'
search lists, TCP after truncation, kube-dns without endpoints, and the CLI (``dig``,
names as destinations of trace/connect/ping)."""

from __future__ import annotations

import json
from pathlib import Path

import dns.flags
import pytest
from click.testing import CliRunner

from app import dnsqueries, emulation
from app.cli.main import cli
from control.apiserver.clusterdns import DEPLOYMENT_KEY, SERVICE_KEY
from control.session import Session
from dataplane.backends import emulator_backend
from dataplane.emulator.resolver import query, resolve
from netmodel.manifests import load_text
from netmodel.objects import Deployment, Pod, Service
from tests.dnscluster import CLIENT, D, app, manifest

MANIFEST = manifest(
    app("web", "nginx", 80, port_name="http"),
    app("many", "m", 9000, replicas=40, headless=True, container="m"),
    cluster="nodes: 2, dns: true, dnsUpstream: {example.com: [203.0.113.80]}",
)


@pytest.fixture(scope="module")
def session() -> Session:
    s = Session.ephemeral(load_text(MANIFEST, source="dns.yaml"))
    s.converge()
    return s


def test_kubeadm_objects_are_bootstrapped(session: Session) -> None:
    svc = session.store.get("Service", SERVICE_KEY)
    assert isinstance(svc, Service)
    assert svc.spec.cluster_ip == "10.96.0.10" and svc.spec.selector == {"k8s-app": "kube-dns"}
    assert [(p.name, p.port, p.protocol) for p in svc.spec.ports] == [
        ("dns", 53, "UDP"),
        ("dns-tcp", 53, "TCP"),
        ("metrics", 9153, "TCP"),
    ]
    dep = session.store.get("Deployment", DEPLOYMENT_KEY)
    assert isinstance(dep, Deployment) and dep.spec.replicas == 2
    pods = [
        p for p in session.store.list("Pod") if isinstance(p, Pod) and p.namespace == "kube-system"
    ]
    assert len(pods) == 2 and all(p.labels["k8s-app"] == "kube-dns" and p.is_ready for p in pods)


def test_dns_objects_by_default_and_none_with_dns_false() -> None:
    """Cluster DNS is on by default, as kubeadm installs it; ``dns: false`` opts out."""
    s = Session.ephemeral(
        load_text("apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {nodes: 1}\n", source="x")
    )
    s.converge()
    assert sorted(x.key for x in s.store.list("Service")) == [
        "default/kubernetes",
        "kube-system/kube-dns",
    ]
    assert [x.key for x in s.store.list("Deployment")] == ["kube-system/coredns"]
    assert emulation.view(s).dns_zone is not None
    s = Session.ephemeral(
        load_text(
            "apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {nodes: 1, dns: false}\n",
            source="x",
        )
    )
    s.converge()
    assert [x.key for x in s.store.list("Service")] == ["default/kubernetes"]
    assert not s.store.list("Deployment")
    assert emulation.view(s).dns_zone is None


def test_bootstrap_keeps_a_scaled_deployment(tmp_path: Path) -> None:
    state = tmp_path / "st"
    runner = CliRunner()
    f = tmp_path / "c.yaml"
    f.write_text("apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {dns: true}\n")
    assert runner.invoke(cli, ["--state", str(state), "apply", "-f", str(f)]).exit_code == 0
    s = Session.open(state)
    dep = s.store.get("Deployment", DEPLOYMENT_KEY)
    assert isinstance(dep, Deployment)
    s.plane.apiserver.update(dep.evolve(spec=dep.spec.evolve(replicas=0)))
    s.converge()
    s.close()
    s = Session.open(state)  # a new control plane bootstraps again
    s.converge()
    dep = s.store.get("Deployment", DEPLOYMENT_KEY)
    assert isinstance(dep, Deployment) and dep.spec.replicas == 0
    s.close()


def test_a_question_is_dnated_to_a_dns_pod_and_answered_back_through_conntrack(
    session: Session,
) -> None:
    emu = emulation.emulator(session)
    q = query(emu, CLIENT, "10.96.0.10", f"web.default.svc.{D}")
    (t,) = q.traces
    assert t.verdict == "delivered" and t.delivered_to is not None
    assert (t.delivered_to.pod or "").startswith(
        "kube-system/coredns-"
    ) and t.delivered_to.port == 53
    dnat = [h for h in t.hops if h.kind == "rule" and "DNAT" in (h.rule or "")]
    assert dnat and "kube-system/kube-dns:dns" in (dnat[0].rule or "")
    assert t.reply is not None and t.reply.delivered_to is not None
    assert t.reply.delivered_to.pod == "default/client"
    assert str(t.reply.received.src) == "10.96.0.10"  # type: ignore[union-attr]  # un-DNATed
    web = session.store.get("Service", "default/web")
    assert q.records() == [f"web.default.svc.{D}. 30 IN A {web.spec.cluster_ip}"]  # type: ignore[attr-defined]
    assert q.path()[0] == CLIENT and q.path()[-1] == CLIENT


def test_the_stub_resolver_walks_the_search_list(session: Session) -> None:
    emu = emulation.emulator(session)
    conf = emu.resolv_confs[CLIENT]
    r = resolve(emu, CLIENT, "web.default", conf)
    assert r.status == "ok" and r.answered_name == f"web.default.svc.{D}."
    assert [(q.qname, q.rcode) for q in r.queries] == [
        (f"web.default.default.svc.{D}.", "NXDOMAIN"),
        (f"web.default.svc.{D}.", "NOERROR"),
    ]
    r = resolve(emu, CLIENT, "example.com", conf)
    assert r.addresses == ("203.0.113.80",) and len(r.queries) == 4
    r = resolve(emu, CLIENT, "nope", conf)
    assert r.status == "NXDOMAIN" and len(r.queries) == 4


def test_a_truncated_answer_is_asked_again_over_tcp(session: Session) -> None:
    emu = emulation.emulator(session)
    q = query(emu, CLIENT, "10.96.0.10", f"many.default.svc.{D}")
    assert q.truncated_udp and q.proto == "tcp" and q.rcode == "NOERROR"
    assert len(q.addresses()) == 40
    udp, syn, data = q.traces
    assert udp.packet.proto == "udp" and syn.packet.flags == {"SYN"}
    assert data.delivered_to is not None and (data.delivered_to.pod or "").startswith(
        "kube-system/coredns-"
    )
    m = q.message
    assert m is not None and not m.flags & dns.flags.TC


def test_a_tcp_answer_larger_than_the_mtu_goes_as_segments(session: Session) -> None:
    """40 SRV records and their A records (about 2 KB) over TCP: the DNS pod's stack cuts
    the answer into MSS-sized segments (the first is walked, within the MTU); the client
    reads the whole answer."""
    emu = emulation.emulator(session)
    q = query(emu, CLIENT, "10.96.0.10", f"many.default.svc.{D}", "SRV")
    assert q.truncated_udp and q.proto == "tcp" and q.rcode == "NOERROR", q.error
    assert len(q.records("SRV")) == 40 and q.response is not None and len(q.response) > 1500
    reply = q.traces[-1].reply
    assert reply is not None and reply.verdict == "delivered"
    (cut,) = [h for h in reply.hops if h.kind == "route" and h.note and "segments" in h.note]
    mtu = emu.hosts[cut.netns].devices[cut.dev_out].mtu  # type: ignore[index]
    assert cut.note == f"{len(q.response) + 2} octets of data: segments of MSS {mtu - 40}"
    xmit = [h.packet for h in reply.hops if h.kind == "xmit"]
    assert xmit and all(p is not None and p.length == mtu for p in xmit)  # within the MTU


def test_dnsqueries_on_the_emulator(session: Session) -> None:
    """``dnsqueries`` (what the labs call) over the emulator backend: the SRV record of
    the named port, the stub resolver's search, ``dig +search`` of another type. Both
    backends against an independent oracle: tests/kernel/test_differential_dns.py."""
    web = session.store.get("Service", "default/web")
    assert isinstance(web, Service)
    dns_pods = {p.key for p in session.store.list("Pod") if p.namespace == "kube-system"}
    with emulator_backend(emulation.view(session)) as be:
        o = dnsqueries.dig(be, CLIENT, f"_http._tcp.web.default.svc.{D}", "SRV")
        assert o.status == "NOERROR" and o.server_pod in dns_pods
        assert o.answer == (
            f"_http._tcp.web.default.svc.{D}. 30 IN SRV 0 100 80 web.default.svc.{D}.",
        )
        assert o.additional == (f"web.default.svc.{D}. 30 IN A {web.spec.cluster_ip}",)
        found = dnsqueries.resolve(be, CLIENT, "web")
        assert (found.status, found.addresses) == ("ok", (web.spec.cluster_ip,))
        gone = dnsqueries.resolve(be, CLIENT, "nope")
        assert (gone.status, gone.addresses, gone.queries) == ("not-found", (), 4)
        srv = dnsqueries.search(be, CLIENT, "_http._tcp.web", "SRV")
        assert srv.status == "ok" and srv.answered_name == f"_http._tcp.web.default.svc.{D}."
        assert srv.records == list(o.answer)


def test_kube_dns_without_endpoints_rejects_the_question() -> None:
    s = Session.ephemeral(load_text(MANIFEST, source="dns.yaml"))
    s.converge()
    dep = s.store.get("Deployment", DEPLOYMENT_KEY)
    assert isinstance(dep, Deployment)
    s.plane.apiserver.update(dep.evolve(spec=dep.spec.evolve(replicas=0)))
    s.converge()
    emu = emulation.emulator(s)
    q = query(emu, CLIENT, "10.96.0.10", f"web.default.svc.{D}")
    assert q.response is None and q.error == "connection refused"
    (t,) = q.traces
    assert t.verdict == "REJECT"
    assert any("kube-system/kube-dns:dns has no endpoints" in (h.rule or "") for h in t.rules())
    r = resolve(emu, CLIENT, "web", emu.resolv_confs[CLIENT])
    assert r.status == "error" and len(r.queries) == 1  # glibc gives up on ECONNREFUSED


# ------------------------------------------------------------------------ CLI


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> str:
    p = tmp_path_factory.mktemp("dns") / "m.yaml"
    p.write_text(MANIFEST)
    return str(p)


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_cli_dig_text(manifest: str) -> None:
    code, out, _ = run("dig", "pod/client", f"web.default.svc.{D}", "-f", manifest)
    assert code == 0
    assert ";; ->>HEADER<<- opcode: QUERY, status: NOERROR" in out
    assert ";; flags: qr aa rd ra; QUERY: 1, ANSWER: 1, AUTHORITY: 0, ADDITIONAL: 0" in out
    assert ";; QUESTION SECTION:" in out and ";; ANSWER SECTION:" in out
    assert ";; SERVER: 10.96.0.10#53(10.96.0.10) (UDP)" in out
    assert ";; ANSWERED BY: pod/kube-system/coredns-" in out
    code, out, _ = run("dig", "pod/default/client", f"nope.default.svc.{D}", "-f", manifest)
    assert code == 0 and "status: NXDOMAIN" in out and ";; AUTHORITY SECTION:" in out


def test_cli_dig_json_has_the_answer_and_the_path(manifest: str) -> None:
    code, out, _ = run(
        "dig", "pod/client", f"web.default.svc.{D}", "A", "-o", "json", "--hops", "-f", manifest
    )
    assert code == 0
    j = json.loads(out)
    assert j["status"] == "NOERROR" and j["answer"][0].startswith(f"web.default.svc.{D}. 30 IN A ")
    assert j["path"][0] == CLIENT and any(
        p.startswith("pod/kube-system/coredns-") for p in j["path"]
    )
    assert j["delivered_to"]["port"] == 53 and j["traces"][0]["verdict"] == "delivered"


def test_cli_dig_tcp_search_and_errors(manifest: str) -> None:
    code, out, _ = run("dig", "pod/client", f"web.default.svc.{D}", "--tcp", "-f", manifest)
    assert code == 0 and "(TCP)" in out
    code, out, _ = run("dig", "pod/client", "web", "--search", "-f", manifest)
    assert code == 0 and f";web.default.svc.{D}." in out
    code, _, err = run("dig", "node/node-1", "web", "-f", manifest)
    assert code == 1 and "asked from a pod" in err
    code, _, err = run("dig", "pod/client", "web", "BOGUS", "-f", manifest)
    assert code == 1 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    code, _, err = run("dig", "pod/client", "a" * 64 + ".com", "-f", manifest)
    assert code == 1 and "label" in err.lower()


def _dns_pod_ip(manifest: str) -> tuple[str, str]:
    """(key, IP) of one DNS pod of the manifest's cluster (the same every run: seeded)."""
    s = Session.ephemeral(load_text(Path(manifest).read_text(), source="m.yaml"))
    s.converge()
    pods = sorted(
        (p.key, p.status.pod_ip)
        for p in s.store.list("Pod")
        if isinstance(p, Pod) and p.namespace == "kube-system"
    )
    return pods[0][0], str(pods[0][1])


def test_cli_dig_search_asks_the_server_given(manifest: str) -> None:
    """``--search --server IP`` asks IP for every name of the search list: a DNS pod's own
    address is answered by that pod, without kube-proxy's DNAT; an address where nothing
    listens gets no answer (exit 9), where the pod's nameserver would have answered."""
    pod, ip = _dns_pod_ip(manifest)
    args = ["dig", "pod/client", "web.default", "--search", "-o", "json", "--hops"]
    code, out, _ = run(*args, "--server", ip, "-f", manifest)
    assert code == 0, out
    j = json.loads(out)
    assert j["status"] == "ok" and [q["server"] for q in j["queries"]] == [ip, ip]
    assert {q["delivered_to"]["pod"] for q in j["queries"]} == {pod}
    assert "kube-system/kube-dns:dns" not in json.dumps(j["queries"])  # no Service, no DNAT
    code, out, _ = run(*args, "-f", manifest)  # the pod's nameserver: kube-dns's ClusterIP
    assert code == 0 and "kube-system/kube-dns:dns" in json.dumps(json.loads(out)["queries"])
    code, out, _ = run(
        "dig", "pod/client", "web", "--search", "--server", "192.0.2.53", "-f", manifest
    )
    assert code == 9 and ";; communications error to 192.0.2.53#53" in out


@pytest.mark.parametrize("server", ["ns.example.com", "10.0.0.300", "::1"])
@pytest.mark.parametrize("extra", [[], ["--search"], ["--real"]])
def test_cli_dig_server_must_be_an_ipv4_address(
    manifest: str, server: str, extra: list[str]
) -> None:
    """A name would have to be looked up by the host's resolver, which svclab never asks:
    refused as bad usage on either backend, before any cluster is built."""
    code, _, err = run("dig", "pod/client", "web", "--server", server, *extra, "-f", manifest)
    assert code == 2 and f"Invalid value for '--server': {server!r}: want an IPv4" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_dig_search_asks_the_type_given(manifest: str) -> None:
    code, out, _ = run(
        "dig", "pod/client", "_http._tcp.web", "SRV", "--search", "-o", "json", "-f", manifest
    )
    assert code == 0
    j = json.loads(out)
    assert j["status"] == "ok" and {q["qtype"] for q in j["queries"]} == {"SRV"}
    assert j["queries"][-1]["answer"] == [
        f"_http._tcp.web.default.svc.{D}. 30 IN SRV 0 100 80 web.default.svc.{D}."
    ]


def test_cli_dig_hops_in_text_and_json(manifest: str) -> None:
    """``--hops`` shows every walk's hops, in text (the trace tables) as in JSON."""
    name = f"web.default.svc.{D}"
    code, plain, _ = run("dig", "pod/client", name, "-f", manifest)
    assert code == 0 and "request: udp" not in plain
    code, out, _ = run("dig", "pod/client", name, "--hops", "-f", manifest)
    assert code == 0 and out.startswith(plain.rstrip("\n"))
    assert "request: udp " in out and "reply: udp " in out and "KUBE-SVC-" in out
    code, out, _ = run("dig", "pod/client", name, "--search", "--hops", "-f", manifest)
    assert code == 0 and out.count("request: udp ") == out.count("; <<>> svclab dig") == 4
    code, out, _ = run("dig", "pod/client", name, "-o", "json", "-f", manifest)
    assert code == 0 and "traces" not in json.loads(out)


def test_cli_trace_connect_ping_by_name(manifest: str) -> None:
    code, out, _ = run("trace", "--from", "pod/default/client", "--to", "web:80", "-f", manifest)
    assert code == 0
    assert out.startswith(f"dns query 1: web.default.svc.{D}. A -> 10.96.0.10:53/udp: NOERROR")
    assert "kube-system/kube-dns:dns" in out and "default/web:http" in out
    code, out, _ = run(
        "trace",
        "--from",
        "pod/default/client",
        "--to",
        "web.default:80",
        "-o",
        "json",
        "-f",
        manifest,
    )
    j = json.loads(out)
    assert code == 0 and j["verdict"] == "delivered"
    assert [q["status"] for q in j["dns"]["queries"]] == ["NXDOMAIN", "NOERROR"]
    assert j["delivered_to"]["pod"].startswith("default/web-")
    code, out, _ = run(
        "connect", "pod/default/client", f"web.default.svc.{D}:80", "-n", "3", "-f", manifest
    )
    assert code == 0 and "resolved to" in out and out.count("default/web-") >= 3
    code, out, _ = run("ping", "pod/default/client", "web", "-c", "1", "-f", manifest)
    assert "web resolved to" in out  # a ClusterIP does not answer pings: the name resolved
    code, out, err = run("trace", "--from", "pod/default/client", "--to", "nope:80", "-f", manifest)
    assert code == 1 and "cannot resolve 'nope': NXDOMAIN (4 queries" in err
    assert out.count("dns query") == 4


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (
            "{dnsPolicy: Bogus}",
            'spec.dnsPolicy: Unsupported value: "Bogus": supported values: "ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"',
        ),
        (
            '{dnsPolicy: "None"}',
            "spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None",
        ),
        (
            '{dnsPolicy: "None", dnsConfig: {searches: [a.b]}}',
            "spec.dnsConfig.nameservers: Required value",
        ),
        ("{dnsConfig: {nameservers: [x]}}", 'spec.dnsConfig.nameservers[0]: Invalid value: "x"'),
        (
            "{dnsConfig: {nameservers: [192.0.2.1, 192.0.2.2, 192.0.2.3, 192.0.2.4]}}",
            "must not have more than 3 nameservers",
        ),
        ("{dnsConfig: {searches: [a_b]}}", 'spec.dnsConfig.searches[0]: Invalid value: "a_b"'),
        (
            "{dnsConfig: {options: [{value: '1'}]}}",
            "spec.dnsConfig.options[0].name: Required value",
        ),
    ],
)
def test_bad_dns_settings_of_a_pod_are_refused(tmp_path: Path, spec: str, error: str) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
        f"spec: {{containers: [{{name: c, image: x}}], {spec[1:]}\n"
    )
    state = tmp_path / "st"
    r = CliRunner().invoke(cli, ["--state", str(state), "apply", "-f", str(f)])
    assert r.exit_code == 1
    assert r.stderr.startswith(f"error: {f} (document 1): Pod/default/p: ") and error in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
