"""The resource verbs: get, list, watch, create, update, patch, delete,
deletecollection, and the subresources (status, scale, binding), for every resource of
:data:`.resources.RESOURCES`.

Contracts kept here (kube-apiserver's):

* ``list``: ``labelSelector``, ``fieldSelector``, ``limit`` + ``continue`` (a token
  naming the last key sent; the pages are read from the current state), items sorted
  by namespace/name; ``resourceVersion`` of a list is the store's revision.
* ``watch``: from ``resourceVersion`` (unset or "0": the current objects as ADDED
  first); a revision older than the store keeps gets one ERROR event with a 410
  Expired Status (client-go relists); ``allowWatchBookmarks`` sends BOOKMARK events;
  ``timeoutSeconds`` ends the stream.
* ``update`` is compare-and-swap when the body carries ``metadata.resourceVersion``
  (409 Conflict otherwise); ``patch`` reads, patches and writes compare-and-swap on
  the version it read (retried on a lost race).
* ``dryRun=All``: admitted and answered, nothing written. ``fieldValidation``:
  ``Strict`` refuses unknown fields (400), ``Warn`` drops them with a ``Warning``
  header (the default, as kube-apiserver), ``Ignore`` drops them silently.
* ``delete``: ``propagationPolicy`` Background (the garbage collector deletes the
  dependents), Foreground (the dependents are deleted first, then the owner) or
  Orphan (the dependents lose their ownerReference); ``gracePeriodSeconds=0`` removes
  a bound pod at once; ``preconditions.resourceVersion``/``uid`` are checked.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from control.apiserver import crds
from control.apiserver.http import connect, ssa, status, tables, wire
from control.apiserver.http import patch as patches
from control.apiserver.http.authn import User
from control.apiserver.http.converted import converted
from control.apiserver.http.discovery import CONNECT_SUBRESOURCES
from control.apiserver.http.evictions import handle_eviction
from control.apiserver.http.podlogs import handle_log  # noqa: F401  (registers pods/log)
from control.apiserver.http.resources import Resource
from control.apiserver.http.spdystreams import HANDLERS as SPDY_HANDLERS
from control.apiserver.http.status import APIError
from control.apiserver.http.watch import Watcher
from control.apiserver.strategy import strategy_of
from control.store.base import WatchEvent, encoded
from netmodel import schema
from netmodel.cluster import cluster_from_dict
from netmodel.errors import (
    CompactedError,
    ConflictError,
    InputError,
    NotFoundError,
    SvclabError,
)
from netmodel.kinds import object_from_dict, stored_rows
from netmodel.objects import EndpointSlice, KubeObject, ObjectMeta, Service
from netmodel.selectors import parse_selector

if TYPE_CHECKING:
    from control.apiserver.http.app import API, RequestInfo

JSON = "application/json"
connect.HANDLERS.update(SPDY_HANDLERS)  # pods/exec, attach, portforward over SPDY
#: the field selector that names a pod's node (the watch hub indexes pods by it)
NODE_NAME = "spec.nodeName"
TABLE_MARK = "as=Table"
BOOKMARK_EVERY = 5.0
#: revisions a watch from a resourceVersion looks back for the states of objects
#: changed since then (older states: the nearest later one stands in)
LOOKBACK = 2000


def _q(params: dict[str, list[str]], name: str, default: str = "") -> str:
    v = params.get(name)
    return v[0] if v else default


def respond(data: Any, code: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = data if isinstance(data, bytes) else wire.dumps(data)
    return Response(body, status_code=code, media_type=JSON, headers=headers)


def _key(res: Resource, namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if res.namespaced else name


def _wants_table(request: Request) -> bool:
    return TABLE_MARK in request.headers.get("accept", "")


# --------------------------------------------------------------------------- wire forms


def to_wire(api: API, res: Resource, obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    form = converted(res)
    if form is not None:
        return form.encode(res, obj)
    return obj.to_dict()


def to_bytes(api: API, res: Resource, obj: Any) -> bytes:
    if isinstance(obj, KubeObject) and converted(res) is None:
        return api.cache.encode(obj)
    return wire.dumps(to_wire(api, res, obj))


def _written(
    api: API, res: Resource, stored: Any, dry: bool, code: int, warnings: list[str]
) -> Response:
    """The answer to a create, update or patch: the stored object (a dry run's result is
    encoded afresh, as it never reaches the cache) with any field warnings as headers."""
    data = to_bytes(api, res, stored) if not dry else wire.dumps(to_wire(api, res, stored))
    return respond(data, code, warn_headers(warnings))


def _meta(d: dict[str, Any]) -> dict[str, Any]:
    return d.get("metadata", {})


# --------------------------------------------------------------------------- entry


async def handle(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    res = info.resource
    assert res is not None
    verb, sub = info.verb, info.subresource
    head = sub.split("/", 1)[0]
    if sub and head not in res.subresources:
        raise APIError(404, "NotFound", "the server could not find the requested resource", {})
    if (res.name, head) in CONNECT_SUBRESOURCES and not res.group:
        handler = connect.HANDLERS.get((res.name, head))
        if handler is None:
            raise APIError(404, "NotFound", "the server could not find the requested resource", {})
        return await handler(api, request, info, user, params)
    if sub and sub != head:
        raise APIError(404, "NotFound", "the server could not find the requested resource", {})
    if verb not in res.verbs and not sub:
        raise status.method_not_allowed()
    if sub == "eviction":
        return await handle_eviction(api, request, info, user, params)
    computed = _COMPUTED.get((res.group, res.name))
    if computed is not None:
        return await computed(api, request, info, user, params)
    if verb == "get":
        if sub == "scale":
            return respond(_scale_of(res, get_object(api, res, info.namespace, info.name)))
        obj = get_object(api, res, info.namespace, info.name)
        if _wants_table(request):
            return respond(_table(api, res, [obj], str(obj.resource_version)))
        return respond(to_bytes(api, res, obj))
    if verb == "list":
        return _list(api, request, res, info.namespace, params)
    if verb == "watch":
        return _watch(api, request, res, info.namespace, params)
    s = _Scope(api, request, res, info, user, params, _q(params, "dryRun") == "All")
    if verb == "create":
        return await (_bind(s) if sub == "binding" else _create(s))
    write = _WRITES.get(verb)
    if write is None:
        raise status.method_not_allowed()
    return await write(s)


# --------------------------------------------------------------------------- reads


def get_object(api: API, res: Resource, namespace: str, name: str) -> KubeObject:
    assert res.store_kind is not None
    if not api.fixed:
        raise status.not_found(res, name)
    try:
        return api.get(res.store_kind, _key(res, namespace, name))
    except NotFoundError:
        raise status.not_found(res, name) from None


def _selectors(
    api: API, res: Resource, params: dict[str, list[str]]
) -> tuple[Any, list[tuple[Any, str, bool]], str | None]:
    """(label selector or None, [(getter, value, equal)], spec.nodeName / name value)."""
    sel = None
    text = _q(params, "labelSelector")
    if text:
        try:
            sel = parse_selector(text)
        except ValueError as e:
            raise status.bad_request(f"unable to parse requirement: {e}") from None
    terms = []
    node = None
    ftext = _q(params, "fieldSelector")
    if ftext:
        try:
            parsed = wire.parse_field_selector(ftext)
        except ValueError as e:
            raise status.bad_request(str(e)) from None
        for field, value, eq in parsed:
            getter = wire.field_getter(res.store_kind or res.kind, field)
            if getter is None:
                raise status.bad_request(f"field label not supported: {field}")
            terms.append((getter, value, eq))
            if eq and field == strategy_of(res.store_kind).node_field:
                node = value
    return sel, terms, node


def _matcher(sel: Any, terms: list[tuple[Any, str, bool]]) -> Any:
    def matches(o: KubeObject) -> bool:
        if sel is not None and not sel.matches(o.labels):
            return False
        return all((getter(o) == value) == eq for getter, value, eq in terms)

    return matches


def _list_kind(res: Resource) -> str:
    return res.kind + "List"


def _list(
    api: API, request: Request, res: Resource, namespace: str, params: dict[str, list[str]]
) -> Response:
    assert res.store_kind is not None
    sel, terms, node = _selectors(api, res, params)
    named = _named(api, res, node)
    if named is not None:
        objs = named
    elif res.namespaced and namespace:
        objs = api.list(res.store_kind, namespace)
    else:
        objs = api.list(res.store_kind)
    if sel is not None or terms:
        m = _matcher(sel, terms)
        objs = [o for o in objs if m(o)]
    rv = api.store.revision if api.fixed else 0
    limit = int(_q(params, "limit", "0") or 0)
    token = _q(params, "continue")
    cont = None
    remaining = None
    if token:
        from control.apiserver.http.wire import parse_continue

        _, start = parse_continue(token)
        keys = [o.key for o in objs]
        import bisect

        objs = objs[bisect.bisect_right(keys, start) :]
    if limit > 0 and len(objs) > limit:
        from control.apiserver.http.wire import continue_token

        remaining = len(objs) - limit
        objs = objs[:limit]
        cont = continue_token(rv, objs[-1].key)
    if _wants_table(request):
        if _q(params, "includeObject", "Metadata") == "Metadata" and converted(res) is None:
            return _table_bytes(api, res, objs, str(rv), cont)
        return respond(_table(api, res, objs, str(rv), cont, params=params))
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
        meta["remainingItemCount"] = remaining
    head = wire.dumps({"kind": _list_kind(res), "apiVersion": res.api_version, "metadata": meta})
    if converted(res) is None:  # stored objects: their cached JSON
        encode = api.cache.encode
        items = [encode(o) for o in objs]
    else:
        items = [to_bytes(api, res, o) for o in objs]
    return _pieces(head[:-1] + b',"items":[', items, b"]}")


#: list items (or Table rows) per piece of a streamed LIST body (a few MB of pods)
LIST_PIECE = 512


def _pieces(start: bytes, items: list[bytes], end: bytes) -> Response:
    """``start`` + the items joined by commas + ``end``, as one response with its
    Content-Length. A long list is sent in pieces of :data:`LIST_PIECE` items as the
    connection takes them (TLS and the socket are fed while the client reads, other
    requests are served between pieces, and no copy of the whole body is ever made:
    30,000 pods are 110 MB)."""
    if len(items) <= LIST_PIECE:
        return respond(start + b",".join(items) + end)
    size = len(start) + sum(map(len, items)) + len(items) - 1 + len(end)

    async def body() -> AsyncIterator[bytes]:
        yield start + b",".join(items[:LIST_PIECE])
        for i in range(LIST_PIECE, len(items), LIST_PIECE):
            yield b",".join([b"", *items[i : i + LIST_PIECE]])
        yield end

    return StreamingResponse(body(), media_type=JSON, headers={"Content-Length": str(size)})


def _row_object(api: API, res: Resource, obj: Any, include: str) -> dict[str, Any]:
    if include == "None":
        return {}
    stored_form = isinstance(obj, KubeObject) and converted(res) is None
    d = None if stored_form else to_wire(api, res, obj)
    if include == "Object":
        return d if d is not None else json.loads(api.cache.encode(obj))
    meta = _meta(d) if d is not None else obj.metadata.to_dict()
    return tables.partial_metadata(res, meta)


def _table(
    api: API,
    res: Resource,
    objs: list[Any],
    rv: str,
    cont: str | None = None,
    *,
    params: dict[str, list[str]] | None = None,
    with_columns: bool = True,
) -> dict[str, Any]:
    include = _q(params or {}, "includeObject", "Metadata")
    now = time.time()
    strategy = strategy_of(res.store_kind)
    rows = []
    for o in objs:
        cells = strategy.table_row(res, o, now)
        rows.append((cells, _row_object(api, res, o, include)))
    t = tables.table(res, rows, resource_version=rv, continue_token=cont, with_columns=False)
    if with_columns:
        t["columnDefinitions"] = strategy.table_columns(res)
    return t


def _table_bytes(
    api: API, res: Resource, objs: list[KubeObject], rv: str, cont: str | None
) -> Response:
    """:func:`_table` for stored objects with row metadata, written from the cached rows
    (a LIST of every pod as a Table), in pieces as :func:`_pieces` sends them."""
    head = wire.dumps(tables.table(res, [], resource_version=rv, continue_token=cont))
    now = time.time()
    ages: dict[str, bytes] = {}
    row = api.cache.table_row
    rows = [row(res, o, now, ages) for o in objs]
    assert head.endswith(b'"rows":[]}')
    return _pieces(head[: -len(b"]}")], rows, b"]}")


# --------------------------------------------------------------------------- watch


class _TableEvents:
    """A watch's events as Tables (``as=Table``), as kube-apiserver sends them: the first
    event's Table carries the column definitions, the later ones rows only."""

    def __init__(self, api: API, res: Resource, params: dict[str, list[str]]) -> None:
        self.api, self.res, self.params = api, res, params
        self.sent_columns = False

    def event(self, typ: str, obj: Any, rv: str) -> bytes:
        """One watch event line: ``obj`` (at ``rv``) as a one-row Table."""
        t = _table(
            self.api, self.res, [obj], rv, params=self.params, with_columns=not self.sent_columns
        )
        self.sent_columns = True
        return wire.dumps({"type": typ, "object": t}) + b"\n"


