"""From the control plane's state to the dataplane's inputs: the cluster network
(:func:`netmodel.topology.build`), each node's kube-proxy rules, each pod's
listening ports, and cluster DNS (the zone snapshot the DNS pods answer from, which pods
those are, and every pod's resolv.conf). Both backends are fed from here, so they see
the same cluster.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from ipaddress import IPv4Address, IPv4Network, ip_address

from app.netpolview import PolicyAgent, policy_agent
from control.agents.kubeproxy import NodeRules
from control.apiserver.clusterdns import APP_LABEL as DNS_APP
from control.apiserver.clusterdns import NAMESPACE as DNS_NAMESPACE
from control.apiserver.clusterdns import is_dns_pod
from control.noderules import NodeRulesSource
from control.proxyenv import proxy_mode
from control.rulecache import CompiledCache, RuleCache
from control.session import Session
from control.store.base import Store, peek, scan
from dataplane.backends.emulated import answerers
from dataplane.emulator.cluster import EmulatedCluster
from dataplane.netfilter import format_save
from dataplane.netpol import with_policy
from dataplane.proxy.ipvs import IpvsRender
from netmodel import podports
from netmodel.calicorules import CalicoRules, felix_rules, with_calico
from netmodel.cluster import ClusterSpec
from netmodel.dnszone import DnsZone, build_zone
from netmodel.errors import InputError, NotFoundError
from netmodel.hostports import NETWORK as CNI_NETWORK
from netmodel.hostports import (
    PortMapping,
    PortmapRules,
    mappings_from_containers,
    node_portmap_rules,
    with_hostports,
)
from netmodel.lazy import LazyMapping
from netmodel.objects import EndpointSlice, Namespace, Node, Pod, Service
from netmodel.resolvconf import ResolvConf, pod_resolv_conf
from netmodel.rulesets import IptablesRules, IpvsRules, NftRules, RulesetInput
from netmodel.topology import PodInfo, build, build_lazy, node_info, pod_ns, spec_blocks
from netmodel.view import ClusterView


def dns_zone(session: Session) -> DnsZone | None:
    """What cluster DNS answers from now (None when the Cluster has ``dns: false``)."""
    spec = session.cluster.spec
    if not spec.dns:
        return None
    store = session.store
    return build_zone(
        domain=spec.cluster_domain,
        namespaces=[n for n in store.list("Namespace") if isinstance(n, Namespace)],
        services=[s for s in store.list("Service") if isinstance(s, Service)],
        slices=[s for s in store.list("EndpointSlice") if isinstance(s, EndpointSlice)],
        dns_ip=spec.dns_service_ip(),
        upstream=spec.dns_upstream,
        serial=store.revision,
    )


def running_pods(session: Session) -> list[Pod]:
    """Pods with an IP on a node (host-network pods are the node itself)."""
    return [
        p
        for p in session.store.list("Pod")
        if isinstance(p, Pod) and p.status.pod_ip and p.spec.node_name and not p.spec.host_network
    ]


def ruleset_input(state: NodeRules) -> RulesetInput | None:
    """What the emulator evaluates for one node, from its kube-proxy's applied state."""
    if state.rendered is None:
        return None
    if state.mode == "iptables":
        return IptablesRules(format_save(state.ruleset), source=f"kube-proxy {state.mode}")
    if state.mode == "nftables":
        return NftRules(state.rendered.restore_input, source="kube-proxy nftables")
    assert isinstance(state.rendered, IpvsRender)
    r = state.rendered
    return IpvsRules(ipvsadm=r.ipvsadm_text, ipset=r.ipset_text, iptables=r.iptables_save_text)


def calico_rules(spec: ClusterSpec) -> CalicoRules | None:
    """Felix's rules every node of a ``cni: calico`` cluster carries beside kube-proxy's
    (natOutgoing, VXLAN: :mod:`netmodel.calicorules`); None when there are none."""
    if spec.cni != "calico":
        return None
    random_fully = spec.node_environment.iptables_has_random_fully
    return felix_rules(spec.calico_ip_pools, random_fully=random_fully)


