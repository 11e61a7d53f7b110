"""The kernel's pod runtime (:class:`app.realruntime.RealRuntime`) on a cluster ``svclab up
--real`` built: exec runs real tools in the pod's namespace seeing kubelet's resolv.conf,
hosts and hostname (real curl, getent through the real DNS pods), with stdin, exit codes
and nothing left on the host; port-forward connects from inside the pod; dial from the
control plane's node; the log is the pod server's CRI access log."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.real import NoRealCluster
from app.realruntime import RealRuntime
from control.apiserver.podruntime import ExecSpec, PodRuntimeError
from control.session import Session
from dataplane.linux.netns import is_root
from dataplane.podtools.target import hosts_file
from netmodel.objects import Node, Pod, Service
from netmodel.resolvconf import pod_resolv_conf
from tests.kernel.realpods import Recorded, real_cluster

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

CRI = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z stdout F (.*)")


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    with real_cluster(tmp_path_factory.mktemp("rt") / "state") as d:
        s = Session.open(d)
        try:
            yield s
        finally:
            s.close()


@pytest.fixture(scope="module")
def rt(session: Session) -> RealRuntime:
    return RealRuntime(session)


def _pod(session: Session, key: str) -> Pod:
    p = session.store.get("Pod", key)
    assert isinstance(p, Pod)
    return p


def _web_pods(session: Session) -> list[Pod]:
    return [p for p in session.store.list("Pod", namespace="default") if isinstance(p, Pod)
            and p.name.startswith("web-")]


def run(rt: RealRuntime, *argv: str, stdin: list[bytes] | None = None, pod: str = "client",
        container: str = "c") -> tuple[int, Recorded]:
    io = Recorded(stdin)
    spec = ExecSpec("default", pod, container, tuple(argv), stdin=stdin is not None)
    return asyncio.run(rt.exec(spec, io)), io


def _records(rt: RealRuntime, pod: Pod) -> list[str]:
    path = rt.log_path("default", pod.name, "web", previous=False)
    assert path is not None
    out = []
    for line in path.read_text().splitlines():
        m = CRI.fullmatch(line)
        assert m, line
        out.append(m.group(1))
    return out


def _etc_mounts() -> list[str]:
    """The host's mounts on /etc (its mount points, from /proc/self/mountinfo)."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p.startswith("/etc")]


def test_exec_sees_the_pods_network_and_kubelets_files(session: Session, rt: RealRuntime) -> None:
    client = _pod(session, "default/client")
    host_resolv = Path("/etc/resolv.conf").read_text()
    host_name = socket.gethostname()
    etc_mounts = _etc_mounts()
    code, io = run(rt, "ip", "-4", "-o", "addr", "show", "dev", "eth0")
    assert code == 0, io.stderr
    assert f"inet {client.status.pod_ip}/24" in io.stdout.decode()
    code, io = run(rt, "cat", "/etc/resolv.conf")
    want = pod_resolv_conf(client, session.cluster.spec).render()
    assert (code, io.stdout.decode()) == (0, want)
    assert "nameserver 10.96.0.10" in want and want != host_resolv
    code, io = run(rt, "cat", "/etc/hosts")
    assert (code, io.stdout.decode()) == (0, hosts_file(client, "cluster.local"))
    code, io = run(rt, "hostname")
    assert (code, io.stdout) == (0, b"client\n")
    # nothing of the pod's sandbox is left on the host
    assert Path("/etc/resolv.conf").read_text() == host_resolv
    assert socket.gethostname() == host_name
    assert _etc_mounts() == etc_mounts


def test_a_host_network_pod_runs_in_its_nodes_namespace(
    session: Session, rt: RealRuntime
) -> None:
    pod = _pod(session, "default/hostpod")
    node = session.store.get("Node", pod.spec.node_name or "")
    assert isinstance(node, Node)
    code, io = run(rt, "ip", "-4", "-o", "addr", "show", "dev", "eth0", pod="hostpod")
    assert code == 0, io.stderr
    assert f"inet {node.internal_ips[0]}/" in io.stdout.decode()
    code, io = run(rt, "hostname", pod="hostpod")
    assert (code, io.stdout) == (0, f"{node.name}\n".encode())
    code, io = run(rt, "cat", "/etc/hosts", pod="hostpod")
    want = hosts_file(pod, "cluster.local", node_ip=node.internal_ips[0], node_name=node.name)
    assert (code, io.stdout.decode()) == (0, want)


