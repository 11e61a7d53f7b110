"""How a Service's connections spread over its endpoints, drawn with matplotlib: each
endpoint's observed share as a bar with its 99% Wilson score interval, the expected
share as a line, and the chi-square test's result in the title (green when the counts
are consistent with the expected shares at the 1% level, red when not).

Pure: :func:`shares_figure` returns a ``matplotlib.figure.Figure`` (no pyplot, no global
state). The intervals and the test come from :mod:`app.stats`.
"""

from __future__ import annotations

from collections.abc import Mapping

from matplotlib.figure import Figure

from app.stats import ChiSquare, wilson_interval

#: the picture's size in pixels at :data:`DPI` (tests check it)
WIDTH, HEIGHT, DPI = 800, 450, 100
CONFIDENCE = 0.99
ALPHA = 0.01


def shares_figure(
    counts: Mapping[str, int],
    chi: ChiSquare,
    *,
    expected: Mapping[str, float] | None = None,
    title: str = "",
) -> Figure:
    """Bars of each endpoint's share of ``counts`` with 99% intervals; ``expected``
    shares (default: equal over the endpoints counted) as a dashed line per bar."""
    names = sorted(counts)
    n = sum(counts.values())
    exp = expected or {k: 1 / len(names) for k in names}
    fig = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI)
    ax = fig.add_subplot()
    shares = [counts[k] / n if n else 0.0 for k in names]
    intervals = [wilson_interval(counts[k], n, CONFIDENCE) for k in names]
    lower = [s - lo for s, (lo, _) in zip(shares, intervals, strict=True)]
    upper = [hi - s for s, (_, hi) in zip(shares, intervals, strict=True)]
    xs = list(range(len(names)))
    ax.bar(xs, shares, color="#7a9cc6", label="observed share", zorder=2)
    ax.errorbar(
        xs,
        shares,
        yerr=[lower, upper],
        fmt="none",
        ecolor="#1b3a5c",
        capsize=6,
        label=f"{CONFIDENCE:.0%} Wilson interval",
        zorder=3,
    )
    ax.hlines(
        [exp.get(k, 0.0) for k in names],
        [x - 0.4 for x in xs],
        [x + 0.4 for x in xs],
        colors="#c62828",
        linestyles="dashed",
        label="expected share",
        zorder=4,
    )
    for i, k in enumerate(names):
        ax.annotate(
            f"{counts[k]}", (i, shares[i]), textcoords="offset points", xytext=(8, 4), fontsize=8
        )
    ax.set_xticks(
        xs,
        names,
        rotation=20 if len(names) > 4 else 0,
        ha="right" if len(names) > 4 else "center",
        fontsize=8,
    )
    ax.set_ylabel("share of connections")
    ax.set_ylim(0, min(1.0, max([hi for _, hi in intervals] + list(exp.values())) * 1.4))
    ax.grid(axis="y", alpha=0.3, zorder=0)
    ax.legend(fontsize=8, loc="upper center", ncol=3, frameon=False)
    rejected = chi.p_value < ALPHA
    verdict = (
        f"equal shares rejected (p < {ALPHA})"
        if rejected
        else f"consistent with equal shares (p ≥ {ALPHA})"
    )
    ax.set_title(
        (title + "\n" if title else "")
        + f"n = {n}; chi-square {chi.statistic:.2f} (dof {chi.dof}), p = {chi.p_value:.4f}: "
        + verdict,
        fontsize=9,
        color="#c62828" if rejected else "#2e7d32",
    )
    fig.subplots_adjust(bottom=0.16 if len(names) <= 4 else 0.24, top=0.86)
    return fig
