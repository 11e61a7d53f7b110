"""``POST .../namespaces/NS/pods/NAME/eviction``: the HTTP side of
:mod:`control.apiserver.eviction`.

The body is an Eviction in JSON or YAML (kubectl drain sends JSON);
``dryRun=All`` on the URL counts as in its deleteOptions. Success answers 201 with a
Success Status; a refusal answers its Status, with a ``Retry-After`` header when it
names a delay (kube-apiserver's response writer does the same; client-go then retries
by itself). RBAC has checked ``create`` on ``pods/eviction`` before this runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from control.apiserver.eviction import EvictionRefused, evict
from control.apiserver.http import status, wire
from control.apiserver.http.authn import User
from netmodel.errors import NotFoundError, SvclabError

if TYPE_CHECKING:
    from control.apiserver.http.app import API, RequestInfo

JSON = "application/json"


async def handle_eviction(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    res = info.resource
    assert res is not None
    if info.verb != "create":
        raise status.method_not_allowed()
    body = wire.decode_body(await request.body(), request.headers.get("content-type", JSON))
    dry = (params.get("dryRun") or [""])[0] == "All"
    apiserver = api.apiserver
    try:
        evict(
            apiserver,
            info.namespace,
            info.name,
            body,
            dry_run=dry,
            component=user.name,
            clock=apiserver.clock,
        )
    except EvictionRefused as e:
        headers = {"Retry-After": str(e.retry_after)} if e.retry_after else None
        return Response(wire.dumps(e.status()), e.code, headers=headers, media_type=JSON)
    except NotFoundError:
        raise status.not_found(res, info.name) from None
    except SvclabError as e:
        raise status.from_svclab(e, res, "Pod", info.name) from None
    api.wrote()
    return Response(wire.dumps(status.success()), 201, media_type=JSON)
