"""A reference from something svclab shows (a trace hop, a rule) to the Kubernetes object
and field that made it: ``Service default/web spec.ports[0]``.

``by`` names the component that turned the object into the dataplane state (kube-proxy,
flannel, the kubelet's CNI call, kube-router); ``detail`` says which part of the field
(``port http``, ``endpoint 10.244.1.3``). The JSON form is the trace contract's ``object``
(``{"kind", "namespace", "name", "field"}``, plus ``by`` and ``detail`` when known);
``namespace`` is null for cluster-scoped kinds. ``implicit`` (not in JSON) marks a
reference that only says where the hop happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """One object and the field of it that produced a piece of dataplane state."""

    kind: str
    namespace: str | None
    name: str
    field: str
    by: str | None = None
    detail: str | None = None
    #: the hop merely happened where this object lives (its Pod's or Node's network
    #: namespace) and no object of its own made it: the JSON names it all the same,
    #: text listings may leave it out
    implicit: bool = False

    @property
    def key(self) -> str:
        """The store key: ``NS/NAME``, or ``NAME`` for a cluster-scoped kind."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "field": self.field,
        }
        if self.by:
            out["by"] = self.by
        if self.detail:
            out["detail"] = self.detail
        return out

    def text(self) -> str:
        """``Service default/web spec.ports[0] (port http)``."""
        out = f"{self.kind} {self.key} {self.field}"
        return f"{out} ({self.detail})" if self.detail else out


def objects_json(refs: tuple[ObjectRef, ...]) -> dict[str, Any] | list[dict[str, Any]]:
    """One reference as an object, several as a list (the trace contract's ``object``)."""
    if len(refs) == 1:
        return refs[0].to_json()
    return [r.to_json() for r in refs]
