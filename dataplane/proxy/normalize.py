"""Parse iptables-restore / iptables-save text; normalise it as upstream's tests do;
check that a rule set is self-consistent.

* :func:`parse_tables` — ``*table`` / ``:CHAIN`` / ``-A`` / ``-I`` / ``-X`` / ``COMMIT``
  lines into :class:`Table` values (``#`` and blank lines ignored).
* :func:`normalize` — STRUCTURE.md §1.5 (sortIPTablesRules): tables by name; chains
  KUBE-NODEPORTS, KUBE-SERVICES, other KUBE-* alphabetically, then the rest; rules of
  KUBE-NODEPORTS and filter KUBE-SERVICES stable-sorted by the service name in their
  comment, nat KUBE-SERVICES likewise with the "must be the last rule" rule last.
* :func:`consistency_errors` — every jump target exists, every ``-A`` chain is declared,
  jumped-to chains are non-empty, every declared chain is reachable, nothing is
  declared twice. Returns the problems found (empty list = consistent).
* :func:`normalize_listing` — ``nft list ruleset`` text in a canonical order (layout,
  element order and object creation order dropped), to compare a kernel listing with a
  rendered one.
* :func:`normalize_transaction` — upstream's nftables test comparison of ``nft -f``
  transactions (``add`` lines sorted by object type and name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Targets that are not chains.
STANDARD_TARGETS = frozenset(
    {"ACCEPT", "REJECT", "DROP", "MARK", "RETURN", "DNAT", "SNAT", "MASQUERADE"}
)
#: Built-in chains of the filter and nat tables.
BUILTIN_CHAINS = frozenset({"INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING"})
#: kube-proxy's top-level chains: jumped to from built-in chains, not from its own rules.
TOP_LEVEL_CHAINS = frozenset(
    {
        "KUBE-SERVICES",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FORWARD",
        "KUBE-NODEPORTS",
        "KUBE-PROXY-FIREWALL",
        "KUBE-FIREWALL",
        "KUBE-POSTROUTING",
        "KUBE-MARK-MASQ",
        "KUBE-PROXY-CANARY",
        # IPVS mode
        "KUBE-NODE-PORT",
        "KUBE-LOAD-BALANCER",
        "KUBE-SOURCE-RANGES-FIREWALL",
        "KUBE-IPVS-FILTER",
        "KUBE-IPVS-OUT-FILTER",
    }
)

_COMMENT = re.compile(r'--comment (?:"((?:[^"\\]|\\.)*)"|(\S+))')
_TARGET = re.compile(r"(?:^| )-[jg] (\S+)")


@dataclass
class Table:
    """One table: chains in declaration order with their rule lines, and deletions.

    ``rules`` maps a chain to its ``-A CHAIN ...`` lines (verbatim); ``declared`` lists
    every ``:CHAIN`` line in order (duplicates kept, so they can be reported);
    ``policies`` holds built-in chain policies as written (``ACCEPT``).
    """

    name: str
    declared: list[str] = field(default_factory=list)
    rules: dict[str, list[str]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    policies: dict[str, str] = field(default_factory=dict)

    def chain_order(self) -> list[str]:
        """Chains in first-declared order, then chains only seen in ``-A`` lines."""
        seen: dict[str, None] = dict.fromkeys(self.declared)
        for chain in self.rules:
            seen.setdefault(chain, None)
        return list(seen)


def parse_tables(text: str) -> dict[str, Table]:
    """Parse restore/save text into tables (in order of appearance).

    ``-I CHAIN [n] ...`` inserts at the front (or position n); ``-X`` records a deletion
    and drops the chain's rules. Raises ValueError on a line outside a table.
    """
    tables: dict[str, Table] = {}
    cur: Table | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("*"):
            cur = tables.setdefault(line[1:], Table(line[1:]))
            continue
        if cur is None:
            raise ValueError(f"line {lineno}: {line!r} outside a table")
        if line == "COMMIT":
            cur = None
        elif line.startswith(":"):
            name, _, rest = line[1:].partition(" ")
            cur.declared.append(name)
            cur.rules.setdefault(name, [])
            policy = rest.split(" ", 1)[0]
            if policy and policy != "-":
                cur.policies[name] = policy
        elif line.startswith("-A "):
            chain = line.split(" ", 2)[1]
            cur.rules.setdefault(chain, []).append(line)
        elif line.startswith("-I "):
            parts = line.split(" ")
            chain = parts[1]
            pos = 1
            if len(parts) > 2 and parts[2].isdigit():
                pos = int(parts[2])
                parts = parts[:2] + parts[3:]
            rule = " ".join(["-A", chain, *parts[2:]])
            cur.rules.setdefault(chain, []).insert(pos - 1, rule)
        elif line.startswith("-X "):
            chain = line.split(" ", 1)[1].strip()
            cur.deleted.append(chain)
            cur.rules.pop(chain, None)
        else:
            raise ValueError(f"line {lineno}: cannot parse {line!r}")
    return tables


def rule_comment(rule: str) -> str | None:
    """The ``--comment`` text of a rule line, unquoted; None without one."""
    m = _COMMENT.search(rule)
    if m is None:
        return None
    return m.group(1).replace('\\"', '"') if m.group(1) is not None else m.group(2)


def rule_target(rule: str) -> str | None:
    """The ``-j``/``-g`` target of a rule line; None for a rule without one."""
    m = _TARGET.search(rule)
    return m.group(1) if m else None


def _chain_key(name: str) -> tuple[int, str]:
    if name == "KUBE-NODEPORTS":
        return (0, "")
    if name == "KUBE-SERVICES":
        return (1, "")
    if name.startswith("KUBE-"):
        return (2, name)
    return (3, name)


def _service_key(rule: str) -> str:
    comment = rule_comment(rule) or ""
    return re.split(r"[ :]", comment, maxsplit=1)[0]


def _sorted_rules(table: str, chain: str, rules: list[str]) -> list[str]:
    if chain == "KUBE-NODEPORTS" or (table == "filter" and chain == "KUBE-SERVICES"):
        return sorted(rules, key=_service_key)
    if table == "nat" and chain == "KUBE-SERVICES":
        return sorted(
            rules,
            key=lambda r: ("must be the last rule" in (rule_comment(r) or ""), _service_key(r)),
        )
    return list(rules)


def normalize(text: str) -> str:
    """Upstream's sortIPTablesRules: a canonical text for comparing dumps (§1.5)."""
    out: list[str] = []
    tables = parse_tables(text)
    for tname in sorted(tables):
        t = tables[tname]
        chains = sorted(dict.fromkeys([*t.chain_order(), *t.deleted]), key=_chain_key)
        out.append(f"*{tname}")
        out.extend(f":{c} - [0:0]" for c in chains)
        for c in chains:
            out.extend(_sorted_rules(tname, c, t.rules.get(c, [])))
        out.extend(f"-X {c}" for c in sorted(dict.fromkeys(t.deleted), key=_chain_key))
        out.append("COMMIT")
    return "\n".join(out) + "\n"