def _watch(
    api: API, request: Request, res: Resource, namespace: str, params: dict[str, list[str]]
) -> Response:
    assert res.store_kind is not None
    sel, terms, node = _selectors(api, res, params)
    matches = _matcher(sel, terms)
    table = _wants_table(request)
    _q(params, "includeObject", "Metadata")
    bookmarks = _q(params, "allowWatchBookmarks") in ("true", "1")
    timeout = float(_q(params, "timeoutSeconds", "0") or 0) or 1800.0
    rv_text = _q(params, "resourceVersion")
    as_table = _TableEvents(api, res, params)

    def encode(w: Watcher, typ: str, obj: Any) -> bytes:
        if table:
            return as_table.event(typ, obj, str(getattr(obj, "resource_version", "")))
        return b'{"type":"' + typ.encode() + b'","object":' + to_bytes(api, res, obj) + b"}\n"

    w = Watcher(
        res,
        namespace if res.namespaced else "",
        matches,
        encode,
        node=node,
        kinds=(res.store_kind,),
    )
    initial: list[bytes] = []
    store = api.store
    if rv_text in ("", "0") or not api.fixed:
        objs = _candidates(api, res, namespace, node)
        for o in objs:
            if matches(o):
                w.matched.add(o.key)
                initial.append(encode(w, "ADDED", o))
        api.hub.add(w)
    else:
        try:
            since = int(rv_text)
        except ValueError:
            raise status.bad_request(f'invalid resource version: "{rv_text}"') from None
        try:
            events = store.watch(since, (res.store_kind,)) if since < api.hub.revision else []
            if since < store.compacted_revision:
                raise CompactedError("compacted")
        except CompactedError:
            err = status.gone(f"too old resource version: {since} ({store.compacted_revision + 1})")
            line = wire.dumps({"type": "ERROR", "object": err.status()}) + b"\n"
            return Response(line, media_type=JSON)
        w.matched = _matched_at(api, res, namespace, since, events, matches, node)
        from control.apiserver.http.watch import deliver

        for ev in events:
            if ev.revision <= api.hub.revision:
                deliver(w, ev)
        api.hub.add(w)
    return _stream(api, w, initial, timeout, bookmarks, res)


