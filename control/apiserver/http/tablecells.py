"""What every Table row is made of: the column type, the columns most kinds share (Name,
Age, the pod-template Containers and Images, Created At) and the time cells
(apimachinery's ``duration.HumanDuration`` and the Age of a creation timestamp), as
kube-apiserver's printers (pkg/printers/internalversion) make them. :mod:`.tables` and
:mod:`.tables_kinds` build on them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from netmodel.objects import KubeObject

Col = tuple[str, str, int, str]  # name, type, priority, description
NAME: Col = ("Name", "string", 0, "Name must be unique within a namespace.")
AGE: Col = (
    "Age",
    "string",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)

#: the pod-template columns of deployments and replicasets (values from :func:`_containers`)
CONTAINERS: Col = ("Containers", "string", 1, "Names of each container in the template.")
IMAGES: Col = ("Images", "string", 1, "Images referenced by each container in the template.")


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery's duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        sec = s % 60
        return f"{minutes}m" if sec == 0 else f"{minutes}m{sec}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


_TS_CACHE: dict[str, float] = {}


def parse_timestamp(text: str | None) -> float | None:
    if not text:
        return None
    t = _TS_CACHE.get(text)
    if t is None:
        t = dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC).timestamp()
        if len(_TS_CACHE) > 100_000:
            _TS_CACHE.clear()
        _TS_CACHE[text] = t
    return t


def age(ts: str | None, now: float) -> str:
    t = parse_timestamp(ts)
    return "<unknown>" if t is None else human_duration(now - t)


CREATED: Col = (
    "Created At",
    "date",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)


def created_at(o: KubeObject, now: float) -> list[Any]:
    return [o.name, o.metadata.creation_timestamp or ""]
