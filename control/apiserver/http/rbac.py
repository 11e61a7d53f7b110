"""Authorization: RBAC (Role, ClusterRole, RoleBinding, ClusterRoleBinding, aggregation)
and kube-apiserver's bootstrap policy.

Contract (Kubernetes' RBAC authorizer):

* A request is allowed when some rule granted to the user allows it. ClusterRoleBindings
  grant their ClusterRole's rules everywhere; RoleBindings grant their Role's (or
  ClusterRole's) rules in their own namespace only. Nothing is ever denied by a rule.
* Subjects: ``User`` (name), ``Group`` (one of the user's groups), ``ServiceAccount``
  (``system:serviceaccount:NS:NAME``).
* A ClusterRole with an ``aggregationRule`` holds the rules of every ClusterRole whose
  labels match one of its selectors (followed transitively); :func:`aggregate` writes
  them into the stored object, as the clusterrole-aggregation controller does.
* :func:`bootstrap_policy` is the default policy every cluster starts with: cluster-admin,
  admin, edit, view (aggregated from ``system:aggregate-to-*``), system:basic-user,
  system:discovery, system:public-info-viewer and the components' roles
  (system:kube-scheduler, system:kube-controller-manager, system:node-proxier,
  system:node, and kube-router's for the NetworkPolicy agent), and their bindings. ``system:masters`` is allowed everything without a
  lookup (kube-apiserver's privileged group).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from control.apiserver.http.authn import User
from netmodel import kinds
from netmodel.objects import (
    ClusterRole,
    ClusterRoleBinding,
    KubeObject,
    ObjectMeta,
    PolicyRule,
    Role,
    RoleBinding,
    RoleRef,
    Subject,
)

MASTERS = "system:masters"
RBAC_GROUP = "rbac.authorization.k8s.io"
AGG = "rbac.authorization.k8s.io/aggregate-to-"
BOOTSTRAP_LABEL = {"kubernetes.io/bootstrapping": "rbac-defaults"}


@dataclass(frozen=True, slots=True)
class Attributes:
    """One request as the authorizers see it (kube's authorizer.Attributes)."""

    user: User
    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True


def _matches(values: Sequence[str], want: str) -> bool:
    return "*" in values or want in values


def rule_allows(rule: PolicyRule, a: Attributes) -> bool:
    if not _matches(rule.verbs, a.verb):
        return False
    if not a.resource_request:
        for url in rule.non_resource_ur_ls:
            if url == "*" or url == a.path or (url.endswith("*") and a.path.startswith(url[:-1])):
                return True
        return False
    if not _matches(rule.api_groups, a.group):
        return False
    combined = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    ok = False
    for r in rule.resources:
        if (
            r in ("*", combined)
            or (a.subresource and r == f"*/{a.subresource}")
            or (not a.subresource and r == a.resource)
        ):
            ok = True
        if ok:
            break
    if not ok:
        return False
    return not rule.resource_names or (bool(a.name) and a.name in rule.resource_names)


def subject_matches(s: Subject, user: User, binding_ns: str) -> bool:
    if s.kind == "User":
        return s.name == user.name
    if s.kind == "Group":
        return s.name in user.groups
    if s.kind == "ServiceAccount":
        ns = s.namespace or binding_ns
        return user.name == f"system:serviceaccount:{ns}:{s.name}"
    return False


class RBAC:
    """Evaluates requests against the RBAC objects of a store-like reader (anything
    with ``list(kind, namespace=None)``)."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def _cluster_roles(self) -> dict[str, ClusterRole]:
        return {o.name: o for o in self.reader.list("ClusterRole") if isinstance(o, ClusterRole)}

    def rules_for(self, user: User, namespace: str) -> list[PolicyRule]:
        """Every rule granted to ``user`` in ``namespace`` ("" = cluster-wide only)."""
        croles = self._cluster_roles()
        out: list[PolicyRule] = []
        for b in self.reader.list("ClusterRoleBinding"):
            if not isinstance(b, ClusterRoleBinding) or b.role_ref is None:
                continue
            if any(subject_matches(s, user, "") for s in b.subjects):
                role = croles.get(b.role_ref.name)
                if role is not None:
                    out += resolved_rules(role, croles)
        if namespace:
            for b in self.reader.list("RoleBinding", namespace):
                if not isinstance(b, RoleBinding) or b.role_ref is None:
                    continue
                if not any(subject_matches(s, user, b.namespace) for s in b.subjects):
                    continue
                if b.role_ref.kind == "ClusterRole":
                    role = croles.get(b.role_ref.name)
                    if role is not None:
                        out += resolved_rules(role, croles)
                else:
                    try:
                        r = self.reader.get("Role", f"{namespace}/{b.role_ref.name}")
                    except Exception:
                        continue
                    if isinstance(r, Role):
                        out += r.rules
        return out

    def allowed(self, a: Attributes) -> bool:
        if MASTERS in a.user.groups:
            return True
        return any(rule_allows(r, a) for r in self.rules_for(a.user, a.namespace))


def resolved_rules(role: ClusterRole, croles: dict[str, ClusterRole]) -> list[PolicyRule]:
    """A ClusterRole's rules, with its aggregation followed (transitively)."""
    if role.aggregation_rule is None:
        return list(role.rules)
    seen: set[str] = set()
    out: list[PolicyRule] = []

    def walk(r: ClusterRole) -> None:
        if r.name in seen:
            return
        seen.add(r.name)
        if r.aggregation_rule is None:
            out.extend(r.rules)
            return
        for other in croles.values():
            if other.name == r.name:
                continue
            if any(sel.matches(other.labels) for sel in r.aggregation_rule.cluster_role_selectors):
                walk(other)

    walk(role)
    return _dedupe(out)


def _dedupe(rules: Iterable[PolicyRule]) -> list[PolicyRule]:
    out: list[PolicyRule] = []
    for r in rules:
        if r not in out:
            out.append(r)
    return out


def aggregate(reader: Any) -> list[ClusterRole]:
    """The aggregating ClusterRoles whose stored rules differ from what their selectors
    gather, with the rules filled in (the caller writes them)."""
    croles = {o.name: o for o in reader.list("ClusterRole") if isinstance(o, ClusterRole)}
    changed = []
    for role in croles.values():
        if role.aggregation_rule is None:
            continue
        want = resolved_rules(role, croles)
        if want != list(role.rules):
            changed.append(role.evolve(rules=want))
    return changed


# --------------------------------------------------------------------------- bootstrap


def _rule(verbs: str, groups: str, resources: str, names: str = "") -> PolicyRule:
    return PolicyRule(
        verbs=verbs.split(),
        api_groups=[("" if g == "core" else g) for g in groups.split()],
        resources=resources.split(),
        resource_names=names.split(),
    )


def _namespace_content_rules() -> list[PolicyRule]:
    """What the namespace controller reads and deletes: every namespaced kind stored
    (from the kind table), one rule per API group."""
    by_group: dict[str, list[str]] = {}
    for r in kinds.stored_rows():
        if r.namespaced:
            by_group.setdefault(r.group or "core", []).append(r.plural)
    return [
        _rule(READ + " delete deletecollection", g, " ".join(plurals))
        for g, plurals in sorted(by_group.items())
    ]


def _urls(verbs: str, urls: str) -> PolicyRule:
    return PolicyRule(verbs=verbs.split(), non_resource_ur_ls=urls.split())


READ = "get list watch"
WRITE = "create delete deletecollection patch update"


def _cr(
    name: str, rules: list[PolicyRule], labels: dict[str, str] | None = None, agg: str | None = None
) -> ClusterRole:
    meta = ObjectMeta(
        name=name,
        labels={**BOOTSTRAP_LABEL, **(labels or {})},
        annotations={"rbac.authorization.kubernetes.io/autoupdate": "true"},
    )
    if agg is not None:
        from netmodel.objects import AggregationRule
        from netmodel.selectors import LabelSelector

        return ClusterRole(
            metadata=meta,
            rules=[],
            aggregation_rule=AggregationRule(
                cluster_role_selectors=[LabelSelector(match_labels={AGG + agg: "true"})]
            ),
        )
    return ClusterRole(metadata=meta, rules=rules)


def _crb(name: str, role: str, subjects: list[tuple[str, str]]) -> ClusterRoleBinding:
    return ClusterRoleBinding(
        metadata=ObjectMeta(
            name=name,
            labels=dict(BOOTSTRAP_LABEL),
            annotations={"rbac.authorization.kubernetes.io/autoupdate": "true"},
        ),
        role_ref=RoleRef(api_group=RBAC_GROUP, kind="ClusterRole", name=role),
        subjects=[Subject(kind=k, name=n, api_group=RBAC_GROUP) for k, n in subjects],
    )


def bootstrap_policy() -> list[KubeObject]:
    """The default ClusterRoles and ClusterRoleBindings (see module docstring)."""
    workloads = "pods services endpoints"
    apps = "deployments deployments/scale replicasets replicasets/scale"
    view_rules = [
        _rule(
            READ,
            "core",
            "pods pods/status services services/status endpoints events namespaces namespaces/status",
        ),
        _rule(READ, "apps", apps + " deployments/status replicasets/status"),
        _rule(READ, "discovery.k8s.io", "endpointslices"),
        _rule(READ, "events.k8s.io", "events"),
    ]
    edit_rules = [
        _rule(WRITE, "core", workloads),
        _rule(WRITE, "apps", apps),
        _rule(WRITE, "discovery.k8s.io", "endpointslices"),
    ]
    admin_rules = [
        _rule(WRITE + " " + READ, RBAC_GROUP, "roles rolebindings"),
    ]
    return [
        _cr(
            "cluster-admin",
            [_rule("*", "*", "*"), _urls("*", "*")],
            {"kubernetes.io/bootstrapping": "rbac-defaults"},
        ),
        _cr("admin", [], None, agg="admin"),
        _cr("edit", [], {AGG + "admin": "true"}, agg="edit"),
        _cr("view", [], {AGG + "edit": "true"}, agg="view"),
        _cr("system:aggregate-to-view", view_rules, {AGG + "view": "true"}),
        _cr("system:aggregate-to-edit", edit_rules, {AGG + "edit": "true"}),
        _cr("system:aggregate-to-admin", admin_rules, {AGG + "admin": "true"}),
        _cr(
            "system:basic-user",
            [
                _rule(
                    "create",
                    "authorization.k8s.io",
                    "selfsubjectaccessreviews selfsubjectrulesreviews",
                ),
                _rule("create", "authentication.k8s.io", "selfsubjectreviews"),
            ],
        ),
        _cr(
            "system:discovery",
            [
                _urls(
                    "get",
                    "/api /api/* /apis /apis/* /healthz /livez /readyz /openapi /openapi/* /version /version/",
                )
            ],
        ),
        _cr(
            "system:public-info-viewer",
            [_urls("get", "/healthz /livez /readyz /version /version/")],
        ),
        _cr(  # kube's: the health checks and the metrics, for Prometheus' identity
            "system:monitoring",
            [
                _urls(
                    "get",
                    "/healthz /healthz/* /livez /livez/* /readyz /readyz/* /metrics /metrics/slis",
                )
            ],
        ),
        _cr(
            "system:kube-scheduler",
            [
                _rule(READ, "core", "nodes namespaces services endpoints"),
                _rule(READ + " delete", "core", "pods"),
                _rule("create", "core", "bindings pods/binding"),
                _rule("patch update", "core", "pods/status"),
                _rule("create patch update", "core", "events"),
                _rule("create patch update", "events.k8s.io", "events"),
                _rule(READ, "apps", "replicasets"),
                # leader election (kube's role: create, and get/update its own Lease)
                _rule("create", "coordination.k8s.io", "leases"),
                _rule("get update", "coordination.k8s.io", "leases", "kube-scheduler"),
            ],
        ),
        _cr(
            "system:kube-controller-manager",
            [
                _rule(
                    READ + " " + WRITE,
                    "core",
                    "pods pods/status services services/status endpoints events nodes nodes/status namespaces namespaces/status namespaces/finalize",
                ),
                _rule(READ + " " + WRITE, "core", "replicationcontrollers replicationcontrollers/status"),
                # the StatefulSet controller's claims (volumeClaimTemplates, retention)
                _rule(READ + " " + WRITE, "core", "persistentvolumeclaims"),
                _rule(
                    READ + " " + WRITE,
                    "apps",
                    "deployments deployments/status deployments/scale replicasets replicasets/status replicasets/scale"
                    " statefulsets statefulsets/status controllerrevisions",
                ),
                _rule(
                    READ + " " + WRITE, "apps", "daemonsets daemonsets/status controllerrevisions"
                ),
                _rule(READ + " " + WRITE, "discovery.k8s.io", "endpointslices"),
                # the Job, CronJob and TTL-after-finished controllers
                _rule(
                    READ + " " + WRITE,
                    "batch",
                    "jobs jobs/status jobs/finalizers cronjobs cronjobs/status cronjobs/finalizers",
                ),
                _rule("create patch update", "events.k8s.io", "events"),
                _rule(READ + " patch update", RBAC_GROUP, "clusterroles"),
                # the ServiceCIDR controller
                _rule(
                    READ + " patch update",
                    "networking.k8s.io",
                    "servicecidrs servicecidrs/status servicecidrs/finalizers",
                ),
                _rule(READ, "networking.k8s.io", "ipaddresses"),
                # the disruption controller (its PodDisruptionBudgets' status)
                _rule(
                    READ + " update",
                    "policy",
                    "poddisruptionbudgets poddisruptionbudgets/status",
                ),
                # the namespace controller empties a Terminating namespace of every kind
                *_namespace_content_rules(),
                # leader election (kube's role: create, and get/update its own Lease)
                _rule("create", "coordination.k8s.io", "leases"),
                _rule("get update", "coordination.k8s.io", "leases", "kube-controller-manager"),
            ],
        ),
        # svclab's component supervisor (serve --components processes) follows the Nodes
        # to start and stop each node's kubelet and kube-proxy processes
        _cr("svclab:component-supervisor", [_rule(READ, "core", "nodes")]),
        # Calico's CNI plugin: its IPAM is cluster-wide, so it reads every pod's address
        _cr("calico-cni-plugin", [_rule(READ, "core", "pods")]),
        _cr(
            "system:node-proxier",
            [
                _rule(READ, "core", "services endpoints nodes"),
                _rule(READ, "discovery.k8s.io", "endpointslices"),
                _rule("create patch update", "core", "events"),
                _rule("create patch update", "events.k8s.io", "events"),
            ],
        ),
        # the NetworkPolicy agent (control.agents.netpolicy), as kube-router's DaemonSet
        # manifests grant its ServiceAccount: read the policies, the pods they select and
        # the namespaces by label, and its node; it records its syncs as Events. And,
        # for svclab's own ClusterNetworkPolicy extension (kube-router has none), read
        # the network-policy-api's ClusterNetworkPolicies
        _cr(
            "kube-router",
            [
                _rule(READ, "core", "pods namespaces nodes"),
                _rule(READ, "networking.k8s.io", "networkpolicies"),
                _rule(READ, "policy.networking.k8s.io", "clusternetworkpolicies"),
                _rule("create patch update", "core", "events"),
                _rule("create patch update", "events.k8s.io", "events"),
            ],
        ),
        _cr(
            "system:node",
            [
                _rule(READ, "core", "services endpoints"),
                _rule(READ, "discovery.k8s.io", "endpointslices"),
                _rule("create patch update", "core", "events"),
            ],
        ),
        _crb("cluster-admin", "cluster-admin", [("Group", MASTERS)]),
        _crb("system:basic-user", "system:basic-user", [("Group", "system:authenticated")]),
        _crb("system:discovery", "system:discovery", [("Group", "system:authenticated")]),
        _crb(
            "system:public-info-viewer",
            "system:public-info-viewer",
            [("Group", "system:authenticated"), ("Group", "system:unauthenticated")],
        ),
        _crb("system:monitoring", "system:monitoring", [("Group", "system:monitoring")]),
        _crb("system:kube-scheduler", "system:kube-scheduler", [("User", "system:kube-scheduler")]),
        _crb(
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            [("User", "system:kube-controller-manager")],
        ),
        _crb("system:node-proxier", "system:node-proxier", [("User", "system:kube-proxy")]),
        _crb(
            "svclab:component-supervisor",
            "svclab:component-supervisor",
            [("User", "system:svclab-supervisor")],
        ),
        _crb(
            "kube-router",
            "kube-router",
            [("User", "system:serviceaccount:kube-system:kube-router")],
        ),
        _crb(
            "calico-cni-plugin",
            "calico-cni-plugin",
            [("User", "system:serviceaccount:kube-system:calico-cni-plugin")],
        ),
    ]


def reconcile_bootstrap(have: KubeObject, want: KubeObject) -> KubeObject | None:
    """kube-apiserver's bootstrap-policy reconciliation of a stored default object
    annotated ``rbac.authorization.kubernetes.io/autoupdate: "true"``: missing rules or
    subjects are added (nothing a user added is removed). None when nothing is missing."""
    if have.metadata.annotations.get("rbac.authorization.kubernetes.io/autoupdate") != "true":
        return None
    if isinstance(have, ClusterRole) and isinstance(want, ClusterRole):
        if have.aggregation_rule is not None:
            return None
        missing = [r for r in want.rules if r not in have.rules]
        return have.evolve(rules=[*have.rules, *missing]) if missing else None
    if isinstance(have, ClusterRoleBinding) and isinstance(want, ClusterRoleBinding):
        missing_s = [s for s in want.subjects if s not in have.subjects]
        return have.evolve(subjects=[*have.subjects, *missing_s]) if missing_s else None
    return None


def forbidden_message(a: Attributes) -> str:
    """kube-apiserver's RBAC refusal text (without the ``X is forbidden:`` prefix)."""
    if not a.resource_request:
        return f'User "{a.user.name}" cannot {a.verb} path "{a.path}"'
    res = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
    return f'User "{a.user.name}" cannot {a.verb} resource "{res}" in API group "{a.group}" {where}'
