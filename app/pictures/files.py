"""The edge: write a picture to a file chosen by its suffix.

``.svg`` and ``.png`` from a ``graphviz.Digraph`` (the ``dot`` program renders) or a
matplotlib ``Figure``; ``.mmd`` and ``.html`` from text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from netmodel.errors import InputError

GRAPH_FORMATS = (".svg", ".png")


def suffix_of(path: str | Path, allowed: tuple[str, ...], *, option: str) -> str:
    """The file's suffix if ``allowed``, else a one-line error naming ``option``."""
    suffix = Path(path).suffix.lower()
    if suffix not in allowed:
        raise InputError(
            f"{path}: unknown picture format {suffix or '(none)'!r}; use one of "
            + ", ".join(allowed),
            field=option,
        )
    return suffix


def render_graph(graph: Any, fmt: str) -> bytes:
    """The graph rendered by Graphviz as ``fmt`` bytes (``svg`` or ``png``)."""
    data: bytes = graph.pipe(format=fmt)
    return data


def write_graph(graph: Any, path: str | Path) -> Path:
    p = Path(path)
    p.write_bytes(render_graph(graph, p.suffix.lower().lstrip(".")))
    return p


def write_figure(figure: Any, path: str | Path, *, dpi: int = 100) -> Path:
    p = Path(path)
    figure.savefig(p, format=p.suffix.lower().lstrip("."), dpi=dpi)
    return p


def write_text(text: str, path: str | Path) -> Path:
    p = Path(path)
    p.write_text(text)
    return p
