"""The channel protocols of the pod streams over a WebSocket (``pods/exec``,
``pods/attach``, ``pods/portforward``), as kubelet's ``wsstream`` and kube-apiserver's
stream translator speak them. Pure framing: no I/O.

A message carries one channel's bytes: its first byte is the channel number, the rest
the data. In the ``base64`` protocols a message is text: the channel is the ASCII digit
``'0' + n`` and the data is base64. Exec and attach use five channels:

====  ========  =====================================================================
 0    stdin     client to server
 1    stdout    server to client
 2    stderr    server to client (never with a terminal: stderr then joins stdout)
 3    error     server to client, once, at the end: how the command ended
 4    resize    client to server, JSON ``{"Width": W, "Height": H}``
====  ========  =====================================================================

Versions differ in what the error channel carries and in closing:

* ``channel.k8s.io``, ``base64.channel.k8s.io`` and no protocol at all (kubelet's
  pre-v4 protocols): the error's message as plain text, nothing on success;
* ``v4.channel.k8s.io``, ``v4.base64.channel.k8s.io``: a ``metav1.Status`` as JSON,
  also on success; a non-zero exit is ``Failure`` with reason ``NonZeroExitCode`` and
  the code as the message of the cause ``ExitCode``;
* ``v5.channel.k8s.io`` (kube-apiserver's stream translator, kubectl 1.30+): as v4,
  plus the close signal: the message ``[255, n]`` half-closes channel ``n`` (the
  client's stdin reaches end of file).

``v2.channel.k8s.io`` and ``v3.channel.k8s.io`` are SPDY protocol names only: neither
kubelet nor kube-apiserver offers them on a WebSocket, and neither does this module.

Port-forward (kubelet's WebSocket port-forward: ``""``, ``v4.channel.k8s.io``,
``v4.base64.channel.k8s.io``) has two channels per requested port, data (``2i``) and
error (``2i+1``); the first message of each is the port number, two bytes little
endian.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

STDIN, STDOUT, STDERR, ERROR, RESIZE = range(5)
#: v5's close signal, followed by the channel it closes
CLOSE = 255


class ProtocolError(ValueError):
    """A client message that breaks the channel protocol (one line, what was wrong)."""


@dataclass(frozen=True, slots=True)
class Protocol:
    """One WebSocket subprotocol of the pod streams."""

    name: str
    #: the data travels in text messages, base64-encoded
    base64: bool
    #: 1 for kubelet's pre-v4 protocols, else 4 or 5
    version: int

    @property
    def status_json(self) -> bool:
        """Whether the error channel carries a ``metav1.Status`` as JSON."""
        return self.version >= 4

    @property
    def half_close(self) -> bool:
        """Whether the client may close a channel (v5's close signal)."""
        return self.version >= 5


V5 = Protocol("v5.channel.k8s.io", False, 5)
V4 = Protocol("v4.channel.k8s.io", False, 4)
V4_BASE64 = Protocol("v4.base64.channel.k8s.io", True, 4)
V1 = Protocol("channel.k8s.io", False, 1)
V1_BASE64 = Protocol("base64.channel.k8s.io", True, 1)
#: what a client that names no protocol gets (kubelet's ``""``: binary, pre-v4)
NONE = Protocol("", False, 1)

#: exec and attach: kubelet's protocols, and v5 (kube-apiserver's translator)
EXEC_PROTOCOLS: Mapping[str, Protocol] = {
    p.name: p for p in (V5, V4, V4_BASE64, V1, V1_BASE64, NONE)
}
#: port-forward: kubelet's
PORTFORWARD_PROTOCOLS: Mapping[str, Protocol] = {p.name: p for p in (V4, V4_BASE64, NONE)}


def offered(headers: Iterable[str]) -> list[str]:
    """The protocols of the ``Sec-WebSocket-Protocol`` header values, in order."""
    out: list[str] = []
    for value in headers:
        out += [t.strip() for t in value.split(",") if t.strip()]
    return out


def negotiate(offers: Sequence[str], supported: Mapping[str, Protocol]) -> Protocol | None:
    """The protocol to speak: the first offered one that is supported (the client's
    order of preference, as kubelet's ``wsstream`` picks it); no offer at all means
    ``""``. ``None``: nothing offered is supported (the handshake is refused)."""
    for name in offers or [""]:
        p = supported.get(name)
        if p is not None:
            return p
    return None


def frame(proto: Protocol, channel: int, data: bytes) -> bytes | str:
    """The message that carries ``data`` on ``channel`` (``str``: a text message)."""
    if proto.base64:
        return chr(ord("0") + channel) + base64.b64encode(data).decode("ascii")
    return bytes((channel,)) + data


@dataclass(frozen=True, slots=True)
class Data:
    """Bytes a client sent on a channel."""

    channel: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Closed:
    """v5's close signal: the client closed its side of ``channel``."""

    channel: int


def parse(proto: Protocol, message: bytes | str) -> Data | Closed | None:
    """A client's message (``str``: a text message). ``None``: an empty message, which
    kubelet skips. Raises :class:`ProtocolError` for a message the protocol cannot carry."""
    if not message:
        return None
    if proto.base64:
        if isinstance(message, bytes):
            raise ProtocolError(f"a binary message on the text protocol {proto.name}")
        channel = ord(message[0]) - ord("0")
        if not 0 <= channel <= 9:
            raise ProtocolError(f"channel {message[0]!r} is not a digit ({proto.name})")
        try:
            return Data(channel, base64.b64decode(message[1:], validate=True))
        except (binascii.Error, ValueError) as e:
            raise ProtocolError(f"channel {channel}: invalid base64 data: {e}") from None
    raw = message.encode("utf-8") if isinstance(message, str) else message
    if raw[0] == CLOSE and proto.half_close:
        if len(raw) != 2:
            raise ProtocolError(
                f"the close signal takes one channel byte, got {len(raw) - 1} bytes"
            )
        return Closed(raw[1])
    return Data(raw[0], raw[1:])


@dataclass(frozen=True, slots=True)
class TerminalSize:
    width: int
    height: int


class ResizeDecoder:
    """The resize channel's JSON objects ``{"Width": W, "Height": H}`` (unsigned 16-bit
    each), decoded as a stream: an object may span messages, and one message may hold
    several (kubelet reads the channel with a JSON stream decoder)."""

    def __init__(self) -> None:
        self._buf = ""
        self._decoder = json.JSONDecoder()

    def feed(self, data: bytes) -> list[TerminalSize]:
        try:
            self._buf += data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"resize: not UTF-8 JSON: {e}") from None
        out: list[TerminalSize] = []
        while True:
            text = self._buf.lstrip()
            if not text:
                self._buf = ""
                return out
            try:
                obj, end = self._decoder.raw_decode(text)
            except json.JSONDecodeError as e:
                if e.pos >= len(text):  # incomplete: wait for more
                    self._buf = text
                    return out
                raise ProtocolError(f"resize: invalid JSON: {e.msg}") from None
            self._buf = text[end:]
            out.append(_size(obj))


