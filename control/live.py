"""The live driver: the control plane's components as API clients of ``svclab serve``.

The same component classes the deterministic runner (:mod:`control.runner`) drives —
node IPAM, Deployment, ReplicaSet, garbage-collector, namespace, pod-GC and
EndpointSlice controllers, the scheduler, one kubelet and one kube-proxy per node —
run here as threads of one process beside the server (``python -m control.live``,
started by :class:`LiveDriver`), each reading the cluster only through
informers over a :class:`~control.informers.listwatch.ListerWatcher` and writing only
through an API client, under its own identity:

==============================  =============================================  =========================
component                       identity (client certificate CN / O)           informers (kind: selector)
==============================  =============================================  =========================
controllers                     ``system:kube-controller-manager``             their kinds, all objects
scheduler                       ``system:kube-scheduler``                      Pod, Node
kubelet of node N               ``system:node:N`` / ``system:nodes``           Node ``metadata.name=N``,
                                                                               Pod ``spec.nodeName=N``
kube-proxy of node N            ``system:kube-proxy``                          Service, EndpointSlice,
                                                                               Node ``metadata.name=N``
kube-router of node N           ``system:serviceaccount:kube-system:           NetworkPolicy, Pod,
(NetworkPolicy agent)           kube-router``                                  Namespace,
                                                                               Node ``metadata.name=N``
==============================  =============================================  =========================

The components, their identities and informers come from the registry
(:data:`control.components.COMPONENTS`), which the deterministic runner and the process
supervisor iterate too. A plane built with ``groups=`` runs only those groups (one
component process of ``svclab serve --components processes``, :mod:`app.livehost`);
with ``leader_election=`` the controller-manager's and the scheduler's components act
only while the plane holds their Lease (:mod:`control.leaderelection`).

Informers are shared per identity and (kind, selector): one reflector thread each
(list, watch from the list's revision, relist on 410 Gone). Each component has one
worker thread, one lock and an inbox: an informer's reflector thread only appends its
event batch to the inbox (under the inbox's own short lock) and wakes the worker, so
one informer shared by many components (every kube-proxy's Service and EndpointSlice
informers) never waits for any of them to finish a sync. The worker, under the
component's lock, hands the inbox's batches to ``handle`` in the order they came, then
runs ``sync`` (which pops keys from the component's rate-limited
:class:`~control.informers.workqueue.WorkQueue` and reconciles each); so a key is
never reconciled twice at once, and ``handle`` and ``sync`` never overlap. A component
starts (``resync`` with its informers' contents) once all its informers have listed.
Failed reconciles come back after exponential backoff (5 ms doubling, capped at 30 s). Kubelets and kube-proxies
start for each Node the controller-manager's Node informer sees, one node at a time
(the next once the previous has listed), and stop when their Node is deleted; so do the
nodes' policy agents (kube-router), whose NetworkPolicy, Pod and Namespace informers
are shared by every node's agent, like the kube-proxies' Service and EndpointSlice
informers.

Every step logs one structured line to the ``svclab.live`` logger (stderr in
``svclab serve``): ``component=... synced=N pending=M ms=T`` at INFO when work was
done; kube-proxy adds ``mode=... payload_lines=...`` like kube-proxy's sync log.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from control.agents import Agent
from control.agents.kubelet import Kubelet
from control.agents.kubeproxy import KubeProxy
from control.clock import Clock, WallClock
from control.components import (
    CALICO_CNI,
    COMPONENTS,
    CONTROLLER_MANAGER,
    CONTROLLER_MANAGER_GROUP,
    GROUPS,
    KUBE_PROXY,
    KUBE_PROXY_GROUP,
    KUBE_ROUTER,
    KUBE_ROUTER_GROUP,
    KUBELET_GROUP,
    SCHEDULER,
    SCHEDULER_GROUP,
    BuildContext,
    Component,
    Identity,
    identity_of,
    node_identity,
)
from control.informers.informer import Reflector, SharedInformer
from control.informers.listwatch import ListerWatcher
from control.informers.remote import RemoteAPI
from control.informers.workqueue import ExponentialBackoff, WorkQueue
from control.leaderelection import LeaderElectionConfig, LeaderElector
from control.nodehost import EmulatedNodeHost, NodeHost
from control.startwindow import StartWindow
from control.store.base import WatchEvent
from netmodel.cluster import ClusterSpec
from netmodel.objects import KubeObject, Node, Pod

log = logging.getLogger("svclab.live")


@dataclass
class Connection:
    """What a component of one identity reads and writes through."""

    lister_watcher: ListerWatcher
    api: RemoteAPI


#: (identity, user agent) -> a connection authenticated as that identity
Connector = Callable[[Identity, str], Connection]


class _Informers:
    """One identity's shared informers, by (kind, field selector)."""

    def __init__(self, name: str, conn: Connection, watch_timeout: float) -> None:
        self.name = name
        self.conn = conn
        self.watch_timeout = watch_timeout
        self.informers: dict[tuple[str, str | None], SharedInformer] = {}
        self.reflectors: list[Reflector] = []

    def get(self, kind: str, field_selector: str | None = None) -> SharedInformer:
        inf = self.informers.get((kind, field_selector))
        if inf is None:
            inf = self.informers[(kind, field_selector)] = SharedInformer(
                kind, field_selector=field_selector
            )
            sel = f"[{field_selector}]" if field_selector else ""
            self.reflectors.append(
                Reflector(
                    self.conn.lister_watcher,
                    inf,
                    watch_timeout=self.watch_timeout,
                    name=f"{self.name}/{kind}{sel}",
                )
            )
        return inf

    def lister(self, kind: str) -> SharedInformer | None:
        """The synced informer of all objects of ``kind`` (reads come from its cache)."""
        inf = self.informers.get((kind, None))
        return inf if inf is not None and inf.synced.is_set() else None

    def caught_up(self, api: RemoteAPI) -> bool:
        """Whether these informers have seen every write ``api`` made (or it timed out)."""
        pending = api.pending_writes()
        if not pending:
            return True
        now = time.monotonic()
        done: list[tuple[str, str]] = []
        for (kind, key), (rv, when) in pending.items():
            infs = [inf for (k, _), inf in self.informers.items() if k == kind]
            if not infs or now - when > api.EXPECTATION_TIMEOUT:
                done.append((kind, key))
                continue
            for inf in infs:
                obj = inf.cache.get(kind, key)
                if rv is None:
                    seen = obj is None or obj.metadata.deletion_timestamp is not None
                else:
                    seen = inf.revision >= rv if obj is None else obj.resource_version >= rv
                if seen:
                    done.append((kind, key))
                    break
        api.observed(done)
        return len(done) == len(pending)


