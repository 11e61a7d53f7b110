"""Realising a :class:`~netmodel.view.ClusterView` on the Linux kernel: the network
(:func:`dataplane.linux.realize.realize`; pods get the view's addresses and the model's
MACs from the real CNI plugins), each node's kube-proxy rules — the very text the emulator
evaluates (:func:`load_rules`): iptables mode — the node's ``iptables-save`` form, loaded
with ``iptables-nft-restore --noflush`` or, on a cluster realised with
``iptables_backend="legacy"``, ``iptables-legacy-restore --noflush`` (our chains and our
rules in the built-in chains replaced; kube-proxy's jump rules are part of that text; the
CNI ``portmap`` plugin's chains, written by the real plugin for pods with ``hostPort``,
kept; the legacy rules are read back through libiptc); nftables mode — kube-proxy's ``nft -f`` transaction, in a fresh
``ip kube-proxy`` table; IPVS mode is refused (no IPVS in this kernel) — and pod servers on
each pod's containerPorts (TCP and UDP; each answers who it is and the source address it
saw; one process per node holds its pods' sockets).

:func:`realize_view` is idempotent — with an unchanged view nothing in the kernel is
touched (rules are compared with what the kernel holds before anything is loaded) — and
converges after the view changed. Which cluster belongs to a state directory is the
application's business (:mod:`app.real`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import warnings
from collections.abc import Iterable, Mapping
from ipaddress import IPv4Network
from typing import Any

from dataplane.linux import rules as linux_rules
from dataplane.linux.cni import CniMode
from dataplane.linux.nsenter import read_sysctl, write_sysctl
from dataplane.linux.ready import wait_ready
from dataplane.linux.realize import (
    HairpinMode,
    RealCluster,
    cleanup_plan,
    install_hairpin_masquerade,
    realize,
)
from dataplane.linux.servers import Proto
from dataplane.proxy.normalize import parse_tables
from dataplane.proxy.savefmt import save_form
from netmodel.errors import BackendError
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules
from netmodel.view import ClusterView

NFT_TABLE = "ip kube-proxy"


class DriftWarning(UserWarning):
    """The kernel did not hold what the model asks for right after realising (a route,
    neighbour or link had gone) and had to be reconciled."""


def new_cluster_id() -> str:
    """A fresh cluster id for a state directory: ``s`` + 8 hex digits."""
    return f"s{secrets.token_hex(4)}"


def fingerprint(view: ClusterView) -> str:
    """A digest of everything :func:`realize_view` realises from ``view`` (network,
    rules, listeners, DNS zone and resolv.confs): equal digests, nothing to do. Stable
    across processes. The zone's SOA serial (the store revision of the snapshot) is left
    out: it moves with every write to the store (an Event, a Lease), so with cluster DNS
    on, the default, every ``--real`` command would realise the cluster again; like
    CoreDNS, the realised servers keep their serial until the zone's records change."""
    h = hashlib.sha256()
    h.update(repr(view.network).encode())
    for node, rs in sorted(view.rulesets.items()):
        h.update(f"\0rules {node} {rs!r}".encode())
    for ns, ports in sorted(view.listeners.items()):
        h.update(f"\0listen {ns} {sorted(ports)!r}".encode())
        grpc = view.grpc_ports.get(ns)
        if grpc:
            h.update(f"\0grpc {ns} {sorted(grpc)!r}".encode())
    for node, addrs in sorted(view.local_addresses.items()):
        h.update(f"\0local {node} {sorted(addrs)!r}".encode())
    if view.dns_zone is not None:
        zone = dataclasses.replace(view.dns_zone, serial=0)
        h.update(f"\0dns {zone.dumps()} {sorted(view.dns_servers)!r}".encode())
    for ns, conf in sorted(view.resolv_confs.items()):
        h.update(f"\0resolv {ns} {conf.render()}".encode())
    for pod, mappings in view.port_mappings.items():  # in order: the order of ADDs
        h.update(f"\0hostports {pod} {mappings!r}".encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------- rules


def check_realisable(
    view: ClusterView, iptables_backend: linux_rules.IptablesBackend = "nft"
) -> None:
    """Refuse, before the kernel is touched, what this kernel (or the chosen iptables back
    end) cannot hold."""
    for node, rs in view.rulesets.items():
        mode = "nftables" if isinstance(rs, NftRules) else "iptables"
        linux_rules.check_backend(iptables_backend, mode, node=node)
        if isinstance(rs, IpvsRules):
            raise BackendError(
                f"node {node}: kube-proxy's ipvs mode cannot be realised (IPVS is not in "
                "this kernel); use proxyMode iptables or nftables, or the emulator"
            )


#: Chains svclab's rule loading leaves to others: its own hairpin fallback (installed
#: apart) and, on a cluster whose pods the real CNI plugins attach, the ``portmap``
#: plugin's (:mod:`netmodel.hostports`), written by the plugin's ADD and removed by its
#: DEL, as kube-proxy leaves them on a real node.
SVCLAB_CHAINS = ("SVCLAB-",)
PORTMAP_CHAINS = ("CNI-HOSTPORT-", "CNI-DN-")


def foreign_chains(cluster: RealCluster) -> tuple[str, ...]:
    """The chain prefixes :func:`load_rules` leaves alone on ``cluster``: with the real
    plugins (``bridge-plugin``) the portmap plugin's too; with ``netlink`` svclab lays the
    pods out itself and loads the plugin's rules from the view as well."""
    if cluster.cni == "bridge-plugin":
        return SVCLAB_CHAINS + PORTMAP_CHAINS
    return SVCLAB_CHAINS


def _kernel_tables(
    save: str, foreign: tuple[str, ...] = SVCLAB_CHAINS
) -> dict[str, dict[str, list[str]]]:
    """table -> chain -> rules of an iptables-save dump, chains starting with one of
    ``foreign`` (svclab's own SVCLAB-* by default), and jumps to them, left out."""
    out: dict[str, dict[str, list[str]]] = {}
    for name, table in parse_tables(save).items():
        chains = {
            c: [r for r in rs if not linux_rules.foreign_rule(r, foreign)]
            for c, rs in table.rules.items()
            if not c.startswith(foreign)
        }
        out[name] = chains
    return out


def kernel_holds(
    netns: str,
    text: str,
    iptables_backend: linux_rules.IptablesBackend = "nft",
    *,
    foreign: tuple[str, ...] = SVCLAB_CHAINS,
) -> bool:
    """Does ``netns`` hold exactly the tables of ``text`` (iptables-save or restore text,
    kube-proxy's option order accepted) — same chains, same rules in the same order, in
    ``iptables-save``'s form? Chains starting with one of ``foreign`` (and jumps to
    them) are left out on both sides. False also when ``text`` cannot be put in that
    form."""
    try:
        wanted = {
            name: {
                c: [save_form(r) for r in rs if not linux_rules.foreign_rule(r, foreign)]
                for c, rs in t.rules.items()
                if not c.startswith(foreign)
            }
            for name, t in parse_tables(text).items()
        }
    except ValueError:
        return False
    have = _kernel_tables(
        linux_rules.iptables_save(netns, counters=False, backend=iptables_backend), foreign
    )
    return all(have.get(name) == chains for name, chains in wanted.items())


def _pod_cidr(view: ClusterView, node: str) -> IPv4Network | None:
    ns = view.network.namespaces.get(f"node/{node}")
    if ns is None:
        return None
    for itf in ns.interfaces:
        if itf.name == "cni0" and itf.addresses:
            return itf.addresses[0].network
    return None


def _drop_nft_table(netns: str) -> None:
    # "add" first so that "delete" never fails on a namespace without the table
    linux_rules.load_nft(netns, f"add table {NFT_TABLE}\ndelete table {NFT_TABLE}\n")


def load_rules(
    cluster: RealCluster,
    view: ClusterView,
    *,
    loaded_nft: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Load each node's rules of ``view`` into its namespace, unless it already holds
    them. Returns node -> sha256 of the nft text loaded (nftables-mode nodes), to pass
    back as ``loaded_nft`` next time (nft listings are not compared with the text).

    iptables mode: the node's tables are made to hold the iptables-save text
    (:func:`dataplane.linux.rules.load_owned`: one ``iptables-restore --noflush`` that
    replaces our chains and our rules in the built-in chains, nfacct objects created
    first) except the chains of :func:`foreign_chains` — on a cluster whose pods the real
    CNI plugins attach, the ``portmap`` plugin's ``CNI-HOSTPORT-*``/``CNI-DN-*`` chains
    and jumps, which its ADD wrote, are kept as kube-proxy keeps them on a node (its
    restore is ``--noflush`` and names only KUBE-* chains); a node whose tables read back
    equal apart from those (:func:`kernel_holds`) is left alone. Any ``ip kube-proxy``
    nft table is removed. nftables mode: the ``ip kube-proxy`` table is deleted and the
    transaction loaded, and the iptables tables beside it (Calico's, the portmap
    plugin's) are made to hold the view's the same way (none: our rules there removed).
    The ipsets the rules use (Calico's) are made to hold exactly the view's members
    first, every time (``ipset -exist restore``). Either way, under
    ``hairpin="masquerade"`` the fallback rule is installed again afterwards."""
    backend = cluster.iptables_backend
    check_realisable(view, backend)
    previous = dict(loaded_nft or {})
    shas: dict[str, str] = {}
    foreign = foreign_chains(cluster)
    for node, rs in sorted(view.rulesets.items()):
        netns = cluster.node_netns(node)
        cidr = _pod_cidr(view, node)
        if isinstance(rs, IptablesRules):
            if rs.ipsets:  # the members may change while the rules naming the sets do not
                linux_rules.load_ipsets(netns, rs.ipsets)
            if kernel_holds(netns, rs.text, backend, foreign=foreign):
                continue
            if previous.get(node):
                _drop_nft_table(netns)
            linux_rules.load_owned(netns, rs.text, foreign=foreign, backend=backend)
        elif isinstance(rs, NftRules):
            if rs.ipsets:
                linux_rules.load_ipsets(netns, rs.ipsets)
            sha = hashlib.sha256((rs.text + "\0" + rs.iptables).encode()).hexdigest()
            shas[node] = sha
            if previous.get(node) == sha and NFT_TABLE in linux_rules.nft_ruleset(netns):
                continue
            # iptables-nft tables beside kube-proxy's (Calico's Felix, the portmap plugin)
            linux_rules.load_owned(netns, rs.iptables, foreign=foreign)
            _drop_nft_table(netns)
            linux_rules.load_nft(netns, rs.text)
        else:  # pragma: no cover - check_realisable refused it
            raise BackendError(f"node {node}: cannot load {type(rs).__name__}")
        if cluster.hairpin == "masquerade" and cidr is not None:
            install_hairpin_masquerade(netns, cidr, backend)
    return shas


def server_ports(
    listeners: Mapping[str, Iterable[tuple[str, int]]],
) -> dict[str, list[tuple[int, Proto]]]:
    """pod key -> its (port, proto) TCP and UDP listeners, from the view's per-namespace
    listeners (``pod/NS/NAME`` -> ``{(proto, port)}``). Other protocols (SCTP) have no
    real server and are left out; pods without listeners too."""
    out: dict[str, list[tuple[int, Proto]]] = {}
    for ns, ports in listeners.items():
        if not ns.startswith("pod/"):
            continue
        real: list[tuple[int, Proto]] = []
        for proto, port in sorted(ports):
            if proto == "tcp":
                real.append((port, "tcp"))
            elif proto == "udp":
                real.append((port, "udp"))
        if real:
            out[ns[4:]] = real
    return out


def serve(cluster: RealCluster, view: ClusterView) -> dict[str, int]:
    """Start (or keep) the pod servers the view's listeners call for (gRPC's health
    service on the view's :attr:`~netmodel.view.ClusterView.grpc_ports`) and stop the ones
    of pods that no longer listen; the DNS pods run DNS servers instead
    (:class:`dataplane.linux.dns.DnsServers`, answering from the view's zone), and every
    pod namespace gets its resolv.conf in ``/etc/netns``. Returns pod -> server pid."""
    from dataplane.linux import dnspods as dns

    dns_pods = {ns[4:]: ns for ns in view.dns_servers}
    dns_pids: dict[str, int] = {}
    servers = dns.DnsServers(cluster.cluster_id)
    if view.dns_zone is not None or any(servers.state.servers_dir.glob("dns-*.pid")):
        zone = view.dns_zone if view.dns_zone is not None else dns.DnsZone()
        dns_pids = servers.ensure(zone, dns_pods)
    for logical, conf in view.resolv_confs.items():
        netns = cluster.namespaces.get(logical)
        if netns is not None:
            dns.write_resolv_conf(netns, conf.render())
    wanted = {k: v for k, v in server_ports(view.listeners).items() if k not in dns_pods}
    running = cluster.servers.running() if cluster.servers.supervisor_pid() else {}
    idle = [k for k in running if k not in wanted]
    if idle:
        cluster.servers.stop(idle)
    grpc = {k: view.grpc_ports.get(f"pod/{k}", frozenset()) for k in wanted}
    return {**cluster.serve(wanted, grpc), **dns_pids}


#: Kernel settings every realised namespace gets on top of the model's sysctls.
#: ``icmp_ratemask=0``: no ICMP error is rate-limited. Linux limits ICMP errors per peer
#: (``icmp_ratelimit``: a small burst, then 1/s) and globally (``icmp_msgs_per_sec``, with
#: a random component since 6.x); the emulator answers every packet, so with the limits
#: on, the Nth connection in a burst to a REJECTing Service or an unrouted address times
#: out on the kernel and is refused/unreachable in the emulator.
KERNEL_SYSCTLS = (("net.ipv4.icmp_ratemask", "0"),)


def tune(cluster: RealCluster) -> None:
    """Apply :data:`KERNEL_SYSCTLS` in every namespace of ``cluster``. Idempotent."""
    for netns in cluster.namespaces.values():
        for key, value in KERNEL_SYSCTLS:
            if read_sysctl(netns, key) != value:
                write_sysctl(netns, key, value)


def realize_view(
    view: ClusterView,
    *,
    cluster_id: str,
    cni: CniMode = "bridge-plugin",
    hairpin: HairpinMode = "auto",
    persistent: bool = False,
    loaded_nft: Mapping[str, str] | None = None,
    iptables_backend: linux_rules.IptablesBackend = "nft",
) -> tuple[RealCluster, dict[str, str]]:
    """Realise everything of ``view`` under ``cluster_id``: the network (with
    :data:`KERNEL_SYSCTLS`), the rules, the pod servers; then wait until it is ready
    (:func:`dataplane.linux.ready.wait_ready`: kernel state as modelled, underlay and pod
    network answering; drift is reconciled once and reported as a :class:`DriftWarning`).
    Idempotent and convergent like :func:`dataplane.linux.realize.realize`.
    Returns the cluster and :func:`load_rules`' nft digests. On error the partial
    cluster stays (``teardown(cluster_id)`` removes it). ``iptables_backend``: ``nft``
    or ``legacy`` (:mod:`dataplane.linux.rules`)."""
    check_realisable(view, iptables_backend)

    def network() -> RealCluster:
        return realize(
            view.network,
            cluster_id=cluster_id,
            cni=cni,
            hairpin=hairpin,
            persistent=persistent,
            iptables_backend=iptables_backend,
            port_mappings=view.port_mappings,
        )

    cluster = network()
    tune(cluster)
    shas = load_rules(cluster, view, loaded_nft=loaded_nft)
    serve(cluster, view)
    readiness = wait_ready(
        view.network, cluster.namespaces, reconcile=network, guarded=view.guarded
    )
    if readiness.reconciled:
        warnings.warn(
            f"cluster {cluster_id}: the kernel had drifted from the model right after "
            f"realising it, reconciled: {'; '.join(readiness.drift)}",
            DriftWarning,
            stacklevel=2,
        )
    return cluster, shas


def kept(*, force: bool = False) -> tuple[str, ...]:
    """Namespaces a :func:`cleanup` without ``force`` leaves (persistent clusters, other
    live processes' namespaces)."""
    if force:
        return ()
    every = cleanup_plan(None, force=True).namespaces
    spared = set(every) - set(cleanup_plan(None).namespaces)
    return tuple(sorted(spared))


def summary(cluster: RealCluster) -> dict[str, Any]:
    """Counts for ``svclab up``'s report."""
    roles: dict[str, int] = {}
    for logical in cluster.namespaces:
        role = logical.split("/", 1)[0]
        roles[role] = roles.get(role, 0) + 1
    return {
        "cluster_id": cluster.cluster_id,
        "namespaces": len(cluster.namespaces),
        "nodes": roles.get("node", 0),
        "pods": roles.get("pod", 0),
        "external": roles.get("ext", 0),
        "cni": cluster.cni,
        "hairpin": cluster.hairpin,
        "overlay": cluster.overlay,
        "iptables_backend": cluster.iptables_backend,
    }
