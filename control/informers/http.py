"""The client side of the Kubernetes REST API: what a component of a live cluster
reads and writes through (``svclab serve``), with its own identity.

* :class:`KubeClient` — one HTTPS client (httpx, keep-alive, the cluster CA, a client
  certificate or a bearer token) with typed verbs over svclab's kinds: ``get``,
  ``list``, ``watch`` (newline-delimited watch events, bookmarks, 410 Gone), ``create``,
  ``update``, ``update_status``, ``bind`` and ``delete``. Responses are parsed into
  :mod:`netmodel.objects` values; a refusal raises the error its HTTP status means
  (404 → :class:`~netmodel.errors.NotFoundError`, 409 →
  :class:`~netmodel.errors.ConflictError`, 410 → :class:`~netmodel.errors.CompactedError`,
  401/403 → :class:`AccessError`, others → :class:`APIError`), carrying the server's
  ``metav1.Status`` message.
* A request the server cannot be reached for is retried with an exponential, jittered,
  capped back-off (:class:`~control.informers.backoff.Backoff`: 0.2 s doubling up to
  5 s), each wait logged (WARNING, logger ``svclab.client``), for up to
  :attr:`KubeClient.retry_for` seconds: any verb when the connection was never made
  (refused, timed out connecting: the server cannot have acted on it), a GET whatever
  broke. A write whose connection broke after it was sent may have been applied, so it
  is not sent again here: it raises :class:`ServerUnavailableError` (an
  :class:`APIError`, code 503), as does a request still failing at the end, and the
  component's work queue retries the reconcile, which reads again before it writes.
* :class:`HTTPListerWatcher` — the :class:`~control.informers.listwatch.ListerWatcher`
  over a KubeClient.
"""

from __future__ import annotations

import json
import logging
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from control.informers.backoff import Backoff
from control.informers.listwatch import Bookmark, Listing
from control.store.base import EventType, WatchEvent
from netmodel import kinds
from netmodel.errors import CompactedError, ConflictError, InvalidError, NotFoundError, SvclabError
from netmodel.kinds import KINDS, object_from_dict
from netmodel.objects import KubeObject

log = logging.getLogger("svclab.client")

#: store kind -> plural resource name in URLs (from the kind table; rebuilt in place
#: when rows are registered)
PLURALS: dict[str, str] = {}


@kinds.on_change
def _rebuild_plurals() -> None:
    PLURALS.clear()
    PLURALS.update({r.store_kind: r.plural for r in kinds.stored_rows() if r.store_kind})


_rebuild_plurals()


