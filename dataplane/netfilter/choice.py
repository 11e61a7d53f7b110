"""Random choices during evaluation, and the ``--all`` enumeration of every branch.

The engine never calls :mod:`random` directly: every random decision (``-m statistic``,
nft ``numgen``, IPVS schedulers that pick at random) goes through a :class:`Chooser`.

* :class:`RandomChooser` draws from a seeded :class:`random.Random` exactly like the
  kernel draws (a 31-bit number compared with the rule's threshold), and keeps the
  ``--mode nth`` counters.
* :class:`Explorer` replays a script of decisions and records the alternatives;
  :func:`explore` runs a function once per reachable combination of decisions and
  returns each result with its probability (the product of the probabilities of the
  decisions taken). Branches of probability 0 are never taken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from random import Random
from typing import Generic, Protocol, TypeVar

__all__ = ["Branch", "Chooser", "Explorer", "NthCounter", "RandomChooser", "explore"]

T = TypeVar("T")
_P31 = 2**31


class NthCounter:
    """The shared counter of one ``-m statistic --mode nth`` rule."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class Chooser(Protocol):
    """Makes the random decisions of one evaluation."""

    def bernoulli(self, threshold: int) -> bool:
        """True with probability ``threshold / 2**31`` (``-m statistic --mode random``)."""
        ...

    def nth(self, counter: NthCounter, every: int, packet: int, commit: bool) -> bool:
        """``--mode nth``: true for one evaluation out of ``every``."""
        ...

    def uniform(self, n: int) -> int:
        """An index in ``range(n)``, each with probability ``1/n`` (nft ``numgen random``,
        IPVS when enumerating)."""
        ...


class RandomChooser:
    """Decisions from a seeded generator; ``nth`` counters advance when ``commit``."""

    __slots__ = ("rng",)

    def __init__(self, rng: Random | None = None) -> None:
        self.rng = rng if rng is not None else Random(0)

    def bernoulli(self, threshold: int) -> bool:
        return self.rng.getrandbits(31) < threshold

    def nth(self, counter: NthCounter, every: int, packet: int, commit: bool) -> bool:
        idx = counter.count % every
        if commit:
            counter.count += 1
        return idx == packet

    def uniform(self, n: int) -> int:
        return self.rng.randrange(n) if n > 1 else 0

    def weighted(self, probs: Sequence[float]) -> int:
        x = self.rng.random()
        acc = 0.0
        for i, p in enumerate(probs):
            acc += p
            if x < acc:
                return i
        return len(probs) - 1


class Explorer:
    """Follows a script of decisions, then the first possible option of each new one,
    remembering the options it did not take. ``probability`` is the product of the
    probabilities of the decisions taken so far."""

    __slots__ = ("decisions", "pos", "probability", "script")

    def __init__(self, script: list[int] | None = None) -> None:
        self.script = script or []
        self.pos = 0
        self.probability = 1.0
        self.decisions: list[tuple[int, tuple[float, ...]]] = []

    def _decide(self, probs: tuple[float, ...]) -> int:
        if self.pos < len(self.script):
            k = self.script[self.pos]
        else:
            k = next(i for i, p in enumerate(probs) if p > 0.0)
        self.pos += 1
        self.decisions.append((k, probs))
        self.probability *= probs[k]
        return k

    def bernoulli(self, threshold: int) -> bool:
        p = threshold / _P31
        return self._decide((p, 1.0 - p)) == 0

    def nth(self, counter: NthCounter, every: int, packet: int, commit: bool) -> bool:
        p = 1.0 / every
        return self._decide((p, 1.0 - p)) == 0

    def uniform(self, n: int) -> int:
        return self._decide((1.0 / n,) * n)

    def weighted(self, probs: Sequence[float]) -> int:
        return self._decide(tuple(probs))

    def next_script(self) -> list[int] | None:
        """The script of the next unexplored branch, or None when all were explored."""
        ds = list(self.decisions)
        while ds:
            k, probs = ds.pop()
            for j in range(k + 1, len(probs)):
                if probs[j] > 0.0:
                    return [d for d, _ in ds] + [j]
        return None


@dataclass(frozen=True, slots=True)
class Branch(Generic[T]):
    """One reachable outcome of an enumeration and its probability."""

    probability: float
    result: T
    decisions: tuple[int, ...]


def explore(run: Callable[[Explorer], T], *, limit: int = 100_000) -> list[Branch[T]]:
    """Run ``run`` once per reachable combination of random decisions (depth first, the
    "match" branch of each decision first, so results come in rule order). Raises
    RuntimeError past ``limit`` branches."""
    out: list[Branch[T]] = []
    script: list[int] | None = []
    while script is not None:
        ex = Explorer(script)
        result = run(ex)
        out.append(Branch(ex.probability, result, tuple(d for d, _ in ex.decisions)))
        if len(out) > limit:
            raise RuntimeError(f"more than {limit} branches")
        script = ex.next_script()
    return out
