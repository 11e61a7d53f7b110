"""The statistics svclab reports on connection counts, in one place: Pearson's
chi-square test of equal shares and the Wilson score interval of a share.

A leaf: it imports the standard library only (an import-linter contract keeps it so).
``svclab connect`` and ``connect --node-dump`` summarise their counts with it and
``connect --plot`` draws its intervals.

The chi-square survival function is the closed form for integer degrees of freedom
rather than ``scipy.stats.chi2.sf``: importing scipy (with numpy under it) costs a
``connect`` run, whose path imports neither, about half a second, as much as the
statistics of a hundred thousand connections. ``tests/app/test_stats.py`` holds it to
scipy's values and to tabulated critical values. The normal quantile the interval needs
comes from :class:`statistics.NormalDist`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: the confidence level of ``connect``'s intervals
CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class ChiSquare:
    """Pearson's chi-square test of counts against equal shares: the statistic, its
    degrees of freedom (categories - 1, at least 0) and the p-value."""

    statistic: float
    dof: int
    p_value: float

    def to_json(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "dof": self.dof, "p_value": self.p_value}


def chi_square(counts: Sequence[int]) -> ChiSquare:
    """The chi-square goodness-of-fit test of ``counts`` against equal shares (what
    ``scipy.stats.chisquare(counts)`` gives). Fewer than two categories, or no count at
    all, is no evidence against equal shares: statistic 0, p-value 1."""
    n, k = sum(counts), len(counts)
    if k < 2 or n == 0:
        return ChiSquare(0.0, max(k - 1, 0), 1.0)
    expected = n / k
    stat = sum((c - expected) ** 2 for c in counts) / expected
    return ChiSquare(stat, k - 1, chi2_sf(stat, k - 1))


def chi2_sf(x: float, dof: int) -> float:
    """The chi-square distribution's survival function ``P(X >= x)`` for an integer
    ``dof >= 1``: the regularised upper gamma function Q(dof/2, x/2), a finite sum for
    integer and half-integer orders (Abramowitz & Stegun 26.4.4 and 26.4.5)."""
    if dof < 1:
        raise ValueError(f"chi-square degrees of freedom must be at least 1, not {dof}")
    if x <= 0:
        return 1.0
    half = x / 2
    if dof % 2 == 0:  # Q(m, h) = e^-h * sum_{i<m} h^i / i!
        term = total = math.exp(-half)
        for i in range(1, dof // 2):
            term *= half / i
            total += term
        return min(1.0, total)
    # Q(m + 1/2, h) = erfc(sqrt h) + e^-h * sum_{i=1..m} h^(i-1/2) / Gamma(i + 1/2)
    root = math.sqrt(half)
    total = math.erfc(root)
    term = math.exp(-half) * root / math.gamma(1.5)
    for i in range(1, (dof - 1) // 2 + 1):
        total += term
        term *= half / (i + 0.5)
    return min(1.0, total)


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The two-sided Wilson score interval, at ``confidence``, of the share ``k / n``
    of ``n`` trials (Wilson 1927; Newcombe 1998, method 3). With no trial at all it is
    the whole of [0, 1]."""
    if not 0 <= k <= n:
        raise ValueError(f"a share needs 0 <= k <= n, not k={k}, n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"a confidence level lies strictly between 0 and 1, not {confidence}")
    if n == 0:
        return 0.0, 1.0
    from statistics import NormalDist  # ~7 ms: only the commands that report a share

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = k / n
    scale = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / scale
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / scale
    # at k = 0 (k = n) the lower (upper) bound is 0 (1) exactly, whatever the rounding
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


def shares_summary(counts: dict[str, int], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """``counts`` per category summarised as ``connect`` reports them: the counts, each
    share, its Wilson interval at ``confidence`` and the chi-square test of equal shares
    (``{"counts", "shares", "confidence_intervals", "chi_square"}``)."""
    total = sum(counts.values())
    return {
        "counts": dict(counts),
        "shares": {k: v / total for k, v in counts.items()},
        "confidence_intervals": {
            k: list(wilson_interval(v, total, confidence)) for k, v in counts.items()
        },
        "chi_square": chi_square(list(counts.values())).to_json(),
    }