def _candidates(api: API, res: Resource, namespace: str, node: str | None) -> list[KubeObject]:
    """The objects a watcher's selectors are tried on: a pod watcher with
    ``spec.nodeName=X`` (a kubelet) gets only the pods bound to X (the hub's index)."""
    assert res.store_kind is not None
    if node is not None and api.fixed and strategy_of(res.store_kind).node_field == NODE_NAME:
        kind = res.store_kind  # pods: the hub indexes them by spec.nodeName
        out = []
        for key in sorted(api.hub.pods_on(node, lambda: api.list(kind))):
            try:
                out.append(api.get(kind, key))
            except NotFoundError:
                continue
        return [o for o in out if not namespace or o.namespace == namespace]
    named = _named(api, res, node)
    if named is not None:
        return named
    if res.namespaced:
        return api.list(res.store_kind, namespace or None)
    return api.list(res.store_kind)


def _named(api: API, res: Resource, node: str | None) -> list[KubeObject] | None:
    """A Node selected by ``metadata.name=X`` (a kubelet's, a kube-proxy's informer):
    that Node alone, read by its key, instead of every Node tried on the selector
    (5,000 nodes each listing and watching their own made that O(nodes²), the server's
    top cost at the envelope). None when the selector names no such Node."""
    assert res.store_kind is not None
    if node is None or res.namespaced or strategy_of(res.store_kind).node_field != "metadata.name":
        return None
    try:
        return [api.get(res.store_kind, node)]
    except NotFoundError:
        return []


def _matched_at(
    api: API,
    res: Resource,
    namespace: str,
    since: int,
    events: list[WatchEvent],
    matches: Any,
    node: str | None = None,
) -> set[str]:
    """The keys that matched the watcher's selectors at revision ``since``: the current
    matches, with each object changed since then taken as it was at ``since`` (its last
    change at or before ``since`` within :data:`LOOKBACK` revisions), so that a change
    in or out of the selectors is sent as ADDED / DELETED."""
    assert res.store_kind is not None
    objs = _candidates(api, res, namespace, node)
    touched: dict[str, WatchEvent] = {}
    for ev in events:
        touched.setdefault(ev.object.key, ev)
    out = {o.key for o in objs if o.key not in touched and matches(o)}
    if not touched:
        return out
    before: dict[str, WatchEvent] = {}
    # look back a bounded window only: a watch start must not read the whole log
    start = max(api.store.compacted_revision, since - LOOKBACK)
    for ev in api.store.watch(start, (res.store_kind,)):
        if ev.revision > since:
            break
        if ev.object.key in touched:
            before[ev.object.key] = ev
    for key, first in touched.items():
        prev = before.get(key)
        if prev is not None:
            if prev.type != "DELETED" and matches(prev.object):
                out.add(key)
        elif first.type != "ADDED" and matches(first.object):
            out.add(key)  # its earlier states are compacted away: the nearest one
    return out


def _stream(
    api: API, w: Watcher, initial: list[bytes], timeout: float, bookmarks: bool, res: Resource
) -> Response:
    async def body() -> AsyncIterator[bytes]:
        try:
            if initial:
                yield b"".join(initial)
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                try:
                    item = await asyncio.wait_for(w.queue.get(), min(left, BOOKMARK_EVERY))
                except TimeoutError:
                    if bookmarks:
                        bm = {
                            "kind": res.kind,
                            "apiVersion": res.api_version,
                            "metadata": {"resourceVersion": str(api.hub.revision)},
                        }
                        yield wire.dumps({"type": "BOOKMARK", "object": bm}) + b"\n"
                    continue
                if item is None:
                    return
                chunk = [item]
                while not w.queue.empty():
                    nxt = w.queue.get_nowait()
                    if nxt is None:
                        yield b"".join(chunk)
                        return
                    chunk.append(nxt)
                yield b"".join(chunk)
        finally:
            api.hub.remove(w)

    return StreamingResponse(body(), media_type=JSON, headers={"Transfer-Encoding": "chunked"})


# --------------------------------------------------------------------------- writes


def _decode(raw: bytes, ctype: str) -> Any:
    from control.apiserver.http.wire import decode_body

    return decode_body(raw, ctype)


