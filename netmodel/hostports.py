"""A pod's ``hostPort``: the nat rules the CNI ``portmap`` plugin writes on its node, and
how they join kube-proxy's rules there. Pure text, no I/O.

A container runtime (containerd, CRI-O) serves ``ports[].hostPort`` by chaining the
``portmap`` plugin after the network plugin, with ``capabilities: {portMappings: true}``
and ``runtimeConfig.portMappings`` = ``[{hostPort, containerPort, protocol, hostIP}]``.
The kernel backend runs that real plugin (:mod:`dataplane.linux.cni`); the emulator
evaluates the rules below, whose shapes were read with ``iptables-save -t nat`` in a
network namespace after the plugin's ADD (containernetworking-plugins 1.1.1, Debian,
``snat`` left at its default, true)::

    -A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
    -A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
    -A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
    -A CNI-DN-<h> -s <pod subnet> -p tcp -m tcp --dport <hostPort> -j CNI-HOSTPORT-SETMARK
    -A CNI-DN-<h> -s 127.0.0.1/32 -p tcp -m tcp --dport <hostPort> -j CNI-HOSTPORT-SETMARK
    -A CNI-DN-<h> -p tcp -m tcp --dport <hostPort> -j DNAT --to-destination <podIP>:<containerPort>
    -A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"<net>\\" id: \\"<id>\\"" \\
        -m multiport --dports <hostPort,...> -j CNI-DN-<h>
    -A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
    -A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000

A mapping with a ``hostIP`` adds ``-d <hostIP>/32`` to its three ``CNI-DN`` rules; one
``CNI-HOSTPORT-DNAT`` rule per pod and protocol lists that protocol's host ports in
mapping order; the per-pod chain holds the mappings in order. ``<h>`` is the first 21
hex digits of SHA-512 of the network name followed by the container id (observed:
``svclab`` + ``abc123`` gives ``CNI-DN-21200fdd57ba3374f6b89``). The plugin appends its
jumps to the built-in chains, after the jumps kube-proxy keeps at their head; the
plugin's DEL removes the pod's chain and its ``CNI-HOSTPORT-DNAT`` rules and leaves the
shared chains.

A pod's container id is :func:`container_id` on both backends: the emulator names the
chains with it and the kernel backend passes it to the plugins as ``CNI_CONTAINERID``,
so the kernel's nat table and the emulator's are the same text, chain names included. (A
runtime's id is random per sandbox; ours is a function of the pod key alone, so any
process can DEL what another ADDed. It need not differ between realised clusters: the
plugins' state is per cluster — host-local's store, our result cache — and the chains
are per node namespace.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from ipaddress import IPv4Address, IPv4Network

from netmodel.objects import Pod
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules, RulesetInput

NETWORK = "svclab"
"""The CNI network name svclab's runtime gives its plugins (the rules name it)."""

DNAT_CHAIN = "CNI-HOSTPORT-DNAT"
MASQ_CHAIN = "CNI-HOSTPORT-MASQ"
SETMARK_CHAIN = "CNI-HOSTPORT-SETMARK"
MASQ_MARK = "0x2000/0x2000"


@dataclass(frozen=True, slots=True)
class PortMapping:
    """One entry of ``runtimeConfig.portMappings`` (protocol lower case, as the plugin
    writes it; ``host_ip`` "" for every local address)."""

    host_port: int
    container_port: int
    protocol: str = "tcp"
    host_ip: str = ""

    def to_runtime_config(self) -> dict[str, object]:
        """The entry as a runtime passes it to the plugin."""
        return {
            "hostPort": self.host_port,
            "containerPort": self.container_port,
            "protocol": self.protocol,
            "hostIP": self.host_ip,
        }


def mappings_of(pod: Pod) -> tuple[PortMapping, ...]:
    """The port mappings a runtime passes for ``pod``: every container port with a
    non-zero ``hostPort`` (and its ``hostIP``), in container and port order; none for a
    hostNetwork pod (its ports already are the node's)."""
    if pod.spec.host_network:
        return ()
    return mappings_from_containers(pod.to_dict().get("spec", {}).get("containers"))


def mappings_from_containers(containers: object) -> tuple[PortMapping, ...]:
    """:func:`mappings_of` from a pod's stored ``spec.containers`` (camelCase JSON, as a
    store scan returns it); anything not shaped so gives no mapping."""
    out: list[PortMapping] = []
    if not isinstance(containers, list):
        return ()
    for c in containers:
        ports = c.get("ports") if isinstance(c, dict) else None
        for p in ports if isinstance(ports, list) else ():
            if not isinstance(p, dict):
                continue
            hp, cp = p.get("hostPort"), p.get("containerPort")
            if isinstance(hp, int) and hp > 0 and isinstance(cp, int):
                proto = str(p.get("protocol") or "TCP").lower()
                out.append(PortMapping(hp, cp, proto, str(p.get("hostIP") or "")))
    return tuple(out)


def dn_chain(network: str, container_id: str) -> str:
    """The per-pod ``CNI-DN-…`` chain name the plugin uses."""
    return "CNI-DN-" + hashlib.sha512((network + container_id).encode()).hexdigest()[:21]


