"""The real pod servers answer as the pod server model says (real curl gets HTTP/1.1,
``nc -z`` nothing, a silent client the bare line after the first-bytes window), one
connection never holds up another, and every answer appends one CRI record to the pod's
access log with the model's text."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane.linux import nsenter
from dataplane.linux.netns import is_root
from dataplane.linux.realize import RealCluster
from dataplane.linux.testing import Sample, realized, sample_network
from dataplane.podtools import podserver as model

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

CLIENT = "default/p0-0"
SERVER = "default/p0-1"
CRI = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z) stdout F (.*)")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Sample, RealCluster]]:
    sample = sample_network(1, 2, overlay="host-gw")
    with realized(sample.network, cni="bridge-plugin") as c:
        c.serve({p.key: [(8080, "tcp")] for p in sample.pods})
        yield sample, c


def _records(c: RealCluster, pod: str) -> list[str]:
    """The texts of the pod's access log records (each record checked for CRI form)."""
    out = []
    for line in c.state.pod_log(pod).read_text().splitlines():
        m = CRI.fullmatch(line)
        assert m, line
        out.append(m.group(2))
    return out


def _in_client(c: RealCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the client pod (output decoded as is: CR LF stays CR LF)."""
    r = subprocess.run(
        ["ip", "netns", "exec", c.pod_netns(CLIENT), *argv],
        capture_output=True,
        timeout=20,
        check=False,
    )
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(), r.stderr.decode())


def _client_socket(c: RealCluster, ip: str) -> socket.socket:
    s = nsenter.socket_in(c.pod_netns(CLIENT), socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect((ip, 8080))
    return s


def _read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    return data


def test_real_curl_gets_the_models_http_answer_and_the_log_its_record(
    cluster: tuple[Sample, RealCluster],
) -> None:
    sample, c = cluster
    ip = sample.pod(SERVER).ip
    client_ip = sample.pod(CLIENT).ip
    before = len(_records(c, SERVER))
    r = _in_client(c, "curl", "-s", "-i", f"http://{ip}:8080/hello")
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(rf"(.*\r\n\r\n){SERVER} {client_ip} (\d+)\n", r.stdout, re.S)
    assert m, r.stdout
    sport = int(m.group(2))
    want = model.answer(SERVER, (str(client_ip), sport), (str(ip), 8080), b"GET /hello HTTP/1.1\r\n")
    assert r.stdout.encode() == want.data
    assert want.log is not None
    assert _records(c, SERVER)[before:] == [want.log.text]
    # HEAD: the headers alone (curl -I), logged with its request line
    r = _in_client(c, "curl", "-s", "-I", f"http://{ip}:8080/")
    assert r.returncode == 0 and r.stdout.startswith("HTTP/1.1 200 OK\r\n"), r
    assert r.stdout.endswith("Connection: close\r\n\r\n")
    assert re.fullmatch(
        rf'{client_ip}:\d+ -> {ip}:8080 "HEAD / HTTP/1.1" 200 \d+', _records(c, SERVER)[-1]
    )


def test_nc_z_gets_nothing_and_logs_nothing(cluster: tuple[Sample, RealCluster]) -> None:
    sample, c = cluster
    ip = sample.pod(SERVER).ip
    before = _records(c, SERVER)
    r = _in_client(c, "nc", "-z", str(ip), "8080")
    assert r.returncode == 0, r.stderr
    # a later connection is answered (and logged) after the nc -z one was settled
    with _client_socket(c, str(ip)) as s:
        s.sendall(b"hello\n")
        answer = _read_all(s)
    assert answer.startswith(f"{SERVER} {sample.pod(CLIENT).ip} ".encode())
    after = _records(c, SERVER)
    assert len(after) == len(before) + 1 and after[-1].endswith(' "-" - ' + str(len(answer)))


def test_a_silent_client_gets_the_bare_line_and_one_client_never_holds_up_another(
    cluster: tuple[Sample, RealCluster],
) -> None:
    sample, c = cluster
    ip = str(sample.pod(SERVER).ip)
    slow = _client_socket(c, ip)
    silent = _client_socket(c, ip)
    try:
        slow.sendall(b"GET /slow HTTP/1.1\r\n")  # its headers are not finished yet
        r = _in_client(c, "curl", "-s", f"http://{ip}:8080/")
        assert r.returncode == 0 and r.stdout.startswith(f"{SERVER} "), r
        # the unfinished request is still waited for: it ends, it gets HTTP
        slow.sendall(b"Host: x\r\n\r\n")
        assert _read_all(slow).startswith(b"HTTP/1.1 200 OK\r\n")
        # nothing sent at all: the bare line once the first-bytes window is over
        line = _read_all(silent).decode()
        assert re.fullmatch(rf"{SERVER} {sample.pod(CLIENT).ip} \d+\n", line)
    finally:
        slow.close()
        silent.close()
    texts = _records(c, SERVER)
    assert any('"GET /slow HTTP/1.1" 200' in t for t in texts)
    assert texts[-1].endswith(f' "-" - {len(line)}')


def test_the_log_lives_under_the_clusters_state_dir(cluster: tuple[Sample, RealCluster]) -> None:
    _, c = cluster
    path = c.state.pod_log(SERVER)
    assert path == c.state.root / "logs" / "default_p0-1.log"
    assert isinstance(path, Path) and path.is_file()
