"""A server that takes a request and never answers does not hold a client forever:
requests give up after the read timeout (a write as "maybe applied", 503), and a watch
after its ``timeoutSeconds`` plus :attr:`KubeClient.WATCH_SLACK`.

A component holds its lock while it writes; before the read timeout, one unanswered
Event POST stopped a whole controller-manager (every informer handler waits for that
lock)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from control.apiserver.http import pki
from control.informers.http import Credentials, KubeClient, ServerUnavailableError


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A plain-HTTP listener that accepts connections and reads, but never answers."""
    srv = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            held.append(conn)

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()


def _client(server: str, **kw: float) -> KubeClient:
    return KubeClient(Credentials(server=server, ca_pem=pki.new_ca().pem), **kw)


def _within(seconds: float, call: Callable[[], object]) -> BaseException | None:
    """What ``call`` raised, failing the test if it has not returned after ``seconds``."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            out.append(None)
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"still waiting after {seconds} s"
    return out[0]


def test_an_unanswered_write_fails_after_the_read_timeout(silent_server: str) -> None:
    client = _client(silent_server, read_timeout=0.5)
    err = _within(10, lambda: client.request("POST", "/api/v1/namespaces/default/events", body={}))
    assert isinstance(err, ServerUnavailableError) and "may have been applied" in str(err)
    client.close()


def test_a_silent_watch_is_dropped_after_its_timeout_and_the_slack(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(KubeClient, "WATCH_SLACK", 0.5)
    client = _client(silent_server, read_timeout=60.0)
    err = _within(10, lambda: list(client.watch("Pod", 1, timeout=1)))
    assert err is not None and "timed out" in str(err).lower()
    client.close()
