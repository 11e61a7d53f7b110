"""Field ownership (``metadata.managedFields``) and server-side apply.

Field sets use Kubernetes' FieldsV1 shape: ``{"f:spec": {"f:replicas": {}}}``;
elements of lists with a merge key (:func:`.patch.merge_key`) are ``k:{"name":"web"}``
entries; other lists and scalars are leaves.

* Every create, update and patch records, for its field manager (``fieldManager``, or
  kubectl's ``kubectl-*`` names, or the user agent's program name), an ``Update``
  entry owning the leaves it changed; those leaves leave every other manager's set.
* ``PATCH`` with ``application/apply-patch+yaml`` is server-side apply: the applied
  configuration is merged into the object (maps recursively, keyed lists by key,
  other lists and scalars replaced); leaves the manager applied before and no longer
  applies are removed unless another manager owns them; a leaf another manager owns
  with a different value is a conflict (409 ``Apply failed with N conflicts``)
  unless ``force=true``, which takes it over. The manager's ``Apply`` entry becomes
  exactly the applied set. Applying to a missing object creates it.
  :func:`apply_configuration` computes the result; the PATCH handler (in
  :mod:`.handlers`, with the other verbs) reads the request and writes it.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from starlette.requests import Request

from control.apiserver.http import patch as patches
from control.apiserver.http.status import APIError

Path = tuple[str, ...]
_SKIP_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "managedFields",
        "selfLink",
    }
)


def manager_for(params: dict[str, list[str]], request: Request, operation: str) -> str:
    m = params.get("fieldManager")
    if m and m[0]:
        return m[0][:128]
    agent = request.headers.get("user-agent", "")
    prog = agent.split("/", 1)[0].strip() or "unknown"
    return prog[:128]


def _leaves(
    obj: Any, kind: str, parents: tuple[str, ...] = (), prefix: Path = ()
) -> dict[Path, Any]:
    """leaf path -> value."""
    out: dict[Path, Any] = {}
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        if not parents and k in ("apiVersion", "kind", "status"):
            continue
        if parents == () and k == "metadata" and isinstance(v, dict):
            v = {mk: mv for mk, mv in v.items() if mk not in _SKIP_META}
        p = (*prefix, "f:" + k)
        if isinstance(v, dict) and v:
            sub = _leaves(v, kind, (*parents, k), p)
            if sub:
                out.update(sub)
            else:
                out[p] = v
        elif (
            isinstance(v, list)
            and v
            and (mk := patches.merge_key(parents, k, kind)) is not None
            and all(isinstance(x, dict) and mk in x for x in v)
        ):
            for item in v:
                kp = (*p, "k:" + json.dumps({mk: item[mk]}, separators=(",", ":")))
                sub = _leaves(item, kind, (*parents, k), kp)
                out[(*kp, ".")] = None
                out.update(sub)
        else:
            out[p] = v
    return out


def _to_fields(paths: set[Path] | list[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for p in sorted(paths):
        d = root
        for part in p:
            d = d.setdefault(part, {})
    return root


def _from_fields(fields: dict[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for k, v in fields.items():
        p = (*prefix, k)
        if isinstance(v, dict) and v:
            out |= _from_fields(v, p)
        else:
            out.add(p)
    return out


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _entries(obj: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not obj:
        return []
    return [
        dict(e)
        for e in (obj.get("metadata") or {}).get("managedFields") or []
        if isinstance(e, dict)
    ]


def _set_entries(obj: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    meta = obj.setdefault("metadata", {})
    kept = [e for e in entries if e.get("fieldsV1")]
    if kept:
        meta["managedFields"] = kept
    else:
        meta.pop("managedFields", None)
    return obj


def _entry(manager: str, operation: str, api_version: str, paths: set[Path]) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": _now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": _to_fields(paths),
    }


def record_update(
    new: dict[str, Any], before: dict[str, Any] | None, manager: str, api_version: str
) -> dict[str, Any]:
    """``new`` with managedFields updated for an Update by ``manager`` (the leaves that
    differ from ``before`` move to it)."""
    kind = str(new.get("kind", ""))
    changed, removed = _changed_leaves(new, before or {}, kind)
    entries = _entries(before) if before is not None else []
    if not changed and not removed and entries:
        return _set_entries(new, entries)
    out: list[dict[str, Any]] = []
    mine: set[Path] = set()
    for e in entries:
        paths = _from_fields(e.get("fieldsV1") or {})
        if e.get("manager") == manager and e.get("operation") == "Update":
            mine = paths
            continue
        paths -= changed | removed
        if paths:
            out.append({**e, "fieldsV1": _to_fields(paths)})
    mine = (mine | changed) - removed
    if mine:
        out.append(_entry(manager, "Update", api_version, mine))
    return _set_entries(new, out)


def _changed_leaves(
    new: dict[str, Any], before: dict[str, Any], kind: str
) -> tuple[set[Path], set[Path]]:
    """The leaves of ``new`` that ``before`` lacks or holds with another value, and the
    leaves of ``before`` that ``new`` lacks: exactly what comparing ``_leaves`` of the
    two whole objects gives. Each top-level field's leaves sit under its own path, so a
    field equal in both (the whole spec of an annotation patch) adds nothing and is not
    walked."""
    changed: set[Path] = set()
    removed: set[Path] = set()
    for k in new.keys() | before.keys():
        if k in new and k in before and new[k] == before[k]:
            continue
        if (
            k == "metadata"
            and k in new
            and k in before
            and _metadata_changes(new[k], before[k], kind, changed, removed)
        ):
            continue
        after = _leaves({k: new[k]}, kind) if k in new else {}
        prev = _leaves({k: before[k]}, kind) if k in before else {}
        changed.update(p for p, v in after.items() if p not in prev or prev[p] != v)
        removed.update(p for p in prev if p not in after)
    return changed, removed


def _metadata_changes(
    new: Any, before: Any, kind: str, changed: set[Path], removed: set[Path]
) -> bool:
    """:func:`_changed_leaves` of ``metadata`` one level down: each field's leaves sit
    under ``f:metadata.f:FIELD``, so only the fields that differ are walked (an
    annotation patch walked the labels and ownerReferences too). False, with nothing
    added, where that does not hold: a metadata that is no map, or one with nothing but
    the fields managedFields skip (then ``f:metadata`` itself is the leaf)."""
    if not isinstance(new, dict) or not isinstance(before, dict):
        return False
    keys = [k for k in new.keys() | before.keys() if k not in _SKIP_META]
    if not any(k in new for k in keys) or not any(k in before for k in keys):
        return False
    top = ("metadata",)
    prefix = ("f:metadata",)
    for k in keys:
        if k in new and k in before and new[k] == before[k]:
            continue
        after = _leaves({k: new[k]}, kind, top, prefix) if k in new else {}
        prev = _leaves({k: before[k]}, kind, top, prefix) if k in before else {}
        changed.update(p for p, v in after.items() if p not in prev or prev[p] != v)
        removed.update(p for p in prev if p not in after)
    return True


def get_object(obj: Any, path: Path) -> tuple[bool, Any]:
    cur = obj
    for part in path:
        if part == ".":
            continue
        if part.startswith("f:"):
            if not isinstance(cur, dict) or part[2:] not in cur:
                return False, None
            cur = cur[part[2:]]
        elif part.startswith("k:"):
            want = json.loads(part[2:])
            if not isinstance(cur, list):
                return False, None
            found = [
                x
                for x in cur
                if isinstance(x, dict) and all(x.get(k) == v for k, v in want.items())
            ]
            if not found:
                return False, None
            cur = found[0]
    return True, cur


def _remove(obj: Any, path: Path) -> None:
    parent: Any = obj
    for part in path[:-1]:
        ok, parent = get_object(parent, (part,))
        if not ok:
            return
    last = path[-1]
    if last == ".":
        if len(path) >= 2:
            _remove(obj, path[:-1])
        return
    if last.startswith("f:") and isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif last.startswith("k:") and isinstance(parent, list):
        want = json.loads(last[2:])
        parent[:] = [
            x
            for x in parent
            if not (isinstance(x, dict) and all(x.get(k) == v for k, v in want.items()))
        ]


def _merge(cur: Any, cfg: Any, kind: str, parents: tuple[str, ...] = ()) -> Any:
    if not isinstance(cfg, dict) or not isinstance(cur, dict):
        return copy.deepcopy(cfg)
    out = dict(cur)
    for k, v in cfg.items():
        mk = patches.merge_key(parents, k, kind) if isinstance(v, list) else None
        if isinstance(v, dict):
            out[k] = _merge(out.get(k), v, kind, (*parents, k))
        elif mk is not None and isinstance(out.get(k), list):
            items = [copy.deepcopy(x) for x in out[k]]
            for item in v:
                idx = next(
                    (
                        i
                        for i, x in enumerate(items)
                        if isinstance(x, dict)
                        and isinstance(item, dict)
                        and x.get(mk) == item.get(mk)
                    ),
                    None,
                )
                if idx is None:
                    items.append(copy.deepcopy(item))
                else:
                    items[idx] = _merge(items[idx], item, kind, (*parents, k))
            out[k] = items
        else:
            out[k] = copy.deepcopy(v)
    return out


def apply_configuration(
    current: dict[str, Any], cfg: dict[str, Any], manager: str, *, force: bool, api_version: str
) -> dict[str, Any]:
    """The object server-side apply of ``cfg`` by ``manager`` makes of ``current`` (the
    stored object's wire form, or an empty one to create), its managedFields updated:
    fields ``manager`` applied before and no longer applies are removed unless another
    manager owns them. Raises the 409 Conflict kube-apiserver gives when ``cfg`` sets a
    field another manager owns to another value (``force``: take them over instead)."""
    kind = str(cfg.get("kind") or current.get("kind") or "")
    applied = set(_leaves(cfg, kind))
    entries = _entries(current)
    conflicts: list[tuple[str, Path]] = []
    cfg_values = _leaves(cfg, kind)
    previous: set[Path] = set()
    others: list[tuple[dict[str, Any], set[Path]]] = []
    for ent in entries:
        paths = _from_fields(ent.get("fieldsV1") or {})
        if ent.get("manager") == manager and ent.get("operation") == "Apply":
            previous = paths
            continue
        others.append((ent, paths))
    for ent, paths in others:
        for p in applied & paths:
            if p[-1] == ".":
                continue
            ok, value = get_object(current, p)
            if ok and value != cfg_values.get(p):
                conflicts.append((f'"{ent.get("manager")}" using {ent.get("apiVersion")}', p))
    if conflicts and not force:
        lines = [
            f"conflict with {m}: ." + ".".join(x[2:] for x in p if x != ".") for m, p in conflicts
        ]
        n = len(conflicts)
        msg = f"Apply failed with {n} conflict{'s' if n > 1 else ''}: " + "\n".join(lines)
        raise APIError(
            409,
            "Conflict",
            msg,
            {
                "causes": [
                    {"reason": "FieldManagerConflict", "message": ln, "field": ""} for ln in lines
                ]
            },
        )
    new = _merge(copy.deepcopy(current), cfg, kind)
    owned_by_others: set[Path] = set()
    new_entries = []
    for ent, paths in others:
        if force:
            paths = paths - applied
        owned_by_others |= paths
        if paths:
            new_entries.append({**ent, "fieldsV1": _to_fields(paths)})
    for p in sorted(previous - applied - owned_by_others, key=len, reverse=True):
        _remove(new, p)
    new_entries.append(_entry(manager, "Apply", api_version, applied))
    _set_entries(new, new_entries)
    return new