class APIError(SvclabError):
    """The API server refused a request; ``code`` and ``reason`` are its Status's."""

    def __init__(self, message: str, *, code: int, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class AccessError(APIError):
    """401 Unauthorized or 403 Forbidden: this identity may not do that."""


class ServerUnavailableError(APIError):
    """The API server could not be reached (see the module docstring)."""


@dataclass(frozen=True)
class Credentials:
    """Who a client is: the server URL and CA, and a client certificate (PEM) or a
    bearer token."""

    server: str
    ca_pem: bytes
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        if self.cert_pem is not None and self.key_pem is not None:
            # ssl loads a chain only from files: write them to a private temp dir
            with tempfile.TemporaryDirectory(prefix="svclab-cred-") as d:
                crt, key = Path(d) / "tls.crt", Path(d) / "tls.key"
                crt.write_bytes(self.cert_pem)
                key.touch(mode=0o600)
                key.write_bytes(self.key_pem)
                ctx.load_cert_chain(crt, key)
        return ctx


def resource_path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    """``/api/v1/namespaces/NS/pods/NAME``-style path of a kind (NAME optional)."""
    cls = KINDS.get(kind)
    plural = PLURALS.get(kind)
    if cls is None or plural is None:
        raise InvalidError(f"kind {kind!r} is not served", field="kind")
    gv = cls.API_VERSION
    base = f"/api/{gv}" if "/" not in gv else f"/apis/{gv}"
    if cls.NAMESPACED and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base


def _split(kind: str, key: str) -> tuple[str | None, str]:
    cls = KINDS[kind]
    if cls.NAMESPACED:
        ns, _, name = key.partition("/")
        return ns, name
    return None, key


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        body = resp.json()
    except ValueError:
        body = {}
    message = str(body.get("message") or resp.text.strip() or resp.reason_phrase)
    reason = str(body.get("reason") or "")
    code = resp.status_code
    if code == 404:
        raise NotFoundError(message)
    if code == 409:
        raise ConflictError(message)
    if code == 410:
        raise CompactedError(message)
    if code in (401, 403):
        raise AccessError(message, code=code, reason=reason)
    raise APIError(message, code=code, reason=reason)


def _short(e: Exception) -> str:
    text = str(e) or type(e).__name__
    return "connection refused" if "refused" in text.lower() else text.splitlines()[0][:200]


def _object(data: dict[str, Any], kind: str) -> KubeObject:
    data.setdefault("kind", kind)
    return object_from_dict(data)


class KubeClient:
    """A Kubernetes API client for svclab's kinds; see the module docstring.

    Thread-safe (httpx.Client is); one per identity. ``user_agent`` names the component
    in the server's logs."""

    #: seconds a request is retried for while the server cannot be reached
    retry_for = 120.0
    #: the back-off between those attempts: first wait (doubling, jittered), cap
    retry_backoff = (0.2, 5.0)
    #: seconds a watch may stay silent past its ``timeoutSeconds`` before it is dropped
    WATCH_SLACK = 30.0

    def __init__(
        self,
        creds: Credentials,
        *,
        user_agent: str = "svclab",
        timeout: float = 30.0,
        read_timeout: float = 60.0,
    ) -> None:
        headers = {"User-Agent": user_agent, "Accept": "application/json"}
        if creds.token:
            headers["Authorization"] = f"Bearer {creds.token}"
        self.creds = creds
        self._closed = threading.Event()
        self._http = httpx.Client(
            base_url=creds.server,
            verify=creds.ssl_context(),
            headers=headers,
            # a request's answer may take as long as kube-apiserver's request timeout
            # (60 s) allows; past that the request failed (a write: maybe applied), and
            # the caller's retry takes over instead of waiting forever with its locks
            timeout=httpx.Timeout(timeout, read=read_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
        )

    def close(self) -> None:
        """Close the connections; a request waiting to be retried gives up at once."""
        self._closed.set()
        self._http.close()

    def ready(self) -> bool:
        """Whether the server answers ``/readyz`` (False while it is not listening)."""
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
    ) -> dict[str, Any]:
        resp = self._send(method, path, params, body)
        _raise_for(resp)
        out: dict[str, Any] = resp.json()
        return out

    def _send(
        self, method: str, path: str, params: dict[str, Any] | None, body: Any
    ) -> httpx.Response:
        """One request, retried while the server cannot be reached (module docstring)."""
        delays: Backoff | None = None
        start = time.monotonic()
        while True:
            try:
                return self._http.request(method, path, params=params, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                error: httpx.TransportError = e  # never reached the server
            except httpx.TransportError as e:
                if method != "GET":  # it may have been applied: the caller re-reads
                    raise ServerUnavailableError(
                        f"{method} {path}: the connection broke ({_short(e)}); "
                        "it may have been applied",
                        code=503,
                        reason="ServiceUnavailable",
                    ) from None
                error = e
            if delays is None:
                initial, cap = self.retry_backoff
                delays = Backoff(initial, cap=cap)
            wait = delays.next()
            if self._closed.is_set() or time.monotonic() - start + wait > self.retry_for:
                raise ServerUnavailableError(
                    f"{method} {path}: the API server at {self.creds.server} did not answer "
                    f"for {time.monotonic() - start:.0f} s ({_short(error)})",
                    code=503,
                    reason="ServiceUnavailable",
                ) from None
            log.warning(
                "%s %s: %s; retrying in %.1fs (attempt %d)",
                method,
                path,
                _short(error),
                wait,
                delays.attempts,
            )
            self._closed.wait(wait)

    # ---- reads

    def get(self, kind: str, key: str) -> KubeObject:
        ns, name = _split(kind, key)
        return _object(self.request("GET", resource_path(kind, ns, name)), kind)

    def list(
        self,
        kind: str,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> Listing:
        params: dict[str, Any] = {}
        if field_selector:
            params["fieldSelector"] = field_selector
        if label_selector:
            params["labelSelector"] = label_selector
        data = self.request("GET", resource_path(kind, namespace), params=params)
        items = [_object(d, kind) for d in data.get("items") or []]
        rev = int((data.get("metadata") or {}).get("resourceVersion") or 0)
        return Listing(items, rev)

    def watch(
        self,
        kind: str,
        since: int,
        *,
        field_selector: str | None = None,
        timeout: float = 60.0,
    ) -> Iterator[WatchEvent | Bookmark]:
        params: dict[str, Any] = {
            "watch": "1",
            "resourceVersion": str(since),
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(max(1, int(timeout))),
        }
        if field_selector:
            params["fieldSelector"] = field_selector
        # the server ends the watch after timeoutSeconds, with bookmarks on the way
        limit = httpx.Timeout(self._http.timeout.connect, read=timeout + self.WATCH_SLACK)
        with self._http.stream("GET", resource_path(kind), params=params, timeout=limit) as resp:
            if resp.status_code >= 400:
                resp.read()
                _raise_for(resp)
            for line in resp.iter_lines():
                if not line.strip():
                    continue
                frame = json.loads(line)
                type_ = frame.get("type")
                obj = frame.get("object") or {}
                if type_ == "ERROR":
                    code = int(obj.get("code") or 500)
                    msg = str(obj.get("message") or "watch error")
                    if code == 410:
                        raise CompactedError(msg)
                    raise APIError(msg, code=code, reason=str(obj.get("reason") or ""))
                rv = int((obj.get("metadata") or {}).get("resourceVersion") or 0)
                if type_ == "BOOKMARK":
                    yield Bookmark(rv)
                    continue
                if type_ not in ("ADDED", "MODIFIED", "DELETED"):
                    raise APIError(f"unknown watch event type {type_!r}", code=500)
                et: EventType = type_
                yield WatchEvent(et, _object(obj, kind), rv)

    # ---- writes

    def create(self, obj: KubeObject) -> KubeObject:
        ns = obj.namespace if obj.NAMESPACED else None
        return _object(
            self.request("POST", resource_path(obj.kind, ns), body=obj.to_dict()), obj.kind
        )

    def update(self, obj: KubeObject) -> KubeObject:
        ns = obj.namespace if obj.NAMESPACED else None
        path = resource_path(obj.kind, ns, obj.name)
        return _object(self.request("PUT", path, body=obj.to_dict()), obj.kind)

    def update_status(self, obj: KubeObject) -> KubeObject:
        ns = obj.namespace if obj.NAMESPACED else None
        path = resource_path(obj.kind, ns, obj.name) + "/status"
        return _object(self.request("PUT", path, body=obj.to_dict()), obj.kind)

    def bind(
        self,
        namespace: str,
        pod: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
        *,
        uid: str | None = None,
        resource_version: int | None = None,
    ) -> None:
        """POST pods/NAME/binding (what the scheduler does); the server copies the
        Binding's annotations onto the pod, as kube-apiserver does, and checks the
        Binding's ``uid`` and ``resourceVersion`` (when given) against the pod's."""
        meta: dict[str, Any] = {"name": pod, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if resource_version:
            meta["resourceVersion"] = str(resource_version)
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.request("POST", resource_path("Pod", namespace, pod) + "/binding", body=body)

    def delete(
        self,
        kind: str,
        key: str,
        *,
        grace_period: int | None = None,
        resource_version: int | None = None,
        propagation: str | None = None,
    ) -> dict[str, Any]:
        """DELETE with DeleteOptions: ``grace_period`` (gracePeriodSeconds),
        ``resource_version`` (a precondition: 409 → ConflictError unless it matches) and
        ``propagation`` (propagationPolicy)."""
        ns, name = _split(kind, key)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        if propagation is not None:
            body["propagationPolicy"] = propagation
        if resource_version is not None:
            body["preconditions"] = {"resourceVersion": str(resource_version)}
        opts = body if len(body) > 2 else None
        return self.request("DELETE", resource_path(kind, ns, name), body=opts)


class HTTPListerWatcher:
    """The :class:`~control.informers.listwatch.ListerWatcher` over the REST API."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def list(self, kind: str, *, field_selector: str | None = None) -> Listing:
        return self.client.list(kind, field_selector=field_selector)

    def watch(
        self,
        kind: str,
        since: int,
        *,
        field_selector: str | None = None,
        timeout: float = 60.0,
    ) -> Iterator[WatchEvent | Bookmark]:
        return self.client.watch(kind, since, field_selector=field_selector, timeout=timeout)


__all__ = [
    "APIError",
    "AccessError",
    "Credentials",
    "HTTPListerWatcher",
    "KubeClient",
    "ServerUnavailableError",
    "resource_path",
]
