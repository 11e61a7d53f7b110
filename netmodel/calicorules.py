"""Calico's own netfilter rules on a node, as Felix (its iptables data plane) renders
them, and how they join kube-proxy's rules on that node. Pure text, no I/O.

Modelled: an IP pool's ``natOutgoing`` (Calico's docs, "Configure outgoing NAT": pod
traffic from a pool with ``natOutgoing: true`` to a destination outside every pool is
masqueraded by the node). Felix keeps two ipsets, ``cali40all-ipam-pools`` (every pool)
and ``cali40masq-ipam-pools`` (the pools with natOutgoing), and in the nat table::

    -A POSTROUTING -j cali-POSTROUTING          (inserted first: Felix's insert mode)
    -A cali-POSTROUTING -j cali-nat-outgoing
    -A cali-nat-outgoing -m set --match-set cali40masq-ipam-pools src \\
        -m set ! --match-set cali40all-ipam-pools dst -j MASQUERADE --random-fully

(with Felix's ``cali:…`` rule comments, as ``iptables-save`` on a Calico node shows
them). Destinations outside the pools include the nodes' own addresses (Felix's default
``natOutgoingExclusions: IPPoolsOnly``); a packet delivered to its own node never
reaches POSTROUTING, so only other nodes and the outside see the node's address.

With a VXLAN pool, Felix's ``-A cali-POSTROUTING -o vxlan.calico -m addrtype !
--src-type LOCAL --limit-iface-out -m addrtype --src-type LOCAL -j MASQUERADE`` too
(:func:`felix_rules`).

The emulator evaluates exactly this text and these sets (:func:`with_calico`); the kernel
back end loads the same (``ipset restore``, then ``iptables-restore``). Rendered only
when some pool asks for natOutgoing or VXLAN, so a cluster without them keeps
kube-proxy's rules alone. Not modelled: Calico's policy, raw/mangle/filter chains, floating IPs
(``cali-fip-*``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from netmodel.cluster import IPPool
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules, RulesetInput

ALL_POOLS_SET = "cali40all-ipam-pools"
MASQ_POOLS_SET = "cali40masq-ipam-pools"
_SET_OPTS = "hash:net family inet hashsize 1024 maxelem 1048576"


@dataclass(frozen=True, slots=True)
class CalicoRules:
    """Felix's additions to a node: ``chains`` (user chains of the nat table),
    ``first`` (rules Felix inserts at the head of built-in chains), ``rules`` (the user
    chains' rules), all in ``iptables-save`` form, and ``ipsets`` (``ipset save`` form)."""

    chains: tuple[str, ...]
    first: tuple[str, ...]
    rules: tuple[str, ...]
    ipsets: str

    def nat_text(self) -> str:
        """The nat table alone, as ``iptables-save`` prints it on a node without
        kube-proxy."""
        return _table("nat", self, ())


def felix_rules(pools: Sequence[IPPool], *, random_fully: bool = True) -> CalicoRules | None:
    """Felix's nat rules and ipsets for ``pools``; None when no pool asks for natOutgoing
    or VXLAN. ``random_fully``: the node's iptables has ``--random-fully`` (Felix adds it
    when it does). With a VXLAN pool, ``cali-POSTROUTING`` also masquerades the node's
    own traffic that leaves ``vxlan.calico`` from an address that is not that device's
    (the node's eth0 address, after kube-proxy DNATed a node's connection to a remote
    pod) to the tunnel address."""
    nat = any(p.nat_outgoing for p in pools)
    vxlan = any(p.vxlan_mode == "Always" for p in pools)
    if not (nat or vxlan):
        return None
    masq = "-j MASQUERADE --random-fully" if random_fully else "-j MASQUERADE"
    chains = ["cali-POSTROUTING"]
    rules = []
    sets = []
    if nat:
        chains.append("cali-nat-outgoing")
        rules.append(
            '-A cali-POSTROUTING -m comment --comment "cali:nYKhEzDlr11Jccal" -j cali-nat-outgoing'
        )
    if vxlan:
        rules.append(
            '-A cali-POSTROUTING -o vxlan.calico -m comment --comment "cali:e9dnSgSVNmIcpVhP" '
            "-m addrtype ! --src-type LOCAL --limit-iface-out -m addrtype --src-type LOCAL "
            f"{masq}"
        )
    if nat:
        rules.append(
            '-A cali-nat-outgoing -m comment --comment "cali:flqWnvo8yq4ULQLa" '
            f"-m set --match-set {MASQ_POOLS_SET} src "
            f"-m set ! --match-set {ALL_POOLS_SET} dst {masq}"
        )
        for name, members in (
            (ALL_POOLS_SET, [p.cidr for p in pools]),
            (MASQ_POOLS_SET, [p.cidr for p in pools if p.nat_outgoing]),
        ):
            sets.append(f"create {name} {_SET_OPTS}")
            sets += [f"add {name} {m}" for m in members]
    return CalicoRules(
        chains=tuple(chains),
        first=('-A POSTROUTING -m comment --comment "cali:O3lYWMrLQYEMJtB5" -j cali-POSTROUTING',),
        rules=tuple(rules),
        ipsets="\n".join(sets) + "\n" if sets else "",
    )


_NAT_BUILTINS = ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING")


def _table(name: str, cal: CalicoRules, body: Sequence[str]) -> str:
    lines = [f"*{name}"] + [f":{c} ACCEPT [0:0]" for c in _NAT_BUILTINS]
    lines += [f":{c} - [0:0]" for c in cal.chains]
    lines += [*cal.first, *body, *cal.rules, "COMMIT"]
    return "\n".join(lines) + "\n"


def merge_save(text: str, cal: CalicoRules) -> str:
    """``text`` (``iptables-save`` or ``iptables-restore`` text) with Felix's nat
    additions: its chains declared after the nat table's declarations, the ``first``
    rules before the table's first rule (so they head their built-in chains, as Felix
    inserts them), the rest before the table's ``COMMIT``; a text without a nat table
    gets one. Other tables and lines are kept as they are."""
    lines = text.splitlines()
    out: list[str] = []
    in_nat = False
    placed_first = False
    done = False
    for line in lines:
        stripped = line.strip()
        if stripped == "*nat" and not done:
            in_nat = True
            out.append(line)
            continue
        if in_nat:
            if stripped.startswith(":"):
                out.append(line)
                continue
            if not stripped.startswith("#") and stripped and not placed_first:
                out += [f":{c} - [0:0]" for c in cal.chains]
                out += cal.first
                placed_first = True
            if stripped == "COMMIT":
                out += cal.rules
                in_nat = False
                done = True
        out.append(line)
    merged = "\n".join(out) + "\n"
    if not done:
        merged += _table("nat", cal, ())
    return merged


def _join_sets(a: str, b: str) -> str:
    return a + (b if not a or a.endswith("\n") else "\n" + b)


def with_calico(rules: RulesetInput, cal: CalicoRules | None) -> RulesetInput:
    """A node's rules with Felix's beside kube-proxy's (``cal`` None: unchanged):
    iptables mode — merged into the same tables (:func:`merge_save`), the ipsets beside;
    IPVS mode — into the iptables glue, the sets with kube-proxy's; nftables mode —
    kube-proxy's nft ruleset plus Felix's iptables nat table and ipsets (iptables-nft
    tables of their own, as on a real node)."""
    if cal is None:
        return rules
    if isinstance(rules, IptablesRules):
        return replace(
            rules, text=merge_save(rules.text, cal), ipsets=_join_sets(rules.ipsets, cal.ipsets)
        )
    if isinstance(rules, IpvsRules):
        return replace(
            rules, iptables=merge_save(rules.iptables, cal), ipset=_join_sets(rules.ipset, cal.ipsets)
        )
    assert isinstance(rules, NftRules)
    return replace(
        rules,
        iptables=merge_save(rules.iptables, cal) if rules.iptables else cal.nat_text(),
        ipsets=_join_sets(rules.ipsets, cal.ipsets),
    )