def validate_fields(
    res: Resource, body: dict[str, Any], params: dict[str, list[str]]
) -> tuple[dict[str, Any], list[str]]:
    """fieldValidation: returns (body to use, warnings)."""
    mode = _q(params, "fieldValidation", "Warn") or "Warn"
    if mode not in ("Strict", "Warn", "Ignore"):
        raise status.bad_request(
            f'fieldValidation must be one of "Ignore", "Warn", or "Strict", got "{mode}"'
        )
    if res.store_kind is None or (converted(res) is not None and not res.crd):
        return body, []  # (a CRD's versions are checked by the schema of each)
    pruned, unknown = schema.prune(body)
    if not unknown:
        return body, []
    if mode == "Strict":
        listed = ", ".join(f'unknown field "{u}"' for u in unknown)
        raise status.bad_request(
            f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
            f"strict decoding error: {listed}"
        )
    if mode == "Warn":
        return pruned, [f'unknown field "{u}"' for u in unknown]
    return pruned, []


def warn_headers(warnings: list[str]) -> dict[str, str] | None:
    """``Warning: 299 - "text"`` (RFC 7234 quoted-string, as kube-apiserver sends)."""
    if not warnings:
        return None

    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return {"Warning": ", ".join(f"299 - {quoted(w)}" for w in warnings)}


def check_gvk(res: Resource, body: Any) -> None:
    if not isinstance(body, dict):
        raise status.bad_request("the object must be a JSON object")
    api_version = body.get("apiVersion")
    kind = body.get("kind")
    if kind and kind != res.kind:
        raise status.bad_request(
            f"the object provided is unrecognized (kind {kind} in a {res.name} request)"
        )
    if api_version and api_version != res.api_version:
        raise status.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version ({res.api_version})"
        )
    body.setdefault("apiVersion", res.api_version)
    body.setdefault("kind", res.kind)


def to_object(res: Resource, body: dict[str, Any]) -> KubeObject:
    form = converted(res)
    d = form.decode(res, body) if form is not None else body
    try:
        return object_from_dict(d)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        name = (_meta(body) or {}).get("name", "")
        raise status.invalid(res, res.kind, name, loc, f"Invalid value: {err['msg']}") from None
    except KeyError as e:
        raise status.bad_request(str(e)) from None


def _namespace_must_exist(api: API, res: Resource, namespace: str) -> None:
    if not res.namespaced or not namespace:
        return
    if not api.fixed and namespace in ("default", "kube-system", "svclab-system"):
        return
    try:
        api.get("Namespace", namespace)
    except NotFoundError:
        from control.apiserver.http.resources import by_path

        ns_res = by_path("", "v1", "namespaces")
        assert ns_res is not None
        raise status.not_found(ns_res, namespace) from None


@dataclass(frozen=True, slots=True)
class _Scope:
    """One write request as the write verbs see it (kube-apiserver's RequestScope): the
    API, the HTTP request, its resource and path (``info``), the caller, the query
    parameters, and whether it is a dry run (``dryRun=All``)."""

    api: API
    request: Request
    res: Resource
    info: RequestInfo
    user: User
    params: dict[str, list[str]]
    dry: bool

    @property
    def component(self) -> str:
        """Who writes, as Events and managedFields name it: ``fieldManager``, else the user."""
        return _q(self.params, "fieldManager") or self.user.name


async def _body(request: Request) -> Any:
    """The request's body, decoded as its Content-Type says (JSON by default)."""
    return _decode(await request.body(), request.headers.get("content-type", JSON))


def _name_as_url(s: _Scope, meta: dict[str, Any]) -> None:
    """Name ``meta`` (a body's metadata) as the URL names the object."""
    meta["name"] = s.info.name
    if s.res.namespaced:
        meta["namespace"] = s.info.namespace


def _named_by_url(s: _Scope, meta: dict[str, Any]) -> None:
    """:func:`_name_as_url`, after refusing (400) a body that names another object."""
    if meta.get("name") and meta["name"] != s.info.name:
        raise status.bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({s.info.name})"
        )
    _name_as_url(s, meta)


async def _create(s: _Scope) -> Response:
    namespace = s.info.namespace
    body = await _body(s.request)
    check_gvk(s.res, body)
    meta = body.setdefault("metadata", {}) if isinstance(body.get("metadata", {}), dict) else None
    if meta is None:
        raise status.bad_request("metadata must be an object")
    if s.res.namespaced:
        if meta.get("namespace") and namespace and meta["namespace"] != namespace:
            raise status.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if namespace:
            meta["namespace"] = namespace
        namespace = meta.get("namespace") or "default"
        meta["namespace"] = namespace
    body, warnings = validate_fields(s.res, body, s.params)
    name = meta.get("name") or meta.get("generateName") or ""
    _namespace_must_exist(s.api, s.res, namespace)
    manager = ssa.manager_for(s.params, s.request, "create")
    body = ssa.record_update(body, None, manager, s.res.api_version)
    form = converted(s.res)
    if form is not None:
        body = form.on_create(body, s.api.store.revision)
    obj = to_object(s.res, body)
    apiserver = s.api.apiserver
    try:
        stored = apiserver.create(obj, component=s.component, dry_run=s.dry)
    except SvclabError as e:
        raise status.from_svclab(e, s.res, s.res.kind, name, creating=True) from None
    if not s.dry:
        _after_write(s.api, s.res, stored)
    return _written(s.api, s.res, stored, s.dry, 201, warnings)


def _after_write(api: API, res: Resource, obj: KubeObject | None) -> None:
    if obj is not None and converted(res) is None:
        # the response and the watchers send the JSON the store has just written
        text = encoded(api.store, obj)
        if text is not None:
            api.cache.prime(obj, text.encode())
    hook = _AFTER_WRITE.get(res.store_kind or "")
    if hook is not None:
        hook(api)
    api.wrote()


def _aggregate_roles(api: API) -> None:
    api.aggregate_roles()


#: store kind -> what follows every write of it (the clusterrole aggregation controller)
_AFTER_WRITE: dict[str, Callable[[API], None]] = {"ClusterRole": _aggregate_roles}


def _finalize_namespace(s: _Scope) -> Response:
    """PUT namespaces/NAME/finalize: the namespace controller's last step (the namespace
    is removed once Terminating and empty; a refusal is a metav1.Status)."""
    try:
        last = s.api.apiserver.finalize_namespace(s.info.name, component=s.user.name)
    except SvclabError as e:
        raise status.from_svclab(e, s.res, "Namespace", s.info.name) from None
    if last is None:
        raise status.from_svclab(
            NotFoundError(f'namespaces "{s.info.name}" not found'), s.res, "Namespace", s.info.name
        )
    s.api.cache.forget(last.store_kind, last.key)
    s.api.wrote()
    return respond(to_bytes(s.api, s.res, last))


