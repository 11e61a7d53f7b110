"""Asking cluster DNS from inside a real pod namespace.

* :func:`query` — one question, dig-like: a UDP socket created in the pod's namespace
  (:func:`dataplane.linux.nsenter.socket_in`) sends the message to the server and waits
  for the answer; a truncated answer is asked again over TCP. The caller builds and
  reads the messages (dnspython).
* :func:`getent_hosts` and :func:`getaddrinfo` — the pod's own libc, through the
  resolv.conf ``ip netns exec`` bind-mounts from ``/etc/netns/<netns>/``: ``getent
  hosts NAME`` and Python's ``socket.getaddrinfo(NAME, None, AF_INET)`` in a subprocess.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import dataclass

from dataplane.linux.nsenter import socket_in

DNS_PORT = 53


@dataclass(frozen=True, slots=True)
class RawAnswer:
    """What came back: the answer (None: nothing; ``error`` says what the socket
    reported), over which protocol, whether UDP was truncated first, and the source
    port the question left from."""

    response: bytes | None
    proto: str
    error: str | None
    truncated_udp: bool
    sport: int


def _socket_error(e: OSError) -> str:
    """How dig words a failed exchange: refused, timed out, or the socket's own text."""
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, TimeoutError):
        return "timed out"
    return e.strerror or str(e)


def query(
    netns: str, server: str, wire: bytes, *, tcp: bool = False, timeout: float = 2.0
) -> RawAnswer:
    """Send DNS message ``wire`` to ``server``:53 from namespace ``netns``."""
    truncated = False
    sport = 0
    if not tcp:
        s = socket_in(netns, socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.settimeout(timeout)
            s.connect((server, DNS_PORT))
            sport = s.getsockname()[1]
            s.send(wire)
            data = s.recv(65535)
        except OSError as e:
            return RawAnswer(None, "udp", _socket_error(e), False, sport)
        finally:
            s.close()
        if len(data) < 3 or not data[2] & 0x02:  # TC
            return RawAnswer(data, "udp", None, False, sport)
        truncated = True
    t = socket_in(netns, socket.AF_INET, socket.SOCK_STREAM)
    try:
        t.settimeout(timeout)
        t.connect((server, DNS_PORT))
        sport = t.getsockname()[1]
        t.sendall(len(wire).to_bytes(2, "big") + wire)
        buf = b""
        while len(buf) < 2 or len(buf) < 2 + int.from_bytes(buf[:2], "big"):
            chunk = t.recv(65535)
            if not chunk:
                break
            buf += chunk
    except OSError as e:
        return RawAnswer(None, "tcp", _socket_error(e), truncated, sport)
    finally:
        t.close()
    if len(buf) < 2:
        return RawAnswer(None, "tcp", "connection closed", truncated, sport)
    return RawAnswer(buf[2:], "tcp", None, truncated, sport)


def getent_hosts(netns: str, name: str, *, timeout: float = 20.0) -> list[str]:
    """``getent hosts NAME`` in the namespace: the addresses glibc found (empty: not
    found)."""
    r = subprocess.run(
        ["ip", "netns", "exec", netns, "getent", "hosts", name],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


_GAI = (
    "import json, socket, sys\n"
    "try:\n"
    "    r = socket.getaddrinfo(sys.argv[1], None, socket.AF_INET, socket.SOCK_STREAM)\n"
    "    print(json.dumps({'ok': sorted({a[4][0] for a in r})}))\n"
    "except socket.gaierror as e:\n"
    "    print(json.dumps({'error': e.strerror}))\n"
)


def getaddrinfo(netns: str, name: str, *, timeout: float = 20.0) -> tuple[list[str], str | None]:
    """Python's ``socket.getaddrinfo(NAME, None, AF_INET)`` in the namespace: (addresses,
    None) or ([], the resolver's error text)."""
    r = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-I", "-c", _GAI, name],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    try:
        out = json.loads(r.stdout)
    except json.JSONDecodeError:
        return [], (r.stderr.strip() or "no output")
    if "ok" in out:
        return list(out["ok"]), None
    return [], str(out["error"])
