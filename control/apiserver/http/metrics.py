"""``GET /metrics``: kube-apiserver's main series in the Prometheus text exposition format
(version 0.0.4), with its names, labels, help texts and buckets:

* ``apiserver_request_total`` (counter): every resource request, by ``code``,
  ``component`` ("apiserver"), ``dry_run``, ``group``, ``resource``, ``scope``
  ("resource" for one named object, "namespace", "cluster"), ``subresource``, ``verb``
  (kube's upper-case verbs: GET, LIST, WATCH, POST, PUT, PATCH, APPLY, DELETE,
  DELETECOLLECTION) and ``version``.
* ``apiserver_request_duration_seconds`` (histogram, kube's buckets): the same requests
  less ``code``, timed from the request's arrival to its response; a WATCH is recorded
  when its stream ends.
* ``apiserver_storage_objects`` (gauge): stored objects per resource (``pods``,
  ``deployments.apps``), counted at scrape time.
* ``apiserver_longrunning_requests`` (gauge): WATCH requests being served, by
  ``component``, ``group``, ``resource``, ``scope``, ``subresource``, ``verb``,
  ``version``; ``apiserver_registered_watchers`` (gauge): the same watches by
  ``group``, ``kind``, ``version``.

Label values are escaped as the format requires (backslash, double quote, newline);
series are printed in sorted order, so two scrapes of one state are byte-identical.
Authorization is the caller's: ``/metrics`` is a non-resource URL (``get``), allowed by
the ``system:monitoring`` and ``cluster-admin`` roles.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: kube-apiserver's request duration buckets (seconds)
BUCKETS = (
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0,
    6.0, 8.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
)  # fmt: skip

HELP = {
    "apiserver_request_total": "[STABLE] Counter of apiserver requests broken out for each "
    "verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
    "apiserver_request_duration_seconds": "[STABLE] Response latency distribution in seconds "
    "for each verb, dry run value, group, version, resource, subresource, scope and component.",
    "apiserver_storage_objects": "[STABLE] Number of stored objects at the time of last check "
    "split by kind. In case of a fetching error, the value will be -1.",
    "apiserver_longrunning_requests": "[STABLE] Gauge of all active long-running apiserver "
    "requests broken out by verb, group, version, resource, scope and component. Not all "
    "requests are tracked this way.",
    "apiserver_registered_watchers": "[ALPHA] Number of currently registered watchers for a "
    "given resources",
}

#: the request labels of the duration histogram and the long-running gauge, in order
REQUEST_LABELS = (
    "component", "dry_run", "group", "resource", "scope", "subresource", "verb", "version",
)  # fmt: skip

#: svclab's request verbs (RBAC's) -> kube's metric verbs
VERBS = {
    "get": "GET",
    "list": "LIST",
    "watch": "WATCH",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETECOLLECTION",
}

Labels = tuple[tuple[str, str], ...]


def escape(value: str) -> str:
    """A label value as the text format writes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if float(v).is_integer():
        return str(int(v))
    return repr(float(v))


def _series(name: str, labels: Iterable[tuple[str, str]], value: float) -> str:
    inner = ",".join(f'{k}="{escape(v)}"' for k, v in labels)
    return f"{name}{{{inner}}} {_fmt(value)}" if inner else f"{name} {_fmt(value)}"


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: int = 0
    sum: float = 0.0

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
        self.total += 1
        self.sum += seconds


@dataclass(frozen=True)
class RequestKey:
    """What a resource request is counted by (module docstring)."""

    verb: str
    group: str
    version: str
    resource: str
    subresource: str
    scope: str
    dry_run: str = ""
    component: str = "apiserver"

    def labels(self) -> dict[str, str]:
        return {
            "component": self.component,
            "dry_run": self.dry_run,
            "group": self.group,
            "resource": self.resource,
            "scope": self.scope,
            "subresource": self.subresource,
            "verb": self.verb,
            "version": self.version,
        }


