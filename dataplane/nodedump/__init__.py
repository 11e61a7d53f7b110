"""Real nodes' state as the standard tools print it (a *node dump*), and the tracer
that evaluates flows through it as that node's kernel would.

* :mod:`.layout` — the directory's files (what ``svclab node-dump collect`` writes);
* :mod:`.routing` — interfaces, addresses, routing tables and policy rules (``ip -j``);
* :mod:`.dump` — loading a directory into engine state;
* :mod:`.tracer` — ``trace|connect --node-dump``.
"""

from .dump import NodeDump, Sysctls, load_node_dump
from .routing import Fib, RouteDecision
from .tracer import BranchOutcome, NodeFlow, NodeTracer, summarise

__all__ = [
    "BranchOutcome",
    "Fib",
    "NodeDump",
    "NodeFlow",
    "NodeTracer",
    "RouteDecision",
    "Sysctls",
    "load_node_dump",
    "summarise",
]
