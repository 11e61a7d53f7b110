"""Requests to etcd's JSON gateway (``/v3/...``, etcd >= 3.4) over every member given,
through etcd3gw, with failover and a bounded wait.

* :meth:`EtcdClient.call` posts one unary request (range, txn, compaction, status) to
  the member that answered last; when it cannot be reached or answers "unavailable" (no
  leader, request timed out) the next member is tried, round after round, until
  :attr:`EtcdClient.deadline` seconds have passed; then :class:`StoreUnavailableError`
  (one line, exit code 1). When every member refuses connections outright the wait is
  cut to :attr:`EtcdClient.refused_grace` seconds: nothing is listening.
* :meth:`EtcdClient.watch` opens etcd's watch stream and yields each message. etcd3gw's
  own watch drops the ``compact_revision`` cancellation etcd sends for a watch from a
  compacted revision, so svclab reads the stream itself: one JSON object per chunk.
* A request etcd refuses (bad request, compacted revision) raises
  :class:`EtcdRequestError` carrying etcd's gRPC code and message; it is not retried.

A write whose answer was lost (a timeout or a dropped connection after the request was
sent) may have been applied; the caller sees :attr:`EtcdClient.retried` and decides
(see :meth:`control.store.etcd.EtcdStore` for how a write checks it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, cast

import etcd3gw
import requests
from etcd3gw import exceptions as etcd_exc

from netmodel.errors import InputError, SvclabError

#: gRPC codes that mean "ask another member / again": DeadlineExceeded, Unavailable
_RETRY_CODES = {4, 14}


class StoreUnavailableError(SvclabError):
    """No member of the store answered within the bounded wait; nothing was written
    (or, for a write whose answer was lost, see the message)."""


class EtcdRequestError(SvclabError):
    """etcd refused the request; ``code`` is the gRPC status code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` (an optional ``http://`` per member) -> pairs."""
    out: list[tuple[str, int]] = []
    for part in text.strip().strip("/").split(","):
        part = part.strip().removeprefix("http://")
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InputError(
                f"bad etcd endpoint {part!r}: expected HOST:PORT[,HOST:PORT...]",
                field="store",
            )
        out.append((host.strip("[]"), int(port)))
    return out


def _error_of(exc: etcd_exc.Etcd3Exception) -> tuple[int | None, str]:
    """etcd's gRPC code and message from a gateway error body."""
    text = exc.detail_text or ""
    try:
        body = json.loads(text)
        return int(body.get("code", 2)), str(body.get("message") or body.get("error") or text)
    except (ValueError, AttributeError):
        return None, text.strip() or type(exc).__name__


class EtcdClient:
    """One client per etcd cluster; see the module docstring."""

    connect_timeout = 2.0
    read_timeout = 8.0  # etcd's own request timeout is 5 s + 2 election timeouts
    deadline = 20.0
    refused_grace = 2.0

    def __init__(self, endpoints: list[tuple[str, int]]) -> None:
        if not endpoints:
            raise InputError("no etcd endpoint given", field="store")
        self.endpoints = endpoints
        timeout = cast(Any, (self.connect_timeout, self.read_timeout))
        self._clients = [
            etcd3gw.Etcd3Client(
                host=h, port=p, timeout=timeout, api_path="/v3/", session=_session()
            )
            for h, p in endpoints
        ]
        self._current = 0
        self._all_refused = True
        self._last_error = "no answer"
        #: set by the last call: True if an earlier attempt of it may have reached etcd
        self.retried = False

    @property
    def where(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.endpoints)

    def _attempts(self) -> Iterator[int]:
        """Member indices to try, current first, round after round until the deadline;
        raises StoreUnavailableError at the end. Starts a call afresh: no attempt has
        failed yet (``retried``, the all-refused flag and the last error are reset)."""
        self.retried = False
        self._all_refused = True
        self._last_error = "no answer"
        start = time.monotonic()
        n = len(self._clients)
        while True:
            for i in range(n):
                yield (self._current + i) % n
            elapsed = time.monotonic() - start
            if elapsed >= self.deadline or (self._all_refused and elapsed >= self.refused_grace):
                raise StoreUnavailableError(
                    f"etcd at {self.where} is unavailable after {elapsed:.0f} s "
                    f"({self._last_error}); nothing was written"
                    + (
                        " (a write may have reached etcd before the failure)"
                        if self.retried
                        else ""
                    )
                )
            time.sleep(0.2)

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``/v3/PATH`` with failover; returns the decoded JSON answer."""
        for i in self._attempts():
            client = self._clients[i]
            try:
                answer = client.post(client.get_url(path), json=body)
            except etcd_exc.ConnectionFailedError as e:
                self._failed(i, e, refused=_refused(e))
                continue
            except etcd_exc.ConnectionTimeoutError as e:
                self._failed(i, e, refused=False)
                continue
            except etcd_exc.Etcd3Exception as e:
                code, message = _error_of(e)
                if code in _RETRY_CODES:
                    self._failed(i, e, refused=False, message=message)
                    continue
                host, port = self.endpoints[i]
                raise EtcdRequestError(f"etcd at {host}:{port}: {message}", code or 2) from None
            except (requests.RequestException, ValueError) as e:  # a broken answer
                self._failed(i, e, refused=False)
                continue
            self._current = i
            return cast(dict[str, Any], answer)
        raise AssertionError("unreachable")  # _attempts raises at the deadline

    def _failed(self, i: int, exc: Exception, *, refused: bool, message: str | None = None) -> None:
        host, port = self.endpoints[i]
        if not refused:
            self._all_refused = False
            self.retried = True
        self._last_error = f"{host}:{port}: {message or _short(exc)}"

    def close(self) -> None:
        for c in self._clients:
            c.session.close()

    def watch(self, create_request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Open a watch stream (failover on connect) and yield each message's ``result``.
        The caller stops reading when it has what it needs; the stream is closed then."""
        for i in self._attempts():
            client = self._clients[i]
            try:
                resp = client.session.post(
                    client.get_url("/watch"),
                    json={"create_request": create_request},
                    stream=True,
                    timeout=(self.connect_timeout, self.read_timeout),
                )
            except requests.ConnectionError as e:
                self._failed(i, e, refused=_refused(e))
                continue
            except requests.Timeout as e:
                self._failed(i, e, refused=False)
                continue
            if resp.status_code != 200:
                resp.close()
                self._failed(i, RuntimeError(f"HTTP {resp.status_code}"), refused=False)
                continue
            self._current = i
            try:
                yield from _messages(resp)
            except (requests.ConnectionError, requests.Timeout) as e:
                raise StoreUnavailableError(
                    f"etcd at {self.where}: the watch stream broke ({_short(e)})"
                ) from None
            finally:
                resp.close()
            return


def _session() -> requests.Session:
    """A keep-alive session that ignores proxy variables: the members are addressed
    directly, and reading the environment for proxies costs about 0.5 ms per request."""
    session = requests.Session()
    session.trust_env = False
    return session


def _messages(resp: requests.Response) -> Iterator[dict[str, Any]]:
    """The gateway writes one JSON object per message, newline-terminated; a chunk may
    hold part of one or several."""
    buf = b""
    for chunk in resp.iter_content(chunk_size=None):
        buf += chunk
        while True:
            line, sep, rest = buf.partition(b"\n")
            if not sep:
                break
            buf = rest
            if not line.strip():
                continue
            msg = json.loads(line)
            if "error" in msg:
                err = msg["error"]
                raise EtcdRequestError(str(err.get("message", err)), int(err.get("grpc_code", 2)))
            yield msg.get("result", {})


def _text(exc: Exception) -> str:
    """etcd3gw keeps the message of its connection errors in ``detail_text``."""
    if isinstance(exc, etcd_exc.Etcd3Exception) and exc.detail_text:
        return exc.detail_text
    return str(exc)


def _refused(exc: Exception) -> bool:
    return "refused" in _text(exc).lower()


def _short(exc: Exception) -> str:
    text = _text(exc)
    if "refused" in text.lower():
        return "connection refused"
    if "timed out" in text.lower() or isinstance(exc, etcd_exc.ConnectionTimeoutError):
        return "timed out"
    return text.splitlines()[0][:200] if text else type(exc).__name__