def container_id(pod_key: str) -> str:
    """The container id of ``pod_key``'s sandbox on both backends (64 hex digits, like a
    runtime's)."""
    return hashlib.sha256(f"svclab-sandbox/{pod_key}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class HostPortPod:
    """A pod with port mappings on a node: its container id, address, subnet (the
    ``-s`` of the hairpin rule: the network of the pod's CNI address) and mappings."""

    container_id: str
    pod_ip: IPv4Address
    subnet: IPv4Network
    mappings: tuple[PortMapping, ...]


@dataclass(frozen=True, slots=True)
class PortmapRules:
    """The plugin's nat additions on one node, in ``iptables-save`` form: user chains,
    jumps appended to built-in chains, and the user chains' rules."""

    chains: tuple[str, ...]
    jumps: tuple[str, ...]
    rules: tuple[str, ...]


def _dn_rules(chain: str, pod: HostPortPod) -> list[str]:
    out = []
    for m in pod.mappings:
        dst = f" -d {m.host_ip}/32" if m.host_ip else ""
        match = f"{dst} -p {m.protocol} -m {m.protocol} --dport {m.host_port}"
        out += [
            f"-A {chain} -s {pod.subnet}{match} -j {SETMARK_CHAIN}",
            f"-A {chain} -s 127.0.0.1/32{match} -j {SETMARK_CHAIN}",
            f"-A {chain}{match} -j DNAT --to-destination {pod.pod_ip}:{m.container_port}",
        ]
    return out


def portmap_rules(network: str, pods: Iterable[HostPortPod]) -> PortmapRules | None:
    """What the plugin's ADD for each of ``pods`` (in order) leaves in a node's nat
    table; None when no pod has a mapping (the plugin then writes nothing)."""
    pods = [p for p in pods if p.mappings]
    if not pods:
        return None
    chains = [DNAT_CHAIN, MASQ_CHAIN, SETMARK_CHAIN]
    dnat: list[str] = []
    per_pod: list[str] = []
    for pod in pods:
        chain = dn_chain(network, pod.container_id)
        chains.append(chain)
        per_pod += _dn_rules(chain, pod)
        comment = f'"dnat name: \\"{network}\\" id: \\"{pod.container_id}\\""'
        protocols = dict.fromkeys(m.protocol for m in pod.mappings)
        for proto in protocols:
            ports = ",".join(str(m.host_port) for m in pod.mappings if m.protocol == proto)
            dnat.append(
                f"-A {DNAT_CHAIN} -p {proto} -m comment --comment {comment} "
                f"-m multiport --dports {ports} -j {chain}"
            )
    return PortmapRules(
        chains=tuple(chains),
        jumps=(
            f"-A PREROUTING -m addrtype --dst-type LOCAL -j {DNAT_CHAIN}",
            f"-A OUTPUT -m addrtype --dst-type LOCAL -j {DNAT_CHAIN}",
            f'-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j {MASQ_CHAIN}',
        ),
        rules=(
            *per_pod,
            *dnat,
            f"-A {MASQ_CHAIN} -m mark --mark {MASQ_MARK} -j MASQUERADE",
            f'-A {SETMARK_CHAIN} -m comment --comment "CNI portfwd masquerade mark" '
            f"-j MARK --set-xmark {MASQ_MARK}",
        ),
    )


_NAT_BUILTINS = ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING")


def _nat_table(pm: PortmapRules) -> str:
    lines = ["*nat", *(f":{c} ACCEPT [0:0]" for c in _NAT_BUILTINS)]
    lines += [f":{c} - [0:0]" for c in pm.chains]
    lines += [*pm.jumps, *pm.rules, "COMMIT"]
    return "\n".join(lines) + "\n"


def merge_nat(text: str, pm: PortmapRules) -> str:
    """``text`` (``iptables-save`` or restore text) with the plugin's additions: its
    chains declared with the nat table's, its jumps and rules before that table's
    ``COMMIT`` (so the jumps come after every rule already in the built-in chains); a
    text without a nat table gets one. Other tables and lines are kept."""
    out: list[str] = []
    in_nat = declared = done = False
    for line in text.splitlines():
        s = line.strip()
        if s == "*nat" and not done:
            in_nat = True
            out.append(line)
            continue
        if in_nat:
            if s.startswith(":"):
                out.append(line)
                continue
            if s and not s.startswith("#") and not declared:
                out += [f":{c} - [0:0]" for c in pm.chains]
                declared = True
            if s == "COMMIT":
                out += [*pm.jumps, *pm.rules]
                in_nat = False
                done = True
        out.append(line)
    merged = "\n".join(out) + "\n"
    return merged if done else merged + _nat_table(pm)


def with_hostports(rules: RulesetInput, pm: PortmapRules | None) -> RulesetInput:
    """A node's rules with the plugin's beside kube-proxy's (``pm`` None: unchanged):
    iptables mode and IPVS's iptables glue — merged into the nat table
    (:func:`merge_nat`); nftables mode — the iptables-nft nat table kept beside
    kube-proxy's nft ruleset (as on a real node, where the plugin uses iptables)."""
    if pm is None:
        return rules
    if isinstance(rules, IptablesRules):
        return replace(rules, text=merge_nat(rules.text, pm))
    if isinstance(rules, IpvsRules):
        return replace(rules, iptables=merge_nat(rules.iptables, pm))
    assert isinstance(rules, NftRules)
    return replace(
        rules, iptables=merge_nat(rules.iptables, pm) if rules.iptables else _nat_table(pm)
    )


def node_portmap_rules(
    network: str, pods: Sequence[tuple[str, IPv4Address, IPv4Network, tuple[PortMapping, ...]]]
) -> PortmapRules | None:
    """:func:`portmap_rules` for ``(pod key, pod IP, subnet, mappings)`` rows (in the
    order the plugin's ADDs ran), with the sandboxes' :func:`container_id`."""
    return portmap_rules(
        network,
        [HostPortPod(container_id(k), ip, net, m) for k, ip, net, m in pods],
    )
