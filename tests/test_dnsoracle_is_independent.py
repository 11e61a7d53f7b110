"""The DNS oracle (tests/dnsoracle.py) is a second path: it must not import the code it
checks (the answerer, the zone, the emulator, the kernel backend), nor dnspython, which
the answerer is built on."""

from __future__ import annotations

import ast
from pathlib import Path

ORACLE = Path(__file__).with_name("dnsoracle.py")
ALLOWED = {"__future__", "collections.abc", "dataclasses", "typing"}


def imported(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
    return out


def test_the_dns_oracle_imports_nothing_it_checks() -> None:
    assert imported(ORACLE) <= ALLOWED
