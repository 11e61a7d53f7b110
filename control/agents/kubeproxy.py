"""kube-proxy, one per node: watch → change tracker → snapshot → pure render → one apply.

Shape follows upstream's proxier: Service and EndpointSlice watch events feed a
:class:`dataplane.proxy.ChangeTracker` that keeps (previous, current) per key and drops
no-op updates; ``sync`` applies the pending changes, renders, and hands the result to
a :class:`RuleSink` (the node's dataplane). The first sync and any change of the node's
own configuration (its Node object's addresses or podCIDR) are full syncs; later ones
in iptables mode are partial: only the changed services' chains are in the payload,
which the sink applies with ``--noflush`` semantics on top of what the node holds.
nftables and IPVS modes render the full state on every sync (documented
simplification: upstream's nftables partial sync writes the same end state).

nftables mode keeps upstream's record of stale chains (``staleChains``): a chain a
sync no longer uses is flushed and stamped with the agent's clock, and deleted by the
first sync that starts more than a second later (:mod:`dataplane.proxy.nftables`). The
agent keeps the record between syncs and forgets it when a load fails, as upstream
does.

Timing (:class:`SyncPeriods`), as upstream's sync runner: with periods given (the live
control plane passes :func:`sync_periods` of the configuration), a sync never starts
sooner than ``minSyncPeriod`` after the previous one (changes arriving meanwhile wait
and go out together in the next sync), and ``syncPeriod`` after the last sync one runs
with no change at all. That periodic sync is a *full* sync here (it rewrites every
chain: drift in the node's tables is repaired and stale nftables chains deleted);
upstream's periodic sync is partial unless its last full sync is an hour old, so this
is the stricter of the two. A sync whose load failed leaves the next one full, as
upstream's ``needFullSync``. :meth:`KubeProxy.next_due` is when the agent must sync
with no event. Without periods (the deterministic runner, on its fake clock) every
change is synced at once and nothing is due on time.

Every sync leaves an Event on the node (reason ``SyncProxyRules``). In IPVS mode the
first sync is preceded by the Warning that kube-proxy 1.35 records when it starts its
IPVS proxier (KEP-5495, kubernetes/kubernetes#134539): reason ``IPVSDeprecation``, with
:data:`IPVS_DEPRECATION` as its message. IPVS mode keeps working, as upstream's does.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from control.agents.netprog import NetworkProgramming
from control.clock import Clock, WallClock
from control.events import Recorder
from control.proxyenv import node_proxy_config
from dataplane.netfilter import Ruleset, apply_restore, format_save
from dataplane.proxy import (
    ChangeTracker,
    IptablesRender,
    Mode,
    NodeProxyConfig,
    render,
)
from dataplane.proxy.iptables import active_chains
from dataplane.proxy.ipvs import IpvsRender
from dataplane.proxy.nftables import NftablesRender
from dataplane.proxy.snapshot import ZONE_LABEL
from netmodel.cluster import ClusterSpec
from netmodel.objects import EndpointSlice, KubeObject, Node, Service
from netmodel.proxyconfig import (
    IPTablesConfig,
    IPVSConfig,
    KubeProxyConfiguration,
    NFTablesConfig,
    duration_seconds,
)

Rendered = IptablesRender | IpvsRender | NftablesRender

KUBE_CHAIN_PREFIXES = ("KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-")


@dataclass(frozen=True, slots=True)
class SyncPeriods:
    """kube-proxy's sync timing in seconds: ``min_sync`` (``minSyncPeriod``: the least
    time between two syncs) and ``resync`` (``syncPeriod``: a sync with no change after
    that long; None: never)."""

    min_sync: float
    resync: float | None


def sync_periods(config: KubeProxyConfiguration | None, mode: Mode) -> SyncPeriods:
    """The mode's ``minSyncPeriod`` and ``syncPeriod`` (``iptables.*``, ``nftables.*``
    or ``ipvs.*``) of ``config``; upstream's defaults without one (1s / 30s; IPVS 0s /
    30s). A zero ``syncPeriod`` means no periodic sync."""
    cfg = config or KubeProxyConfiguration()
    section: IPTablesConfig | NFTablesConfig | IPVSConfig = (
        cfg.iptables if mode == "iptables" else cfg.nftables if mode == "nftables" else cfg.ipvs
    )
    resync = duration_seconds(section.sync_period, field=f"{mode}.syncPeriod")
    return SyncPeriods(
        duration_seconds(section.min_sync_period, field=f"{mode}.minSyncPeriod"),
        resync or None,
    )


class RuleSink(Protocol):
    """Where a node's kube-proxy puts its rules (emulated node, or a real namespace).
    An nftables render is two transactions: ``cleanup_input`` (when not empty), then
    ``restore_input``."""

    def load(self, node: str, mode: Mode, rendered: Rendered, *, full: bool) -> None: ...

    def existing_chains(self, node: str) -> Collection[str]: ...


@dataclass
class NodeRules:
    """What one emulated node holds: the iptables ruleset as the kernel would after every
    ``iptables-restore --noflush`` so far, or the latest nft / IPVS text."""

    mode: Mode = "iptables"
    ruleset: Ruleset = field(default_factory=lambda: Ruleset(family=4))
    rendered: Rendered | None = None
    syncs: int = 0

    @property
    def save_text(self) -> str:
        """``iptables-save`` of filter and nat (iptables mode), else the mode's listing."""
        if self.mode == "iptables":
            return format_save(self.ruleset, tables=("filter", "nat"))
        return self.rendered.save_text if self.rendered is not None else ""


