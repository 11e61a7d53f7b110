"""kubectl-like tables for ``svclab get`` (plain text, columns padded with 3 spaces):
svclab's own columns for the kinds the network is made of (:data:`COLUMNS`), the
apiserver's Table columns (each kind's strategy) for every other kind of the kind
table."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the models are only read here; importing them costs the CLI's start-up
    from netmodel.kinds import KindRow
    from netmodel.objects import (
        Deployment,
        EndpointSlice,
        Event,
        KubeObject,
        Node,
        Pod,
        ReplicaSet,
        Service,
    )

#: user-facing names (kubectl's, incl. short names) -> kind
KIND_ALIASES: dict[str, str] = {}
for _kind, _names in {
    "Node": ("nodes", "node", "no"),
    "Pod": ("pods", "pod", "po"),
    "Service": ("services", "service", "svc"),
    "EndpointSlice": ("endpointslices", "endpointslice", "eps"),
    "Deployment": ("deployments", "deployment", "deploy"),
    "ReplicaSet": ("replicasets", "replicaset", "rs"),
    "Namespace": ("namespaces", "namespace", "ns"),
    "Event": ("events", "event", "ev"),
}.items():
    for _n in _names:
        KIND_ALIASES[_n] = _kind


def resolve_kind(text: str) -> str | None:
    """The store kind ``text`` names, as kubectl resolves a resource: ``svc`` ->
    ``Service``, ``cm`` / ``configmaps`` / ``configmap`` / ``ConfigMap`` ->
    ``ConfigMap``, ``statefulsets.apps`` -> ``StatefulSet``: a plural, singular, short
    name or kind of any stored row of the kind table (:mod:`netmodel.kinds`), optionally
    qualified by its group. None if no row matches. ``pod/web`` style prefixes are split
    by the caller."""
    hit = KIND_ALIASES.get(text.lower()) or (text if text in KIND_ALIASES.values() else None)
    if hit is not None:
        return hit
    row = _row_named(text)
    return row.store_kind if row is not None else None


def _row_named(text: str) -> KindRow | None:
    from netmodel import kinds

    name, _, group = text.partition(".")
    low = name.lower()
    for r in kinds.rows():
        if r.store_kind is None or not r.owns_store or (group and r.group != group):
            continue
        if low in (r.plural, r.singular, r.kind.lower(), *r.short_names):
            return r
    return None


def plural_of(kind: str) -> str:
    """The URL plural of store kind ``kind`` (``configmaps``), as kubectl names it in
    messages; ``kind`` in lower case + ``s`` for a kind no row owns."""
    from netmodel import kinds

    try:
        return kinds.row_of_store(kind).plural
    except KeyError:
        return kind.lower() + "s"


def qualified_plural_of(kind: str) -> str:
    """kube-apiserver's name of store kind ``kind``'s resource in a NotFound:
    ``deployments.apps``, ``ippools.crd.projectcalico.org``; a core kind's bare plural
    (``configmaps``)."""
    from netmodel import kinds

    try:
        row = kinds.row_of_store(kind)
    except KeyError:
        return plural_of(kind)
    return f"{row.plural}.{row.group}" if row.group else row.plural


def is_namespaced(kind: str) -> bool:
    """Whether objects of store kind ``kind`` live in namespaces (its row's scope)."""
    from netmodel import kinds

    try:
        return kinds.row_of_store(kind).namespaced
    except KeyError:
        return kind not in ("Node", "Namespace")


def age(ts: str | None, now: float) -> str:
    """kubectl's short duration: 45s, 12m, 3h, 5d."""
    if not ts:
        return "<unknown>"
    t = _dt.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC).timestamp()
    s = max(0, int(now - t))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _pod_row(p: Pod, now: float, wide: bool) -> list[str]:
    n = len(p.spec.containers)
    ready = n if p.is_ready else 0
    status = "Terminating" if p.is_terminating else (p.status.phase or "Pending")
    row = [p.name, f"{ready}/{n}", status, "0", age(p.metadata.creation_timestamp, now)]
    if wide:
        row += [p.status.pod_ip or "<none>", p.spec.node_name or "<none>", "<none>", "<none>"]
    return row