def lazy_rulesets(
    source: NodeRulesSource,
    override: Mapping[str, RulesetInput],
    cni: CalicoRules | None = None,
    hostports: Mapping[str, PortmapRules] | None = None,
    policy: PolicyAgent | None = None,
) -> tuple[LazyMapping[str, RulesetInput], LazyMapping[str, tuple[str, ...]]]:
    """:func:`view`'s ``rulesets`` and ``local_addresses`` with each node's rendered on
    first access (``override`` wins). Keys: every Node (each has a kube-proxy, whose
    first sync always renders: a Node object gives it its configuration). ``cni``: the
    network plugin's rules, joined to each node's kube-proxy rules (not to overrides);
    ``hostports``: per node, the ``portmap`` plugin's rules for its pods' hostPorts
    (:mod:`netmodel.hostports`), joined the same way; ``policy``: the NetworkPolicy
    agent's rules (:mod:`app.netpolview`), joined last, when the node is first asked."""
    pm = hostports or {}

    def rules_of(node: str) -> RulesetInput:
        # by_rules: an iptables node's RulesetInput is its ruleset's iptables-save alone
        ri = source.ruleset(node, ruleset_input, by_rules=True)[0]
        assert ri is not None, f"kube-proxy on {node} rendered nothing"
        return _with_policy(with_hostports(with_calico(ri, cni), pm.get(node)), policy, node)

    def local_of(node: str) -> tuple[str, ...]:
        return source.ruleset(node, ruleset_input)[1]

    nodes = source.nodes()
    # only IPVS binds Service addresses to the node (kube-ipvs0)
    ipvs = proxy_mode(source.proxy_config, source.cluster) == "ipvs"
    return LazyMapping(nodes, rules_of, override), LazyMapping(nodes if ipvs else (), local_of)


def _with_policy(rules: RulesetInput, agent: PolicyAgent | None, node: str) -> RulesetInput:
    return rules if agent is None else with_policy(rules, agent.rules(node))


def policy_agent_of(session: Session, cached: bool = True) -> PolicyAgent | None:
    """kube-router's rules for every node of ``session``'s cluster, from the stored
    NetworkPolicies, Namespaces and Pods (None when no NetworkPolicy is stored): a pure
    function of the store, each node's rendered when first asked. ``cached``: the
    inputs kept in the state directory's cache while the store is unchanged."""
    spec = session.cluster.spec
    store = session.store
    node_ips = {name: ips[0] for name, ips, _ in _node_addresses(session, cached)}
    cache = RuleCache.for_state(session.state_dir) if cached else None
    return policy_agent(
        store,
        [spec.service_cidr],
        node_ips,
        (lambda name, fn: cache.derived(store, name, fn)) if cache is not None else None,
    )


@contextmanager
def _gc_frozen_after(active: bool) -> Iterator[None]:
    """``active``: pause the cyclic GC while a question's view is made, then move every
    object alive to the permanent generation (``gc.freeze``) before collections resume.
    The view (nodes, 20,000 pods' placements, the store's decoded objects) lives as long
    as the question; collections that rescan it as the walk allocates cost more than
    the walk (0.7 s of 3 on a 1,000-node cluster). What it holds is acyclic data (the
    lazy mappings' closures do not refer back to them), so nothing frozen is garbage
    only the cyclic GC could free; the one-shot commands that ask are the callers."""
    was = gc.isenabled()
    if active:
        gc.disable()
    try:
        yield
    finally:
        if active and was:
            gc.freeze()
            gc.enable()


def _listening(pod: Pod) -> frozenset[tuple[str, int]]:
    return podports.listening(pod)


class _PodsByNs(Mapping[str, Pod]):
    """Running pods by namespace name, each read from the store when first asked for
    (:func:`control.store.base.peek`) and kept."""

    def __init__(self, store: Store, keys: dict[str, str]) -> None:
        self._store = store
        self._keys = keys  # namespace name -> pod key
        self._got: dict[str, Pod] = {}

    def __getitem__(self, ns: str) -> Pod:
        pod = self._got.get(ns)
        if pod is None:
            got = peek(self._store, "Pod", self._keys[ns])
            assert isinstance(got, Pod)
            pod = self._got[ns] = got
        return pod

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, ns: object) -> bool:
        return ns in self._keys