async def _update(s: _Scope) -> Response:
    body = await _body(s.request)
    sub = s.info.subresource
    if sub == "finalize" and not s.dry:  # namespaces/NAME/finalize (the only one)
        return _finalize_namespace(s)
    if sub == "scale":
        current = get_object(s.api, s.res, s.info.namespace, s.info.name)
        replicas = ((body or {}).get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            raise status.invalid(s.res, "Scale", s.info.name, "spec.replicas", "Required value")
        rv = ((body or {}).get("metadata") or {}).get("resourceVersion")
        d = current.to_dict()
        if s.res.crd:
            crds.set_replicas(current, d, replicas)
        else:
            d["spec"]["replicas"] = replicas
        if rv:
            d["metadata"]["resourceVersion"] = rv
        stored = write_update(s, s.info.name, d, current)
        return respond(_scale_of(s.res, stored))
    check_gvk(s.res, body)
    meta = body.get("metadata") or {}
    _named_by_url(s, meta)
    body["metadata"] = meta
    body, warnings = validate_fields(s.res, body, s.params)
    current = get_object(s.api, s.res, s.info.namespace, s.info.name)
    stored = write_update(s, s.info.name, body, current, status_only=(sub == "status"))
    return _written(s.api, s.res, stored, s.dry, 200, warnings)


def write_update(
    s: _Scope,
    name: str,
    body: dict[str, Any],
    current: KubeObject,
    *,
    status_only: bool = False,
    operation: str = "update",
    before: dict[str, Any] | None = None,
) -> KubeObject:
    """``before``: ``current.to_dict()`` when the caller has it already (a patch)."""
    if operation != "apply" and not status_only:
        manager = ssa.manager_for(s.params, s.request, operation)
        if before is None:
            before = current.to_dict()
        body = ssa.record_update(body, before, manager, s.res.api_version)
    obj = _metadata_only(s.res, body, before, current) if before is not None else None
    if obj is None:
        obj = to_object(s.res, body)
    apiserver = s.api.apiserver
    try:
        if status_only:
            if s.dry:
                stored = current.evolve(status=obj.status)  # type: ignore[attr-defined]
            else:
                stored = apiserver.update_status(obj, component=s.component)
        else:
            stored = apiserver.update(obj, component=s.component, dry_run=s.dry)
    except SvclabError as e:
        raise status.from_svclab(e, s.res, s.res.kind, name) from None
    if not s.dry:
        _after_write(s.api, s.res, stored)
    return stored


def _metadata_only(
    res: Resource, body: dict[str, Any], before: dict[str, Any], current: KubeObject
) -> KubeObject | None:
    """The object ``body`` describes, built from ``current`` when ``body`` differs from
    ``before`` (``current.to_dict()``) in ``metadata`` only: only the metadata is
    validated again, and the rest of ``current`` (spec, status, unmodelled fields) is
    shared, as validating its own JSON form again gives it back. An annotation or label
    patch of a pod validated the whole pod. None when anything else differs, for an
    Event (its wire form is converted), or when the metadata is refused: then
    :func:`to_object` builds (and reports) it as for any other body."""
    if converted(res) is not None or body.keys() != before.keys():
        return None
    for k, v in body.items():
        if k != "metadata" and v != before[k]:
            return None
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        return None
    try:
        return current.evolve(metadata=ObjectMeta.model_validate(meta))
    except ValidationError:
        return None


async def _patch(s: _Scope) -> Response:
    ctype = s.request.headers.get("content-type", "").split(";")[0].strip()
    raw = await s.request.body()
    body = _decode(raw, "yaml" if ctype == patches.APPLY_YAML else JSON)
    sub = s.info.subresource
    if ctype == patches.APPLY_YAML:
        if sub:
            raise status.method_not_allowed("server-side apply of a subresource is not supported")
        return await _server_side_apply(s, body)
    for _attempt in range(5):
        try:
            current = get_object(s.api, s.res, s.info.namespace, s.info.name)
        except APIError:
            raise
        cur = _scale_of(s.res, current) if sub == "scale" else current.to_dict()
        try:
            if ctype == patches.JSON_PATCH:
                new = patches.json_patch(cur, body)
            elif ctype == patches.MERGE_PATCH:
                new = patches.merge_patch(cur, body)
            elif ctype == patches.STRATEGIC:
                if s.res.group == "svclab.dev" or s.res.crd:  # custom resources too
                    raise status.APIError(
                        415,
                        "UnsupportedMediaType",
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    )
                new = patches.strategic_merge(cur, body, s.res.kind)
            else:
                raise APIError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json",
                )
        except patches.PatchError as e:
            raise APIError(422, "Invalid", str(e), {}) from None
        if not isinstance(new, dict):
            raise status.bad_request("the patch produced something that is not an object")
        if sub == "scale":
            d = current.to_dict()
            if s.res.crd:
                crds.set_replicas(current, d, (new.get("spec") or {}).get("replicas"))
            else:
                d["spec"]["replicas"] = (new.get("spec") or {}).get("replicas")
            d["metadata"]["resourceVersion"] = current.metadata.resource_version
            try:
                stored = write_update(s, s.info.name, d, current)
            except APIError as e:
                if e.reason == "Conflict":
                    continue
                raise
            return respond(_scale_of(s.res, stored))
        patched_rv = _meta(body).get("resourceVersion") if isinstance(body, dict) else None
        meta = new.setdefault("metadata", {})
        _name_as_url(s, meta)
        if not patched_rv:
            meta["resourceVersion"] = current.metadata.resource_version
        if ctype in (patches.MERGE_PATCH, patches.STRATEGIC) and isinstance(body, dict):
            # the stored object was validated: only what the patch brings can be unknown
            # (the whole result is pruned only when it does)
            probe = {
                **patches.strip_directives(body),
                "apiVersion": s.res.api_version,
                "kind": s.res.kind,
            }
            warnings: list[str] = []
            if validate_fields(s.res, probe, s.params)[1]:
                new, warnings = validate_fields(s.res, new, s.params)
        else:
            new, warnings = validate_fields(s.res, new, s.params)
        try:
            stored = write_update(
                s,
                s.info.name,
                new,
                current,
                status_only=(sub == "status"),
                operation="patch",
                before=cur,
            )
        except APIError as e:
            if e.reason == "Conflict" and not patched_rv:
                continue
            raise
        return _written(s.api, s.res, stored, s.dry, 200, warnings)
    raise status.conflict(s.res, s.info.name, status.STALE)