def _ports(s: Service) -> str:
    parts = []
    for port in s.spec.ports:
        text = f"{port.port}"
        if port.node_port:
            text += f":{port.node_port}"
        parts.append(f"{text}/{port.protocol or 'TCP'}")
    return ",".join(parts) or "<none>"


def _svc_row(s: Service, now: float, wide: bool) -> list[str]:
    ext = [i.ip or i.hostname or "" for i in s.status.load_balancer.ingress] + list(
        s.spec.external_ips
    )
    if ext:
        external = ",".join(e for e in ext if e)
    elif s.service_type == "LoadBalancer":
        external = "<pending>"
    else:
        external = "<none>"
    row = [
        s.name,
        s.service_type,
        s.spec.cluster_ip or "<none>",
        external,
        _ports(s),
        age(s.metadata.creation_timestamp, now),
    ]
    if wide:
        sel = s.spec.selector
        row.append(",".join(f"{k}={v}" for k, v in sel.items()) if sel else "<none>")
    return row


def _node_row(n: Node, now: float, wide: bool) -> list[str]:
    ready = any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)
    status = "Ready" if ready else "NotReady"
    if n.spec.unschedulable:
        status += ",SchedulingDisabled"
    roles = ",".join(
        sorted(k.split("/", 1)[1] for k in n.labels if k.startswith("node-role.kubernetes.io/"))
    )
    info = node_info(n)
    version = info.get("kubeletVersion") or "svclab"
    row = [n.name, status, roles or "<none>", age(n.metadata.creation_timestamp, now), version]
    if wide:
        external = [a.address for a in n.status.addresses if a.type == "ExternalIP"]
        row += [
            ",".join(n.internal_ips) or "<none>",
            ",".join(external) or "<none>",
            info.get("osImage") or "<none>",
            info.get("kernelVersion") or "<none>",
            info.get("containerRuntimeVersion") or "<none>",
        ]
    return row


def node_info(n: Node) -> dict[str, str]:
    """The node's ``status.nodeInfo`` (kubelet's report of its OS, kernel, runtime), as
    stored (the model keeps it as an extra field), or {} when the node has none."""
    extra = n.status.model_extra or {}
    info = extra.get("nodeInfo") or extra.get("node_info") or {}
    return {str(k): str(v) for k, v in info.items()} if isinstance(info, dict) else {}


def _eps_row(e: EndpointSlice, now: float, wide: bool) -> list[str]:
    ports = ",".join(str(p.port) for p in e.ports if p.port is not None) or "<unset>"
    addrs = [a for ep in e.endpoints for a in ep.addresses]
    shown = ",".join(addrs[:3]) + (f" + {len(addrs) - 3} more..." if len(addrs) > 3 else "")
    return [
        e.name,
        e.address_type,
        ports,
        shown or "<unset>",
        age(e.metadata.creation_timestamp, now),
    ]


def _deploy_row(d: Deployment, now: float, wide: bool) -> list[str]:
    want = d.spec.replicas if d.spec.replicas is not None else 1
    row = [
        d.name,
        f"{d.status.ready_replicas or 0}/{want}",
        str(d.status.updated_replicas or 0),
        str(d.status.available_replicas or 0),
        age(d.metadata.creation_timestamp, now),
    ]
    if wide:
        cs = d.spec.template.spec.containers
        row += [
            ",".join(c.name for c in cs),
            ",".join(c.image or "" for c in cs),
            ",".join(f"{k}={v}" for k, v in d.spec.selector.match_labels.items()),
        ]
    return row


def _rs_row(r: ReplicaSet, now: float, wide: bool) -> list[str]:
    want = r.spec.replicas if r.spec.replicas is not None else 1
    return [
        r.name,
        str(want),
        str(r.status.replicas or 0),
        str(r.status.ready_replicas or 0),
        age(r.metadata.creation_timestamp, now),
    ]


