"""One pod of a persistent cluster (``--state DIR``) as a long-lived client: 100,000 DNS
questions and 100,000 UDP connections, each from a new socket, all in one run. The
ephemeral range holds 28,232 ports, so every one of them must come back when its socket
closes (the emulator once never gave them back and looked for a free one forever)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from app import emulation
from app.cli.main import cli
from control.session import Session
from dataplane.emulator.cluster import EmulatedCluster
from dataplane.emulator.ports import EPHEMERAL_PORTS
from dataplane.emulator.resolver import query
from netmodel.objects import Service
from tests.dnscluster import CLIENT, KUBE_DNS, D, app, manifest

N = 100_000
RANGE = EPHEMERAL_PORTS[1] - EPHEMERAL_PORTS[0] + 1

MANIFEST = manifest(app("web", "nginx", 80), app("echo", "busybox", 7, protocol="UDP"))


@pytest.fixture(scope="module")
def persistent(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Session, EmulatedCluster]]:
    """The cluster applied to a state directory by the CLI, opened again from there."""
    d = tmp_path_factory.mktemp("long-lived")
    f = d / "cluster.yaml"
    f.write_text(MANIFEST)
    state = d / "state"
    r = CliRunner().invoke(cli, ["--state", str(state), "apply", "-f", str(f)])
    assert r.exit_code == 0, r.output
    session = Session.open(Path(state))
    try:
        yield session, emulation.emulator(session)
    finally:
        session.close()


@pytest.mark.slow
def test_one_pod_asks_100000_dns_questions(persistent: tuple[Session, EmulatedCluster]) -> None:
    session, emu = persistent
    web = session.store.get("Service", "default/web")
    assert isinstance(web, Service)
    questions = [
        (f"web.default.svc.{D}", "A", "NOERROR", [web.spec.cluster_ip]),
        (f"kubernetes.default.svc.{D}", "A", "NOERROR", ["10.96.0.1"]),
        (f"kube-dns.kube-system.svc.{D}", "A", "NOERROR", [KUBE_DNS]),
        (f"web.default.svc.{D}", "AAAA", "NOERROR", []),
        (f"nothing.default.svc.{D}", "A", "NXDOMAIN", []),
    ]
    seen: Counter[str] = Counter()
    sports: set[int] = set()
    for i in range(N):
        name, qtype, rcode, addresses = questions[i % len(questions)]
        q = query(emu, CLIENT, KUBE_DNS, name, qtype, record=False)
        assert (q.rcode, q.addresses()) == (rcode, addresses), (i, name, qtype, q.error)
        sports.add(q.traces[0].packet.sport)
        seen[rcode] += 1
    assert seen == {"NOERROR": N * 4 // 5, "NXDOMAIN": N // 5}
    # more questions than ports: ports were given back and taken again
    assert len(sports) <= RANGE < N
    assert emu.ports.in_use(CLIENT, "udp") == 0


@pytest.mark.slow
def test_one_pod_opens_100000_udp_connections(persistent: tuple[Session, EmulatedCluster]) -> None:
    """Each connection: a datagram each way through the Service's DNAT to one of two
    echo pods, then the socket closed (``connect`` without ``release``: the conntrack
    entries stay, as the kernel's do until they time out)."""
    session, emu = persistent
    echo = session.store.get("Service", "default/echo")
    assert isinstance(echo, Service) and echo.spec.cluster_ip is not None
    ok = 0
    sports: set[int] = set()
    pods: Counter[str | None] = Counter()
    for r in emu.iter_connect(CLIENT, echo.spec.cluster_ip, "udp", 7, N, record=False):
        ok += r.established
        sports.add(r.sport)
        pods[r.pod] += 1
    assert ok == N
    assert len(pods) == 2 and all(p is not None and p.startswith("default/echo-") for p in pods)
    assert len(sports) <= RANGE < N
    assert emu.ports.in_use(CLIENT, "udp") == 0
