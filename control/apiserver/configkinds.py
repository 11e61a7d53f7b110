"""ConfigMap, Secret and ServiceAccount (core/v1): kinds with no networking meaning,
stored through the generic path (:class:`~netmodel.objects.GenericObject`), with
kube-apiserver's defaulting and validation.

* Secret: ``type`` defaults to ``Opaque``; ``stringData`` is merged into ``data``
  (base64, its entries win) and dropped, as kube-apiserver's conversion does on every
  write, so it is never stored nor returned.
* ConfigMap and Secret: every ``data`` (and ConfigMap ``binaryData``) key is a valid
  config key; a key is not in both bags; the values total at most 1 MiB; Secret
  values are base64; an ``immutable`` object keeps its data, and stays immutable.
* Secret types: the keys each built-in type requires (``tls.crt``/``tls.key``, ...);
  ``type`` is immutable.

Its strategy (:mod:`.strategy`) calls these. They read the object's wire form and
raise through
:class:`~control.apiserver.validation.Problems` with kube-apiserver's field paths and
wording (``data[a b]: Invalid value: "a b": a valid config key must consist of ...``).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from netmodel.objects import KubeObject

if TYPE_CHECKING:
    from control.apiserver.validation import Problems

#: kube-apiserver's corev1.MaxSecretSize (also the ConfigMap limit)
MAX_SIZE = 1 << 20
_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
    "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')"
)
IMMUTABLE_MSG = "field is immutable when `immutable` is set"

#: Secret type -> the data keys it requires
_REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
}
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"

KINDS = ("ConfigMap", "Secret", "ServiceAccount")


def check_config_key(key: str) -> list[str]:
    """kube-apiserver's IsConfigMapKey: the reasons ``key`` is not a valid key (none if
    it is)."""
    out: list[str] = []
    if len(key) > 253:
        out.append("must be no more than 253 characters")
    if not _CONFIG_KEY.fullmatch(key):
        out.append(_CONFIG_KEY_MSG)
    if key == ".":
        out.append("must not be '.'")
    elif key == "..":
        out.append("must not be '..'")
    elif key.startswith(".."):
        out.append("must not start with '..'")
    return out


def default(obj: KubeObject) -> KubeObject:
    """A Secret with ``type`` set (``Opaque``) and ``stringData`` merged into ``data``;
    other kinds unchanged. Idempotent."""
    if obj.kind != "Secret":
        return obj
    d = obj.to_dict()
    if d.get("type") and "stringData" not in d:
        return obj  # the usual case: nothing to do
    d["type"] = d.get("type") or "Opaque"
    if "stringData" in d:
        data = dict(d.get("data") or {})
        string_data = d.pop("stringData")
        if isinstance(string_data, Mapping):
            for k, v in string_data.items():
                data[str(k)] = base64.b64encode(str(v).encode()).decode("ascii")
        d["data"] = data
    return type(obj).model_validate(d)


def _bag(obj: dict[str, Any], name: str, p: Problems) -> dict[str, Any]:
    bag = obj.get(name)
    if bag is None:
        return {}
    if not isinstance(bag, dict):
        p.invalid(name, bag, "must be an object")
    for k, v in bag.items():
        if not isinstance(v, str):
            p.invalid(f"{name}[{k}]", v, "must be a string")
    return bag


def _keys(
    d: dict[str, Any], name: str, other: dict[str, Any], other_name: str, p: Problems
) -> None:
    for key in d:
        for why in check_config_key(key):
            p.invalid(f"{name}[{key}]", key, why)
        if key in other:
            p.invalid(f"{name}[{key}]", key, f"duplicate of key present in {other_name}")


def _decoded_size(bag: dict[str, str], name: str, p: Problems) -> int:
    total = 0
    for k, v in bag.items():
        try:
            total += len(base64.b64decode(v, validate=True))
        except (binascii.Error, ValueError):
            p.invalid(f"{name}[{k}]", "<value omitted>", "illegal base64 data")
    return total


def validate(obj: KubeObject, p: Problems) -> None:
    """kube-apiserver's ValidateConfigMap / ValidateSecret (ServiceAccounts need only
    the metadata checks the caller makes)."""
    d = obj.to_dict()
    if obj.kind == "ConfigMap":
        data = _bag(d, "data", p)
        binary = _bag(d, "binaryData", p)
        _keys(data, "data", binary, "binaryData", p)
        _keys(binary, "binaryData", data, "data", p)
        size = sum(len(v.encode()) for v in data.values())
        size += _decoded_size(binary, "binaryData", p)
        if size > MAX_SIZE:
            p.too_long("data", MAX_SIZE)
    elif obj.kind == "Secret":
        data = _bag(d, "data", p)
        _keys(data, "data", {}, "", p)
        if _decoded_size(data, "data", p) > MAX_SIZE:
            p.too_long("data", MAX_SIZE)
        type_ = str(d.get("type") or "Opaque")
        for key in _REQUIRED_KEYS.get(type_, ()):
            if key not in data:
                p.required(f"data[{key}]")
        sa_token = type_ == "kubernetes.io/service-account-token"
        if sa_token and not obj.metadata.annotations.get(SA_NAME_ANNOTATION):
            p.required(f"metadata.annotations[{SA_NAME_ANNOTATION}]")


def validate_update(obj: KubeObject, old: KubeObject, p: Problems) -> None:
    """Immutable ConfigMaps and Secrets keep their data and stay immutable; a Secret's
    type never changes."""
    new_d, old_d = obj.to_dict(), old.to_dict()
    if obj.kind == "Secret" and (new_d.get("type") or "Opaque") != (old_d.get("type") or "Opaque"):
        p.invalid("type", new_d.get("type") or "", "field is immutable")
    if old_d.get("immutable") is True:
        if new_d.get("immutable") is not True:
            p.forbidden("immutable", IMMUTABLE_MSG)
        for bag in ("data", "binaryData"):
            if (new_d.get(bag) or {}) != (old_d.get(bag) or {}):
                p.forbidden(bag, IMMUTABLE_MSG)
