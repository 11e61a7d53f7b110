"""The WebSocket channel protocols of exec, attach and port-forward
(control.apiserver.http.channels): negotiation in the client's order, binary and base64
framing, v5's close signal, the resize stream, what the error channel carries per
version, the port-forward port prefix and kubelet's refusals of bad ports; and the CRI
records attach turns back into output (wsstreams.cri_output)."""

from __future__ import annotations

import json

import pytest

from control.apiserver.http import channels
from control.apiserver.http.channels import (
    EXEC_PROTOCOLS,
    PORTFORWARD_PROTOCOLS,
    V1,
    V4,
    V4_BASE64,
    V5,
    Closed,
    Data,
    ProtocolError,
    ResizeDecoder,
    TerminalSize,
)
from control.apiserver.http.wsstreams import cri_output


def test_negotiation_takes_the_clients_first_supported_protocol() -> None:
    assert channels.negotiate(["v5.channel.k8s.io", "v4.channel.k8s.io"], EXEC_PROTOCOLS) is V5
    assert channels.negotiate(["v4.channel.k8s.io", "v5.channel.k8s.io"], EXEC_PROTOCOLS) is V4
    # port-forward has no v5: the Python client's "v5, v4" offer gets v4
    assert (
        channels.negotiate(["v5.channel.k8s.io", "v4.channel.k8s.io"], PORTFORWARD_PROTOCOLS) is V4
    )
    # no offer at all: kubelet's "" (binary, pre-v4)
    assert channels.negotiate([], EXEC_PROTOCOLS) is channels.NONE


def test_protocols_nobody_serves_are_refused() -> None:
    # v2/v3 are SPDY protocol names, not WebSocket ones; the SPDY tunnel is kubectl's
    # port-forward, which must fall back to a plain SPDY upgrade
    for offer in (["v3.channel.k8s.io"], ["v2.channel.k8s.io"], ["bogus"]):
        assert channels.negotiate(offer, EXEC_PROTOCOLS) is None
    assert channels.negotiate(["SPDY/3.1+portforward.k8s.io"], PORTFORWARD_PROTOCOLS) is None


def test_offered_splits_the_header_values() -> None:
    assert channels.offered(["v5.channel.k8s.io, v4.channel.k8s.io", "channel.k8s.io"]) == [
        "v5.channel.k8s.io",
        "v4.channel.k8s.io",
        "channel.k8s.io",
    ]


def test_binary_frames_carry_the_channel_in_the_first_byte() -> None:
    assert channels.frame(V5, channels.STDOUT, b"hi\n") == b"\x01hi\n"
    assert channels.parse(V5, b"\x00abc") == Data(0, b"abc")
    assert channels.parse(V4, b"\x04{}") == Data(4, b"{}")
    assert channels.parse(V5, b"") is None  # kubelet skips an empty message


def test_base64_frames_are_text_with_a_digit_channel() -> None:
    msg = channels.frame(V4_BASE64, channels.STDERR, b"\xff\x00oops")
    assert msg == "2/wBvb3Bz"
    assert channels.parse(V4_BASE64, "0aGVsbG8=") == Data(0, b"hello")
    with pytest.raises(ProtocolError, match="invalid base64"):
        channels.parse(V4_BASE64, "0%%%")
    with pytest.raises(ProtocolError, match="binary message on the text protocol"):
        channels.parse(V4_BASE64, b"\x00abc")


def test_v5_close_signal_closes_one_channel() -> None:
    assert channels.parse(V5, bytes([255, 0])) == Closed(0)
    with pytest.raises(ProtocolError, match="one channel byte, got 2"):
        channels.parse(V5, bytes([255, 0, 1]))
    # before v5, 255 is just a channel number nobody has
    assert channels.parse(V4, bytes([255, 0])) == Data(255, b"\x00")


def test_resize_is_a_json_stream() -> None:
    d = ResizeDecoder()
    assert d.feed(b'{"Width":80,') == []
    assert d.feed(b'"Height":24}{"Width":100,"Height":40}') == [
        TerminalSize(80, 24),
        TerminalSize(100, 40),
    ]
    with pytest.raises(ProtocolError, match="Width must be an unsigned 16-bit integer"):
        ResizeDecoder().feed(b'{"Width":-1,"Height":2}')
    with pytest.raises(ProtocolError, match="invalid JSON"):
        ResizeDecoder().feed(b"{nope}")


def test_error_channel_per_version() -> None:
    cmd = ["ls", "/nope"]
    v4 = json.loads(channels.status_message(channels.exit_status(2, cmd, V4), V4) or b"")
    assert v4 == {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: error executing command "
        "[ls /nope], exit code 2",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "2"}]},
    }
    v5 = json.loads(channels.status_message(channels.exit_status(2, cmd, V5), V5) or b"")
    assert v5["message"] == (
        "command terminated with non-zero exit code: command terminated with exit code 2"
    )
    assert channels.status_message(channels.success(), V5) == b'{"metadata":{},"status":"Success"}'
    # pre-v4: the failure's message as text, nothing on success
    assert channels.status_message(channels.success(), V1) is None
    assert channels.status_message(channels.exit_status(2, cmd, V1), V1) == (
        b"command terminated with non-zero exit code: error executing command "
        b"[ls /nope], exit code 2"
    )
    err = json.loads(channels.status_message(channels.internal_error("boom"), V5) or b"")
    assert err["message"] == "Internal error occurred: boom"
    assert (err["reason"], err["code"]) == ("InternalError", 500)


def test_port_forward_ports() -> None:
    assert channels.port_prefix(8080) == b"\x90\x1f"
    assert channels.parse_ports(["80,8080", "9090"]) == [80, 8080, 9090]
    with pytest.raises(ValueError, match='query parameter "port" is required'):
        channels.parse_ports([])
    with pytest.raises(ValueError, match='unable to parse "http" as a port'):
        channels.parse_ports(["http"])
    with pytest.raises(ValueError, match="value out of range"):
        channels.parse_ports(["70000"])
    with pytest.raises(ValueError, match='port "0" must be > 0'):
        channels.parse_ports(["0"])


def test_cri_records_become_output() -> None:
    ts = "2026-01-01T00:00:00.000000001Z"
    assert cri_output(f"{ts} stdout F 10.0.0.1:5 -> x") == ("stdout", b"10.0.0.1:5 -> x\n")
    assert cri_output(f"{ts} stderr P part") == ("stderr", b"part")
    assert cri_output(f"{ts} stdout F ") == ("stdout", b"\n")
    assert cri_output("garbage") is None
