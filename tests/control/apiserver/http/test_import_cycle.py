"""No import cycle between the HTTP app, the verb handlers and server-side apply: the
handlers and ``ssa`` import nothing from ``app`` at run time (its types only, under
``TYPE_CHECKING``), and ``ssa`` nothing from the handlers. Imports inside functions
count: a deferred import is still a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HTTP = Path(__file__).resolve().parents[4] / "control" / "apiserver" / "http"
PKG = "control.apiserver.http"


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def runtime_imports(source: str) -> set[str]:
    """The modules ``source`` imports when it runs (``from pkg import mod`` counts as
    ``pkg.mod``), leaving out ``if TYPE_CHECKING:`` blocks."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return out


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("handlers", ("app",)),
        ("ssa", ("app", "handlers")),
        ("wire", ("app", "handlers", "ssa")),
    ],
)
def test_no_module_imports_back_up_the_request_path(
    module: str, forbidden: tuple[str, ...]
) -> None:
    imports = runtime_imports((HTTP / f"{module}.py").read_text())
    for f in forbidden:
        assert f"{PKG}.{f}" not in imports, f"{module}.py imports {f}.py at run time"


def test_the_scan_sees_deferred_imports_and_skips_type_checking_ones() -> None:
    src = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from control.apiserver.http.app import API\n"
        "def f():\n    from control.apiserver.http import handlers\n"
    )
    got = runtime_imports(src)
    assert "control.apiserver.http.handlers" in got
    assert "control.apiserver.http.app" not in got
