"""The resources the HTTP API serves: names, kinds, scope, verbs, short names, categories.

One table (:data:`RESOURCES`, derived from the kind table :data:`netmodel.kinds.ROWS`)
drives discovery, OpenAPI, routing and RBAC resource names, so they cannot disagree;
a CRD's resources come and go with it. ``store_kind`` names what is stored (``None`` for
resources computed on read: ``endpoints``, the ``svclab.dev`` documents, the access
reviews).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from netmodel import kinds
from netmodel.kinds import ALL_VERBS, KindRow


@dataclass(frozen=True)
class Resource:
    name: str  # plural, as in URLs
    singular: str
    kind: str
    group: str
    version: str
    namespaced: bool
    verbs: tuple[str, ...] = ALL_VERBS
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    store_kind: str | None = None
    #: client model name in the kubernetes Python client (OpenAPI source)
    model: str | None = None
    list_model: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    #: a custom resource's CRD name (``<plural>.<group>``); "" for a built-in kind
    crd: str = ""

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version

    def qualified(self) -> str:
        """``deployments.apps`` (kubectl's resource.group form)."""
        return f"{self.name}.{self.group}" if self.group else self.name


def _resource(r: KindRow) -> Resource:
    return Resource(
        name=r.plural,
        singular=r.singular,
        kind=r.kind,
        group=r.group,
        version=r.version,
        namespaced=r.namespaced,
        verbs=r.verbs,
        short_names=r.short_names,
        categories=r.categories,
        subresources=r.subresources,
        store_kind=r.store_kind,
        model=r.model,
        list_model=(r.model + "List") if r.model else None,
        crd=r.crd,
    )


#: every served resource, one per row of the kind table (:data:`netmodel.kinds.ROWS`);
#: rebuilt in place when rows are registered or unregistered (a CRD's versions)
RESOURCES: list[Resource] = []

#: kinds kubectl resolves by ``Kind`` in a subresource response
SCALE_KIND = "Scale"


def by_path(group: str, version: str, name: str) -> Resource | None:
    return _BY_PATH.get((group, version, name))


_BY_PATH: dict[tuple[str, str, str], Resource] = {}


@kinds.on_change
def _rebuild() -> None:
    RESOURCES[:] = [_resource(r) for r in kinds.ROWS]
    _BY_PATH.clear()
    _BY_PATH.update({(r.group, r.version, r.name): r for r in RESOURCES})


_rebuild()


def group_versions() -> dict[str, list[str]]:
    """group -> versions served (core group is "")."""
    out: dict[str, list[str]] = {}
    for r in RESOURCES:
        vs = out.setdefault(r.group, [])
        if r.version not in vs:
            vs.append(r.version)
    return out


def in_group_version(group: str, version: str) -> list[Resource]:
    return [r for r in RESOURCES if r.group == group and r.version == version]


def for_kind(api_version: str, kind: str) -> Resource | None:
    for r in RESOURCES:
        if r.api_version == api_version and r.kind == kind:
            return r
    return None
