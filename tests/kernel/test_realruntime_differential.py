"""The same commands in the same pod on both backends: ``exec client -- curl -s web``,
``nslookup web``, ``getent hosts web``, a port-forward, and the server pod's log after
them. The emulated runtime (:class:`app.podruntime.EmulatedRuntime`) and the kernel's
(:class:`app.realruntime.RealRuntime`) run on one session whose cluster ``svclab up
--real`` realised: the answers, and the source address the server saw, are the same;
only the ephemeral ports (masked) differ. ``web`` has one replica, so both backends
must pick the same endpoint."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest

from app.podruntime import EmulatedRuntime
from app.realruntime import RealRuntime
from control.apiserver.podruntime import ExecSpec, PodRuntime
from control.session import Session
from dataplane.linux.netns import is_root
from netmodel.objects import Pod
from tests.dnscluster import app, manifest
from tests.kernel.realpods import Recorded, real_cluster

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

CRI = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z stdout F (.*)")
IP_PORT = re.compile(r"\b(\d+\.\d+\.\d+\.\d+)([: ])(\d+)\b")


def mask(text: str) -> str:
    """Ephemeral ports (1024 and up) after an address become ``<port>``."""
    return IP_PORT.sub(
        lambda m: f"{m.group(1)}{m.group(2)}{'<port>' if int(m.group(3)) >= 1024 else m.group(3)}",
        text,
    )


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Session, dict[str, PodRuntime]]]:
    text = manifest(app("web", "nginx", 80, replicas=1))
    with real_cluster(tmp_path_factory.mktemp("diff") / "state", text) as d:
        s = Session.open(d)
        try:
            yield s, {"emulated": EmulatedRuntime(s), "real": RealRuntime(s)}
        finally:
            s.close()


def _exec(rt: PodRuntime, *argv: str) -> tuple[int, str, str]:
    io = Recorded()
    code = asyncio.run(rt.exec(ExecSpec("default", "client", "c", tuple(argv)), io))
    return code, io.stdout.decode(), io.stderr.decode()


def _web(session: Session) -> Pod:
    [web] = [p for p in session.store.list("Pod", namespace="default")
             if isinstance(p, Pod) and p.name.startswith("web-")]
    return web


def _last_record(rt: PodRuntime, web: Pod) -> str:
    path = rt.log_path("default", web.name, "web", previous=False)
    assert path is not None, rt.backend
    m = CRI.fullmatch(path.read_text().splitlines()[-1])
    assert m, path
    return m.group(1)


@pytest.mark.parametrize(
    "argv",
    [("curl", "-s", "http://web/"), ("nslookup", "web"), ("getent", "hosts", "web")],
    ids=["curl", "nslookup", "getent"],
)
def test_the_same_command_answers_the_same_on_both_backends(
    backends: tuple[Session, dict[str, PodRuntime]], argv: tuple[str, ...]
) -> None:
    session, rts = backends
    got = {name: _exec(rt, *argv) for name, rt in rts.items()}
    assert got["real"][0] == 0, got["real"]
    assert mask(got["emulated"][1]) == mask(got["real"][1]), got
    assert got["emulated"][0] == got["real"][0]
    svc = session.store.get("Service", "default/web")
    if argv[0] != "curl":  # both found the Service's address
        assert getattr(svc.spec, "cluster_ip", None) in got["real"][1], got["real"]
    if argv[0] == "curl":
        client = session.store.get("Pod", "default/client")
        assert isinstance(client, Pod)
        web = _web(session)
        # the answer names the server pod and the client's own address: no SNAT
        assert mask(got["real"][1]) == f"{web.key} {client.status.pod_ip} <port>\n"
        # each backend's server logged it, identically but for the port
        records = {name: _last_record(rt, web) for name, rt in rts.items()}
        assert mask(records["emulated"]) == mask(records["real"]) == (
            f'{client.status.pod_ip}:<port> -> {web.status.pod_ip}:80 "GET / HTTP/1.1" 200 '
            f"{len(got['real'][1])}"
        )


def test_port_forward_answers_the_same_on_both_backends(
    backends: tuple[Session, dict[str, PodRuntime]],
) -> None:
    session, rts = backends
    web = _web(session)

    async def forward(rt: PodRuntime, request: bytes) -> bytes:
        conn = await rt.port_forward("default", web.name, 80)
        try:
            await conn.write(request)
            await conn.write_eof()
            out = b""
            while chunk := await conn.read():
                out += chunk
            return out
        finally:
            await conn.close()

    for request in (b"GET /pf HTTP/1.1\r\nHost: localhost\r\n\r\n", b"hello\n"):
        answers = {name: asyncio.run(forward(rt, request)).decode() for name, rt in rts.items()}
        assert mask(answers["emulated"]) == mask(answers["real"]), answers
        records = {name: _last_record(rt, web) for name, rt in rts.items()}
        assert mask(records["emulated"]) == mask(records["real"]), records
