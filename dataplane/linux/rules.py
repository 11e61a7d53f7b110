"""Load kube-proxy's rules into a node namespace and read them back with counters.

Back end, one per namespace, chosen per cluster (:data:`IPTABLES_BACKENDS`):

* ``nft`` — **iptables-nft** (``iptables-nft-restore``/``-save``, ``iptables v1.8
  (nf_tables)``) for kube-proxy's iptables mode, and **nft** (``nft -f -``) for its
  nftables mode, which uses its own ``ip kube-proxy`` table and so coexists with
  iptables-nft's tables in the same kernel back end;
* ``legacy`` — **iptables-legacy** (x_tables): ``iptables-legacy-restore`` loads the
  payload, and the rules and counters are read back through libiptc
  (:mod:`dataplane.linux.legacy`, python-iptables). kube-proxy's nftables mode has no
  place on it (:func:`check_backend`).

Never both in one namespace: rules in the legacy and the nft back end of one namespace
would both apply, in an order that kube-proxy does not expect.

Loading follows kube-proxy's sync: first ensure the jump rules from built-in chains
(``iptables -C`` then ``iptables -I CHAIN 1``, in :data:`JUMP_RULES` order, so the last
one ends up on top); here the check is one ``iptables-save`` and the inserts one
``iptables-restore --noflush`` of ``-N``/``-I`` lines, which gives the same result with
two processes instead of two per rule. Then the payload goes to
``iptables-restore --noflush`` unchanged (the exact bytes the emulator evaluates).

A node's whole tables in ``iptables-save`` form (what the realised cluster's view holds)
are loaded by :func:`load_owned`: one ``--noflush`` restore that changes only what is
ours, so the chains of others in the same tables (the CNI ``portmap`` plugin's, written
by the plugin) keep their rules and counters, as kube-proxy's restore keeps them on a
node.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shlex
import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from dataplane.linux import legacy, nsenter
from dataplane.linux.netns import run_in
from dataplane.proxy.iptables import JUMP_RULES, JumpRule
from netmodel.errors import BackendError

_COUNTED = re.compile(r"^\[(\d+):(\d+)\] (-A (\S+) .*)$")
_COUNTER_PREFIX = re.compile(r"^\[\d+:\d+\] ")
_NFACCT_USE = re.compile(r"--nfacct-name\s+(\S+)")  # iptables-save prints two spaces
_NETLINK_NETFILTER = 12
_NFACCT_NEW = 7 << 8  # NFNL_SUBSYS_ACCT << 8 | NFNL_MSG_ACCT_NEW
_NFACCT_NAME = 1
_DECLARED = re.compile(r"^:(\S+) (\S+)")
_POLICY = re.compile(r"^:(\S+) (\S+) \[(\d+):(\d+)\]$")

IptablesBackend = Literal["nft", "legacy"]
#: the iptables back ends a namespace can be realised on; ``nft`` is the default
IPTABLES_BACKENDS: tuple[str, ...] = get_args(IptablesBackend)
#: how ``svclab up --real`` and the records describe each back end
BACKEND_TITLES = {"nft": "iptables-nft (nf_tables)", "legacy": "iptables-legacy (x_tables, libiptc)"}


def restore_tool(backend: IptablesBackend) -> str:
    """``iptables-nft-restore`` or ``iptables-legacy-restore``: named explicitly, never the
    ``iptables-restore`` alternative, which may point at either."""
    if backend not in IPTABLES_BACKENDS:
        raise BackendError(f"unknown iptables back end {backend!r} (one of nft, legacy)")
    return f"iptables-{backend}-restore"


def check_backend(backend: IptablesBackend, proxy_mode: str, *, node: str = "") -> None:
    """Refuse a kube-proxy mode the back end cannot carry: the nftables mode loads
    ``nft`` tables, which an iptables-legacy node does not use."""
    restore_tool(backend)
    if backend == "legacy" and proxy_mode == "nftables":
        where = f"node {node}: " if node else ""
        raise BackendError(
            f"{where}kube-proxy's nftables mode cannot run on the iptables legacy back end "
            "(it loads nf_tables rules); use proxyMode iptables, or --iptables-backend nft"
        )


@dataclass(frozen=True, slots=True)
class RuleCounter:
    """One rule of ``iptables-save -c`` with its counters. ``rule`` is the ``-A ...``
    line without the counter prefix (the form the emulator's dumps use)."""

    table: str
    chain: str
    rule: str
    packets: int
    bytes: int


@dataclass(frozen=True, slots=True)
class ChainPolicy:
    table: str
    chain: str
    policy: str  # ACCEPT/DROP for built-ins, "-" for user chains
    packets: int
    bytes: int


def _target(args: str) -> str:
    words = shlex.split(args)
    if "-j" not in words:
        raise BackendError(f"jump rule without -j: {args}")
    return words[words.index("-j") + 1]


def _save_lines(table: str, save: str) -> dict[str, list[str]]:
    """chain -> its ``-A`` lines (counters stripped) in ``table`` of an iptables-save dump."""
    chains: dict[str, list[str]] = {}
    current = None
    for raw in save.splitlines():
        line = _COUNTER_PREFIX.sub("", raw)
        if line.startswith("*"):
            current = line[1:].strip()
        elif current != table:
            continue
        elif line.startswith(":"):
            chains.setdefault(line[1:].split()[0], [])
        elif line.startswith("-A "):
            chains.setdefault(line.split()[1], []).append(line)
    return chains


def missing_jumps(save: str, jumps: Sequence[JumpRule]) -> list[JumpRule]:
    """The jump rules ``save`` (an iptables-save dump) does not contain yet."""
    missing = []
    tables: dict[str, dict[str, list[str]]] = {}
    for j in jumps:
        chains = tables.setdefault(j.table, _save_lines(j.table, save))
        if f"-A {j.chain} {j.args}" not in chains.get(j.chain, []):
            missing.append(j)
    return missing


def ensure_jumps(
    netns: str, jumps: Sequence[JumpRule] = JUMP_RULES, *, backend: IptablesBackend = "nft"
) -> list[JumpRule]:
    """Ensure kube-proxy's built-in-chain jumps (and their target chains) exist in
    ``netns``; returns the ones that had to be inserted. Idempotent."""
    save = iptables_save(netns, counters=False, backend=backend)
    todo = missing_jumps(save, jumps)
    if not todo:
        return []
    lines: list[str] = []
    for table in dict.fromkeys(j.table for j in todo):
        existing = _save_lines(table, save)
        lines.append(f"*{table}")
        for target in dict.fromkeys(_target(j.args) for j in todo if j.table == table):
            if target not in existing:
                lines.append(f"-N {target}")
        lines += [f"-I {j.chain} 1 {j.args}" for j in todo if j.table == table]
        lines.append("COMMIT")
    run_in(netns, [restore_tool(backend), "--noflush"], input="\n".join(lines) + "\n")
    return todo


def ensure_nfacct(netns: str, names: Iterable[str]) -> None:
    """Create nfacct counter objects (``nfacct add NAME``), as kube-proxy does at start-up
    so that its ``-m nfacct --nfacct-name`` rules load. Raw nfnetlink from a socket opened
    inside ``netns``; an existing object is kept (EEXIST/EBUSY tolerated)."""
    with contextlib.closing(
        nsenter.socket_in(netns, socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_NETFILTER)
    ) as sock:
        for seq, name in enumerate(sorted(set(names)), start=1):
            raw = name.encode() + b"\0"
            attr = struct.pack("HH", 4 + len(raw), _NFACCT_NAME) + raw
            attr += b"\0" * (-len(attr) % 4)
            body = struct.pack("BBH", socket.AF_UNSPEC, 0, 0) + attr
            flags = 0x1 | 0x4 | 0x400  # NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE
            sock.send(struct.pack("IHHII", 16 + len(body), _NFACCT_NEW, flags, seq, 0) + body)
            err = -struct.unpack("i", sock.recv(4096)[16:20])[0]
            if err not in (0, errno.EEXIST, errno.EBUSY):
                raise BackendError(f"netns {netns}: nfacct add {name}: {os.strerror(err)}")


def nfacct_names(payload: str) -> set[str]:
    """The nfacct counter objects a restore payload's ``-m nfacct`` rules name."""
    return set(_NFACCT_USE.findall(payload))


def load_iptables(
    netns: str,
    payload: str,
    *,
    jumps: Sequence[JumpRule] | None = JUMP_RULES,
    backend: IptablesBackend = "nft",
) -> None:
    """Apply kube-proxy's ``iptables-restore`` payload to ``netns`` on ``backend`` after
    ensuring the jump rules (``jumps=None`` skips that, for payloads that are not
    kube-proxy's) and the nfacct objects the payload names. The payload goes to
    ``iptables-{nft,legacy}-restore --noflush`` unchanged. Raises BackendError with the
    tool's first error line."""
    tool = restore_tool(backend)
    if jumps:
        ensure_jumps(netns, jumps, backend=backend)
    if counters := set(_NFACCT_USE.findall(payload)):
        ensure_nfacct(netns, counters)
    run_in(netns, [tool, "--noflush"], input=payload)


def iptables_save(
    netns: str,
    *,
    counters: bool = True,
    table: str | None = None,
    backend: IptablesBackend = "nft",
) -> str:
    """The rules of ``netns`` in ``iptables-save [-c] [-t TABLE]`` form: from
    ``iptables-nft-save`` (nft back end), or read through libiptc (legacy back end,
    :func:`dataplane.linux.legacy.save_text`, without the comment lines)."""
    if backend == "legacy":
        return legacy.save_text(netns, counters=counters, table=table)
    restore_tool(backend)
    argv = ["iptables-nft-save"]
    if counters:
        argv.append("-c")
    if table:
        argv += ["-t", table]
    return run_in(netns, argv).stdout


def parse_counters(save: str) -> tuple[list[RuleCounter], list[ChainPolicy]]:
    """Rules and chain policies with their counters from ``iptables-save -c`` text."""
    rules: list[RuleCounter] = []
    policies: list[ChainPolicy] = []
    table = ""
    for line in save.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif m := _POLICY.match(line):
            policies.append(
                ChainPolicy(table, m.group(1), m.group(2), int(m.group(3)), int(m.group(4)))
            )
        elif m := _COUNTED.match(line):
            rules.append(
                RuleCounter(table, m.group(4), m.group(3), int(m.group(1)), int(m.group(2)))
            )
    return rules, policies


def rule_counters(
    netns: str, *, table: str | None = None, backend: IptablesBackend = "nft"
) -> list[RuleCounter]:
    """Every rule of ``netns`` with its packet and byte counters, in dump order (legacy
    back end: read through libiptc)."""
    return parse_counters(iptables_save(netns, counters=True, table=table, backend=backend))[0]


BUILTIN_CHAINS = ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")


def foreign_rule(rule: str, foreign: Sequence[str]) -> bool:
    """Does ``rule`` (an ``-A`` line) jump or go to a chain whose name starts with one of
    ``foreign``?"""
    words = rule.split()
    return any(
        w in ("-j", "-g") and i + 1 < len(words) and words[i + 1].startswith(tuple(foreign))
        for i, w in enumerate(words)
    )


def owned_restore_input(save: str, text: str, foreign: Sequence[str]) -> str:
    """The ``iptables-restore --noflush`` input that makes a namespace whose tables are
    ``save`` (``iptables-save`` text) hold ``text``'s tables, except what belongs to
    others: chains whose names start with one of ``foreign`` (the CNI ``portmap``
    plugin's ``CNI-HOSTPORT-``/``CNI-DN-``) and built-in-chain rules jumping to them,
    which are neither flushed, deleted nor added (what ``text`` has of them is left to
    their owner). "" when there is nothing to change. Pure.

    Tables handled: ``filter``, ``nat`` and every table of ``text``. In each: every
    wanted user chain is declared (``--noflush`` flushes a declared chain) and filled;
    user chains the namespace has and ``text`` has not are declared, then deleted
    (``-X``) at the end, as kube-proxy removes its stale chains; a built-in chain's rules
    of our own are deleted by number (last first) and ``text``'s are inserted at their
    places among the foreign rules left (``-I CHAIN n``); built-in policies are set."""
    pre = tuple(foreign)
    have = _parse(save)
    want = _parse(text)
    out: list[str] = []
    for name in dict.fromkeys(["filter", "nat", *want]):
        h, w = have.get(name), want.get(name)
        h_rules = h.rules if h else {}
        w_rules = w.rules if w else {}
        decl: list[str] = []
        cmds: list[str] = []
        drop: list[str] = []
        for chain, policy in (w.policies if w else {}).items():
            if chain in BUILTIN_CHAINS and (h is None or h.policies.get(chain) != policy):
                decl.append(f":{chain} {policy} [0:0]")
        for chain in BUILTIN_CHAINS:
            current = h_rules.get(chain, [])
            kept = [r for r in current if foreign_rule(r, pre)]
            wanted = w_rules.get(chain, [])
            result: list[str] = []
            inserts: list[str] = []
            for r in wanted:
                if not foreign_rule(r, pre):
                    inserts.append(f"-I {chain} {len(result) + 1} {r.split(' ', 2)[2]}")
                    result.append(r)
                elif (placed := len(result) - len(inserts)) < len(kept) and kept[placed] == r:
                    result.append(r)
            result += kept[len(result) - len(inserts) :]
            if result == current:
                continue
            mine = [i for i, r in enumerate(current, 1) if not foreign_rule(r, pre)]
            cmds += [f"-D {chain} {i}" for i in reversed(mine)]
            cmds += inserts
        own_w = [c for c in w_rules if c not in BUILTIN_CHAINS and not c.startswith(pre)]
        own_h = [c for c in h_rules if c not in BUILTIN_CHAINS and not c.startswith(pre)]
        for chain in own_w:
            if h is not None and h_rules.get(chain) == w_rules[chain]:
                continue
            decl.append(f":{chain} - [0:0]")
            cmds += w_rules[chain]
        for chain in own_h:
            if chain not in w_rules:
                decl.append(f":{chain} - [0:0]")
                drop.append(f"-X {chain}")
        if decl or cmds or drop:
            out += [f"*{name}", *decl, *cmds, *drop, "COMMIT"]
    return "\n".join(out) + "\n" if out else ""


@dataclass
class _Table:
    policies: dict[str, str]
    rules: dict[str, list[str]]


def _parse(text: str) -> dict[str, _Table]:
    """table -> built-in policies and chain -> ``-A`` lines (counters stripped; chains in
    declaration order) of ``iptables-save`` / ``-restore`` text with ``-A`` lines only."""
    out: dict[str, _Table] = {}
    cur: _Table | None = None
    for raw in text.splitlines():
        line = _COUNTER_PREFIX.sub("", raw.strip())
        if line.startswith("*"):
            cur = out.setdefault(line[1:], _Table({}, {}))
        elif cur is None or not line or line.startswith("#") or line == "COMMIT":
            continue
        elif m := _DECLARED.match(line):
            cur.rules.setdefault(m.group(1), [])
            if m.group(2) != "-":
                cur.policies[m.group(1)] = m.group(2)
        elif line.startswith("-A "):
            cur.rules.setdefault(line.split()[1], []).append(line)
        else:
            raise BackendError(f"rules to load: cannot apply {line!r} (only -A lines)")
    return out


def load_owned(
    netns: str,
    text: str,
    *,
    foreign: Sequence[str],
    backend: IptablesBackend = "nft",
) -> bool:
    """Make ``netns`` hold ``text``'s tables apart from ``foreign`` chains and the jumps
    to them (:func:`owned_restore_input`): one ``iptables-{nft,legacy}-restore
    --noflush``, after the nfacct objects ``text`` names. Returns whether anything was
    loaded."""
    if counters := set(_NFACCT_USE.findall(text)):
        ensure_nfacct(netns, counters)
    payload = owned_restore_input(
        iptables_save(netns, counters=False, backend=backend), text, foreign
    )
    if not payload:
        return False
    run_in(netns, [restore_tool(backend), "--noflush"], input=payload)
    return True


def flush_iptables(netns: str, *, backend: IptablesBackend = "nft") -> None:
    """Remove every rule and user chain of ``netns``'s filter and nat tables on
    ``backend``."""
    run_in(netns, [restore_tool(backend)], input="*filter\nCOMMIT\n*nat\nCOMMIT\n")


def ipset_restore_input(text: str) -> str:
    """``ipset save`` text as an idempotent ``ipset -exist restore`` input: each set
    created if missing and emptied, then filled with exactly the members of ``text``
    (a set that rules refer to cannot be destroyed, but it can be flushed)."""
    out: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        out.append(line)
        if words[0] == "create" and len(words) > 1:
            out.append(f"flush {words[1]}")
    return "\n".join(out) + "\n"


def load_ipsets(netns: str, text: str) -> None:
    """Make ``netns``'s ipsets named in ``text`` (``ipset save`` form) hold exactly its
    members (``ipset -exist restore``, :func:`ipset_restore_input`); other sets are left
    alone. Raises BackendError with the tool's first error line."""
    run_in(netns, ["ipset", "-exist", "restore"], input=ipset_restore_input(text))


def load_nft(netns: str, text: str) -> None:
    """``nft -f -`` in ``netns`` (kube-proxy's nftables mode payload)."""
    run_in(netns, ["nft", "-f", "-"], input=text)


def nft_ruleset(netns: str) -> str:
    """``nft list ruleset`` of ``netns`` (rules with ``counter`` show their counts)."""
    return run_in(netns, ["nft", "list", "ruleset"]).stdout
