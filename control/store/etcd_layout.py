"""Where each object lives in etcd: kube-apiserver's key layout, and the JSON values.

Keys are ``/registry/<resource>/<namespace>/<name>`` for namespaced kinds and
``/registry/<resource>/<name>`` for cluster-scoped ones, with kube-apiserver's resource
names (``services/specs`` for Services, ``minions`` for Nodes)::

    /registry/pods/default/web-5d8f-abcde
    /registry/services/specs/default/web
    /registry/minions/node-1
    /registry/events/default/web.00000042

svclab's own records live under ``/registry/svclab.dev/`` (kube-apiserver never writes
there): the Cluster document and the last-write marker (see :mod:`control.store.etcd`).

Values are the object's JSON (the ``to_dict`` form) without ``metadata.resourceVersion``:
as in kube-apiserver, the version is the key's ``mod_revision`` and is filled in when
the value is read. kube-apiserver stores protobuf; svclab stores JSON so that
``etcdctl get`` shows something a person can read.
"""

from __future__ import annotations

import base64

from netmodel import kinds
from netmodel.kinds import KINDS
from netmodel.objects import KubeObject

PREFIX = "/registry/"

#: store kind -> the resource path kube-apiserver uses under /registry (from the kind
#: table: :data:`netmodel.kinds.ROWS`; rebuilt in place when rows are registered:
#: a custom resource's is ``<group>/<plural>``, as kube-apiserver keeps it)
RESOURCES: dict[str, str] = {}

#: svclab's own records (not Kubernetes objects)
SVCLAB_PREFIX = PREFIX + "svclab.dev/"
#: written in every svclab write transaction; its mod_revision is the last svclab write
MARKER_KEY = SVCLAB_PREFIX + "revision"
#: undo records of a transaction committed in several Txns (see control.store.etcd)
PENDING_PREFIX = SVCLAB_PREFIX + "pending/"
#: guards: keys whose mod_revision orders writers deriving from shared state
#: (:meth:`control.store.etcd.EtcdStore.guard`)
GUARD_PREFIX = SVCLAB_PREFIX + "guards/"
#: records by name (the Cluster document is ``clusters/<name>``)
RECORD_PREFIX = SVCLAB_PREFIX + "records/"

# longest resource path first, so "services/specs/" is tried before anything shorter
_BY_PREFIX: list[tuple[str, str]] = []


@kinds.on_change
def _rebuild() -> None:
    """Derive :data:`RESOURCES` and the key prefixes from the rows (in place)."""
    RESOURCES.clear()
    RESOURCES.update({r.store_kind: r.etcd for r in kinds.stored_rows() if r.etcd and r.store_kind})
    _BY_PREFIX[:] = sorted(
        ((PREFIX + res + "/", kind) for kind, res in RESOURCES.items()),
        key=lambda p: -len(p[0]),
    )


_rebuild()


def resource_prefix(kind: str, namespace: str | None = None) -> str:
    """``/registry/pods/`` or, with a namespace, ``/registry/pods/NS/``."""
    try:
        res = RESOURCES[kind]
    except KeyError:
        raise KeyError(f"kind {kind!r} has no etcd layout") from None
    base = PREFIX + res + "/"
    return base + namespace + "/" if namespace is not None else base


def object_key(kind: str, key: str) -> str:
    """The etcd key of ``(kind, key)``; ``key`` is ``ns/name`` or ``name``."""
    return resource_prefix(kind) + key


def split_key(etcd_key: str) -> tuple[str, str] | None:
    """``(kind, key)`` of an etcd key, or None for a key that holds no svclab object."""
    for prefix, kind in _BY_PREFIX:
        if etcd_key.startswith(prefix):
            return kind, etcd_key[len(prefix) :]
    return None


def encode_value(obj: KubeObject) -> str:
    """The stored JSON: the object without its resourceVersion."""
    if obj.metadata.resource_version is not None:
        obj = obj.with_meta(resource_version=None)
    return obj.model_dump_json(by_alias=True, exclude_unset=True, exclude_none=True)


_META = b'"metadata":{'


def decode_value(kind: str, data: bytes | str, mod_revision: int) -> KubeObject:
    """The object stored in ``data``, its resourceVersion set to ``mod_revision``.

    svclab's own values (written by :func:`encode_value`) get the version spliced into
    the JSON before it is parsed (a copy of the parsed object costs as much as the
    parse); anything else is parsed, then given its version."""
    cls = KINDS.get(kind)
    if cls is None:
        raise KeyError(f"unknown kind {kind!r} in etcd")
    raw = data.encode() if isinstance(data, str) else data
    at = raw.find(_META)
    # top-level metadata (nothing opened before it) without a version of its own
    if at > 0 and b"{" not in raw[1:at] and b'"resourceVersion"' not in raw:
        at += len(_META)
        rv = b'"resourceVersion":"%d"%s' % (mod_revision, b"" if raw[at : at + 1] == b"}" else b",")
        return cls.model_validate_json(raw[:at] + rv + raw[at:])
    obj = cls.model_validate_json(raw)
    return obj.with_meta(resource_version=str(mod_revision))


def b64(text: str | bytes) -> str:
    """etcd's JSON gateway carries keys and values base64-encoded."""
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: str) -> str:
    """The ``range_end`` (base64, as the gateway wants it) that makes a range cover every
    key starting with ``prefix``."""
    raw = prefix.encode()
    return b64(raw[:-1] + bytes([raw[-1] + 1]))