def test_getent_and_curl_go_through_the_real_dns_and_service(
    session: Session, rt: RealRuntime
) -> None:
    svc = session.store.get("Service", "default/web")
    assert isinstance(svc, Service)
    code, io = run(rt, "getent", "hosts", "web")
    assert code == 0, io.stderr
    assert io.stdout.decode().split() == [svc.spec.cluster_ip, "web.default.svc.cluster.local"]
    client = _pod(session, "default/client")
    webs = {p.key: p for p in _web_pods(session)}
    code, io = run(rt, "curl", "-s", "http://web/")
    assert code == 0, io.stderr
    m = re.fullmatch(r"(\S+) (\S+) (\d+)\n", io.stdout.decode())
    assert m and m.group(1) in webs and m.group(2) == client.status.pod_ip, io.stdout
    # the answering pod's log has the record, with the source address it saw
    server = webs[m.group(1)]
    assert _records(rt, server)[-1] == (
        f'{client.status.pod_ip}:{m.group(3)} -> {server.status.pod_ip}:80 "GET / HTTP/1.1" 200 '
        f"{len(io.stdout)}"
    )


def test_exit_codes_stdin_and_a_missing_command(rt: RealRuntime) -> None:
    assert run(rt, "sh", "-c", "echo out; echo err >&2; exit 3")[0] == 3
    code, io = run(rt, "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (io.stdout, io.stderr) == (b"out\n", b"err\n")
    code, io = run(rt, "cat", stdin=[b"hello ", b"pod\n"])
    assert (code, io.stdout) == (0, b"hello pod\n")
    code, io = run(rt, "sh", "-c", "wc -c", stdin=[b"x" * 100_000])
    assert (code, io.stdout.strip()) == (0, b"100000")
    code, io = run(rt, "no-such-tool", "x")
    assert code == 127
    assert b'exec: "no-such-tool": executable file not found in $PATH' in io.stderr
    code, _ = run(rt, "sh", "-c", "kill -9 $$")
    assert code == 137


def test_port_forward_http_and_raw_from_inside_the_pod(session: Session, rt: RealRuntime) -> None:
    web = _web_pods(session)[0]

    async def exchange(request: bytes) -> bytes:
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

    http = asyncio.run(exchange(b"GET /pf HTTP/1.1\r\nHost: localhost\r\n\r\n"))
    head, _, body = http.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    m = re.fullmatch(rf"{web.key} 127\.0\.0\.1 (\d+)\n", body.decode())
    assert m, body
    assert _records(rt, web)[-1] == (
        f'127.0.0.1:{m.group(1)} -> 127.0.0.1:80 "GET /pf HTTP/1.1" 200 {len(body)}'
    )
    raw = asyncio.run(exchange(b"hello\n"))
    assert re.fullmatch(rf"{web.key} 127\.0\.0\.1 \d+\n", raw.decode())
    with pytest.raises(
        PodRuntimeError,
        match=r"failed to connect to localhost:81 inside namespace .*connection refused",
    ):
        asyncio.run(rt.port_forward("default", web.name, 81))


def test_dial_from_the_control_planes_node(session: Session, rt: RealRuntime) -> None:
    svc = session.store.get("Service", "default/web")
    assert isinstance(svc, Service) and svc.spec.cluster_ip

    async def get() -> bytes:
        conn = await rt.dial(svc.spec.cluster_ip, 80)
        try:
            await conn.write(b"x\n")
            out = b""
            while chunk := await conn.read():
                out += chunk
            return out
        finally:
            await conn.close()

    line = asyncio.run(get()).decode()
    assert line.split()[0] in {p.key for p in _web_pods(session)}
    address = session.cluster.spec.apiserver_address()
    node = session.store.get("Node", rt.dial_node())
    assert isinstance(node, Node) and address in node.internal_ips


def test_logs_belong_to_the_container_serving_the_port(session: Session, rt: RealRuntime) -> None:
    web = _web_pods(session)[0]
    assert rt.log_path("default", web.name, "web", previous=False) is not None
    assert rt.log_path("default", web.name, "web", previous=True) is None
    assert rt.log_path("default", web.name, "other", previous=False) is None


def test_a_state_dir_without_a_real_cluster_is_refused(tmp_path: Path) -> None:
    from tests.kernel.realpods import svclab

    d = tmp_path / "plain"
    (tmp_path / "c.yaml").write_text("apiVersion: svclab.dev/v1alpha1\nkind: Cluster\nspec: {nodes: 1}\n")
    svclab(d, "apply", "-f", str(tmp_path / "c.yaml"))
    s = Session.open(d)
    try:
        with pytest.raises(NoRealCluster, match="no real cluster up here"):
            RealRuntime(s)
    finally:
        s.close()
