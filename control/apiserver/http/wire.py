"""The JSON objects the API sends and receives, for each served resource.

Stored objects go out as their Kubernetes JSON (:meth:`KubeObject.to_dict`, cached per
resourceVersion). Three resources are views of something stored:

* ``events`` (core/v1 and events.k8s.io/v1) are svclab's timeline Events in the two
  Kubernetes shapes (``source.component`` / ``reportingController`` is the component,
  ``firstTimestamp`` = ``lastTimestamp`` = ``eventTime`` the creation time, count 1);
* ``endpoints`` are computed from a Service's EndpointSlices, as the endpoints
  controller keeps them (ready addresses, not-ready addresses, the ports), named after
  the Service, resourceVersion = the newest of the Service and its slices;
* field selectors (:func:`field_getter`) read the typed objects: ``metadata.name``,
  ``metadata.namespace``, ``spec.nodeName``, ``status.phase``, ``involvedObject.*``,
  ``type``, ``reason``, ``spec.unschedulable``; others are refused (400), as
  kube-apiserver refuses labels it does not index.

Request bodies (:func:`decode_body`: JSON, YAML, protobuf) and list continue tokens
(:func:`continue_token`, :func:`parse_continue`) are read and made here too, so that the
verb handlers need nothing from :mod:`.app`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import orjson
import yaml

from control.apiserver.http import status, tables
from control.apiserver.http.resources import Resource
from control.apiserver.http.status import APIError
from control.apiserver.strategy import strategy_of
from netmodel.objects import (
    EndpointSlice,
    Event,
    KubeObject,
    Service,
)

SERVICE_NAME = "kubernetes.io/service-name"


class JSONCache:
    """Encoded forms of stored objects, each made once per resourceVersion however many
    GETs, LISTs and watchers send it:

    * ``(kind, key) -> (resourceVersion, JSON bytes)`` (:meth:`encode`);
    * ``(kind, key) -> (resourceVersion, metadata JSON)`` (:meth:`encode_metadata`);
    * ``(kind, key) -> (resourceVersion, Table row)`` (:meth:`table_row`): the row's
      bytes with a hole for its Age cell, the only cell that changes with time.
    """

    def __init__(self) -> None:
        self._data: dict[tuple[str, str], tuple[str | None, bytes]] = {}
        self._meta: dict[tuple[str, str], tuple[str | None, bytes]] = {}
        self._rows: dict[tuple[str, str], tuple[str | None, str, _Row]] = {}

    def encode(self, obj: KubeObject) -> bytes:
        ident = (obj.store_kind, obj.key)
        rv = obj.metadata.resource_version
        hit = self._data.get(ident)
        if hit is not None and hit[0] == rv and rv is not None:
            return hit[1]
        data = obj.model_dump_json(by_alias=True, exclude_unset=True, exclude_none=True).encode()
        if rv is not None:
            self._data[ident] = (rv, data)
        return data

    def prime(self, obj: KubeObject, data: bytes) -> None:
        """Remember ``data`` as :meth:`encode`'s answer for ``obj``: it must be exactly
        that (the JSON the store wrote for this very object, see
        :func:`control.store.base.encoded`)."""
        rv = obj.metadata.resource_version
        if rv is not None:
            self._data[(obj.store_kind, obj.key)] = (rv, data)

    def encode_metadata(self, obj: KubeObject) -> bytes:
        """The object's ``metadata`` JSON (a Table row's PartialObjectMetadata)."""
        ident = (obj.store_kind, obj.key)
        rv = obj.metadata.resource_version
        hit = self._meta.get(ident)
        if hit is not None and hit[0] == rv and rv is not None:
            return hit[1]
        data = obj.metadata.model_dump_json(
            by_alias=True, exclude_unset=True, exclude_none=True
        ).encode()
        if rv is not None:
            self._meta[ident] = (rv, data)
        return data

    def table_row(
        self, res: Resource, obj: KubeObject, now: float, ages: dict[str, bytes]
    ) -> bytes:
        """One row of a Table with PartialObjectMetadata row objects, as JSON:
        ``{"cells":[...],"object":{...}}``. ``ages``: Age cells already encoded in this
        response, by creationTimestamp (shared by the rows of one LIST)."""
        ident = (obj.store_kind, obj.key)
        rv = obj.metadata.resource_version
        hit = self._rows.get(ident)
        if hit is not None and hit[0] == rv and hit[1] == res.name and rv is not None:
            row = hit[2]
        else:
            row = self._row(res, obj, now)
            if rv is not None:
                self._rows[ident] = (rv, res.name, row)
        if row.age_at is None:
            return row.before
        ts = obj.metadata.creation_timestamp or ""
        cell = ages.get(ts)
        if cell is None:
            cell = ages[ts] = orjson.dumps(tables.age(ts or None, now))
        return row.before + cell + row.after

    def _row(self, res: Resource, obj: KubeObject, now: float) -> _Row:
        cells = strategy_of(res.store_kind).table_row(res, obj, now)
        tail = b"]," + _PARTIAL + self.encode_metadata(obj) + b"}}"
        i = tables.age_column(res)
        if (
            i is None
            or i >= len(cells)
            or cells[i] != tables.age(obj.metadata.creation_timestamp, now)
        ):
            return _Row(b'{"cells":' + dumps(cells)[:-1] + tail, None)
        before = b",".join(dumps(c) for c in cells[:i])
        after = b",".join(dumps(c) for c in cells[i + 1 :])
        return _Row(
            b'{"cells":[' + before + (b"," if i else b""),
            i,
            (b"," if after else b"") + after + tail,
        )

    def forget(self, kind: str, key: str) -> None:
        self._data.pop((kind, key), None)
        self._meta.pop((kind, key), None)
        self._rows.pop((kind, key), None)


_PARTIAL = b'"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":'


class _Row:
    """A cached Table row: ``before`` + the Age cell + ``after`` (``age_at`` is the Age
    column's index; None: no Age cell to fill, ``before`` is the whole row)."""

    __slots__ = ("after", "age_at", "before")

    def __init__(self, before: bytes, age_at: int | None, after: bytes = b"") -> None:
        self.before = before
        self.age_at = age_at
        self.after = after


def core_event(ev: Event) -> dict[str, Any]:
    d = ev.to_dict()
    extra = {k: d.pop(k) for k in ("sourceComponent", "revision", "sequence") if k in d}
    ts = ev.metadata.creation_timestamp
    d["apiVersion"] = "v1"
    d["source"] = (
        {"component": extra.get("sourceComponent", "")} if extra.get("sourceComponent") else {}
    )
    d.setdefault("firstTimestamp", ts)
    d.setdefault("lastTimestamp", ts)
    d.setdefault("count", 1)
    d.setdefault("reportingComponent", extra.get("sourceComponent", ""))
    d.setdefault("reportingInstance", "")
    return d


def events_v1_event(ev: Event) -> dict[str, Any]:
    d = ev.to_dict()
    for k in (
        "sourceComponent",
        "revision",
        "sequence",
        "involvedObject",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
    ):
        d.pop(k, None)
    d["apiVersion"] = "events.k8s.io/v1"
    d["regarding"] = ev.involved_object.to_dict()
    d["note"] = ev.message
    d["reportingController"] = ev.source_component
    d["reportingInstance"] = ev.source_component
    d["action"] = ev.reason
    d["eventTime"] = _micro(ev.metadata.creation_timestamp)
    return d


def _micro(ts: str | None) -> str | None:
    if ts and ts.endswith("Z") and "." not in ts:
        return ts[:-1] + ".000000Z"
    return ts


def event_from_wire(res: Resource, body: dict[str, Any]) -> dict[str, Any]:
    """A posted core/v1 or events.k8s.io/v1 Event as svclab's stored Event dict."""
    d = dict(body)
    d["apiVersion"] = "v1"
    if res.group == "events.k8s.io":
        d["involvedObject"] = d.pop("regarding", {}) or {}
        d["message"] = d.pop("note", "") or ""
        d["sourceComponent"] = d.pop("reportingController", "") or d.get("sourceComponent") or ""
        for k in (
            "reportingInstance",
            "action",
            "eventTime",
            "series",
            "related",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "deprecatedCount",
        ):
            d.pop(k, None)
    else:
        src = d.pop("source", None) or {}
        component = src.get("component", "") if isinstance(src, dict) else ""
        # (svclab's own clients post the stored shape: their sourceComponent stays)
        d["sourceComponent"] = component or d.get("sourceComponent") or ""
        for k in (
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "reportingComponent",
            "reportingInstance",
            "eventTime",
            "series",
            "related",
            "action",
        ):
            d.pop(k, None)
    return d


def endpoints_for(svc: Service, slices: list[EndpointSlice]) -> dict[str, Any]:
    """The core/v1 Endpoints the endpoints controller keeps for ``svc``."""
    rv = max([svc.resource_version, *(s.resource_version for s in slices)])
    ready: list[dict[str, Any]] = []
    not_ready: list[dict[str, Any]] = []
    ports: list[dict[str, Any]] = []
    seen_ports: set[tuple[str | None, int | None, str | None]] = set()
    seen_ips: set[str] = set()
    for s in slices:
        if s.address_type not in ("IPv4", "IPv6"):
            continue
        for p in s.ports:
            ident = (p.name, p.port, p.protocol)
            if ident not in seen_ports:
                seen_ports.add(ident)
                ports.append(p.to_dict())
        for ep in s.endpoints:
            for ip in ep.addresses[:1]:
                if ip in seen_ips:
                    continue
                seen_ips.add(ip)
                addr: dict[str, Any] = {"ip": ip}
                if ep.node_name:
                    addr["nodeName"] = ep.node_name
                if ep.hostname:
                    addr["hostname"] = ep.hostname
                if ep.target_ref is not None:
                    addr["targetRef"] = ep.target_ref.to_dict()
                (ready if ep.conditions.ready is not False else not_ready).append(addr)
    meta: dict[str, Any] = {
        "name": svc.name,
        "namespace": svc.namespace,
        "resourceVersion": str(rv),
        "labels": dict(svc.labels),
    }
    if svc.metadata.creation_timestamp:
        meta["creationTimestamp"] = svc.metadata.creation_timestamp
    if svc.metadata.uid:
        meta["uid"] = svc.metadata.uid
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Endpoints", "metadata": meta}
    subsets = []
    if ready or not_ready:
        subset: dict[str, Any] = {}
        if ready:
            subset["addresses"] = sorted(ready, key=lambda a: a["ip"])
        if not_ready:
            subset["notReadyAddresses"] = sorted(not_ready, key=lambda a: a["ip"])
        if ports:
            subset["ports"] = ports
        subsets.append(subset)
    if subsets:
        out["subsets"] = subsets
    return out


def dumps(data: Any) -> bytes:
    """Compact JSON (orjson: keys that are not strings are written as strings, as
    :func:`json.dumps` does)."""
    return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)


