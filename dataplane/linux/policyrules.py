"""A node's NetworkPolicy rules in the kernel: loading kube-router's layout into a node
namespace, and reading back which of its rules the kernel counted.

Loading (:func:`load_policy`) does what kube-router's netpol controller does on every
sync, in its order:

1. the ipsets, with ``ipset -exist restore`` (each set created if missing, emptied and
   refilled: :func:`dataplane.linux.rules.ipset_restore_input`), so that every set a
   rule names exists before the rule;
2. the filter-table payload with ``iptables-{nft,legacy}-restore --noflush``: every
   chain it declares is flushed and refilled; policy chains the namespace holds and the
   payload no longer declares (``KUBE-POD-FW-*``, ``KUBE-NWPLCY-*`` of pods and policies
   gone, svclab's ``KUBE-CNP-*`` ClusterNetworkPolicy tiers: :data:`POLICY_CHAIN_PREFIXES`) are declared and deleted (``-X``) in the same
   transaction, as kube-router's cleanup of stale chains removes them; the payload's
   rules in the built-in chains (the jumps to ``KUBE-ROUTER-INPUT``/``FORWARD``/
   ``OUTPUT``) are inserted only when the chain does not hold them yet (kube-router
   checks before it inserts), so a second load adds no second jump;
3. the policy ipsets the payload no longer uses are destroyed (:data:`POLICY_SET_PREFIXES`).

With no payload (the cluster has no policy), the namespace is made to hold none of
kube-router's layout: the jumps to the ``KUBE-ROUTER-*`` chains deleted, every
kube-router chain (:data:`ALL_CHAIN_PREFIXES`) flushed and deleted, every policy ipset
destroyed.

Chains and sets of others (kube-proxy's ``KUBE-SVC-*``, the CNI plugins') are never
named, so they keep their rules and counters.

Counters (:func:`policy_hits`): ``iptables-save -c -t filter`` of the namespace, each
rule with a packet count mapped back through the render's ``origins`` (keyed by chain
and the rule as ``iptables-save`` prints it) to the policy and rule path that made it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from dataplane.linux import rules
from dataplane.linux.netns import run_in

#: kube-router's per-pod and per-policy chains, and svclab's ClusterNetworkPolicy tier
#: chains (``KUBE-CNP-AD-*``, ``KUBE-CNP-BL-*``, :mod:`dataplane.netpol.clusterpolicy`):
#: the ones a sync may leave stale
POLICY_CHAIN_PREFIXES = ("KUBE-POD-FW-", "KUBE-NWPLCY-", "KUBE-CNP-")
#: kube-router's per-policy ipsets (sources and destinations of its rules)
POLICY_SET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-")
#: every chain of kube-router's layout
ALL_CHAIN_PREFIXES = ("KUBE-ROUTER-", *POLICY_CHAIN_PREFIXES)
BUILTIN = frozenset({"INPUT", "FORWARD", "OUTPUT"})

_DECLARED = re.compile(r"^:(\S+) ", re.M)
_CREATE = re.compile(r"^create\s+(\S+)", re.M)

OriginT = TypeVar("OriginT")


def _filter_section(payload: str) -> tuple[list[str], list[str], list[str]]:
    """The payload's lines before its ``*filter`` section's ``COMMIT``, that section's
    lines, and the lines after. Raises ValueError when it has no filter section."""
    lines = payload.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == "*filter")
        end = next(i for i in range(start, len(lines)) if lines[i].strip() == "COMMIT")
    except StopIteration:
        raise ValueError("the policy payload has no *filter ... COMMIT section") from None
    return lines[:start], lines[start:end], lines[end:]


def _builtin_rule(line: str) -> tuple[str, str] | None:
    """``(chain, rule spec)`` of an ``-A``/``-I`` line on a built-in chain (``-I CHAIN
    N spec`` or ``-I CHAIN spec``), else None."""
    words = line.split()
    if len(words) < 3 or words[0] not in ("-A", "-I") or words[1] not in BUILTIN:
        return None
    rest = words[2:]
    if words[0] == "-I" and rest and rest[0].isdigit():
        rest = rest[1:]
    return words[1], " ".join(rest)


def policy_restore_input(save: str, payload: str | None) -> str:
    """The ``iptables-restore --noflush`` input that loads ``payload`` (a render's filter
    payload; None: no policy rules at all) into a namespace whose filter table is
    ``save`` (``iptables-save -t filter``): the payload, less the built-in-chain rules
    ``save`` already holds, plus the stale policy chains declared and deleted (module
    docstring). "" when there is nothing to do. Pure."""
    held = [rule_spec(r) for r in _rule_lines(save)]
    have = set(_DECLARED.findall(save))
    if payload is None:
        jumps = [
            f"-D {chain} {spec}"
            for chain, spec in held
            if chain in BUILTIN and _jumps_to(spec, ("KUBE-ROUTER-",))
        ]
        ours = sorted(c for c in have if c.startswith(ALL_CHAIN_PREFIXES))
        if not jumps and not ours:
            return ""
        body = [*jumps, *(f":{c} - [0:0]" for c in ours), *(f"-X {c}" for c in ours)]
        return "\n".join(["*filter", *body, "COMMIT"]) + "\n"
    before, section, after = _filter_section(payload)
    declared = set(_DECLARED.findall("\n".join(section)))
    kept: list[str] = []
    for line in section:
        spec = _builtin_rule(line.strip())
        if spec is not None and spec in held:
            continue  # the jump is there: a second one would be evaluated twice
        kept.append(line)
    stale = sorted(c for c in have - declared if c.startswith(POLICY_CHAIN_PREFIXES))
    kept += [f":{c} - [0:0]" for c in stale]
    kept += [f"-X {c}" for c in stale]
    return "\n".join([*before, *kept, *after]) + "\n"


def _jumps_to(spec: str, prefixes: tuple[str, ...]) -> bool:
    words = spec.split()
    return any(
        w in ("-j", "-g") and i + 1 < len(words) and words[i + 1].startswith(prefixes)
        for i, w in enumerate(words)
    )


def _rule_lines(save: str) -> list[str]:
    """The ``-A`` lines of an ``iptables-save`` dump (counters stripped)."""
    out = []
    for raw in save.splitlines():
        line = re.sub(r"^\[\d+:\d+\] ", "", raw)
        if line.startswith("-A "):
            out.append(line)
    return out


def ipset_names(netns: str) -> list[str]:
    """The ipsets ``netns`` holds (``ipset list -n``)."""
    return run_in(netns, ["ipset", "list", "-n"]).stdout.split()


def load_policy(
    netns: str,
    filter_payload: str | None,
    ipsets: str = "",
    *,
    backend: rules.IptablesBackend = "nft",
) -> list[str]:
    """Load one policy sync into ``netns`` (module docstring; ``filter_payload`` None:
    remove kube-router's layout); returns the stale ipsets destroyed. BackendError with
    the tool's first error line when the kernel refuses a step (what was loaded before
    it stays)."""
    tool = rules.restore_tool(backend)
    if filter_payload is not None and ipsets.strip():
        rules.load_ipsets(netns, ipsets)
    save = rules.iptables_save(netns, counters=False, table="filter", backend=backend)
    payload = policy_restore_input(save, filter_payload)
    if payload:
        run_in(netns, [tool, "--noflush"], input=payload)
    wanted = set(_CREATE.findall(ipsets)) if filter_payload is not None else set()
    stale = [s for s in ipset_names(netns) if s.startswith(POLICY_SET_PREFIXES) and s not in wanted]
    for name in stale:
        run_in(netns, ["ipset", "destroy", name])
    return stale


# ---------------------------------------------------------------------------- counters


@dataclass(frozen=True, slots=True)
class PolicyHit(Generic[OriginT]):
    """One policy rule the kernel counted: its chain, its spec (as ``iptables-save``
    prints it, after ``-A CHAIN``), its counters, and where it came from (the render's
    origin of that rule)."""

    chain: str
    rule: str
    packets: int
    bytes: int
    origin: OriginT


def rule_spec(line: str) -> tuple[str, str]:
    """``(chain, spec)`` of an ``-A CHAIN spec`` line."""
    words = line.split(" ", 2)
    return words[1], words[2] if len(words) > 2 else ""


def hits(
    counters: list[rules.RuleCounter], origins: Mapping[tuple[str, str], OriginT]
) -> list[PolicyHit[OriginT]]:
    """The rules of ``counters`` (filter table) with a nonzero packet count that
    ``origins`` names, in dump order. Pure."""
    out: list[PolicyHit[OriginT]] = []
    for c in counters:
        if c.table != "filter" or c.packets == 0:
            continue
        chain, spec = rule_spec(c.rule)
        origin = origins.get((chain, spec))
        if origin is None:
            origin = origins.get((chain, c.rule))
        if origin is not None:
            out.append(PolicyHit(chain, spec, c.packets, c.bytes, origin))
    return out


def filter_counters(
    netns: str, *, backend: rules.IptablesBackend = "nft"
) -> list[rules.RuleCounter]:
    """Every rule of ``netns``'s filter table with its counters, in dump order."""
    return rules.rule_counters(netns, table="filter", backend=backend)


def policy_hits(
    netns: str, origins: Mapping[tuple[str, str], OriginT], *, backend: rules.IptablesBackend = "nft"
) -> list[PolicyHit[OriginT]]:
    """The policy rules ``netns``'s kernel counted packets on, each with its origin
    (:func:`hits` over :func:`filter_counters`)."""
    return hits(filter_counters(netns, backend=backend), origins)


__all__ = [
    "ALL_CHAIN_PREFIXES",
    "POLICY_CHAIN_PREFIXES",
    "POLICY_SET_PREFIXES",
    "PolicyHit",
    "filter_counters",
    "hits",
    "ipset_names",
    "load_policy",
    "policy_hits",
    "policy_restore_input",
    "rule_spec",
]
