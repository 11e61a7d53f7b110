"""kubectl exec, logs and port-forward into the pods of a real cluster (mark.kernel):
``svclab up --real`` builds the examples' cluster on network namespaces, ``svclab serve
--real`` serves it, and the real kubectl (1.32 over WebSocket, Debian's 1.20 over SPDY)
and the official Python client step into its pods. The command runs in the pod's
network namespace (the host's real ``curl``, the pod's resolv.conf to the real DNS pod),
the server pod's log is its pod server's access log, and a port-forward is a
connection from inside the pod: what each sees matches the emulator's answers."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.stream import portforward, stream

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "control" / "apiserver" / "http"))
from serving import Served, kubectl_1_20

from app import real
from dataplane.linux.netns import is_root
from dataplane.linux.nsenter import inode
from dataplane.linux.realize import RealCluster
from dataplane.linux.state import StateDir
from dataplane.linux.testing import leftovers

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [ROOT / "examples" / "web.yaml", ROOT / "examples" / "pods.yaml"]
SVCLAB = str(Path(sys.executable).parent / "svclab")
ANSWER = re.compile(r"^default/(web-\S+) (\d+\.\d+\.\d+\.\d+) (\d+)\n$")


def svclab(state: Path, *args: str) -> str:
    out = subprocess.run(
        [SVCLAB, "--state", str(state), *args], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    state = tmp_path_factory.mktemp("realpods") / "state"
    files = [a for f in EXAMPLES for a in ("-f", str(f))]
    svclab(state, "apply", *files)
    s = Served(state, "--real")
    try:
        svclab(state, "up", "--real")
        s.start()
        yield s
    finally:
        s.stop()
        record = real.RealRecord.read(state)
        real.down(state)
        if record is not None:
            assert leftovers(record.cluster_id) == []


def client_ip(srv: Served) -> str:
    return srv.kubectl("get", "pod", "client", "-o", "jsonpath={.status.podIP}").stdout


def log_records(srv: Served, pod: str, binary: str | None = None) -> list[str]:
    kw = {"binary": binary} if binary else {}
    return srv.kubectl("logs", pod, **kw).stdout.splitlines()  # type: ignore[arg-type]


@pytest.mark.parametrize("version", ["1.32", "1.20"])
def test_exec_curl_and_the_servers_log(srv: Served, version: str) -> None:
    binary = None
    if version == "1.20":
        binary, why = kubectl_1_20()
        assert binary, why
    kw = {"binary": binary} if binary else {}
    out = srv.kubectl("exec", "client", "--", "curl", "-s", "web", **kw).stdout  # type: ignore[arg-type]
    m = ANSWER.match(out)
    assert m, out
    pod, seen, port = m.groups()
    assert seen == client_ip(srv)
    # the server's own access log names the same client address and port
    last = log_records(srv, pod, binary)[-1]
    assert last.startswith(f"{seen}:{port} -> ") and '"GET / HTTP/1.1" 200' in last
    # it ran in the client pod's own network namespace (no emulated tool: the kernel's)
    record = real.RealRecord.read(srv.state)
    assert record is not None
    netns = RealCluster.load(record.cluster_id).namespaces["pod/default/client"]
    ns_link = srv.kubectl("exec", "client", "--", "readlink", "/proc/self/ns/net", **kw).stdout  # type: ignore[arg-type]
    assert ns_link == f"net:[{inode(netns)}]\n"
    # exit codes pass through: curl to a closed port exits 7, an unknown command 127
    r = srv.kubectl("exec", "client", "--", "curl", "-sS", "http://127.0.0.1:1/", check=False, **kw)  # type: ignore[arg-type]
    assert r.returncode == 7, r.stderr
    r = srv.kubectl("exec", "client", "--", "no-such-tool", check=False, **kw)  # type: ignore[arg-type]
    assert r.returncode != 0
    # stdin reaches the command and its end ends it
    r = srv.kubectl("exec", "-i", "client", "--", "cat", input="one\ntwo\n", **kw)  # type: ignore[arg-type]
    assert r.stdout == "one\ntwo\n"


@pytest.mark.parametrize("version", ["1.32", "1.20"])
def test_port_forward_is_a_connection_from_inside_the_pod(srv: Served, version: str) -> None:
    binary = "kubectl"
    if version == "1.20":
        got, why = kubectl_1_20()
        assert got, why
        binary = got
    pod = srv.kubectl(
        "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[0].metadata.name}"
    ).stdout
    proc = subprocess.Popen(
        [binary, "--kubeconfig", str(srv.kubeconfig), "port-forward", f"pod/{pod}", ":8080"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"127\.0\.0\.1:(\d+) -> 8080", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        local = int(m.group(1))
        # HTTP: real curl through the forwarded port
        got = subprocess.run(
            ["curl", "-s", f"http://127.0.0.1:{local}/"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert re.fullmatch(rf"default/{pod} 127\.0\.0\.1 \d+\n", got), got
        # raw: bytes that are not HTTP get the bare line
        with socket.create_connection(("127.0.0.1", local), timeout=20) as sock:
            sock.sendall(b"hello\n")
            raw = b""
            while not raw.endswith(b"\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                raw += chunk
        assert re.fullmatch(rf"default/{pod} 127\.0\.0\.1 \d+\n", raw.decode()), raw
    finally:
        proc.terminate()
        proc.wait(10)
    assert log_records(srv, pod)[-1].endswith('"-" - ' + str(len(raw)))
    assert '"GET / HTTP/1.1" 200' in log_records(srv, pod)[-2]
    last = log_records(srv, pod)[-1]
    assert " -> 127.0.0.1:8080 " in last
    # the record is the real pod server's own (its file under the cluster's run state)
    record = real.RealRecord.read(srv.state)
    assert record is not None
    written = StateDir.of(record.cluster_id).pod_log(f"default/{pod}").read_text()
    assert written.splitlines()[-1].endswith(" stdout F " + last)


def test_python_client_exec_and_port_forward(srv: Served) -> None:
    api = client.CoreV1Api(config.new_client_from_config(str(srv.kubeconfig)))
    out = stream(
        api.connect_get_namespaced_pod_exec,
        "client",
        "default",
        command=["curl", "-s", "web"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    assert ANSWER.match(out), out
    pod = next(
        p.metadata.name
        for p in api.list_namespaced_pod("default").items
        if p.metadata.name.startswith("web-")
    )
    pf = portforward(api.connect_get_namespaced_pod_portforward, pod, "default", ports="8080")
    sock = pf.socket(8080)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    deadline = time.monotonic() + 20
    while b"\n" not in data.split(b"\r\n\r\n", 1)[-1] and time.monotonic() < deadline:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    sock.close()
    assert data.startswith(b"HTTP/1.1 200 OK"), data
    assert data.split(b"\r\n\r\n", 1)[1].startswith(f"default/{pod} 127.0.0.1 ".encode())


PDB = """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web-pdb}
spec:
  minAvailable: %d
  selector: {matchLabels: {app: web}}
