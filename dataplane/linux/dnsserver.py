"""A DNS pod's server process: CoreDNS's answers (:mod:`dataplane.dns`) on real sockets
inside the pod's network namespace.

Run as ``python dnsserver.py NETNS ZONE_JSON POD QUERY_LOG`` (the project's interpreter:
it imports :mod:`dataplane.dns`, hence dnspython). It enters namespace NETNS with
``setns(2)``, binds 0.0.0.0:53 UDP and TCP and 0.0.0.0:9153 TCP (the metrics port: it
answers ``<pod> <peer ip> <peer port>`` like the other pod servers, so a connection to
it shows who answered), prints ``ready`` on stdout, then answers until killed:

* UDP: one answer per datagram (:class:`dataplane.dns.ZoneAnswerer`, truncated to 512
  octets or the EDNS size with TC set);
* TCP: length-prefixed messages (RFC 1035 4.2.2), any number per connection;
* the zone is re-read when ZONE_JSON changes (its mtime), as CoreDNS follows the API;
* every question is appended to QUERY_LOG as ``<qname> <qtype> <rcode> <proto>``.
"""

from __future__ import annotations

import ctypes
import json
import os
import selectors
import socket
import sys
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000
DNS_PORT = 53
METRICS_PORT = 9153


def _enter(netns: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")
    finally:
        os.close(fd)


class _Zone:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.mtime = -1
        self.answerer: Any = None
        self.reload()

    def reload(self) -> None:
        from dataplane.dns import DnsZone, ZoneAnswerer

        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime != self.mtime:
            zone = DnsZone.from_json(json.loads(self.path.read_text()))
            self.answerer = ZoneAnswerer(zone)
            self.mtime = mtime


def _log(log: object, wire: bytes, answer: bytes | None, proto: str) -> None:
    import dns.message
    import dns.rcode

    try:
        q = dns.message.from_wire(wire)
        name, qtype = q.question[0].name, q.question[0].rdtype
        rcode = dns.rcode.to_text(dns.message.from_wire(answer).rcode()) if answer else "-"
        line = f"{name} {dns.rdatatype.to_text(qtype)} {rcode} {proto}\n"
    except Exception:
        line = f"- - FORMERR {proto}\n"
    log.write(line)  # type: ignore[attr-defined]
    log.flush()  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    netns, zone_path, pod, log_path = argv
    _enter(netns)
    import dns.rdatatype  # noqa: F401  (loaded before the first question)

    zone = _Zone(Path(zone_path))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", DNS_PORT))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", DNS_PORT))
    tcp.listen(128)
    metrics = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    metrics.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    metrics.bind(("0.0.0.0", METRICS_PORT))
    metrics.listen(128)
    log = open(log_path, "a")  # noqa: SIM115 (open for the process's life)
    sel = selectors.DefaultSelector()
    for s in (udp, tcp, metrics):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    buffers: dict[socket.socket, bytes] = {}
    print("ready", flush=True)
    sys.stdout.close()
    while True:
        zone.reload()
        for key, _ in sel.select(timeout=0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is udp:
                try:
                    wire, peer = udp.recvfrom(65535)
                except BlockingIOError:
                    continue
                answer = zone.answerer(wire, False) if zone.answerer else None
                _log(log, wire, answer, "udp")
                if answer is not None:
                    udp.sendto(answer, peer)
            elif sock is tcp:
                try:
                    conn, _ = tcp.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(False)
                buffers[conn] = b""
                sel.register(conn, selectors.EVENT_READ)
            elif sock is metrics:
                try:
                    conn, peer = metrics.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(True)
                conn.sendall(f"{pod} {peer[0]} {peer[1]}\n".encode())
                conn.close()
            else:
                try:
                    data = sock.recv(65535)
                except (BlockingIOError, ConnectionError):
                    data = b""
                if not data:
                    sel.unregister(sock)
                    buffers.pop(sock, None)
                    sock.close()
                    continue
                buf = buffers[sock] + data
                while len(buf) >= 2 and len(buf) >= 2 + int.from_bytes(buf[:2], "big"):
                    n = int.from_bytes(buf[:2], "big")
                    wire, buf = buf[2 : 2 + n], buf[2 + n :]
                    answer = zone.answerer(wire, True) if zone.answerer else None
                    _log(log, wire, answer, "tcp")
                    if answer is not None:
                        sock.setblocking(True)
                        sock.sendall(len(answer).to_bytes(2, "big") + answer)
                        sock.setblocking(False)
                buffers[sock] = buf


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
