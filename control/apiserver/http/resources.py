"""The resources the HTTP API serves: names, kinds, scope, verbs, short names, categories.

One table (:data:`RESOURCES`) drives discovery, OpenAPI, routing and RBAC resource
names, so they cannot disagree. ``store_kind`` names what is stored (``None`` for
resources computed on read: ``endpoints``, the ``svclab.dev`` documents, the access
reviews).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
READ_VERBS = ("get", "list", "watch")


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

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        return self.group_version

    def qualified(self) -> str:
        """``deployments.apps`` (kubectl's resource.group form)."""
        return f"{self.name}.{self.group}" if self.group else self.name


def _r(
    name: str,
    kind: str,
    group: str,
    version: str,
    *,
    namespaced: bool = True,
    singular: str | None = None,
    verbs: tuple[str, ...] = ALL_VERBS,
    short: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    sub: tuple[str, ...] = (),
    stored: bool = True,
    model: str | None = None,
) -> Resource:
    return Resource(
        name=name,
        singular=singular or kind.lower(),
        kind=kind,
        group=group,
        version=version,
        namespaced=namespaced,
        verbs=verbs,
        short_names=short,
        categories=categories,
        subresources=sub,
        store_kind=kind if stored else None,
        model=model,
        list_model=(model + "List") if model else None,
    )


RBAC = "rbac.authorization.k8s.io"
SVCLAB = "svclab.dev"

RESOURCES: tuple[Resource, ...] = (
    _r(
        "namespaces",
        "Namespace",
        "",
        "v1",
        namespaced=False,
        short=("ns",),
        sub=("status",),
        model="V1Namespace",
    ),
    _r("nodes", "Node", "", "v1", namespaced=False, short=("no",), sub=("status",), model="V1Node"),
    _r(
        "pods",
        "Pod",
        "",
        "v1",
        short=("po",),
        categories=("all",),
        sub=("status", "binding"),
        model="V1Pod",
    ),
    _r(
        "services",
        "Service",
        "",
        "v1",
        short=("svc",),
        categories=("all",),
        sub=("status",),
        model="V1Service",
    ),
    _r(
        "endpoints",
        "Endpoints",
        "",
        "v1",
        singular="endpoints",
        verbs=READ_VERBS,
        short=("ep",),
        stored=False,
        model="V1Endpoints",
    ),
    _r("events", "Event", "", "v1", short=("ev",), model="CoreV1Event"),
    _r(
        "deployments",
        "Deployment",
        "apps",
        "v1",
        short=("deploy",),
        categories=("all",),
        sub=("status", "scale"),
        model="V1Deployment",
    ),
    _r(
        "replicasets",
        "ReplicaSet",
        "apps",
        "v1",
        short=("rs",),
        categories=("all",),
        sub=("status", "scale"),
        model="V1ReplicaSet",
    ),
    _r("endpointslices", "EndpointSlice", "discovery.k8s.io", "v1", model="V1EndpointSlice"),
    _r("events", "Event", "events.k8s.io", "v1", short=("ev",), model="EventsV1Event"),
    _r("roles", "Role", RBAC, "v1", model="V1Role"),
    _r("clusterroles", "ClusterRole", RBAC, "v1", namespaced=False, model="V1ClusterRole"),
    _r("rolebindings", "RoleBinding", RBAC, "v1", model="V1RoleBinding"),
    _r(
        "clusterrolebindings",
        "ClusterRoleBinding",
        RBAC,
        "v1",
        namespaced=False,
        model="V1ClusterRoleBinding",
    ),
    _r(
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        "authorization.k8s.io",
        "v1",
        namespaced=False,
        verbs=("create",),
        stored=False,
        model="V1SelfSubjectAccessReview",
    ),
    _r(
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        "authorization.k8s.io",
        "v1",
        namespaced=False,
        verbs=("create",),
        stored=False,
        model="V1SelfSubjectRulesReview",
    ),
    _r(
        "selfsubjectreviews",
        "SelfSubjectReview",
        "authentication.k8s.io",
        "v1",
        namespaced=False,
        verbs=("create",),
        stored=False,
        model="V1SelfSubjectReview",
    ),
    _r(
        "clusters",
        "Cluster",
        SVCLAB,
        "v1alpha1",
        namespaced=False,
        verbs=("create", "get", "list", "patch", "update"),
        stored=False,
    ),
    _r(
        "kubeproxyconfigurations",
        "KubeProxyConfiguration",
        SVCLAB,
        "v1alpha1",
        namespaced=False,
        verbs=("get", "list"),
        stored=False,
    ),
)

#: kinds kubectl resolves by ``Kind`` in a subresource response
SCALE_KIND = "Scale"


def by_path(group: str, version: str, name: str) -> Resource | None:
    return _BY_PATH.get((group, version, name))


_BY_PATH: dict[tuple[str, str, str], Resource] = {
    (r.group, r.version, r.name): r for r in RESOURCES
}


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
