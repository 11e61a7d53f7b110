"""Custom resources: the kind-table rows a CustomResourceDefinition brings, at run time.

A CRD (``apiextensions.k8s.io/v1``) names a group, a kind, its URL names and its
versions; :func:`rows_for` turns it into one :class:`~netmodel.kinds.KindRow` per
served version, and :func:`install` registers them (:func:`netmodel.kinds.register`),
so that the stores, the HTTP API, discovery, OpenAPI and ``svclab apply`` serve the
kind. Every version of a CRD shares one store kind, the CRD's name
``<plural>.<group>``, and one class (a :class:`CustomResource` subclass that carries the
CRD, from which the apiserver takes the schemas, subresources and printer columns);
etcd keeps the objects under ``/registry/<group>/<plural>/``, as kube-apiserver does.

:func:`sync` makes the registered rows those of a list of stored CRDs (what the
apiserver calls after a CRD is written or deleted, and on a start from a persistent
store, before any custom resource is read). A CRD whose names another CRD or a
built-in kind already serves is not installed (kube-apiserver's NamesAccepted False).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from netmodel import kinds
from netmodel.kinds import ALL_VERBS, KindRow
from netmodel.objects import GenericObject, KubeObject

GROUP = "apiextensions.k8s.io"
CRD_KIND = "CustomResourceDefinition"


class CustomResource(GenericObject):
    """An object of a custom resource: apiVersion, kind and metadata typed, everything
    else kept as it came. Each CRD gets its own subclass (:func:`class_for_crd`) whose
    ``CRD`` is the definition's ``spec`` (as stored when it was installed)."""

    CRD: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def version_spec(cls, api_version: str) -> Mapping[str, Any] | None:
        """The CRD's entry of ``spec.versions`` for ``api_version`` (None if it has none)."""
        version = api_version.rpartition("/")[2]
        for v in cls.CRD.get("versions") or ():
            if isinstance(v, Mapping) and v.get("name") == version:
                return v
        return None


class CustomResourceWithStatus(CustomResource):
    """A custom resource whose CRD serves the ``status`` subresource: ``status`` is a
    field of its own (the apiserver keeps the stored one on updates of the main
    endpoint, and ``/status`` writes nothing else)."""

    status: Any = None


def has_status_subresource(spec: Mapping[str, Any]) -> bool:
    """Whether a version of the CRD serves ``status`` as a subresource."""
    return any(
        isinstance(v, Mapping) and "status" in (v.get("subresources") or {})
        for v in spec.get("versions") or ()
    )


