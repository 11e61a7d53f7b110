"""Load a node-dump directory (:mod:`.layout`) into the state the engine evaluates.

:func:`load_node_dump` reads every file present, parses each with the parser of its
format, and returns a :class:`NodeDump`. Errors are
:class:`~netmodel.errors.InputError` naming the file (the path as given) and line.
Nothing here touches the kernel.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataplane.netfilter.ipset import IpSet
from dataplane.netfilter.ipsetlist import parse_ipset_any
from dataplane.netfilter.iptlist import is_listing, listing_to_save
from dataplane.netfilter.ipvs import IpvsState, VirtualServer
from dataplane.netfilter.ipvslist import parse_ipvs_any
from dataplane.netfilter.nft import NftRuleset, parse_nft
from dataplane.netfilter.parse import parse_save
from dataplane.netfilter.rules import Ruleset
from netmodel.errors import InputError

from .iptext import addr_text, route_text, rule_text
from .layout import IPTABLES_FILES
from .routing import (
    Address,
    Fib,
    Route,
    Rule,
    load_json_list,
    parse_addrs,
    parse_routes,
    parse_rules,
)

__all__ = ["NodeDump", "Sysctls", "load_node_dump", "parse_sysctls"]

#: the tables iptables-nft creates in nftables (the same rules as its save output)
_XT_TABLES = {"filter", "nat", "mangle", "raw", "security"}


@dataclass(frozen=True)
class Sysctls:
    """The forwarding sysctls (``assumed`` names those not in the dump)."""

    values: Mapping[str, str] = field(default_factory=dict)
    assumed: tuple[str, ...] = ()

    def _get(self, key: str, default: str) -> str:
        return self.values.get(key, default)

    @property
    def ip_forward(self) -> bool:
        return self._get("net.ipv4.ip_forward", "1") == "1"

    def route_localnet(self, dev: str) -> bool:
        """The kernel ORs ``all`` and the device's value."""
        all_ = self._get("net.ipv4.conf.all.route_localnet", "0")
        return "1" in (all_, self._get(f"net.ipv4.conf.{dev}.route_localnet", "0"))

    def rp_filter(self, dev: str) -> int:
        """The kernel takes the larger of ``all`` and the device's value."""
        a = int(self._get("net.ipv4.conf.all.rp_filter", "0") or 0)
        d = int(self._get(f"net.ipv4.conf.{dev}.rp_filter", "0") or 0)
        return max(a, d)

    @property
    def bridge_nf_call_iptables(self) -> bool:
        return self._get("net.bridge.bridge-nf-call-iptables", "0") == "1"


def parse_sysctls(text: str, source: str) -> dict[str, str]:
    """``sysctl`` output: ``name = value`` lines (``#`` comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{source}:{n}: expected 'name = value', got {line!r}")
        out[key.strip().replace("/", ".")] = value.strip()
    return out


@dataclass(frozen=True)
class NodeDump:
    """One node's state as a dump gives it."""

    path: str
    iptables: Ruleset | None
    iptables_source: str | None
    nft: NftRuleset | None
    ipsets: Mapping[str, IpSet]
    ipvs: list[VirtualServer]
    fib: Fib
    sysctls: Sysctls
    files: tuple[str, ...]

    @property
    def ipvs_state(self) -> IpvsState | None:
        return IpvsState.of(self.ipvs) if self.ipvs else None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", file=str(path)) from None
    except UnicodeDecodeError:
        raise InputError("not a text file (UTF-8)", file=str(path)) from None


def _has_rules(rs: Ruleset) -> bool:
    return any(True for _ in rs.rules())


def strip_xt_tables(text: str) -> str:
    """``nft list ruleset`` without the ``ip``/``ip6`` tables iptables-nft owns (their
    rules are the iptables-nft dump's, in xt form nft cannot print as rules). Lines kept
    in place (blank lines instead), so line numbers in errors still match the file."""
    out: list[str] = []
    depth = 0
    skipping = False
    for line in text.splitlines():
        m = re.match(r"\s*table\s+(ip6?)\s+(\S+)\s*\{", line)
        if depth == 0 and m and m.group(2) in _XT_TABLES:
            skipping = True
        depth += line.count("{") - line.count("}")
        out.append("" if skipping else line)
        if skipping and depth == 0:
            skipping = False
    return "\n".join(out) + "\n"


