"""Kubernetes resource quantities ("100m", "1.5", "512Mi", "1e3", "2G") as integers."""

from __future__ import annotations

import functools
import math
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


@functools.lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Decimal:
    """The value of a quantity; raises ValueError for malformed text."""
    s = str(text).strip()
    if not s:
        raise ValueError("empty quantity")
    for suffix, mult in _BINARY.items():
        if s.endswith(suffix):
            return _number(s[: -len(suffix)], text) * mult
    if s[-1] in _DECIMAL and not s[-1].isdigit():
        return _number(s[:-1], text) * _DECIMAL[s[-1]]
    return _number(s, text)  # plain number, possibly with an exponent (1e3)


def _number(s: str, text: str) -> Decimal:
    try:
        d = Decimal(s)
    except InvalidOperation:
        raise ValueError(f"invalid quantity {text!r}") from None
    if not d.is_finite():
        raise ValueError(f"invalid quantity {text!r}")
    return d


def milli_value(text: str) -> int:
    """The quantity in thousandths, rounded up (CPU: "100m" -> 100, "2" -> 2000)."""
    return math.ceil(parse_quantity(text) * 1000)


def int_value(text: str) -> int:
    """The quantity as an integer, rounded up (memory bytes, pod counts)."""
    return math.ceil(parse_quantity(text))
