"""The component registry: every control-plane component once, with who it is to the API
server, what it watches, how it is built and whether it runs once per node.

The deterministic runner (:mod:`control.runner`), the threaded live plane
(:class:`control.live.LiveControlPlane`) and the process supervisor
(:mod:`control.supervisor`) all iterate :data:`COMPONENTS`; nothing else lists them.

``group`` is the process a component runs in when components are processes, as
Kubernetes' own binaries are split: ``kube-controller-manager`` (every controller),
``kube-scheduler``, and per node ``kubelet``, ``kube-proxy`` and ``kube-router`` (the
NetworkPolicy agent, :mod:`control.agents.netpolicy`). A group has one identity (client
certificate CN / O): :func:`identity_of`.

The policy agent is a group of its own, as kube-router's DaemonSet deploys it (a pod
per node under the ``kube-system/kube-router`` ServiceAccount, whose ClusterRole reads
pods, namespaces, nodes and networkpolicies), rather than a part of the kube-proxy
process: kube-proxy's identity (``system:kube-proxy``, bound to
``system:node-proxier``) may read no pods, namespaces or policies upstream, and a
cluster served without kube-proxies (``--no-kube-proxies``) still enforces its
policies. (k3s runs the same controller inside its one agent process, beside kubelet
and kube-proxy, under its own controller credentials: svclab splits the node's
components into processes as kubeadm's clusters do.)

Contract: :data:`COMPONENTS` is in the runner's order (a component runs after every one
listed before it in a round); ``build(ctx, node)`` returns a fresh
:class:`~control.agents.Agent` whose ``name`` is the component's name (per node:
``NAME/NODE``); ``informers(node)`` is what it lists and watches, as (kind, field
selector) pairs, or None for "every object of the agent's kinds".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from control.agents import Agent
from control.agents.kubelet import Kubelet
from control.agents.kubeproxy import KubeProxy, RuleSink, sync_periods
from control.agents.netpolicy import LIVE_PERIODS, NetworkPolicyAgent, PolicySink
from control.agents.network import NetworkPlugin
from control.agents.probes import Prober
from control.clock import Clock
from control.controllers.base import GarbageCollector
from control.controllers.cronjob import CronJobController
from control.controllers.daemonset import DaemonSetController
from control.controllers.deployment import DeploymentController
from control.controllers.disruption import DisruptionController
from control.controllers.endpointslice import EndpointSliceController
from control.controllers.job import JobController
from control.controllers.namespace import NamespaceController
from control.controllers.nodeipam import NodeIPAM
from control.controllers.nodelifecycle import NodeLifecycleController
from control.controllers.podgc import PodGarbageCollector
from control.controllers.replicaset import ReplicaSetController
from control.controllers.replicationcontroller import ReplicationControllerController
from control.controllers.servicecidr import ServiceCIDRController
from control.controllers.statefulset import StatefulSetController
from control.controllers.tainteviction import TaintEvictionController
from control.nodeipamagent import NodeIPAMAgent
from control.scheduler import Scheduler
from netmodel.cluster import ClusterSpec

CONTROLLER_MANAGER_GROUP = "kube-controller-manager"
SCHEDULER_GROUP = "kube-scheduler"
KUBELET_GROUP = "kubelet"
KUBE_PROXY_GROUP = "kube-proxy"
KUBE_ROUTER_GROUP = "kube-router"
#: every group, in the order a cluster starts them
GROUPS = (
    CONTROLLER_MANAGER_GROUP,
    SCHEDULER_GROUP,
    KUBELET_GROUP,
    KUBE_PROXY_GROUP,
    KUBE_ROUTER_GROUP,
)
#: the groups that run once per node
NODE_GROUPS = frozenset({KUBELET_GROUP, KUBE_PROXY_GROUP, KUBE_ROUTER_GROUP})


@dataclass(frozen=True)
class Identity:
    """Who a component is to the API server (client certificate CN and O)."""

    user: str
    groups: tuple[str, ...] = ()


CONTROLLER_MANAGER = Identity("system:kube-controller-manager")
SCHEDULER = Identity("system:kube-scheduler")
KUBE_PROXY = Identity("system:kube-proxy")
#: the NetworkPolicy agent: kube-router's ServiceAccount, as its DaemonSet runs it
KUBE_ROUTER = Identity(
    "system:serviceaccount:kube-system:kube-router",
    ("system:serviceaccounts", "system:serviceaccounts:kube-system"),
)
#: the Calico CNI plugin's own identity: Calico's IPAM is cluster-wide, so a kubelet
#: process running Calico's plugin learns every address the cluster's pods hold through
#: a Pod informer under this identity (a kubelet may list only its own node's pods)
CALICO_CNI = Identity(
    "system:serviceaccount:kube-system:calico-cni-plugin",
    ("system:serviceaccounts", "system:serviceaccounts:kube-system"),
)


def node_identity(node: str) -> Identity:
    return Identity(f"system:node:{node}", ("system:nodes",))


def identity_of(group: str, node: str | None = None) -> Identity:
    """The identity every component of ``group`` (of ``node``, for the per-node groups)
    uses."""
    if group == CONTROLLER_MANAGER_GROUP:
        return CONTROLLER_MANAGER
    if group == SCHEDULER_GROUP:
        return SCHEDULER
    if group == KUBE_PROXY_GROUP:
        return KUBE_PROXY
    if group == KUBE_ROUTER_GROUP:
        return KUBE_ROUTER
    if group == KUBELET_GROUP:
        if node is None:
            raise ValueError("a kubelet's identity names its node")
        return node_identity(node)
    raise ValueError(f"unknown component group {group!r}")


@dataclass(frozen=True)
class BuildContext:
    """What a component is built from: the API client it writes through (and reads, via
    ``api.store``), the Event recorder, the clock, the seed of its randomness, the
    cluster, and for the per-node agents what their node acts on."""

    #: an APIClient, plus what some controllers also call (the in-process APIServer and
    #: RemoteAPI both provide all of it)
    api: Any
    recorder: Any
    clock: Clock
    seed: int
    cluster: ClusterSpec
    network_plugin: Callable[[str], NetworkPlugin] | None = None
    rule_sink: Callable[[str], RuleSink] | None = None
    #: where each node's policy agent loads its rules
    policy_sink: Callable[[str], PolicySink] | None = None
    proxy_config: Any = None
    #: the kubelets' probe runner (None: the kubelet's default)
    prober: Callable[[str], Prober] | None = None
    #: kubelets keep a deleted pod serving while its preStop hook runs (the live planes);
    #: the deterministic runner stops it at once
    graceful: bool = False


Informers = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class Component:
    """One registered component (see the module docstring)."""

    name: str
    group: str
    build: Callable[[BuildContext, str | None], Agent]
    informers: Callable[[str | None], Informers] | None = None
    per_node: bool = False
    #: seconds after which the live loop runs it with no event (time-based work)
    idle_wakeup: float | None = None


def _kubelet(ctx: BuildContext, node: str | None) -> Agent:
    assert node is not None and ctx.network_plugin is not None
    kubelet = Kubelet(
        node,
        ctx.api,
        ctx.recorder,
        ctx.clock,
        ctx.network_plugin(node),
        prober=None if ctx.prober is None else ctx.prober(node),
        graceful=ctx.graceful,
    )
    kubelet.lease_duration = ctx.cluster.node_lifecycle.node_lease_duration_seconds
    return kubelet


def _node_lifecycle(ctx: BuildContext) -> Agent:
    lifecycle = ctx.cluster.node_lifecycle
    return NodeLifecycleController(
        ctx.api,
        ctx.recorder,
        ctx.clock,
        grace_period=lifecycle.node_monitor_grace_period_seconds,
        monitor_period=lifecycle.node_monitor_period_seconds,
    )


def _kube_proxy(ctx: BuildContext, node: str | None) -> Agent:
    assert node is not None and ctx.rule_sink is not None
    proxy = KubeProxy(
        node, ctx.cluster, ctx.proxy_config, ctx.rule_sink(node), ctx.recorder, clock=ctx.clock
    )
    # a live kube-proxy keeps upstream's minSyncPeriod and syncPeriod (the deterministic
    # runner builds its kube-proxies itself, with none)
    proxy.periods = sync_periods(ctx.proxy_config, proxy.mode)
    return proxy


def _kube_router(ctx: BuildContext, node: str | None) -> Agent:
    assert node is not None and ctx.policy_sink is not None
    return NetworkPolicyAgent(
        node,
        ctx.policy_sink(node),
        ctx.recorder,
        service_cidrs=(ctx.cluster.service_cidr,),
        clock=ctx.clock,
        # a live agent keeps kube-router's sync timing (the deterministic runner's
        # agents are built with none: every change at once)
        periods=LIVE_PERIODS,
    )


def _cm(name: str, build: Callable[[BuildContext], Agent], idle: float | None = None) -> Component:
    return Component(name, CONTROLLER_MANAGER_GROUP, lambda c, _n: build(c), idle_wakeup=idle)


COMPONENTS: tuple[Component, ...] = (
    _cm("nodeipam-controller", lambda c: NodeIPAMAgent(NodeIPAM(c.api, c.cluster))),
    _cm("service-cidr-controller", lambda c: ServiceCIDRController(c.api, c.recorder, c.clock)),
    _cm("deployment-controller", lambda c: DeploymentController(c.api, c.recorder)),
    _cm(
        "replicaset-controller",
        lambda c: ReplicaSetController(c.api, c.recorder, seed=c.seed),
    ),
    _cm(
        "daemonset-controller",
        lambda c: DaemonSetController(c.api, c.recorder, seed=c.seed, clock=c.clock),
    ),
    _cm(
        "statefulset-controller",
        lambda c: StatefulSetController(c.api, c.recorder, clock=c.clock),
    ),
    # time-based work (schedules, deadlines, TTLs, pod GC's quarantine) is due with no event
    _cm("cronjob-controller", lambda c: CronJobController(c.api, c.recorder, c.clock), 1.0),
    _cm("job-controller", lambda c: JobController(c.api, c.recorder, c.clock, seed=c.seed), 1.0),
    _cm(
        "replication-controller",
        lambda c: ReplicationControllerController(c.api, c.recorder, seed=c.seed),
    ),
    _cm("garbage-collector", lambda c: GarbageCollector(c.api, c.recorder)),
    _cm("namespace-controller", lambda c: NamespaceController(c.api, c.recorder, c.clock)),
    _cm(
        "pod-garbage-collector",
        lambda c: PodGarbageCollector(c.api, c.recorder, c.clock),
        1.0,
    ),
    Component(
        "default-scheduler",
        SCHEDULER_GROUP,
        lambda c, _n: Scheduler(c.api, c.recorder, c.clock, seed=c.seed),
    ),
    Component(
        "kubelet",
        KUBELET_GROUP,
        _kubelet,
        lambda n: (("Node", f"metadata.name={n}"), ("Pod", f"spec.nodeName={n}")),
        per_node=True,
        idle_wakeup=0.5,  # commands that end (sleep N) end without an event
    ),
    _cm(
        "endpointslice-controller",
        lambda c: EndpointSliceController(c.api, c.recorder, seed=c.seed, clock=c.clock),
    ),
    _cm("disruption-controller", lambda c: DisruptionController(c.api, c.recorder, c.clock)),
    # node heartbeats' grace and NoExecute tolerationSeconds are due with no event
    _cm("node-lifecycle-controller", _node_lifecycle, 1.0),
    _cm(
        "taint-eviction-controller",
        lambda c: TaintEvictionController(c.api, c.recorder, c.clock),
        1.0,
    ),
    Component(
        "kube-proxy",
        KUBE_PROXY_GROUP,
        _kube_proxy,
        lambda n: (("Service", None), ("EndpointSlice", None), ("Node", f"metadata.name={n}")),
        per_node=True,
    ),
    Component(
        "kube-router",
        KUBE_ROUTER_GROUP,
        _kube_router,
        lambda n: (
            ("NetworkPolicy", None),
            ("Pod", None),
            ("Namespace", None),
            ("Node", f"metadata.name={n}"),
        ),
        per_node=True,  # its next_due says when the hold-off or the resync ends
    ),
)


def of_group(group: str) -> tuple[Component, ...]:
    """The registered components of ``group``, in registry order."""
    return tuple(c for c in COMPONENTS if c.group == group)


def component(name: str) -> Component:
    for c in COMPONENTS:
        if c.name == name:
            return c
    raise KeyError(name)


__all__ = [
    "CALICO_CNI",
    "COMPONENTS",
    "CONTROLLER_MANAGER",
    "CONTROLLER_MANAGER_GROUP",
    "GROUPS",
    "KUBELET_GROUP",
    "KUBE_PROXY",
    "KUBE_PROXY_GROUP",
    "KUBE_ROUTER",
    "KUBE_ROUTER_GROUP",
    "NODE_GROUPS",
    "SCHEDULER",
    "SCHEDULER_GROUP",
    "BuildContext",
    "Component",
    "Identity",
    "component",
    "identity_of",
    "node_identity",
    "of_group",
]
