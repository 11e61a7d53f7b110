"""ipsets as data, for ``-m set --match-set NAME FLAGS`` (IPVS mode's glue rules).

An :class:`IpSet` has a type (``hash:ip``, ``hash:ip,port``, ``hash:ip,port,ip``,
``hash:ip,port,net``, ``hash:net``, ``hash:net,port``, ``bitmap:port``) and members given
as ``ipset`` writes them (``10.0.0.1,tcp:80``, ``10.0.0.0/8``, ``30000``).
:func:`parse_ipset_save` reads ``ipset save`` output. Matching takes one packet field per
dimension, chosen by the rule's flags (``src``/``dst``), like the kernel's
``xt_set``. Timeouts and counters are not modelled.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from netmodel.errors import InputError, UnsupportedRuleError

from .conntrack import addr_int

__all__ = ["IpSet", "parse_ipset_save"]

_DIMS = {
    "hash:ip": ("ip",),
    "hash:ip,port": ("ip", "port"),
    "hash:ip,port,ip": ("ip", "port", "ip"),
    "hash:ip,port,net": ("ip", "port", "net"),
    "hash:net": ("net",),
    "hash:net,port": ("net", "port"),
    "bitmap:port": ("port",),
    "bitmap:ip": ("ip",),
}

Key = tuple[object, ...]


def _norm(dim: str, text: str, bitmap: bool) -> object:
    if dim == "ip":
        return addr_int(ipaddress.ip_address(text))
    if dim == "net":
        net = ipaddress.ip_network(text, strict=False)
        return (addr_int(net.network_address), net.prefixlen, net.max_prefixlen)
    proto, _, port = text.rpartition(":")
    if bitmap:
        return (None, int(port))
    return ((proto or "tcp").lower(), int(port))


@dataclass(frozen=True)
class IpSet:
    """One ipset. ``members`` are normalised keys; build with :meth:`of`."""

    name: str
    type: str
    members: frozenset[Key] = frozenset()
    family: int = 4
    _prefixes: tuple[tuple[int, ...], ...] = field(default=(), repr=False, compare=False)
    nomatch: frozenset[Key] = frozenset()

    @classmethod
    def of(
        cls,
        name: str,
        type: str,
        members: Iterable[str],
        family: int = 4,
        nomatch: Iterable[str] = (),
    ) -> IpSet:
        """Build from member strings as ``ipset add`` takes them; ``nomatch``: members
        added with the ``nomatch`` flag (sets with a ``net`` dimension): a packet whose
        most specific matching entry is one of them is not in the set, as in the kernel's
        hash:*net* types (a hole in a larger network)."""
        if type not in _DIMS:
            raise InputError(f"ipset {name}: unsupported set type {type!r}")
        dims = _DIMS[type]
        bitmap = type.startswith("bitmap:")

        def norm(m: str) -> Key:
            parts = m.split(",")
            if len(parts) != len(dims):
                raise InputError(f"ipset {name}: member {m!r} does not fit type {type}")
            return tuple(_norm(d, p, bitmap) for d, p in zip(dims, parts, strict=True))

        keys = {norm(m) for m in members}
        holes = {norm(m) for m in nomatch}
        if holes and "net" not in dims:
            raise InputError(f"ipset {name}: nomatch needs a set type with a net ({type})")
        keys -= holes
        prefixes: list[tuple[int, ...]] = []
        for i, d in enumerate(dims):
            if d == "net":
                prefixes.append(tuple(sorted({k[i][1] for k in keys | holes}, reverse=True)))  # type: ignore[index]
            else:
                prefixes.append(())
        return cls(name, type, frozenset(keys), family, tuple(prefixes), frozenset(holes))

    @property
    def dims(self) -> tuple[str, ...]:
        return _DIMS[self.type]

    def contains(self, values: tuple[object, ...]) -> bool:
        """Membership of one packet key: ints for ip/net dimensions, ``(proto, port)``
        for port dimensions (in dimension order)."""
        dims = self.dims
        if "net" not in dims:
            if self.type.startswith("bitmap:") and dims == ("port",):
                values = ((None, values[0][1]),)  # type: ignore[index]
            return values in self.members
        cands: list[list[object]] = []
        for i, d in enumerate(dims):
            v = values[i]
            if d == "net":
                opts: list[object] = []
                for plen in self._prefixes[i]:
                    width = 128 if self.family == 6 else 32
                    mask = ((1 << width) - 1) ^ ((1 << (width - plen)) - 1)
                    base = int(v) & mask if self.family == 4 else (int(v) & mask) | (1 << 128)  # type: ignore[call-overload]
                    opts.append((base, plen, width))
                cands.append(opts)
            else:
                cands.append([v])
        keys: list[tuple[object, ...]] = [()]
        for opts in cands:
            keys = [(*k, o) for k in keys for o in opts]
        # most specific first: the first entry found decides, and a nomatch entry means
        # "not in the set"
        for k in keys:
            if k in self.nomatch:
                return False
            if k in self.members:
                return True
        return False


def parse_ipset_save(text: str, source: str = "<ipset save>") -> Mapping[str, IpSet]:
    """Parse ``ipset save`` / ``ipset restore`` text (``create`` and ``add`` lines)."""
    types: dict[str, tuple[str, int]] = {}
    members: dict[str, list[str]] = {}
    holes: dict[str, list[str]] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        words = raw.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] in ("create", "-N") and len(words) >= 3:
            fam = 6 if "inet6" in words else 4
            _check_options(words[3:], _CREATE_OPTIONS, source, n, raw)
            types[words[1]] = (words[2], fam)
            members.setdefault(words[1], [])
        elif words[0] in ("add", "-A") and len(words) >= 3:
            if words[1] not in types:
                raise InputError(f"{source}:{n}: add to unknown set {words[1]!r}")
            _check_options(words[3:], _ADD_OPTIONS, source, n, raw)
            if "nomatch" in words[3:]:
                if "net" not in _DIMS.get(types[words[1]][0], ()):
                    raise InputError(
                        f"{source}:{n}: {raw.strip()}: nomatch needs a set type with a net"
                    )
                holes.setdefault(words[1], []).append(words[2])
            else:
                members[words[1]].append(words[2])
        elif words[0] in ("flush", "destroy", "-F", "-X"):
            continue
        else:
            raise InputError(f"{source}:{n}: cannot parse {raw.strip()!r}")
    return {
        name: IpSet.of(name, t, members[name], fam, holes.get(name, ()))
        for name, (t, fam) in types.items()
    }


# options of "create" that size or describe the set (no effect on membership), and of
# "add": nomatch (evaluated) and comment; anything else (timeout, counters, skbinfo...)
# changes what a lookup does and is refused rather than ignored
_CREATE_OPTIONS = {
    "family": 1,
    "hashsize": 1,
    "maxelem": 1,
    "range": 1,
    "bucketsize": 1,
    "initval": 1,
    "comment": 0,
}
_ADD_OPTIONS = {"nomatch": 0, "comment": 1}


def _check_options(words: list[str], known: dict[str, int], source: str, n: int, raw: str) -> None:
    i = 0
    while i < len(words):
        w = words[i]
        if w not in known:
            raise UnsupportedRuleError(
                f"{source}:{n}: {raw.strip()}: unsupported ipset option {w!r}"
            )
        if w == "comment" and known[w]:
            # a quoted comment may hold spaces: it runs to the closing quote
            j = i + 1
            while j < len(words) and not words[j].endswith('"'):
                j += 1
            i = j + 1
            continue
        i += 1 + known[w]