class EmulatedRules:
    """The default sink: keeps per-node state in memory (used by the emulator)."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeRules] = {}

    def load(self, node: str, mode: Mode, rendered: Rendered, *, full: bool) -> None:
        state = self.nodes.setdefault(node, NodeRules(mode=mode))
        state.mode = mode
        if isinstance(rendered, IptablesRender):
            base = state.ruleset
            if state.syncs == 0:
                base = apply_restore(base, rendered.ensure_input(), source=f"{node} ensure")
            state.ruleset = apply_restore(base, rendered.restore_input, source=f"{node} sync")
        state.rendered = rendered
        state.syncs += 1

    def existing_chains(self, node: str) -> Sequence[str]:
        """iptables mode: the KUBE-SVC/SVL/EXT/FW/SEP chains of nat; nftables mode: the
        chains and sets of the kube-proxy table (the last render describes all of it)."""
        state = self.nodes.get(node)
        if state is None:
            return ()
        if state.mode == "nftables" and isinstance(state.rendered, NftablesRender):
            r = state.rendered
            return [*(c.name for c in r.chains), *(s.name for s in r.sets)]
        if "nat" not in state.ruleset.tables:
            return ()
        return [c for c in state.ruleset.tables["nat"].chains if c.startswith(KUBE_CHAIN_PREFIXES)]


#: kube-proxy 1.35's Warning when it runs the IPVS proxier (deprecated in 1.35, KEP-5495)
IPVS_DEPRECATION = (
    "The ipvs proxier is now deprecated and may be removed in a future release. "
    "Please use 'nftables' instead."
)


class KubeProxy:
    """The kube-proxy of ``node_name`` (the runner's Agent protocol: kinds/handle/sync)."""

    kinds = ("Service", "EndpointSlice", "Node")

    def __init__(
        self,
        node_name: str,
        cluster: ClusterSpec,
        proxy_config: KubeProxyConfiguration | None,
        sink: RuleSink,
        recorder: Recorder | None = None,
        *,
        mode: Mode | None = None,
        clock: Clock | None = None,
        periods: SyncPeriods | None = None,
    ) -> None:
        self.node_name = node_name
        self.name = f"kube-proxy/{node_name}"
        self.cluster = cluster
        self.proxy_config = proxy_config
        self.mode: Mode = mode or (
            proxy_config.effective_mode
            if proxy_config and proxy_config.mode
            else cluster.proxy_mode
        )  # type: ignore[assignment]
        self.sink = sink
        self.recorder = recorder
        self.clock: Clock = clock or WallClock()
        self._node: Node | None = None
        self._config: NodeProxyConfig | None = None
        self._tracker: ChangeTracker | None = None
        self._services: dict[str, Service] = {}
        self._slices: dict[str, EndpointSlice] = {}
        self._need_full = True
        #: nftables mode: stale chain -> when a sync last flushed it (upstream's staleChains)
        self.stale_since: dict[str, float] = {}
        self.last: Rendered | None = None
        #: the network programming SLI of this node (:mod:`control.agents.netprog`)
        self.netprog = NetworkProgramming(self.name)
        #: sync timing (module docstring); None: every change at once, nothing on time
        self.periods = periods
        #: clock time of the last sync that loaded (None: none yet)
        self.last_sync: float | None = None
        #: syncs done: full and partial ones
        self.full_syncs = 0
        self.partial_syncs = 0
        #: whether IPVS mode's deprecation Warning was recorded (once per agent, at start)
        self._warned_ipvs = False

    # ---- configuration

    def _node_config(self) -> NodeProxyConfig | None:
        if self._node is None:
            return None
        return node_proxy_config(self.proxy_config, self.cluster, self._node)

    def _reset_tracker(self) -> None:
        """A new node configuration: rebuild the tracker from the objects seen so far."""
        self._config = self._node_config()
        if self._config is None:
            self._tracker = None
            return
        t = ChangeTracker(self._config)
        t.load(self._services.values(), self._slices.values())
        self._tracker = t
        self._need_full = True

    # ---- Agent protocol

    def resync(self, objs: Iterable[KubeObject]) -> None:
        self._services.clear()
        self._slices.clear()
        for o in objs:
            if isinstance(o, Service):
                self._services[o.key] = o
            elif isinstance(o, EndpointSlice):
                self._slices[o.key] = o
            elif isinstance(o, Node) and o.name == self.node_name:
                self._node = o
        self._reset_tracker()

    def handle(self, events: Sequence[object]) -> None:
        for ev in events:
            obj: KubeObject = ev.object  # type: ignore[attr-defined]
            deleted = ev.type == "DELETED"  # type: ignore[attr-defined]
            if isinstance(obj, Node):
                if obj.name != self.node_name:
                    continue
                before = self._node
                self._node = None if deleted else obj
                if before is None or self._node is None or _node_view(before) != _node_view(obj):
                    self._reset_tracker()
            elif isinstance(obj, Service):
                prev = self._services.pop(obj.key, None)
                if not deleted:
                    self._services[obj.key] = obj
                if self._tracker is not None:
                    self._tracker.update_service(prev, None if deleted else obj)
            elif isinstance(obj, EndpointSlice):
                prev_sl = self._slices.pop(obj.key, None)
                if not deleted:
                    self._slices[obj.key] = obj
                if self._tracker is not None:
                    self._tracker.update_endpoint_slice(prev_sl, None if deleted else obj)
                self.netprog.note(obj.key, None if deleted else obj)

    def adopt(self) -> bool:
        """Take the rules the node holds for those of a full sync over the objects seen
        so far, without rendering them: what a process that starts over a persistent
        cluster's store does for each node (its kube-proxy's start-up sync would write
        exactly them; the node's rules are rendered from the store when asked for,
        :mod:`control.noderules`). Later syncs are partial, as after that sync.

        Only in iptables mode, with a sink that can adopt (``adopt(node, mode, chains)``:
        the per-service chains the node then holds). Returns whether it adopted; if not,
        the next sync is the full start-up sync."""
        t, cfg = self._tracker, self._config
        adopt = getattr(self.sink, "adopt", None)
        if t is None or cfg is None or self.mode != "iptables" or adopt is None:
            return False
        if not self._need_full:
            return False  # it has synced: the node holds what that sync wrote
        t.apply()
        adopt(self.node_name, self.mode, active_chains(t.snapshot, cfg))
        self._need_full = False
        return True

    def next_due(self) -> float | None:
        """Clock time at which this kube-proxy must sync with no further event: when the
        ``minSyncPeriod`` hold-off of waiting changes ends, or the periodic ``syncPeriod``
        resync; None without periods, before the first sync, or with nothing to wait
        for (then only an event makes work)."""
        p, t, last = self.periods, self._tracker, self.last_sync
        if p is None or t is None or last is None:
            return None
        due = None if p.resync is None else last + p.resync
        if self._need_full or t.pending():
            held = last + p.min_sync
            due = held if due is None else min(due, held)
        return due

    def sync(self) -> int:
        """One sync if anything changed (or none was done yet, or the periodic resync is
        due), unless ``minSyncPeriod`` holds it off: returns 1, else 0."""
        t, cfg = self._tracker, self._config
        if t is None or cfg is None:
            return 0
        now = self.clock.now()
        p, last = self.periods, self.last_sync
        if p is not None and last is not None and p.resync is not None and now >= last + p.resync:
            self._need_full = True  # the periodic resync
        if not self._need_full and not t.pending():
            return 0
        if p is not None and last is not None and now < last + p.min_sync:
            return 0  # held off: next_due says when
        self._warn_ipvs()
        changed = t.apply()
        full = self._need_full or self.mode != "iptables"
        rendered = render(
            self.mode,
            t.snapshot,
            cfg,
            changed=None if full else changed,
            existing_chains=self.sink.existing_chains(self.node_name),
            stale_since=self.stale_since,
            now=self.clock.now(),
        )
        try:
            self.sink.load(self.node_name, self.mode, rendered, full=full)
        except BaseException:
            self.stale_since = {}  # upstream: the record is wrong if the load failed
            self._need_full = True  # the changes applied above were not loaded
            raise
        if isinstance(rendered, NftablesRender):
            self.stale_since = dict(rendered.stale_since)
        self.last = rendered
        self._need_full = False
        self.netprog.synced(self.clock.now())
        self.last_sync = now
        if full:
            self.full_syncs += 1
        else:
            self.partial_syncs += 1
        if self.recorder is not None and self._node is not None:
            snap = t.snapshot
            what = "full sync" if full else f"partial sync of {len(changed)} service port(s)"
            self.recorder.record(
                "kube-proxy",
                self._node,
                "SyncProxyRules",
                f"{self.mode}: {what}; {len(snap.ports)} service ports, "
                f"{snap.total_endpoints} endpoints",
            )
        return 1

    def _warn_ipvs(self) -> None:
        """Record IPVS mode's deprecation Warning on the node, once (module docstring)."""
        if self.mode != "ipvs" or self._warned_ipvs or self.recorder is None or self._node is None:
            return
        self._warned_ipvs = True
        self.recorder.record(
            "kube-proxy", self._node, "IPVSDeprecation", IPVS_DEPRECATION, type_="Warning"
        )

    @property
    def node_config(self) -> NodeProxyConfig | None:
        return self._config


def _node_view(node: Node) -> tuple[tuple[str, ...], str | None, str | None]:
    """What of its Node kube-proxy's configuration reads: addresses, podCIDR, zone."""
    return (
        tuple(a.address for a in node.status.addresses),
        node.spec.pod_cidr,
        node.labels.get(ZONE_LABEL),
    )
