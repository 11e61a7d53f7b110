"""svclab's explanation of what a tool's traffic did, appended to its stderr when asked
(curl ``-v``/``--trace``, or ``SVCLAB_TRACE=1`` for any tool): how the name was
resolved, which Service the address is, which endpoint was chosen and by which rule,
the source address the server saw, the NetworkPolicy rules that allowed or refused
it, the path, and every hop (the trace tables of ``svclab trace``). Every line starts
with ``* svclab:`` (or is part of a trace table after such a line), so it is told
apart from the tool's own output.

Unasked, a tool says one thing only the emulator knows: when a NetworkPolicy refused
its connection, which policy (:func:`refused_by_policy`, one line per deciding rule,
after the tool's own output, which stays the real tool's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dataplane.emulator.trace import Trace

if TYPE_CHECKING:
    from dataplane.podtools.net import Emulated, Exchange, Lookup
    from dataplane.podtools.target import PodTarget

PREFIX = "* svclab: "


def _path(t: Trace) -> list[str]:
    out: list[str] = []
    for h in t.hops:
        if h.kind != "arp" and (not out or out[-1] != h.netns):
            out.append(h.netns)
    return out


def explain_dns(traces: Sequence[Trace]) -> str:
    """Each DNS question's walk: where it went and which DNS pod answered."""
    lines = []
    for t in traces:
        d = t.delivered_to
        who = f"pod {d.pod} ({d.ip}:{d.port})" if d is not None and d.pod else t.verdict
        lines.append(
            f"{PREFIX}DNS question {t.packet.proto} {t.packet.src}:{t.packet.sport} -> "
            f"{t.packet.dst}:{t.packet.dport}: {who}; path {' > '.join(_path(t))}\n"
        )
        if t.chosen_by:
            lines.append(f"{PREFIX}  chosen by: {t.chosen_by}\n")
    return "".join(lines)


def _policy_lines(ex: Exchange) -> str:
    return "".join(
        f"{PREFIX}{'allowed' if d.allowed else 'refused'} by policy {d.describe()}\n"
        for d in ex.policy
    )


def refused_by_policy(ex: Exchange | None) -> str:
    """``* svclab: refused by policy default/deny-all (ingress, no rule matched) →
    DROP`` (and any other rule that decided the connection) when a NetworkPolicy
    refused it; "" otherwise."""
    if ex is None or ex.verdict == "delivered" or all(d.allowed for d in ex.policy):
        return ""
    return _policy_lines(ex)


def explain(world: Emulated, pod: PodTarget, found: Lookup, ex: Exchange | None) -> str:
    """The explanation of one connection (see the module docstring)."""
    lines = []
    if found.source == "hosts":
        lines.append(f"{PREFIX}{found.name} is {found.addresses[0]} in /etc/hosts\n")
    elif found.source == "dns":
        res = found.resolution
        asked = [q.qname for q in res.queries] if res is not None else []
        if found.addresses:
            lines.append(
                f"{PREFIX}{found.name} resolved to {', '.join(found.addresses)} by DNS as "
                f"{found.canonical} (asked: {', '.join(asked)})\n"
            )
        elif asked:
            lines.append(f"{PREFIX}{found.name}: {found.error} (asked: {', '.join(asked)})\n")
        else:
            why = res.error if res is not None and res.error else "nothing asked"
            lines.append(f"{PREFIX}{found.name}: {found.error} ({why})\n")
        if res is not None:
            lines.append(explain_dns([t for q in res.queries for t in q.traces]))
    if ex is None:
        return "".join(lines)
    svc = world.services.get((ex.ip, ex.port, "tcp"))
    if svc is not None:
        lines.append(f"{PREFIX}{ex.ip}:{ex.port} is Service {svc}\n")
    t = ex.syn
    lines.append(
        f"{PREFIX}connection from {ex.local[0]}:{ex.local[1]} to {ex.ip}:{ex.port}: "
        f"{ex.verdict} ({t.verdict}{'; ' + t.reason if t.reason else ''})\n"
    )
    d = t.delivered_to
    if d is not None:
        where = f"pod {d.pod}" if d.pod else d.netns
        lines.append(f"{PREFIX}endpoint {d.ip}:{d.port} ({where}, node {d.node})\n")
    if t.chosen_by:
        lines.append(f"{PREFIX}chosen by: {t.chosen_by}\n")
    lines.append(_policy_lines(ex))
    if ex.seen is not None:
        nat = (
            "source kept"
            if ex.seen == ex.local
            else f"source rewritten from {ex.local[0]}:{ex.local[1]} (SNAT/masquerade)"
        )
        lines.append(f"{PREFIX}the server saw {ex.seen[0]}:{ex.seen[1]} ({nat})\n")
    lines.append(f"{PREFIX}path: {' > '.join(_path(t))}\n")
    lines.append(f"{PREFIX}hops:\n{t.render_text()}\n")
    return "".join(lines)
