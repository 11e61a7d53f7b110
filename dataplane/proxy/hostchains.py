"""The node side of kube-proxy's iptables state: built-in chains and jump rules.

kube-proxy does not put its jumps from the built-in chains into the restore payload: it
ensures them one by one with ``iptables -I`` (prepend) in :data:`JUMP_RULES` order, so
the last one ends up first in each chain. It also keeps an empty ``KUBE-PROXY-CANARY``
chain to notice flushes. This module holds that table and derives from it

* :func:`ensure_input` — a restore payload doing those steps on a fresh node;
* :func:`save_text_from_restore` — what ``iptables-save -t filter`` / ``-t nat`` shows on
  a node carrying a full render plus these jumps (kube-proxy's rules in canonical form).
"""

from __future__ import annotations

from typing import NamedTuple

from dataplane.proxy.model import NodeProxyConfig
from dataplane.proxy.normalize import parse_tables
from dataplane.proxy.savefmt import save_form

CANARY_CHAIN = "KUBE-PROXY-CANARY"
BUILTIN_POLICIES: dict[str, tuple[str, ...]] = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
}


class JumpRule(NamedTuple):
    """A rule kube-proxy ensures in a built-in chain with ``iptables -I`` (prepend)."""

    table: str
    chain: str
    args: str


_EXT = '"kubernetes externally-visible service portals"'
_SVC = '"kubernetes service portals"'
_FW = '"kubernetes load balancer firewall"'

#: §1.2, in the order kube-proxy ensures them (each one prepended).
JUMP_RULES: tuple[JumpRule, ...] = (
    JumpRule(
        "filter",
        "INPUT",
        f"-m conntrack --ctstate NEW -m comment --comment {_EXT} -j KUBE-EXTERNAL-SERVICES",
    ),
    JumpRule(
        "filter",
        "FORWARD",
        f"-m conntrack --ctstate NEW -m comment --comment {_EXT} -j KUBE-EXTERNAL-SERVICES",
    ),
    JumpRule(
        "filter",
        "INPUT",
        '-m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
    ),
    JumpRule(
        "filter",
        "FORWARD",
        f"-m conntrack --ctstate NEW -m comment --comment {_SVC} -j KUBE-SERVICES",
    ),
    JumpRule(
        "filter",
        "OUTPUT",
        f"-m conntrack --ctstate NEW -m comment --comment {_SVC} -j KUBE-SERVICES",
    ),
    JumpRule(
        "filter", "FORWARD", '-m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD'
    ),
    JumpRule(
        "filter",
        "INPUT",
        f"-m conntrack --ctstate NEW -m comment --comment {_FW} -j KUBE-PROXY-FIREWALL",
    ),
    JumpRule(
        "filter",
        "OUTPUT",
        f"-m conntrack --ctstate NEW -m comment --comment {_FW} -j KUBE-PROXY-FIREWALL",
    ),
    JumpRule(
        "filter",
        "FORWARD",
        f"-m conntrack --ctstate NEW -m comment --comment {_FW} -j KUBE-PROXY-FIREWALL",
    ),
    JumpRule("nat", "OUTPUT", f"-m comment --comment {_SVC} -j KUBE-SERVICES"),
    JumpRule("nat", "PREROUTING", f"-m comment --comment {_SVC} -j KUBE-SERVICES"),
    JumpRule(
        "nat",
        "POSTROUTING",
        '-m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    ),
)
#: Ensured as well on IPv4 nodes with localhostNodePorts (kubelet's duplicate, no comment).
KUBELET_JUMP_RULES: tuple[JumpRule, ...] = (
    JumpRule("filter", "INPUT", "-j KUBE-FIREWALL"),
    JumpRule("filter", "OUTPUT", "-j KUBE-FIREWALL"),
)


def jump_rules(config: NodeProxyConfig) -> tuple[JumpRule, ...]:
    """The built-in-chain jumps on this node, in the order they get prepended.

    The ``-j KUBE-FIREWALL`` jumps (IPv4 with localhostNodePorts) are kubelet's as much as
    kube-proxy's; kubelet starts first and has them in place when kube-proxy prepends
    its own, so on a real node they end up last in INPUT and OUTPUT (as every dump of a
    kubeadm node shows). They are therefore listed first here.
    """
    if not config.is_ipv6 and config.localhost_node_ports:
        return KUBELET_JUMP_RULES + JUMP_RULES
    return JUMP_RULES


def ensure_input(config: NodeProxyConfig) -> str:
    """See :meth:`IptablesRender.ensure_input`."""
    out: list[str] = []
    rules = jump_rules(config)
    for table in ("filter", "nat"):
        out.append(f"*{table}")
        targets = dict.fromkeys(r.args.rsplit(" ", 1)[1] for r in rules if r.table == table)
        out.extend(f":{c} - [0:0]" for c in (CANARY_CHAIN, *targets))
        out.extend(f"-I {r.chain} 1 {r.args}" for r in rules if r.table == table)
        out.append("COMMIT")
    return "\n".join(out) + "\n"


def save_text_from_restore(restore: str, config: NodeProxyConfig) -> str:
    """What iptables-save shows on a node whose only rules are ``restore`` (a full
    render's payload) plus kube-proxy's jump rules and canary chains."""
    tables = parse_tables(restore)
    rules = jump_rules(config)
    out: list[str] = []
    ipv6 = config.is_ipv6
    for tname in ("filter", "nat"):
        t = tables.get(tname)
        chains: dict[str, list[str]] = {c: [] for c in BUILTIN_POLICIES[tname]}
        for r in rules:
            if r.table == tname:
                chains[r.chain].insert(0, f"-A {r.chain} {r.args}")
        user: dict[str, list[str]] = {CANARY_CHAIN: []}
        if t is not None:
            for c in t.chain_order():
                if c not in t.deleted:
                    user[c] = t.rules.get(c, [])
        out.append(f"*{tname}")
        out.extend(f":{c} ACCEPT [0:0]" for c in BUILTIN_POLICIES[tname])
        names = sorted(user)
        out.extend(f":{c} - [0:0]" for c in names)
        for c in BUILTIN_POLICIES[tname]:
            out.extend(save_form(r, ipv6) for r in chains[c])
        for c in names:
            out.extend(save_form(r, ipv6) for r in user[c])
        out.append("COMMIT")
    return "\n".join(out) + "\n"