def consistency_errors(
    text: str,
    *,
    present: Iterable[str] = (),
    top_level: Iterable[str] = TOP_LEVEL_CHAINS,
) -> list[str]:
    """Problems that make ``text`` not a self-contained, consistent rule set.

    ``present`` names chains assumed to exist already (e.g. unchanged services' chains
    a partial sync leaves in the kernel). ``top_level`` chains need not be jumped to.
    """
    errors: list[str] = []
    assumed = set(present)
    exempt = BUILTIN_CHAINS | set(top_level)
    for tname, t in parse_tables(text).items():
        declared = set(t.declared) | assumed
        seen: set[str] = set()
        for chain in t.declared:
            if chain in seen:
                errors.append(f"{tname}: chain {chain} declared twice")
            seen.add(chain)
        jumped: set[str] = set()
        for chain, rules in t.rules.items():
            if chain not in declared and chain not in BUILTIN_CHAINS:
                errors.append(f"{tname}: rules appended to undeclared chain {chain}")
            for rule in rules:
                target = rule_target(rule)
                if target is None or target in STANDARD_TARGETS:
                    continue
                jumped.add(target)
                if target not in declared or target in t.deleted:
                    errors.append(f"{tname}: {chain} jumps to missing chain {target}")
        for target in sorted(jumped):
            if target in assumed or target == "KUBE-NODEPORTS" or target in BUILTIN_CHAINS:
                continue
            if target in t.rules and not t.rules[target]:
                errors.append(f"{tname}: jumped-to chain {target} has no rules")
        for chain in t.declared:
            if chain in exempt or chain in t.deleted or chain in jumped:
                continue
            errors.append(f"{tname}: chain {chain} is declared but never jumped to")
    return errors


# --------------------------------------------------------------------------- nftables


def normalize_listing(text: str) -> str:
    """``nft list ruleset`` text with layout dropped, set elements sorted and the sets,
    maps and chains of each table sorted by kind and name (the kernel lists them in
    creation order, which partial syncs change), so that a kernel listing and
    :attr:`~.nftables.NftablesRender.save_text` compare equal when they hold the same ruleset."""
    out: list[str] = []
    block: list[str] = []
    blocks: list[list[str]] = []
    depth = 0
    for line in _joined_lines(text):
        opens, closes = line.count("{"), line.count("}")
        if depth == 1 and opens > closes and line.split(" ", 1)[0] in ("set", "map", "chain"):
            block = [line]
        elif depth >= 2:
            block.append(line)
        elif depth == 1 and line == "}":
            out.extend(ln for b in sorted(blocks, key=lambda b: b[0]) for ln in b)
            blocks = []
            out.append(line)
        else:
            out.append(line)
        depth += opens - closes
        if block and depth == 1:
            blocks.append(block)
            block = []
    return "\n".join(out) + "\n"


def _joined_lines(text: str) -> list[str]:
    """Stripped non-empty lines, each ``elements = { … }`` joined into one line with
    its elements sorted."""
    lines: list[str] = []
    pending: list[str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if pending is not None:
            pending.append(line)
        elif line.startswith("elements = {"):
            pending = [line]
        else:
            lines.append(line)
            continue
        if pending is not None and line.endswith("}"):
            body = " ".join(pending)[len("elements = {") : -1]
            elems = sorted(e.strip() for e in body.split(","))
            lines.append("elements = { " + ", ".join(elems) + " }")
            pending = None
    return lines


def normalize_transaction(text: str) -> str:
    """Upstream's nftables test comparison: ``add`` lines only (no ``#`` or blanks),
    stable-sorted by object type (table, chain, rule, set, map, element), then object
    name; rules keep their order, other lines sort by full text."""
    order = {"table": 0, "chain": 1, "rule": 2, "set": 3, "map": 4, "element": 5}
    lines = [ln for ln in text.splitlines() if ln.startswith("add ")]

    def key(line: str) -> tuple[int, str, str]:
        w = line.split(" ")
        kind = w[1]
        if kind == "table":
            return (0, "", "")
        return (order[kind], w[4], "" if kind == "rule" else line)

    return "\n".join(sorted(lines, key=key)) + "\n"
