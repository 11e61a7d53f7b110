"""Which NetworkPolicy rule decided each of ``svclab connect``'s connections, on either
backend, from the one attribution source a trace uses.

* The emulator: each connection's walk is kept (``record``) and read by
  :func:`app.netpolview.decisions`, the verdicts a trace's ``netpol`` hops name
  (:class:`EmulatedAttribution`).
* The kernel: the policy rules whose counters grew while the connection was made, on
  every node, read through the rendering's origins as ``svclab rules --policy-hits``
  reads them (:class:`KernelAttribution`). Counters count whatever crosses the node, so
  the cluster must carry no other traffic meanwhile (``connect`` makes its connections
  one after the other).

Only verdicts that name a policy are reported (``not isolated for ingress`` and ``from
the pod's own node`` are not): a connection no policy selects says nothing.
:class:`PolicyTally` counts the connections per outcome and deciding rules, for the
summary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from app.netpolview import PolicyAgent, decisions, named, node_of
from netmodel.netpolicy import Decision


class Attribution(Protocol):
    """The policy verdicts that decided one connection (called once per connection, in
    order, right after it was made)."""

    def __call__(self, conn: Any) -> tuple[Decision, ...]: ...


def decision_json(d: Decision) -> dict[str, Any]:
    """One deciding rule as ``connect -o json`` writes it: the direction, the verdict,
    the policy (``ns/name``), the rule path (None for a refusal: no rule matched), the
    reason, and ``text``, the words of the trace's ``netpol`` hop."""
    return {
        "direction": d.direction,
        "verdict": "ACCEPT" if d.allowed else "DROP",
        "policy": d.policy,
        "rule": d.rule,
        "reason": d.reason,
        "text": d.describe(),
    }


class EmulatedAttribution:
    """The emulator's: the connection's recorded walk (``conn.trace``, so ``connect``
    must record) read by :func:`app.netpolview.decisions`."""

    def __init__(self, agent: PolicyAgent) -> None:
        self.agent = agent

    def __call__(self, conn: Any) -> tuple[Decision, ...]:
        trace = conn.trace
        if trace is None:
            raise AssertionError("policy attribution needs each connection's walk (record)")
        return named(decisions(trace, self.agent, node_of))


class KernelAttribution:
    """The kernel's: per node, the filter-table counters of the policy rules (the rules
    ``agent`` renders for that node, which the real nodes carry), read before the first
    connection and after each; a rule whose packet count grew decided the connection.
    A pod chain's rule stands for a decision per direction: egress when the
    connection's source (``source``, the client's address) is the guarded pod, else
    ingress. ``read(node, origins)``: the
    node's policy hits (:func:`dataplane.linux.policyrules.policy_hits` in its
    namespace)."""

    def __init__(
        self, agent: PolicyAgent, source: str, read: Callable[[str, Any], Sequence[Any]]
    ) -> None:
        self.agent = agent
        self.source = source
        self.read = read
        self.origins = {
            node: rules.origins
            for node in sorted(agent.node_ips)
            if (rules := agent.rules(node)).origins
        }
        self.before = {node: self._counts(node) for node in self.origins}

    def _counts(self, node: str) -> dict[tuple[str, str], tuple[int, Any]]:
        return {
            (h.chain, h.rule): (h.packets, h.origin) for h in self.read(node, self.origins[node])
        }

    def __call__(self, conn: Any) -> tuple[Decision, ...]:
        found: list[Decision] = []
        for node, old in self.before.items():
            now = self._counts(node)
            self.before[node] = now
            for key, (packets, origin) in now.items():
                if packets <= old.get(key, (0, None))[0]:
                    continue
                if origin.pod_ip:
                    mine = origin.pod_ip == self.source
                    d = origin.for_direction("egress" if mine else "ingress")
                    found += [d] if d is not None else []
                else:
                    found += list(origin.decisions)
        return named(found)


class PolicyTally:
    """Connections per (outcome, deciding rules' texts), in first-seen order."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, tuple[str, ...]]] = Counter()

    def add(self, outcome: str, ds: Sequence[Decision]) -> None:
        if ds:
            self.counts[(outcome, tuple(d.describe() for d in ds))] += 1

    def summary(self) -> list[dict[str, Any]]:
        """``[{"outcome": ENDPOINT-or-VERDICT, "decided_by": [text, ...], "count": N}]``."""
        return [
            {"outcome": outcome, "decided_by": list(texts), "count": n}
            for (outcome, texts), n in self.counts.items()
        ]

    def rows(self) -> list[list[str]]:
        """The text table: a header, then one row per outcome and deciding rule."""
        rows = [["OUTCOME", "COUNT", "DECIDED BY (NetworkPolicy)"]]
        for (outcome, texts), n in self.counts.items():
            rows.append([outcome, str(n), "; ".join(texts)])
        return rows


__all__ = [
    "Attribution",
    "EmulatedAttribution",
    "KernelAttribution",
    "PolicyTally",
    "decision_json",
]