_DNS_LABEL = "k8s-app"  # the label is_dns_pod reads
#: what :func:`_placed_pods` reads of every Pod (stored JSON paths)
_POD_FIELDS = (
    ("spec", "nodeName"),
    ("status", "podIP"),
    ("spec", "hostNetwork"),
    ("metadata", "labels", _DNS_LABEL),
)


def _placed_pods(session: Session) -> tuple[list[PodInfo], list[str], _PodsByNs]:
    """:func:`running_pods` as the network needs them (key, node, IP), the namespaces
    of those serving cluster DNS (:func:`is_dns_pod`), and each one's Pod on demand:
    read through :func:`control.store.base.scan`, without decoding every Pod, and kept
    in the state directory's cache while the store is unchanged
    (:meth:`control.rulecache.RuleCache.derived`)."""

    def placed() -> tuple[list[tuple[str, str, IPv4Address]], list[str]]:
        out: list[tuple[str, str, IPv4Address]] = []
        dns: list[str] = []
        want_dns = DNS_APP[_DNS_LABEL]
        for key, node, ip, host_network, app in scan(session.store, "Pod", _POD_FIELDS):
            if not (ip and node) or host_network:
                continue
            out.append((key, node, IPv4Address(ip)))  # (an address pickles as its int)
            if app == want_dns and key.partition("/")[0] == DNS_NAMESPACE:
                dns.append(pod_ns(key))
        return out, dns

    cache = RuleCache.for_state(session.state_dir)
    rows, dns = cache.derived(session.store, f"placed-pods/1/{_POD_FIELDS!r}", placed)
    pods = [PodInfo(key, node, ip) for key, node, ip in rows]
    keys = {pod_ns(key): key for key, _, _ in rows}
    return pods, list(dns), _PodsByNs(session.store, keys)


#: what :func:`_hostport_rules` reads of every Pod (stored JSON paths)
_HOSTPORT_FIELDS = (
    ("spec", "nodeName"),
    ("status", "podIP"),
    ("spec", "hostNetwork"),
    ("spec", "containers"),
)


def _hostport_rules(
    session: Session, pod_cidrs: Mapping[str, str | None], cached: bool
) -> tuple[dict[str, PortmapRules], dict[str, tuple[PortMapping, ...]]]:
    """Per node, the ``portmap`` plugin's rules for the hostPorts of its running pods
    (hostNetwork pods have none: their ports are the node's), and per pod key its
    mappings (what the kernel backend hands the real plugin), both in store order: the
    order of the plugin's ADDs on each node. The hairpin rule's subnet is the node's
    podCIDR (the network of the pod's CNI address). ``cached``: kept in the state
    directory's cache while the store is unchanged."""

    def read() -> list[tuple[str, str, str, tuple[PortMapping, ...]]]:
        rows: list[tuple[str, str, str, tuple[PortMapping, ...]]] = []
        for key, node, ip, host_network, containers in scan(session.store, "Pod", _HOSTPORT_FIELDS):
            if not (ip and node) or host_network:
                continue
            if isinstance(containers, str):  # a SQLite scan returns JSON text
                if "hostPort" not in containers:
                    continue
                containers = json.loads(containers)
            mappings = mappings_from_containers(containers)
            if mappings:
                rows.append((key, node, ip, mappings))
        return rows

    rows = (
        RuleCache.for_state(session.state_dir).derived(
            session.store, f"hostport-pods/1/{_HOSTPORT_FIELDS!r}", read
        )
        if cached
        else read()
    )
    by_node: dict[str, list[tuple[str, IPv4Address, IPv4Network, tuple[PortMapping, ...]]]] = {}
    per_pod: dict[str, tuple[PortMapping, ...]] = {}
    for key, node, ip, mappings in rows:
        cidr = pod_cidrs.get(node)
        if cidr is None:
            continue
        by_node.setdefault(node, []).append((key, IPv4Address(ip), IPv4Network(cidr), mappings))
        per_pod[key] = mappings
    out = {}
    for node, pods in by_node.items():
        pm = node_portmap_rules(CNI_NETWORK, pods)
        if pm is not None:
            out[node] = pm
    return out, per_pod


