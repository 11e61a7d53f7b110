"""The kind table: every kind svclab knows, once, and the tables derived from it.

One :class:`KindRow` per (group, version, kind) says everything the rest of svclab
needs to know about a kind to store and serve it: its URL names (plural, singular,
short names, categories), scope, verbs and subresources, the kubernetes Python client
model its schema comes from, the path under ``/registry`` where etcd keeps it, the
typed class that decodes it (or ``None``: then a :class:`~netmodel.objects.GenericObject`
class is made for it), and whether ``svclab apply`` and kubectl dumps take it.

Every other kind table is derived from :data:`ROWS`: :data:`KINDS` and
:func:`object_from_dict` here, the schema's ``KNOWN_KINDS``, the dump reader's
``MODELLED_KINDS``, the etcd layout, the informers' plurals and the HTTP resources
(a test checks that they agree). A kind with no networking meaning needs nothing but
its row: it is stored, served, applied and imported through the generic path.

Rows are added and removed at run time (:func:`register`, :func:`unregister`: a
CustomResourceDefinition's versions, see :mod:`netmodel.customresources`): :data:`KINDS`
and the schema's ``KNOWN_KINDS`` are views; the tables other modules derive (etcd
layout, plurals, HTTP resources, discovery, OpenAPI, dump kinds) are rebuilt by the
functions they give :func:`on_change`.

Built-in kinds are keyed by their ``kind`` name in the stores (``store_kind``): two
groups that serve one kind (core/v1 and events.k8s.io/v1 Events) share one store kind.
A custom resource's store kind is ``<plural>.<group>`` (the CRD's name), so that a CR
kind named like a built-in one (``Service`` in ``example.com``) never meets its store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from netmodel.apps import ControllerRevision, StatefulSet
from netmodel.batch import CronJob, Job
from netmodel.daemonset import DaemonSet
from netmodel.objects import (
    ClusterRole,
    ClusterRoleBinding,
    Deployment,
    EndpointSlice,
    Event,
    GenericObject,
    KubeObject,
    Namespace,
    Node,
    Pod,
    ReplicaSet,
    Role,
    RoleBinding,
    Service,
)
from netmodel.replication import ReplicationController

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
READ_VERBS = ("get", "list", "watch")


@dataclass(frozen=True)
class KindRow:
    """One kind as svclab stores and serves it.

    ``etcd``: the resource path under ``/registry`` (``services/specs``), None for kinds
    computed on read (``Endpoints``, the access reviews, svclab's documents): those are
    not stored (``store_kind`` is None). ``store_kind``: the kind name the stores keep it
    under (the row's own kind unless another group's row owns the store).
    ``typed``: the class that decodes it; None for a kind served through the generic path.
    ``apply``: ``svclab apply`` takes it; ``dump``: kubectl dumps bring it in.
    ``owns_store``: this row's class, etcd path and plural are its store kind's; False for
    a row that shares another group's store (events.k8s.io/v1 Events)."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    subresources: tuple[str, ...]
    verbs: tuple[str, ...]
    model: str | None
    etcd: str | None
    store_kind: str | None
    typed: type[KubeObject] | None
    apply: bool
    dump: bool
    #: one row per store kind owns it: its class, etcd path and plural are the store's
    #: (the other rows of that kind, another group's, share it)
    owns_store: bool
    #: a custom resource's version: its CRD's name (``<plural>.<group>``); "" for a
    #: built-in kind
    crd: str = ""
    #: a custom resource's class (every version of a CRD shares one store and class)
    custom_class: type[KubeObject] | None = field(default=None, compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def stored(self) -> bool:
        return self.store_kind is not None


def row(
    group: str,
    version: str,
    kind: str,
    plural: str,
    *,
    typed: type[KubeObject] | None = None,
    namespaced: bool = True,
    singular: str | None = None,
    short: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    sub: tuple[str, ...] = (),
    verbs: tuple[str, ...] = ALL_VERBS,
    model: str | None = None,
    etcd: str | None = "",
    shares_store: bool = False,
    apply: bool = True,
    dump: bool = True,
    store: str | None = None,
) -> KindRow:
    """A row with the usual defaults: stored under ``/registry/<plural>`` as its own
    kind, applied and imported from dumps. ``etcd=None`` makes a kind computed on read
    (not stored, not applied); ``shares_store``: kept in the store of another group's
    row of the same kind; ``store``: its store kind when not its kind name (a custom
    resource's ``<plural>.<group>``)."""
    stored = etcd is not None
    return KindRow(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        singular=singular or kind.lower(),
        namespaced=namespaced,
        short_names=short,
        categories=categories,
        subresources=sub,
        verbs=verbs,
        model=model,
        etcd=(etcd or plural) if stored else None,
        store_kind=(store or kind) if stored else None,
        typed=typed,
        apply=apply and stored,
        dump=dump and stored,
        owns_store=stored and not shares_store,
    )


RBAC = "rbac.authorization.k8s.io"
NETWORKING = "networking.k8s.io"
STORAGE = "storage.k8s.io"
ADMISSION = "admissionregistration.k8s.io"
SVCLAB = "svclab.dev"

#: every kind, in the order discovery lists them
ROWS: list[KindRow] = [
    row(
        "",
        "v1",
        "Namespace",
        "namespaces",
        typed=Namespace,
        namespaced=False,
        short=("ns",),
        sub=("status", "finalize"),
        model="V1Namespace",
    ),
    row(
        "",
        "v1",
        "Node",
        "nodes",
        typed=Node,
        namespaced=False,
        short=("no",),
        sub=("status", "proxy"),
        model="V1Node",
        etcd="minions",
    ),
    row(
        "",
        "v1",
        "Pod",
        "pods",
        typed=Pod,
        short=("po",),
        categories=("all",),
        sub=(
            "status",
            "binding",
            "eviction",
            "exec",
            "attach",
            "log",
            "portforward",
            "proxy",
            "ephemeralcontainers",
        ),
        model="V1Pod",
    ),
    row(
        "",
        "v1",
        "Service",
        "services",
        typed=Service,
        short=("svc",),
        categories=("all",),
        sub=("status", "proxy"),
        model="V1Service",
        etcd="services/specs",
    ),
    row(
        "",
        "v1",
        "Endpoints",
        "endpoints",
        singular="endpoints",
        verbs=READ_VERBS,
        short=("ep",),
        model="V1Endpoints",
        etcd=None,
    ),
    row("", "v1", "ConfigMap", "configmaps", short=("cm",), model="V1ConfigMap"),
    row("", "v1", "Secret", "secrets", model="V1Secret"),
    row(
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        short=("sa",),
        sub=("token",),
        model="V1ServiceAccount",
    ),
    row(
        "",
        "v1",
        "Event",
        "events",
        typed=Event,
        short=("ev",),
        model="CoreV1Event",
        apply=False,
        dump=False,
    ),
    row(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        typed=Deployment,
        short=("deploy",),
        categories=("all",),
        sub=("status", "scale"),
        model="V1Deployment",
    ),
    row(
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        typed=ReplicaSet,
        short=("rs",),
        categories=("all",),
        sub=("status", "scale"),
        model="V1ReplicaSet",
    ),
    row(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        typed=EndpointSlice,
        model="V1EndpointSlice",
    ),
    row(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        short=("ev",),
        model="EventsV1Event",
        shares_store=True,
        apply=False,
        dump=False,
    ),
    row(RBAC, "v1", "Role", "roles", typed=Role, model="V1Role", dump=False),
    row(
        RBAC,
        "v1",
        "ClusterRole",
        "clusterroles",
        typed=ClusterRole,
        namespaced=False,
        model="V1ClusterRole",
        dump=False,
    ),
    row(
        RBAC,
        "v1",
        "RoleBinding",
        "rolebindings",
        typed=RoleBinding,
        model="V1RoleBinding",
        dump=False,
    ),
    row(
        RBAC,
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        typed=ClusterRoleBinding,
        namespaced=False,
        model="V1ClusterRoleBinding",
        dump=False,
    ),
    # core/v1, apps/v1 and batch/v1 workloads and configuration
    row(
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        typed=ReplicationController,
        short=("rc",),
        categories=("all",),
        sub=("status", "scale"),
        model="V1ReplicationController",
        etcd="controllers",
    ),
    row("", "v1", "PodTemplate", "podtemplates", model="V1PodTemplate"),
    row("", "v1", "LimitRange", "limitranges", short=("limits",), model="V1LimitRange"),
    row(
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        short=("quota",),
        sub=("status",),
        model="V1ResourceQuota",
    ),
    row(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        namespaced=False,
        short=("pv",),
        sub=("status",),
        model="V1PersistentVolume",
    ),
    row(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        short=("pvc",),
        sub=("status",),
        model="V1PersistentVolumeClaim",
    ),
    row(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        short=("sts",),
        categories=("all",),
        sub=("status", "scale"),
        typed=StatefulSet,
        model="V1StatefulSet",
    ),
    row(
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        typed=DaemonSet,
        short=("ds",),
        categories=("all",),
        sub=("status",),
        model="V1DaemonSet",
    ),
    row(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        typed=ControllerRevision,
        model="V1ControllerRevision",
    ),
    row(
        "batch",
        "v1",
        "Job",
        "jobs",
        categories=("all",),
        sub=("status",),
        model="V1Job",
        typed=Job,
    ),
    row(
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        short=("cj",),
        categories=("all",),
        sub=("status",),
        model="V1CronJob",
        typed=CronJob,
    ),
    row(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        short=("hpa",),
        categories=("all",),
        sub=("status",),
        model="V2HorizontalPodAutoscaler",
    ),
    row(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        short=("pdb",),
        sub=("status",),
        model="V1PodDisruptionBudget",
    ),
    # networking.k8s.io/v1
    row(
        NETWORKING,
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        short=("netpol",),
        model="V1NetworkPolicy",
    ),
    row(
        NETWORKING,
        "v1",
        "Ingress",
        "ingresses",
        short=("ing",),
        sub=("status",),
        model="V1Ingress",
        etcd="ingress",
    ),
    row(
        NETWORKING,
        "v1",
        "IngressClass",
        "ingressclasses",
        namespaced=False,
        model="V1IngressClass",
    ),
    row(
        NETWORKING,
        "v1",
        "ServiceCIDR",
        "servicecidrs",
        namespaced=False,
        sub=("status",),
        model="V1ServiceCIDR",
    ),
    row(
        NETWORKING,
        "v1",
        "IPAddress",
        "ipaddresses",
        namespaced=False,
        short=("ip",),
        model="V1IPAddress",
    ),
    # the rest of a v1.3x kube-apiserver's groups
    row("coordination.k8s.io", "v1", "Lease", "leases", model="V1Lease"),
    row(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        namespaced=False,
        short=("pc",),
        model="V1PriorityClass",
    ),
    row(
        STORAGE,
        "v1",
        "StorageClass",
        "storageclasses",
        namespaced=False,
        short=("sc",),
        model="V1StorageClass",
    ),
    row(STORAGE, "v1", "CSIDriver", "csidrivers", namespaced=False, model="V1CSIDriver"),
    row(STORAGE, "v1", "CSINode", "csinodes", namespaced=False, model="V1CSINode"),
    row(
        STORAGE,
        "v1",
        "CSIStorageCapacity",
        "csistoragecapacities",
        model="V1CSIStorageCapacity",
    ),
    row(
        STORAGE,
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        namespaced=False,
        sub=("status",),
        model="V1VolumeAttachment",
    ),
    row(
        STORAGE,
        "v1",
        "VolumeAttributesClass",
        "volumeattributesclasses",
        namespaced=False,
        short=("vac",),
        model="V1VolumeAttributesClass",
    ),
    row(
        "node.k8s.io",
        "v1",
        "RuntimeClass",
        "runtimeclasses",
        namespaced=False,
        model="V1RuntimeClass",
    ),
    row(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        namespaced=False,
        short=("csr",),
        sub=("status", "approval"),
        model="V1CertificateSigningRequest",
    ),
    row(
        ADMISSION,
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        namespaced=False,
        model="V1MutatingWebhookConfiguration",
    ),
    row(
        ADMISSION,
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        namespaced=False,
        model="V1ValidatingWebhookConfiguration",
    ),
    row(
        ADMISSION,
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        namespaced=False,
        sub=("status",),
        model="V1ValidatingAdmissionPolicy",
    ),
    row(
        ADMISSION,
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        namespaced=False,
        model="V1ValidatingAdmissionPolicyBinding",
    ),
    row(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "FlowSchema",
        "flowschemas",
        namespaced=False,
        sub=("status",),
        model="V1FlowSchema",
    ),
    row(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "PriorityLevelConfiguration",
        "prioritylevelconfigurations",
        namespaced=False,
        sub=("status",),
        model="V1PriorityLevelConfiguration",
    ),
    row(
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "apiservices",
        namespaced=False,
        sub=("status",),
        model="V1APIService",
        etcd="apiregistration.k8s.io/apiservices",
    ),
    row(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        namespaced=False,
        short=("crd", "crds"),
        sub=("status",),
        model="V1CustomResourceDefinition",
        etcd="apiextensions.k8s.io/customresourcedefinitions",
    ),
    row(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        namespaced=False,
        verbs=("create",),
        model="V1SelfSubjectAccessReview",
        etcd=None,
    ),
    row(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        namespaced=False,
        verbs=("create",),
        model="V1SelfSubjectRulesReview",
        etcd=None,
    ),
    row(
        "authentication.k8s.io",
        "v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
        namespaced=False,
        verbs=("create",),
        model="V1SelfSubjectReview",
        etcd=None,
    ),
    row(
        SVCLAB,
        "v1alpha1",
        "Cluster",
        "clusters",
        namespaced=False,
        verbs=("create", "get", "list", "patch", "update"),
        etcd=None,
    ),
    row(
        SVCLAB,
        "v1alpha1",
        "KubeProxyConfiguration",
        "kubeproxyconfigurations",
        namespaced=False,
        verbs=("get", "list"),
        etcd=None,
    ),
]


def generic_class(
    kind: str, api_version: str, namespaced: bool, store_kind: str | None = None
) -> type[GenericObject]:
    """The class of a kind served through the generic path: a :class:`GenericObject`
    with the kind's name, apiVersion and scope (and its store kind when not its name)."""
    attrs = {
        "__module__": __name__,
        "__doc__": f"{kind} ({api_version}): served through the generic path.",
        "KIND": kind,
        "API_VERSION": api_version,
        "NAMESPACED": namespaced,
        "STORE_KIND": "" if store_kind in (None, kind) else store_kind,
    }
    return type(kind, (GenericObject,), attrs)


#: store kind -> the class its objects decode to (derived from :data:`ROWS`)
KINDS: dict[str, type[KubeObject]] = {}


def _add_class(r: KindRow) -> None:
    if not r.owns_store or r.store_kind is None:
        return
    if r.store_kind in KINDS:
        raise ValueError(f"kind {r.store_kind!r} is stored twice")
    KINDS[r.store_kind] = (
        r.custom_class or r.typed or generic_class(r.kind, r.api_version, r.namespaced)
    )


for _r in ROWS:
    _add_class(_r)

#: (apiVersion, kind) -> class, for the custom resources' rows (a CR kind may be named
#: like a built-in kind of another group: ``object_from_dict`` looks here first)
_CUSTOM: dict[tuple[str, str], type[KubeObject]] = {}

#: called (no arguments) after rows are registered or unregistered
_LISTENERS: list[Callable[[], None]] = []


def on_change(fn: Callable[[], None]) -> Callable[[], None]:
    """Call ``fn`` after every :func:`register` / :func:`unregister` (a module whose
    tables derive from the rows rebuilds them there); returns ``fn``."""
    _LISTENERS.append(fn)
    return fn


def _changed() -> None:
    for fn in list(_LISTENERS):
        fn()


def register(*new: KindRow) -> None:
    """Add rows at run time (a CustomResourceDefinition's versions, one call for all of
    them): their class is made and every derived table is rebuilt. ValueError (and
    nothing added) if a (group, version, kind) or a (group, version, plural) is taken,
    or a store kind is already stored."""
    seen = list(ROWS)
    for n in new:
        for r in seen:
            if (r.group, r.version, r.kind) == (n.group, n.version, n.kind):
                raise ValueError(f"kind {n.kind!r} in {n.api_version} is already known")
            if (r.group, r.version, r.plural) == (n.group, n.version, n.plural):
                raise ValueError(f"resource {n.plural!r} in {n.api_version} is already served")
        if n.owns_store and n.store_kind in KINDS:
            raise ValueError(f"kind {n.store_kind!r} is stored twice")
        seen.append(n)
    for n in new:
        _add_class(n)
        if n.crd and n.custom_class is not None:
            _CUSTOM[(n.api_version, n.kind)] = n.custom_class
        ROWS.append(n)
    _changed()


def unregister(crd: str) -> list[KindRow]:
    """Remove the rows of CustomResourceDefinition ``crd`` (``<plural>.<group>``) and
    their class; every derived table is rebuilt. Returns the rows removed (none if it
    had none). Built-in rows cannot be removed."""
    if not crd:
        raise ValueError("only a CustomResourceDefinition's rows can be removed")
    gone = [r for r in ROWS if r.crd == crd]
    if not gone:
        return []
    ROWS[:] = [r for r in ROWS if r.crd != crd]
    for r in gone:
        if r.owns_store and r.store_kind is not None:
            KINDS.pop(r.store_kind, None)
        _CUSTOM.pop((r.api_version, r.kind), None)
    _changed()
    return gone


def custom_rows(crd: str | None = None) -> list[KindRow]:
    """The custom resources' rows (of one CRD when ``crd`` is given)."""
    return [r for r in ROWS if r.crd and (crd is None or r.crd == crd)]


def rows() -> list[KindRow]:
    """Every row (a copy: add rows with :func:`register`)."""
    return list(ROWS)


def stored_rows() -> list[KindRow]:
    """The rows that own a store kind: one per store kind."""
    return [r for r in ROWS if r.owns_store]


def row_of_store(store_kind: str) -> KindRow:
    """The row that owns the store kind ``store_kind`` (a built-in kind's name, or a
    custom resource's ``<plural>.<group>``); KeyError if none does."""
    for r in ROWS:
        if r.store_kind == store_kind and r.owns_store:
            return r
    raise KeyError(f"unknown kind {store_kind!r}")


def row_of(kind: str) -> KindRow:
    """The row that owns store kind ``kind`` (:func:`row_of_store`)."""
    return row_of_store(kind)


def class_of(api_version: str, kind: str) -> type[KubeObject] | None:
    """The class that decodes ``kind`` in ``api_version`` (:func:`class_for`)."""
    return class_for(api_version, kind)


def class_for(api_version: str, kind: str) -> type[KubeObject] | None:
    """The class of objects of ``kind`` in ``api_version``: a custom resource's, else
    the built-in kind's of that name (None if neither is known)."""
    return _CUSTOM.get((api_version, kind)) or KINDS.get(kind)


def object_from_dict(data: Mapping[str, Any]) -> KubeObject:
    """Build the object for ``data['kind']`` (in ``data['apiVersion']``) with its kind's
    class (typed, generic or a custom resource's); no strict schema check (see
    :mod:`netmodel.schema`). KeyError for an unknown kind."""
    cls = class_for(str(data.get("apiVersion", "")), str(data.get("kind", "")))
    if cls is None:
        raise KeyError(f"unknown kind {data.get('kind')!r}")
    return cls.model_validate(data)
