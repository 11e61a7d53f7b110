"""CustomResourceDefinitions and their custom resources, as kube-apiserver serves them.

* :class:`CRDStrategy` (store kind ``CustomResourceDefinition``): kube-apiserver's
  defaults (``spec.conversion.strategy: None``, ``names.singular`` / ``listKind``), its
  validation (:func:`validate_crd`: the name is ``<plural>.<group>``, the scope, the
  names, exactly one storage version, a structural schema in every version, the
  subresources and printer columns), and the status the apiextensions controllers
  give it: ``acceptedNames``, ``storedVersions`` and the ``NamesAccepted`` and
  ``Established`` conditions.
* :func:`sync` (called after each CRD write and when the apiserver starts on a
  persistent store, before any custom resource is read) registers the stored CRDs'
  kinds in the kind table (:mod:`netmodel.customresources`) and unregisters those of
  the CRDs gone, whose objects it deletes (the CRD finalizer's cleanup).
* :class:`CustomResourceStrategy`: each custom resource is pruned, defaulted and
  validated against the structural schema of the version it is written in
  (:mod:`netmodel.structural`; every problem reported, as kube-apiserver does), then
  stored in the storage version; with the ``status`` subresource, create drops
  ``status`` and the main endpoint keeps the stored one, and a ``/status`` write takes
  nothing but the status, pruned, defaulted and validated by the schema.
* Versions: ``conversion.strategy: None`` (the default) serves every served version
  of the same stored object, only its ``apiVersion`` rewritten (:class:`NoneConversion`,
  registered by :func:`sync` for a CRD serving more than one version); ``Webhook`` is
  refused naming ``spec.conversion.strategy`` (svclab calls no conversion webhooks).
* :func:`scale_of` / :func:`set_replicas`: the ``scale`` subresource through the
  CRD's ``specReplicasPath`` / ``statusReplicasPath`` / ``labelSelectorPath``;
  :func:`table_columns` / :func:`table_cells`: ``additionalPrinterColumns``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from control.apiserver.admission import Allocations
from control.apiserver.allocators import Journal
from control.apiserver.http.resources import Resource
from control.apiserver.strategybase import GenericStrategy
from control.apiserver.validation import Problems
from control.store.base import Store
from netmodel import celrules, customresources, kinds, structural
from netmodel.cluster import ClusterSpec
from netmodel.customresources import CRD_KIND, CustomResource
from netmodel.errors import NotFoundError
from netmodel.objects import KubeObject

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUB = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_KIND = re.compile(r"[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?")
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
    "with an alphabetic character, and end with an alphanumeric character (e.g. "
    "'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
    "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
    "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUB_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. "
    "'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
KIND_MSG = "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?"
COLUMN_TYPES = ("boolean", "date", "integer", "number", "string")
#: what the cleanup finalizer of kube-apiserver is called (svclab deletes the objects
#: when the CRD goes, so the CRD carries none)
SCOPES = ("Cluster", "Namespaced")


# --------------------------------------------------------------------------- the CRD


def _spec(obj: KubeObject) -> dict[str, Any]:
    spec = (obj.model_extra or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def default_crd(obj: KubeObject) -> KubeObject:
    """kube-apiserver's v1 defaults and the status its controllers set (the names are
    accepted unless another CRD or a built-in kind serves them)."""
    spec = dict(_spec(obj))
    names = spec.get("names")
    if isinstance(names, dict) and names.get("kind"):
        spec["names"] = customresources.names(spec)
    conv = spec.get("conversion")
    if not isinstance(conv, dict) or not conv.get("strategy"):
        spec["conversion"] = {"strategy": "None", **(conv if isinstance(conv, dict) else {})}
    versions = spec.get("versions")
    if isinstance(versions, list):
        spec["versions"] = [_default_version(v) for v in versions]
    status = _status(
        obj.name, spec, obj.metadata.creation_timestamp, (obj.model_extra or {}).get("status")
    )
    return obj.evolve(spec=spec, status=status)


def _default_version(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    out = dict(v)
    cols = out.get("additionalPrinterColumns")
    if isinstance(cols, list):
        out["additionalPrinterColumns"] = [
            {**c, "priority": c.get("priority", 0)} if isinstance(c, dict) else c for c in cols
        ]
    return out


def _conflict(crd_name: str, spec: Mapping[str, Any]) -> str | None:
    """Why the CRD's names cannot be served (None if they can)."""
    group = spec.get("group")
    n = customresources.names(spec)
    for r in kinds.ROWS:
        if r.crd == crd_name or r.group != group:
            continue
        if r.plural == n.get("plural"):
            return f'"{r.plural}" is already in use'
        if r.kind == n.get("kind"):
            return f'"{r.kind}" is already in use'
    return None


