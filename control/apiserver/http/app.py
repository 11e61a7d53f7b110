"""The HTTP API: an ASGI application in front of svclab's apiserver pipeline.

Request path (kube-apiserver's filter chain, in order): authentication (:mod:`.authn`;
401 Status) → request info (verb, group, version, resource, namespace, name,
subresource) → authorization (system:masters, the Node authorizer, RBAC; 403 Status
with RBAC's wording) → the handler. Every write goes through
:class:`control.apiserver.APIServer` (defaulting, validation, admission, allocation),
so the HTTP API and ``svclab apply`` refuse and accept exactly the same objects; a
refused write changes nothing.

Concurrency: everything runs on the server's event loop thread, the control-plane
driver included (:mod:`.driver`), so the store is never used from two threads. After
each write the watch hub is pumped and the driver is woken.
"""

from __future__ import annotations

import builtins
import gc
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from control.apiserver.http import (
    discovery,
    ephemeralcontainers,
    metrics,
    nodeauthz,
    openapi,
    proxy,
    status,
    wire,
    wsstreams,
)
from control.apiserver.http.authn import Authenticator, Unauthorized, User
from control.apiserver.http.rbac import (
    RBAC,
    Attributes,
    aggregate,
    bootstrap_policy,
    forbidden_message,
    reconcile_bootstrap,
)
from control.apiserver.http.resources import Resource, by_path
from control.apiserver.http.status import APIError
from control.apiserver.http.watch import Hub
from control.apiserver.podruntime import PodRuntime
from netmodel.cluster import Cluster
from netmodel.errors import CompactedError, NotFoundError
from netmodel.kinds import KINDS
from netmodel.objects import KubeObject

log = logging.getLogger("svclab.apiserver")
#: modules imported for the connect handlers they register (:data:`.connect.HANDLERS`)
CONNECT_MODULES = (ephemeralcontainers, proxy)

JSON = "application/json"
VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-svclab",
    "gitCommit": "svclab",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "python",
    "compiler": "cpython",
    "platform": "linux/amd64",
}
HEALTH = ("/healthz", "/livez", "/readyz")
#: where a resource request's metric labels wait for its response (the ASGI scope)
_METRIC_KEY = "svclab.metrics"


class RequestInfo:
    __slots__ = ("group", "name", "namespace", "resource", "subresource", "verb", "version")

    def __init__(self) -> None:
        self.group = ""
        self.version = ""
        self.resource: Resource | None = None
        self.namespace = ""
        self.name = ""
        self.subresource = ""
        self.verb = ""


def _json(
    data: Any, code: int = 200, headers: dict[str, str] | None = None, ctype: str = JSON
) -> Response:
    return Response(wire.dumps(data), status_code=code, media_type=ctype, headers=headers)


def _error(e: APIError) -> Response:
    return _json(e.status(), e.code)


def _q(params: dict[str, list[str]], name: str, default: str = "") -> str:
    v = params.get(name)
    return v[0] if v else default


def _truthy(v: str) -> bool:
    return v.lower() in ("1", "true", "yes")