def request_key(
    verb: str,
    group: str,
    version: str,
    resource: str,
    subresource: str,
    namespace: str,
    name: str,
    *,
    dry_run: bool,
    apply: bool = False,
) -> RequestKey:
    """The key of a request as kube-apiserver labels it: APPLY for a server-side apply
    PATCH; scope "resource" when one object is named, else "namespace" or "cluster"."""
    kverb = "APPLY" if apply and verb == "patch" else VERBS.get(verb, verb.upper())
    scope = "resource" if name else ("namespace" if namespace else "cluster")
    return RequestKey(kverb, group, version, resource, subresource, scope, "All" if dry_run else "")


class Metrics:
    """The apiserver's request and watch figures; :meth:`render` prints them with the
    store's object counts."""

    def __init__(self) -> None:
        self.requests: dict[tuple[RequestKey, str], int] = {}
        self.durations: dict[RequestKey, _Histogram] = {}
        self.long_running: dict[RequestKey, int] = {}
        self.watchers: dict[tuple[str, str, str], int] = {}

    def observe(self, key: RequestKey, code: int, seconds: float) -> None:
        """One finished request."""
        k = (key, str(code))
        self.requests[k] = self.requests.get(k, 0) + 1
        self.durations.setdefault(key, _Histogram()).observe(seconds)

    def watch_started(self, key: RequestKey, kind: str) -> None:
        self.long_running[key] = self.long_running.get(key, 0) + 1
        w = (key.group, kind, key.version)
        self.watchers[w] = self.watchers.get(w, 0) + 1

    def watch_ended(self, key: RequestKey, kind: str) -> None:
        self.long_running[key] = self.long_running.get(key, 0) - 1
        w = (key.group, kind, key.version)
        self.watchers[w] = self.watchers.get(w, 0) - 1

    def render(self, storage: Mapping[str, int]) -> str:
        """The exposition text; ``storage``: resource (``pods``, ``deployments.apps``) ->
        stored objects."""
        out: list[str] = []

        def head(name: str, typ: str) -> None:
            out.append(f"# HELP {name} {HELP[name]}")
            out.append(f"# TYPE {name} {typ}")

        head("apiserver_longrunning_requests", "gauge")
        for key, n in sorted(self.long_running.items(), key=_by_labels):
            lr = sorted((k, v) for k, v in key.labels().items() if k != "dry_run")
            out.append(_series("apiserver_longrunning_requests", lr, n))
        head("apiserver_registered_watchers", "gauge")
        for (group, kind, version), n in sorted(self.watchers.items()):
            wl = (("group", group), ("kind", kind), ("version", version))
            out.append(_series("apiserver_registered_watchers", wl, n))
        head("apiserver_request_duration_seconds", "histogram")
        for key, h in sorted(self.durations.items(), key=_by_labels):
            labels = sorted(key.labels().items())
            for bound, c in zip(BUCKETS, h.counts, strict=True):
                le = (*labels, ("le", _fmt(bound)))
                out.append(_series("apiserver_request_duration_seconds_bucket", le, c))
            inf = (*labels, ("le", "+Inf"))
            out.append(_series("apiserver_request_duration_seconds_bucket", inf, h.total))
            out.append(_series("apiserver_request_duration_seconds_sum", labels, h.sum))
            out.append(_series("apiserver_request_duration_seconds_count", labels, h.total))
        head("apiserver_request_total", "counter")
        rows = sorted(
            (sorted({**key.labels(), "code": code}.items()), n)
            for (key, code), n in self.requests.items()
        )
        for labels, n in rows:
            out.append(_series("apiserver_request_total", labels, n))
        head("apiserver_storage_objects", "gauge")
        for resource, n in sorted(storage.items()):
            out.append(_series("apiserver_storage_objects", (("resource", resource),), n))
        return "\n".join(out) + "\n"


def _by_labels(item: tuple[RequestKey, object]) -> list[tuple[str, str]]:
    return sorted(item[0].labels().items())


def storage_counts(
    resources: Iterable[tuple[str, str | None]], count: Callable[[str], int]
) -> dict[str, int]:
    """``resource.group`` -> stored objects, for ``(qualified name, store kind)`` pairs
    (a store kind served by two groups, Events, counts under the first)."""
    out: dict[str, int] = {}
    seen: set[str] = set()
    for qualified, store_kind in resources:
        if store_kind is None or store_kind in seen:
            continue
        seen.add(store_kind)
        out[qualified] = count(store_kind)
    return out