def _status(name: str, spec: Mapping[str, Any], at: str | None, old: Any) -> dict[str, Any]:
    conflict = _conflict(name, spec)
    old_status = old if isinstance(old, dict) else {}
    old_conds = {
        c.get("type"): c for c in old_status.get("conditions") or () if isinstance(c, dict)
    }

    def cond(type_: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        status = "True" if ok else "False"
        before = old_conds.get(type_)
        when = before.get("lastTransitionTime") if before and before.get("status") == status else at
        c = {"type": type_, "status": status, "reason": reason, "message": message}
        if when:
            c["lastTransitionTime"] = when
        return c

    stored = customresources.storage_version(spec)
    versions = list(old_status.get("storedVersions") or [])
    if stored and stored not in versions:
        versions.append(stored)
    if conflict is None:
        conds = [
            cond("NamesAccepted", True, "NoConflicts", "no conflicts found"),
            cond(
                "Established", True, "InitialNamesAccepted", "the initial names have been accepted"
            ),
        ]
        accepted = customresources.names(spec)
    else:
        conds = [
            cond("NamesAccepted", False, "AlreadyInUse", conflict),
            cond("Established", False, "NotAccepted", "not all names are accepted"),
        ]
        accepted = {"plural": "", "kind": ""}
    return {"conditions": conds, "acceptedNames": accepted, "storedVersions": versions}


def validate_crd(obj: KubeObject, p: Problems) -> None:
    """kube-apiserver's CRD validation (the first problem, in its wording)."""
    spec = _spec(obj)
    group = spec.get("group")
    raw_names = spec.get("names")
    n: dict[str, Any] = raw_names if isinstance(raw_names, dict) else {}
    plural = n.get("plural")
    if not group:
        p.required("spec.group")
    if not isinstance(group, str) or not _DNS1123_SUB.fullmatch(group):
        p.invalid("spec.group", group, DNS1123_SUB_MSG)
    if "." not in group:
        p.invalid("spec.group", group, "should be a domain with at least one dot")
    if obj.name != f"{plural}.{group}":
        p.invalid("metadata.name", obj.name, 'must be spec.names.plural+"."+spec.group')
    scope = spec.get("scope")
    if not scope:
        p.required("spec.scope")
    if scope not in SCOPES:
        p.unsupported("spec.scope", scope, SCOPES)
    _validate_names(n, p)
    _validate_versions(spec, p)
    conv = spec.get("conversion") or {}
    strategy = conv.get("strategy") if isinstance(conv, dict) else None
    if strategy not in ("None", "Webhook"):
        p.unsupported("spec.conversion.strategy", strategy, ("None", "Webhook"))
    if strategy == "Webhook":
        p.invalid(
            "spec.conversion.strategy",
            strategy,
            "svclab calls no conversion webhooks: use the None strategy",
        )
    if isinstance(conv, dict) and conv.get("webhook") is not None:
        p.forbidden(
            "spec.conversion.webhook", "should not be set when strategy is not set to Webhook"
        )


def _validate_names(n: Mapping[str, Any], p: Problems) -> None:
    for field in ("plural", "singular"):
        v = n.get(field)
        if field == "plural" and not v:
            p.required("spec.names.plural")
        if v and (not isinstance(v, str) or not _DNS1123_LABEL.fullmatch(v)):
            p.invalid(f"spec.names.{field}", v, DNS1123_LABEL_MSG)
    kind = n.get("kind")
    if not kind:
        p.required("spec.names.kind")
    for field in ("kind", "listKind"):
        v = n.get(field)
        if v and (not isinstance(v, str) or not _KIND.fullmatch(v)):
            p.invalid(f"spec.names.{field}", v, KIND_MSG)
    if n.get("listKind") and n.get("listKind") == kind:
        p.invalid("spec.names.listKind", n.get("listKind"), "kind and listKind may not be the same")
    for i, short in enumerate(n.get("shortNames") or ()):
        if not isinstance(short, str) or not _DNS1123_LABEL.fullmatch(short):
            p.invalid(f"spec.names.shortNames[{i}]", short, DNS1123_LABEL_MSG)
    for i, cat in enumerate(n.get("categories") or ()):
        if not isinstance(cat, str) or not _DNS1123_LABEL.fullmatch(cat):
            p.invalid(f"spec.names.categories[{i}]", cat, DNS1123_LABEL_MSG)


def _versions_text(versions: list[Any]) -> str:
    names = ", ".join(str(v.get("name")) for v in versions if isinstance(v, dict))
    return f"[{names}]"


def _validate_versions(spec: Mapping[str, Any], p: Problems) -> None:
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        p.required("spec.versions", "must have exactly one version marked as storage version")
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if len(storage) != 1:
        p._raise(
            "spec.versions",
            f"Invalid value: {_versions_text(versions)}: must have exactly one version "
            "marked as storage version",
        )
    if not any(isinstance(v, dict) and v.get("served") for v in versions):
        p._raise(
            "spec.versions",
            f"Invalid value: {_versions_text(versions)}: must have at least one version "
            "marked as served",
        )
    seen: set[str] = set()
    for i, v in enumerate(versions):
        f = f"spec.versions[{i}]"
        if not isinstance(v, dict):
            p.invalid(f, v, "must be an object")
        name = v.get("name")
        if not name:
            p.required(f"{f}.name")
        if not isinstance(name, str) or not _DNS1035.fullmatch(name):
            p.invalid(f"{f}.name", name, DNS1035_MSG)
        if name in seen:
            p.invalid(f"{f}.name", name, "must be unique")
        seen.add(name)
        schema = (
            (v.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(v.get("schema") or {}, dict)
            else None
        )
        if schema is None:
            p.required(f"{f}.schema.openAPIV3Schema", "schemas are required")
        for field, why in structural.structural_problems(schema, f"{f}.schema.openAPIV3Schema"):
            p._raise(field, why)
        rule_problems = celrules.rule_problems(schema, _schema_path(versions, i))
        if rule_problems:  # every rule that cannot be evaluated, as kube reports them
            raise structural.refusal(rule_problems, p.ref)
        _validate_subresources(v.get("subresources"), f"{f}.subresources", p)
        _validate_columns(v.get("additionalPrinterColumns"), f"{f}.additionalPrinterColumns", p)


def _schema_path(versions: list[Any], i: int) -> str:
    """Where kube-apiserver names version ``i``'s schema: ``spec.validation`` when every
    version has the same one (its internal form keeps one then), else the version's."""
    schemas = [v.get("schema") if isinstance(v, dict) else None for v in versions]
    if all(s == schemas[0] for s in schemas):
        return "spec.validation.openAPIV3Schema"
    return f"spec.versions[{i}].schema.openAPIV3Schema"


def _validate_subresources(subs: Any, f: str, p: Problems) -> None:
    if subs is None:
        return
    if not isinstance(subs, dict):
        p.invalid(f, subs, "must be an object")
    scale = subs.get("scale")
    if scale is None:
        return
    if not isinstance(scale, dict):
        p.invalid(f"{f}.scale", scale, "must be an object")
    spec_path = scale.get("specReplicasPath")
    if not spec_path:
        p.required(f"{f}.scale.specReplicasPath")
    if not _json_path(spec_path) or not str(spec_path).startswith(".spec."):
        p.invalid(f"{f}.scale.specReplicasPath", spec_path, "should be a json path under .spec")
    status_path = scale.get("statusReplicasPath")
    if not status_path:
        p.required(f"{f}.scale.statusReplicasPath")
    if not _json_path(status_path) or not str(status_path).startswith(".status."):
        p.invalid(
            f"{f}.scale.statusReplicasPath", status_path, "should be a json path under .status"
        )
    sel = scale.get("labelSelectorPath")
    if sel and (
        not _json_path(sel)
        or not (str(sel).startswith(".spec.") or str(sel).startswith(".status."))
    ):
        p.invalid(
            f"{f}.scale.labelSelectorPath",
            sel,
            "should be a json path under either .spec or .status",
        )


def _validate_columns(cols: Any, f: str, p: Problems) -> None:
    if cols is None:
        return
    if not isinstance(cols, list):
        p.invalid(f, cols, "must be a list")
    for i, c in enumerate(cols):
        cf = f"{f}[{i}]"
        if not isinstance(c, dict):
            p.invalid(cf, c, "must be an object")
        if not c.get("name"):
            p.required(f"{cf}.name")
        if not c.get("type"):
            p.required(f"{cf}.type")
        if c.get("type") not in COLUMN_TYPES:
            p.unsupported(f"{cf}.type", c.get("type"), COLUMN_TYPES)
        if c.get("format") and c.get("format") not in (
            "int32",
            "int64",
            "float",
            "double",
            "byte",
            "date",
            "date-time",
            "password",
        ):
            p.unsupported(
                f"{cf}.format",
                c.get("format"),
                ("int32", "int64", "float", "double", "byte", "date", "date-time", "password"),
            )
        if not c.get("jsonPath"):
            p.required(f"{cf}.jsonPath")
        if not _json_path(c.get("jsonPath")):
            p.invalid(
                f"{cf}.jsonPath", c.get("jsonPath"), "must be a simple json path starting with ."
            )


_PATH_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def _json_path(path: Any) -> list[str | int] | None:
    """The steps of a simple JSONPath (``.spec.replicas``, ``.status.items[0].name``),
    None if it is not one."""
    if not isinstance(path, str) or not path.startswith("."):
        return None
    steps: list[str | int] = []
    pos = 0
    while pos < len(path):
        m = _PATH_STEP.match(path, pos)
        if m is None:
            return None
        steps.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        pos = m.end()
    return steps or None


def _at(doc: Any, path: str) -> Any:
    for step in _json_path(path) or ():
        if isinstance(step, int):
            doc = doc[step] if isinstance(doc, list) and step < len(doc) else None
        else:
            doc = doc.get(step) if isinstance(doc, dict) else None
        if doc is None:
            return None
    return doc


class CRDStrategy(GenericStrategy):
    """CustomResourceDefinition: defaults, status, validation (:func:`validate_crd`)."""

    counts_generation = True

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        return default_crd(obj)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        validate_crd(obj, p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        new_spec, old_spec = _spec(obj), _spec(old)
        for field in ("group",):
            if new_spec.get(field) != old_spec.get(field):
                p.invalid(f"spec.{field}", new_spec.get(field), "field is immutable")
        if new_spec.get("scope") != old_spec.get("scope"):
            p.invalid("spec.scope", new_spec.get("scope"), "field is immutable")
        stored = set((old.model_extra or {}).get("status", {}).get("storedVersions") or ())
        have = {v.get("name") for v in new_spec.get("versions") or () if isinstance(v, dict)}
        for gone in sorted(stored - have):
            p.invalid(
                "status.storedVersions[0]",
                gone,
                "must appear in spec.versions",
            )

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        return obj


# --------------------------------------------------------------------------- registration


def sync(store: Store) -> dict[str, str | None]:
    """Register the kinds of the CRDs stored (and unregister those of CRDs gone, whose
    custom resources are deleted). Returns, per CRD, None or why its names are not
    served."""
    crds = store.list(CRD_KIND)
    before = {r.crd: r for r in kinds.custom_rows() if r.owns_store}
    out = customresources.sync(crds)
    for name, r in before.items():
        if name not in out and r.store_kind is not None:
            _delete_all(store, r.store_kind)
            _serve_versions(name, None)
    for name, why in out.items():
        _serve_versions(name, customresources.installed_spec(name) if why is None else None)
    return out


def _delete_all(store: Store, store_kind: str) -> None:
    """Delete every object of a CRD that is gone (the store still knows how to read
    them: their class is the last one registered)."""
    try:
        objs = store.list(store_kind)
    except KeyError:
        return
    for o in objs:
        try:
            store.delete(store_kind, o.key)
        except NotFoundError:
            continue


# --------------------------------------------------------------------------- custom resources


def _version(obj: KubeObject) -> Mapping[str, Any]:
    cls = type(obj)
    if not issubclass(cls, CustomResource):
        return {}
    return cls.version_spec(obj.api_version) or {}


def _schema(obj: KubeObject) -> Mapping[str, Any]:
    return ((_version(obj).get("schema") or {}).get("openAPIV3Schema")) or {}


def _specifies(schema: Mapping[str, Any], key: str) -> bool:
    """Whether the schema's root keeps ``key`` (a property, or every unknown field)."""
    props = schema.get("properties")
    return bool(
        (isinstance(props, Mapping) and key in props)
        or schema.get("x-kubernetes-preserve-unknown-fields")
    )


def has_status(obj: KubeObject) -> bool:
    return "status" in (_version(obj).get("subresources") or {})


#: kube-apiserver's cause when type errors keep the CEL rules from running
_RULES_NOT_CHECKED = (
    'Invalid value: "null": some validation rules were not checked because the object '
    "was invalid; correct the existing errors to complete validation"
)


def _problems(
    d: Mapping[str, Any], schema: Mapping[str, Any], stored: KubeObject | None
) -> list[tuple[str, str]]:
    """The schema's problems of ``d``, then its ``x-kubernetes-validations`` failures
    (``stored``: the version an update replaces, for transition rules). As in
    kube-apiserver, a type error keeps the rules (if the schema has any) from running
    and says so."""
    problems = structural.validate(d, schema)
    if not celrules.has_rules(schema):
        return problems
    if any(" must be of type " in why for _, why in problems):
        return [*problems, ("<nil>", _RULES_NOT_CHECKED)]
    old = stored.to_dict() if stored is not None else None
    return [*problems, *celrules.evaluate(d, schema, old)]


class CustomResourceStrategy(GenericStrategy):
    """Every custom resource: pruned and defaulted from its version's schema, then
    validated against it; a generation counted on every change but metadata (and
    status, with the status subresource)."""

    counts_generation = True

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        d = obj.to_dict()
        schema = _schema(obj)
        pruned, _ = structural.prune(d, schema)
        body = structural.default(pruned, schema)
        if has_status(obj) and obj.metadata.resource_version is None:
            # a create (an update carries the stored version): the main endpoint
            # takes no status when the status subresource serves it
            body.pop("status", None)
        if body == d:
            return obj
        return type(obj).model_validate(body)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        if _version(obj) == {}:
            p.invalid(
                "apiVersion", obj.api_version, "is not served by its CustomResourceDefinition"
            )
        problems = _problems(obj.to_dict(), _schema(obj), stored)
        if problems:  # every one, as kube-apiserver reports them
            raise structural.refusal(problems, obj.ref)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        return None

    def admit(
        self, obj: KubeObject, old: KubeObject | None, alloc: Allocations, journal: Journal
    ) -> tuple[KubeObject, list[str]]:
        """Validated in the version it was written in, stored in the storage version:
        the ``None`` conversion strategy changes nothing but ``apiVersion``."""
        return to_storage(obj), []

    def restatus(
        self, obj: KubeObject, old: KubeObject, alloc: Allocations, journal: Journal
    ) -> KubeObject:
        """A ``/status`` write (``obj``: the stored object with the new status):
        the status pruned and defaulted by the schema's ``status`` part, then the
        object validated against its schema (every problem; the rest is the stored,
        valid object), as kube-apiserver's status strategy does."""
        schema = _schema(obj)
        status_schema = (schema.get("properties") or {}).get("status")
        d = obj.to_dict()
        status = d.get("status")
        if isinstance(status_schema, Mapping) and status is not None:
            pruned, _ = structural.prune(
                {"status": status}, {"properties": {"status": status_schema}}
            )
            d["status"] = structural.default(pruned, {"properties": {"status": status_schema}}).get(
                "status"
            )
        elif not _specifies(schema, "status") and status is not None:
            d.pop("status")  # a schema without status keeps none
        problems = _problems(d, schema, old)
        if problems:
            raise structural.refusal(problems, obj.ref)
        return obj if d == obj.to_dict() else type(obj).model_validate(d)

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        # with the status subresource, ``status`` is a field of the class
        # (CustomResourceWithStatus): the apiserver keeps the stored one
        return obj


# --------------------------------------------------------------------------- versions


def to_storage(obj: KubeObject) -> KubeObject:
    """A custom resource in its CRD's storage version (``None`` conversion: only the
    apiVersion changes)."""
    cls = type(obj)
    if not issubclass(cls, CustomResource):
        return obj
    stored = f"{cls.CRD.get('group')}/{customresources.storage_version(cls.CRD)}"
    return obj if obj.api_version == stored else obj.evolve(api_version=stored)


class NoneConversion:
    """The wire form of a CRD serving several versions with ``conversion.strategy:
    None`` (a :class:`~control.apiserver.http.converted.WireForm`): an object is read in
    the version asked for, its ``apiVersion`` rewritten and nothing else; a body (a
    patch's result included, made from the stored form) is taken in the request's
    version, so that it is pruned, defaulted and validated by that version's schema
    before :meth:`CustomResourceStrategy.admit` stores it in the storage version."""

    def encode(self, res: Resource, obj: KubeObject) -> dict[str, Any]:
        d = obj.to_dict()
        d["apiVersion"] = res.api_version
        return d

    def decode(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "apiVersion": res.api_version} if body.get("kind") == res.kind else body

    def on_create(self, body: dict[str, Any], revision: int) -> dict[str, Any]:
        return body


NONE_CONVERSION = NoneConversion()


def _serve_versions(name: str, spec: Mapping[str, Any] | None) -> None:
    """Register (or drop) the wire form of CRD ``name``: :class:`NoneConversion` when it
    serves more than one version, else none (its objects' JSON is their wire form)."""
    from control.apiserver.http.converted import FORMS  # (it imports the strategies)

    served = [
        v for v in (spec or {}).get("versions") or () if isinstance(v, Mapping) and v.get("served")
    ]
    if len(served) > 1:
        FORMS[name] = NONE_CONVERSION
    else:
        FORMS.pop(name, None)


# --------------------------------------------------------------------------- scale, tables


def _scale_paths(obj: KubeObject) -> Mapping[str, Any]:
    subs = _version(obj).get("subresources") or {}
    scale = subs.get("scale")
    return scale if isinstance(scale, Mapping) else {}


def scale_of(obj: KubeObject) -> dict[str, Any]:
    """The ``autoscaling/v1`` Scale of a custom resource, through its CRD's paths."""
    paths = _scale_paths(obj)
    d = obj.to_dict()
    spec = _at(d, str(paths.get("specReplicasPath")))
    st = _at(d, str(paths.get("statusReplicasPath")))
    sel = _at(d, str(paths.get("labelSelectorPath"))) if paths.get("labelSelectorPath") else None
    status: dict[str, Any] = {"replicas": st if isinstance(st, int) else 0}
    if isinstance(sel, str) and sel:
        status["selector"] = sel
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: v
            for k, v in {
                "name": obj.name,
                "namespace": obj.metadata.namespace,
                "uid": obj.metadata.uid,
                "resourceVersion": obj.metadata.resource_version,
                "creationTimestamp": obj.metadata.creation_timestamp,
            }.items()
            if v is not None
        },
        "spec": {"replicas": spec if isinstance(spec, int) else 0},
        "status": status,
    }


def set_replicas(obj: KubeObject, d: dict[str, Any], replicas: Any) -> None:
    """Write ``replicas`` at the CRD's specReplicasPath of ``d`` (``obj``'s wire form)."""
    steps = _json_path(_scale_paths(obj).get("specReplicasPath")) or ["spec", "replicas"]
    at: Any = d
    for step in steps[:-1]:
        at = at.setdefault(step, {}) if isinstance(at, dict) else {}
    if isinstance(at, dict):
        at[str(steps[-1])] = replicas


def printer_columns(api_version: str, kind: str) -> list[dict[str, Any]] | None:
    """A custom resource version's ``additionalPrinterColumns`` (None for none)."""
    cls = kinds.class_for(api_version, kind)
    if cls is None or not issubclass(cls, CustomResource):
        return None
    cols = (cls.version_spec(api_version) or {}).get("additionalPrinterColumns")
    return [c for c in cols if isinstance(c, dict)] if isinstance(cols, list) else None


def column_value(obj: KubeObject, column: Mapping[str, Any]) -> Any:
    """A printer column's cell before formatting: the value at its jsonPath, as its
    type wants it (None when absent or of another type)."""
    value = _at(obj.to_dict(), str(column.get("jsonPath")))
    typ = column.get("type")
    if value is None:
        return None
    if typ == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if typ == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if typ == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, dict | list):
        import json

        return json.dumps(value, separators=(",", ":"))
    return value if isinstance(value, str) else str(value)


STRATEGY = CRDStrategy()
CUSTOM = CustomResourceStrategy()