def _event_row(e: Event, now: float, wide: bool) -> list[str]:
    io = e.involved_object
    obj = f"{(io.kind or '').lower()}/{io.name}"
    return [str(e.revision), e.source_component, e.type, e.reason, obj, e.message]


Row = Callable[["KubeObject", float, bool], list[str]]

COLUMNS: dict[str, tuple[list[str], list[str], Row]] = {
    "Pod": (
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"],
        _pod_row,  # type: ignore[dict-item]
    ),
    "Service": (
        ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"],
        ["SELECTOR"],
        _svc_row,  # type: ignore[dict-item]
    ),
    "Node": (
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        ["INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"],
        _node_row,  # type: ignore[dict-item]
    ),
    "EndpointSlice": (
        ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"],
        [],
        _eps_row,  # type: ignore[dict-item]
    ),
    "Deployment": (
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        ["CONTAINERS", "IMAGES", "SELECTOR"],
        _deploy_row,  # type: ignore[dict-item]
    ),
    "ReplicaSet": (
        ["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        [],
        _rs_row,  # type: ignore[dict-item]
    ),
    "Event": (
        ["REV", "COMPONENT", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        [],
        _event_row,  # type: ignore[dict-item]
    ),
    "Namespace": (
        ["NAME", "STATUS", "AGE"],
        [],
        lambda o, now, wide: [o.name, "Active", age(o.metadata.creation_timestamp, now)],
    ),
}


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by three spaces (the last column unpadded)."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths[:-1], strict=True)] + [r[-1]]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


def table(
    kind: str,
    objs: Sequence[KubeObject],
    *,
    now: float,
    wide: bool,
    all_namespaces: bool,
    name_prefix: str = "",
) -> str:
    """The ``get`` table of ``objs`` (``name_prefix``: ``get all``'s ``pod/`` etc.):
    svclab's own columns for the kinds of :data:`COLUMNS`, else the columns of the HTTP
    Table its kind's strategy gives (:func:`server_table`)."""
    if kind not in COLUMNS:
        header, rows = server_table(kind, objs, now=now, wide=wide)
    else:
        base, extra, row = COLUMNS[kind]
        header = base + (extra if wide else [])
        rows = [row(o, now, wide) for o in objs]
    namespaced = objs[0].NAMESPACED if objs else is_namespaced(kind)
    if all_namespaces and namespaced:
        header = ["NAMESPACE", *header]
    out = [header]
    for o, r in zip(objs, rows, strict=True):
        r[0] = name_prefix + r[0]
        out.append([o.namespace, *r] if all_namespaces and namespaced else r)
    return format_table(out)


def server_table(
    kind: str, objs: Sequence[KubeObject], *, now: float, wide: bool
) -> tuple[list[str], list[list[str]]]:
    """The header and rows kubectl prints from the apiserver's Table for store kind
    ``kind``: its strategy's columns and cells (kube-apiserver's columns,
    :mod:`control.apiserver.http.tables`; NAME and AGE for a kind without columns of
    its own), names in upper case, the priority-1 columns only when ``wide``, a missing
    cell as ``<none>``."""
    from control.apiserver.http.resources import by_path
    from control.apiserver.strategy import strategy_of
    from netmodel import kinds

    r = kinds.row_of_store(kind)
    res = by_path(r.group, r.version, r.plural)
    assert res is not None, f"no resource serves {kind}"
    strategy = strategy_of(kind)
    cols = strategy.table_columns(res)
    shown = [i for i, c in enumerate(cols) if wide or not c.get("priority")]
    header = [str(cols[i]["name"]).upper() for i in shown]
    rows = []
    for o in objs:
        cells = strategy.table_row(res, o, now)
        rows.append([_cell(cells[i]) if i < len(cells) else "<none>" for i in shown])
    return header, rows


def _cell(value: object) -> str:
    """A Table cell as kubectl prints it."""
    if value is None:
        return "<none>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