def _node_addresses(
    session: Session, cached: bool
) -> list[tuple[str, tuple[str, ...], str | None]]:
    """(name, internal IPs, podCIDR) of every Node that has an internal IP, in store
    order. ``cached``: kept in the state directory's cache while the store is unchanged
    (:meth:`control.rulecache.RuleCache.derived`): decoding 1,000 Nodes and reading
    their addresses took a tenth of a warm question."""

    def read() -> list[tuple[str, tuple[str, ...], str | None]]:
        out = []
        for n in session.store.list("Node"):
            assert isinstance(n, Node)
            ips = n.internal_ips
            if ips:
                out.append((n.name, tuple(ips), n.spec.pod_cidr))
        return out

    if not cached:
        return read()
    cache = RuleCache.for_state(session.state_dir)
    return cache.derived(session.store, "node-addresses/1", read)


def view(
    session: Session,
    *,
    external_clients: Iterable[str] = (),
    rules_override: Mapping[str, RulesetInput] | None = None,
    lazy: bool = False,
) -> ClusterView:
    """The cluster as both backends realise it (converges the control plane first).
    ``lazy``: the network's namespaces are derived when first looked up
    (:func:`netmodel.topology.build_lazy`: for the emulator, which builds only what a
    walk reaches); the cyclic GC is paused while the view is made and what is alive
    then is frozen (:func:`_gc_frozen_after`)."""
    with _gc_frozen_after(lazy):
        return _view(session, external_clients, rules_override, lazy)


def _view(
    session: Session,
    external_clients: Iterable[str],
    rules_override: Mapping[str, RulesetInput] | None,
    lazy: bool,
) -> ClusterView:
    session.converge()
    spec = session.cluster.spec
    nodes = []
    node_ips: dict[str, tuple[str, ...]] = {}
    pod_cidrs: dict[str, str | None] = {}
    for name, ips, pod_cidr in _node_addresses(session, lazy):
        node_ips[name] = ips
        pod_cidrs[name] = pod_cidr
        nodes.append(node_info(name, ips[0], pod_cidr))
    listeners: Mapping[str, frozenset[tuple[str, int]]]
    resolv: Mapping[str, ResolvConf]
    if lazy:  # each pod's, when the emulator first looks; no Pod decoded before
        pods, dns_pods, pod_of = _placed_pods(session)
        listeners = LazyMapping(pod_of, lambda ns: _listening(pod_of[ns]))
        grpc: Mapping[str, frozenset[int]] = LazyMapping(
            pod_of, lambda ns: podports.grpc_ports(pod_of[ns])
        )
        resolv = LazyMapping(pod_of, lambda ns: pod_resolv_conf(pod_of[ns], spec))
    else:
        running = running_pods(session)  # one read of every pod
        pods = [
            PodInfo(p.key, p.spec.node_name or "", IPv4Address(p.status.pod_ip or ""))
            for p in running
        ]
        dns_pods = [pod_ns(p.key) for p in running if is_dns_pod(p)]
        listeners = {pod_ns(p.key): _listening(p) for p in running}
        grpc = {pod_ns(p.key): g for p in running if (g := podports.grpc_ports(p))}
        resolv = {pod_ns(p.key): pod_resolv_conf(p, spec) for p in running}
    owned = {str(a) for n in nodes for a in [n.ip]} | {str(p.ip) for p in pods}
    clients = sorted({c for c in external_clients if c not in owned})
    node_net = spec.node_net
    assert isinstance(node_net, IPv4Network)
    network = (build_lazy if lazy else build)(
        node_net,
        nodes,
        pods,
        overlay=spec.overlay,
        external_clients=clients,
        cni=spec.cni,
        blocks=spec_blocks(spec, nodes, pods),
    )
    rulesets: Mapping[str, RulesetInput]
    local: Mapping[str, tuple[str, ...]]
    cni_rules = calico_rules(spec)
    hostports, port_mappings = _hostport_rules(session, pod_cidrs, lazy)
    agent = policy_agent_of(session, lazy)
    if session.lazy_rules is not None:
        rulesets, local = lazy_rulesets(
            session.lazy_rules, rules_override or {}, cni_rules, hostports, agent
        )
    else:
        rulesets, local = {}, {}
        for name, state in session.rules.nodes.items():
            ri = ruleset_input(state)
            if ri is not None:
                rulesets[name] = _with_policy(
                    with_hostports(with_calico(ri, cni_rules), hostports.get(name)), agent, name
                )
            if isinstance(state.rendered, IpvsRender):
                local[name] = tuple(state.rendered.addresses)
        rulesets.update(rules_override or {})
    zone = dns_zone(session)
    dns_servers = frozenset(dns_pods if zone is not None else ())
    return ClusterView(
        network,
        rulesets,
        listeners,
        local,
        node_ips,
        zone,
        dns_servers,
        resolv,
        port_mappings,
        guarded=agent.guarded() if agent is not None else frozenset(),
        grpc_ports=grpc,
    )


