"""app.stats against published values: Newcombe's worked examples of the Wilson score
interval, the chi-square table's critical values, and scipy.stats on a grid."""

from __future__ import annotations

import math

import pytest

from app.stats import ChiSquare, chi2_sf, chi_square, shares_summary, wilson_interval

# Newcombe, "Two-sided confidence intervals for the single proportion: comparison of
# seven methods", Statistics in Medicine 17 (1998) 857-872, Table II, method 3 (score
# interval without continuity correction), 95%: (k, n) -> (lower, upper) to 4 places.
NEWCOMBE = {
    (81, 263): (0.2553, 0.3662),
    (15, 148): (0.0624, 0.1605),
    (0, 20): (0.0000, 0.1611),
    (1, 29): (0.0061, 0.1718),
}

# Upper critical values of the chi-square distribution as printed in the tables
# (e.g. NIST/SEMATECH e-Handbook of Statistical Methods, 1.3.6.7.4): P(X >= x) = alpha.
CRITICAL = {
    (1, 0.05): 3.841,
    (2, 0.05): 5.991,
    (3, 0.05): 7.815,
    (10, 0.05): 18.307,
    (30, 0.05): 43.773,
    (1, 0.01): 6.635,
    (5, 0.01): 15.086,
    (30, 0.01): 50.892,
}


@pytest.mark.parametrize(("kn", "expected"), NEWCOMBE.items())
def test_wilson_interval_is_newcombes(kn: tuple[int, int], expected: tuple[float, float]) -> None:
    lo, hi = wilson_interval(*kn)
    assert (round(lo, 4), round(hi, 4)) == expected


def test_wilson_interval_is_scipys_at_any_level() -> None:
    from scipy.stats import binomtest

    for confidence in (0.5, 0.9, 0.95, 0.99, 0.999):
        for k, n in ((0, 1), (1, 1), (0, 20), (7, 20), (20, 20), (333, 1000), (1, 10**6)):
            ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
            lo, hi = wilson_interval(k, n, confidence)
            assert lo == pytest.approx(ci.low, abs=1e-12)
            assert hi == pytest.approx(ci.high, abs=1e-12)


def test_wilson_interval_edges_and_bad_input() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    # a higher level gives a wider interval around the same share
    lo95, hi95 = wilson_interval(30, 100)
    lo99, hi99 = wilson_interval(30, 100, 0.99)
    assert lo99 < lo95 < 0.3 < hi95 < hi99
    for k, n in ((-1, 5), (6, 5)):
        with pytest.raises(ValueError, match="0 <= k <= n"):
            wilson_interval(k, n)
    for level in (0.0, 1.0, 95.0):
        with pytest.raises(ValueError, match="confidence level"):
            wilson_interval(1, 2, level)


@pytest.mark.parametrize(("dof_alpha", "x"), CRITICAL.items())
def test_chi2_sf_at_tabulated_critical_values(dof_alpha: tuple[int, float], x: float) -> None:
    dof, alpha = dof_alpha
    # three decimals in the table: the p-value at the printed value is alpha to ~1e-4
    assert chi2_sf(x, dof) == pytest.approx(alpha, abs=2e-5 if alpha == 0.01 else 5e-5)


def test_chi2_sf_is_scipys() -> None:
    from scipy.stats import chi2

    for dof in range(1, 40):
        for x in (0.01, 0.5, 1.0, 3.5, 10.0, 40.0, 150.0):
            assert chi2_sf(x, dof) == pytest.approx(chi2.sf(x, dof), rel=1e-9, abs=1e-300)
    assert chi2_sf(0.0, 3) == 1.0 and chi2_sf(-1.0, 1) == 1.0
    assert chi2_sf(4.0, 2) == pytest.approx(math.exp(-2.0), rel=1e-15)  # dof 2: e^(-x/2)
    with pytest.raises(ValueError, match="at least 1"):
        chi2_sf(1.0, 0)


def test_chi_square_is_scipys_chisquare() -> None:
    from scipy.stats import chisquare

    for counts in ([5, 5], [1, 0, 7], [333_512, 333_102, 333_386], [10, 20, 30, 40, 50]):
        got = chi_square(counts)
        want = chisquare(counts)
        assert got.statistic == pytest.approx(want.statistic, rel=1e-12)
        assert got.p_value == pytest.approx(want.pvalue, rel=1e-9)
        assert got.dof == len(counts) - 1
    # 90 against 10 of 100: (40^2 + 40^2) / 50 = 64 on one degree of freedom
    assert chi_square([90, 10]).statistic == 64.0
    assert chi_square([4]) == ChiSquare(0.0, 0, 1.0)
    assert chi_square([]) == ChiSquare(0.0, 0, 1.0)
    assert chi_square([0, 0]) == ChiSquare(0.0, 1, 1.0)


def test_shares_summary_keys_and_values() -> None:
    s = shares_summary({"a": 81, "b": 182})
    assert s["counts"] == {"a": 81, "b": 182}
    assert s["shares"] == {"a": 81 / 263, "b": 182 / 263}
    lo, hi = s["confidence_intervals"]["a"]
    assert (round(lo, 4), round(hi, 4)) == NEWCOMBE[(81, 263)]
    assert s["chi_square"] == chi_square([81, 182]).to_json()
    assert set(s["chi_square"]) == {"statistic", "dof", "p_value"}