def names(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec.names`` with kube-apiserver's defaults: ``singular`` the kind in lower
    case, ``listKind`` ``<Kind>List``."""
    n = dict(spec.get("names") or {})
    kind = str(n.get("kind") or "")
    n.setdefault("singular", kind.lower())
    n.setdefault("listKind", kind + "List")
    return n


def storage_version(spec: Mapping[str, Any]) -> str:
    for v in spec.get("versions") or ():
        if isinstance(v, Mapping) and v.get("storage"):
            return str(v.get("name"))
    return ""


def class_for_crd(crd_name: str, spec: Mapping[str, Any]) -> type[CustomResource]:
    """The class of a CRD's objects (named after its kind, fixed to its storage
    version's apiVersion, its scope and its store kind ``<plural>.<group>``)."""
    n = names(spec)
    group = str(spec.get("group") or "")
    attrs = {
        "__module__": __name__,
        "__doc__": f"{n['kind']} ({group}): a custom resource of {crd_name}.",
        "KIND": str(n["kind"]),
        "API_VERSION": f"{group}/{storage_version(spec)}",
        "NAMESPACED": spec.get("scope") != "Cluster",
        "STORE_KIND": crd_name,
        "CRD": spec,
    }
    base = CustomResourceWithStatus if has_status_subresource(spec) else CustomResource
    return type(str(n["kind"]), (base,), attrs)


def rows_for(crd_name: str, spec: Mapping[str, Any]) -> list[KindRow]:
    """One row per served version of a (valid) CRD; the storage version's row owns the
    store."""
    n = names(spec)
    group = str(spec.get("group") or "")
    plural = str(n.get("plural") or "")
    cls = class_for_crd(crd_name, spec)
    stored = storage_version(spec)
    out: list[KindRow] = []
    versions = [v for v in spec.get("versions") or () if isinstance(v, Mapping)]
    # the storage version first: it owns the store kind
    versions.sort(key=lambda v: v.get("name") != stored)
    for v in versions:
        if not v.get("served"):
            continue
        subs = v.get("subresources") or {}
        out.append(
            KindRow(
                group=group,
                version=str(v.get("name")),
                kind=str(n["kind"]),
                plural=plural,
                singular=str(n["singular"]),
                namespaced=spec.get("scope") != "Cluster",
                short_names=tuple(n.get("shortNames") or ()),
                categories=tuple(n.get("categories") or ()),
                subresources=tuple(s for s in ("status", "scale") if s in subs),
                verbs=ALL_VERBS,
                model=None,
                etcd=f"{group}/{plural}",
                store_kind=crd_name,
                typed=None,
                apply=True,
                dump=True,
                owns_store=v.get("name") == stored or not any(r.owns_store for r in out),
                crd=crd_name,
                custom_class=cls,
            )
        )
    return out


def install(crd_name: str, spec: Mapping[str, Any]) -> str | None:
    """Register (or re-register, after a change) a CRD's rows. Returns None, or why its
    names are not accepted (another kind serves them): then nothing of it is served."""
    old = kinds.unregister(crd_name)
    try:
        kinds.register(*rows_for(crd_name, spec))
    except ValueError as e:
        if old:  # keep serving what was served before the refused change
            kinds.register(*old)
        return str(e)
    return None


def uninstall(crd_name: str) -> None:
    kinds.unregister(crd_name)


def installed_spec(crd_name: str) -> Mapping[str, Any] | None:
    """The spec a CRD's rows were made from (None if none are registered)."""
    for r in kinds.custom_rows(crd_name):
        if r.custom_class is not None and issubclass(r.custom_class, CustomResource):
            return r.custom_class.CRD
    return None


def sync(crds: Iterable[KubeObject]) -> dict[str, str | None]:
    """Make the registered custom rows those of ``crds`` (the stored CRDs): a CRD that
    is gone is uninstalled, a new or changed one installed. Returns, per CRD name,
    None or why its names are not accepted."""
    wanted: dict[str, Mapping[str, Any]] = {}
    for crd in crds:
        spec = (crd.model_extra or {}).get("spec") if crd.kind == CRD_KIND else None
        if isinstance(spec, Mapping) and crd.metadata.deletion_timestamp is None:
            wanted[crd.name] = spec
    # rows registered by :func:`provisional` for a CRD not stored yet stay
    for name in {r.crd for r in kinds.custom_rows()} & _SYNCED - set(wanted):
        uninstall(name)
        _SYNCED.discard(name)
    out: dict[str, str | None] = {}
    for name, spec in sorted(wanted.items()):
        out[name] = None if installed_spec(name) == spec else install(name, spec)
        _SYNCED.add(name)
    return out


#: the CRDs whose rows :func:`sync` installed from a store
_SYNCED: set[str] = set()


def provisional(crd: KubeObject) -> None:
    """Serve a CRD read from a manifest before it is stored, so that the custom
    resources after it in the same files decode (``svclab apply -f`` of a CRD and its
    objects); the apiserver still validates it, and :func:`sync` takes over once it is
    stored. A CRD whose kinds are registered already, or that names no kind, is left."""
    spec = (crd.model_extra or {}).get("spec")
    if not isinstance(spec, Mapping) or kinds.custom_rows(crd.name):
        return
    n = spec.get("names")
    if not isinstance(n, Mapping) or not n.get("kind") or not n.get("plural"):
        return
    if not storage_version(spec) or crd.name != f"{n.get('plural')}.{spec.get('group')}":
        return
    install(crd.name, spec)
