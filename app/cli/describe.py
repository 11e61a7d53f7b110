"""``svclab describe``: kubectl-describe-like text for one object, with its events.

For pods it adds the scheduler's last decision as a table: every node, the filter
that rejected it (or "fits") and the per-plugin scores, read from the pod's
``svclab.dev/scheduling`` annotation (JSON written by the scheduler).
"""

from __future__ import annotations

import json
from typing import Any

from app.cli.printers import age, format_table
from control.events import timeline
from control.session import Session
from netmodel.objects import EndpointSlice, KubeObject, Node, Pod, Service

SCHEDULING_ANNOTATION = "svclab.dev/scheduling"


def _kv(d: dict[str, str]) -> str:
    return "\n".join(f"{k}={v}" for k, v in sorted(d.items())) or "<none>"


def _block(title: str, value: str, width: int = 18) -> list[str]:
    lines = value.splitlines() or [""]
    out = [f"{title + ':':<{width}}{lines[0]}"]
    out += [" " * width + line for line in lines[1:]]
    return out


def scheduling_table(pod: Pod) -> str | None:
    """The filter/score table of the pod's last scheduling attempt, or None. Each score
    cell reads ``RAW x WEIGHT = WEIGHTED`` (the plugin's 0..100 score, its weight, their
    product) so that TOTAL, the scheduler's weighted sum, is the sum of the row's cells."""
    raw = pod.metadata.annotations.get(SCHEDULING_ANNOTATION)
    if not raw:
        return None
    data: dict[str, Any] = json.loads(raw)
    nodes: list[dict[str, Any]] = data.get("nodes", [])
    weights: dict[str, int] = {str(k): int(v) for k, v in (data.get("weights") or {}).items()}
    plugins: list[str] = sorted({p for n in nodes for p in (n.get("scores") or {})})
    rows = [["NODE", "FILTER", *[p.upper() for p in plugins], "TOTAL"]]
    for n in nodes:
        scores = n.get("scores") or {}
        cells = []
        for p in plugins:
            if p not in scores:
                cells.append("-")
                continue
            w = weights.get(p, 1)
            cells.append(f"{scores[p]}x{w}={int(scores[p]) * w}")
        rows.append([n["node"], n.get("filter") or "fits", *cells, str(n.get("total", "-"))])
    head = f"Result: {data.get('result', '?')}"
    if plugins:
        head += "\nWeights: " + ", ".join(f"{p}={weights.get(p, 1)}" for p in plugins)
        head += " (a score cell is RAW x WEIGHT = WEIGHTED; TOTAL is their sum)"
    return head + "\n" + format_table(rows)


def endpoints_text(slices: list[EndpointSlice], port_name: str, limit: int = 3) -> str:
    """kubectl's Endpoints line for one Service port: the ready endpoints as
    ``IP:PORT``, the first ``limit`` of them, then ``+ N more...``; ``<none>``."""
    pairs: list[str] = []
    for sl in slices:
        port = next((sp.port for sp in sl.ports if (sp.name or "") == port_name), None)
        if port is None:
            continue
        for ep in sl.endpoints:
            if ep.conditions.ready is False:
                continue
            pairs += [f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in ep.addresses]
    if not pairs:
        return "<none>"
    more = len(pairs) - limit
    return ",".join(pairs[:limit]) + (f" + {more} more..." if more > 0 else "")


