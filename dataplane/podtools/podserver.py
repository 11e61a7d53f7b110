"""The pod server model: what every emulated pod answers on its TCP containerPorts, and
the access log line it writes for each answer. The real backend's pod server
(``dataplane/linux/podserver.py``) answers a connection with the same line; a
differential test compares the two.

* A connection whose first bytes are an HTTP/1.x request (``METHOD SP target SP
  HTTP/1.x CRLF ... CRLF CRLF``) is answered ``HTTP/1.1 200 OK`` with the headers
  below and the body ``<pod ns/name> <peer ip> <peer port>\\n``: who answered and the
  source address and port it saw (after any NAT). ``HEAD`` gets the headers alone.
  No ``Date`` or ``Server`` header: the answer depends on nothing but the connection.
* A connection that sends anything else, or nothing (``nc HOST PORT`` with no input),
  gets the body line alone, as the pod servers have always answered.
* The health URLs (``/readyz``, ``/healthz``, ``/livez`` and their ``/fail`` and
  ``/heal`` toggles) answer the pod's health instead (:mod:`netmodel.podhealth`).
* ``nc -z`` (connect and close, nothing sent) is answered nothing and logs nothing.

Log line (one per answer, in order)::

    <peer ip>:<peer port> -> <local ip>:<local port> "<request line>" <status> <body bytes>

with ``-`` for the request line of a raw connection and status ``-``.
"""

from __future__ import annotations

from dataclasses import dataclass

from netmodel import podhealth as health

HEADERS = (
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: {length}\r\n"
    "Connection: close\r\n"
    "\r\n"
)
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")


@dataclass(frozen=True, slots=True)
class LogLine:
    """One access log line of the pod ``pod`` (``ns/name``)."""

    pod: str
    text: str


@dataclass(frozen=True, slots=True)
class Answer:
    data: bytes
    log: LogLine | None


def body(pod: str, peer: tuple[str, int]) -> bytes:
    return f"{pod} {peer[0]} {peer[1]}\n".encode()


def request_line(request: bytes) -> str | None:
    """The HTTP request line of ``request`` (None: not an HTTP/1.x request)."""
    head, sep, _ = request.partition(b"\r\n")
    if not sep:
        return None
    words = head.decode("latin-1").split(" ")
    if len(words) != 3 or words[0] not in METHODS or not words[2].startswith("HTTP/1."):
        return None
    return head.decode("latin-1")


def answer(pod: str, peer: tuple[str, int], local: tuple[str, int], request: bytes) -> Answer:
    """What the pod server of ``pod`` answers a connection from ``peer`` (as it saw it)
    to its ``local`` address that sent ``request`` (see the module docstring)."""
    text = body(pod, peer)
    line = request_line(request)
    where = f"{peer[0]}:{peer[1]} -> {local[0]}:{local[1]}"
    if line is None:
        return Answer(text, LogLine(pod, f'{where} "-" - {len(text)}'))
    method, target = line.split(" ")[:2]
    code = 200
    special = health.http_answer(pod, method, target)
    if special is not None:
        code, text = special[0], special[1].encode()
    head = HEADERS.format(length=len(text)).encode()
    if code != 200:
        head = head.replace(b"200 OK", f"{code} {REASONS[code]}".encode(), 1)
    data = head if line.startswith("HEAD ") else head + text
    return Answer(data, LogLine(pod, f'{where} "{line}" {code} {len(text)}'))


REASONS = {200: "OK", 500: "Internal Server Error", 503: "Service Unavailable"}
