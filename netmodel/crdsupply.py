"""CustomResourceDefinitions for custom resources that come without theirs.

``kubectl get -A -o yaml`` of a real cluster records its objects, not always the
definitions of their kinds: a Calico cluster's dump holds its ``IPPool`` objects
(``crd.projectcalico.org/v1``) but not the CRD that served them. The dump is a record
of that cluster, so the CRD existed there. :func:`missing` gives the CRD documents to
put in front of such documents, so that the objects come in as custom resources:

* **shipped**: the definitions of the CNI objects real clusters carry, as their
  projects publish them (``netmodel/crddata``, provenance and version in its
  ``PROVENANCE.md``: Calico's IPPool and BlockAffinity, the network-policy-api's
  ClusterNetworkPolicy), for a dump or a manifest that brings an object of that group
  and kind and served version;
* **inferred** (a dump only): for any other custom kind, a permissive CRD: every
  version the dump shows served (the first one stored), one schema keeping every field
  (``x-kubernetes-preserve-unknown-fields``), the scope ``Namespaced`` when an object
  of the kind has a namespace, else ``Cluster``, and kube's plural guess for the
  resource name. Each one costs one warning line naming the kind. A hand-written
  manifest gets none: kube-apiserver refuses a kind it does not serve, and so does
  ``svclab apply``.

A custom kind is one whose apiVersion has a group with a dot that no built-in kind of
the kind table uses; one already served (a CRD stored or read before) or defined by a
CRD among the documents needs nothing. Reading the shipped files is the only I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from netmodel import kinds
from netmodel.customresources import CRD_KIND, GROUP
from netmodel.kubedump import INFERRED_ANNOTATION

__all__ = [
    "INFERRED_ANNOTATION",
    "SHIPPED_ANNOTATION",
    "Supplied",
    "guess_plural",
    "inferred_crd",
    "missing",
    "shipped_kinds",
]

#: on a CRD svclab added from its shipped files: the file it came from
SHIPPED_ANNOTATION = "svclab.dev/shipped-from"

_DATA = "crddata"


@dataclass(frozen=True)
class Supplied:
    """The CRD documents to add (in front of the others) and one warning per inferred
    CRD."""

    crds: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@functools.cache
def _shipped() -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
    """(group, kind) -> (file name, CRD document) of every shipped definition."""
    out: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for entry in sorted(resources.files("netmodel").joinpath(_DATA).iterdir(), key=str):
        if not entry.name.endswith(".yaml"):
            continue
        doc = yaml.safe_load(entry.read_text(encoding="utf-8"))
        spec = doc["spec"]
        out[(str(spec["group"]), str(spec["names"]["kind"]))] = (entry.name, doc)
    return out


def shipped_kinds() -> list[tuple[str, str]]:
    """The (group, kind) pairs svclab ships a CRD for."""
    return sorted(_shipped())


def guess_plural(kind: str) -> str:
    """kube's guess of a kind's resource name (what ``kubectl`` and the RESTMapper take
    when nothing says otherwise): the kind in lower case, ``+es`` after an ``s``,
    ``y`` made ``ies``, else ``+s``."""
    low = kind.lower()
    if low.endswith("s"):
        return low + "es"
    if low.endswith("y"):
        return low[:-1] + "ies"
    return low + "s"


def _builtin_groups() -> set[str]:
    return {r.group for r in kinds.ROWS if not r.crd}


def _served_groups_kinds() -> set[tuple[str, str]]:
    return {(r.group, r.kind) for r in kinds.ROWS}


def _defined(docs: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(group, kind) of the CRDs among ``docs``."""
    out: set[tuple[str, str]] = set()
    for d in docs:
        if d.get("kind") != CRD_KIND or not str(d.get("apiVersion", "")).startswith(GROUP):
            continue
        spec = d.get("spec")
        names = spec.get("names") if isinstance(spec, Mapping) else None
        if isinstance(spec, Mapping) and isinstance(names, Mapping):
            out.add((str(spec.get("group")), str(names.get("kind"))))
    return out


@dataclass
class _Seen:
    """What the documents show of one custom kind."""

    versions: list[str] = field(default_factory=list)
    namespaced: bool = False
    count: int = 0


def _custom_objects(docs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], _Seen]:
    builtin = _builtin_groups()
    served = _served_groups_kinds()
    seen: dict[tuple[str, str], _Seen] = {}
    for d in docs:
        kind, api = d.get("kind"), d.get("apiVersion")
        if not isinstance(kind, str) or not kind or not isinstance(api, str):
            continue
        group, _, version = api.rpartition("/")
        if "." not in group or group in builtin or (group, kind) in served:
            continue
        s = seen.setdefault((group, kind), _Seen())
        s.count += 1
        if version not in s.versions:
            s.versions.append(version)
        meta = d.get("metadata")
        if isinstance(meta, Mapping) and meta.get("namespace"):
            s.namespaced = True
    return seen


def _serves(crd: Mapping[str, Any], versions: list[str]) -> bool:
    served = {v.get("name") for v in crd["spec"].get("versions") or () if v.get("served")}
    return set(versions) <= served


def inferred_crd(group: str, kind: str, seen: _Seen) -> dict[str, Any]:
    """A CRD that serves ``kind`` of ``group`` in every version seen and keeps every
    field of its objects."""
    plural = guess_plural(kind)
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": CRD_KIND,
        "metadata": {
            "name": f"{plural}.{group}",
            "annotations": {INFERRED_ANNOTATION: "kubectl-dump"},
        },
        "spec": {
            "group": group,
            "scope": "Namespaced" if seen.namespaced else "Cluster",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {"name": v, "served": True, "storage": i == 0, "schema": schema}
                for i, v in enumerate(seen.versions)
            ],
        },
    }


def missing(docs: list[Mapping[str, Any]], *, infer: bool) -> Supplied:
    """The CRDs ``docs`` need for their custom resources (see the module docstring):
    shipped ones always, inferred ones when ``infer`` (a dump). A kind neither shipped
    (in the versions seen) nor inferred gets nothing: decoding it refuses it as before."""
    out = Supplied()
    defined = _defined(docs)
    for (group, kind), seen in _custom_objects(docs).items():
        if (group, kind) in defined:
            continue
        ship = _shipped().get((group, kind))
        if ship is not None and _serves(ship[1], seen.versions):
            name, doc = ship
            crd = {**doc, "metadata": {**doc["metadata"]}}
            crd["metadata"]["annotations"] = {
                **(doc["metadata"].get("annotations") or {}),
                SHIPPED_ANNOTATION: f"netmodel/{_DATA}/{name}",
            }
            out.crds.append(crd)
        elif infer:
            crd = inferred_crd(group, kind, seen)
            out.crds.append(crd)
            spec = crd["spec"]
            out.warnings.append(
                f"{kind}.{group}: no CustomResourceDefinition in the dump for its "
                f"{seen.count} object(s); added {crd['metadata']['name']} inferred from them "
                f"({spec['scope']}, served as {', '.join(seen.versions)}, every field kept)"
            )
    return out