class API:
    """The cluster behind the HTTP API; see the module docstring. ``driver`` is the
    control-plane driver (anything with ``start()``, ``kick()`` and ``async stop()``),
    chosen by the server; the default runs the deterministic runner."""

    def __init__(
        self,
        state_dir: Path,
        authenticator: Authenticator,
        *,
        server_address: str = "127.0.0.1:6443",
        kube_proxies: bool = True,
    ) -> None:
        from control.session import Session

        self.state_dir = state_dir
        self.session = Session.open(state_dir, must_exist=False)
        self.session.with_proxies = kube_proxies
        self.auth = authenticator
        self.server_address = server_address
        #: kubelet and the container runtime for the pod subresources (exec, attach,
        #: portforward, log, proxy): set by the server; None answers them 503
        self.runtime: PodRuntime | None = None
        self.cache = wire.JSONCache()
        self.hub = Hub(self.session.store.revision)
        self.rbac = RBAC(self)
        self.driver: Any = None
        self.on_write: list[Callable[[], None]] = []
        self.requests = 0
        self.metrics = metrics.Metrics()
        self._fixed = False

    # ---- the cluster

    @property
    def store(self) -> Any:
        return self.session.store

    @property
    def fixed(self) -> bool:
        """Whether the state holds a cluster: DIR/cluster.yaml, or the Cluster record of
        a store that keeps its own (etcd, where another replica or a CLI command may
        have created it). Once it does, it always will: the answer is kept, not a file
        system call or a store read on every request."""
        if not self._fixed:
            if self.session.store_url is not None:  # etcd: the Cluster is a record in it
                self._fixed = self.session.reload_cluster()
            else:
                self._fixed = (self.state_dir / "cluster.yaml").exists()
        return self._fixed

    def list(self, kind: str, namespace: str | None = None) -> builtins.list[KubeObject]:
        return self.store.list(kind, namespace) if self.fixed else []

    def get(self, kind: str, key: str) -> KubeObject:
        return self.store.get(kind, key)

    def start(self) -> None:
        """Start the control plane when the state already holds a cluster. Then every
        stored kind is loaded (the first write of an Event would otherwise load the
        whole timeline in the middle of a request) and the objects made so far are moved
        out of the cyclic GC's sight (``gc.freeze``: a full collection would rescan
        them all, a pause of seconds with 30,000 pods)."""
        if self.fixed:
            self._started()
            from netmodel import schema

            for kind in KINDS:
                objs = self.store.list(kind)
                if objs:  # and the schema of each (field validation imports it lazily)
                    schema.prune(objs[0].to_dict())
        gc.collect()
        gc.freeze()

    def _started(self) -> None:
        t0 = time.perf_counter()
        self.session.plane  # noqa: B018 - starts the control plane (bootstraps nodes)
        # No converging here: the driver's components do it as they start (this
        # session's own kube-proxies would sync every node's rules in the serving
        # process, minutes with 1,000 nodes, for rules nobody reads).
        log.info(
            "control plane started in %.1f s (revision %d)",
            time.perf_counter() - t0,
            self.store.revision,
        )
        self._bootstrap_rbac()
        self.hub.reset(self.store.revision)
        if self.driver is not None:
            self.driver.start()

    def _bootstrap_rbac(self) -> None:
        api = self.session.plane.apiserver
        for obj in bootstrap_policy():
            try:
                have = self.store.get(obj.kind, obj.key)
            except NotFoundError:
                api.create(obj, component="apiserver")
                continue
            fixed = reconcile_bootstrap(have, obj)
            if fixed is not None:
                api.update(fixed, component="apiserver")
        self.aggregate_roles()

    def aggregate_roles(self) -> None:
        api = self.session.plane.apiserver
        for role in aggregate(self):
            api.update(
                role.with_meta(resource_version=None),
                component="clusterrole-aggregation-controller",
            )

    def fix_cluster(self, cluster: Cluster | None) -> None:
        """Fix the Cluster document (first write to a fresh state directory)."""
        from netmodel.manifests import Manifests

        self.session.apply(Manifests(cluster=cluster or Cluster()))
        self._started()

    @property
    def apiserver(self) -> Any:
        if not self.fixed:
            self.fix_cluster(None)
        return self.session.plane.apiserver

    def wrote(self) -> None:
        self.pump()
        if self.driver is not None:
            self.driver.kick()
        for fn in self.on_write:
            fn()

    def pump(self) -> None:
        store = self.store
        if store.revision == self.hub.revision:
            return
        try:
            events = store.watch(self.hub.revision)
        except CompactedError:
            self.hub.reset(store.revision)
            return
        self.hub.dispatch(events)
        self.hub.revision = store.revision

    # ---- ASGI

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] == "websocket":  # exec, attach, port-forward streams
            await wsstreams.serve(self, scope, receive, send)
            return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        t0 = time.perf_counter()
        try:
            response = await self.handle(request)
        except APIError as e:
            response = _error(e)
        except Exception as e:
            log.exception("internal error on %s %s", request.method, request.url.path)
            response = _error(APIError(500, "InternalError", f"Internal error occurred: {e}"))
        self.requests += 1
        key: metrics.RequestKey | None = request.scope.get(_METRIC_KEY)
        if key is not None and key.verb == "WATCH" and response.status_code == 200:
            await self._serve_watch(key, response, scope, receive, send, t0)
            return
        if key is not None:
            self.metrics.observe(key, response.status_code, time.perf_counter() - t0)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s %s -> %s (%.1f ms)",
                request.method,
                request.url.path,
                response.status_code,
                (time.perf_counter() - t0) * 1000,
            )
        await response(scope, receive, send)

    async def _serve_watch(
        self,
        key: metrics.RequestKey,
        response: Response,
        scope: dict[str, Any],
        receive: Any,
        send: Any,
        t0: float,
    ) -> None:
        """Stream a watch, counted as a long-running request while it lasts."""
        kind = key.resource
        res = by_path(key.group, key.version, key.resource)
        if res is not None:
            kind = res.kind
        self.metrics.watch_started(key, kind)
        try:
            await response(scope, receive, send)
        finally:
            self.metrics.watch_ended(key, kind)
            self.metrics.observe(key, response.status_code, time.perf_counter() - t0)

    def _metrics(self) -> Response:
        from control.apiserver.http.resources import RESOURCES

        counts: dict[str, int] = {}
        if self.fixed:
            pairs = [(r.qualified(), r.store_kind) for r in RESOURCES]
            counts = metrics.storage_counts(pairs, lambda k: len(self.store.list(k)))
        return Response(self.metrics.render(counts), media_type=metrics.CONTENT_TYPE)

    def user_of(self, request: Request) -> User:
        tls = request.scope.get("extensions", {}).get("tls", {})
        chain = tls.get("client_cert_chain") or []
        try:
            user = self.auth.authenticate(request.headers.get("authorization"), chain)
        except Unauthorized:
            raise status.unauthorized() from None
        if user is None:
            raise status.unauthorized()
        return self._impersonate(user, request)

    def _impersonate(self, user: User, request: Request) -> User:
        """kube-apiserver's impersonation filter: ``Impersonate-User`` and
        ``Impersonate-Group`` headers, each allowed by the ``impersonate`` verb on
        ``users`` / ``groups``."""
        as_user = request.headers.get("impersonate-user")
        groups = request.headers.getlist("impersonate-group")
        if not as_user:
            if groups:
                raise status.bad_request("requested impersonation of groups without a user")
            return user
        checks = [("users", as_user)] + [("groups", g) for g in groups]
        for resource, name in checks:
            a = Attributes(user, "impersonate", "", resource, "", "", name)
            if not self.rbac.allowed(a):
                raise APIError(
                    403,
                    "Forbidden",
                    f'{resource} "{name}" is forbidden: {forbidden_message(a)}',
                    {"name": name, "kind": resource},
                )
        from control.apiserver.http.authn import with_authenticated

        return with_authenticated(as_user, list(groups))

    async def handle(self, request: Request) -> Response:
        # the path and query as uvicorn parsed them (request.url would rebuild and
        # re-split the whole URL on every request)
        path = request.scope["path"].rstrip("/") or "/"
        user = self.user_of(request)
        params = parse_qs(request.scope["query_string"].decode(), keep_blank_values=True)
        if path in HEALTH or path.startswith(tuple(h + "/" for h in HEALTH)):
            self.authorize_path(user, request.method, path)
            return Response(b"ok", media_type="text/plain")
        if path == "/metrics":
            self.authorize_path(user, request.method, path)
            return self._metrics()
        if path == "/version":
            self.authorize_path(user, request.method, path)
            return _json(VERSION)
        if path.startswith("/openapi"):
            self.authorize_path(user, request.method, path)
            return openapi.serve(
                path,
                request.headers.get("accept", ""),
                request.headers.get("if-none-match", ""),
            )
        if path == "/api" or path == "/apis":
            self.authorize_path(user, request.method, path)
            agg = discovery.wants_aggregated(request.headers.get("accept", ""))
            if agg is not None:
                doc = discovery.aggregated(core=(path == "/api"))
                if "v2beta1" in agg:
                    doc["apiVersion"] = "apidiscovery.k8s.io/v2beta1"
                return _json(doc, ctype=agg, headers={"Vary": "Accept"})
            if path == "/api":
                return _json(discovery.api_versions(self.server_address))
            return _json(discovery.api_group_list())
        info = self.parse(path, request.method, params)
        if info is None:
            parts = path.strip("/").split("/")
            self.authorize_path(user, request.method, path)
            if parts[0] == "apis" and len(parts) == 2:
                grp = discovery.api_group(parts[1])
                if grp is not None:
                    return _json(grp)
            if (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) == 3):
                g, v = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
                rl = discovery.resource_list(g, v)
                if rl is not None:
                    return _json(rl)
            raise APIError(404, "NotFound", "the server could not find the requested resource", {})
        return await self.dispatch(request, info, user, params)

    def parse(
        self, path: str, method: str, params: dict[str, builtins.list[str]]
    ) -> RequestInfo | None:
        parts = [p for p in path.split("/") if p]
        info = RequestInfo()
        if parts and parts[0] == "api" and len(parts) >= 3:
            info.version, rest = parts[1], parts[2:]
        elif parts and parts[0] == "apis" and len(parts) >= 4:
            info.group, info.version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            info.namespace, rest = rest[1], rest[2:]
        res = by_path(info.group, info.version, rest[0])
        if res is None:
            if discovery.resource_list(info.group, info.version) is None:
                return None
            raise APIError(404, "NotFound", "the server could not find the requested resource", {})
        info.resource = res
        if len(rest) > 1:
            info.name = rest[1]
        if len(rest) > 2:
            info.subresource = "/".join(rest[2:])
        if res.name == "namespaces" and info.name:
            info.namespace = info.name
        named = bool(info.name)
        info.verb = {
            "GET": "get" if named else ("watch" if _truthy(_q(params, "watch")) else "list"),
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection",
        }.get(method, "")
        if not info.verb:
            raise status.method_not_allowed()
        return info

    # ---- authorization

    def authorize_path(self, user: User, method: str, path: str) -> None:
        verb = {"GET": "get", "HEAD": "head", "POST": "post", "PUT": "put", "DELETE": "delete"}.get(
            method, method.lower()
        )
        a = Attributes(user, verb, path=path, resource_request=False)
        if not self.rbac.allowed(a):
            raise APIError(403, "Forbidden", f"forbidden: {forbidden_message(a)}", {})

    def authorize(
        self, user: User, info: RequestInfo, params: dict[str, builtins.list[str]]
    ) -> None:
        res = info.resource
        assert res is not None
        verb = info.verb
        sub = info.subresource
        a = Attributes(
            user,
            verb,
            res.group,
            res.name,
            sub,
            info.namespace if res.namespaced or res.name == "namespaces" else "",
            info.name,
        )
        if nodeauthz.node_name(user.name, user.groups) is not None:
            fs = {k: v for k, v, eq in self._field_terms(params) if eq}
            pod_node = None
            if res.name == "pods" and info.name and res.group == "":
                try:
                    pod = self.get("Pod", f"{info.namespace}/{info.name}")
                    pod_node = pod.spec.node_name  # type: ignore[attr-defined]
                except NotFoundError:
                    pod_node = None
            if nodeauthz.allowed(a, field_selector=fs, pod_node=pod_node):
                return
        if self.rbac.allowed(a):
            return
        what = f'{res.qualified()} "{info.name}"' if info.name else res.qualified()
        raise APIError(
            403,
            "Forbidden",
            f"{what} is forbidden: {forbidden_message(a)}",
            {"name": info.name, "group": res.group, "kind": res.name}
            if info.name
            else {"group": res.group, "kind": res.name},
        )

    def _field_terms(self, params: dict[str, builtins.list[str]]) -> builtins.list[wire.FieldTerm]:
        text = _q(params, "fieldSelector")
        if not text:
            return []
        try:
            return wire.parse_field_selector(text)
        except ValueError as e:
            raise status.bad_request(str(e)) from None

    # ---- dispatch

    async def dispatch(
        self, request: Request, info: RequestInfo, user: User, params: dict[str, builtins.list[str]]
    ) -> Response:
        res = info.resource
        assert res is not None
        request.scope[_METRIC_KEY] = metrics.request_key(
            info.verb,
            res.group,
            info.version,
            res.name,
            info.subresource,
            info.namespace if res.namespaced else "",
            info.name,
            dry_run=_q(params, "dryRun") == "All",
            apply="apply-patch" in request.headers.get("content-type", ""),
        )
        self.authorize(user, info, params)
        from control.apiserver.http import handlers

        return await handlers.handle(self, request, info, user, params)


__all__ = ["API"]
