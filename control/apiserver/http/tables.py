"""Server-side Tables (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``) with
kube-apiserver's columns (pkg/printers/internalversion): the same names, types, order
and priorities (priority 1 = shown by ``-o wide`` only), and cells computed as its
printers compute them from the fields svclab models.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from control.apiserver.http.resources import Resource
from control.apiserver.http.tablecells import (
    AGE,
    CONTAINERS,
    CREATED,
    IMAGES,
    NAME,
    Col,
    age,
    created_at,
)
from control.apiserver.http.tablecells import human_duration as human_duration  # re-exported
from control.apiserver.http.tables_kinds import KIND_TABLES
from netmodel.objects import (
    ClusterRoleBinding,
    Deployment,
    EndpointSlice,
    Event,
    KubeObject,
    Namespace,
    Node,
    Pod,
    ReplicaSet,
    RoleBinding,
    Service,
)


def _join(values: Sequence[str]) -> str:
    return ",".join(values) if values else "<none>"


def _selector(sel: Any) -> str:
    if sel is None:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted(sel.match_labels.items())]
    for e in sel.match_expressions:
        if e.operator in ("In", "NotIn"):
            parts.append(f"{e.key} {e.operator.lower()} ({','.join(sorted(e.values))})")
        elif e.operator == "Exists":
            parts.append(e.key)
        else:
            parts.append(f"!{e.key}")
    return ",".join(parts) if parts else "<none>"


# --------------------------------------------------------------------------- rows


def _pod(p: Pod, now: float) -> list[Any]:
    """kubectl's pod row: READY counts ready containers, STATUS is the last container's
    waiting/terminated reason when it has one (``CrashLoopBackOff``), RESTARTS sums
    ``restartCount`` with the age of the last restart."""
    n = len(p.spec.containers)
    reason = p.status.phase or "Pending"
    extra_reason = (p.status.model_extra or {}).get("reason")
    if extra_reason:
        reason = extra_reason
    statuses = [
        cs
        for cs in (p.status.model_extra or {}).get("containerStatuses") or []
        if isinstance(cs, dict)
    ]
    ready = sum(1 for cs in statuses if cs.get("ready")) if statuses else (n if p.is_ready else 0)
    restarts = sum(int(cs.get("restartCount") or 0) for cs in statuses)
    last: str | None = None
    for cs in reversed(statuses):
        state = cs.get("state") or {}
        finished = ((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        if finished and (last is None or finished > last):
            last = finished
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if p.is_terminating:
        reason = "Terminating"
    restart_text = str(restarts)
    if restarts and last:
        restart_text += f" ({age(last, now)} ago)"
    gates = (p.spec.model_extra or {}).get("readinessGates") or []
    return [
        p.name,
        f"{ready}/{n}",
        reason,
        restart_text,
        age(p.metadata.creation_timestamp, now),
        p.status.pod_ip or "<none>",
        p.spec.node_name or "<none>",
        "<none>",
        "<none>" if not gates else f"0/{len(gates)}",
    ]


def _ports(svc: Service) -> str:
    parts = []
    for pt in svc.spec.ports:
        proto = pt.protocol or "TCP"
        if pt.node_port:
            parts.append(f"{pt.port}:{pt.node_port}/{proto}")
        else:
            parts.append(f"{pt.port}/{proto}")
    return ",".join(parts) if parts else "<none>"


def _external_ip(svc: Service) -> str:
    t = svc.service_type
    if t in ("ClusterIP", "NodePort"):
        return ",".join(svc.spec.external_ips) if svc.spec.external_ips else "<none>"
    if t == "ExternalName":
        return svc.spec.external_name or "<none>"
    if t == "LoadBalancer":
        ips = [i.ip or i.hostname or "" for i in svc.status.load_balancer.ingress]
        ips = [i for i in ips if i] + list(svc.spec.external_ips)
        return ",".join(ips) if ips else "<pending>"
    return "<unknown>"


def _service(s: Service, now: float) -> list[Any]:
    sel = s.spec.selector
    return [
        s.name,
        s.service_type,
        s.spec.cluster_ip or "<none>",
        _external_ip(s),
        _ports(s),
        age(s.metadata.creation_timestamp, now),
        ",".join(f"{k}={v}" for k, v in sorted(sel.items())) if sel else "<none>",
    ]


def _containers(obj: Deployment | ReplicaSet) -> tuple[str, str]:
    cs = obj.spec.template.spec.containers
    return ",".join(c.name for c in cs), ",".join(c.image or "" for c in cs)


def _deployment(d: Deployment, now: float) -> list[Any]:
    names, images = _containers(d)
    st = d.status
    return [
        d.name,
        f"{st.ready_replicas or 0}/{d.spec.replicas if d.spec.replicas is not None else 1}",
        st.updated_replicas or 0,
        st.available_replicas or 0,
        age(d.metadata.creation_timestamp, now),
        names,
        images,
        _selector(d.spec.selector),
    ]


def _replicaset(r: ReplicaSet, now: float) -> list[Any]:
    names, images = _containers(r)
    return [
        r.name,
        r.spec.replicas if r.spec.replicas is not None else 1,
        r.status.replicas or 0,
        r.status.ready_replicas or 0,
        age(r.metadata.creation_timestamp, now),
        names,
        images,
        _selector(r.spec.selector),
    ]


def _node(n: Node, now: float) -> list[Any]:
    ready = next((c for c in n.status.conditions if c.type == "Ready"), None)
    status = "Unknown" if ready is None else ("Ready" if ready.status == "True" else "NotReady")
    if n.spec.unschedulable:
        status += ",SchedulingDisabled"
    roles = sorted(
        k.removeprefix("node-role.kubernetes.io/")
        for k in n.labels
        if k.startswith("node-role.kubernetes.io/")
    )
    info = (n.status.model_extra or {}).get("nodeInfo") or {}
    internal = [a.address for a in n.status.addresses if a.type == "InternalIP"]
    external = [a.address for a in n.status.addresses if a.type == "ExternalIP"]
    return [
        n.name,
        status,
        ",".join(roles) if roles else "<none>",
        age(n.metadata.creation_timestamp, now),
        info.get("kubeletVersion", ""),
        ",".join(internal) if internal else "<none>",
        ",".join(external) if external else "<none>",
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _endpoints_cell(addrs: list[str]) -> str:
    if not addrs:
        return "<none>"
    shown = addrs[:3]
    more = len(addrs) - len(shown)
    return ",".join(shown) + (f" + {more} more..." if more else "")


def _endpointslice(s: EndpointSlice, now: float) -> list[Any]:
    ports = [str(p.port) if p.port is not None else "<unset>" for p in s.ports]
    addrs = [a for ep in s.endpoints for a in ep.addresses]
    return [
        s.name,
        s.address_type,
        ",".join(ports) if ports else "<unset>",
        _endpoints_cell(addrs),
        age(s.metadata.creation_timestamp, now),
    ]


def endpoints_row(d: dict[str, Any], now: float) -> list[Any]:
    addrs = []
    for sub in d.get("subsets", []):
        ports = sub.get("ports") or [{}]
        for a in sub.get("addresses", []):
            for p in ports:
                addrs.append(f"{a['ip']}:{p['port']}" if "port" in p else a["ip"])
    return [
        d["metadata"]["name"],
        _endpoints_cell(addrs),
        age(d["metadata"].get("creationTimestamp"), now),
    ]


def _event(e: Event, now: float) -> list[Any]:
    io = e.involved_object
    obj = f"{(io.kind or '').lower()}/{io.name}"
    ts = e.metadata.creation_timestamp
    return [
        age(ts, now),
        e.type,
        e.reason,
        obj,
        "",
        e.source_component,
        e.message,
        age(ts, now),
        1,
        e.name,
    ]


def _namespace(n: Namespace, now: float) -> list[Any]:
    return [n.name, n.status.get("phase", "Active"), age(n.metadata.creation_timestamp, now)]


def _binding(b: RoleBinding | ClusterRoleBinding, now: float) -> list[Any]:
    ref = b.role_ref
    users = [s.name for s in b.subjects if s.kind == "User"]
    groups = [s.name for s in b.subjects if s.kind == "Group"]
    sas = [f"{s.namespace or ''}/{s.name}" for s in b.subjects if s.kind == "ServiceAccount"]
    return [
        b.name,
        f"{ref.kind}/{ref.name}" if ref else "",
        age(b.metadata.creation_timestamp, now),
        ", ".join(users),
        ", ".join(groups),
        ", ".join(sas),
    ]


def _extra(o: KubeObject, name: str) -> Any:
    return (o.model_extra or {}).get(name)


def _configmap(o: KubeObject, now: float) -> list[Any]:
    n = len(_extra(o, "data") or {}) + len(_extra(o, "binaryData") or {})
    return [o.name, n, age(o.metadata.creation_timestamp, now)]


def _secret(o: KubeObject, now: float) -> list[Any]:
    n = len(_extra(o, "data") or {})
    return [o.name, _extra(o, "type") or "", n, age(o.metadata.creation_timestamp, now)]


def _serviceaccount(o: KubeObject, now: float) -> list[Any]:
    return [o.name, len(_extra(o, "secrets") or []), age(o.metadata.creation_timestamp, now)]


def _default(o: KubeObject, now: float) -> list[Any]:
    return [o.name, age(o.metadata.creation_timestamp, now)]


#: resource name -> (columns, row function)
TABLES: dict[str, tuple[list[Col], Callable[[Any, float], list[Any]]]] = {
    "pods": (
        [
            NAME,
            (
                "Ready",
                "string",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            ("Status", "string", 0, "The aggregate status of the containers in this pod."),
            (
                "Restarts",
                "string",
                0,
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            AGE,
            (
                "IP",
                "string",
                1,
                "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            ),
            (
                "Node",
                "string",
                1,
                "NodeName is a request to schedule this pod onto a specific node.",
            ),
            (
                "Nominated Node",
                "string",
                1,
                "nominatedNodeName is set when this pod preempts other pods on the node.",
            ),
            (
                "Readiness Gates",
                "string",
                1,
                "If specified, all readiness gates will be evaluated for pod readiness.",
            ),
        ],
        _pod,
    ),
    "services": (
        [
            NAME,
            ("Type", "string", 0, "type determines how the Service is exposed."),
            (
                "Cluster-IP",
                "string",
                0,
                "clusterIP is the IP address of the service and is usually assigned randomly.",
            ),
            (
                "External-IP",
                "string",
                0,
                "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
            ),
            ("Port(s)", "string", 0, "The list of ports that are exposed by this service."),
            AGE,
            (
                "Selector",
                "string",
                1,
                "Route service traffic to pods with label keys and values matching this selector.",
            ),
        ],
        _service,
    ),
    "deployments": (
        [
            NAME,
            ("Ready", "string", 0, "Number of the pod with ready state"),
            (
                "Up-to-date",
                "string",
                0,
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
            ),
            (
                "Available",
                "string",
                0,
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
            ),
            AGE,
            CONTAINERS,
            IMAGES,
            (
                "Selector",
                "string",
                1,
                "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
            ),
        ],
        _deployment,
    ),
    "replicasets": (
        [
            NAME,
            ("Desired", "integer", 0, "Replicas is the number of desired replicas."),
            ("Current", "integer", 0, "Replicas is the most recently observed number of replicas."),
            ("Ready", "integer", 0, "The number of ready replicas for this replica set."),
            AGE,
            CONTAINERS,
            IMAGES,
            (
                "Selector",
                "string",
                1,
                "Selector is a label query over pods that should match the replica count.",
            ),
        ],
        _replicaset,
    ),
    "nodes": (
        [
            NAME,
            ("Status", "string", 0, "The status of the node"),
            ("Roles", "string", 0, "The roles of the node"),
            AGE,
            ("Version", "string", 0, "Kubelet Version reported by the node."),
            (
                "Internal-IP",
                "string",
                1,
                "List of addresses reachable to the node. Queried from cloud provider, if available.",
            ),
            (
                "External-IP",
                "string",
                1,
                "List of addresses reachable to the node. Queried from cloud provider, if available.",
            ),
            (
                "OS-Image",
                "string",
                1,
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            ),
            (
                "Kernel-Version",
                "string",
                1,
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            ),
            (
                "Container-Runtime",
                "string",
                1,
                "Container runtime version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            ),
        ],
        _node,
    ),
    "endpoints": (
        [NAME, ("Endpoints", "string", 0, "Endpoints of the service"), AGE],
        endpoints_row,
    ),
    "endpointslices": (
        [
            NAME,
            (
                "AddressType",
                "string",
                0,
                "addressType specifies the type of address carried by this EndpointSlice.",
            ),
            (
                "Ports",
                "string",
                0,
                "ports specifies the list of network ports exposed by each endpoint in this slice.",
            ),
            ("Endpoints", "string", 0, "endpoints is a list of unique endpoints in this slice."),
            AGE,
        ],
        _endpointslice,
    ),
    "events": (
        [
            ("Last Seen", "string", 0, "The last time this event occurred."),
            (
                "Type",
                "string",
                0,
                "Type of this event (Normal, Warning), new types could be added in the future.",
            ),
            ("Reason", "string", 0, "The reason this event was generated."),
            ("Object", "string", 0, "The object this Event is about."),
            ("Subobject", "string", 1, "The subobject this Event is about."),
            ("Source", "string", 1, "The component reporting this event."),
            (
                "Message",
                "string",
                0,
                "A human-readable description of the status of this operation.",
            ),
            ("First Seen", "string", 1, "The first time this event occurred."),
            ("Count", "string", 1, "The number of times this event has occurred."),
            ("Name", "string", 1, "Name must be unique within a namespace."),
        ],
        _event,
    ),
    "namespaces": (
        [NAME, ("Status", "string", 0, "The status of the namespace"), AGE],
        _namespace,
    ),
    "configmaps": ([NAME, ("Data", "string", 0, "Number of entries in data."), AGE], _configmap),
    "secrets": (
        [
            NAME,
            ("Type", "string", 0, "The type of the secret"),
            ("Data", "string", 0, "Number of entries in data."),
            AGE,
        ],
        _secret,
    ),
    "serviceaccounts": (
        [NAME, ("Secrets", "string", 0, "Number of secrets in the service account."), AGE],
        _serviceaccount,
    ),
    "roles": ([NAME, CREATED], created_at),
    "clusterroles": ([NAME, CREATED], created_at),
    "rolebindings": (
        [
            NAME,
            ("Role", "string", 0, "RoleRef is the reference to the role."),
            AGE,
            ("Users", "string", 1, "Users in the roleBinding"),
            ("Groups", "string", 1, "Groups in the roleBinding"),
            ("ServiceAccounts", "string", 1, "ServiceAccounts in the roleBinding"),
        ],
        _binding,
    ),
}
TABLES["clusterrolebindings"] = TABLES["rolebindings"]
TABLES.update(KIND_TABLES)


def _table_of(res: Resource) -> tuple[list[Col], Callable[[Any, float], list[Any]]]:
    if res.crd:  # a custom resource: its CRD's additionalPrinterColumns
        from control.apiserver.http import crtables

        return crtables.table(res)
    return TABLES.get(res.name, ([NAME, AGE], _default))


def columns(res: Resource) -> list[dict[str, Any]]:
    cols = _table_of(res)[0]
    return [
        {
            "name": n,
            "type": t,
            "format": "name" if n == "Name" else "",
            "description": d,
            "priority": p,
        }
        for n, t, p, d in cols
    ]


def age_column(res: Resource) -> int | None:
    """The index of the table's Age column (its cell is the object's age), or None."""
    cols = _table_of(res)[0]
    return next((i for i, c in enumerate(cols) if c is AGE), None)


def row_cells(res: Resource, obj: Any, now: float | None = None) -> list[Any]:
    fn = _table_of(res)[1]
    return fn(obj, time.time() if now is None else now)


def table(
    res: Resource,
    rows: list[tuple[list[Any], dict[str, Any]]],
    *,
    resource_version: str,
    continue_token: str | None = None,
    with_columns: bool = True,
) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table; ``rows`` are (cells, the row's object as sent)."""
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns(res) if with_columns else [],
        "rows": [{"cells": c, "object": o} for c, o in rows],
    }


def partial_metadata(res: Resource, meta: dict[str, Any]) -> dict[str, Any]:
    """The row object kubectl asks for by default (``includeObject=Metadata``)."""
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
