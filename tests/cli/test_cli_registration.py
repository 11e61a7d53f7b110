"""Commands are registered explicitly: whichever of the CLI's modules is imported first,
``svclab`` has every command (importing ``rules_cmd`` or ``traffic_cmd`` before ``main``
used to drop their commands silently).

Each case runs in a fresh interpreter (a module imported once stays in sys.modules):
every module of ``app.cli`` first once, the others after it in reverse order, and the
whole list forwards and backwards.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import app.cli

MODULES = sorted(f"app.cli.{m.name}" for m in pkgutil.iter_modules(app.cli.__path__))

#: every command of ``svclab`` (a new command is added here on purpose)
COMMANDS = sorted(
    [
        "apply",
        "cleanup",
        "connect",
        "conntrack",
        "delete",
        "describe",
        "diff",
        "dig",
        "down",
        "events",
        "exec",
        "get",
        "import",
        "kubeconfig",
        "kubelet",
        "node-dump",
        "pcap",
        "ping",
        "pod",
        "reach",
        "report",
        "rules",
        "serve",
        "topology",
        "trace",
        "up",
    ]
)

PROBE = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
from app.cli.main import cli
print(json.dumps(sorted(cli.commands)))
"""


def _orders() -> list[list[str]]:
    orders = [[m, *reversed([o for o in MODULES if o != m])] for m in MODULES]
    return [*orders, list(MODULES), list(reversed(MODULES))]


def test_every_module_is_covered() -> None:
    assert "app.cli.main" in MODULES and "app.cli.rules_cmd" in MODULES
    assert {o[0] for o in _orders()} == set(MODULES)


@pytest.mark.parametrize("order", _orders(), ids=lambda o: " ".join(m[8:] for m in o[:2]))
def test_import_order_never_drops_a_command(order: list[str]) -> None:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(order)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == COMMANDS