async def _server_side_apply(s: _Scope, cfg: Any) -> Response:
    """PATCH with ``application/apply-patch+yaml``: create or update ``s.info.name`` as
    :func:`.ssa.apply_configuration` merges ``cfg`` into it."""
    manager = (s.params.get("fieldManager") or [""])[0]
    if not manager:
        raise APIError(
            400,
            "BadRequest",
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
            {},
        )
    force = (s.params.get("force") or [""])[0] in ("true", "1")
    if not isinstance(cfg, dict):
        raise status.bad_request("the applied configuration must be an object")
    check_gvk(s.res, cfg)
    _named_by_url(s, cfg.setdefault("metadata", {}))
    cfg, warnings = validate_fields(s.res, cfg, s.params)
    try:
        current_obj: KubeObject | None = get_object(s.api, s.res, s.info.namespace, s.info.name)
    except APIError as err:
        if err.code != 404:
            raise
        current_obj = None
    current = (
        current_obj.to_dict()
        if current_obj is not None
        else {"apiVersion": s.res.api_version, "kind": s.res.kind, "metadata": {}}
    )
    new = ssa.apply_configuration(current, cfg, manager, force=force, api_version=s.res.api_version)
    if current_obj is None:
        new["metadata"].pop("resourceVersion", None)
        obj = to_object(s.res, new)
        try:
            stored = s.api.apiserver.create(obj, component=s.user.name, dry_run=s.dry)
        except SvclabError as e:
            raise status.from_svclab(e, s.res, s.res.kind, s.info.name, creating=True) from None
        if not s.dry:
            s.api.wrote()
        return respond(to_wire(s.api, s.res, stored), 201, warn_headers(warnings))
    new["metadata"]["resourceVersion"] = current_obj.metadata.resource_version
    stored = write_update(s, s.info.name, new, current_obj, operation="apply")
    return respond(to_wire(s.api, s.res, stored), 200, warn_headers(warnings))


def _scale_of(res: Resource, obj: KubeObject) -> dict[str, Any]:
    if res.crd:  # through its CRD's specReplicasPath & co
        return crds.scale_of(obj)
    spec = obj.spec  # type: ignore[attr-defined]
    st = obj.status  # type: ignore[attr-defined]
    sel = spec.selector
    labels = sel if isinstance(sel, dict) else sel.match_labels  # (RC: a plain label map)
    text = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj.name,
            "namespace": obj.namespace,
            "uid": obj.metadata.uid,
            "resourceVersion": obj.metadata.resource_version,
            "creationTimestamp": obj.metadata.creation_timestamp,
        },
        "spec": {"replicas": spec.replicas if spec.replicas is not None else 1},
        "status": {"replicas": st.replicas or 0, "selector": text},
    }


async def _bind(s: _Scope) -> Response:
    body = await _body(s.request) or {}
    target = body.get("target") or {}
    node = target.get("name")
    if not node:
        raise status.invalid(s.res, "Binding", s.info.name, "target.name", "Required value")
    meta = body.get("metadata") or {}
    extra = meta.get("annotations") or {}
    annotations = {str(k): str(v) for k, v in extra.items()} if isinstance(extra, dict) else {}
    rv = meta.get("resourceVersion")
    try:
        version = int(rv) if rv else None
    except ValueError:
        raise status.bad_request(f"invalid resourceVersion {rv!r}") from None
    get_object(s.api, s.res, s.info.namespace, s.info.name)  # 404 before anything else
    try:  # kube-apiserver's BindingREST: nodeName, the annotations, PodScheduled
        s.api.apiserver.bind(
            _key(s.res, s.info.namespace, s.info.name),
            str(node),
            annotations,
            uid=meta.get("uid") or None,
            resource_version=version,
            component=s.user.name,
            dry_run=s.dry,
        )
    except ConflictError as e:
        raise status.conflict(s.res, s.info.name, str(e)) from None
    except SvclabError as e:
        raise status.from_svclab(e, s.res, "Pod", s.info.name) from None
    if not s.dry:
        s.api.wrote()
    return respond(status.success(), 201)


# --------------------------------------------------------------------------- delete


def _dependents(api: API, owner: KubeObject) -> list[KubeObject]:
    """The objects of every stored kind that name ``owner`` among their owners (in its
    namespace, for a namespaced owner: a namespaced object has no cluster-scoped
    dependents)."""
    out = []
    uid = owner.metadata.uid
    for r in stored_rows():
        if r.store_kind is None or (owner.namespace and not r.namespaced):
            continue
        for o in api.list(r.store_kind, owner.namespace or None):
            if any(ref.uid == uid for ref in o.metadata.owner_references):
                out.append(o)
    return out


def _delete_one(s: _Scope, obj: KubeObject, options: dict[str, Any]) -> KubeObject | None:
    """Delete ``obj`` with ``options`` (DeleteOptions); returns the object if it still
    exists (marked for graceful deletion), else None."""
    pre = options.get("preconditions") or {}
    if pre.get("resourceVersion") and pre["resourceVersion"] != obj.metadata.resource_version:
        raise status.conflict(
            s.res,
            obj.name,
            f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not match the ResourceVersion in record ({obj.metadata.resource_version}). The object might have been modified",
        )
    if pre.get("uid") and pre["uid"] != obj.metadata.uid:
        raise status.conflict(
            s.res,
            obj.name,
            f"the UID in the precondition ({pre['uid']}) does not match the UID in record ({obj.metadata.uid}). The object might have been deleted and then recreated",
        )
    if s.dry:
        return obj
    policy = options.get("propagationPolicy")
    if options.get("orphanDependents") is True:
        policy = "Orphan"
    apiserver = s.api.apiserver
    comp = s.user.name
    if policy == "Orphan":
        for dep in _dependents(s.api, obj):
            refs = [r for r in dep.metadata.owner_references if r.uid != obj.metadata.uid]
            apiserver.update(
                dep.with_meta(owner_references=refs, resource_version=None),
                component="garbage-collector",
            )
    force = options.get("gracePeriodSeconds") == 0
    try:
        last = apiserver.delete(
            obj.store_kind,
            obj.key,
            component=comp,
            force=force,
            propagation="Foreground" if policy == "Foreground" else None,
            grace_period=(
                int(options["gracePeriodSeconds"])
                if isinstance(options.get("gracePeriodSeconds"), int)
                else None
            ),
        )
    except SvclabError as e:
        raise status.from_svclab(e, s.res, s.res.kind, obj.name) from None
    s.api.cache.forget(obj.store_kind, obj.key)
    _after_write(s.api, s.res, None)
    try:
        return s.api.get(obj.store_kind, obj.key) and last
    except NotFoundError:
        return None


def _resource_of(obj: KubeObject) -> Resource:
    from control.apiserver.http.resources import for_kind

    r = for_kind(obj.api_version, obj.kind)
    assert r is not None
    return r


async def _delete_options(request: Request, params: dict[str, list[str]]) -> dict[str, Any]:
    raw = await request.body()
    opts: dict[str, Any] = {}
    if raw:
        body = _decode(raw, JSON)
        if isinstance(body, dict):
            opts.update(body)
    if _q(params, "propagationPolicy"):
        opts["propagationPolicy"] = _q(params, "propagationPolicy")
    if _q(params, "gracePeriodSeconds"):
        opts["gracePeriodSeconds"] = int(_q(params, "gracePeriodSeconds"))
    if "propagationPolicy" in opts and opts["propagationPolicy"] not in (
        "Orphan",
        "Foreground",
        "Background",
    ):
        raise status.invalid(
            _DELETE_OPTIONS,
            "DeleteOptions",
            "",
            "propagationPolicy",
            f'Unsupported value: "{opts["propagationPolicy"]}": supported values: "Foreground", "Background", "Orphan", "nil"',
        )
    return opts