def _parse_iptables(text: str, source: str) -> Ruleset:
    """``iptables-save`` text, or an ``iptables -S`` listing
    (:mod:`dataplane.netfilter.iptlist`), errors naming the listing's own lines."""
    if not is_listing(text):
        return parse_save(text, source=source)
    saved, origin = listing_to_save(text, source)
    try:
        return parse_save(saved, source=source)
    except InputError as e:
        prefix = re.escape(source) + r":(\d+):"
        msg = re.sub(
            prefix, lambda m: f"{source}:{origin[int(m.group(1)) - 1]}:", str(e), count=1
        )
        raise type(e)(msg) from None


def _json(root: Path, name: str) -> list[dict[str, Any]]:
    return load_json_list(_read(root / name), str(root / name))


def load_node_dump(directory: str) -> NodeDump:
    """Read a node-dump directory (see :mod:`.layout`)."""
    root = Path(directory)
    if not root.is_dir():
        raise InputError(
            "not a directory (a node dump: see `svclab node-dump --help`)", file=directory
        )
    present = tuple(sorted(p.name for p in root.iterdir() if p.is_file()))

    def src(name: str) -> str:
        return str(root / name)

    rulesets: list[tuple[str, Ruleset]] = []
    for name in IPTABLES_FILES:
        if name in present:
            rulesets.append((name, _parse_iptables(_read(root / name), src(name))))
    with_rules = [(n, rs) for n, rs in rulesets if _has_rules(rs)]
    if len(with_rules) > 1:
        names = ", ".join(src(n) for n, _ in with_rules)
        raise InputError(
            f"{names}: more than one iptables back end holds rules; "
            "evaluating both at once is not modelled (keep the one in use)"
        )
    chosen = with_rules[0] if with_rules else (rulesets[0] if rulesets else None)
    ipsets: Mapping[str, IpSet] = {}
    if "ipset.txt" in present:
        ipsets = parse_ipset_any(_read(root / "ipset.txt"), src("ipset.txt"))
    nft = None
    if "nft-ruleset.txt" in present:
        text = _read(root / "nft-ruleset.txt")
        if "iptables-nft-save.txt" in present or chosen is not None:
            text = strip_xt_tables(text)
        if text.strip():
            nft = parse_nft(text, source=src("nft-ruleset.txt"))
            if not nft.tables:
                nft = None
    ipvs: list[VirtualServer] = []
    if "ipvsadm.txt" in present:
        ipvs = parse_ipvs_any(_read(root / "ipvsadm.txt"), src("ipvsadm.txt"))
        try:
            IpvsState.of(ipvs)
        except ValueError as e:
            raise InputError(f"{src('ipvsadm.txt')}: {e}") from None
    if chosen is None and nft is None and not ipvs:
        raise InputError(
            "no rules in this node dump (need iptables-save.txt, iptables-nft-save.txt, "
            "iptables-legacy-save.txt, nft-ruleset.txt or ipvsadm.txt)",
            file=directory,
        )
    addrs: list[Address] = []
    routes: list[Route] = []
    rules: list[Rule] = []
    if "ip-addr.json" in present:
        addrs = parse_addrs(_json(root, "ip-addr.json"), src("ip-addr.json"))
    elif "ip-addr.txt" in present:
        addrs = parse_addrs(
            addr_text(_read(root / "ip-addr.txt"), src("ip-addr.txt")), src("ip-addr.txt")
        )
    if "ip-route.json" in present:
        routes = parse_routes(_json(root, "ip-route.json"), src("ip-route.json"))
    elif "ip-route.txt" in present:
        routes = parse_routes(
            route_text(_read(root / "ip-route.txt"), src("ip-route.txt")), src("ip-route.txt")
        )
    if "ip-rule.json" in present:
        rules = parse_rules(_json(root, "ip-rule.json"), src("ip-rule.json"))
    elif "ip-rule.txt" in present:
        rules = parse_rules(
            rule_text(_read(root / "ip-rule.txt"), src("ip-rule.txt")), src("ip-rule.txt")
        )
    sysvals: dict[str, str] = {}
    assumed: tuple[str, ...] = ()
    if "sysctl.txt" in present:
        sysvals = parse_sysctls(_read(root / "sysctl.txt"), src("sysctl.txt"))
    else:
        assumed = ("net.ipv4.ip_forward=1", "route_localnet=0", "rp_filter=0")
    return NodeDump(
        directory,
        chosen[1] if chosen else None,
        src(chosen[0]) if chosen else None,
        nft,
        ipsets,
        ipvs,
        Fib(addrs, routes, rules),
        Sysctls(sysvals, assumed),
        present,
    )
