"""``ipset -L`` (``ipset list``) listings, as people paste them, into ipsets.

The listing is the human form of ``ipset save``::

    Name: KUBE-CLUSTER-IP
    Type: hash:ip,port
    Revision: 5
    Header: family inet hashsize 1024 maxelem 65536
    Size in memory: 600
    References: 2
    Number of entries: 1
    Members:
    10.96.0.1,tcp:443

Each set becomes the same :class:`~.ipset.IpSet` that ``ipset save`` text gives
(:func:`~.ipset.parse_ipset_save`), so both forms mean the same thing. Errors are
:class:`~netmodel.errors.InputError` naming the source and line.
"""

from __future__ import annotations

from collections.abc import Mapping

from netmodel.errors import InputError

from .ipset import IpSet, parse_ipset_save

__all__ = ["looks_like_ipset_list", "parse_ipset_any", "parse_ipset_list"]

_HEADER_KEYS = (
    "Name",
    "Type",
    "Revision",
    "Header",
    "Size in memory",
    "References",
    "Number of entries",
    "Members",
)


def looks_like_ipset_list(text: str) -> bool:
    """True when ``text`` is an ``ipset -L`` listing rather than ``ipset save`` text."""
    for raw in text.splitlines():
        line = raw.strip()
        if line:
            return line.startswith("Name:")
    return False


def parse_ipset_list(text: str, source: str = "<ipset -L>") -> Mapping[str, IpSet]:
    """Parse an ``ipset -L`` listing (one or more sets)."""
    sets: dict[str, IpSet] = {}
    name = ""
    stype = ""
    family = 4
    members: list[tuple[int, str]] = []
    in_members = False

    def close() -> None:
        if not name:
            return
        if not stype:
            raise InputError(f"{source}: set {name}: no 'Type:' line")
        for n, m in members:
            try:
                IpSet.of(name, stype, [m], family)
            except (InputError, ValueError) as e:
                why = e.reason if isinstance(e, InputError) else str(e)
                raise InputError(f"{source}:{n}: {why}") from None
        sets[name] = IpSet.of(name, stype, [m for _, m in members], family)

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        if sep and key in _HEADER_KEYS and not (in_members and key not in ("Name",)):
            value = value.strip()
            if key == "Name":
                close()
                name, stype, family, members, in_members = value, "", 4, [], False
                if not name:
                    raise InputError(f"{source}:{n}: empty set name")
            elif not name:
                raise InputError(f"{source}:{n}: {key!r} before any 'Name:' line")
            elif key == "Type":
                stype = value
            elif key == "Header":
                family = 6 if "inet6" in value.split() else 4
            elif key == "Members":
                in_members = True
            continue
        if not in_members:
            raise InputError(f"{source}:{n}: cannot parse {line!r}")
        words = line.split()
        if "nomatch" in words[1:]:
            raise InputError(f"{source}:{n}: {line!r}: 'nomatch' members are not modelled")
        members.append((n, words[0]))
    close()
    return sets


def parse_ipset_any(text: str, source: str) -> Mapping[str, IpSet]:
    """``ipset save`` text or an ``ipset -L`` listing, whichever ``text`` is."""
    if looks_like_ipset_list(text):
        return parse_ipset_list(text, source)
    return parse_ipset_save(text, source)
