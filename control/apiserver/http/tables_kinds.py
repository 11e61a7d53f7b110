"""Table columns and rows of the kinds issue 23 added (workloads, batch, policy,
networking, storage, scheduling, node, coordination, certificates, admissionregistration,
flowcontrol, apiregistration, apiextensions), with kube-apiserver's column names, types,
priorities and descriptions (pkg/printers/internalversion; kube-aggregator for
APIServices; the default ``Name``/``Created At`` table for CRDs) and cells computed as its
printers compute them, with ``Wide`` set as the apiserver's table convertor sets it.

Rows read the object's wire form (``to_dict``), so they serve a kind whether it goes
through the generic path or has a typed class. :data:`KIND_TABLES` maps a resource plural
to (columns, row function); :mod:`.tables` merges it into ``TABLES``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from control.apiserver.http.tablecells import (
    AGE,
    CONTAINERS,
    CREATED,
    IMAGES,
    NAME,
    Col,
    age,
    created_at,
    human_duration,
    parse_timestamp,
)


def _wire(o: Any) -> dict[str, Any]:
    return o if isinstance(o, dict) else o.to_dict()


def _at(d: Any, *path: str) -> Any:
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _name(d: dict[str, Any]) -> str:
    return str(_at(d, "metadata", "name") or "")


def _age(d: dict[str, Any], now: float) -> str:
    return age(_at(d, "metadata", "creationTimestamp"), now)


def _labels_text(labels: Any) -> str:
    """labels.FormatLabels: ``k=v`` sorted by key, ``<none>`` when empty."""
    if not labels:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _selector_text(sel: Any) -> str:
    """metav1.FormatLabelSelector of a selector's wire form: its requirements sorted by
    key (``a=b``, ``k in (x,y)``, ``k notin (x)``, ``k``, ``!k``); ``<none>`` when it
    selects nothing or is unset."""
    if not isinstance(sel, dict):
        return "<none>"
    reqs: list[tuple[str, str]] = [
        (k, f"{k}={v}") for k, v in (sel.get("matchLabels") or {}).items()
    ]
    for e in sel.get("matchExpressions") or []:
        key, op = e.get("key", ""), e.get("operator", "")
        values = ",".join(sorted(e.get("values") or []))
        if op == "In":
            reqs.append((key, f"{key} in ({values})"))
        elif op == "NotIn":
            reqs.append((key, f"{key} notin ({values})"))
        elif op == "Exists":
            reqs.append((key, key))
        elif op == "DoesNotExist":
            reqs.append((key, f"!{key}"))
    reqs.sort(key=lambda r: r[0])
    return ",".join(t for _, t in reqs) or "<none>"


def _template_containers(pod_spec: Any) -> tuple[str, str]:
    cs = _at(pod_spec, "containers") or []
    return ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)


def _int(v: Any) -> int:
    return int(v) if isinstance(v, int | float | str) and str(v).lstrip("-").isdigit() else 0


def _bool_ptr(v: Any) -> str:
    """printBoolPtr."""
    return "<unset>" if v is None else ("True" if v else "False")


def _quantity_or(v: Any, unset: str) -> str:
    return unset if v is None else str(v)


def _replicationcontroller(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    names, images = _template_containers(_at(d, "spec", "template", "spec"))
    replicas = _at(d, "spec", "replicas")
    return [
        _name(d),
        1 if replicas is None else _int(replicas),
        _int(_at(d, "status", "replicas")),
        _int(_at(d, "status", "readyReplicas")),
        _age(d, now),
        names,
        images,
        _labels_text(_at(d, "spec", "selector")),
    ]


def _podtemplate(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    names, images = _template_containers(_at(d, "template", "spec"))
    return [_name(d), names, images, _labels_text(_at(d, "template", "metadata", "labels"))]


def _daemonset(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    st = d.get("status") or {}
    pod_spec = _at(d, "spec", "template", "spec")
    names, images = _template_containers(pod_spec)
    return [
        _name(d),
        _int(st.get("desiredNumberScheduled")),
        _int(st.get("currentNumberScheduled")),
        _int(st.get("numberReady")),
        _int(st.get("updatedNumberScheduled")),
        _int(st.get("numberAvailable")),
        _labels_text(_at(pod_spec, "nodeSelector")),
        _age(d, now),
        names,
        images,
        _selector_text(_at(d, "spec", "selector")),
    ]


def _statefulset(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    names, images = _template_containers(_at(d, "spec", "template", "spec"))
    replicas = _at(d, "spec", "replicas")
    desired = 1 if replicas is None else _int(replicas)
    return [
        _name(d),
        f"{_int(_at(d, 'status', 'readyReplicas'))}/{desired}",
        _age(d, now),
        names,
        images,
    ]


def _controller_of(d: dict[str, Any]) -> str:
    """The controller owner as ``kind.group/name`` in lower case (``daemonset.apps/x``)."""
    for ref in _at(d, "metadata", "ownerReferences") or []:
        if ref.get("controller"):
            group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            kind = str(ref.get("kind", ""))
            gk = f"{kind}.{group}" if group else kind
            return f"{gk.lower()}/{ref.get('name', '')}" if gk else str(ref.get("name", ""))
    return "<none>"


def _controllerrevision(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    return [_name(d), _controller_of(d), _int(d.get("revision")), _age(d, now)]


def _has_condition(d: dict[str, Any], type_: str) -> bool:
    for c in _at(d, "status", "conditions") or []:
        if c.get("type") == type_:
            return c.get("status") == "True"
    return False


def _job(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec, st = d.get("spec") or {}, d.get("status") or {}
    succeeded = _int(st.get("succeeded"))
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{_int(spec['completions'])}"
    elif _int(spec.get("parallelism")) > 1:
        completions = f"{succeeded}/1 of {_int(spec['parallelism'])}"
    else:
        completions = f"{succeeded}/1"
    start, done = parse_timestamp(st.get("startTime")), parse_timestamp(st.get("completionTime"))
    took = "" if start is None else human_duration((now if done is None else done) - start)
    if _has_condition(d, "Complete"):
        status = "Complete"
    elif _has_condition(d, "Failed"):
        status = "Failed"
    elif _at(d, "metadata", "deletionTimestamp"):
        status = "Terminating"
    elif _has_condition(d, "Suspended"):
        status = "Suspended"
    elif _has_condition(d, "FailureTarget"):
        status = "FailureTarget"
    else:
        status = "Running"
    names, images = _template_containers(_at(spec, "template", "spec"))
    return [
        _name(d),
        status,
        completions,
        took,
        _age(d, now),
        names,
        images,
        _selector_text(spec.get("selector")),
    ]


def _cronjob(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec, st = d.get("spec") or {}, d.get("status") or {}
    last = st.get("lastScheduleTime")
    job_spec = _at(spec, "jobTemplate", "spec")
    names, images = _template_containers(_at(job_spec, "template", "spec"))
    return [
        _name(d),
        spec.get("schedule", ""),
        spec.get("timeZone") or "<none>",
        _bool_ptr(spec.get("suspend")),
        len(st.get("active") or []),
        age(last, now) if last else "<none>",
        _age(d, now),
        names,
        images,
        _selector_text(_at(job_spec, "selector")),
    ]


def _hpa_metric(spec: dict[str, Any], status: dict[str, Any] | None) -> str:
    """One metric of formatHPAMetrics."""
    t = spec.get("type")
    src_key = {
        "External": "external",
        "Pods": "pods",
        "Object": "object",
        "Resource": "resource",
        "ContainerResource": "containerResource",
    }.get(str(t))
    if src_key is None:
        return "<unknown type>"
    src = spec.get(src_key) or {}
    target = src.get("target") or {}
    cur_src = (status or {}).get(src_key)
    current_d = (cur_src or {}).get("current") or {}
    if t == "Pods":
        cur = current_d.get("averageValue", "<unknown>") if cur_src else "<unknown>"
        return f"{cur}/{target.get('averageValue')}"
    if t in ("External", "Object"):
        if target.get("averageValue") is not None:
            cur = current_d.get("averageValue") if cur_src else None
            return f"{cur or '<unknown>'}/{target['averageValue']} (avg)"
        cur = current_d.get("value", "<unknown>") if cur_src else "<unknown>"
        return f"{cur}/{target.get('value')}"
    name = src.get("name", "")
    if target.get("averageValue") is not None:
        cur = current_d.get("averageValue", "<unknown>") if cur_src else "<unknown>"
        return f"{name}: {cur}/{target['averageValue']}"
    util = current_d.get("averageUtilization") if cur_src else None
    cur = "<unknown>" if util is None else f"{util}%"
    want = target.get("averageUtilization")
    return f"{name}: {cur}/{'<auto>' if want is None else f'{want}%'}"


def _hpa(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec, st = d.get("spec") or {}, d.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    metrics = spec.get("metrics") or []
    statuses = st.get("currentMetrics") or []
    if not metrics:
        targets = "<none>"
    else:
        cells = [
            _hpa_metric(m, statuses[i] if i < len(statuses) else None)
            for i, m in enumerate(metrics)
        ]
        targets = ", ".join(cells[:2]) + (f" + {len(cells) - 2} more..." if len(cells) > 2 else "")
    mn = spec.get("minReplicas")
    return [
        _name(d),
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        targets,
        "<unset>" if mn is None else str(mn),
        _int(spec.get("maxReplicas")),
        _int(st.get("currentReplicas")),
        _age(d, now),
    ]


def _pdb(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec = d.get("spec") or {}
    return [
        _name(d),
        _quantity_or(spec.get("minAvailable"), "N/A"),
        _quantity_or(spec.get("maxUnavailable"), "N/A"),
        _int(_at(d, "status", "disruptionsAllowed")),
        _age(d, now),
    ]


def _networkpolicy(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    return [_name(d), _selector_text(_at(d, "spec", "podSelector")), _age(d, now)]


def _ingress_hosts(rules: list[dict[str, Any]]) -> str:
    """formatHosts: the first three rules' hosts, ``*`` when none names one."""
    hosts = [r["host"] for r in rules[:3] if r.get("host")]
    if not hosts:
        return "*"
    more = len(rules) - 3
    return ",".join(hosts) + (f" + {more} more..." if more > 0 else "")