def describe_object(session: Session, obj: KubeObject) -> str:
    now = session.clock.now()
    lines: list[str] = []
    lines += _block("Name", obj.name)
    if obj.NAMESPACED:
        lines += _block("Namespace", obj.namespace)
    lines += _block("Labels", _kv(obj.labels))
    ann = {k: v for k, v in obj.metadata.annotations.items() if k != SCHEDULING_ANNOTATION}
    lines += _block("Annotations", _kv(ann))
    lines += _block(
        "Created",
        f"{obj.metadata.creation_timestamp} ({age(obj.metadata.creation_timestamp, now)} ago)",
    )
    if isinstance(obj, Pod):
        lines += _block("Node", obj.spec.node_name or "<none>")
        lines += _block(
            "Status", "Terminating" if obj.is_terminating else (obj.status.phase or "Pending")
        )
        lines += _block("IP", obj.status.pod_ip or "<none>")
        ctrl = obj.metadata.controller_ref()
        lines += _block("Controlled By", f"{ctrl.kind}/{ctrl.name}" if ctrl else "<none>")
        lines.append("Containers:")
        for c in obj.spec.containers:
            ports = ", ".join(f"{p.container_port}/{p.protocol}" for p in c.ports) or "<none>"
            lines.append(f"  {c.name}:")
            lines += ["    " + s for s in _block("Image", c.image or "<none>", 14)]
            lines += ["    " + s for s in _block("Ports", ports, 14)]
            lines += ["    " + s for s in _block("Requests", _kv(dict(c.resources.requests)), 14)]
        lines.append("Conditions:")
        for cond in obj.status.conditions:
            lines.append(f"  {cond.type:<18}{cond.status}  {cond.message or ''}".rstrip())
        table = scheduling_table(obj)
        if table:
            lines.append("Scheduling:")
            lines += ["  " + s for s in table.splitlines()]
    elif isinstance(obj, Service):
        s = obj.spec
        lines += _block("Selector", _kv(s.selector or {}))
        lines += _block("Type", obj.service_type)
        lines += _block("IP", s.cluster_ip or "<none>")
        slices = [
            sl
            for sl in session.store.list("EndpointSlice", obj.namespace)
            if isinstance(sl, EndpointSlice)
            and sl.labels.get("kubernetes.io/service-name") == obj.name
        ]
        for p in s.ports:
            lines += _block("Port", f"{p.name or '<unset>'}  {p.port}/{p.protocol}")
            lines += _block("TargetPort", f"{p.target_port}/{p.protocol}")
            if p.node_port:
                lines += _block("NodePort", f"{p.name or '<unset>'}  {p.node_port}/{p.protocol}")
            lines += _block("Endpoints", endpoints_text(slices, p.name or ""))
        lines += _block("Session Affinity", s.session_affinity or "None")
        if s.external_traffic_policy:
            lines += _block("External Traffic Policy", s.external_traffic_policy, 26)
        ingress = [i.ip for i in obj.status.load_balancer.ingress if i.ip]
        if ingress:
            lines += _block("LoadBalancer Ingress", ", ".join(ingress), 22)
    elif isinstance(obj, Node):
        lines += _block(
            "Addresses", "\n".join(f"{a.type}: {a.address}" for a in obj.status.addresses)
        )
        lines += _block("PodCIDR", obj.spec.pod_cidr or "<none>")
        lines += _block("Unschedulable", str(obj.spec.unschedulable).lower())
        taints = [f"{t.key}={t.value or ''}:{t.effect}" for t in obj.spec.taints]
        lines += _block("Taints", "\n".join(taints) or "<none>")
        lines += _block("Allocatable", _kv(dict(obj.status.allocatable)))
        lines.append("Conditions:")
        for cond in obj.status.conditions:
            lines.append(f"  {cond.type:<20}{cond.status}  {cond.reason or ''}".rstrip())
    evs = [
        e
        for e in timeline(session.store)
        if e.involved_object.kind == obj.kind
        and e.involved_object.name == obj.name
        and (e.involved_object.namespace or "") == (obj.namespace if obj.NAMESPACED else "")
    ]
    lines.append("Events:")
    if evs:
        rows = [["REV", "TYPE", "REASON", "FROM", "MESSAGE"]]
        rows += [[str(e.revision), e.type, e.reason, e.source_component, e.message] for e in evs]
        lines += ["  " + s for s in format_table(rows).splitlines()]
    else:
        lines.append("  <none>")
    return "\n".join(lines)
