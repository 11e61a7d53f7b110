"""The ``svclab.dev/v1alpha1 Cluster`` document: address plan and node list.

Defaults: serviceCIDR 10.96.0.0/12, podCIDR 10.244.0.0/16, nodeCIDRMaskSize 24,
nodePortRange 30000-32767, nodeNetwork 172.18.0.0/16, cni flannel, overlay vxlan,
proxyMode iptables, loadBalancerCIDR 172.19.0.0/24 (svclab's built-in LoadBalancer pool).
``cni: calico`` models Calico instead of flannel (:class:`CalicoSpec`).
Node addresses default to consecutive addresses of nodeNetwork from .2 on (.1 is the
underlay gateway, where external clients attach).

The apiserver's advertise address (the one endpoint of ``default/kubernetes``, see
:meth:`ClusterSpec.apiserver_address`) is ``spec.advertiseAddress`` when given (it must
be a node's first address); otherwise the first IPv4 address of the first node, in
natural name order, among the nodes labelled ``node-role.kubernetes.io/control-plane``,
or among all nodes when none is. It depends on this document only, so it is the same
every time a cluster is opened.

Cluster DNS (kubeadm's CoreDNS, see :mod:`dataplane.dns`) is on by default, as on every
kubeadm, kind, k3s or minikube cluster: the control plane creates the
``kube-system/kube-dns`` Service at the tenth address of serviceCIDR
(:meth:`ClusterSpec.dns_service_ip`) and its two-replica ``coredns`` Deployment, and
gives pods kubelet's ``resolv.conf``. ``dns: false`` opts out: a state that has no
cluster DNS (upstream kube-proxy's test fixtures, a scenario whose pods, rules or
addresses were written without it). A serviceCIDR too small to hold a tenth address is
refused while DNS is on, as ``kubeadm init`` refuses it (it cannot place kube-dns);
the error says so and names ``dns: false``. ``clusterDomain`` (default ``cluster.local``) is kubelet's
``--cluster-domain`` and the zone CoreDNS serves. Names outside it are what CoreDNS
forwards upstream; svclab never asks the host's resolver: ``dnsUpstream`` is that
upstream, a static table of names and their IPv4 addresses (any other name: NXDOMAIN).
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from netmodel.errors import InputError
from netmodel.ip import IPNetwork, nth_address, overlaps, parse_cidr, parse_ip

API_VERSION = "svclab.dev/v1alpha1"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

#: The label kubeadm puts on control-plane nodes (any value; ``""`` usually).
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key for names with numbers in them: ``node-2`` before ``node-10``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)
    )


class _Strict(BaseModel):
    model_config = ConfigDict(
        frozen=True, populate_by_name=True, alias_generator=to_camel, extra="forbid"
    )


#: the well-known label naming a node's zone (what topology-aware routing reads)
ZONE_LABEL = "topology.kubernetes.io/zone"
#: a Kubernetes label value: at most 63 characters, alphanumerics at both ends, and
#: ``-``, ``_``, ``.`` between
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


class NodeSpecEntry(_Strict):
    """One node of ``spec.nodes`` when given as a list. ``zone`` becomes the node's
    ``topology.kubernetes.io/zone`` label (:attr:`node_labels`); it may not contradict a
    value given for that label under ``labels``."""

    name: str
    addresses: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, str]] = Field(default_factory=list)
    capacity: dict[str, str] = Field(default_factory=dict)
    unschedulable: bool = False
    zone: str | None = None

    @field_validator("addresses")
    @classmethod
    def _ips(cls, v: list[str]) -> list[str]:
        for a in v:
            parse_ip(a)
        return v

    @field_validator("zone")
    @classmethod
    def _zone(cls, v: str | None) -> str | None:
        if v is not None and (not v or not _LABEL_VALUE.fullmatch(v)):
            raise ValueError(
                f"invalid zone {v!r}: a label value must be 1-63 characters, "
                "alphanumeric at both ends, with '-', '_' or '.' between"
            )
        return v

    @model_validator(mode="after")
    def _zone_label(self) -> NodeSpecEntry:
        given = self.labels.get(ZONE_LABEL)
        if self.zone is not None and given is not None and given != self.zone:
            raise ValueError(f"zone {self.zone!r} contradicts labels[{ZONE_LABEL}] {given!r}")
        return self

    @property
    def node_labels(self) -> dict[str, str]:
        """``labels`` plus the zone label when ``zone`` is set."""
        if self.zone is None:
            return dict(self.labels)
        return {**self.labels, ZONE_LABEL: self.zone}


DEFAULT_CAPACITY = {"cpu": "4", "memory": "16Gi", "pods": "110"}


class NodeEnvironment(_Strict):
    """Facts about the nodes' tools that change what kube-proxy writes but are not
    KubeProxyConfiguration settings. Field names follow the ``node:`` block of upstream's
    test cases (tests/data/kube-proxy/README.md), so a case's environment can be stated:

    * ``masqueradeMark``: the mark text kube-proxy writes; real kube-proxy writes
      ``0x00004000`` (default, from masqueradeBit), upstream's test fake ``0x4000``;
    * ``iptablesHasRandomFully``: the iptables binary supports ``--random-fully``;
    * ``nfacctCounters``: which nfacct counters exist (rules use them only then);
    * ``largeClusterEndpointsThreshold``: endpoints above which comments are dropped.
    """

    masquerade_mark: str | None = None
    iptables_has_random_fully: bool = True
    nfacct_counters: dict[str, bool] = Field(
        default_factory=lambda: {
            "ct_state_invalid_dropped_pkts": True,
            "localhost_nps_accepted_pkts": True,
        }
    )
    large_cluster_endpoints_threshold: int = 1000


def _carved(svc: IPNetwork, pod: IPNetwork) -> bool:
    """The service range is a strict part of the pod range (and leaves room for pods)."""
    return svc.version == pod.version and svc.prefixlen > pod.prefixlen and svc.subnet_of(pod)  # type: ignore[arg-type]


def _ipv4_cidr(v: str, what: str) -> str:
    """``v`` as a normalised IPv4 CIDR, or a ValueError naming it as a Calico ``what``."""
    try:
        net = parse_cidr(v)
    except ValueError as e:
        raise ValueError(f"invalid CIDR {v!r}: {e}") from None
    if net.version != 4:
        raise ValueError(f"{v!r} is not an IPv4 {what}")
    return str(net)


class BlockAffinity(_Strict):
    """One of Calico's ``BlockAffinity`` objects, as ``calicoctl ipam show --show-blocks``
    or ``kubectl get blockaffinities`` print them: block ``cidr`` is affine to ``node``."""

    node: str
    cidr: str

    @field_validator("cidr")
    @classmethod
    def _block(cls, v: str) -> str:
        return _ipv4_cidr(v, "block")


class IPPool(_Strict):
    """One of Calico's IP pools (an ``IPPool`` object's spec, as far as it is modelled).

    * ``cidr``: the pool's network (``IPPool.spec.cidr``);
    * ``natOutgoing``: pod traffic from this pool to a destination in no pool is
      masqueraded on the pod's node (``IPPool.spec.natOutgoing``; default false, as in
      Calico's API). Felix renders it as the ``cali-nat-outgoing`` chain of the nat table
      over the ``cali40masq-ipam-pools`` and ``cali40all-ipam-pools`` ipsets
      (:mod:`netmodel.calicorules`);
    * ``vxlanMode``: ``Never`` (BGP routes), ``Always`` (Calico's VXLAN overlay) or
      ``CrossSubnet`` (VXLAN between subnets only: svclab's nodes share one subnet)."""

    cidr: str
    nat_outgoing: bool = False
    #: ``IPPool.spec.vxlanMode``: ``Always`` routes the pool's blocks between nodes
    #: through ``vxlan.calico`` (:mod:`netmodel.topology`); ``CrossSubnet`` only between
    #: nodes of different subnets, and svclab's nodes share one: as ``Never``
    vxlan_mode: Literal["Never", "Always", "CrossSubnet"] = "Never"

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        return _ipv4_cidr(v, "pool")


class CalicoSpec(_Strict):
    """How Calico's IPAM and routing are modelled (``cni: calico``; see
    :mod:`netmodel.topology`).

    * ``ipPools``: the IPPools pod addresses come from, each ``{cidr, natOutgoing}``
      (:class:`IPPool`) or a CIDR alone (a pool without natOutgoing). Empty: Calico's
      default pool as ``calico-node`` creates it, the cluster's podCIDR with
      ``natOutgoing: true`` (``CALICO_IPV4POOL_NAT_OUTGOING``'s default). A recorded pod
      address must lie in one of them.
    * ``blockSize``: the prefix length of the blocks the pools are cut into (Calico's
      ``IPPool.spec.blockSize``, default 26).
    * ``blockAffinities``: which node each block is affine to (Calico's
      ``BlockAffinity`` objects). Empty: inferred from the pods, each node owning the
      ``/blockSize`` blocks its pods' addresses fall in (a block shared by pods of
      several nodes goes to the node with most pods in it; the others' addresses are
      *borrowed* and routed as ``/32``, as Calico does).

    Routing is Calico's with encapsulation ``None`` (BGP, the mode with the fewest
    moving parts: no tunnel device, no MTU change): every node reaches another node's
    blocks by ``<block> via <nodeIP> dev eth0``, as BIRD programs them; the blocks of a
    pool with ``vxlanMode: Always`` go through ``vxlan.calico`` instead
    (:mod:`netmodel.topology`)."""

    ip_pools: list[IPPool] = Field(default_factory=list, alias="ipPools")
    block_size: int = 26
    block_affinities: list[BlockAffinity] = Field(default_factory=list)

    @field_validator("ip_pools", mode="before")
    @classmethod
    def _pools(cls, v: object) -> object:
        if not isinstance(v, list):
            return v
        return [{"cidr": c} if isinstance(c, str) else c for c in v]

    @field_validator("block_size")
    @classmethod
    def _size(cls, v: int) -> int:
        if not 20 <= v <= 32:
            raise ValueError(f"blockSize {v} must be between 20 and 32 (Calico's range)")
        return v


class NodeLifecycleSpec(_Strict):
    """How node heartbeats are judged (kube-controller-manager's node lifecycle flags and
    the kubelet's node lease; the defaults are upstream's, Kubernetes 1.35).

    * ``nodeMonitorGracePeriodSeconds`` (``--node-monitor-grace-period``, 50 s since
      1.32, 40 s before): how long a node's Lease and Ready heartbeat may go unrenewed
      before its Ready condition turns Unknown and it is tainted unreachable.
    * ``nodeMonitorPeriodSeconds`` (``--node-monitor-period``, 5 s): how often the
      controller checks; a node is declared lost at the first check past its grace.
    * ``nodeLeaseDurationSeconds`` (the kubelet's ``nodeLeaseDurationSeconds``, 40): its
      Lease's duration; the kubelet renews it every quarter of that.

    The renewal interval must be shorter than the grace period, else a healthy node
    would be declared lost between two renewals."""

    node_monitor_grace_period_seconds: float = 50.0
    node_monitor_period_seconds: float = 5.0
    node_lease_duration_seconds: int = 40

    @model_validator(mode="after")
    def _periods(self) -> NodeLifecycleSpec:
        for name, v in (
            ("nodeMonitorGracePeriodSeconds", self.node_monitor_grace_period_seconds),
            ("nodeMonitorPeriodSeconds", self.node_monitor_period_seconds),
            ("nodeLeaseDurationSeconds", self.node_lease_duration_seconds),
        ):
            if not v > 0:
                raise ValueError(f"{name} must be greater than 0, not {v}")
        renew = self.node_lease_duration_seconds / 4
        if renew >= self.node_monitor_grace_period_seconds:
            raise ValueError(
                f"nodeMonitorGracePeriodSeconds {self.node_monitor_grace_period_seconds} must "
                f"exceed the kubelet's lease renewal interval (nodeLeaseDurationSeconds/4 = "
                f"{renew})"
            )
        return self


class ClusterSpec(_Strict):
    service_cidr: str = Field(default="10.96.0.0/12", alias="serviceCIDR")
    pod_cidr: str = Field(default="10.244.0.0/16", alias="podCIDR")
    node_cidr_mask_size: int = Field(default=24, alias="nodeCIDRMaskSize")
    node_port_range: str = "30000-32767"
    node_network: str = "172.18.0.0/16"
    load_balancer_cidr: str = Field(default="172.19.0.0/24", alias="loadBalancerCIDR")
    overlay: Literal["vxlan", "host-gw"] = "vxlan"
    #: the pods' network plugin: ``flannel`` (the CNI bridge + host-local pair on each
    #: node's podCIDR, ``overlay`` between nodes) or ``calico`` (Calico's block IPAM,
    #: ``cali*`` veths with proxy ARP, ``/32`` host routes, BGP routes to other nodes'
    #: blocks: :class:`CalicoSpec`)
    cni: Literal["flannel", "calico"] = "flannel"
    calico: CalicoSpec = Field(default_factory=CalicoSpec)
    proxy_mode: Literal["iptables", "ipvs", "nftables"] = "iptables"
    nodes: int | list[NodeSpecEntry] = 1
    node_environment: NodeEnvironment = Field(default_factory=NodeEnvironment)
    #: ``auto``: the apiserver allocates NodePorts, healthCheckNodePorts and LoadBalancer
    #: IPs as Kubernetes does. ``recorded``: Services are replayed as recorded (from a
    #: real cluster or an upstream test): NodePorts, healthCheckNodePorts and ingress IPs
    #: are kept exactly as given (empty stays empty; nothing is allocated, so nothing is
    #: checked for conflicts). ClusterIPs are allocated and checked in both modes.
    allocation: Literal["auto", "recorded"] = "auto"
    #: create the ``default/kubernetes`` Service as kube-apiserver does; false to replay
    #: a state that has none (upstream's kube-proxy tests).
    kubernetes_service: bool = True
    #: the apiserver's address (kube-apiserver's ``--advertise-address``): the endpoint of
    #: ``default/kubernetes``. Must be the first address of one of the nodes; unset: see
    #: :meth:`apiserver_address`.
    advertise_address: str | None = None
    seed: int = 0
    #: kubelet's ``--cluster-domain``: the zone cluster DNS answers for.
    cluster_domain: str = "cluster.local"
    #: create kube-system/kube-dns and the coredns Deployment, as kubeadm does (on by
    #: default, as on a real cluster); pods get kubelet's ClusterFirst resolv.conf
    #: pointing at it. false: no cluster DNS (a replay of a state that has none).
    dns: bool = True
    #: the upstream resolver CoreDNS forwards names outside the cluster domain to: a
    #: static table name -> IPv4 addresses (other names: NXDOMAIN).
    dns_upstream: dict[str, list[str]] = Field(default_factory=dict)
    #: node heartbeats: grace and monitor periods, the kubelet's lease (:class:`NodeLifecycleSpec`)
    node_lifecycle: NodeLifecycleSpec = Field(default_factory=NodeLifecycleSpec)

    @field_validator("cluster_domain")
    @classmethod
    def _domain(cls, v: str) -> str:
        name = v.rstrip(".").lower()
        if not name or len(name) > 253 or not all(_DNS_LABEL.fullmatch(p) for p in name.split(".")):
            raise ValueError(
                f"invalid cluster domain {v!r} (want lowercase RFC 1123 labels joined by dots)"
            )
        return name

    @field_validator("dns_upstream")
    @classmethod
    def _upstream(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, addrs in v.items():
            key = name.rstrip(".").lower()
            if (
                not key
                or len(key) > 253
                or not all(_DNS_LABEL.fullmatch(p) for p in key.split("."))
            ):
                raise ValueError(f"invalid name {name!r}")
            ips = []
            for a in addrs:
                try:
                    ip = parse_ip(a)
                except ValueError:
                    raise ValueError(f"{name}: invalid IP address {a!r}") from None
                if not isinstance(ip, IPv4Address):
                    raise ValueError(f"{name}: {a!r} is not an IPv4 address")
                ips.append(str(ip))
            out[key] = ips
        return out

    @field_validator("service_cidr", "pod_cidr", "node_network", "load_balancer_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            parse_cidr(v)
        except ValueError as e:
            raise ValueError(f"invalid CIDR {v!r}: {e}") from None
        return v

    @field_validator("advertise_address")
    @classmethod
    def _ipv4(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            addr = parse_ip(v)
        except ValueError:
            raise ValueError(f"invalid IP address {v!r}") from None
        if not isinstance(addr, IPv4Address):
            raise ValueError(f"{v!r} is not an IPv4 address (the kubernetes slice is IPv4)")
        return str(addr)

    @field_validator("node_port_range")
    @classmethod
    def _range(cls, v: str) -> str:
        lo, sep, hi = v.partition("-")
        if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
            raise ValueError(f"invalid port range {v!r} (want LOW-HIGH)")
        a, b = int(lo), int(hi)
        if not (1 <= a <= b <= 65535):
            raise ValueError(f"invalid port range {v!r}")
        return v

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, v: int | list[NodeSpecEntry]) -> int | list[NodeSpecEntry]:
        if isinstance(v, int) and v < 0:
            raise ValueError("must be >= 0")
        if isinstance(v, list):
            names = [n.name for n in v]
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise ValueError(f"duplicate node name(s) {sorted(dup)}")
        return v

    @model_validator(mode="after")
    def _plan(self) -> ClusterSpec:
        svc, pod, under = self.service_net, self.pod_net, self.node_net
        pairs = [("serviceCIDR", svc), ("podCIDR", pod), ("nodeNetwork", under)]
        for i, (na, a) in enumerate(pairs):
            for nb, b in pairs[i + 1 :]:
                if overlaps(a, b) and not (a is svc and b is pod and _carved(svc, pod)):
                    raise ValueError(f"{na} {a} overlaps {nb} {b}")
        if not (pod.prefixlen <= self.node_cidr_mask_size <= pod.max_prefixlen - 2):
            raise ValueError(
                f"nodeCIDRMaskSize {self.node_cidr_mask_size} does not fit podCIDR {pod}"
            )
        need = self.node_count
        have = 2 ** (self.node_cidr_mask_size - pod.prefixlen)
        if need > have:
            raise ValueError(
                f"{need} nodes need {need} podCIDRs of /{self.node_cidr_mask_size} "
                f"but podCIDR {pod} holds only {have}"
            )
        if need > under.num_addresses - 3:
            raise ValueError(f"nodeNetwork {under} has no room for {need} nodes")
        for name in self.dns_upstream:
            if name == self.cluster_domain or name.endswith("." + self.cluster_domain):
                raise ValueError(
                    f"dnsUpstream name {name!r} is inside the cluster domain {self.cluster_domain}"
                )
        if self.cni == "calico":
            if "overlay" in self.model_fields_set:
                raise ValueError(
                    "overlay is flannel's backend; with cni calico the blocks are routed as "
                    "Calico's BGP mode does (encapsulation None): leave overlay out"
                )
            pools = self.calico_pools
            for p in pools:
                for na, a in (("serviceCIDR", svc), ("nodeNetwork", under)):
                    if overlaps(p, a) and not (a is svc and _carved(svc, p)):
                        raise ValueError(f"calico.ipPools {p} overlaps {na} {a}")
            for i, aff in enumerate(self.calico.block_affinities):
                net = parse_cidr(aff.cidr)
                if not any(net.subnet_of(p) for p in pools):  # type: ignore[arg-type]
                    shown = ", ".join(str(p) for p in pools)
                    raise ValueError(
                        f"calico.blockAffinities[{i}].cidr {net} is in no IP pool ({shown})"
                    )
        elif "calico" in self.model_fields_set:
            raise ValueError("calico settings need cni: calico")
        if self.dns and svc.num_addresses < 12:
            raise ValueError(
                f"serviceCIDR {svc} has no tenth address for kube-dns (cluster DNS is on "
                "by default; use a /28 or wider, or set dns: false)"
            )
        if self.advertise_address is not None:
            want = parse_ip(self.advertise_address)
            firsts = {parse_ip(e.addresses[0]) for e in self.node_entries()}
            if want not in firsts:
                raise ValueError(f"advertiseAddress {want} is not the (first) address of any node")
        return self

    def layout_warnings(self) -> list[str]:
        """What is unusual but accepted in this address plan: a serviceCIDR carved out
        of the podCIDR (GKE's routes-based clusters, whose services range is a block at
        the end of the cluster's pod range). Node IPAM then never hands out a node
        subnet that overlaps it (kube-controller-manager filters the service range out of
        its node CIDR allocator), and Service VIPs are DNATed before routing, so they
        never meet the pod routes."""
        svc, pod = self.service_net, self.pod_net
        if _carved(svc, pod):
            return [
                f"serviceCIDR {svc} lies inside podCIDR {pod} (as on GKE routes-based "
                "clusters): node podCIDRs are allocated around it"
            ]
        return []

    # ---- derived values

    @property
    def service_net(self) -> IPNetwork:
        return parse_cidr(self.service_cidr)

    @property
    def pod_net(self) -> IPNetwork:
        return parse_cidr(self.pod_cidr)

    @property
    def node_net(self) -> IPNetwork:
        return parse_cidr(self.node_network)

    @property
    def calico_pools(self) -> list[IPNetwork]:
        """Calico's IP pools (``calico.ipPools``, else the podCIDR)."""
        return [parse_cidr(p.cidr) for p in self.calico.ip_pools] or [self.pod_net]

    @property
    def calico_ip_pools(self) -> list[IPPool]:
        """Calico's IP pools with their settings: ``calico.ipPools``, else the default
        pool ``calico-node`` creates (the podCIDR, natOutgoing)."""
        return list(self.calico.ip_pools) or [IPPool(cidr=str(self.pod_net), nat_outgoing=True)]

    @property
    def lb_net(self) -> IPNetwork:
        return parse_cidr(self.load_balancer_cidr)

    @property
    def port_range(self) -> tuple[int, int]:
        lo, _, hi = self.node_port_range.partition("-")
        return int(lo), int(hi)

    @property
    def node_count(self) -> int:
        return self.nodes if isinstance(self.nodes, int) else len(self.nodes)

    def node_names(self) -> list[str]:
        """The names of :meth:`node_entries`, in the same order, without building them."""
        if isinstance(self.nodes, int):
            return [f"node-{i + 1}" for i in range(self.nodes)]
        return [e.name for e in self.nodes]

    def node_entries(self) -> list[NodeSpecEntry]:
        """The node list with names and addresses filled in (node-1, node-2, ...; .2, .3, ...)."""
        if isinstance(self.nodes, int):
            entries = [NodeSpecEntry(name=n) for n in self.node_names()]
        else:
            entries = list(self.nodes)
        out = []
        for i, e in enumerate(entries):
            if not e.addresses:
                e = e.model_copy(update={"addresses": [str(nth_address(self.node_net, i + 2))]})
            out.append(e)
        return out

    def apiserver_address(self) -> str | None:
        """The apiserver's advertise address: the one endpoint of ``default/kubernetes``.

        ``advertiseAddress`` when set; otherwise the first IPv4 address of
        the first node in natural name order among the nodes carrying
        :data:`CONTROL_PLANE_LABEL`, or among all nodes when none does. None when no
        node has an IPv4 address (a cluster without nodes has no apiserver endpoint).
        Nodes created later from manifests are not considered: the answer depends on
        this document only, so it is stable across restarts of a persistent cluster."""
        if self.advertise_address is not None:
            return self.advertise_address
        entries = self.node_entries()
        control = [e for e in entries if CONTROL_PLANE_LABEL in e.labels]
        for entry in sorted(control or entries, key=lambda e: natural_key(e.name)):
            for text in entry.addresses:
                addr = parse_ip(text)
                if isinstance(addr, IPv4Address):
                    return str(addr)
        return None

    def dns_service_ip(self) -> str:
        """kube-dns's ClusterIP: the tenth address of serviceCIDR (kubeadm's choice)."""
        return str(nth_address(self.service_net, 10))

    @property
    def gateway(self) -> str:
        """The underlay's first address: where external clients attach."""
        return str(nth_address(self.node_net, 1))


class Cluster(BaseModel):
    """The whole Cluster document."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["Cluster"] = "Cluster"
    metadata: dict[str, Any] = Field(default_factory=lambda: {"name": "svclab"})
    spec: ClusterSpec = Field(default_factory=ClusterSpec)

    def to_dict(self) -> dict[str, Any]:
        """The document as stored: every field, except those that do not apply to the
        network plugin (``overlay`` under Calico, ``calico`` under flannel), so that it
        reads back as the same Cluster."""
        d = self.model_dump(by_alias=True, mode="json")
        if self.spec.cni == "calico":
            d["spec"].pop("overlay", None)
        else:
            d["spec"].pop("calico", None)
        return d


def cluster_from_dict(
    data: dict[str, Any], *, file: str | None = None, doc: int | None = None
) -> Cluster:
    """Validate a Cluster document; errors become one-line :class:`InputError`."""
    from pydantic import ValidationError

    try:
        return Cluster.model_validate(data)
    except ValidationError as e:
        errs = e.errors()
        # ``nodes`` is a count or a list: for a list, the integer branch's complaint
        # says nothing, the list branch's names the entry and field
        err = next((r for r in errs if r["loc"][-1:] != ("int",)), errs[0])
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "list[")))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        name = (data.get("metadata") or {}).get("name", "svclab")
        raise InputError(msg, file=file, document=doc, obj=f"Cluster/{name}", field=loc) from None