def _size(obj: Any) -> TerminalSize:
    if not isinstance(obj, dict):
        raise ProtocolError(f"resize: want an object with Width and Height, got {obj!r}")
    vals = []
    for name in ("Width", "Height"):
        v = obj.get(name, 0)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 0xFFFF:
            raise ProtocolError(f"resize: {name} must be an unsigned 16-bit integer, got {v!r}")
        vals.append(v)
    return TerminalSize(vals[0], vals[1])


# ---------------------------------------------------------------- the error channel


def _marshal(status: dict[str, Any]) -> bytes:
    """A ``metav1.Status`` as Go's ``json.Marshal`` writes it: fields in the struct's
    order, empty ones left out, no spaces."""
    out: dict[str, Any] = {"metadata": {}, "status": status["status"]}
    for key in ("message", "reason", "details", "code"):
        if status.get(key):
            out[key] = status[key]
    return json.dumps(out, separators=(",", ":")).encode()


def success() -> dict[str, Any]:
    return {"status": "Success"}


def exit_status(code: int, command: Sequence[str], proto: Protocol) -> dict[str, Any]:
    """How a command that exited with ``code`` (non-zero) is reported. kubelet's
    message names the command; through kube-apiserver's v5 translator it is the
    message of the exit error client-go made of kubelet's report."""
    if proto.half_close:
        inner = f"command terminated with exit code {code}"
    else:
        inner = f"error executing command [{' '.join(command)}], exit code {code}"
    return {
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: {inner}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def internal_error(message: str) -> dict[str, Any]:
    """kube-apiserver's ``NewInternalError``."""
    return {
        "status": "Failure",
        "message": f"Internal error occurred: {message}",
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    }


def status_message(status: dict[str, Any], proto: Protocol) -> bytes | None:
    """What the error channel carries for ``status``: the JSON (v4, v5), or the
    message of a failure as text (pre-v4; ``None`` on success: nothing is sent)."""
    if proto.status_json:
        return _marshal(status)
    if status["status"] == "Success":
        return None
    return str(status["message"]).encode()


# ---------------------------------------------------------------- port-forward


def port_prefix(port: int) -> bytes:
    """The first message's data on both channels of a forwarded port."""
    return struct.pack("<H", port)


def parse_ports(values: Sequence[str]) -> list[int]:
    """The ``ports`` query parameters (each may list several, comma-separated), with
    kubelet's refusals (``ValueError``, its message)."""
    if not values:
        raise ValueError('query parameter "port" is required')
    ports: list[int] = []
    for value in values:
        if not value:
            raise ValueError('query parameter "port" cannot be empty')
        for p in value.split(","):
            if not p.isdigit() or int(p) > 0xFFFF:
                raise ValueError(
                    f'unable to parse "{value}" as a port: strconv.ParseUint: parsing '
                    f'"{p}": {"value out of range" if p.isdigit() else "invalid syntax"}'
                )
            if int(p) < 1:
                raise ValueError(f'port "{value}" must be > 0')
            ports.append(int(p))
    return ports


__all__ = [
    "CLOSE",
    "ERROR",
    "EXEC_PROTOCOLS",
    "PORTFORWARD_PROTOCOLS",
    "RESIZE",
    "STDERR",
    "STDIN",
    "STDOUT",
    "Closed",
    "Data",
    "Protocol",
    "ProtocolError",
    "ResizeDecoder",
    "TerminalSize",
    "exit_status",
    "frame",
    "internal_error",
    "negotiate",
    "offered",
    "parse",
    "parse_ports",
    "port_prefix",
    "status_message",
    "success",
]