# --------------------------------------------------------------------------- field selectors

Getter = Callable[[KubeObject], str]


def _attr(*path: str) -> Getter:
    def get(o: KubeObject) -> str:
        v: Any = o
        for p in path:
            v = getattr(v, p, None)
            if v is None:
                return ""
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v)

    return get


_COMMON: dict[str, Getter] = {
    "metadata.name": lambda o: o.name,
    "metadata.namespace": lambda o: o.namespace,
}
_FIELDS: dict[str, dict[str, Getter]] = {
    "Pod": {
        "spec.nodeName": _attr("spec", "node_name"),
        "status.phase": _attr("status", "phase"),
        "status.podIP": _attr("status", "pod_ip"),
        "spec.schedulerName": _attr("spec", "scheduler_name"),
    },
    "Node": {"spec.unschedulable": _attr("spec", "unschedulable")},
    "Event": {
        "involvedObject.kind": _attr("involved_object", "kind"),
        "involvedObject.name": _attr("involved_object", "name"),
        "involvedObject.namespace": _attr("involved_object", "namespace"),
        "involvedObject.uid": _attr("involved_object", "uid"),
        "regarding.kind": _attr("involved_object", "kind"),
        "regarding.name": _attr("involved_object", "name"),
        "regarding.namespace": _attr("involved_object", "namespace"),
        "regarding.uid": _attr("involved_object", "uid"),
        "reason": _attr("reason"),
        "type": _attr("type"),
        "source": _attr("source_component"),
        "reportingController": _attr("source_component"),
    },
    "Service": {"spec.clusterIP": _attr("spec", "cluster_ip"), "spec.type": _attr("spec", "type")},
    "Namespace": {"status.phase": lambda o: str(getattr(o, "status", {}).get("phase", "Active"))},
}


