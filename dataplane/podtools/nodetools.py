"""The node's own tools, in a host-network pod (``kubectl debug node/...`` included):
``iptables-save``, ``nft list ruleset``, ``ipvsadm -Ln``, ``ipset list`` and
``conntrack -L``, printing what the node's kube-proxy loaded (the rules the emulator
evaluates) and the node's conntrack table now. Formats recorded in
``tests/data/podtools/ipset-list-and-save.out`` (ipset 7.17, conntrack-tools 1.4.7);
``ipvsadm -Ln``'s layout is ipvsadm 1.31's (this kernel has no IPVS to record from).

What each prints, by kube-proxy mode: iptables — ``iptables-save`` the tables, ``nft list
ruleset`` nothing (the legacy back end's tables are not nftables'), ``ipvsadm -Ln`` no
virtual server, ``ipset list`` nothing; ipvs — the IPVS virtual servers, the ipsets and
the iptables glue; nftables — the ``kube-proxy`` nft table (and the iptables tables
other agents keep beside it). ``ipset list``'s ``Size in memory``, ``References`` and the
hash sets' ``initval`` are not modelled: ``initval`` is kept as the save text has it
(none: omitted), size and references are printed as 0. IPVS connection counters are 0.
"""

from __future__ import annotations

from dataplane.netfilter.ipvsadm import parse_ipvsadm
from dataplane.podtools.net import Emulated
from dataplane.podtools.target import PodTarget
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules

Result = tuple[int, bytes, bytes]
#: the set type revisions this kernel's ipset reports (recorded)
IPSET_REVISIONS = {
    "hash:ip": 6, "hash:ip,port": 7, "hash:ip,port,ip": 6, "hash:ip,port,net": 8,
    "hash:net": 7, "hash:net,port": 8, "bitmap:port": 3, "hash:ip,mark": 6,
}  # fmt: skip
IPVS_HEAD = (
    "IP Virtual Server version 1.2.1 (size=4096)\n"
    "Prot LocalAddress:Port Scheduler Flags\n"
    "  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n"
)


def _host_only(pod: PodTarget, tool: str) -> Result | None:
    if pod.host_network:
        return None
    return (
        1,
        b"",
        f"sh: {tool}: svclab: the node's rules are not in a pod's network namespace; exec "
        "into a hostNetwork pod (or kubectl debug node/NAME)\n".encode(),
    )


def iptables_save(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    if (refused := _host_only(pod, "iptables-save")) is not None:
        return refused
    if argv:
        return 2, b"", f"iptables-save: svclab: option {argv[0]} is not emulated\n".encode()
    rs = world.rulesets.get(pod.node)
    if isinstance(rs, IptablesRules):
        text = rs.text
    elif isinstance(rs, (NftRules, IpvsRules)):
        text = rs.iptables
    else:
        text = ""
    return 0, text.encode(), b""


def nft(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    if (refused := _host_only(pod, "nft")) is not None:
        return refused
    if argv != ["list", "ruleset"]:
        return (
            1,
            b"",
            f"Error: svclab: nft {' '.join(argv)} is not emulated (nft list ruleset)\n".encode(),
        )
    rs = world.rulesets.get(pod.node)
    text = rs.text if isinstance(rs, NftRules) else ""
    return 0, text.encode(), b""


def ipvsadm(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    if (refused := _host_only(pod, "ipvsadm")) is not None:
        return refused
    if sorted(argv) not in (["-Ln"], ["-L", "-n"], ["-nL"]):
        return (
            2,
            b"",
            f"ipvsadm: svclab: ipvsadm {' '.join(argv)} is not emulated (ipvsadm -Ln)\n".encode(),
        )
    rs = world.rulesets.get(pod.node)
    out = [IPVS_HEAD]
    if isinstance(rs, IpvsRules):
        for vs in parse_ipvsadm(rs.ipvsadm, source=f"node {pod.node} ipvsadm-save"):
            line = f"{vs.protocol.upper():<4} {vs.address}:{vs.port} {vs.scheduler}"
            if vs.persistent_timeout:
                line += f" persistent {vs.persistent_timeout}"
            out.append(line + "\n")
            for rs_ in vs.real_servers:
                out.append(f"  -> {rs_!s:<28} {'Masq':<7} {rs_.weight:<6} {0:<10} {0}\n")
    return 0, "".join(out).encode(), b""


def ipset_list(save: str) -> str:
    """``ipset list`` of the sets in ``ipset save`` text (see the module docstring)."""
    sets: dict[str, tuple[str, str, list[str]]] = {}
    for line in save.splitlines():
        words = line.split(" ", 3)
        if words[0] == "create" and len(words) >= 3:
            sets[words[1]] = (words[2], words[3] if len(words) > 3 else "", [])
        elif words[0] == "add" and len(words) >= 3 and words[1] in sets:
            sets[words[1]][2].append(line.split(" ", 2)[2])
    blocks = []
    for name, (type_, header, members) in sets.items():
        blocks.append(
            f"Name: {name}\nType: {type_}\nRevision: {IPSET_REVISIONS.get(type_, 0)}\n"
            f"Header: {header}\nSize in memory: 0\nReferences: 0\n"
            f"Number of entries: {len(members)}\nMembers:\n" + "".join(m + "\n" for m in members)
        )
    return "\n".join(blocks)


def ipset(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    if (refused := _host_only(pod, "ipset")) is not None:
        return refused
    if argv not in (["list"], ["-L"], ["save"]):
        return (
            1,
            b"",
            f"ipset v7.17: svclab: ipset {' '.join(argv)} is not emulated (ipset list, ipset save)\n".encode(),
        )
    rs = world.rulesets.get(pod.node)
    save = (
        rs.ipset
        if isinstance(rs, IpvsRules)
        else rs.ipsets
        if isinstance(rs, (IptablesRules, NftRules))
        else ""
    )
    if argv == ["save"]:
        return 0, save.encode(), b""
    return 0, ipset_list(save).encode(), b""


def conntrack(world: Emulated, pod: PodTarget, argv: list[str], trace: bool) -> Result:
    if (refused := _host_only(pod, "conntrack")) is not None:
        return refused
    if argv not in (["-L"], ["-L", "-n"], ["--dump"]):
        return (
            2,
            b"",
            f"conntrack v1.4.7 (conntrack-tools): svclab: conntrack {' '.join(argv)} is not emulated (conntrack -L)\n".encode(),
        )
    entries = world.cluster.conntrack(pod.node)
    out = "".join(e.text + "\n" for e in entries)
    err = f"conntrack v1.4.7 (conntrack-tools): {len(entries)} flow entries have been shown.\n"
    return 0, out.encode(), err.encode()
