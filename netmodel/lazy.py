"""A mapping whose values are computed on first access: what lets a question about one
packet pay only for the nodes it visits (see :class:`LazyMapping`).

Pure: no I/O of its own (``compute`` may do what it likes)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LazyMapping(Mapping[K, V]):
    """A read-only mapping over a known set of ``keys`` whose values ``compute(key)``
    makes on first access and keeps. ``fixed`` values take precedence (and may name keys
    outside ``keys``). Iterating keys and ``in`` cost nothing; ``values()``, ``items()``
    and ``dict(m)`` compute every value (the eager result, same answer); :meth:`built`
    lists only what has been computed so far.

    Contract: ``compute`` is deterministic for the lifetime of the mapping, so that a
    value's being computed early or late (or never) cannot change an answer."""

    __slots__ = ("_compute", "_done", "_fixed", "_keys")

    def __init__(
        self,
        keys: Iterable[K],
        compute: Callable[[K], V],
        fixed: Mapping[K, V] | None = None,
    ) -> None:
        self._done: dict[K, V] = dict(fixed or {})
        self._fixed = frozenset(self._done)
        self._keys: dict[K, None] = dict.fromkeys(keys)
        self._keys.update(dict.fromkeys(self._done))
        self._compute = compute

    def __getitem__(self, key: K) -> V:
        try:
            return self._done[key]
        except KeyError:
            if key not in self._keys:
                raise
        value = self._done[key] = self._compute(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[K]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def built(self) -> dict[K, V]:
        """The values computed so far (a copy, in the order they were made)."""
        return dict(self._done)

    def is_built(self, key: K) -> bool:
        return key in self._done

    def forget(self, key: K) -> None:
        """Drop ``key``'s computed value: the next access computes it again (a
        ``fixed`` value stays)."""
        if key not in self._fixed:
            self._done.pop(key, None)

    def __repr__(self) -> str:
        return f"LazyMapping({len(self._keys)} keys, {len(self._done)} built)"