def field_getter(kind: str, field: str) -> Getter | None:
    return _COMMON.get(field) or _FIELDS.get(kind, {}).get(field)


FieldTerm = tuple[str, str, bool]  # field, value, equal (False: !=)


def parse_field_selector(text: str) -> list[FieldTerm]:
    """``a=b,c!=d`` (also ``==``). ValueError for anything else."""
    terms: list[FieldTerm] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "!=" in part:
            k, v = part.split("!=", 1)
            terms.append((k.strip(), v.strip(), False))
        elif "=" in part:
            k, v = part.split("==", 1) if "==" in part else part.split("=", 1)
            terms.append((k.strip(), v.strip(), True))
        else:
            raise ValueError(f"invalid selector: '{text}'; can't understand '{part}'")
    return terms


# --------------------------------------------------------------------------- bodies


def decode_body(raw: bytes, ctype: str) -> Any:
    if "protobuf" in ctype:
        from control.apiserver.http import proto

        try:
            return proto.decode(raw)
        except proto.ProtobufError as e:
            raise APIError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})",
                {},
            ) from None
    if not raw:
        raise status.bad_request("the request body is empty")
    try:
        if "yaml" in ctype:
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise status.bad_request(
            f"the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})"
        ) from None


def continue_token(rv: int, last_key: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": last_key}).encode()).decode()


def parse_continue(token: str) -> tuple[int, str]:
    try:
        d = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(d["rv"]), str(d["start"])
    except (ValueError, KeyError, TypeError):
        raise status.bad_request("continue key is not valid") from None
