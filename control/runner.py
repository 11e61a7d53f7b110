"""The deterministic runner: the whole control plane in one thread, driven to a fixed point.

:class:`ControlPlane` wires the apiserver, the node IPAM controller, the Deployment,
ReplicaSet, garbage-collector, namespace, pod-GC and EndpointSlice controllers, the
scheduler and one kubelet per node, plus any agents added with
:meth:`ControlPlane.add_agent` (per-node kube-proxies, ...). Every component keeps the
:class:`control.agents.Agent` protocol.

:meth:`ControlPlane.run_until_idle` repeats rounds (:meth:`ControlPlane.run_round` runs
one) until a round does no work:

* before each component's ``sync`` the runner reads the store's watch once, from the
  revision it last read, and hands every component the new events of its kinds
  (``handle``), in revision order; so each component sees every write made before it
  runs, including those of components earlier in the same round;
* components run in a fixed order (node IPAM, service CIDRs, deployment, replicaset, daemonset,
  statefulset, cronjob, job, replication controller, garbage collector, namespace, pod
  GC, scheduler, kubelets, endpointslice, disruption, node lifecycle, taint eviction,
  then added agents in the order added);
* each component's ``sync`` runs in one store batch (:func:`control.store.base.batched`):
  on etcd its writes go out in a few Txns when it returns instead of one round trip
  each; should another client have written a key the step wrote meanwhile, the step's
  other writes stand and every component re-lists;
* all randomness (pod names, slice names, scheduler tie-breaks) comes from generators
  seeded by ``seed``. Same store, same seed, same calls → same objects, same Events.

The runner reads the store through a
:class:`~control.informers.listwatch.StoreListerWatcher` (the same contract the live
driver, :mod:`control.live`, reads the HTTPS API through): one multi-kind watch read per
component step stands for every component's informers, which keeps the run
deterministic and cheap. The first run (or :meth:`ControlPlane.start`) lists the store and gives each component
its initial state (``resync``), so a control plane opened on a persistent store picks
up where the previous one stopped. A control plane started on a store known to be
converged (``start(converged_at=...)``, what a CLI apply or delete does) lists nothing:
each component starts when a change first reaches it, from the state at that revision. If the store compacted past the runner's revision,
the runner lists again. Every step leaves an Event: writes through the apiserver record
one, and the controllers add the Kubernetes ones (ScalingReplicaSet, SuccessfulCreate,
Scheduled, SandboxCreated, Started, ...).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from control.agents import Agent, pod_summaries
from control.agents.kubelet import Kubelet, KubeletPool
from control.agents.network import EmulatedCNI, NetworkPlugin
from control.apiserver.server import APIServer
from control.clock import Clock, FakeClock
from control.components import COMPONENTS, BuildContext
from control.controllers.base import GarbageCollector
from control.controllers.cronjob import CronJobController
from control.controllers.daemonset import DaemonSetController
from control.controllers.deployment import DeploymentController
from control.controllers.disruption import DisruptionController
from control.controllers.endpointslice import EndpointSliceController
from control.controllers.job import JobController
from control.controllers.namespace import NamespaceController
from control.controllers.nodelifecycle import NodeLifecycleController
from control.controllers.podgc import PodGarbageCollector
from control.controllers.replicaset import ReplicaSetController
from control.controllers.replicationcontroller import ReplicationControllerController
from control.controllers.servicecidr import ServiceCIDRController
from control.controllers.statefulset import StatefulSetController
from control.controllers.tainteviction import TaintEvictionController
from control.events import Recorder
from control.informers.listwatch import StoreListerWatcher
from control.nodeipamagent import NodeIPAMAgent
from control.scheduler import Scheduler
from control.store.base import (
    BatchConflictError,
    Store,
    WatchEvent,
    batched,
    first_states,
    track_first_states,
)
from netmodel.cluster import ClusterSpec
from netmodel.errors import CompactedError, SvclabError
from netmodel.objects import KubeObject

#: the :meth:`ControlPlane.start_work` answer: a pod was being deleted at the converged
#: revision
PODS_DELETING = "pods-deleting"


class ConvergenceError(SvclabError):
    """run_until_idle did not reach a fixed point within max_steps (components keep
    undoing each other's writes, or a reconcile keeps failing)."""


@dataclass
class Timing:
    """Where the time went, per component (seconds in handle + sync, steps)."""

    seconds: dict[str, float] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    dispatch_seconds: float = 0.0
    rounds: int = 0

    def add(self, name: str, seconds: float, steps: int = 0) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.steps[name] = self.steps.get(name, 0) + steps


class ControlPlane:
    """The control plane of one cluster over ``store``; see the module docstring."""

    def __init__(
        self,
        store: Store,
        cluster: ClusterSpec,
        *,
        seed: int = 0,
        clock: Clock | None = None,
        network_plugin: NetworkPlugin | None = None,
    ) -> None:
        self.store = store
        #: how components read the store (list, then watch from the list's revision)
        self.lister_watcher = StoreListerWatcher(store)
        self.cluster = cluster
        self.seed = seed
        self.clock: Clock = clock or FakeClock()
        self.recorder = Recorder(store, self.clock)
        self.apiserver = APIServer(store, cluster, clock=self.clock, recorder=self.recorder)
        self.network_plugin: NetworkPlugin = network_plugin or EmulatedCNI(
            calico=cluster.cni == "calico"
        )
        ctx = BuildContext(
            api=self.apiserver,
            recorder=self.recorder,
            clock=self.clock,
            seed=seed,
            cluster=cluster,
            network_plugin=lambda _node: self.network_plugin,
        )
        built: dict[str, Agent] = {}
        self.components: list[Agent] = []
        for spec in COMPONENTS:
            if spec.name == "kubelet":
                agent: Agent = KubeletPool(lambda n, spec=spec: spec.build(ctx, n))  # type: ignore[misc]
            elif spec.per_node:
                continue  # kube-proxies: the caller adds them (add_agent) with its sinks
            else:
                agent = spec.build(ctx, None)
            built[spec.name] = agent
            self.components.append(agent)
        self.nodeipam: NodeIPAMAgent = built["nodeipam-controller"]  # type: ignore[assignment]
        self.service_cidrs: ServiceCIDRController = built["service-cidr-controller"]  # type: ignore[assignment]
        self.deployments: DeploymentController = built["deployment-controller"]  # type: ignore[assignment]
        self.replicasets: ReplicaSetController = built["replicaset-controller"]  # type: ignore[assignment]
        self.daemonsets: DaemonSetController = built["daemonset-controller"]  # type: ignore[assignment]
        self.statefulsets: StatefulSetController = built["statefulset-controller"]  # type: ignore[assignment]
        self.cronjobs: CronJobController = built["cronjob-controller"]  # type: ignore[assignment]
        self.jobs: JobController = built["job-controller"]  # type: ignore[assignment]
        self.replicationcontrollers: ReplicationControllerController = built[
            "replication-controller"
        ]  # type: ignore[assignment]
        self.garbage_collector: GarbageCollector = built["garbage-collector"]  # type: ignore[assignment]
        self.namespaces: NamespaceController = built["namespace-controller"]  # type: ignore[assignment]
        self.pod_gc: PodGarbageCollector = built["pod-garbage-collector"]  # type: ignore[assignment]
        self.scheduler: Scheduler = built["default-scheduler"]  # type: ignore[assignment]
        self.kubelets: KubeletPool = built["kubelet"]  # type: ignore[assignment]
        self.endpointslices: EndpointSliceController = built["endpointslice-controller"]  # type: ignore[assignment]
        # the runner's slices carry no last-change-trigger-time: the network programming
        # SLI is the live kube-proxies' (their wall clock), not the deterministic runner's
        self.endpointslices.clock = None
        self.disruption: DisruptionController = built["disruption-controller"]  # type: ignore[assignment]
        self.node_lifecycle: NodeLifecycleController = built["node-lifecycle-controller"]  # type: ignore[assignment]
        self.taint_eviction: TaintEvictionController = built["taint-eviction-controller"]  # type: ignore[assignment]
        self.timing = Timing()
        self.pause_gc = True
        self._rev: int | None = None
        #: a start from a converged revision (see :meth:`start`): that revision, and the
        #: components not started yet (by id)
        self._converged_at: int | None = None
        self._unprimed: dict[int, Agent] = {}
        self._started = False
        self._kinds_cache: tuple[int, frozenset[str], list[frozenset[str]]] | None = None
        #: a converged start's answers (see :meth:`start_work`)
        self._start_work: dict[str, bool] | None = None

    # ---- lifecycle and writes

    def start(
        self, *, converged_at: int | None = None, start_work: Mapping[str, bool] | None = None
    ) -> None:
        """Bootstrap the cluster (namespaces, the kubernetes Service, the Nodes) and list
        the store into every component. Idempotent.

        ``converged_at``: the caller knows the store is converged at this revision (the
        last run to idle ended there, :mod:`control.noderules`). When it is the store's
        revision now and the store can record the states its writes overwrite
        (:func:`control.store.base.track_first_states`; SQLite), no component is listed
        here: a component starts when an event of its kinds first comes, from the
        store's state at ``converged_at`` (today's listing with every object written
        since put back as it was then), and is then given every event since. What it
        does is what a full start would have done, less the first resync's reconcile
        of every key, which on a converged store writes nothing: a component that
        defines ``prime(objects)`` is started through it (its cache filled, nothing
        queued), any other through ``resync``. A component none of whose kinds changed
        never starts: nothing it reads changed, so it has nothing to do, unless its
        ``has_start_work(store)`` says a full start would find work left (a retry: a pod
        still unscheduled, a pod its kubelet has not started): then it starts here. Should the
        record be lost (another process wrote to the store), every component not
        started yet is listed as a full start would (:meth:`_list`).

        ``start_work``: what :meth:`start_work` said at ``converged_at`` (recorded with
        it): those answers are taken instead of reading every pod, as long as no Pod and
        no Node has been written since (bootstrap may create Nodes)."""
        if self._started:
            return
        if (
            converged_at is not None
            and self._rev is None
            and converged_at == self.store.revision
            and track_first_states(self.store) == converged_at
        ):
            self._rev = self._converged_at = converged_at
            self._unprimed = {id(c): c for c in self.components}
        self.apiserver.bootstrap()
        self.apiserver.bootstrap_nodes()
        self._started = True
        if self._rev is None:
            self._list()
            return
        if self._converged_at is None:
            return
        _, per_comp = self._kinds()
        checks = [
            (comp, ks, has_work)
            for comp, ks in zip(list(self.components), per_comp, strict=True)
            if (has_work := getattr(comp, "has_start_work", None)) is not None
        ]
        wanted = {PODS_DELETING, *(_name(comp) for comp, _, _ in checks)}
        if start_work is not None and wanted <= start_work.keys() and self._pods_unwritten():
            self._start_work = {k: bool(start_work[k]) for k in sorted(wanted)}
        else:
            pods = pod_summaries(self.store)
            self._start_work = {
                _name(comp): bool(has_work(self.store, pods)) for comp, _, has_work in checks
            }
            self._start_work[PODS_DELETING] = any(p.deletion_timestamp is not None for p in pods)
        for comp, ks, _ in checks:
            if self._start_work[_name(comp)] and id(comp) in self._unprimed:
                self._prime(comp, ks)  # a retry a full start makes (e.g. unscheduled pods)

    def _pods_unwritten(self) -> bool:
        """Whether no Pod and no Node was written since the converged revision (what
        ``has_start_work`` reads), as far as the store's record says."""
        first = first_states(self.store)
        return first is not None and not any(kind in ("Pod", "Node") for kind, _ in first)

    def start_work(self) -> dict[str, bool] | None:
        """What a full start on the store as it is now would find to do, per component
        with a ``has_start_work`` (by name), and whether a pod is being deleted
        (``pods-deleting``), when this run knows it without reading every pod: it
        started from a converged revision, read or was given the answers there, and has
        written no Pod and no Node since. None otherwise. Recorded with the converged
        revision (:func:`control.noderules.record_converged`) for the next start."""
        if self._converged_at is None or self._start_work is None or not self._pods_unwritten():
            return None
        return dict(self._start_work)

    @property
    def started_from_converged(self) -> bool:
        """Whether :meth:`start` took the converged path (and no relist undid it)."""
        return self._converged_at is not None

    def apply(
        self, objs: Sequence[KubeObject], source: str | None = None
    ) -> list[tuple[str, KubeObject]]:
        """Apply manifests through the apiserver (all-or-nothing); run_until_idle converges."""
        return self.apiserver.apply(objs, source=source)

    def delete(self, kind: str, key: str) -> KubeObject:
        """Delete through the apiserver, as ``kubectl delete`` (cascade by the GC)."""
        return self.apiserver.delete(kind, key)

    def add_agent(self, agent: Agent) -> None:
        """Add a component (e.g. a node's kube-proxy). It runs after the built-in ones,
        and starts from a listing of its kinds at its first round."""
        self.components.append(agent)
        if self._converged_at is not None:
            self._unprimed[id(agent)] = agent  # started by its first event (see start)
        elif self._rev is not None:
            self._start_component(agent, self._listing(agent.kinds))

    def kubelet(self, node_name: str) -> Kubelet:
        return self.kubelets.kubelet(node_name)

    # ---- the loop

    def run_until_idle(self, max_steps: int = 1_000_000) -> int:
        """Run rounds until none does any work; returns the number of steps (reconciles,
        scheduling attempts, kubelet syncs, agent steps). Raises ConvergenceError when
        ``max_steps`` is exceeded.

        Python's cyclic garbage collector is paused for the run (when :attr:`pause_gc`)
        and restored after: everything the control plane makes is an immutable, acyclic
        value that reference counting frees, while each full collection would rescan
        every stored object (measured: ~40% of the CPU time of a 30,000-pod run). At the
        end the objects alive are frozen (``gc.freeze``), for the same reason."""
        with _gc_paused(self.pause_gc, freeze=True):
            steps = self._run(max_steps)
        flush = getattr(self.store, "flush", None)
        if flush is not None:  # idle: let other processes see the results (SQLite)
            flush()
        return steps

    def run_round(self) -> int:
        """Run one round: every component, in order, gets the events it has not seen and
        syncs once. Returns the steps done (0: the control plane was idle). What tests
        use to observe the store between rounds (e.g. the states a rollout goes through);
        :meth:`run_until_idle` is this, repeated."""
        with _gc_paused(self.pause_gc):
            if self._rev is None:
                self._list()
            return self._round()

    def _round(self) -> int:
        self.timing.rounds += 1
        worked = 0
        for comp in self.components:
            self._pump()
            if id(comp) in self._unprimed:
                continue  # not started: nothing it reads changed (see start)
            t0 = time.perf_counter()
            try:
                with batched(self.store):
                    n = comp.sync()
            except BatchConflictError:
                # another client wrote keys this step wrote (its other writes landed):
                # every component starts again from the store's state
                n = 1
                self._list()
            self.timing.add(_name(comp), time.perf_counter() - t0, n)
            worked += n
        return worked

    def _run(self, max_steps: int) -> int:
        if self._rev is None:
            self._list()
        steps = 0
        while True:
            worked = self._round()
            steps += worked
            if worked == 0:  # no component wrote anything: every event has been seen
                return steps
            if steps > max_steps:
                raise ConvergenceError(
                    f"control plane not idle after {steps} steps (max_steps={max_steps})"
                )

    # ---- watch plumbing

    def _listing(self, kinds: Iterable[str]) -> list[KubeObject]:
        out: list[KubeObject] = []
        for kind in sorted(set(kinds)):
            out += self.lister_watcher.list(kind).objects
        return out

    def _start_component(
        self, comp: Agent, objs: list[KubeObject], *, converged: bool = False
    ) -> None:
        t0 = time.perf_counter()
        prime = getattr(comp, "prime", None) if converged else None
        resync = prime or getattr(comp, "resync", None)
        if resync is not None:
            resync(objs)
        else:
            comp.handle([WatchEvent("ADDED", o, o.resource_version) for o in objs])
        self.timing.add(_name(comp), time.perf_counter() - t0)

    def _prime(self, comp: Agent, kinds: frozenset[str]) -> bool:
        """Start ``comp`` from the converged revision (see :meth:`start`) and give it
        every event of its kinds since. False: the states that revision had are no
        longer known (every component was listed instead, :meth:`_list`)."""
        base = self._converged_at
        assert base is not None
        first = first_states(self.store)
        if first is None:
            self._list()
            return False
        del self._unprimed[id(comp)]
        later = frozenset(getattr(comp, "deferrable_kinds", ())) & kinds
        t0 = time.perf_counter()
        out = self._at_converged(kinds - later, first)
        if later:
            # listed only when the component first needs them (see prime_deferred)
            deleting = bool((self._start_work or {}).get(PODS_DELETING, True))
            comp.prime_deferred(  # type: ignore[attr-defined]
                out, lambda: self._at_converged(later), deleting
            )
            self.timing.add(_name(comp), time.perf_counter() - t0)
        else:
            self._start_component(comp, out, converged=True)
        try:
            evs = self.lister_watcher.poll(base, kinds)
        except CompactedError:
            self._list()
            return False
        t1 = time.perf_counter()
        try:
            comp.handle(evs)
        except _RecordLost:
            self._list()
            return False
        self.timing.add(_name(comp), time.perf_counter() - t1)
        return True

    def _at_converged(
        self,
        kinds: Iterable[str],
        first: dict[tuple[str, str], KubeObject | None] | None = None,
    ) -> list[KubeObject]:
        """The objects of ``kinds`` as they were at the converged revision, in kind then
        key order: today's listing with every object written since put back as it was
        then. Raises :class:`_RecordLost` when those states are no longer known."""
        if first is None:
            first = first_states(self.store)
            if first is None:
                raise _RecordLost
        out: list[KubeObject] = []
        for kind in sorted(kinds):
            listed = self.lister_watcher.list(kind).objects
            written = {key: before for (k, key), before in first.items() if k == kind}
            if not written:
                out += listed
                continue
            now = {o.key: o for o in listed}
            for key, before in written.items():
                if before is None:
                    now.pop(key, None)
                else:
                    now[key] = before
            out += [now[key] for key in sorted(now)]
        return out

    def _list(self) -> None:
        """Give every component the current state (initial list, or after compaction)."""
        self._converged_at = None
        self._unprimed = {}
        rev = self.store.revision
        cache: dict[str, list[KubeObject]] = {}
        for comp in self.components:
            objs: list[KubeObject] = []
            for kind in sorted(set(comp.kinds)):
                if kind not in cache:
                    cache[kind] = self.lister_watcher.list(kind).objects
                objs += cache[kind]
            self._start_component(comp, objs)
        self._rev = rev

    def _kinds(self) -> tuple[frozenset[str], list[frozenset[str]]]:
        """Every watched kind, and each component's kinds (cached per component list)."""
        if self._kinds_cache is None or self._kinds_cache[0] != len(self.components):
            per = [frozenset(c.kinds) for c in self.components]
            union: frozenset[str] = frozenset().union(*per)
            self._kinds_cache = (len(self.components), union, per)
        return self._kinds_cache[1], self._kinds_cache[2]

    def _pump(self) -> None:
        """Deliver the watch events since the last read to every component."""
        assert self._rev is not None
        t0 = time.perf_counter()
        rev = self.store.revision
        if rev == self._rev:
            return
        kinds, per_comp = self._kinds()
        try:
            events = self.lister_watcher.poll(self._rev, kinds)
        except CompactedError:
            self._list()
            return
        self._rev = max(rev, events[-1].revision) if events else rev
        if not events:
            return
        by_kinds: dict[frozenset[str], list[WatchEvent]] = {}
        # store kind (a custom resource's ``<plural>.<group>``, what components watch)
        # -> its events' positions (one pass)
        at: dict[str, list[int]] = {}
        for i, e in enumerate(events):
            k = e.object.store_kind
            pos = at.get(k)
            if pos is None:
                at[k] = [i]
            else:
                pos.append(i)
        handling = 0.0
        for comp, ks in zip(self.components, per_comp, strict=True):
            evs = by_kinds.get(ks)
            if evs is None:
                evs = by_kinds[ks] = _of_kinds(events, at, ks)
            if evs and id(comp) in self._unprimed:
                if not self._prime(comp, ks):
                    return  # every component was listed at the current revision
            elif evs:
                t1 = time.perf_counter()
                try:
                    comp.handle(evs)
                except _RecordLost:  # a deferred listing (prime_deferred) came too late
                    self._list()
                    return
                spent = time.perf_counter() - t1
                handling += spent
                self.timing.add(_name(comp), spent)
        self.timing.dispatch_seconds += time.perf_counter() - t0 - handling


def _of_kinds(
    events: list[WatchEvent], at: dict[str, list[int]], kinds: frozenset[str]
) -> list[WatchEvent]:
    """The events of ``kinds``, in their order in ``events`` (``at``: each kind's
    positions there): what filtering every event by kind gives, for the kinds that have
    events only (a component's handful of kinds among a batch of tens of thousands)."""
    runs = [at[k] for k in kinds if k in at]
    if not runs:
        return []
    if len(runs) == 1:
        return [events[i] for i in runs[0]]
    return [events[i] for i in sorted(i for run in runs for i in run)]


class _RecordLost(Exception):
    """The states the converged revision had are no longer known (another process wrote
    to the store): a component's deferred listing cannot be made; every component is
    listed instead. Not a :class:`SvclabError`: no reconcile may take it for a retry."""


@contextmanager
def _gc_paused(pause: bool, *, freeze: bool = False) -> Iterator[None]:
    """Pause the cyclic GC. ``freeze``: on the way out, move every object alive to the
    permanent generation (``gc.freeze``) before collections resume, else the first one
    rescans each object the run made (seconds at 30,000 pods). A run makes no reference
    cycles (tests/control/test_runner.py checks it), so nothing frozen is garbage that
    only the cyclic GC could free."""
    was = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause and was:
            if freeze:
                gc.freeze()
            gc.enable()


def _name(comp: object) -> str:
    return str(getattr(comp, "name", type(comp).__name__))


__all__ = ["Agent", "ControlPlane", "ConvergenceError", "NodeIPAMAgent", "Timing"]
