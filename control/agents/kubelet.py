"""The kubelet: one per node, runs the pods bound to it (as far as networking cares).

For a pod bound to its node (``spec.nodeName``), :meth:`Kubelet.reconcile`:

1. creates the pod sandbox: calls the network plugin with CNI ADD semantics (pods with
   ``hostNetwork`` share the node's address instead) and records an Event
   ``SandboxCreated`` naming the address, the veth and the bridge;
2. writes the status: phase Running, ``podIP``/``podIPs``, ``hostIP`` = the node's
   InternalIP, conditions Initialized, Ready, ContainersReady and PodScheduled True,
   and one ``containerStatuses`` entry per container; then an Event ``Started`` per
   container;
3. when the pod is marked for deletion (``deletionTimestamp``): Event ``Killing`` per
   container, CNI DEL (the address becomes reusable), then
   ``finalize_pod_deletion`` removes the pod from the store.

A pod that arrives holding a ``status.podIP`` (a replayed dump) keeps that address: it
is reserved in the IPAM before anything is allocated, and CNI ADD hands it back.

It also renews the node's heartbeat, the Lease ``kube-node-lease/<node>``
(:mod:`control.agents.nodelease`): when it learns its Node and then every
:data:`~control.agents.nodelease.RENEW_INTERVAL` seconds of its clock (a delayed key of its
queue: the live driver wakes it; under the runner it is renewed at the kubelet's next
sync once due); a renewal writes the Lease as it last wrote it, without reading it
first, as upstream's ``latestLease`` (read again only when that write is refused). With
each renewal it posts its node's Ready condition True
(``KubeletReady``, a ``lastHeartbeatTime``) when the Node does not show it so (the node
lifecycle controller set it Unknown while this kubelet was gone): that is how a node
that comes back recovers. :attr:`Kubelet.lease_duration` is the kubelet's
``nodeLeaseDurationSeconds`` (the Cluster's ``nodeLifecycle``).
Containers run to completion when their command is one svclab evaluates
(:mod:`control.agents.containers`): the kubelet moves such a pod's ``containerStatuses``
as its commands end (restartPolicy, restart counts, crash-loop back-off; when the next
change is due on the clock, a :meth:`Kubelet.sync` after that time makes it), and a pod
that reaches Succeeded or Failed has its sandbox torn down (CNI DEL: the address is
free again; ``status.podIP`` stays, as kube keeps it). Other containers run forever.

Pods are ready as soon as they run (no probes). A pod whose node has no podCIDR yet is
retried when the Node object changes. :class:`KubeletPool` is how the runner drives all
kubelets as one component: it creates a kubelet per Node object and routes each watch
event to the kubelet of the node it concerns.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from control.agents import PodSummary, nodelease
from control.agents.commands import Program, program
from control.agents.containers import (
    TERMINAL,
    EmulatedRuntime,
    Runtime,
    advance,
    container_program,
    container_statuses,
    has_programs,
    restart_delay,
    start_runs,
    status_conditions,
)
from control.agents.emulatedprober import EmulatedProber
from control.agents.network import NetworkPlugin, PodNetworkResult, SandboxCollector
from control.agents.probes import TITLE, ProbeManager, Prober, Worker
from control.apiclient import APIClient
from control.clock import Clock, parse_rfc3339, rfc3339
from control.events import Recorder
from control.informers.workqueue import WorkQueue
from control.store.base import Store, WatchEvent
from netmodel.errors import NotFoundError, SvclabError
from netmodel.objects import Condition, Container, KubeObject, Node, Pod, PodIP, PodStatus

COMPONENT = "kubelet"
#: a container that ran this long without a failure starts its crash-loop back-off over
#: (kubelet's back-off entries expire after twice the 5-minute maximum)
BACKOFF_RESET = 600.0
#: the exit code of a container killed by SIGKILL after its grace period
KILLED = 137


def has_probes(pod: Pod) -> bool:
    """Whether a container of the pod has a probe."""
    return any(
        c.readiness_probe is not None or c.liveness_probe is not None or c.startup_probe is not None
        for c in pod.spec.containers
    )


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A running pod sandbox: the pod's uid and its network attachment (None: host network)."""

    uid: str | None
    pod: Pod
    ip: str
    network: PodNetworkResult | None


def _attached(sb: Sandbox) -> bool:
    """Whether the sandbox holds a network attachment to tear down (CNI DEL): one made
    here, or one re-learnt after a restart (``resync``: a pod network pod with its
    address; its plugin result is not kept, but DEL is keyed by the pod)."""
    return sb.network is not None or (not sb.pod.spec.host_network and bool(sb.ip))


def _needs_pod_cidr(plugin: NetworkPlugin) -> bool:
    """Whether the plugin keeps recorded addresses only on nodes with a podCIDR (the
    bridge + host-local pair; Calico's attachment does not need one)."""
    return bool(getattr(plugin, "needs_pod_cidr", True))


