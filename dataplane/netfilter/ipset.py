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

from netmodel.errors import InputError

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

    @classmethod
    def of(cls, name: str, type: str, members: Iterable[str], family: int = 4) -> IpSet:
        """Build from member strings as ``ipset add`` takes them."""
        if type not in _DIMS:
            raise InputError(f"ipset {name}: unsupported set type {type!r}")
        dims = _DIMS[type]
        bitmap = type.startswith("bitmap:")
        keys: set[Key] = set()
        for m in members:
            parts = m.split(",")
            if len(parts) != len(dims):
                raise InputError(f"ipset {name}: member {m!r} does not fit type {type}")
            keys.add(tuple(_norm(d, p, bitmap) for d, p in zip(dims, parts, strict=True)))
        prefixes: list[tuple[int, ...]] = []
        for i, d in enumerate(dims):
            if d == "net":
                prefixes.append(tuple(sorted({k[i][1] for k in keys}, reverse=True)))  # type: ignore[index]
            else:
                prefixes.append(())
        return cls(name, type, frozenset(keys), family, tuple(prefixes))

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
        return any(k in self.members for k in keys)


def parse_ipset_save(text: str, source: str = "<ipset save>") -> Mapping[str, IpSet]:
    """Parse ``ipset save`` / ``ipset restore`` text (``create`` and ``add`` lines)."""
    types: dict[str, tuple[str, int]] = {}
    members: dict[str, list[str]] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        words = raw.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] in ("create", "-N") and len(words) >= 3:
            fam = 6 if "inet6" in words else 4
            types[words[1]] = (words[2], fam)
            members.setdefault(words[1], [])
        elif words[0] in ("add", "-A") and len(words) >= 3:
            if words[1] not in types:
                raise InputError(f"{source}:{n}: add to unknown set {words[1]!r}")
            members[words[1]].append(words[2])
        elif words[0] in ("flush", "destroy", "-F", "-X"):
            continue
        else:
            raise InputError(f"{source}:{n}: cannot parse {raw.strip()!r}")
    return {name: IpSet.of(name, t, members[name], fam) for name, (t, fam) in types.items()}
