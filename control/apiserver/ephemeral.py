"""Ephemeral containers (``spec.ephemeralContainers``), as kube-apiserver validates them.

* In any pod spec (:func:`validate_ephemeral_containers`): each has a name (a DNS
  label) unique among all the pod's containers (``Duplicate value``), an image, a
  ``targetContainerName`` naming one of the pod's (non-ephemeral) containers (``Not
  found``), and none of the fields an ephemeral container may not carry: ``ports``,
  ``resources`` (unless empty), ``resizePolicy``, ``restartPolicy``, the probes and
  ``lifecycle``, nor a volume mount's ``subPath``/``subPathExpr`` (``Forbidden:
  cannot be set for an Ephemeral Container``).
* On create (:func:`forbid_on_create`): none at all (``spec.ephemeralContainers:
  Forbidden: cannot be set on create``): they are added later, to a running pod.
* Through ``pods/NAME/ephemeralcontainers`` (:func:`validate_update`): they can only be
  added: an existing one may not be removed (``Forbidden: existing ephemeral
  containers "C" may not be removed``) or changed (``spec.ephemeralContainers[C]:
  Forbidden: existing ephemeral containers "C" may not be changed``, followed by the
  fields that differ; kube-apiserver prints a Go diff there). Everything else the
  request carries is dropped (:func:`keep_only_ephemeral`).
"""

from __future__ import annotations

from typing import Any

from control.apiserver.names import check_dns1123_label
from control.apiserver.validation import Problems
from netmodel.objects import Container, PodSpec

FORBIDDEN = "cannot be set for an Ephemeral Container"
#: the fields of an ephemeral container kube-apiserver refuses, in its struct's order
NOT_ALLOWED = (
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
)


def _empty(value: Any) -> bool:
    """Go's zero value as the wire shows it: absent, null, "", [], {} or a map of
    empty values (``resources: {}`` or ``{requests: {}}``)."""
    if isinstance(value, dict):
        return all(_empty(v) for v in value.values())
    return value in (None, "", [], 0, False)


def validate_ephemeral_containers(spec: PodSpec, f: str, p: Problems) -> None:
    """The checks every pod spec's ephemeral containers pass (module docstring)."""
    if not spec.ephemeral_containers:
        return
    others = {c.name for c in spec.containers}
    others |= {str(c.get("name")) for c in (spec.model_extra or {}).get("initContainers") or []}
    names = set(others)
    for i, c in enumerate(spec.ephemeral_containers):
        ef = f"{f}.ephemeralContainers[{i}]"
        if not c.name:
            p.required(f"{ef}.name")
        p.check(f"{ef}.name", c.name, check_dns1123_label)
        if not c.image:
            p.required(f"{ef}.image")
        if c.name in names:
            p.duplicate(f"{ef}.name", c.name)
        names.add(c.name)
        d = c.to_dict()
        target = d.get("targetContainerName")
        if target and target not in others:
            p.not_found(f"{ef}.targetContainerName", target)
        for field in NOT_ALLOWED:
            if not _empty(d.get(field)):
                p.forbidden(f"{ef}.{field}", FORBIDDEN)
        for j, vm in enumerate(d.get("volumeMounts") or []):
            for sub in ("subPath", "subPathExpr"):
                if isinstance(vm, dict) and vm.get(sub):
                    p.forbidden(f"{ef}.volumeMounts[{j}].{sub}", FORBIDDEN)


def forbid_on_create(spec: PodSpec, p: Problems) -> None:
    if spec.ephemeral_containers:
        p.forbidden("spec.ephemeralContainers", "cannot be set on create")


def validate_update(new: list[Container], old: list[Container], p: Problems) -> None:
    """Existing ephemeral containers stay as they are (module docstring)."""
    by_name = {c.name: c for c in new}
    for o in old:
        n = by_name.get(o.name)
        if n is None:
            p.forbidden(
                "spec.ephemeralContainers",
                f'existing ephemeral containers "{o.name}" may not be removed\n',
            )
        od, nd = o.to_dict(), n.to_dict()
        if od != nd:
            changed = "\n".join(
                f"  {k}: {od.get(k)!r} -> {nd.get(k)!r}"
                for k in sorted(od.keys() | nd.keys())
                if od.get(k) != nd.get(k)
            )
            p.forbidden(
                f"spec.ephemeralContainers[{o.name}]",
                f'existing ephemeral containers "{o.name}" may not be changed\n{changed}',
            )


def keep_only_ephemeral(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """kube-apiserver's ``dropNonEphemeralContainerUpdates``: the stored pod ``old``
    (wire form) with ``new``'s ephemeral containers, name, namespace, uid and
    resourceVersion; every other change ``new`` makes is dropped."""
    out = {**old, "metadata": dict(old.get("metadata") or {}), "spec": dict(old.get("spec") or {})}
    nmeta = new.get("metadata") or {}
    for k in ("name", "namespace", "uid"):
        if nmeta.get(k):
            out["metadata"][k] = nmeta[k]
    if nmeta.get("resourceVersion"):
        out["metadata"]["resourceVersion"] = nmeta["resourceVersion"]
    else:  # no precondition: the update is unconditional
        out["metadata"].pop("resourceVersion", None)
    eph = (new.get("spec") or {}).get("ephemeralContainers")
    if eph:
        out["spec"]["ephemeralContainers"] = eph
    else:
        out["spec"].pop("ephemeralContainers", None)
    return out
