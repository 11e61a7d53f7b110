"""The emulator's pod runtime (:mod:`app.podruntime`), through the contract the
apiserver's pod subresources use: exec with its streams and exit code, the pod server
model's log records in CRI files, port-forward (HTTP, raw, ``nc -z``), and a connection
from kube-apiserver's node (the proxies)."""

from __future__ import annotations

import asyncio
import ipaddress
import re
from pathlib import Path

import pytest

from app.podruntime import EmulatedRuntime, cri_record
from control.apiserver.podruntime import ExecSpec, PodRuntimeError
from control.session import Session
from netmodel.objects import Pod

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [str(ROOT / "examples" / f) for f in ("web.yaml", "pods.yaml")]
CRI = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z stdout F (.*)$")


class Streams:
    """An exec's client side in memory: stdin chunks to deliver, what came back."""

    def __init__(self, stdin: list[bytes] | None = None) -> None:
        self.stdin = list(stdin or [])
        self.out = b""
        self.err = b""

    async def read_stdin(self) -> bytes | None:
        return self.stdin.pop(0) if self.stdin else None

    async def write_stdout(self, data: bytes) -> None:
        self.out += data

    async def write_stderr(self, data: bytes) -> None:
        self.err += data


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> EmulatedRuntime:
    session = Session.from_files(EXAMPLES)
    return EmulatedRuntime(session, logs_dir=tmp_path_factory.mktemp("pods"))


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def exec_(rt: EmulatedRuntime, pod: str, *argv: str, **kw: bool) -> tuple[int, Streams]:
    io = Streams(kw.pop("stdin_data", None))  # type: ignore[arg-type]
    spec = ExecSpec("default", pod, pod, tuple(argv), **kw)
    return run(rt.exec(spec, io)), io


def records(path: Path | None) -> list[str]:
    assert path is not None
    out = []
    for line in path.read_text().splitlines():
        m = CRI.match(line)
        assert m, line
        out.append(m.group(1))
    return out


def test_exec_curl_answers_and_the_server_logs_the_client(runtime: EmulatedRuntime) -> None:
    code, io = exec_(runtime, "client", "curl", "-s", "web")
    assert code == 0 and io.err == b""
    pod, ip, port = io.out.decode().split()
    client = runtime.session.store.get("Pod", "default/client")
    assert isinstance(client, Pod)
    assert ip == client.status.pod_ip
    name = pod.split("/")[1]
    path = runtime.log_path("default", name, "web", False)
    last = records(path)[-1]
    assert last.startswith(f"{ip}:{port} -> ") and last.endswith(
        '"GET / HTTP/1.1" 200 ' + str(len(io.out))
    )
    assert runtime.log_path("default", name, "web", True) is None


def test_exec_exit_codes_tty_and_stdin(runtime: EmulatedRuntime) -> None:
    code, io = exec_(runtime, "client", "tcpdump")
    assert code == 127 and io.err.startswith(b"sh: tcpdump: not found in an emulated pod")
    code, io = exec_(runtime, "client", "curl", "-sS", "http://nosuch/")
    assert (code, io.err) == (6, b"curl: (6) Could not resolve host: nosuch\n")
    code, io = exec_(runtime, "client", "curl", "-sS", "http://nosuch/", tty=True)
    assert (code, io.out, io.err) == (6, b"curl: (6) Could not resolve host: nosuch\r\n", b"")
    code, io = exec_(runtime, "client", "cat", stdin=True, stdin_data=[b"hello\n", b"there\n"])
    assert (code, io.out) == (0, b"hello\nthere\n")


def test_port_forward_http_raw_and_zero_io(runtime: EmulatedRuntime) -> None:
    web = sorted(p.name for p in runtime.session.store.list("Pod") if p.name.startswith("web-"))[0]

    async def talk(data: bytes | None, eof: bool) -> bytes:
        conn = await runtime.port_forward("default", web, 8080)
        if data:
            await conn.write(data)
        if eof:
            await conn.write_eof()
        out = b""
        while chunk := await conn.read():
            out += chunk
        await conn.close()
        return out

    http = run(talk(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n", False))
    assert http.startswith(b"HTTP/1.1 200 OK\r\n")
    body = http.split(b"\r\n\r\n", 1)[1].decode()
    assert re.fullmatch(rf"default/{web} 127\.0\.0\.1 \d+\n", body)
    assert run(talk(b"hello\n", False)).decode().startswith(f"default/{web} 127.0.0.1 ")
    assert run(talk(None, False)).decode().startswith(f"default/{web} 127.0.0.1 ")  # silent
    before = records(runtime.log_path("default", web, "web", False))
    assert run(talk(None, True)) == b""  # nc -z: nothing answered, nothing logged
    after = records(runtime.log_path("default", web, "web", False))
    assert after == before
    assert after[-3].endswith('"GET /x HTTP/1.1" 200 ' + str(len(body)))
    assert after[-1].startswith("127.0.0.1:") and after[-1].endswith('"-" - ' + str(len(body)))
    with pytest.raises(PodRuntimeError, match="failed to connect to localhost:81 inside namespace"):
        run(runtime.port_forward("default", web, 81))


def test_dial_from_the_apiservers_node(runtime: EmulatedRuntime) -> None:
    web = next(
        p
        for p in runtime.session.store.list("Pod")
        if isinstance(p, Pod) and p.name.startswith("web-")
    )
    assert web.status.pod_ip

    async def get() -> bytes:
        conn = await runtime.dial(web.status.pod_ip or "", 8080)
        await conn.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        out = b""
        while chunk := await conn.read():
            out += chunk
        return out

    node, address = runtime.apiserver_node()
    assert node == "node-1"
    body = run(get()).split(b"\r\n\r\n", 1)[1].decode().split()
    assert body[0] == web.key
    # pod IPs are reached without NAT: the server sees one of node-1's own addresses,
    # the one the kernel picks for the route (cni0's, .1 of its pod CIDR, for a local
    # pod; flannel.1's, .0, for a remote one)
    n1 = runtime.session.store.get("Node", "node-1")
    cidr = ipaddress.ip_network(n1.spec.pod_cidr)  # type: ignore[attr-defined]
    assert body[1] in (address, str(cidr[0]), str(cidr[1]))
    with pytest.raises(PodRuntimeError, match="connection refused"):
        run(runtime.dial(web.status.pod_ip or "", 9))


def test_cri_record_format() -> None:
    assert cri_record("a b", 1_700_000_000_123_456_789) == (
        "2023-11-14T22:13:20.123456789Z stdout F a b\n"
    )