class LiveComponent:
    """One component, its informers, its lock and its worker (see the module docstring)."""

    def __init__(
        self,
        name: str,
        agent: Agent,
        informers: Sequence[SharedInformer],
        *,
        resync: Callable[[list[KubeObject]], None] | None = None,
        idle_wakeup: float | None = None,
        writes: tuple[_Informers, RemoteAPI] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.clock: Clock = clock or WallClock()
        self.writes = writes
        self.agent = agent
        self.informers = list(informers)
        self._resync = resync or getattr(agent, "resync", None)
        self.idle_wakeup = idle_wakeup
        self.lock = threading.Lock()
        #: event batches not yet handed to the agent (oldest first), under ``_inbox_lock``
        self._inbox: list[Sequence[WatchEvent]] = []
        self._inbox_lock = threading.Lock()
        self.wake = threading.Event()
        self.started = threading.Event()
        self.syncs = 0
        self.steps = 0
        for inf in self.informers:
            inf.add_handler(self._on_events)
        queue = getattr(agent, "queue", None)
        if isinstance(queue, WorkQueue):
            queue.use(ExponentialBackoff(), WallClock())

    def detach(self) -> None:
        """Stop receiving informer events (the component is being stopped)."""
        for inf in self.informers:
            inf.remove_handler(self._on_events)

    def _on_events(self, events: Sequence[WatchEvent]) -> None:
        """An informer's handler (on its reflector's thread): queue the batch in the inbox
        and wake the worker; never waits for a sync (the component's lock)."""
        with self._inbox_lock:
            if not self.started.is_set():
                return  # the start snapshot, taken later, contains them
            self._inbox.append(events)
        self.wake.set()

    def _drain(self) -> int:
        """Hand the inbox's batches to the agent, oldest first (under ``self.lock``);
        returns how many batches."""
        with self._inbox_lock:
            batches, self._inbox = self._inbox, []
        for events in batches:
            self.agent.handle(events)
        return len(batches)

    def _start(self) -> None:
        with self.lock:
            # from here on events go to the inbox: one that lands in an informer's cache
            # after the snapshot below is queued, not lost (one already in the snapshot
            # may come again from the inbox, which ``handle`` takes as a no-op update)
            with self._inbox_lock:
                self.started.set()
            objs: list[KubeObject] = []
            for inf in self.informers:
                objs += inf.objects()
            if self._resync is not None:
                self._resync(objs)
            else:
                self.agent.handle([WatchEvent("ADDED", o, o.resource_version) for o in objs])
        log.info("component=%s started objects=%d", self.name, len(objs))

    def _pending(self) -> int:
        pending = getattr(self.agent, "pending", None)
        return int(pending()) if pending is not None else 0

    def _wait_time(self) -> float | None:
        """Until the next delayed retry is due, the agent's own next due time
        (``next_due()``: a clock time, e.g. a kubelet's container timers or a
        kube-proxy's next sync), or ``idle_wakeup`` (time-based work), whichever comes
        first; None: until an event wakes it."""
        waits: list[float] = []
        queue = getattr(self.agent, "queue", None)
        due = queue.next_ready_in() if isinstance(queue, WorkQueue) else None
        if due is not None:
            waits.append(max(due, 0.001))
        next_due = getattr(self.agent, "next_due", None)
        at = next_due() if next_due is not None else None
        if at is not None:
            waits.append(max(at - self.clock.now(), 0.001))
        if self.idle_wakeup is not None:
            waits.append(self.idle_wakeup)
        return min(waits, default=None)

    def run(self, stop: threading.Event) -> None:
        try:
            self._run(stop)
        finally:
            log.info("component=%s stopped", self.name)

    def _run(self, stop: threading.Event) -> None:
        for inf in self.informers:  # (a second's wait: thousands of these may wait)
            while not inf.synced.wait(1.0):
                if stop.is_set():
                    return
        if stop.is_set():
            return
        self._start()
        self.wake.set()
        while not stop.is_set():
            self.wake.wait(self._wait_time())
            self.wake.clear()
            if stop.is_set():
                return
            self.step()

    def step(self) -> int:
        """Sync until nothing is ready (each sync reconciles the keys queued when it
        began); returns the steps done. Errors other than refused writes are logged,
        never fatal: the keys come back through the informers."""
        total = 0
        t0 = time.perf_counter()
        for _ in range(100):
            with self.lock:
                caught_up = self.writes is None or self.writes[0].caught_up(self.writes[1])
                self._drain()  # after: every event its caches held then is handled
                if not caught_up:
                    break  # its own writes are not in its cache yet: the next event wakes it
                try:
                    n = self.agent.sync()
                except Exception as e:
                    log.error("component=%s sync failed: %s: %s", self.name, type(e).__name__, e)
                    n = 0
                pending = self._pending()
            total += n
            if n == 0 or pending == 0:
                break
        if total:
            self.syncs += 1
            self.steps += total
            log.info(
                "component=%s synced=%d pending=%d ms=%.1f%s",
                self.name,
                total,
                self._pending(),
                (time.perf_counter() - t0) * 1e3,
                self._detail(),
            )
        return total

    def _detail(self) -> str:
        if isinstance(self.agent, KubeProxy) and self.agent.last is not None:
            payload = self.agent.last.restore_input
            return f" mode={self.agent.mode} payload_lines={payload.count(chr(10))}"
        return ""


class _KubeletAgent:
    """A single node's kubelet as an Agent whose ``resync`` takes a flat listing."""

    def __init__(self, kubelet: Kubelet) -> None:
        self.kubelet = kubelet
        self.name = f"kubelet/{kubelet.node_name}"
        self.kinds = kubelet.kinds
        self.queue = kubelet.queue

    def handle(self, events: Sequence[WatchEvent]) -> None:
        self.kubelet.handle(events)

    def resync(self, objs: list[KubeObject]) -> None:
        node = next(
            (o for o in objs if isinstance(o, Node) and o.name == self.kubelet.node_name), None
        )
        self.kubelet.resync(node, [o for o in objs if isinstance(o, Pod)])

    def pending(self) -> int:
        return self.kubelet.pending()

    def next_due(self) -> float | None:
        return self.kubelet.next_due()

    def sync(self) -> int:
        return self.kubelet.sync()


@dataclass
class _NodeAgents:
    """What runs for one Node (see :meth:`LiveControlPlane._stop_node`)."""

    stop: threading.Event
    components: list[LiveComponent] = field(default_factory=list)
    connection: Connection | None = None
    #: the per-node Node informers on a shared connection (kube-proxy's, kube-router's)
    node_informers: list[tuple[_Informers, tuple[str, str]]] = field(default_factory=list)
    #: the kubelet alone (:meth:`LiveControlPlane.stop_kubelet`): its stop, its component
    kubelet_stop: threading.Event = field(default_factory=threading.Event)
    kubelet: LiveComponent | None = None


class LiveControlPlane:
    """Runs the components of the registry (:mod:`control.components`) as API clients
    until :meth:`stop`; see the module docstring.

    ``connect`` makes the connection of an identity (the serving process gives one over
    HTTPS with a client certificate issued from the cluster CA).

    ``groups``: the component groups this plane runs (default: every group, the threaded
    mode; a component process runs one). ``nodes``: the nodes whose kubelet and
    kube-proxy it runs (default: every Node the controller-manager's Node informer sees,
    which needs the controller-manager group here too). ``leader_election``: the
    controller-manager's and the scheduler's components act only while this plane holds
    their Lease (:mod:`control.leaderelection`); ``on_lost`` is called when it loses one
    (a component process then exits, as kube's do)."""

    def __init__(
        self,
        connect: Connector,
        cluster: ClusterSpec,
        *,
        proxy_config: Any = None,
        seed: int = 0,
        clock: Clock | None = None,
        watch_timeout: float = 30.0,
        kube_proxies: bool = True,
        host: NodeHost | None = None,
        groups: Sequence[str] | None = None,
        nodes: Sequence[str] | None = None,
        leader_election: LeaderElectionConfig | None = None,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.connect = connect
        self.kube_proxies = kube_proxies
        self.cluster = cluster
        self.proxy_config = proxy_config
        self.seed = seed
        self.clock: Clock = clock or WallClock()
        self.watch_timeout = watch_timeout
        self.groups = tuple(groups) if groups is not None else GROUPS
        unknown = set(self.groups) - set(GROUPS)
        if unknown:
            raise ValueError(f"unknown component groups: {sorted(unknown)}")
        self.fixed_nodes = tuple(nodes) if nodes is not None else None
        if (
            self.fixed_nodes is None
            and not set(self.groups).isdisjoint((KUBELET_GROUP, KUBE_PROXY_GROUP, KUBE_ROUTER_GROUP))
            and CONTROLLER_MANAGER_GROUP not in self.groups
        ):
            raise ValueError(
                "node agents follow Nodes through the controller-manager: name the nodes"
            )
        self.leader_election = leader_election
        self.on_lost = on_lost
        #: the leader electors of this plane, by Lease name, and the Lease it lost
        self.electors: dict[str, LeaderElector] = {}
        self.lost_lease: str | None = None
        #: what each node's kubelet and kube-proxy act on (default: emulated nodes)
        self.host: NodeHost = host or EmulatedNodeHost(cluster)
        #: Calico's attachment keeps one table of the addresses every pod of the
        #: cluster holds (a block address may lie in another node's podCIDR), fed from
        #: a Pod informer over every pod: the controller-manager's in the threaded mode,
        #: the Calico CNI plugin's own identity in a kubelet process; flannel's state
        #: is per node
        self._calico_cni = (
            getattr(self.host, "calico", None) if KUBELET_GROUP in self.groups else None
        )
        self._ipam_pods: SharedInformer | None = None
        self.components: dict[str, LiveComponent] = {}
        self._groups: list[_Informers] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._nodes_lock = threading.Lock()
        #: node -> what runs for it: its stop event, its components, the kubelet's
        #: connection and the kube-proxy's Node informer
        self._nodes: dict[str, _NodeAgents] = {}
        self._node_starts: queue.Queue[str] = queue.Queue()
        self._connections: list[Connection] = []
        self._spawned: set[str] = set()
        self._reflecting: set[int] = set()
        self._running = False
        self.proxy_group: _Informers | None = None
        #: the policy agents' identity (its informers shared by every node's agent)
        self.router_group: _Informers | None = None

    # ---- wiring

    def _identity(self, ident: Identity, agent: str) -> _Informers:
        conn = self.connect(ident, agent)
        self._connections.append(conn)
        group = _Informers(ident.user, conn, self.watch_timeout)
        self._groups.append(group)
        return group

    def _add(self, comp: LiveComponent, stop: threading.Event | None = None) -> None:
        self.components[comp.name] = comp
        if self._running:
            self._spawn(comp, stop)

    def _spawn(self, comp: LiveComponent, stop: threading.Event | None = None) -> None:
        if comp.name in self._spawned or self._stop.is_set():
            return
        self._spawned.add(comp.name)
        t = threading.Thread(
            target=comp.run, args=(stop or self._stop,), name=comp.name, daemon=True
        )
        self._threads.append(t)
        t.start()

    def _start_reflectors(self, group: _Informers, stop: threading.Event | None = None) -> None:
        """Start the group's reflectors not started yet; they run until ``stop`` (default:
        the plane's)."""
        for r in list(group.reflectors):
            if id(r) in self._reflecting:
                continue
            self._reflecting.add(id(r))
            t = threading.Thread(
                target=self._reflect,
                args=(r, stop or self._stop),
                name=f"reflector {r.name}",
                daemon=True,
            )
            self._threads.append(t)
            t.start()

    @staticmethod
    def _reflect(r: Reflector, stop: threading.Event) -> None:
        try:
            r.run(stop)
        finally:
            log.info("reflector=%s stopped", r.name)

    def _build_group(self, group: _Informers, specs: Sequence[Component]) -> list[LiveComponent]:
        """The cluster-wide components ``specs`` of one identity: each with an API client
        of its own (its own write expectations) reading the identity's caches."""
        client = group.conn.api.client
        rec = group.conn.api.recorder
        out: list[LiveComponent] = []
        for spec in specs:
            api = RemoteAPI(client, clock=self.clock, cache_source=group.lister)
            ctx = BuildContext(api, rec, self.clock, self.seed, self.cluster)
            agent = spec.build(ctx, None)
            kinds = (
                spec.informers(None)
                if spec.informers is not None
                else tuple((k, None) for k in sorted(agent.kinds))
            )
            comp = LiveComponent(
                spec.name,
                agent,
                [group.get(k, sel) for k, sel in kinds],
                writes=(group, api),
                idle_wakeup=spec.idle_wakeup,
                clock=self.clock,
            )
            self.components[spec.name] = comp
            out.append(comp)
        return out

    def start(self) -> None:
        """Build the components of this plane's groups and start their threads."""
        cm: _Informers | None = None
        first: _Informers | None = None
        for name in (CONTROLLER_MANAGER_GROUP, SCHEDULER_GROUP):
            if name not in self.groups:
                continue
            group = self._identity(identity_of(name), name)
            first = first or group
            if name == CONTROLLER_MANAGER_GROUP:
                cm = group
        if first is not None:
            client = first.conn.api.client
            while not client.ready():  # the server may not be listening yet
                if self._stop.wait(0.05):
                    return
        elected: list[tuple[_Informers, list[LiveComponent]]] = []
        for group in self._groups:
            gname = (
                CONTROLLER_MANAGER_GROUP
                if group.name == CONTROLLER_MANAGER.user
                else SCHEDULER_GROUP
            )
            specs = [c for c in COMPONENTS if c.group == gname]
            comps = self._build_group(group, specs)
            if self.leader_election is not None:
                elected.append((group, comps))
        if self._calico_cni is not None:
            # Calico's IPAM is cluster-wide: the shared table learns every pod's address
            # (and the node starter waits for that list), so that no kubelet hands out
            # an address a pod of another node holds
            src = cm if cm is not None else self._identity(CALICO_CNI, "calico-cni-plugin")
            self._ipam_pods = src.get("Pod")
            self._ipam_pods.add_handler(self._on_pods_for_ipam)
        if (
            self.fixed_nodes is None
            and cm is not None
            and not set(self.groups).isdisjoint((KUBELET_GROUP, KUBE_PROXY_GROUP, KUBE_ROUTER_GROUP))
        ):
            # kubelets and kube-proxies follow the Nodes the controller-manager sees
            cm.get("Node").add_handler(self._on_nodes)
        if KUBE_PROXY_GROUP in self.groups and self.kube_proxies:
            self.proxy_group = self._identity(KUBE_PROXY, "kube-proxy")
            self.proxy_group.get("Service")  # the informers every kube-proxy shares
            self.proxy_group.get("EndpointSlice")
        if KUBE_ROUTER_GROUP in self.groups:
            self.router_group = self._identity(KUBE_ROUTER, "kube-router")
            for kind in ("NetworkPolicy", "Pod", "Namespace"):  # shared by every node's
                self.router_group.get(kind)
        electing = {id(c) for _, comps in elected for c in comps}
        with self._nodes_lock:
            self._running = True
            starter = threading.Thread(target=self._node_starter, name="node-starter", daemon=True)
            self._threads.append(starter)
            starter.start()
            for comp in list(self.components.values()):
                if id(comp) not in electing:
                    self._spawn(comp)
            for group in list(self._groups):
                self._start_reflectors(group)
            for node in self.fixed_nodes or ():
                self._nodes[node] = _NodeAgents(threading.Event())
                self._node_starts.put(node)
        for group, comps in elected:
            self._elect(group, comps)

    def _elect(self, group: _Informers, comps: list[LiveComponent]) -> None:
        """Run ``comps`` only while this plane leads ``group``'s Lease."""
        assert self.leader_election is not None
        lease = (
            "kube-controller-manager" if group.name == CONTROLLER_MANAGER.user else "kube-scheduler"
        )
        elector = LeaderElector(group.conn.api.client, lease, self.leader_election)
        self.electors[lease] = elector

        def started() -> None:
            for comp in comps:
                self._spawn(comp)

        def stopped() -> None:
            self.lost_lease = lease
            if self.on_lost is not None:
                self.on_lost(lease)

        t = threading.Thread(
            target=elector.run,
            args=(self._stop, started, stopped),
            name=f"elector {lease}",
            daemon=True,
        )
        self._threads.append(t)
        t.start()

    def _on_pods_for_ipam(self, events: Sequence[WatchEvent]) -> None:
        assert self._calico_cni is not None
        for ev in events:
            if isinstance(ev.object, Pod):
                self._calico_cni.note(ev.object, gone=ev.type == "DELETED")

    def _on_nodes(self, events: Sequence[WatchEvent]) -> None:
        for ev in events:
            if not isinstance(ev.object, Node):
                continue
            if ev.type == "DELETED":
                self._stop_node(ev.object.name)
            else:
                with self._nodes_lock:
                    if ev.object.name not in self._nodes and not self._stop.is_set():
                        self._nodes[ev.object.name] = _NodeAgents(threading.Event())
                        self._node_starts.put(ev.object.name)

    #: seconds a node's start counts as in flight at most (its informers not listed yet)
    NODE_START_WAIT = 5.0
    #: node starts in flight at once (:class:`control.startwindow.StartWindow`)
    NODE_START_WINDOW = 16

    def _node_starter(self) -> None:
        """Start the nodes' kubelets and kube-proxies, at most :data:`NODE_START_WINDOW`
        at a time: a start is in flight until its informers have listed (or for
        :data:`NODE_START_WAIT`). One at a time, 5,000 nodes took most of an hour on a
        busy host; all at once, thousands of TLS handshakes and LISTs would queue on the
        server at the same instant, most of them timing out and retrying."""
        window = StartWindow(self.NODE_START_WINDOW, self.NODE_START_WAIT)
        while window.wait_for_room(self._stop):
            try:
                node = self._node_starts.get(timeout=0.5)
            except queue.Empty:
                continue
            if self._ipam_pods is not None:  # Calico: the cluster's addresses first
                self._ipam_pods.synced.wait(self.NODE_START_WAIT)
            agents = self._start_node(node)
            if agents is not None:
                window.admit(inf for comp in agents.components for inf in comp.informers)

    def _node_context(self, api: RemoteAPI) -> BuildContext:
        return BuildContext(
            api,
            api.recorder,
            self.clock,
            self.seed,
            self.cluster,
            network_plugin=self.host.network_plugin,
            rule_sink=self.host.rule_sink,
            policy_sink=self.host.policy_sink,
            proxy_config=self.proxy_config,
            prober=self.host.prober,
            graceful=True,  # deleted pods run their preStop hooks, serving
        )

    def _start_node(self, node: str) -> _NodeAgents | None:
        with self._nodes_lock:
            agents = self._nodes.get(node)
            if agents is None or agents.components or self._stop.is_set():
                return None  # deleted meanwhile, or started
            started: list[str] = []
            for spec in COMPONENTS:
                if not spec.per_node or spec.group not in self.groups:
                    continue
                assert spec.informers is not None
                if spec.group == KUBELET_GROUP:
                    self._start_kubelet(node, agents)
                elif (pg := self._shared_node_group(spec.group)) is not None:
                    # kube-proxy, kube-router: one identity, informers shared by nodes
                    agent = spec.build(self._node_context(pg.conn.api), node)
                    infs = spec.informers(node)
                    agents.node_informers += [
                        (pg, (k, sel)) for k, sel in infs if k == "Node" and sel is not None
                    ]
                    comp = LiveComponent(
                        str(getattr(agent, "name", f"{spec.name}/{node}")),
                        agent,
                        [pg.get(k, sel) for k, sel in infs],
                        idle_wakeup=spec.idle_wakeup,
                        clock=self.clock,
                    )
                    agents.components.append(comp)
                    self._add(comp, agents.stop)
                    self._start_reflectors(pg, agents.stop)  # the node's informer only
                else:
                    continue
                started.append(spec.group)
            log.info("node=%s %s started", node, " and ".join(started) or "nothing")
            return agents

    def _shared_node_group(self, group: str) -> _Informers | None:
        """The shared identity of a per-node group other than the kubelet's (None: the
        group does not run here)."""
        if group == KUBE_PROXY_GROUP:
            return self.proxy_group
        if group == KUBE_ROUTER_GROUP:
            return self.router_group
        return None

    def _start_kubelet(self, node: str, agents: _NodeAgents) -> None:
        """Start the node's kubelet (under the nodes lock): its own connection, identity,
        informers and worker, all ending with ``agents.kubelet_stop``."""
        spec = next(c for c in COMPONENTS if c.group == KUBELET_GROUP)
        assert spec.informers is not None
        kg = self._identity(node_identity(node), f"kubelet/{node}")
        agents.connection = kg.conn
        kapi = kg.conn.api
        kubelet = spec.build(self._node_context(kapi), node)
        assert isinstance(kubelet, Kubelet)
        kagent = _KubeletAgent(kubelet)
        agents.kubelet = LiveComponent(
            kagent.name,
            kagent,
            [kg.get(k, sel) for k, sel in spec.informers(node)],
            writes=(kg, kapi),
            idle_wakeup=spec.idle_wakeup,
            clock=self.clock,
        )
        agents.components.append(agents.kubelet)
        self._add(agents.kubelet, agents.kubelet_stop)
        self._start_reflectors(kg, agents.kubelet_stop)

    def stop_kubelet(self, node: str) -> bool:
        """Stop ``node``'s kubelet alone, as a killed kubelet process (its kube-proxy
        runs on): its worker and watches end, its connection closes, so its Lease is no
        longer renewed. False when it is not running. A narrow hook for tests and labs
        of node failure until each kubelet runs as a process of its own."""
        with self._nodes_lock:
            agents = self._nodes.get(node)
            comp = agents.kubelet if agents is not None else None
            if agents is None or comp is None:
                return False
            agents.kubelet_stop.set()
            comp.detach()
            comp.wake.set()
            self.components.pop(comp.name, None)
            self._spawned.discard(comp.name)
            agents.components.remove(comp)
            agents.kubelet = None
            if agents.connection is not None:
                self._groups = [g for g in self._groups if g.conn is not agents.connection]
                self._connections.remove(agents.connection)
                with contextlib.suppress(Exception):  # already closed
                    agents.connection.api.client.close()
                agents.connection = None
        log.info("node=%s kubelet stopped", node)
        return True

    def start_kubelet(self, node: str) -> bool:
        """Start again the kubelet :meth:`stop_kubelet` stopped (it relists its Node and
        pods). False when the node is unknown or its kubelet runs."""
        with self._nodes_lock:
            agents = self._nodes.get(node)
            if agents is None or agents.kubelet is not None or self._stop.is_set():
                return False
            agents.kubelet_stop = threading.Event()
            self._start_kubelet(node, agents)
        log.info("node=%s kubelet started again", node)
        return True

    def _stop_node(self, node: str) -> None:
        """The Node is gone: stop its kubelet, kube-proxy and kube-router (their threads
        end, and so do their reflectors: the kubelet's connection is closed at once, the
        others' Node watches, on their groups' shared connections, end at their next
        bookmark)."""
        with self._nodes_lock:
            agents = self._nodes.pop(node, None)
            if agents is None:
                return
            agents.stop.set()
            agents.kubelet_stop.set()
            for comp in agents.components:
                comp.detach()
                comp.wake.set()
                self.components.pop(comp.name, None)
                self._spawned.discard(comp.name)
            if agents.connection is not None:
                self._groups = [g for g in self._groups if g.conn is not agents.connection]
                self._connections.remove(agents.connection)
                with contextlib.suppress(Exception):  # already closed
                    agents.connection.api.client.close()
            for pg, key in agents.node_informers:
                inf = pg.informers.pop(key, None)
                pg.reflectors = [r for r in pg.reflectors if r.informer is not inf]
        self.host.release(node)
        log.info("node=%s deleted: its node agents stop", node)

    # ---- lifecycle

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every thread (closing the connections ends open watches)."""
        self._stop.set()
        with self._nodes_lock:
            for agents in self._nodes.values():
                agents.stop.set()
                agents.kubelet_stop.set()
        for comp in list(self.components.values()):
            comp.wake.set()
        for conn in self._connections:
            with contextlib.suppress(Exception):  # already closed
                conn.api.client.close()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> LiveControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- the serving seam


def https_connector(state_dir: Path, server: str) -> Connector:
    """Connections to ``server`` (``https://HOST:PORT``), each authenticated by a client
    certificate issued for its identity from the state directory's CA (``DIR/pki``)."""
    from control.apiserver.http import pki
    from control.informers.http import Credentials, HTTPListerWatcher, KubeClient

    ca = pki.load_ca(state_dir / "pki")
    lock = threading.Lock()

    def connect(ident: Identity, agent: str) -> Connection:
        with lock:
            cert, key = pki.client_cert(ca, ident.user, list(ident.groups))
        creds = Credentials(server=server, ca_pem=ca.pem, cert_pem=cert, key_pem=key)
        client = KubeClient(creds, user_agent=f"{agent} (svclab)")
        return Connection(HTTPListerWatcher(client), RemoteAPI(client))

    return connect


class LiveDriver:
    """The control-plane driver of ``svclab serve`` (the ``start``/``kick``/``stop``
    seam of :mod:`control.apiserver.http.driver`): a :class:`LiveControlPlane` whose
    components are HTTPS clients of this very server, in a process of its own
    (``python -m control.live``), as kube-controller-manager, kube-scheduler and the
    kubelets are processes of their own beside kube-apiserver. In the serving process
    their thousands of threads (three per node) would share one interpreter lock with
    the API's event loop and starve it.

    ``start`` (on the server's event loop, once the state holds a cluster) starts the
    child; it reads the cluster from the state directory and reaches the API over the
    network like any client. ``kick`` has nothing to do: components learn about writes
    from their watches. ``stop`` closes the child's standard input, which makes it
    stop its components and exit (so it also ends if the server dies). Every
    ``pump_every`` seconds the driver also pumps the server's watch hub, so that
    commits made by other processes to the state directory (CLI commands) reach the
    watchers too."""

    STOP_TIMEOUT = 20.0

    def __init__(
        self,
        api: Any,
        server: str,
        *,
        pump_every: float = 0.2,
        argv: Sequence[str] = ("-m", "control.live"),
        options: Sequence[str] = (),
    ) -> None:
        self.api = api
        self.server = server
        #: how the child is started: ``python ARGV STATE_DIR SERVER OPTIONS...`` (the
        #: composition root, app.livehost, gives its own entry point)
        self.argv = tuple(argv)
        self.options = tuple(options)
        self.pump_every = pump_every
        self.process: subprocess.Popen[bytes] | None = None
        self._pump_task: Any = None

    def start(self) -> None:
        import asyncio

        if self.process is not None or not self.api.fixed:
            return
        cmd = [sys.executable, *self.argv, str(self.api.state_dir), self.server, *self.options]
        if not getattr(self.api.session, "with_proxies", True):
            cmd.append("--no-kube-proxies")
        self.process = subprocess.Popen(cmd, stdin=subprocess.PIPE)
        self._pump_task = asyncio.get_running_loop().create_task(self._pump())
        log.info(
            "live control plane starting (pid %d): components are API clients of %s",
            self.process.pid,
            self.server,
        )

    async def _pump(self) -> None:
        import asyncio

        while True:
            await asyncio.sleep(self.pump_every)
            try:
                self.api.pump()
            except Exception:  # keep serving; the error is logged
                log.exception("watch pump failed")

    def kick(self) -> None:
        return None

    async def stop(self) -> None:
        import asyncio

        if self._pump_task is not None:
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump_task
            self._pump_task = None
        proc = self.process
        if proc is None:
            return
        self.process = None
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            await asyncio.to_thread(proc.wait, self.STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.warning("live control plane (pid %d) did not stop: killed", proc.pid)
            proc.kill()
            await asyncio.to_thread(proc.wait)


#: the file in the state directory naming the nodes whose kubelet is to be stopped (one a
#: line; a name removed starts it again): what `svclab kubelet stop|start` writes
STOPPED_KUBELETS = "kubelets-stopped"


def stopped_kubelets(state_dir: Path) -> set[str]:
    """The nodes ``STATE_DIR/kubelets-stopped`` names (``svclab kubelet stop``)."""
    try:
        text = (state_dir / STOPPED_KUBELETS).read_text()
    except FileNotFoundError:
        return set()
    return {line.strip() for line in text.splitlines() if line.strip()}


def _follow_stopped_kubelets(plane: LiveControlPlane, path: Path, stopped: set[str]) -> set[str]:
    """Stop the kubelets ``path`` names and start again those it no longer names; the
    names now stopped."""
    try:
        want = {line.strip() for line in path.read_text().splitlines() if line.strip()}
    except FileNotFoundError:
        want = set()
    except OSError as e:
        log.error("%s: %s", path, e)
        return stopped
    for node in sorted(want - stopped):
        plane.stop_kubelet(node)
    for node in sorted(stopped - want):
        plane.start_kubelet(node)
    return want


def load_config(state_dir: Path) -> tuple[ClusterSpec, Any]:
    """The cluster and the KubeProxyConfiguration (or None) the components of
    ``state_dir``'s cluster run with: ``cluster.yaml`` and ``kube-proxy.yaml``, or, for a
    store that keeps the documents itself (etcd), the documents it holds."""
    import yaml

    from netmodel.cluster import cluster_from_dict
    from netmodel.proxyconfig import proxy_config_from_dict

    cfile = state_dir / "cluster.yaml"
    if not cfile.exists():
        from control.session import Session

        session = Session.open(state_dir, read_only=True)
        try:
            return session.cluster.spec, session.proxy_config
        finally:
            session.close()
    spec = cluster_from_dict(yaml.safe_load(cfile.read_text()), file=str(cfile)).spec
    pfile = state_dir / "kube-proxy.yaml"
    proxy_config = (
        proxy_config_from_dict(yaml.safe_load(pfile.read_text()), file=str(pfile))
        if pfile.exists()
        else None
    )
    return spec, proxy_config


def follow_stopped_kubelets(
    plane: LiveControlPlane, state_dir: Path, done: threading.Event
) -> None:
    """Until ``done``: every half second, stop the kubelets ``STATE_DIR/kubelets-stopped``
    names and start again those it no longer names (:meth:`LiveControlPlane.stop_kubelet`)."""
    stopped: set[str] = set()
    while not done.wait(0.5):
        stopped = _follow_stopped_kubelets(plane, state_dir / STOPPED_KUBELETS, stopped)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m control.live STATE_DIR SERVER [--no-kube-proxies]``: run the live
    control plane of the cluster stored in STATE_DIR against the API at SERVER until
    standard input ends (its server closed it, or died) or SIGTERM/SIGINT. Every half
    second it stops the kubelets ``STATE_DIR/kubelets-stopped`` names (one node a line)
    and starts again those it no longer names (:meth:`LiveControlPlane.stop_kubelet`)."""
    import argparse
    import signal

    from netmodel import podhealth

    ap = argparse.ArgumentParser(prog="python -m control.live")
    ap.add_argument("state_dir", type=Path)
    ap.add_argument("server")
    ap.add_argument("--no-kube-proxies", dest="kube_proxies", action="store_false")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request: too much
    spec, proxy_config = load_config(args.state_dir)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())

    def until_eof() -> None:
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.buffer.read(4096):
                pass
        done.set()

    threading.Thread(target=until_eof, name="stdin", daemon=True).start()
    plane = LiveControlPlane(
        https_connector(args.state_dir, args.server),
        spec,
        proxy_config=proxy_config,
        seed=spec.seed,
        kube_proxies=args.kube_proxies,
        host=EmulatedNodeHost(spec, health_root=podhealth.state_root(args.state_dir)),
    )
    starter = threading.Thread(target=plane.start, name="live-control-plane", daemon=True)
    starter.start()
    follow_stopped_kubelets(plane, args.state_dir, done)  # the main thread: signals
    plane.stop()
    log.info("live control plane stopped")
    return 0


__all__ = [
    "COMPONENTS",
    "CONTROLLER_MANAGER",
    "KUBE_PROXY",
    "SCHEDULER",
    "Connection",
    "Connector",
    "Identity",
    "LiveComponent",
    "LiveControlPlane",
    "LiveDriver",
    "https_connector",
    "main",
    "node_identity",
]


if __name__ == "__main__":
    raise SystemExit(main())