"""
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


def _web_on(srv: Served, node: str) -> list[str]:
    out = srv.kubectl(
        "get", "pods", "-l", "app=web", "--field-selector", f"spec.nodeName={node}", "-o", "name"
    ).stdout
    return [line.removeprefix("pod/") for line in out.split()]


def _allowed(srv: Served, want: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = srv.kubectl(
            "get", "pdb", "web-pdb", "-o", "jsonpath={.status.disruptionsAllowed}", check=False
        ).stdout
        if out == str(want):
            return
        time.sleep(0.2)
    raise AssertionError(f"the budget never allowed {want} disruptions")


def test_drain_with_a_budget_on_the_real_cluster(srv: Served) -> None:
    """Last in this module: it evicts node-2's web pod (the kernel keeps its namespace
    until the real nodes follow the store: svclab up --real)."""
    (victim,) = _web_on(srv, "node-2")
    srv.kubectl("apply", "-f", "-", input=PDB % 3)
    _allowed(srv, 0)
    out = srv.kubectl(
        "drain",
        "node-2",
        "--pod-selector=app=web",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=8s",
        check=False,
    )
    assert out.returncode != 0
    assert f'error when evicting pods/"{victim}" -n "default"' in out.stderr
    assert VIOLATION in out.stderr
    srv.kubectl("apply", "-f", "-", input=PDB % 2)
    _allowed(srv, 1)
    out = srv.kubectl(
        "drain",
        "node-2",
        "--pod-selector=app=web",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=60s",
    )
    assert f"pod/{victim} evicted" in out.stdout and "node/node-2 drained" in out.stdout
    assert _web_on(srv, "node-2") == []
    srv.kubectl("uncordon", "node-2")
