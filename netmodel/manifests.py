"""Read multi-document YAML (files or directories) into typed objects.

Contract: :func:`load` either returns every document of every file, or raises one
:class:`~netmodel.errors.InputError` naming the file, the document number (1-based),
the object and the field. It never returns a partial result.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from netmodel import crdsupply, customresources, schema
from netmodel.cluster import API_VERSION as CLUSTER_API
from netmodel.cluster import Cluster, cluster_from_dict
from netmodel.errors import InputError, SchemaError
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject
from netmodel.proxyconfig import API_VERSION as PROXY_API
from netmodel.proxyconfig import KubeProxyConfiguration, proxy_config_from_dict


@dataclass(frozen=True)
class Manifests:
    """What a set of manifests declares."""

    objects: tuple[KubeObject, ...] = ()
    cluster: Cluster | None = None
    proxy_config: KubeProxyConfiguration | None = None
    sources: tuple[str, ...] = field(default=())
    #: kinds a ``kubectl get -o yaml`` dump held that svclab does not model, with counts
    skipped: tuple[tuple[str, int], ...] = ()
    #: notes for the user (e.g. what was inferred about the cluster)
    warnings: tuple[str, ...] = ()
    #: a kubectl dump's Endpoints, as recorded (compared with the computed ones)
    recorded_endpoints: tuple[dict[str, Any], ...] = ()


def _describe(doc: dict[str, Any]) -> str | None:
    kind = doc.get("kind")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    name = meta.get("name") if isinstance(meta, dict) else None
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    if not kind:
        return None
    if name is None:
        return str(kind)
    return f"{kind}/{ns}/{name}" if ns else f"{kind}/{name}"


#: libyaml's loader when PyYAML was built with it (the same YAML 1.1 safe constructors,
#: about ten times faster than the pure-Python one on a ``kubectl get -A -o yaml`` dump)
_SAFE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class _LOADER(_SAFE):
    """The safe loader reading timestamps as strings, as Kubernetes does (its YAML becomes
    JSON, which has no timestamp type): ``oc``/``kubectl`` of some versions print
    ``lastTransitionTime: 2017-02-10T16:33:46Z`` unquoted."""

    yaml_implicit_resolvers = {
        first: [r for r in resolvers if r[0] != _TIMESTAMP]
        for first, resolvers in _SAFE.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._plain_tags: dict[str, str] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        """The resolver's tag, remembered per plain scalar's text: the parser asks for
        each scalar (keys included), and the resolver tries its regular expressions in
        Python each time; a manifest repeats the same few hundred texts (``name``,
        ``apps/v1``, ``TCP``...). Plain scalars only (the tag depends only on the text
        then, this loader having no path resolvers)."""
        if kind is yaml.ScalarNode and implicit[0] and not self.yaml_path_resolvers:
            tag = self._plain_tags.get(value)
            if tag is None:
                tag = self._plain_tags[value] = super().resolve(kind, value, implicit)
            return tag
        return super().resolve(kind, value, implicit)


_STR, _MAP, _SEQ = (f"tag:yaml.org,2002:{t}" for t in ("str", "map", "seq"))


class _TreeLoader(_LOADER):
    """The safe loader, with plain maps, sequences and strings (all of a kubectl dump but
    its numbers and booleans) built in one recursive pass instead of the constructor's
    generator machinery: half the reading time of a 10,000-Service dump. Every other
    node (ints, bools, nulls, timestamps, merge keys, explicit tags) goes through the
    safe constructor, so the result equals ``yaml.safe_load``'s. Only for text without
    anchors (``&``): an alias would be built once per use, and a recursive one forever."""

    def construct_document(self, node: yaml.Node) -> Any:
        return self._tree(node)

    def _tree(self, node: yaml.Node) -> Any:
        tag = node.tag
        if tag == _STR:
            return node.value
        if tag == _MAP:
            out: dict[Any, Any] = {}
            for k, v in node.value:
                if k.tag != _STR:
                    return self.construct_object(node, deep=True)
                out[k.value] = self._tree(v)
            return out
        if tag == _SEQ:
            return [self._tree(n) for n in node.value]
        return self.construct_object(node, deep=True)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while a dump is read: it builds hundreds of thousands of
    acyclic dicts, lists and strings, and each collection rescans all of them (half the
    reading time of a 10,000-Service dump)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _load_all(text: str) -> list[Any]:
    """Every document of ``text``. ``-o json`` output (one JSON value) is read by the
    json module, which is faster still; text that is not strict JSON is read as YAML."""
    with _gc_paused():
        return _read_all(text)


def _read_all(text: str) -> list[Any]:
    if text.lstrip()[:1] in ("{", "["):
        try:
            return [json.loads(text)]
        except ValueError:
            pass  # JSON-like YAML (comments, trailing documents): the YAML reader says
    loader = _LOADER if "&" in text else _TreeLoader
    try:
        return list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError:
        if _SAFE is yaml.SafeLoader:
            raise
    # refused: the pure-Python reader says where, in its words (libyaml places some
    # problems at the end of the input instead of where they start)
    return list(yaml.safe_load_all(text))


def parse_documents(text: str, *, source: str = "<input>") -> list[dict[str, Any]]:
    """Split YAML text into mapping documents (empty documents, ``List`` items and the items
    of typed lists such as ``NodeList`` unfolded)."""
    try:
        raw = _load_all(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"malformed YAML: {where}{problem}", file=source) from None
    docs: list[dict[str, Any]] = []
    for i, d in enumerate(raw, start=1):
        if d is None:
            continue
        if not isinstance(d, dict):
            raise InputError(
                f"document is a {type(d).__name__}, not a mapping", file=source, document=i
            )
        kind = d.get("kind")
        if kind == "List" and _items(d) is not None:
            docs.extend(item for item in _items(d) or () if isinstance(item, dict))
        elif _typed_list(kind, d):
            # ``NodeList``, ``ServiceList``...: what the API returns (``kubectl get --raw``,
            # ``kubectl cluster-info dump``); its items carry no kind or apiVersion
            item_kind, api = str(kind)[: -len("List")], d.get("apiVersion")
            for item in _items(d) or ():
                if isinstance(item, dict):
                    docs.append({"apiVersion": api, "kind": item_kind, **item})
        else:
            docs.append(d)
    return docs


def _items(doc: dict[str, Any]) -> list[Any] | None:
    """A list document's ``items``: the array, or an empty one for ``items: null`` (an
    empty list as the API server encodes it, a Go nil slice: a support bundle's
    ``services/kube-public.json`` is ``{"kind": "ServiceList", ..., "items": null}``);
    None when there is no such key or it holds something else."""
    if "items" not in doc:
        return None
    items = doc["items"]
    if items is None:
        return []
    return items if isinstance(items, list) else None


def _typed_list(kind: object, doc: dict[str, Any]) -> bool:
    """A ``<Kind>List`` document (Kubernetes' list convention: a kind ending in ``List``
    with an ``items`` array, ``null`` when empty)."""
    return (
        isinstance(kind, str)
        and len(kind) > len("List")
        and kind.endswith("List")
        and _items(doc) is not None
    )


def decode(doc: dict[str, Any], *, source: str = "<input>", index: int | None = None) -> Any:
    """One document -> KubeObject | Cluster | KubeProxyConfiguration (strictly checked)."""
    api, kind = doc.get("apiVersion"), doc.get("kind")
    if kind == "Cluster" and api == CLUSTER_API:
        return cluster_from_dict(doc, file=source, doc=index)
    if kind == "KubeProxyConfiguration" and api == PROXY_API:
        return proxy_config_from_dict(doc, file=source, doc=index)
    try:
        schema.check(doc)
        return object_from_dict(doc)
    except SchemaError as e:
        raise SchemaError(
            e.reason, file=source, document=index, obj=_describe(doc), field=e.field
        ) from None
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise SchemaError(
            err["msg"], file=source, document=index, obj=_describe(doc), field=loc
        ) from None


def _files(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*") if q.suffix in (".yaml", ".yml", ".json")))
        elif p.exists() or str(p) == "-":
            out.append(p)
        else:
            raise InputError("no such file or directory", file=str(p))
    return out


def load_text(text: str, *, source: str = "<input>") -> Manifests:
    return _collect([(source, text)])


def load(paths: Sequence[str | Path]) -> Manifests:
    """Load files and directories (``-`` is standard input)."""
    import sys

    texts = []
    for f in _files(paths):
        try:
            texts.append((str(f), sys.stdin.read() if str(f) == "-" else f.read_text()))
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror}", file=str(f)) from None
        except UnicodeDecodeError:
            raise InputError("not a text file (UTF-8)", file=str(f)) from None
    return _collect(texts)


def _legacy_resolved(source: str, index: int, doc: dict[str, Any]) -> dict[str, Any]:
    from netmodel import kubedump

    try:
        return kubedump.resolve_legacy(doc)
    except SchemaError as e:
        raise SchemaError(
            e.reason, file=source, document=index or None, obj=_describe(doc), field=e.field
        ) from None


def _collect(texts: list[tuple[str, str]]) -> Manifests:
    with _gc_paused():
        return _collect_paused(texts)


def _collect_paused(texts: list[tuple[str, str]]) -> Manifests:
    from netmodel import kubedump

    objects: list[KubeObject] = []
    cluster: Cluster | None = None
    proxy: KubeProxyConfiguration | None = None
    located: list[tuple[str, int, dict[str, Any]]] = []
    for source, text in texts:
        for i, doc in enumerate(parse_documents(text, source=source), start=1):
            located.append((source, i, doc))
    skipped: tuple[tuple[str, int], ...] = ()
    warnings: tuple[str, ...] = ()
    recorded_endpoints: tuple[dict[str, Any], ...] = ()
    for source, i, doc in located:  # a dump's CRDs: their objects are modelled kinds
        if doc.get("kind") == customresources.CRD_KIND:
            value = decode(doc, source=source, index=i or None)
            customresources.provisional(value)
    dump = kubedump.is_cluster_dump(d for _, _, d in located)
    # custom resources without their CRD: a shipped one, or (a dump) one inferred
    supplied = crdsupply.missing([d for _, _, d in located], infer=dump)
    for crd in supplied.crds:
        customresources.provisional(decode(crd, source="<svclab>"))
    first = located[0][0] if located else "<input>"
    located = [(first, 0, crd) for crd in supplied.crds] + located
    warnings = tuple(supplied.warnings)
    if dump:
        has_cluster = any(
            d.get("kind") == "Cluster" and d.get("apiVersion") == CLUSTER_API for _, _, d in located
        )
        try:
            prepared = kubedump.prepare([d for _, _, d in located], has_cluster=has_cluster)
        except SchemaError as e:  # a Calico object: say which file and document
            at = next(
                ((src, i) for src, i, d in located if _describe(d) == e.obj),
                (None, None),
            )
            raise SchemaError(
                e.reason, file=at[0], document=at[1] or None, obj=e.obj, field=e.field
            ) from None
        kept: list[tuple[str, int, dict[str, Any]]] = []
        for s, i, d in located:
            if d.get("kind") in kubedump.MODELLED_KINDS or d.get("kind") in (
                "Cluster",
                "KubeProxyConfiguration",
            ):
                kept.append((s, i, d))
        # prepare() keeps the modelled documents in order (stripped of server fields)
        stripped = iter(prepared.docs)
        located = [(s, i, _legacy_resolved(s, i, next(stripped))) for s, i, _ in kept]
        if prepared.cluster is not None:
            located.insert(0, (texts[0][0] if texts else "<input>", 0, prepared.cluster))
        skipped = tuple(sorted(prepared.skipped.items()))
        warnings = (*warnings, *prepared.warnings)
        recorded_endpoints = tuple(prepared.endpoints)
    for source, i, doc in located:
        value = decode(doc, source=source, index=i or None)
        if getattr(value, "kind", None) == customresources.CRD_KIND:
            customresources.provisional(value)  # its objects may follow in these files
        if isinstance(value, Cluster):
            if cluster is not None:
                raise InputError("a second Cluster document", file=source, document=i)
            cluster = value
        elif isinstance(value, KubeProxyConfiguration):
            if proxy is not None:
                raise InputError(
                    "a second KubeProxyConfiguration document", file=source, document=i
                )
            proxy = value
        else:
            objects.append(value)
    if cluster is not None:
        warnings = (*warnings, *cluster.spec.layout_warnings())
    return Manifests(
        objects=tuple(objects),
        cluster=cluster,
        proxy_config=proxy,
        sources=tuple(s for s, _ in texts),
        skipped=skipped,
        warnings=warnings,
        recorded_endpoints=recorded_endpoints,
    )