def _needs_work(pod: Pod) -> bool:
    """Whether the pod must be (re)started: it is being deleted, not running yet, has
    no address, or (no container of it ends on its own) is not ready. A finished pod
    (Succeeded/Failed) is never started again."""
    s = pod.status
    if s.phase in TERMINAL:
        return pod.is_terminating
    return (
        pod.is_terminating
        or s.phase != "Running"
        or not s.pod_ip
        or (not pod.is_ready and not has_programs(pod) and not has_probes(pod))
    )


class Kubelet:
    """The kubelet of one node; ``kinds``/``handle``/``sync`` like every component, but
    usually driven through :class:`KubeletPool`."""

    name = COMPONENT
    kinds = frozenset({"Pod", "Node"})
    max_retries = 5

    def __init__(
        self,
        node_name: str,
        api: APIClient,
        recorder: Recorder,
        clock: Clock,
        plugin: NetworkPlugin,
        runtime: Runtime | None = None,
        prober: Prober | None = None,
        *,
        graceful: bool = False,
    ) -> None:
        self.node_name = node_name
        #: whether a deleted pod's containers run their preStop hooks (the live control
        #: plane: a pod whose container has ``lifecycle.preStop`` keeps serving, as
        #: terminating, for the hook's time, at most ``deletionGracePeriodSeconds``
        #: after ``deletionTimestamp``; without one it stops at once, as a server that
        #: exits on SIGTERM); off (the deterministic runner): every pod stops at once
        self.graceful = graceful
        #: pods told to stop (Events ``Killing`` recorded), running out their grace period
        self._stopping: set[str] = set()
        #: runs the probes of this node's containers (default: the emulated pod servers)
        self.prober: Prober = prober or EmulatedProber()
        #: when each container's probes run, and their results
        self.probes = ProbeManager(initial_delays=self.graceful)
        #: (pod uid, container) -> its restartCount when its crash-loop back-off last
        #: started over (kubelet keeps its back-off in memory too)
        self._backoff_base: dict[tuple[str, str], int] = {}
        #: (pod key, container): killed by a failed liveness/startup probe, restart due
        self._kills: dict[tuple[str, str], str] = {}
        #: where evaluated commands run: given, else the plugin's (the Linux backend's
        #: real namespaces), else the control plane's clock
        self.runtime: Runtime = (
            runtime or getattr(plugin, "container_runtime", None) or EmulatedRuntime()
        )
        #: pod key -> when a container of it next changes on its own (clock time)
        self._timers: dict[str, float] = {}
        #: pods with a run whose end is polled (the real runtime)
        self._polled: set[str] = set()
        self.api = api
        self.store = api.store
        self.recorder = recorder
        self.clock = clock
        self.plugin: NetworkPlugin = plugin
        self.node: Node | None = None
        self.queue = WorkQueue(clock=clock)  # the Lease's renewals follow this clock
        #: the kubelet's nodeLeaseDurationSeconds (renewed every quarter of it)
        self.lease_duration: int = nodelease.DURATION
        self.sandboxes: dict[str, Sandbox] = {}
        self._waiting: set[str] = set()  # pods that need the node to change (no podCIDR)
        #: the Lease as this kubelet last wrote it (renewed without reading it again)
        self._lease: KubeObject | None = None

    # ---- informer side

    def handle(self, events: Sequence[WatchEvent]) -> None:
        for ev in events:
            obj = ev.object
            if isinstance(obj, Node):
                if obj.name != self.node_name:
                    continue
                before = self.node
                self.node = None if ev.type == "DELETED" else obj
                if self.node is not None and (before is None or not _node_ready(self.node)):
                    self.queue.add(nodelease.KEY)  # (and post Ready: see _post_ready)
                if self.node is not None and (
                    before is None or before.spec.pod_cidr != self.node.spec.pod_cidr
                ):
                    for key in sorted(self._waiting):
                        self.queue.add(key)
                    self._waiting.clear()
            elif isinstance(obj, Pod):
                if ev.type == "DELETED":
                    if obj.key in self.sandboxes:
                        self.queue.add(obj.key)
                    self._waiting.discard(obj.key)
                    for key in sorted(self._waiting):  # an address may have been freed
                        self.queue.add(key)
                    self._waiting.clear()
                elif obj.spec.node_name == self.node_name:
                    sb = self.sandboxes.get(obj.key)
                    if obj.status.phase in TERMINAL:
                        self._timers.pop(obj.key, None)
                        self._polled.discard(obj.key)
                        if sb is not None or obj.is_terminating:
                            self.queue.add(obj.key)  # tear the sandbox down
                        continue
                    if sb is None:
                        self._keep_recorded(obj)
                    if (
                        _needs_work(obj)
                        or _ephemeral_pending(obj)
                        or sb is None
                        or sb.uid != obj.metadata.uid
                        or (obj.key not in self._timers and has_programs(obj))
                        or self._untracked_probes(obj)
                    ):
                        self.queue.add(obj.key)

    def resync(self, node: Node | None, pods: Iterable[Pod]) -> None:
        """Start from a listing: re-learn running sandboxes, remove the ones of pods no
        longer listed (or finished) when the plugin can tell what it holds
        (:class:`~control.agents.network.SandboxCollector`), queue what needs work."""
        self.node = node
        self.queue.clear()
        self._waiting.clear()
        self._timers.clear()
        self._polled.clear()
        mine = [p for p in pods if p.spec.node_name == self.node_name]
        running = [
            p
            for p in mine
            if p.status.pod_ip and not p.is_terminating and p.status.phase not in TERMINAL
        ]
        if node is not None and (node.spec.pod_cidr or not _needs_pod_cidr(self.plugin)):
            self.plugin.restore(node, running)
        if node is not None and isinstance(self.plugin, SandboxCollector):
            # sandboxes of pods gone meanwhile (force-deleted, finished while no kubelet
            # ran): torn down, as kubelet's clean-up of orphaned pods does
            keep = {p.key for p in mine if p.status.phase not in TERMINAL}
            for key in self.plugin.remove_orphans(node, keep):
                log.info("node=%s pod=%s orphaned sandbox removed", self.node_name, key)
        for p in running:
            self.sandboxes[p.key] = Sandbox(p.metadata.uid, p, p.status.pod_ip or "", None)
        self.probes = ProbeManager(initial_delays=self.graceful)
        self._kills.clear()
        for p in mine:
            if _needs_work(p) or (p in running and (has_programs(p) or has_probes(p))):
                self.queue.add(p.key)
        if node is not None:
            self.queue.add(nodelease.KEY)

    def _keep_recorded(self, pod: Pod) -> None:
        """A pod that arrives already holding an address (a replayed dump: ``podIP`` in
        its status, no sandbox here yet) keeps it: the address is reserved in the IPAM as
        the events arrive, before any sync, so no pod without an address that this sync
        starts can be given it, and the sandbox made later gets it back (CNI ADD of an
        owner that holds an address returns that address)."""
        if (
            pod.status.pod_ip
            and not pod.spec.host_network
            and not pod.is_terminating
            and pod.status.phase not in TERMINAL
            and self.node is not None
            and (self.node.spec.pod_cidr or not _needs_pod_cidr(self.plugin))
        ):
            self.plugin.restore(self.node, [pod])

    def _untracked_probes(self, pod: Pod) -> bool:
        """Whether a running container of the pod has probes no worker runs yet."""
        if pod.is_terminating or pod.status.phase != "Running" or not has_probes(pod):
            return False
        running = {
            cs.get("name") for cs in container_statuses(pod) if "running" in (cs.get("state") or {})
        }
        return any(
            c.name in running and not self.probes.has(pod.key, c.name)
            for c in pod.spec.containers
            if c.readiness_probe or c.liveness_probe or c.startup_probe
        )

    def pending(self) -> int:
        return len(self.queue) + len(self._due()) + len(self.probes.due(self.clock.now()))

    def _due(self) -> list[str]:
        """Pods a container of which changed on its own by now (a command ended, a
        back-off ran out)."""
        due: list[str] = []
        if self._timers:
            now = self.clock.now()
            due = [k for k, t in self._timers.items() if t <= now]
        if self._polled and self.runtime.any_ended():
            due += sorted(self._polled)
        return due

    def waits(self) -> bool:
        """Whether a container of one of its pods will change on its own, or a probe
        will run."""
        return bool(self._timers or self._polled) or self.probes.next_due() is not None

    def next_due(self) -> float | None:
        """The clock time of the next change a container makes on its own, or of the
        next probe (None: none known in advance)."""
        probe = self.probes.next_due()
        timer = min(self._timers.values(), default=None)
        if probe is None or timer is None:
            return timer if probe is None else probe
        return min(probe, timer)

    def _run_probes(self) -> int:
        """Run the probes due now; queue the pods whose containers' readiness changed or
        that must be killed. Returns how many ran."""
        now = self.clock.now()
        due = self.probes.due(now)
        for w in due:
            pod = self._probed_pod(w)
            if pod is None:
                self.probes.stop(w.pod, w.container)
                continue
            container = next(c for c in pod.spec.containers if c.name == w.container)
            res = self.prober.probe(pod, container, w.kind, w.probe)
            if not res.ok:
                self.recorder.record(
                    COMPONENT,
                    pod,
                    "Unhealthy",
                    f"{TITLE[w.kind]} probe failed: {res.message}",
                    type_="Warning",
                )
            out = self.probes.observe(w, res, now)
            if out.kill:
                self._kills[(pod.key, w.container)] = w.kind
            if out.changed or out.kill:
                self.queue.add(pod.key)
        return len(due)

    def _probed_pod(self, w: Worker) -> Pod | None:
        """The pod a worker probes, when it still runs here."""
        try:
            pod = self.store.get("Pod", w.pod)
        except NotFoundError:
            return None
        if (
            not isinstance(pod, Pod)
            or pod.spec.node_name != self.node_name
            or pod.status.phase != "Running"
            or w.pod not in self.sandboxes
            or not any(c.name == w.container for c in pod.spec.containers)
        ):
            return None
        return pod

    def sync(self) -> int:
        probed = self._run_probes()
        for key in self._due():
            self._timers.pop(key, None)
            self._polled.discard(key)
            self.queue.add(key)
        n = len(self.queue)
        for _ in range(n):
            key = self.queue.get()
            failed = False
            try:
                self.reconcile(key)
            except SvclabError:
                failed = True
            finally:
                self.queue.done(key)
            if not failed:
                self.queue.forget(key)
            elif self.queue.num_requeues(key) < self.max_retries:
                self.queue.requeue(key)
            else:
                self.queue.forget(key)
                self._waiting.add(key)  # try again when the node changes
        return n + probed

    # ---- reconcile

    def _node(self) -> Node:
        if self.node is None:
            node = self.store.get("Node", self.node_name)
            assert isinstance(node, Node)
            self.node = node
        return self.node

    def reconcile(self, key: str) -> None:
        if key == nodelease.KEY:
            now = self.clock.now()
            written = nodelease.renew(
                self.api, self.node, self.node_name, now, self.lease_duration, latest=self._lease
            )
            if written is not None:
                self._lease = written
            self._post_ready(now)
            self.queue.add_after(nodelease.KEY, nodelease.renew_interval(self.lease_duration))
            return
        try:
            pod = self.store.get("Pod", key)
        except NotFoundError:
            pod = None
        if not isinstance(pod, Pod) or pod.spec.node_name != self.node_name:
            sb = self.sandboxes.pop(key, None)
            self.probes.stop(key)
            self._timers.pop(key, None)
            if sb is not None:
                self.prober.forget(sb.pod)
            self._polled.discard(key)
            if sb is not None:
                self.runtime.stop(sb.pod)
            if sb is not None and _attached(sb) and self.node is not None:
                self.plugin.delete(self.node, sb.pod)
            return
        sb = self.sandboxes.get(key)
        if sb is not None and sb.uid != pod.metadata.uid:  # a new pod with the same name
            if _attached(sb):
                self.plugin.delete(self._node(), sb.pod)
            del self.sandboxes[key]
            sb = None
        if pod.is_terminating:
            self._kill(pod, sb)
            return
        if pod.status.phase in TERMINAL:
            self._finished(pod, sb)
            return
        if sb is None:
            sb = self._create_sandbox(pod)
        if _needs_work(pod) or pod.status.pod_ip != sb.ip:
            pod = self._start(pod, sb)
        if _ephemeral_pending(pod):
            pod = self._start_ephemeral(pod)
        if has_programs(pod):
            self._advance(pod, sb)
        if has_probes(pod) or any(k[0] == pod.key for k in self._kills):
            self._sync_probes(key)

    def _post_ready(self, now: float) -> None:
        """Post the node's Ready condition True when its Node does not show it (the
        kubelet's node status update, written on a change only)."""
        node = self.node
        if node is None or _node_ready(node):
            return
        stamp = rfc3339(now)
        ready = Condition.model_validate(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        )
        others = [c for c in node.status.conditions if c.type != "Ready"]
        status = node.status.evolve(conditions=[ready, *others])
        updated = self.api.update_status(node.evolve(status=status), component=COMPONENT)
        if isinstance(updated, Node):
            self.node = updated

    def _advance(self, pod: Pod, sb: Sandbox) -> None:
        """Move the pod's containers to now (:func:`~control.agents.containers.advance`);
        write the status when it changed; tear the sandbox down when the pod finished."""
        now = self.clock.now()
        adv = advance(pod, now, self.runtime)
        if adv.next_due is not None:
            self._timers[pod.key] = adv.next_due
        else:
            self._timers.pop(pod.key, None)
        if (
            adv.phase not in TERMINAL
            and adv.next_due is None
            and any("running" in (cs.get("state") or {}) for cs in adv.statuses)
        ):
            self._polled.add(pod.key)
        else:
            self._polled.discard(pod.key)
        if adv.phase == pod.status.phase and adv.statuses == container_statuses(pod):
            return
        now_text = rfc3339(now)
        conds = status_conditions(adv.phase, adv.statuses, now_text, pod.status.conditions)
        status = pod.status.evolve(
            phase=adv.phase,
            conditions=conds if conds is not None else _running_conditions(now_text),
            **{"containerStatuses": adv.statuses},
        )
        updated = self.api.update_status(pod.evolve(status=status), component=COMPONENT)
        assert isinstance(updated, Pod)
        for name in adv.started:
            self.recorder.record(COMPONENT, updated, "Started", f"Started container {name}")
        if adv.phase in TERMINAL:
            self._finished(updated, sb)

    def _sync_probes(self, key: str) -> None:
        """Write what the probes of the pod's containers mean (kubelet's prober results
        and its restarts): ``ready``/``started`` per container and the pod's Ready and
        ContainersReady conditions; a container whose liveness (or startup) probe failed
        is killed (``lastState.terminated``, exit code 137) and started again per the
        pod's restartPolicy after kubelet's crash-loop back-off (10 s doubling to 5 min,
        started over after 10 min of running), ``restartCount`` growing; Events
        ``Killing``, ``BackOff`` and ``Started``."""
        pod = self.store.get("Pod", key)
        assert isinstance(pod, Pod)
        now = self.clock.now()
        now_text = rfc3339(now)
        policy = str((pod.spec.model_extra or {}).get("restartPolicy") or "Always")
        by_name = {c.name: c for c in pod.spec.containers}
        old = container_statuses(pod)
        new: list[dict[str, object]] = []
        started: list[str] = []
        for cs0 in old:
            cs = dict(cs0)
            name = str(cs.get("name"))
            c = by_name.get(name)
            state = cs.get("state") or {}
            assert isinstance(state, dict)
            kind = self._kills.pop((key, name), None)
            if c is not None and kind is not None and "running" in state:
                if self._probe_kill(pod, c, cs, kind, now, policy):
                    started.append(name)
            elif (
                c is not None
                and "waiting" in state
                and "lastState" in cs
                and not has_programs(pod)  # containers.advance restarts those
            ):
                restarts = int(cs.get("restartCount") or 0)
                last = (cs.get("lastState") or {}).get("terminated") or {}
                at = parse_rfc3339(last.get("finishedAt") or now_text) + self._delay(
                    pod, name, restarts
                )
                if at <= now:
                    cs["restartCount"] = restarts + 1
                    cs["state"] = {"running": {"startedAt": now_text}}
                    cs["ready"] = c.readiness_probe is None and c.startup_probe is None
                    cs["started"] = c.startup_probe is None
                    self.probes.start(key, c, float(int(now)))
                    started.append(name)
                else:
                    self._timers[key] = min(self._timers.get(key, at), at)
            elif c is not None and "running" in state:
                if not self.probes.has(key, name) and (
                    c.readiness_probe or c.liveness_probe or c.startup_probe
                ):
                    t0 = parse_rfc3339(str(state["running"].get("startedAt") or now_text))
                    self.probes.start(key, c, t0)
                if self.probes.has(key, name):
                    cs["ready"] = self.probes.ready(key, name)
                    cs["started"] = self.probes.started(key, name)
            new.append(cs)
        if new == old:
            return
        conds = status_conditions(
            pod.status.phase or "Running", new, now_text, pod.status.conditions
        )
        if conds is None:
            keep = {c.type: c for c in pod.status.conditions}
            conds = [
                Condition(
                    type=t,
                    status="True",
                    last_transition_time=(
                        keep[t].last_transition_time
                        if t in keep and keep[t].status == "True"
                        else now_text
                    ),
                )
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ]
        status = pod.status.evolve(conditions=conds, **{"containerStatuses": new})
        updated = self.api.update_status(pod.evolve(status=status), component=COMPONENT)
        assert isinstance(updated, Pod)
        for name in started:
            self.recorder.record(COMPONENT, updated, "Started", f"Started container {name}")

    def _delay(self, pod: Pod, name: str, restarts: int) -> float:
        """Kubelet's crash-loop back-off before restart ``restarts + 1``."""
        base = self._backoff_base.get((pod.metadata.uid or "", name), 0)
        return restart_delay(restarts + 1 - base)

    def _probe_kill(
        self, pod: Pod, c: Container, cs: dict[str, object], kind: str, now: float, policy: str
    ) -> bool:
        """Kill container ``c`` (its ``kind`` probe failed): its run goes to
        ``lastState``; it starts again at once (the first restart), or waits out its
        back-off (restartPolicy Always / OnFailure: a kill is a failure), or stays
        terminated (Never). Returns whether it started again."""
        self.probes.stop(pod.key, c.name)
        self.recorder.record(
            COMPONENT,
            pod,
            "Killing",
            f"Container {c.name} failed {kind} probe, will be restarted",
        )
        state = cs.get("state") or {}
        assert isinstance(state, dict)
        t0_text = str(state["running"].get("startedAt") or rfc3339(now))
        restarts = int(str(cs.get("restartCount") or 0))
        uid = pod.metadata.uid or ""
        if now - parse_rfc3339(t0_text) >= BACKOFF_RESET:
            self._backoff_base[(uid, c.name)] = restarts
        term = {
            "terminated": {
                "exitCode": KILLED,
                "reason": "Error",
                "startedAt": t0_text,
                "finishedAt": rfc3339(now),
                "containerID": str(cs.get("containerID", "")),
            }
        }
        cs["ready"], cs["started"] = False, False
        if policy == "Never":
            cs["state"] = term
            return False
        cs["lastState"] = term
        delay = self._delay(pod, c.name, restarts)
        if delay == 0 and not isinstance(container_program(c), Program):
            # the first restart is immediate
            cs["restartCount"] = restarts + 1
            cs["state"] = {"running": {"startedAt": rfc3339(now)}}
            cs["ready"] = c.readiness_probe is None and c.startup_probe is None
            cs["started"] = c.startup_probe is None
            self.probes.start(pod.key, c, float(int(now)))
            return True
        cs["state"] = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": (
                    f"back-off {int(delay)}s restarting failed container={c.name} "
                    f"pod={pod.name}_{pod.namespace}({uid})"
                ),
            }
        }
        if delay > 0:
            self.recorder.record(
                COMPONENT,
                pod,
                "BackOff",
                f"Back-off restarting failed container {c.name} in pod "
                f"{pod.name}_{pod.namespace}({uid})",
                type_="Warning",
            )
        at = now + delay
        self._timers[pod.key] = min(self._timers.get(pod.key, at), at)
        return False

    def _finished(self, pod: Pod, sb: Sandbox | None) -> None:
        """A Succeeded/Failed pod: its sandbox goes (CNI DEL frees the address), its
        processes with it; the pod object stays until deleted."""
        self._timers.pop(pod.key, None)
        self._polled.discard(pod.key)
        if sb is None:
            return
        self.runtime.stop(pod)
        if _attached(sb):
            self.plugin.delete(self._node(), sb.pod)
        del self.sandboxes[pod.key]
        self.recorder.record(
            COMPONENT,
            pod,
            "SandboxRemoved",
            f"Pod {pod.status.phase}: sandbox removed, address {sb.ip} released",
        )

    def _create_sandbox(self, pod: Pod) -> Sandbox:
        node = self._node()
        if pod.spec.host_network:
            ip = (node.internal_ips or [""])[0]
            sb = Sandbox(pod.metadata.uid, pod, ip, None)
            msg = f"Created pod sandbox in the host network namespace ({ip})"
        else:
            self._keep_recorded(pod)
            try:
                res = self.plugin.add(node, pod)
            except SvclabError as e:
                if self.queue.num_requeues(pod.key) == 0:
                    self.recorder.record(
                        COMPONENT,
                        pod,
                        "FailedCreatePodSandBox",
                        f"Failed to create pod sandbox: plugin type=bridge failed (add): {e}",
                        type_="Warning",
                    )
                raise
            sb = Sandbox(pod.metadata.uid, pod, res.ip, res)
            where = f"on {res.bridge}" if res.bridge else "routed, proxy ARP"
            msg = (
                f"Created pod sandbox: {res.interface} {res.ip}/{res.prefixlen} "
                f"gateway {res.gateway}, veth {res.host_veth} {where}"
            )
        self.sandboxes[pod.key] = sb
        self.recorder.record(COMPONENT, pod, "SandboxCreated", msg)
        return sb

    def _start(self, pod: Pod, sb: Sandbox) -> Pod:
        node = self._node()
        now = rfc3339(self.clock.now())
        host_ip = node.internal_ips[0] if node.internal_ips else None
        statuses = [
            {
                "name": c.name,
                "image": c.image or "",
                "imageID": "",  # no registry, no digest (a required field)
                "containerID": _container_id(pod, c.name),
                # a probed container is ready once its probes say so
                "ready": c.readiness_probe is None and c.startup_probe is None,
                "started": c.startup_probe is None,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in pod.spec.containers
        ]
        for c in pod.spec.containers:
            self.probes.start(pod.key, c, float(int(self.clock.now())))
        conds = status_conditions("Running", statuses, now, [])
        # made from an empty status (no validation: every value is typed already), with
        # the same fields set and the same extra fields, in the same order, as
        # PodStatus.model_validate of the wire form gives
        status = _EMPTY_STATUS.evolve(
            phase="Running",
            pod_ip=sb.ip,
            pod_ips=[_PODIP.evolve(ip=sb.ip)],
            host_ip=host_ip,
            conditions=conds if conds is not None else _running_conditions(now),
            **{
                "hostIPs": [{"ip": host_ip}] if host_ip else [],
                "startTime": now,
                "containerStatuses": statuses,
            },
        )
        start_runs(pod, self.clock.now(), self.runtime)
        updated = self.api.update_status(pod.evolve(status=status), component=COMPONENT)
        for c in pod.spec.containers:
            self.recorder.record(COMPONENT, updated, "Started", f"Started container {c.name}")
        assert isinstance(updated, Pod)
        return updated

    def _start_ephemeral(self, pod: Pod) -> Pod:
        """Start the ephemeral containers added since the last status (``kubectl
        debug``): each gets a running entry in ``status.ephemeralContainerStatuses``
        (never ready: they take no part in the pod's readiness) and an Event
        ``Started``."""
        now = rfc3339(self.clock.now())
        have = list((pod.status.model_extra or {}).get("ephemeralContainerStatuses") or [])
        started = _ephemeral_pending(pod)
        by_name = {c.name: c for c in pod.spec.ephemeral_containers}
        for name in started:
            have.append(
                {
                    "name": name,
                    "image": by_name[name].image or "",
                    "imageID": "",
                    "containerID": _container_id(pod, name),
                    "ready": False,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
            )
        status = pod.status.evolve(**{"ephemeralContainerStatuses": have})
        updated = self.api.update_status(pod.evolve(status=status), component=COMPONENT)
        assert isinstance(updated, Pod)
        for name in started:
            self.recorder.record(COMPONENT, updated, "Started", f"Started container {name}")
        return updated

    def _grace_deadline(self, pod: Pod) -> float | None:
        """When a deleted pod's grace period ends (None: no grace: stop it now)."""
        if not self.graceful or pod.status.phase in TERMINAL or pod.key not in self.sandboxes:
            return None
        grace = (pod.metadata.model_extra or {}).get("deletionGracePeriodSeconds")
        if not grace or pod.metadata.deletion_timestamp is None:
            return None
        hold = max((_pre_stop_seconds(c) for c in pod.spec.containers), default=0.0)
        if hold <= 0:
            return None
        # deletionTimestamp is when the grace period ends (kube-apiserver's delete time
        # plus deletionGracePeriodSeconds): the hook holds the pod from the delete on
        deleted_at = parse_rfc3339(pod.metadata.deletion_timestamp) - float(grace)
        return deleted_at + min(float(grace), hold)

    def _kill(self, pod: Pod, sb: Sandbox | None) -> None:
        deadline = self._grace_deadline(pod)
        if deadline is not None and self.clock.now() < deadline:
            # SIGTERM sent; the pod server keeps serving (and being probed) until the
            # grace period ends: its endpoint is serving and terminating meanwhile
            if pod.key not in self._stopping:
                self._stopping.add(pod.key)
                for c in pod.spec.containers:
                    self.recorder.record(COMPONENT, pod, "Killing", f"Stopping container {c.name}")
            self._timers[pod.key] = deadline
            if has_probes(pod):
                self._sync_probes(pod.key)
            return
        self.probes.stop(pod.key)
        self._timers.pop(pod.key, None)
        self._polled.discard(pod.key)
        self.runtime.stop(pod)
        if pod.status.phase in TERMINAL:
            sb = self.sandboxes.pop(pod.key, sb)
            if sb is not None and _attached(sb):
                self.plugin.delete(self._node(), sb.pod)
            self.api.finalize_pod_deletion(pod.key)  # its containers ended already
            return
        if pod.key not in self._stopping:
            for c in pod.spec.containers:
                self.recorder.record(COMPONENT, pod, "Killing", f"Stopping container {c.name}")
        self._stopping.discard(pod.key)
        self.prober.forget(pod)
        if sb is not None and _attached(sb):
            self.plugin.delete(self._node(), sb.pod)
        elif sb is None and pod.status.pod_ip and not pod.spec.host_network:
            self.plugin.delete(self._node(), pod)  # attached before a restart
        self.sandboxes.pop(pod.key, None)
        self.api.finalize_pod_deletion(pod.key)


_EMPTY_STATUS, _PODIP = PodStatus(), PodIP(ip="")
log = logging.getLogger("svclab.kubelet")


def _node_ready(node: Node) -> bool:
    """Whether the Node's Ready condition is True (none at all counts as not)."""
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def _pre_stop_seconds(c: Container) -> float:
    """How long container ``c`` keeps running once told to stop: its preStop hook's
    (``lifecycle.preStop.sleep.seconds``, or an ``exec`` command svclab evaluates:
    ``sleep N`` holds N seconds, a command that never ends the whole grace period),
    after which it exits on SIGTERM at once, as svclab's pod servers do; no hook: 0."""
    hook = ((c.model_extra or {}).get("lifecycle") or {}).get("preStop") or {}
    if not isinstance(hook, dict):
        return 0.0
    sleep = hook.get("sleep")
    if isinstance(sleep, dict) and isinstance(sleep.get("seconds"), int):
        return float(sleep["seconds"])
    command = (hook.get("exec") or {}).get("command")
    if isinstance(command, list) and command:
        prog = program([str(w) for w in command], None)
        return prog.seconds if isinstance(prog, Program) else float("inf")
    return 0.0


def _container_id(pod: Pod, name: str) -> str:
    return "svclab://" + hashlib.sha256(f"{pod.metadata.uid}/{name}".encode()).hexdigest()[:16]


def _ephemeral_pending(pod: Pod) -> list[str]:
    """The ephemeral containers of a running pod its status does not show yet."""
    if not pod.spec.ephemeral_containers or pod.status.phase != "Running" or pod.is_terminating:
        return []
    shown = {
        s.get("name")
        for s in (pod.status.model_extra or {}).get("ephemeralContainerStatuses") or []
        if isinstance(s, dict)
    }
    return [c.name for c in pod.spec.ephemeral_containers if c.name not in shown]


@functools.lru_cache(maxsize=16)
def _running_conditions(now: str) -> list[Condition]:
    """A running pod's conditions at ``now`` (one list shared by the pods started in
    the same second: objects are immutable, and nothing changes a list in place)."""
    return [
        Condition(type=t, status="True", last_transition_time=now)
        for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]


class KubeletPool:
    """All kubelets as one component: a :class:`Kubelet` per Node object, each fed only
    the events of its node's pods (routing by ``spec.nodeName``)."""

    name = COMPONENT
    kinds = frozenset({"Pod", "Node"})

    def __init__(self, factory: Callable[[str], Kubelet]) -> None:
        self._factory = factory
        self.kubelets: dict[str, Kubelet] = {}
        #: nodes whose kubelet is stopped (:meth:`stop`): no event reaches it, it never syncs
        self.stopped: set[str] = set()
        self._busy: set[str] = set()
        #: nodes whose kubelet waits for a container to change on its own
        self._timed: set[str] = set()

    def kubelet(self, node_name: str) -> Kubelet:
        k = self.kubelets.get(node_name)
        if k is None:
            k = self.kubelets[node_name] = self._factory(node_name)
        return k

    def stop(self, node_name: str) -> None:
        """Stop ``node_name``'s kubelet (a killed kubelet process): it reads and writes
        nothing, renews no Lease, until :meth:`restart`."""
        self.stopped.add(node_name)
        self._busy.discard(node_name)

    def restart(self, node_name: str) -> None:
        """Start ``node_name``'s kubelet again, from a listing of its Node and pods."""
        self.stopped.discard(node_name)
        k = self.kubelet(node_name)
        try:
            node = k.store.get("Node", node_name)
        except NotFoundError:
            return
        assert isinstance(node, Node)
        bound = [
            p for p in k.store.list("Pod") if isinstance(p, Pod) and p.spec.node_name == node_name
        ]
        k.resync(node, bound)
        self._busy.add(node_name)

    def _renewing(self) -> set[str]:
        """Running kubelets whose Lease renewal (a delayed key of their queue) is due."""
        return {
            n
            for n, k in self.kubelets.items()
            if n not in self.stopped and k.queue.next_ready_in() == 0
        }

    def handle(self, events: Sequence[WatchEvent]) -> None:
        routed: dict[str, list[WatchEvent]] = {}
        for ev in events:
            obj = ev.object
            if isinstance(obj, Node):
                routed.setdefault(obj.name, []).append(ev)
            elif isinstance(obj, Pod) and obj.spec.node_name:
                routed.setdefault(obj.spec.node_name, []).append(ev)
        for name, evs in routed.items():
            if name in self.stopped:
                continue  # a stopped kubelet misses them: it relists on restart
            k = self.kubelets.get(name)
            if k is None:
                node = next((e.object for e in evs if isinstance(e.object, Node)), None)
                if node is None or not isinstance(node, Node):
                    continue  # pods bound to a node that does not exist: nobody runs them
                # a node joined: its kubelet starts from the pods already bound to it
                k = self.kubelet(name)
                bound = [
                    p
                    for p in k.store.list("Pod")
                    if isinstance(p, Pod) and p.spec.node_name == name
                ]
                k.resync(node, bound)
            k.handle(evs)
            if k.pending():
                self._busy.add(name)

    def resync(self, objects: Iterable[KubeObject]) -> None:
        objs = list(objects)
        nodes = {o.name: o for o in objs if isinstance(o, Node)}
        pods: dict[str, list[Pod]] = {}
        for o in objs:
            if isinstance(o, Pod) and o.spec.node_name:
                pods.setdefault(o.spec.node_name, []).append(o)
        self.kubelets.clear()
        self._busy.clear()
        for name in sorted(nodes):
            k = self.kubelet(name)
            if name in self.stopped:
                continue
            k.resync(nodes[name], pods.get(name, []))
            if k.pending():
                self._busy.add(name)

    @staticmethod
    def has_start_work(store: Store, pods: Sequence[PodSummary]) -> bool:
        """Whether :meth:`resync` would queue a pod on some node (one being deleted, not
        Running, or without an address; a Running pod with an address is Ready here:
        no probes): a full start works on it, so a control plane started on a converged
        store starts the kubelets at once (:meth:`control.runner.ControlPlane.start`)."""
        return any(
            p.node_name
            and (
                p.deletion_timestamp is not None
                or (p.phase != "Running" and p.phase not in TERMINAL)
                or (not p.pod_ip and p.phase not in TERMINAL)
            )
            for p in pods
        )

    def pending(self) -> int:
        return sum(
            self.kubelets[n].pending()
            for n in (self._busy | self._timed | self._renewing()) - self.stopped
            if n in self.kubelets
        )

    def next_due(self) -> float | None:
        """The earliest :meth:`Kubelet.next_due` of any node."""
        dues = [self.kubelets[n].next_due() for n in self._timed if n in self.kubelets]
        return min((d for d in dues if d is not None), default=None)

    def sync(self) -> int:
        steps = 0
        for name in sorted((self._busy | self._timed | self._renewing()) - self.stopped):
            k = self.kubelets.get(name)
            if k is not None:
                steps += k.sync()
        self._busy = {n for n in self._busy if n in self.kubelets and self.kubelets[n].pending()}
        self._timed = (
            {n for n, k in self.kubelets.items() if k.waits()} if self._timed or steps else set()
        )
        return steps