def emulator(
    session: Session,
    *,
    external_clients: Iterable[str] = (),
    rules_override: Mapping[str, RulesetInput] | None = None,
    seed: int | None = None,
) -> EmulatedCluster:
    v = view(session, external_clients=external_clients, rules_override=rules_override, lazy=True)
    return EmulatedCluster(
        v.network,
        v.rulesets,
        v.listeners,
        v.local_addresses,
        seed=session.cluster.spec.seed if seed is None else seed,
        answerers=answerers(v),
        resolv_confs=v.resolv_confs,
        compiled_cache=compiled_cache(session),
    )


def compiled_cache(session: Session) -> CompiledCache:
    """Compiled rule sets by content: in the state directory (or in memory for a
    throw-away cluster), reused while a node's rules are unchanged."""
    return RuleCache.for_state(session.state_dir).compiled()


def resolve_endpoint(session: Session, text: str) -> str:
    """Turn the CLI's ``svc/NS/NAME:PORT`` (port number or name) into ``IP:PORT`` and
    ``pod/NAME`` into ``pod/default/NAME``; other forms pass through (the emulator
    understands ``pod/NS/NAME``, ``node/NAME``, ``IP`` and ``IP:PORT``)."""
    if text.startswith(("svc/", "service/")):
        rest = text.split("/", 1)[1]
        path, _, port = rest.partition(":")
        ns, _, name = path.rpartition("/")
        ns = ns or "default"
        try:
            svc = session.store.get("Service", f"{ns}/{name}")
        except NotFoundError:
            raise InputError(f"service {ns}/{name} not found", field=text) from None
        assert isinstance(svc, Service)
        if not svc.spec.cluster_ip or svc.is_headless:
            raise InputError(f"service {ns}/{name} has no ClusterIP", field=text)
        if not port:
            if len(svc.spec.ports) != 1:
                raise InputError(f"service {ns}/{name} has several ports: give :PORT", field=text)
            return f"{svc.spec.cluster_ip}:{svc.spec.ports[0].port}"
        for p in svc.spec.ports:
            if port in (str(p.port), p.name):
                return f"{svc.spec.cluster_ip}:{p.port}"
        raise InputError(f"service {ns}/{name} has no port {port}", field=text)
    if text.startswith("pod/") and text.count("/") == 1:
        return "pod/default/" + text[4:]
    return text


def external_sources(session: Session, *texts: str) -> list[str]:
    """Plain IPs among ``texts`` that no node or pod owns: external clients to attach."""
    out = []
    for t in texts:
        host = t.rsplit(":", 1)[0] if t.count(":") == 1 else t
        try:
            ip_address(host)
        except ValueError:
            continue
        out.append(host)
    return out
