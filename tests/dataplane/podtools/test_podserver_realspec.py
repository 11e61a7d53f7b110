"""The real pod server (``dataplane/linux/podserver.py``, a standalone script that may
import nothing but the standard library) restates the pod server model's rules
(:mod:`dataplane.podtools.podserver`): both answer every request alike, and the real one
never answers early (before the client finished) with something the whole request would
not have got."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dataplane.linux import podserver as real
from dataplane.podtools import podserver as model
from netmodel import podhealth as health

POD = "default/web-1"
PEER = ("10.244.1.5", 43210)
LOCAL = ("10.244.2.7", 80)

_words = st.sampled_from(
    [
        "GET",
        "HEAD",
        "POST",
        "get",
        "GE",
        "BREW",
        "/",
        "/x?y=1",
        "HTTP/1.1",
        "HTTP/1.0",
        "HTTP/2",
        "HTTP/1",
        "",
        "x",
    ]
)
_seps = st.sampled_from([" ", "  ", "\r\n", "\n", "\r", "\r\n\r\n", "Host: web\r\n", ""])
_free = st.lists(st.one_of(_words, _seps), max_size=12).map("".join)
#: request lines close to a real client's, each part sometimes wrong
_lines = st.tuples(
    st.sampled_from(["GET", "HEAD", "POST", "OPTIONS", "GE", "get", "BREW", ""]),
    st.sampled_from([" ", "  ", ""]),
    st.sampled_from(["/", "/a b", "*", ""]),
    st.sampled_from([" ", ""]),
    st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/1.", "HTTP/2.0", "HTTP/1.1 x", ""]),
    st.sampled_from(["\r\n", "\n", "\r", ""]),
    st.sampled_from(["", "Host: web\r\n\r\n", "\r\n", "x"]),
).map("".join)
requests = st.one_of(_lines, _free).map(lambda t: t.encode("latin-1"))


def _model(request: bytes) -> tuple[bytes, str]:
    a = model.answer(POD, PEER, LOCAL, request)
    assert a.log is not None
    return a.data, a.log.text


@given(requests)
def test_the_real_server_answers_what_the_model_answers(request: bytes) -> None:
    assert real.respond(POD, PEER, LOCAL, request) == _model(request)


@given(requests)
def test_an_early_answer_is_the_answer_to_the_whole_request(request: bytes) -> None:
    for k in range(len(request) + 1):
        if real.decide(request[:k], final=False):
            assert real.respond(POD, PEER, LOCAL, request[:k]) == _model(request), k
            break


def test_the_usual_clients() -> None:
    curl = b"GET / HTTP/1.1\r\nHost: web\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n"
    assert not real.decide(curl[:20], final=False)  # headers not finished yet
    assert real.decide(curl, final=False)
    data, text = real.respond(POD, PEER, LOCAL, curl)
    assert data == (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 31\r\n"
        b"Connection: close\r\n\r\ndefault/web-1 10.244.1.5 43210\n"
    )
    assert text == '10.244.1.5:43210 -> 10.244.2.7:80 "GET / HTTP/1.1" 200 31'
    assert real.decide(b"\n", final=False)  # traffic.connect's probe: answered at once
    assert real.respond(POD, PEER, LOCAL, b"\n")[1].endswith('"-" - 31')
    assert not real.decide(b"", final=False)  # nothing yet: wait for the window
    assert real.decide(b"", final=True)


def test_cri_timestamps_are_rfc3339nano_in_utc() -> None:
    assert real.cri_timestamp(1_795_000_000_123_456_789) == "2026-11-18T11:06:40.123456789Z"
    assert real.cri_timestamp(1_795_000_000_120_000_000) == "2026-11-18T11:06:40.12Z"
    assert real.cri_timestamp(1_795_000_000_000_000_000) == "2026-11-18T11:06:40Z"
    rec = real.cri_record("x y", 1_795_000_000_000_000_001).decode()
    assert re.fullmatch(r"\S+Z stdout F x y\n", rec)


@given(
    st.sampled_from([None, {}, {"ready": False}, {"live": False}, {"ready": False, "live": False}]),
    st.sampled_from(["", "readiness", "liveness", "x"]),
)
def test_the_real_servers_grpc_health_is_the_models(
    flags: dict[str, bool] | None, service: str
) -> None:
    """SERVING or not for a service, from the same health file, as the model says."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        if flags is not None:
            health.write(POD, health.Health(**flags), root)
        assert real.grpc_serving(POD, service, root) == health.grpc_serving(POD, service, root)
