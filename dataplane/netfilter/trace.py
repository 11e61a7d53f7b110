"""Trace records: what the netfilter engine did to a packet, as product output.

A :class:`TraceRecord` is one step, in evaluation order. The CLI prints them as a table
(``hook table chain #rule effect``) and as JSON (:meth:`TraceRecord.to_dict`). Records are
immutable named tuples (cheap to create on the hot path).

Steps that produce a record:

* a rule that matched (``rule`` >= 1): ``effect`` says what its target did — ``jump X``,
  ``goto X``, ``return``, ``ACCEPT``, ``DROP``, ``REJECT icmp-port-unreachable``,
  ``DNAT``/``SNAT``/``MASQUERADE`` (``nat`` then holds the rewrite
  ``"172.30.0.41:80 -> 10.180.0.1:80"``), ``MARK or 0x4000``, ``LOG prefix``, or
  ``match`` for a rule without target;
* a user chain that ended without a verdict (``rule`` 0, effect ``return``);
* a built-in chain's policy (``rule`` 0, effect ``policy ACCEPT``);
* conntrack decisions (``table`` ``conntrack``: the state found, a reused NAT binding,
  a confirmation) and nat-table skips for packets of known connections;
* nftables rules (``table`` is ``nft:<family> <table>``) and IPVS scheduling
  (``table`` ``ipvs``).

``ctstate`` is the packet's conntrack state at that step; ``mark`` the packet mark after
the step.
"""

from __future__ import annotations

from typing import NamedTuple


class TraceRecord(NamedTuple):
    """One step of a packet through netfilter (see the module docstring)."""

    hook: str
    table: str
    chain: str
    rule: int
    text: str
    effect: str
    nat: str | None
    ctstate: str
    mark: int

    def to_dict(self) -> dict[str, object]:
        """The JSON form (keys as the field names, ``mark`` as hex text)."""
        d: dict[str, object] = self._asdict()
        d["mark"] = f"{self.mark:#x}"
        return d

    def row(self) -> tuple[str, ...]:
        """The table form: hook, table, chain, rule number, effect, nat, ctstate, mark."""
        return (
            self.hook,
            self.table,
            self.chain,
            str(self.rule) if self.rule else "-",
            self.effect,
            self.nat or "",
            self.ctstate,
            f"{self.mark:#x}",
        )
