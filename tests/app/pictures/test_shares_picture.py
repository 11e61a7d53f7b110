"""The load-balancing plot: shares, 99% Wilson intervals, expected share, chi-square."""

from __future__ import annotations

import io
import math

from conftest import png_size, svg_texts
from matplotlib.container import ErrorbarContainer

from app.pictures.shares import HEIGHT, WIDTH, shares_figure
from app.stats import ChiSquare, chi_square
from control.session import Session


def _wilson_by_hand(k: int, n: int, z: float) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), centre + half


def test_the_bars_carry_99_percent_wilson_intervals() -> None:
    """The error bars drawn are the textbook 99% Wilson intervals of each share."""
    z = 2.5758293035489  # the 99.5% quantile of the standard normal
    counts = {"a": 35, "b": 0, "c": 65}
    fig = shares_figure(counts, chi_square(list(counts.values())))
    (bars,) = [c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)]
    segments = bars.lines[2][0].get_segments()
    for (name, k), seg in zip(sorted(counts.items()), segments, strict=True):
        (_, lo), (_, hi) = seg
        elo, ehi = _wilson_by_hand(k, 100, z)
        assert math.isclose(lo, elo, abs_tol=1e-9), name
        assert math.isclose(hi, ehi, abs_tol=1e-9), name


def _save(fig: object, fmt: str) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=100)  # type: ignore[attr-defined]
    return buf.getvalue()


def test_png_size_and_svg_labels() -> None:
    counts = {"10.244.0.2:8080": 340, "10.244.1.2:8080": 330, "10.244.2.2:8080": 330}
    fig = shares_figure(counts, ChiSquare(0.2, 2, 0.905), title="connect a -> svc/web")
    assert png_size(_save(fig, "png")) == (WIDTH, HEIGHT)
    svg = _save(fig, "svg").decode()
    svg_texts(svg)  # parses
    # matplotlib draws glyphs as paths and keeps each text in a comment
    assert "<!-- connect a -&gt; svc/web -->" in svg
    assert "chi-square 0.20 (dof 2), p = 0.9050: consistent with equal shares" in svg
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == sorted(counts)
    assert "consistent with equal shares" in ax.get_title()
    assert ax.get_legend() is not None
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert set(legend) == {"expected share", "observed share", "99% Wilson interval"}


def test_a_rejected_chi_square_is_marked_red() -> None:
    fig = shares_figure({"a": 90, "b": 10}, ChiSquare(64.0, 1, 1e-15))
    title = fig.axes[0].title
    assert "equal shares rejected" in title.get_text()
    assert title.get_color() == "#c62828"


def test_the_shares_of_a_20_node_service(cluster20: Session) -> None:
    from collections import Counter

    from app import emulation

    svc = cluster20.store.get("Service", "default/web")
    client = sorted(p.key for p in cluster20.store.list("Pod"))[0]
    conns = emulation.emulator(cluster20).connect(
        f"pod/{client}",
        svc.spec.cluster_ip,  # type: ignore[attr-defined]
        "tcp",
        80,
        200,
    )
    counts = Counter(c.endpoint or c.verdict for c in conns)
    assert len(counts) == 8  # every endpoint got some of 200 connections
    fig = shares_figure(
        counts, chi_square(list(counts.values())), title="200 connections to svc/web"
    )
    assert png_size(_save(fig, "png")) == (WIDTH, HEIGHT)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == sorted(counts)
    assert ax.get_xticklabels()[0].get_rotation() == 20  # 8 labels: slanted to stay legible