_DELETE_OPTIONS = Resource("deleteoptions", "deleteoptions", "DeleteOptions", "", "v1", False)


async def _delete(s: _Scope) -> Response:
    opts = await _delete_options(s.request, s.params)
    if "All" in (opts.get("dryRun") or []):
        s = replace(s, dry=True)
    obj = get_object(s.api, s.res, s.info.namespace, s.info.name)
    left = _delete_one(s, obj, opts)
    if left is not None and not s.dry and left.metadata.deletion_timestamp is not None:
        # marked, not removed yet (graceful, or held by finalizers)
        return respond(to_bytes(s.api, s.res, left), 200)
    if strategy_of(s.res.store_kind).returns_deleted_object:  # ReturnDeletedObject
        return respond(
            to_wire(
                s.api,
                s.res,
                obj if s.dry else obj.with_meta(resource_version=str(s.api.store.revision)),
            ),
            200,
        )
    details = {"name": obj.name, "kind": s.res.name, "uid": obj.metadata.uid}
    if s.res.group:
        details["group"] = s.res.group
    return respond(status.success(details), 200)


async def _delete_collection(s: _Scope) -> Response:
    assert s.res.store_kind is not None
    opts = await _delete_options(s.request, s.params)
    objs = (
        s.api.list(s.res.store_kind, s.info.namespace or None)
        if s.res.namespaced
        else s.api.list(s.res.store_kind)
    )
    sel, terms, _ = _selectors(s.api, s.res, s.params)
    m = _matcher(sel, terms)
    gone = []
    for o in objs:
        if m(o):
            _delete_one(s, o, opts)
            gone.append(o)
    head = wire.dumps(
        {
            "kind": _list_kind(s.res),
            "apiVersion": s.res.api_version,
            "metadata": {"resourceVersion": str(s.api.store.revision)},
        }
    )
    return respond(
        head[:-1] + b',"items":[' + b",".join(to_bytes(s.api, s.res, o) for o in gone) + b"]}"
    )


# --------------------------------------------------------------------------- computed resources


def _endpoints_of(api: API, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        svc = api.get("Service", f"{namespace}/{name}")
    except NotFoundError:
        return None
    assert isinstance(svc, Service)
    slices = [
        s
        for s in api.list("EndpointSlice", namespace)
        if isinstance(s, EndpointSlice) and s.labels.get(wire.SERVICE_NAME) == name
    ]
    return wire.endpoints_for(svc, slices)


def _endpoints(
    api: API, request: Request, info: RequestInfo, params: dict[str, list[str]]
) -> Response:
    res = info.resource
    assert res is not None
    table = _wants_table(request)
    if info.verb == "get":
        ep = _endpoints_of(api, info.namespace, info.name) if api.fixed else None
        if ep is None:
            raise status.not_found(res, info.name)
        return respond(_table(api, res, [ep], ep["metadata"]["resourceVersion"]) if table else ep)
    sel, terms, _ = _selectors(
        api, Resource("endpoints", "endpoints", "Service", "", "v1", True), params
    )
    m = _matcher(sel, terms)
    svcs = [s for s in api.list("Service", info.namespace or None) if m(s)]
    eps = [e for s in svcs if (e := _endpoints_of(api, s.namespace, s.name)) is not None]
    rv = str(api.store.revision if api.fixed else 0)
    if info.verb == "list":
        if table:
            return respond(_table(api, res, eps, rv, params=params))
        return respond(
            {
                "kind": "EndpointsList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": rv},
                "items": eps,
            }
        )
    # watch: Service and EndpointSlice changes, as Endpoints
    as_table = _TableEvents(api, res, params)

    def encode(w: Watcher, typ: str, obj: Any) -> bytes:
        if typ == "DELETED" and isinstance(obj, str):
            ns, _, nm = obj.partition("/")
            obj = {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": nm, "namespace": ns, "resourceVersion": str(api.hub.revision)},
            }
        if table:
            return as_table.event(typ, obj, obj["metadata"]["resourceVersion"])
        return wire.dumps({"type": typ, "object": obj}) + b"\n"

    def view(ev: WatchEvent) -> tuple[str, Any] | None:
        o = ev.object
        if info.namespace and o.namespace != info.namespace:
            return None
        name = o.name if isinstance(o, Service) else o.labels.get(wire.SERVICE_NAME)
        if not name:
            return None
        key = f"{o.namespace}/{name}"
        ep = _endpoints_of(api, o.namespace, name)
        if ep is not None:
            try:
                svc = api.get("Service", key)
            except NotFoundError:
                return key, None
            if not m(svc):
                return key, None
        return key, ep

    w = Watcher(res, "", lambda o: True, encode, kinds=("Service", "EndpointSlice"), view=view)
    initial = []
    if _q(params, "resourceVersion") in ("", "0"):
        for e in eps:
            w.matched.add(f"{e['metadata']['namespace']}/{e['metadata']['name']}")
            initial.append(encode(w, "ADDED", e))
    else:
        for e in eps:
            w.matched.add(f"{e['metadata']['namespace']}/{e['metadata']['name']}")
    api.hub.add(w)
    timeout = float(_q(params, "timeoutSeconds", "0") or 0) or 1800.0
    return _stream(
        api, w, initial, timeout, _q(params, "allowWatchBookmarks") in ("true", "1"), res
    )


def _cluster_doc(api: API) -> dict[str, Any] | None:
    if not api.fixed:
        return None
    d = api.session.cluster.to_dict()
    meta = dict(d.get("metadata") or {})
    meta.setdefault("name", "svclab")
    meta["resourceVersion"] = "1"
    meta.setdefault("uid", "00000000-0000-0000-0000-000000000001")
    try:
        st = (api.state_dir / "cluster.yaml").stat()
        meta.setdefault(
            "creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime))
        )
    except OSError:
        pass
    d["metadata"] = meta
    return d


def _proxy_doc(api: API) -> dict[str, Any] | None:
    pc = api.session.proxy_config
    if pc is None or not api.fixed:
        return None
    d = pc.model_dump(by_alias=True, exclude_defaults=True, mode="json")
    return {
        "apiVersion": "svclab.dev/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "metadata": {"name": "kube-proxy", "resourceVersion": "1"},
        **{k: v for k, v in d.items() if k not in ("apiVersion", "kind")},
    }


