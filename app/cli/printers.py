"""kubectl-like tables for ``svclab get`` (plain text, columns padded with 3 spaces)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the models are only read here; importing them costs the CLI's start-up
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
    """``svc`` -> ``Service``; ``pod/web`` style prefixes are split by the caller."""
    return KIND_ALIASES.get(text.lower()) or (text if text in KIND_ALIASES.values() else None)


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
    """The ``get`` table of ``objs`` (``name_prefix``: ``get all``'s ``pod/`` etc.)."""
    base, extra, row = COLUMNS[kind]
    header = base + (extra if wide else [])
    namespaced = objs[0].NAMESPACED if objs else kind not in ("Node", "Namespace")
    if all_namespaces and namespaced:
        header = ["NAMESPACE", *header]
    rows = [header]
    for o in objs:
        r = row(o, now, wide)
        r[0] = name_prefix + r[0]
        rows.append([o.namespace, *r] if all_namespaces and namespaced else r)
    return format_table(rows)
