"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902, the ``jsonpatch``
library) and Kubernetes' strategic merge patch.

Strategic merge patch follows Kubernetes' rules: maps merge recursively, ``null``
deletes, lists whose field has a patch merge key (:data:`MERGE_KEYS`, the same
``x-kubernetes-patch-merge-key`` values the OpenAPI document carries) merge element by
element on that key, ``finalizers`` merge as a set, every other list is replaced.
Directives: ``$patch: replace|delete`` (on maps and list elements),
``$deleteFromPrimitiveList/<field>``, ``$retainKeys``; ``$setElementOrder/<field>``
orders the merged list.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY_YAML = "application/apply-patch+yaml"
APPLY_CBOR = "application/apply-patch+cbor"

#: list field name -> merge key; ``ports`` depends on the parent (containers vs Service)
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "volumes": "name",
    "imagePullSecrets": "name",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "podIPs": "ip",
    "hostIPs": "ip",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
#: primitive lists merged as sets
SET_LISTS = frozenset({"finalizers"})


class PatchError(ValueError):
    """A patch that cannot be applied (400/422 for the caller)."""


def merge_key(parents: tuple[str, ...], field: str, kind: str) -> str | None:
    if field == "ports":
        if parents and parents[-1] in ("containers", "initContainers", "ephemeralContainers"):
            return "containerPort"
        if kind == "Service" and parents == ("spec",):
            return "port"
        return None
    if field == "addresses" and kind != "Node":
        return None
    return MERGE_KEYS.get(field)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("json patch must be a list of operations")
    try:
        return jsonpatch.JsonPatch(ops).apply(target)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as e:
        raise PatchError(str(e)) from None


def _strip(v: Any) -> Any:
    """A patch value without directives (what a new element looks like)."""
    if isinstance(v, dict):
        return {k: _strip(x) for k, x in v.items() if not k.startswith("$") and x is not None}
    if isinstance(v, list):
        return [_strip(x) for x in v if not (isinstance(x, dict) and x.get("$patch") == "delete")]
    return v


def strip_directives(patch: Any) -> Any:
    """A patch without its ``$`` directives and ``null`` deletions (what it sets)."""
    return _strip(patch)


def strategic_merge(orig: Any, patch: Any, kind: str, parents: tuple[str, ...] = ()) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip({k: v for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return None
    out = dict(orig) if isinstance(orig, dict) else {}
    retain = patch.get("$retainKeys")
    orders: dict[str, list[Any]] = {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = v if isinstance(v, list) else []
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            if isinstance(out.get(field), list) and isinstance(v, list):
                out[field] = [x for x in out[field] if x not in v]
            continue
        if v is None:
            out.pop(k, None)
            continue
        cur = out.get(k)
        if isinstance(v, dict):
            merged = strategic_merge(cur, v, kind, (*parents, k))
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list):
            mk = merge_key(parents, k, kind)
            if mk is not None and isinstance(cur, list):
                out[k] = _merge_list(cur, v, mk, kind, (*parents, k))
            elif k in SET_LISTS and isinstance(cur, list):
                out[k] = cur + [x for x in v if x not in cur]
            else:
                out[k] = _strip(v)
        else:
            out[k] = v
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    for field, order in orders.items():
        mk = merge_key(parents, field, kind)
        if isinstance(out.get(field), list):
            out[field] = _ordered(out[field], order, mk)
    return out


def _merge_list(
    cur: list[Any], patch: list[Any], mk: str, kind: str, path: tuple[str, ...]
) -> list[Any]:
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [_strip(x) for x in patch if not (isinstance(x, dict) and "$patch" in x)]
    out = [copy.deepcopy(x) for x in cur]
    for item in patch:
        if not isinstance(item, dict) or mk not in item:
            out.append(_strip(item))
            continue
        idx = next(
            (i for i, x in enumerate(out) if isinstance(x, dict) and x.get(mk) == item[mk]), None
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append(_strip(item))
        else:
            out[idx] = strategic_merge(out[idx], item, kind, path)
    return out


def _ordered(items: list[Any], order: list[Any], mk: str | None) -> list[Any]:
    def ident(x: Any) -> Any:
        if mk is not None and isinstance(x, dict):
            return json.dumps(x.get(mk), sort_keys=True)
        return json.dumps(x, sort_keys=True)

    rank = {ident(o): i for i, o in enumerate(order)}
    return sorted(items, key=lambda x: rank.get(ident(x), len(rank)))
