"""``pods/NAME/ephemeralcontainers``: read the pod, or add ephemeral containers to it
(what ``kubectl debug POD --image=...`` does), as kube-apiserver serves it.

* ``GET``: the Pod.
* ``PUT`` (a Pod) and ``PATCH`` (strategic merge, which kubectl sends, JSON merge or
  JSON patch, applied to the stored Pod): only ``spec.ephemeralContainers`` is taken
  from the result, everything else stays as stored (:func:`.ephemeral.
  keep_only_ephemeral`); existing ephemeral containers may not be removed or changed
  (422 with kube-apiserver's wording, :func:`.ephemeral.validate_update`); then the
  pod is written as any pod update is (validation, admission, compare-and-swap on the
  version read or the one the body names). ``dryRun=All`` writes nothing.

The pod's kubelet then starts them: ``status.ephemeralContainerStatuses`` (running),
after which ``exec``/``attach -c NAME`` reach them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from control.apiserver import ephemeral
from control.apiserver.http import connect, handlers, ssa, status, wire
from control.apiserver.http import patch as patches
from control.apiserver.http.status import APIError
from control.apiserver.validation import Problems
from netmodel.errors import SvclabError
from netmodel.objects import Pod

if TYPE_CHECKING:
    from starlette.requests import Request

    from control.apiserver.http.app import API, RequestInfo
    from control.apiserver.http.authn import User

JSON = "application/json"
UNKNOWN_PATCH = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, "
    "application/apply-patch+yaml, application/strategic-merge-patch+json"
)


async def ephemeral_containers(
    api: API, request: Request, info: RequestInfo, user: User, params: dict[str, list[str]]
) -> Response:
    res = info.resource
    assert res is not None
    if info.verb == "get":
        return handlers.respond(handlers.to_bytes(api, res, connect.pod_of(api, info.namespace, info.name)))
    if info.verb not in ("update", "patch"):
        raise status.method_not_allowed()
    raw = await request.body()
    ctype = request.headers.get("content-type", JSON).split(";")[0].strip()
    dry = (params.get("dryRun") or [""])[0] == "All"
    for _attempt in range(5):
        current = connect.pod_of(api, info.namespace, info.name)
        cur = current.to_dict()
        if info.verb == "update":
            body = wire.decode_body(raw, ctype)
            handlers.check_gvk(res, body)
            meta = body.get("metadata") or {}
            if meta.get("name") and meta["name"] != info.name:
                raise status.bad_request(
                    f"the name of the object ({meta['name']}) does not match the name on the URL ({info.name})"
                )
            new = ephemeral.keep_only_ephemeral(body, cur)
        else:
            new = ephemeral.keep_only_ephemeral(_patched(cur, raw, ctype), cur)
            if not ((_body_meta(raw, ctype) or {}).get("resourceVersion")):
                new["metadata"]["resourceVersion"] = current.metadata.resource_version
        try:
            stored = _write(api, request, res, info, user, params, new, cur, current, dry)
        except APIError as e:
            if e.reason == "Conflict" and info.verb == "patch" and _attempt < 4:
                continue
            raise
        return handlers.respond(
            handlers.to_bytes(api, res, stored) if not dry else wire.dumps(stored.to_dict())
        )
    raise status.conflict(res, info.name, status.STALE)


def _body_meta(raw: bytes, ctype: str) -> dict[str, Any] | None:
    if ctype == patches.JSON_PATCH:
        return None
    try:
        body = wire.decode_body(raw, JSON)
    except (ValueError, APIError):
        return None
    return body.get("metadata") if isinstance(body, dict) else None


def _patched(cur: dict[str, Any], raw: bytes, ctype: str) -> dict[str, Any]:
    body = wire.decode_body(raw, JSON)
    try:
        if ctype == patches.JSON_PATCH:
            new = patches.json_patch(cur, body)
        elif ctype == patches.MERGE_PATCH:
            new = patches.merge_patch(cur, body)
        elif ctype == patches.STRATEGIC:
            new = patches.strategic_merge(cur, body, "Pod")
        else:
            raise APIError(415, "UnsupportedMediaType", UNKNOWN_PATCH, {})
    except patches.PatchError as e:
        raise APIError(422, "Invalid", str(e), {}) from None
    if not isinstance(new, dict):
        raise status.bad_request("the patch produced something that is not an object")
    return new


def _write(
    api: API,
    request: Request,
    res: Any,
    info: RequestInfo,
    user: User,
    params: dict[str, list[str]],
    new: dict[str, Any],
    cur: dict[str, Any],
    current: Pod,
    dry: bool,
) -> Pod:
    """Check the ephemeral containers' change, then write the pod as an update."""
    manager = ssa.manager_for(params, request, "update")
    new = ssa.record_update(new, cur, manager, res.api_version)
    obj = handlers.to_object(res, new)
    assert isinstance(obj, Pod)
    try:
        ephemeral.validate_update(
            obj.spec.ephemeral_containers, current.spec.ephemeral_containers, Problems(obj.ref)
        )
        stored = api.apiserver.update(obj, component=user.name, dry_run=dry)
    except SvclabError as e:
        raise status.from_svclab(e, res, "Pod", info.name) from None
    if not dry:
        api.wrote()
    assert isinstance(stored, Pod)
    return stored


connect.HANDLERS[("pods", "ephemeralcontainers")] = ephemeral_containers
