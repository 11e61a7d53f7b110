"""The node-dump directory: one file per tool, as the tool prints it.

``svclab node-dump collect DIR`` writes it on a node; a user can also assemble it by
hand from pasted output. Every file is optional except that a dump needs at least one
rule source. Names:

=========================  =========================================================
``iptables-nft-save.txt``  ``iptables-nft-save -c`` (the nf_tables back end)
``iptables-legacy-save.txt`` ``iptables-legacy-save -c`` (the legacy back end)
``iptables-save.txt``      ``iptables-save [-c]`` pasted from a node (either back end),
                           or ``iptables -S`` listings (``iptables -S; iptables -S -t nat``)
``nft-ruleset.txt``        ``nft list ruleset`` (tables iptables-nft owns are skipped
                           when an iptables-nft dump is present: they are the same rules)
``ip-addr.json``           ``ip -j addr``
``ip-route.json``          ``ip -j route show table all``
``ip-rule.json``           ``ip -j rule``
``ip-addr.txt`` ...        ``ip addr``, ``ip route``, ``ip rule`` as pasted (``ip-addr.txt``,
                           ``ip-route.txt``, ``ip-rule.txt``; read when the ``.json`` file
                           is absent, :mod:`.iptext`)
``ip-neigh.json``          ``ip -j neigh`` (recorded; not used for evaluation)
``ipset.txt``              ``ipset save``, or an ``ipset -L`` listing
``ipvsadm.txt``            ``ipvsadm -Sn``, or an ``ipvsadm -L -n`` listing
``conntrack.txt``          ``conntrack -L`` (recorded; traces start new connections)
``sysctl.txt``             ``sysctl`` lines ``name = value``: ``net.ipv4.ip_forward``,
                           ``net.ipv4.conf.*.route_localnet``, ``net.ipv4.conf.*.rp_filter``,
                           ``net.bridge.bridge-nf-call-iptables``
``manifest.json``          what ``collect`` ran, which tools were missing (skipped)
=========================  =========================================================

When ``ip-addr.json`` is absent the node is modelled as having no addresses but
loopback; when ``sysctl.txt`` is absent a Kubernetes node's usual values are assumed
(``ip_forward=1``, ``route_localnet=0``, ``rp_filter=0``) and the result says so.
"""

from __future__ import annotations

__all__ = ["FILES", "IPTABLES_FILES", "SYSCTLS"]

IPTABLES_FILES = ("iptables-nft-save.txt", "iptables-legacy-save.txt", "iptables-save.txt")

#: file name -> what it holds (the command that prints it)
FILES: dict[str, str] = {
    "iptables-nft-save.txt": "iptables-nft-save -c",
    "iptables-legacy-save.txt": "iptables-legacy-save -c",
    "iptables-save.txt": "iptables-save -c",
    "nft-ruleset.txt": "nft list ruleset",
    "ip-addr.json": "ip -j addr",
    "ip-route.json": "ip -j route show table all",
    "ip-rule.json": "ip -j rule",
    "ip-neigh.json": "ip -j neigh",
    "ipset.txt": "ipset save",
    "ipvsadm.txt": "ipvsadm -Sn",
    "conntrack.txt": "conntrack -L",
    "sysctl.txt": "sysctl",
    "manifest.json": "svclab node-dump collect",
}

#: the sysctls ``collect`` records (``*`` = every interface, plus ``all`` and ``default``)
SYSCTLS = (
    "net.ipv4.ip_forward",
    "net.ipv4.conf.*.route_localnet",
    "net.ipv4.conf.*.rp_filter",
    "net.bridge.bridge-nf-call-iptables",
)
