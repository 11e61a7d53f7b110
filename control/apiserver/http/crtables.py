"""``kubectl get`` of custom resources: the Table columns of a CRD version's
``additionalPrinterColumns``, as kube-apiserver builds them.

The first column is always ``Name``; then each printer column (its name, type,
description and priority; ``priority > 0`` shows with ``-o wide`` only). A version
without printer columns gets ``Name`` and ``Age``, as kube-apiserver gives it. A
``date`` cell is the time since the value, as kubectl prints an age; the column of
``.metadata.creationTimestamp`` is the Age column (its cell ages in the cached rows,
:meth:`control.apiserver.http.wire.WireCache.table_row`). A value that is absent or not
of the column's type is ``None`` (kubectl prints ``<none>``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from control.apiserver import crds
from control.apiserver.http.resources import Resource
from control.apiserver.http.tablecells import AGE, NAME, Col, age
from netmodel.objects import KubeObject

_CREATION = ".metadata.creationTimestamp"


def _column(c: dict[str, Any]) -> Col:
    if c.get("jsonPath") == _CREATION and c.get("type") == "date" and c.get("name") == "Age":
        return AGE
    return (
        str(c.get("name")),
        str(c.get("type")),
        int(c.get("priority") or 0),
        str(c.get("description") or ""),
    )


def table(res: Resource) -> tuple[list[Col], Callable[[Any, float], list[Any]]]:
    """The columns and the row function of a custom resource's Table."""
    cols = crds.printer_columns(res.api_version, res.kind)
    if not cols:
        return [NAME, AGE], lambda o, now: [o.name, age(o.metadata.creation_timestamp, now)]

    def cells(o: KubeObject, now: float) -> list[Any]:
        out: list[Any] = [o.name]
        for c in cols:
            value = crds.column_value(o, c)
            if c.get("type") == "date" and isinstance(value, str):
                value = age(value, now)
            out.append(value)
        return out

    return [NAME, *(_column(c) for c in cols)], cells
