"""Drift between the kube-proxy rules a node should hold (rendered from the cluster's
objects) and what a node dump shows it holds: ``svclab diff --node NAME --node-dump DIR``.

:func:`diff_rules` compares two iptables rule sets table by table (filter and nat, the
tables kube-proxy writes), looking only at kube-proxy's chains (``KUBE-*``) and at the
built-in chains' jumps into them:

* ``missing-chain`` — a chain kube-proxy would write is absent (a Service whose chain was
  deleted: "service not reachable");
* ``extra-chain`` — a ``KUBE-*`` chain the node holds that the objects do not explain (a
  stale ``KUBE-SEP`` of an endpoint that is gone);
* ``missing-rule`` / ``extra-rule`` — inside a chain both have;
* ``masquerade-mark`` — ``KUBE-MARK-MASQ`` sets another mark than expected.

:func:`diff_ipsets` compares kube-proxy's ipsets (IPVS mode): ``missing-member``,
``extra-member``, ``missing-set``.

Every finding names the Service it belongs to (from the ``-m comment`` text kube-proxy
writes, ``NAMESPACE/NAME:PORT``; ipset members of the ClusterIP and NodePort sets are
left to the set), or ``(node)`` for node-wide chains, and carries the rule text as
``iptables-save`` prints it. Rules compare in ``iptables-save`` form (counters ignored).
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from dataplane.netfilter.ipset import IpSet
from dataplane.netfilter.rules import Chain, Ruleset
from dataplane.proxy.savefmt import saved_rule

__all__ = ["Finding", "diff_ipsets", "diff_rules", "group_by_service"]

_COMMENT = re.compile(r'--comment "?([A-Za-z0-9][\w.-]*/[\w.-]+(?::[\w.-]*)?)')
_TABLES = ("filter", "nat")


@dataclass(frozen=True, slots=True)
class Finding:
    """One difference: its kind, the Service (or ``(node)``), table, chain, rule text."""

    kind: str
    service: str
    table: str
    chain: str
    rule: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "service": self.service,
            "table": self.table,
            "chain": self.chain,
            "rule": self.rule,
        }


def _service_of(chain: Chain | None) -> str | None:
    if chain is None:
        return None
    for r in chain.rules:
        m = _COMMENT.search(r.spec)
        if m:
            return m.group(1).split(" ")[0]
    return None


def _rule_texts(chain: Chain) -> list[str]:
    return [saved_rule(f"-A {chain.name} {r.spec}") for r in chain.rules]


def _ours(name: str) -> bool:
    return name.startswith("KUBE-")


def diff_rules(expected: Ruleset, actual: Ruleset) -> list[Finding]:
    """Differences in kube-proxy's chains (module docstring)."""
    out: list[Finding] = []
    for tname in _TABLES:
        et = expected.tables.get(tname)
        at = actual.tables.get(tname)
        echains = dict(et.chains) if et else {}
        achains = dict(at.chains) if at else {}
        for name, ech in echains.items():
            if not _ours(name) and ech.policy is None:
                continue
            ach = achains.get(name)
            svc = _service_of(ech) or _service_of(ach) or "(node)"
            if ach is None:
                out.append(Finding("missing-chain", svc, tname, name))
                out.extend(Finding("missing-rule", svc, tname, name, t) for t in _rule_texts(ech))
                continue
            want, have = _rule_texts(ech), _rule_texts(ach)
            if ech.policy is not None:
                # built-in chains: only the jumps into kube-proxy's chains are ours
                want = [t for t in want if re.search(r"-j KUBE-", t)]
                have = [t for t in have if re.search(r"-j KUBE-", t)]
            if name == "KUBE-MARK-MASQ" and want != have:
                out.extend(Finding("masquerade-mark", "(node)", tname, name, t) for t in have)
                continue
            for t in want:
                if t not in have:
                    out.append(Finding("missing-rule", _svc_of_text(t, svc), tname, name, t))
            for t in have:
                if t not in want:
                    out.append(Finding("extra-rule", _svc_of_text(t, svc), tname, name, t))
        for name, ach in achains.items():
            if _ours(name) and name not in echains:
                svc = _service_of(ach) or "(node)"
                out.append(Finding("extra-chain", svc, tname, name))
                out.extend(Finding("extra-rule", svc, tname, name, t) for t in _rule_texts(ach))
    return out


def _svc_of_text(text: str, default: str) -> str:
    m = _COMMENT.search(text)
    return m.group(1).split(" ")[0] if m else default


def diff_ipsets(expected: Mapping[str, IpSet], actual: Mapping[str, IpSet]) -> list[Finding]:
    """Missing sets, and members missing from or extra in kube-proxy's sets."""
    out: list[Finding] = []
    for name, eset in expected.items():
        aset = actual.get(name)
        if aset is None:
            out.append(Finding("missing-set", "(node)", "ipset", name))
            continue
        for m in sorted(eset.members - aset.members, key=repr):
            out.append(Finding("missing-member", "(node)", "ipset", name, _member(m)))
        for m in sorted(aset.members - eset.members, key=repr):
            out.append(Finding("extra-member", "(node)", "ipset", name, _member(m)))
    return out


def _member(key: tuple[object, ...]) -> str:
    """An ipset key back in ``ipset`` form (``10.96.0.1,tcp:443``)."""
    from ipaddress import ip_address

    parts: list[str] = []
    for v in key:
        if isinstance(v, int):
            parts.append(str(ip_address(v & ((1 << 128) - 1) if v >> 128 else v)))
        elif isinstance(v, tuple) and len(v) == 3:
            base, plen, _ = v
            a = ip_address(int(base) & ((1 << 128) - 1) if int(base) >> 128 else int(base))
            parts.append(f"{a}/{plen}")
        elif isinstance(v, tuple) and len(v) == 2:
            proto, port = v
            parts.append(f"{proto}:{port}" if proto else str(port))
        else:
            parts.append(str(v))
    return ",".join(parts)


def group_by_service(findings: list[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in findings:
        out.setdefault(f.service, []).append(f)
    return out
