"""``svclab exec POD [-n NS] [-c CONTAINER] -- COMMAND...`` on the emulator, run as a user
runs it (a subprocess of the installed ``svclab``, on a state directory): the tool's
stdout and stderr as they are, its exit code passed through; kubectl's rules for the
command line (``--`` required) and its errors for a missing pod or container."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SVCLAB = str(Path(sys.executable).parent / "svclab")


def svclab(state: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [SVCLAB, "--state", str(state), *args], capture_output=True, check=False, env=env
    )


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    s = tmp_path_factory.mktemp("exec") / "s"
    r = svclab(s, "apply", "-f", str(EXAMPLES))
    assert r.returncode == 0, r.stderr
    return s


def test_curl_through_the_service(state: Path) -> None:
    r = svclab(state, "exec", "client", "--", "curl", "-s", "web")
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    pod, ip, port = r.stdout.decode().split()
    assert pod.startswith("default/web-") and ip.startswith("10.244.") and port.isdigit()


def test_exit_codes_pass_through(state: Path) -> None:
    r = svclab(state, "exec", "client", "--", "curl", "-sS", "http://nosuch/")
    assert (r.returncode, r.stdout, r.stderr) == (6, b"", b"curl: (6) Could not resolve host: nosuch\n")
    r = svclab(state, "exec", "client", "--", "tcpdump")
    assert r.returncode == 127 and r.stderr.startswith(b"sh: tcpdump: not found in an emulated pod")
    r = svclab(state, "exec", "client", "--", "getent", "hosts", "nosuch")
    assert (r.returncode, r.stdout) == (2, b"")


def test_namespace_container_and_trace(state: Path) -> None:
    r = svclab(state, "exec", "-n", "kube-system", "pod/coredns-nosuch", "--", "hostname")
    assert r.returncode == 1 and b'pods "coredns-nosuch" not found' in r.stderr
    r = svclab(state, "exec", "client", "-c", "client", "--", "cat", "/etc/resolv.conf")
    assert r.returncode == 0
    assert r.stdout == (
        b"nameserver 10.96.0.10\nsearch default.svc.cluster.local svc.cluster.local "
        b"cluster.local\noptions ndots:5\n"
    )
    r = svclab(state, "exec", "client", "-c", "nope", "--", "hostname")
    assert r.returncode == 1
    assert r.stderr == b"error: -c: container nope is not valid for pod client\n"
    r = svclab(state, "exec", "client", "--", "nc", "-z", "web", "80", env={"SVCLAB_TRACE": "1", "PATH": ""})
    assert r.returncode == 0 and b"* svclab: chosen by: -A KUBE-SVC-" in r.stderr


def test_the_command_follows_a_double_dash(state: Path) -> None:
    r = svclab(state, "exec", "client", "hostname")
    assert r.returncode == 2 and b"use exec POD -- COMMAND" in r.stderr
    r = svclab(state, "exec", "client", "--")
    assert r.returncode == 2 and b"at least one command" in r.stderr
    # options after -- belong to the command, even svclab's own (-c, -n)
    r = svclab(state, "exec", "client", "--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "web")
    assert (r.returncode, r.stdout) == (0, b"200")


def test_a_throwaway_cluster(tmp_path: Path) -> None:
    r = svclab(
        tmp_path / "unused", "exec", "a", "-f", str(EXAMPLES / "web.yaml"), "-f",
        str(EXAMPLES / "pods.yaml"), "--", "ping", "-c", "2", "10.96.0.10",
    )
    # a ClusterIP answers no ping in iptables mode: kube-proxy DNATs ports, not ICMP
    assert r.returncode == 1
    assert b"2 packets transmitted, 0 received, 100% packet loss" in r.stdout
    assert not (tmp_path / "unused").exists()
