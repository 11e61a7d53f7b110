"""What the strategies of the kinds without a controller of their own share
(:mod:`.kinds_networking`, :mod:`.kinds_policy`, :mod:`.kinds_storage`): a strategy that
defaults and validates an object's wire form (a dict, as kube-apiserver's internal
types hold it after decoding), and the checks many kinds make, with kube-apiserver's
field paths and wording (apimachinery's ``ValidateLabelSelector``, ``IsValidPortNum``,
``IsValidPercent``, ...).

A :class:`WireStrategy` subclass overrides :meth:`~WireStrategy.default_wire` (return the
defaulted dict, idempotent), :meth:`~WireStrategy.validate_wire` and
:meth:`~WireStrategy.validate_update_wire`; they raise the first problem through
:class:`~control.apiserver.validation.Problems`. The object is rebuilt from the dict only
when defaulting changed it.
"""

from __future__ import annotations

import ipaddress
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from control.apiserver.names import (
    check_dns1123_subdomain,
    check_port_name,
    check_qualified_name,
)
from control.apiserver.strategybase import GenericStrategy
from control.apiserver.validation import PERCENT, PERCENT_MESSAGE, Problems
from netmodel.cluster import ClusterSpec
from netmodel.objects import KubeObject

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
PORT_RANGE_MSG = "must be between 1 and 65535, inclusive"
CIDR_MSG = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
NONNEGATIVE_MSG = "must be greater than or equal to 0"
IMMUTABLE_MSG = "field is immutable"
WILDCARD_FMT = r"\*\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
WILDCARD_MSG = (
    "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, "
    "which must consist of lower case alphanumeric characters, '-' or '.' and end with an "
    f"alphanumeric character (e.g. '*.example.com', regex used for validation is '{WILDCARD_FMT}')"
)


class WireStrategy(GenericStrategy):
    """A strategy (:class:`control.apiserver.strategy.Strategy`) over the object's wire
    form. ``counts_generation``: whether kube-apiserver sets ``metadata.generation`` for
    the kind (its PrepareForCreate sets it to 1)."""

    def __init__(self, *, counts_generation: bool = False) -> None:
        self.counts_generation = counts_generation

    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        return d

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        return None

    def validate_update_wire(self, new: dict[str, Any], old: dict[str, Any], p: Problems) -> None:
        return None

    def default(self, obj: KubeObject, cluster: ClusterSpec) -> KubeObject:
        d = obj.to_dict()
        out = self.default_wire(d)  # never mutates d: it copies what it fills in
        if out == d:
            return obj
        return type(obj).model_validate(out)

    def validate(
        self, obj: KubeObject, cluster: ClusterSpec, p: Problems, stored: KubeObject | None
    ) -> None:
        self.validate_wire(obj.to_dict(), p)

    def validate_update(self, obj: KubeObject, old: KubeObject, p: Problems) -> None:
        self.validate_update_wire(obj.to_dict(), old.to_dict(), p)

    def keep_assigned(self, obj: KubeObject, current: KubeObject) -> KubeObject:
        return obj


def at(d: Any, *path: str) -> Any:
    """``d[path[0]][path[1]]...``, None where a step is missing or not an object."""
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def obj_of(d: dict[str, Any], key: str) -> dict[str, Any]:
    """``d[key]`` as an object (``{}`` when absent): a sub-struct to fill in."""
    v = d.get(key)
    return dict(v) if isinstance(v, dict) else {}


def validate_label_selector(sel: Any, f: str, p: Problems) -> None:
    """apimachinery's ValidateLabelSelector: matchLabels as labels, each expression's
    operator, values and key."""
    if sel is None:
        return
    if not isinstance(sel, dict):
        p.invalid(f, sel, "must be an object")
    p.labels(f"{f}.matchLabels", sel.get("matchLabels") or {})
    for i, e in enumerate(sel.get("matchExpressions") or []):
        ef = f"{f}.matchExpressions[{i}]"
        op, values = e.get("operator", ""), e.get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                p.required(f"{ef}.values", "must be specified when `operator` is 'In' or 'NotIn'")
        elif op in ("Exists", "DoesNotExist"):
            if values:
                p.forbidden(
                    f"{ef}.values",
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
        else:
            p.invalid(f"{ef}.operator", op, "not a valid selector operator")
        p.check(f"{ef}.key", str(e.get("key", "")), check_qualified_name)


def validate_port_number(f: str, value: Any, p: Problems) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        p.invalid(f, value, PORT_RANGE_MSG)


def validate_port_name_or_number(f: str, value: Any, p: Problems) -> None:
    """An int-or-string port: a number in 1..65535 or an IANA service name."""
    if isinstance(value, str):
        p.check(f, value, check_port_name)
    else:
        validate_port_number(f, value, p)


def validate_int_or_percent(f: str, value: Any, p: Problems) -> None:
    """ValidatePositiveIntOrPercent and IsNotMoreThan100Percent."""
    if isinstance(value, str):
        if not PERCENT.fullmatch(value):
            p.invalid(f, value, PERCENT_MESSAGE)
        if int(value[:-1]) > 100:
            p.invalid(f, value, "must not be greater than 100%")
    elif isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            p.invalid(f, value, NONNEGATIVE_MSG)
    else:
        p.invalid(f, value, "must be an integer or percentage (e.g '5%')")


def parse_cidr(f: str, value: Any, p: Problems) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A CIDR in kube's strict form: a valid network (host bits may be set, as Go's
    ParseCIDR allows), or ``Invalid value: ...: must be a valid CIDR value``."""
    try:
        if not isinstance(value, str) or "/" not in value:
            raise ValueError(value)
        return ipaddress.ip_network(value, strict=False)
    except ValueError:
        p.invalid(f, value, CIDR_MSG)


def validate_dns_host(f: str, host: str, p: Problems) -> None:
    """A host name that may be a wildcard (``*.example.com``): IsWildcardDNS1123Subdomain,
    else IsDNS1123Subdomain."""
    if "*" in host:
        if len(host) > 253:
            p.invalid(f, host, "must be no more than 253 characters")
        if not re.fullmatch(WILDCARD_FMT, host):
            p.invalid(f, host, WILDCARD_MSG)
    else:
        p.check(f, host, check_dns1123_subdomain)


def nonnegative(f: str, value: Any, p: Problems) -> None:
    if value is not None and (not isinstance(value, int) or value < 0):
        p.invalid(f, value, NONNEGATIVE_MSG)


_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
QUANTITY_MSG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def quantity(f: str, value: Any, p: Problems) -> Decimal:
    """A resource.Quantity's value (``100m``, ``1Gi``, ``2e3``, or a JSON number)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Decimal(str(value))
    text = str(value)
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            number, scale = text[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        number, scale = text, Decimal(1)
    try:
        if not number or number.strip() != number:
            raise InvalidOperation
        return Decimal(number) * scale
    except InvalidOperation:
        p.invalid(f, value, QUANTITY_MSG)