async def _svclab_docs(
    api: API, request: Request, info: RequestInfo, params: dict[str, list[str]]
) -> Response:
    res = info.resource
    assert res is not None
    doc = _cluster_doc(api) if res.kind == "Cluster" else _proxy_doc(api)
    table = _wants_table(request)
    if info.verb == "get":
        if doc is None or doc["metadata"]["name"] != info.name:
            raise status.not_found(res, info.name)
        return respond(_table(api, res, [doc], "1") if table else doc)
    if info.verb == "list":
        items = [doc] if doc is not None else []
        if table:
            return respond(_table(api, res, items, "1", params=params))
        return respond(
            {
                "kind": res.kind + "List",
                "apiVersion": res.api_version,
                "metadata": {"resourceVersion": "1"},
                "items": items,
            }
        )
    if res.kind != "Cluster":
        raise status.method_not_allowed()
    body = _decode(await request.body(), request.headers.get("content-type", JSON))
    if info.verb == "create":
        if not isinstance(body, dict):
            raise status.bad_request("the object must be a JSON object")
        name = (body.get("metadata") or {}).get("name", "")
        meta = {
            k: v
            for k, v in (body.get("metadata") or {}).items()
            if k in ("name", "labels", "annotations")
        }
        try:
            cluster = cluster_from_dict({**body, "metadata": meta})
        except InputError as e:
            raise status.invalid(res, "Cluster", name, e.field, e.reason) from None
        if doc is not None:
            if doc["metadata"]["name"] == name:
                raise status.already_exists(res, name)
            raise status.invalid(
                res,
                "Cluster",
                name,
                "metadata.name",
                f"Forbidden: this state already holds Cluster {doc['metadata']['name']!r}; the address plan cannot change",
            )
        if _q(params, "dryRun") != "All":
            api.fix_cluster(cluster)
            api.wrote()
        return respond(_cluster_doc(api) or cluster.to_dict(), 201)
    # update / patch: only metadata may change
    if doc is None or doc["metadata"]["name"] != info.name:
        raise status.not_found(res, info.name)
    ctype = request.headers.get("content-type", "").split(";")[0].strip()
    if info.verb == "patch":
        if ctype == patches.JSON_PATCH:
            new = patches.json_patch(doc, body)
        else:
            new = patches.merge_patch(doc, body)
    else:
        new = body
    meta = {
        k: v
        for k, v in (new.get("metadata") or {}).items()
        if k in ("name", "labels", "annotations")
    }
    try:
        cluster = cluster_from_dict({**new, "metadata": meta})
    except InputError as e:
        raise status.invalid(res, "Cluster", info.name, e.field, e.reason) from None
    if cluster.spec != api.session.cluster.spec:
        raise status.invalid(
            res,
            "Cluster",
            info.name,
            "spec",
            "Forbidden: the address plan cannot change (use a new state directory)",
        )
    if _q(params, "dryRun") != "All" and cluster != api.session.cluster:
        api.session.put_cluster(cluster)
    return respond(_cluster_doc(api) or {}, 200)


async def _access_review(api: API, request: Request, res: Resource, user: User) -> Response:
    from control.apiserver.http import nodeauthz
    from control.apiserver.http.rbac import Attributes, rule_allows

    body = _decode(await request.body(), request.headers.get("content-type", JSON))
    if not isinstance(body, dict):
        raise status.bad_request("the object must be a JSON object")
    spec = body.get("spec") or {}
    out = dict(body)
    out.setdefault("apiVersion", res.api_version)
    out.setdefault("kind", res.kind)
    out.setdefault("metadata", {})
    if res.name == "selfsubjectreviews":
        info: dict[str, Any] = {"username": user.name, "groups": list(user.groups)}
        if user.uid:
            info["uid"] = user.uid
        out["status"] = {"userInfo": info}
        return respond(out, 201)
    if res.name == "selfsubjectrulesreviews":
        ns = spec.get("namespace", "")
        rules = api.rbac.rules_for(user, ns) if "system:masters" not in user.groups else None
        if rules is None:
            rr = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
            nr = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
        else:
            rr = [
                {
                    "verbs": r.verbs,
                    "apiGroups": r.api_groups,
                    "resources": r.resources,
                    **({"resourceNames": r.resource_names} if r.resource_names else {}),
                }
                for r in rules
                if r.resources
            ]
            nr = [
                {"verbs": r.verbs, "nonResourceURLs": r.non_resource_ur_ls}
                for r in rules
                if r.non_resource_ur_ls
            ]
        out["status"] = {"resourceRules": rr, "nonResourceRules": nr, "incomplete": False}
        return respond(out, 201)
    ra = spec.get("resourceAttributes")
    na = spec.get("nonResourceAttributes")
    if ra:
        a = Attributes(
            user,
            ra.get("verb", ""),
            ra.get("group", ""),
            ra.get("resource", ""),
            ra.get("subresource", ""),
            ra.get("namespace", ""),
            ra.get("name", ""),
        )
    elif na:
        a = Attributes(user, na.get("verb", ""), path=na.get("path", ""), resource_request=False)
    else:
        raise status.invalid(
            res,
            res.kind,
            "",
            "spec.resourceAttributes",
            "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    allowed = api.rbac.allowed(a) or bool(nodeauthz.allowed(a, field_selector={}, pod_node=None))
    st: dict[str, Any] = {"allowed": allowed}
    if allowed and "system:masters" not in user.groups:
        st["reason"] = "RBAC: allowed"
    _ = rule_allows
    out["status"] = st
    return respond(out, 201)


async def _endpoints_handler(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    return _endpoints(api, request, info, params)


async def _docs_handler(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    return await _svclab_docs(api, request, info, params)


async def _review_handler(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    assert info.resource is not None
    return await _access_review(api, request, info.resource, user)


#: verb -> its handler (create, with its binding subresource, is chosen in :func:`handle`)
_WRITES: dict[str, Callable[[_Scope], Awaitable[Response]]] = {
    "update": _update,
    "patch": _patch,
    "delete": _delete,
    "deletecollection": _delete_collection,
}

Computed = Callable[
    ["API", Request, "RequestInfo", User, dict[str, list[str]]], Awaitable[Response]
]


#: (group, plural) -> the handler of a resource computed on read (no store kind)
_COMPUTED: dict[tuple[str, str], Computed] = {
    ("", "endpoints"): _endpoints_handler,
    ("authorization.k8s.io", "selfsubjectaccessreviews"): _review_handler,
    ("authorization.k8s.io", "selfsubjectrulesreviews"): _review_handler,
    ("authentication.k8s.io", "selfsubjectreviews"): _review_handler,
    ("svclab.dev", "clusters"): _docs_handler,
    ("svclab.dev", "kubeproxyconfigurations"): _docs_handler,
}

__all__ = ["handle"]