def _lb_addresses(ingress: list[dict[str, Any]]) -> str:
    return ",".join(sorted({i.get("ip") or i.get("hostname") or "" for i in ingress} - {""}))


def _ingress(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec = d.get("spec") or {}
    return [
        _name(d),
        spec.get("ingressClassName") or "<none>",
        _ingress_hosts(spec.get("rules") or []),
        _lb_addresses(_at(d, "status", "loadBalancer", "ingress") or []),
        "80, 443" if spec.get("tls") else "80",
        _age(d, now),
    ]


def _ingressclass(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    p = _at(d, "spec", "parameters")
    params = "<none>"
    if isinstance(p, dict):
        params = p.get("kind", "") + (f".{p['apiGroup']}" if p.get("apiGroup") else "")
        params += "/" + p.get("name", "")
    return [_name(d), _at(d, "spec", "controller") or "", params, _age(d, now)]


def _servicecidr(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    return [_name(d), ",".join(_at(d, "spec", "cidrs") or []), _age(d, now)]


def _ipaddress(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    ref = _at(d, "spec", "parentRef")
    parent = "<none>"
    if isinstance(ref, dict):
        res, group = ref.get("resource", ""), ref.get("group", "")
        parent = (f"{res}.{group}" if group else res).lower()
        if ref.get("namespace"):
            parent += "/" + ref["namespace"]
        parent += "/" + ref.get("name", "")
    return [_name(d), parent]  # kube-apiserver's IPAddress table has no Age column


_ACCESS_MODES = (
    ("ReadWriteOnce", "RWO"),
    ("ReadOnlyMany", "ROX"),
    ("ReadWriteMany", "RWX"),
    ("ReadWriteOncePod", "RWOP"),
)


def _access_modes(modes: list[str] | None) -> str:
    """GetAccessModesAsString: short names in a fixed order."""
    have = set(modes or [])
    return ",".join(short for mode, short in _ACCESS_MODES if mode in have)


def _storage_class(d: dict[str, Any]) -> str:
    ann = _at(d, "metadata", "annotations") or {}
    return (
        ann.get("volume.beta.kubernetes.io/storage-class")
        or _at(d, "spec", "storageClassName")
        or ""
    )


def _phase(d: dict[str, Any]) -> str:
    if _at(d, "metadata", "deletionTimestamp"):
        return "Terminating"
    return str(_at(d, "status", "phase") or "")


def _pv(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec = d.get("spec") or {}
    ref = spec.get("claimRef")
    claim = f"{ref.get('namespace', '')}/{ref.get('name', '')}" if isinstance(ref, dict) else ""
    return [
        _name(d),
        str(_at(spec, "capacity", "storage") or "0"),
        _access_modes(spec.get("accessModes")),
        spec.get("persistentVolumeReclaimPolicy", ""),
        _phase(d),
        claim,
        _storage_class(d),
        spec.get("volumeAttributesClassName") or "<unset>",
        _at(d, "status", "reason") or "",
        _age(d, now),
        spec.get("volumeMode") or "<unset>",
    ]


def _pvc(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec = d.get("spec") or {}
    bound = bool(spec.get("volumeName"))
    return [
        _name(d),
        _phase(d),
        spec.get("volumeName", ""),
        str(_at(d, "status", "capacity", "storage") or "0") if bound else "",
        _access_modes(_at(d, "status", "accessModes")) if bound else "",
        _storage_class(d),
        spec.get("volumeAttributesClassName") or "<unset>",
        _age(d, now),
        spec.get("volumeMode") or "<unset>",
    ]


def _resourcequota(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    hard = _at(d, "status", "hard") or {}
    used = _at(d, "status", "used") or {}
    requests: list[str] = []
    limits: list[str] = []
    for res in sorted(hard):
        text = f"{res}: {used.get(res, '0')}/{hard[res]}"
        (limits if res.split(".")[0] == "limits" and "." in res else requests).append(text)
    return [_name(d), ", ".join(requests), ", ".join(limits), _age(d, now)]


def _priorityclass(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    return [
        _name(d),
        _int(d.get("value")),
        bool(d.get("globalDefault")),
        _age(d, now),
        d.get("preemptionPolicy") or "",
    ]


def _default_class(d: dict[str, Any], key: str) -> bool:
    ann = _at(d, "metadata", "annotations") or {}
    return ann.get(key) == "true"


def _storageclass(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    name = _name(d)
    if _default_class(d, "storageclass.kubernetes.io/is-default-class") or _default_class(
        d, "storageclass.beta.kubernetes.io/is-default-class"
    ):
        name += " (default)"
    return [
        name,
        d.get("provisioner", ""),
        d.get("reclaimPolicy") or "Delete",
        d.get("volumeBindingMode") or "Immediate",
        bool(d.get("allowVolumeExpansion")),
        _age(d, now),
    ]


def _volumeattributesclass(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    name = _name(d)
    if _default_class(d, "resource.kubernetes.io/is-default-class"):
        name += " (default)"
    return [name, d.get("driverName", ""), _age(d, now)]


def _csidriver(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec = d.get("spec") or {}
    tokens = spec.get("tokenRequests")
    attach = spec.get("attachRequired")
    return [
        _name(d),
        True if attach is None else bool(attach),
        bool(spec.get("podInfoOnMount")),
        bool(spec.get("storageCapacity")),
        "<unset>" if tokens is None else ",".join(t.get("audience", "") for t in tokens),
        bool(spec.get("requiresRepublish")),
        ",".join(spec.get("volumeLifecycleModes") or []) or "<none>",
        _age(d, now),
    ]


def _csinode(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    return [_name(d), len(_at(d, "spec", "drivers") or []), _age(d, now)]


def _csistoragecapacity(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    return [_name(d), d.get("storageClassName", ""), _quantity_or(d.get("capacity"), "<unset>")]


def _volumeattachment(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec = d.get("spec") or {}
    return [
        _name(d),
        spec.get("attacher", ""),
        _at(spec, "source", "persistentVolumeName") or "",
        spec.get("nodeName", ""),
        bool(_at(d, "status", "attached")),
        _age(d, now),
    ]


def _runtimeclass(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    return [_name(d), d.get("handler", ""), _age(d, now)]


def _lease(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    return [_name(d), _at(d, "spec", "holderIdentity") or "", _age(d, now)]


def _csr(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec = d.get("spec") or {}
    types = {c.get("type") for c in _at(d, "status", "conditions") or []}
    status = "Denied" if "Denied" in types else "Approved" if "Approved" in types else "Pending"
    if "Failed" in types:
        status += ",Failed"
    if _at(d, "status", "certificate"):
        status += ",Issued"
    secs = spec.get("expirationSeconds")
    return [
        _name(d),
        _age(d, now),
        spec.get("signerName") or "<none>",
        spec.get("username", ""),
        "<none>" if secs is None else human_duration(_int(secs)),
        status,
    ]


def _webhooks(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    return [_name(d), len(d.get("webhooks") or []), _age(d, now)]


def _admissionpolicy(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    pk = _at(d, "spec", "paramKind")
    kind = f"{pk.get('apiVersion', '')}/{pk.get('kind', '')}" if isinstance(pk, dict) else "<unset>"
    return [_name(d), len(_at(d, "spec", "validations") or []), kind, _age(d, now)]


def _admissionpolicybinding(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    pr = _at(d, "spec", "paramRef")
    param = "<unset>"
    if isinstance(pr, dict):
        if pr.get("name"):
            param = f"{pr.get('namespace') or '*'}/{pr['name']}"
        elif pr.get("selector") is not None:
            param = _selector_text(pr["selector"])
    return [_name(d), _at(d, "spec", "policyName") or "", param, _age(d, now)]


def _flowschema(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec = d.get("spec") or {}
    method = _at(spec, "distinguisherMethod", "type") or "<none>"
    missing = "?"
    for c in _at(d, "status", "conditions") or []:
        if c.get("type") == "Dangling":
            missing = c.get("status", "")
            break
    return [
        _name(d),
        _at(spec, "priorityLevelConfiguration", "name") or "",
        _int(spec.get("matchingPrecedence")),
        method,
        _age(d, now),
        missing,
    ]


def _prioritylevel(o: Any, now: float) -> list[Any]:
    d = _wire(o)
    spec = d.get("spec") or {}
    limited = spec.get("limited")
    ncs: Any = "<none>"
    queues: Any = "<none>"
    hand: Any = "<none>"
    qlen: Any = "<none>"
    if isinstance(limited, dict):
        ncs = _int(limited.get("nominalConcurrencyShares"))
        q = _at(limited, "limitResponse", "queuing")
        if isinstance(q, dict):
            queues = _int(q.get("queues"))
            hand = _int(q.get("handSize"))
            qlen = _int(q.get("queueLengthLimit"))
    return [_name(d), spec.get("type", ""), ncs, queues, hand, qlen, _age(d, now)]


def _apiservice(o: Any, now: float) -> list[Any]:
    """kube-aggregator's printer: the Service as ``ns/name`` or ``Local``, the
    Available condition (``True``, or ``False (Reason)``)."""
    d = _wire(o)
    svc = _at(d, "spec", "service")
    service = (
        f"{svc.get('namespace', '')}/{svc.get('name', '')}" if isinstance(svc, dict) else "Local"
    )
    available = "Unknown"
    for c in _at(d, "status", "conditions") or []:
        if c.get("type") == "Available":
            available = str(c.get("status", ""))
            if available != "True" and c.get("reason"):
                available += f" ({c['reason']})"
    return [_name(d), service, available, _age(d, now)]


def _c(name: str, description: str, type_: str = "string", priority: int = 0) -> Col:
    return (name, type_, priority, description)


_SELECTOR_PODS = "Selector is a label query over pods that should match the Replicas count."
KIND_TABLES: dict[str, tuple[list[Col], Callable[[Any, float], list[Any]]]] = {
    "replicationcontrollers": (
        [
            NAME,
            _c("Desired", "Replicas is the number of desired replicas.", "integer"),
            _c("Current", "Replicas is the most recently observed number of replicas.", "integer"),
            _c("Ready", "The number of ready replicas for this replication controller.", "integer"),
            AGE,
            CONTAINERS,
            IMAGES,
            _c("Selector", _SELECTOR_PODS, priority=1),
        ],
        _replicationcontroller,
    ),
    "podtemplates": (
        [
            NAME,
            _c("Containers", "Names of each container in the template."),
            _c("Images", "Images referenced by each container in the template."),
            _c("Pod Labels", "The labels for the pod template."),
        ],
        _podtemplate,
    ),
    "daemonsets": (
        [
            NAME,
            _c(
                "Desired",
                "The total number of nodes that should be running the daemon pod (including "
                "nodes correctly running the daemon pod).",
                "integer",
            ),
            _c(
                "Current",
                "The number of nodes that are running at least 1 daemon pod and are supposed "
                "to run the daemon pod.",
                "integer",
            ),
            _c(
                "Ready",
                "numberReady is the number of nodes that should be running the daemon pod and "
                "have one or more of the daemon pod running with a Ready Condition.",
                "integer",
            ),
            _c(
                "Up-to-date",
                "The total number of nodes that are running updated daemon pod",
                "integer",
            ),
            _c(
                "Available",
                "The number of nodes that should be running the daemon pod and have one or more "
                "of the daemon pod running and available (ready for at least "
                "spec.minReadySeconds)",
                "integer",
            ),
            _c(
                "Node Selector",
                "NodeSelector is a selector which must be true for the pod to fit on a node.",
            ),
            AGE,
            CONTAINERS,
            IMAGES,
            _c(
                "Selector",
                "A label query over pods that are managed by the daemon set.",
                priority=1,
            ),
        ],
        _daemonset,
    ),
    "statefulsets": (
        [
            NAME,
            _c("Ready", "Number of the pod with ready state"),
            AGE,
            CONTAINERS,
            IMAGES,
        ],
        _statefulset,
    ),
    "controllerrevisions": (
        [
            NAME,
            _c("Controller", "Controller of the object"),
            _c("Revision", "Revision indicates the revision of the state represented by Data."),
            AGE,
        ],
        _controllerrevision,
    ),
    "jobs": (
        [
            NAME,
            _c("Status", "Status of the job."),
            _c("Completions", "The number of pods which reached phase Succeeded."),
            _c("Duration", "Time required to complete the job."),
            AGE,
            CONTAINERS,
            IMAGES,
            _c(
                "Selector",
                "A label query over pods that should match the pod count.",
                priority=1,
            ),
        ],
        _job,
    ),
    "cronjobs": (
        [
            NAME,
            _c("Schedule", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
            _c(
                "Timezone",
                "The time zone name for the given schedule, see "
                "https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
            ),
            _c(
                "Suspend",
                "This flag tells the controller to suspend subsequent executions, it does not "
                "apply to already started executions.",
                "boolean",
            ),
            _c("Active", "A list of pointers to currently running jobs.", "integer"),
            _c(
                "Last Schedule",
                "Information when was the last time the job was successfully scheduled.",
            ),
            AGE,
            CONTAINERS,
            IMAGES,
            _c(
                "Selector",
                "A label query over pods that should match the pod count.",
                priority=1,
            ),
        ],
        _cronjob,
    ),
    "horizontalpodautoscalers": (
        [
            NAME,
            _c(
                "Reference",
                "scaleTargetRef points to the target resource to scale, and is used to the pods "
                "for which metrics should be collected, as well as to actually change the "
                "replica count.",
            ),
            _c(
                "Targets",
                "metrics contains the specifications for which to use to calculate the desired "
                "replica count (the maximum replica count across all metrics will be used).",
            ),
            _c(
                "MinPods",
                "minReplicas is the lower limit for the number of replicas to which the "
                "autoscaler can scale down.",
            ),
            _c(
                "MaxPods",
                "maxReplicas is the upper limit for the number of replicas to which the "
                "autoscaler can scale up.",
            ),
            _c(
                "Replicas",
                "currentReplicas is current number of replicas of pods managed by this "
                "autoscaler, as last seen by the autoscaler.",
            ),
            AGE,
        ],
        _hpa,
    ),
    "poddisruptionbudgets": (
        [
            NAME,
            _c("Min Available", "The minimum number of pods that must be available."),
            _c("Max Unavailable", "The maximum number of pods that may be unavailable."),
            _c(
                "Allowed Disruptions",
                "Calculated number of pods that may be disrupted at this time.",
                "integer",
            ),
            AGE,
        ],
        _pdb,
    ),
    "networkpolicies": (
        [
            NAME,
            _c(
                "Pod-Selector",
                "podSelector selects the pods to which this NetworkPolicy object applies.",
            ),
            AGE,
        ],
        _networkpolicy,
    ),
    "ingresses": (
        [
            NAME,
            _c(
                "Class",
                "The name of the IngressClass resource that should be used for additional "
                "configuration",
            ),
            _c("Hosts", "Hosts that incoming requests are matched against before the ingress rule"),
            _c("Address", "Address is a list containing ingress points for the load-balancer"),
            _c("Ports", "Ports of TLS configurations that open"),
            AGE,
        ],
        _ingress,
    ),
    "ingressclasses": (
        [
            NAME,
            _c("Controller", "Controller that is responsible for handling this class"),
            _c("Parameters", "A reference to a resource with additional parameters"),
            AGE,
        ],
        _ingressclass,
    ),
    "servicecidrs": (
        [
            NAME,
            _c(
                "CIDRs",
                'cidrs defines the IP blocks in CIDR notation (e.g. "192.168.0.0/24" or '
                '"2001:db8::/64") from which to assign service cluster IPs.',
            ),
            AGE,
        ],
        _servicecidr,
    ),
    "ipaddresses": (
        [
            NAME,
            _c(
                "ParentRef",
                "ParentRef references the resource that an IPAddress is attached to.",
            ),
        ],
        _ipaddress,
    ),
    "persistentvolumes": (
        [
            NAME,
            _c(
                "Capacity",
                "capacity is the description of the persistent volume's resources and capacity.",
            ),
            _c("Access Modes", "accessModes contains all ways the volume can be mounted."),
            _c(
                "Reclaim Policy",
                "persistentVolumeReclaimPolicy defines what happens to a persistent volume when "
                "released from its claim.",
            ),
            _c(
                "Status",
                "phase indicates if a volume is available, bound to a claim, or released by a "
                "claim.",
            ),
            _c(
                "Claim",
                "claimRef is part of a bi-directional binding between PersistentVolume and "
                "PersistentVolumeClaim.",
            ),
            _c("StorageClass", "StorageClass of the pv"),
            _c("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
            _c(
                "Reason",
                "reason is a brief CamelCase string that describes any failure and is meant for "
                "machine parsing and tidy display in the CLI.",
            ),
            AGE,
            _c(
                "VolumeMode",
                "volumeMode defines if a volume is intended to be used with a formatted "
                "filesystem or to remain in raw block state.",
                priority=1,
            ),
        ],
        _pv,
    ),
    "persistentvolumeclaims": (
        [
            NAME,
            _c("Status", "phase represents the current phase of PersistentVolumeClaim."),
            _c(
                "Volume",
                "volumeName is the binding reference to the PersistentVolume backing this claim.",
            ),
            _c("Capacity", "capacity represents the actual resources of the underlying volume."),
            _c(
                "Access Modes",
                "accessModes contains the actual access modes the volume backing the PVC has.",
            ),
            _c("StorageClass", "StorageClass of the pvc"),
            _c("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
            AGE,
            _c(
                "VolumeMode",
                "volumeMode defines what type of volume is required by the claim.",
                priority=1,
            ),
        ],
        _pvc,
    ),
    "limitranges": ([NAME, CREATED], created_at),
    "resourcequotas": (
        [
            NAME,
            _c(
                "Request",
                "Request represents a minimum amount of cpu/memory that a container may consume.",
            ),
            _c(
                "Limit",
                "Limits control the maximum amount of cpu/memory that a container may use "
                "independent of contention on the node.",
            ),
            AGE,
        ],
        _resourcequota,
    ),
    "priorityclasses": (
        [
            NAME,
            _c("Value", "value represents the integer value of this priority class.", "integer"),
            _c(
                "Global-Default",
                "globalDefault specifies whether this PriorityClass should be considered as the "
                "default priority for pods that do not have any priority class.",
                "boolean",
            ),
            AGE,
            _c(
                "PreemptionPolicy",
                "preemptionPolicy is the Policy for preempting pods with lower priority.",
            ),
        ],
        _priorityclass,
    ),
    "storageclasses": (
        [
            NAME,
            _c("Provisioner", "provisioner indicates the type of the provisioner."),
            _c(
                "ReclaimPolicy",
                "reclaimPolicy controls the reclaimPolicy for dynamically provisioned "
                "PersistentVolumes of this storage class.",
            ),
            _c(
                "VolumeBindingMode",
                "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned "
                "and bound.",
            ),
            _c(
                "AllowVolumeExpansion",
                "allowVolumeExpansion shows whether the storage class allow volume expand.",
            ),
            AGE,
        ],
        _storageclass,
    ),
    "volumeattributesclasses": (
        [
            NAME,
            _c("DriverName", "driverName is the name of the CSI driver This field is immutable."),
            AGE,
        ],
        _volumeattributesclass,
    ),
    "csidrivers": (
        [
            NAME,
            _c(
                "AttachRequired",
                "attachRequired indicates this CSI volume driver requires an attach operation "
                "(because it implements the CSI ControllerPublishVolume() method), and that the "
                "Kubernetes attach detach controller should call the attach volume interface "
                "which checks the volumeattachment status and waits until the volume is attached "
                "before proceeding to mounting.",
                "boolean",
            ),
            _c(
                "PodInfoOnMount",
                "podInfoOnMount indicates this CSI volume driver requires additional pod "
                "information (like podName, podUID, etc.) during mount operations, if set to "
                "true.",
                "boolean",
            ),
            _c(
                "StorageCapacity",
                "storageCapacity indicates that the CSI volume driver wants pod scheduling to "
                "consider the storage capacity that the driver deployment will report by "
                "creating CSIStorageCapacity objects with capacity information, if set to true.",
                "boolean",
            ),
            _c(
                "TokenRequests",
                "tokenRequests indicates the CSI driver needs pods' service account tokens it is "
                "mounting volume for to do necessary authentication.",
            ),
            _c(
                "RequiresRepublish",
                "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being "
                "periodically called to reflect any possible change in the mounted volume.",
                "boolean",
            ),
            _c(
                "Modes",
                "volumeLifecycleModes defines what kind of volumes this CSI volume driver "
                "supports.",
            ),
            AGE,
        ],
        _csidriver,
    ),
    "csinodes": (
        [
            NAME,
            _c(
                "Drivers",
                "Drivers indicates the number of CSI drivers registered on the node",
                "integer",
            ),
            AGE,
        ],
        _csinode,
    ),
    "csistoragecapacities": (
        [
            NAME,
            _c(
                "StorageClassName",
                "storageClassName represents the name of the StorageClass that the reported "
                "capacity applies to.",
            ),
            _c(
                "Capacity",
                "capacity is the value reported by the CSI driver in its GetCapacityResponse for "
                "a GetCapacityRequest with topology and parameters that match the previous "
                "fields.",
            ),
        ],
        _csistoragecapacity,
    ),
    "volumeattachments": (
        [
            NAME,
            _c(
                "Attacher",
                "attacher indicates the name of the volume driver that MUST handle this request.",
            ),
            _c(
                "PV",
                "persistentVolumeName represents the name of the persistent volume to attach.",
            ),
            _c("Node", "nodeName represents the node that the volume should be attached to."),
            _c("Attached", "attached indicates the volume is successfully attached.", "boolean"),
            AGE,
        ],
        _volumeattachment,
    ),
    "runtimeclasses": ([NAME, _c("Handler", ""), AGE], _runtimeclass),
    "leases": (
        [
            NAME,
            _c("Holder", "holderIdentity contains the identity of the holder of a current lease."),
            AGE,
        ],
        _lease,
    ),
    "certificatesigningrequests": (
        [
            NAME,
            AGE,
            _c(
                "SignerName",
                "signerName indicates the requested signer, and is a qualified name.",
            ),
            _c(
                "Requestor",
                'request contains an x509 certificate signing request encoded in a "CERTIFICATE '
                'REQUEST" PEM block.',
            ),
            _c(
                "RequestedDuration",
                "expirationSeconds is the requested duration of validity of the issued "
                "certificate.",
            ),
            _c("Condition", "conditions applied to the request."),
        ],
        _csr,
    ),
    "mutatingwebhookconfigurations": (
        [
            NAME,
            _c(
                "Webhooks",
                "Webhooks indicates the number of webhooks registered in this configuration",
                "integer",
            ),
            AGE,
        ],
        _webhooks,
    ),
    "validatingadmissionpolicies": (
        [
            NAME,
            _c(
                "Validations",
                "Validations indicates the number of validation rules defined in this "
                "configuration",
                "integer",
            ),
            _c(
                "ParamKind",
                "ParamKind specifies the kind of resources used to parameterize this policy",
            ),
            AGE,
        ],
        _admissionpolicy,
    ),
    "validatingadmissionpolicybindings": (
        [
            NAME,
            _c(
                "PolicyName",
                "PolicyName indicates the policy definition which the policy binding binded to",
            ),
            _c(
                "ParamRef",
                "ParamRef indicates the param resource which sets the configration param",
            ),
            AGE,
        ],
        _admissionpolicybinding,
    ),
    "flowschemas": (
        [
            NAME,
            _c(
                "PriorityLevel",
                "`name` is the name of the priority level configuration being referenced Required.",
            ),
            _c(
                "MatchingPrecedence",
                "`matchingPrecedence` is used to choose among the FlowSchemas that match a "
                "given request.",
            ),
            _c(
                "DistinguisherMethod",
                "`distinguisherMethod` defines how to compute the flow distinguisher for "
                "requests that match this schema.",
            ),
            AGE,
            _c("MissingPL", "references a broken or non-existent PriorityLevelConfiguration"),
        ],
        _flowschema,
    ),
    "prioritylevelconfigurations": (
        [
            NAME,
            _c(
                "Type",
                "`type` indicates whether this priority level is subject to limitation on "
                "request execution.",
            ),
            _c(
                "NominalConcurrencyShares",
                "`nominalConcurrencyShares` (NCS) contributes to the computation of the "
                "NominalConcurrencyLimit (NominalCL) of this level.",
            ),
            _c("Queues", "`queues` is the number of queues for this priority level."),
            _c(
                "HandSize",
                "`handSize` is a small positive number that configures the shuffle sharding of "
                "requests into queues.",
            ),
            _c(
                "QueueLengthLimit",
                "`queueLengthLimit` is the maximum number of requests allowed to be waiting in a "
                "given queue of this priority level at a time; excess requests are rejected.",
            ),
            AGE,
        ],
        _prioritylevel,
    ),
    "apiservices": (
        [
            NAME,
            _c("Service", "The reference to the service that hosts this API endpoint."),
            _c("Available", "Whether this service is available."),
            AGE,
        ],
        _apiservice,
    ),
    "customresourcedefinitions": ([NAME, CREATED], created_at),
}
KIND_TABLES["validatingwebhookconfigurations"] = KIND_TABLES["mutatingwebhookconfigurations"]
