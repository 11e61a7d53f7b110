"""Each node's kube-proxy rules on demand, and the record that lets a command which only
reads a persistent cluster skip the control plane.

Why: a fresh CLI process used to run the whole control plane (every controller, one
kube-proxy per node) before answering a question about one packet, which visits two or
three nodes. Two facts make that unnecessary:

* **The store is converged when its revision is the one recorded after the last run to
  idle** (``DIR/converged.json``, written by :func:`record_converged`). Nothing is then
  left for a controller to do, so a command that only reads (trace, ping, connect,
  pcap, conntrack, ...) can leave them all unstarted.
* **A node's rules are a pure function** of the KubeProxyConfiguration, the Cluster,
  the node's Node object and every Service and EndpointSlice: what a freshly started
  kube-proxy on that node loads is its first, full sync (a fresh process's converge does
  exactly that, with no earlier state: no stale nftables chains, no chains left by a
  previous iptables sync). :class:`NodeRulesSource` runs that one sync for a node the
  first time someone asks, through the same agent and sink as the eager path
  (:class:`control.agents.kubeproxy.KubeProxy`, :class:`~control.agents.kubeproxy.EmulatedRules`),
  so the two cannot disagree.

The same facts let a command that writes to a persistent cluster (the CLI's apply and
delete) run the control plane without one kube-proxy per node: :class:`StoreSyncNote`
records, once for all nodes, that what their rules are made of changed, and the
converged revision is recorded after the run, so the next question renders from here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from control.clock import Clock
from control.store.base import Store
from netmodel.cluster import ClusterSpec
from netmodel.objects import EndpointSlice, KubeObject, Node, Service
from netmodel.proxyconfig import KubeProxyConfiguration

if TYPE_CHECKING:
    from control.agents.kubeproxy import NodeRules
    from control.events import Recorder
    from control.rulecache import RuleCache
    from netmodel.rulesets import RulesetInput

CONVERGED_FILE = "converged.json"


def _converged_record(state_dir: Path) -> dict[str, object] | None:
    try:
        data = json.loads((state_dir / CONVERGED_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def converged_revision(state_dir: Path) -> int | None:
    """The store revision recorded after the last run of the control plane to idle over
    ``state_dir`` (None: never recorded, or unreadable: then converge as before)."""
    rev = (_converged_record(state_dir) or {}).get("revision")
    return rev if isinstance(rev, int) and not isinstance(rev, bool) else None


def converged_start_work(state_dir: Path) -> dict[str, bool] | None:
    """What was recorded with the converged revision about the work a full start would
    find (:meth:`control.runner.ControlPlane.start_work`), or None."""
    work = (_converged_record(state_dir) or {}).get("start_work")
    if not isinstance(work, dict) or not all(isinstance(v, bool) for v in work.values()):
        return None
    return {str(k): v for k, v in work.items()}


def record_converged(
    state_dir: Path, revision: int, start_work: Mapping[str, bool] | None = None
) -> None:
    """Record that the store of ``state_dir`` is converged at ``revision``, with what a
    full start would find to do there when known (``start_work``; atomic replace;
    nothing written when the record already says so or the directory is gone)."""
    data: dict[str, object] = {"revision": revision}
    if start_work is not None:
        data["start_work"] = dict(sorted(start_work.items()))
    if _converged_record(state_dir) == data or not state_dir.is_dir():
        return
    f = state_dir / CONVERGED_FILE
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    tmp.replace(f)


class NodeRulesSource:
    """Per node name, what that node's kube-proxy holds after its first (full) sync over
    the store as it is now, computed on first request (see the module docstring). Reads
    Nodes, Services and EndpointSlices once, on first use."""

    def __init__(
        self,
        store: Store,
        cluster: ClusterSpec,
        proxy_config: KubeProxyConfiguration | None,
        clock: Clock,
        cache: RuleCache | None = None,
    ) -> None:
        self.store = store
        self.cache = cache
        self.cluster = cluster
        self.proxy_config = proxy_config
        self.clock = clock
        self._objs: list[KubeObject] | None = None
        self._nodes: list[str] | None = None
        self._states: dict[str, NodeRules] = {}
        #: :meth:`ruleset`'s values by (convert, hash of the payloads), ``by_rules``
        self._by_rules: dict[tuple[object, str], tuple[RulesetInput | None, tuple[str, ...]]] = {}
        #: what the rendered-level key names of each object: (kind, key, uid,
        #: resourceVersion), Nodes by name, then Services and EndpointSlices
        self._ids: tuple[dict[str, tuple[str, ...]], list[tuple[str, ...]]] | None = None

    def _objects(self) -> list[KubeObject]:
        if self._objs is None:
            nodes = [n for n in self.store.list("Node") if isinstance(n, Node)]
            self._nodes = [n.name for n in nodes]
            self._objs = [
                *nodes,
                *(s for s in self.store.list("Service") if isinstance(s, Service)),
                *(s for s in self.store.list("EndpointSlice") if isinstance(s, EndpointSlice)),
            ]
        return self._objs

    def _identities(self) -> tuple[dict[str, tuple[str, ...]], list[tuple[str, ...]]]:
        """Each object's (kind, key, uid, resourceVersion) as :func:`inputs_key` names
        it, read through :func:`control.store.base.scan` (no object decoded: a warm
        cache hit needs no more)."""
        if self._ids is None:
            from control.store.base import scan

            meta = [("metadata", "uid"), ("metadata", "resourceVersion")]

            def ids(kind: str) -> list[tuple[str, ...]]:
                return [
                    (kind, key, str(uid), str(rv)) for key, uid, rv in scan(self.store, kind, meta)
                ]

            nodes = {i[1]: i for i in ids("Node")}
            self._ids = (nodes, [*ids("Service"), *ids("EndpointSlice")])
        return self._ids

    def nodes(self) -> list[str]:
        """Every node with a kube-proxy (every Node object), in store order."""
        if self._nodes is None:
            self._nodes = list(self._identities()[0])
        return list(self._nodes)

    def state(self, node: str) -> NodeRules:
        """``node``'s kube-proxy state after its first sync (KeyError: no such Node)."""
        hit = self._states.get(node)
        if hit is not None:
            return hit
        if node not in self.nodes():
            raise KeyError(node)
        state = self._states[node] = self._load(node, self._render(node))
        return state

    def _render(self, node: str) -> list[tuple[str, object, bool]]:
        """What ``node``'s kube-proxy loads in its first sync (mode, render, full), as
        :class:`_DeferredLoad` records it: the render, without the sink's parse."""
        from control.agents.kubeproxy import KubeProxy

        deferred = _DeferredLoad()
        proxy = KubeProxy(node, self.cluster, self.proxy_config, deferred, None, clock=self.clock)
        proxy.resync(self._objects())
        proxy.sync()
        return deferred.loads

    def _load(self, node: str, loads: list[tuple[str, object, bool]]) -> NodeRules:
        """The state an :class:`~control.agents.kubeproxy.EmulatedRules` sink holds for
        ``node`` after ``loads`` (:meth:`_render`): exactly what it holds when it is the
        agent's own sink, since a fresh node's sink holds nothing (no existing chains)
        and the agent reads nothing back from the load."""
        from control.agents.kubeproxy import EmulatedRules
        from control.agents.kubeproxy import NodeRules as NodeRulesState

        sink = EmulatedRules()
        for mode, rendered, full in loads:
            sink.load(node, mode, rendered, full=full)  # type: ignore[arg-type]
        return sink.nodes.get(node) or NodeRulesState()

    def ruleset(
        self,
        node: str,
        convert: Callable[[NodeRules], RulesetInput | None],
        *,
        by_rules: bool = False,
    ) -> tuple[RulesetInput | None, tuple[str, ...]]:
        """What the emulator evaluates for ``node`` (``convert`` of its :meth:`state`)
        and the Service addresses its kube-proxy binds to the node (IPVS mode; else
        none), through :attr:`cache` when there is one (keyed by everything the render
        reads: :func:`control.rulecache.inputs_key`). The node's :meth:`state` is not
        kept after it is converted.

        ``by_rules``: ``convert`` of an iptables-mode state depends on its
        :attr:`~control.agents.kubeproxy.NodeRules.ruleset` alone, which is a function
        of the payloads loaded (``iptables-restore --noflush`` of the ensure and sync
        payloads onto a fresh node). Then a node whose payloads are those of a node
        already converted in this process gets that node's value without its payloads
        being parsed again (nodes of a cluster mostly render the same rules: a cold
        question about two nodes parsed 60,000 rules twice)."""
        from dataplane.proxy import IptablesRender
        from dataplane.proxy.ipvs import IpvsRender

        key = None
        if self.cache is not None:
            from control.rulecache import identities_key

            nodes, others = self._identities()
            if node not in nodes:
                raise KeyError(node)
            key = identities_key(
                ["node-rules", node, repr(self.cluster), repr(self.proxy_config)],
                [nodes[node], *others],
            )
            hit = self.cache.get("rendered", key)
            if hit is not None:
                return hit
        held = self._states.get(node)
        loads = self._render(node) if held is None else None
        same = None
        if (
            by_rules
            and loads is not None
            and all(mode == "iptables" and isinstance(r, IptablesRender) for mode, r, _ in loads)
        ):
            same = (convert, _payloads_key(loads))
        value = self._by_rules.get(same) if same is not None else None
        if value is None:
            state = self._load(node, loads) if loads is not None else held
            assert state is not None
            r = state.rendered
            value = (convert(state), tuple(r.addresses) if isinstance(r, IpvsRender) else ())
            # the sink's parsed model of the rules (60,000 rules at 1,000 Services) is not
            # kept once converted: the caller keeps the value, and the node's next
            # question starts from the cache (or syncs again)
            del state, r
            if same is not None:
                self._by_rules[same] = value
        del loads
        self._states.pop(node, None)
        if self.cache is not None and key is not None:
            self.cache.put("rendered", key, value)
        return value


class StoreSyncNote:
    """What stands in for the per-node kube-proxies in a persistent cluster's writing
    process (the CLI's apply and delete: :attr:`control.session.Session.proxies_from_store`).

    Why: each node's rules are a pure function of the store (module docstring) and every
    later question renders them from it (:class:`NodeRulesSource`), so running one
    kube-proxy per node in that process only repeated, per node, work proportional to
    every Service (1,000 nodes x 500 Services: over a minute for one new Service).

    Contract (the runner's Agent protocol): a round in which Services, EndpointSlices or
    Nodes changed records ONE ``SyncProxyRules`` Event from ``kube-proxy`` for all nodes
    (instead of one per node), about the last object changed, naming what changed; a
    round with no such change records nothing (an apply that changes nothing records
    nothing). The listing it starts from is not a change."""

    name = "kube-proxy"
    kinds = ("Service", "EndpointSlice", "Node")

    def __init__(self, recorder: Recorder | None) -> None:
        self.recorder = recorder
        self._nodes: set[str] = set()
        #: changed objects since the last sync, by kind/namespace/name, in change order
        self._changed: dict[tuple[str, str, str], KubeObject] = {}

    def resync(self, objs: Iterable[KubeObject]) -> None:
        self._nodes = {o.name for o in objs if isinstance(o, Node)}
        self._changed.clear()

    def handle(self, events: Sequence[object]) -> None:
        for ev in events:
            obj: KubeObject = ev.object  # type: ignore[attr-defined]
            if isinstance(obj, Node):
                if ev.type == "DELETED":  # type: ignore[attr-defined]
                    self._nodes.discard(obj.name)
                else:
                    self._nodes.add(obj.name)
            key = (obj.kind, obj.namespace or "", obj.name)
            self._changed.pop(key, None)
            self._changed[key] = obj

    def forget(self) -> None:
        """Drop the changes seen so far (they are not this command's)."""
        self._changed.clear()

    def sync(self) -> int:
        if not self._changed:
            return 0
        changed = list(self._changed.values())
        self._changed.clear()
        if self.recorder is None:
            return 1
        names = [f"{o.kind.lower()}/{o.name}" for o in changed]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        self.recorder.record(
            "kube-proxy",
            changed[-1],
            "SyncProxyRules",
            f"all {len(self._nodes)} nodes: {shown} changed; each node's rules are "
            "rendered from the store when asked for (svclab rules --node NAME)",
        )
        return 1


def _payloads_key(loads: list[tuple[str, object, bool]]) -> str:
    """A hash naming the iptables payloads a fresh node loads (:meth:`NodeRulesSource.
    _render`): for each load, whether full, its ensure payload (the first load only, as
    :class:`~control.agents.kubeproxy.EmulatedRules` applies it) and its sync payload,
    each behind its length."""
    import hashlib

    from dataplane.proxy import IptablesRender

    h = hashlib.sha256()
    for i, (_, r, full) in enumerate(loads):
        assert isinstance(r, IptablesRender)
        texts = [r.ensure_input(), r.restore_input] if i == 0 else [r.restore_input]
        h.update(b"load %d %d\n" % (i, full))
        for t in texts:
            data = t.encode("utf-8", "surrogatepass")
            h.update(b"%d:" % len(data))
            h.update(data)
    return h.hexdigest()


class _DeferredLoad:
    """A sink that records what a fresh node's kube-proxy loads, for an
    :class:`~control.agents.kubeproxy.EmulatedRules` to load once the agent is gone
    (:meth:`NodeRulesSource._load`). It holds no rules yet, as that sink's fresh node
    does not: no existing chains."""

    def __init__(self) -> None:
        self.loads: list[tuple[str, object, bool]] = []

    def load(self, node: str, mode: str, rendered: object, *, full: bool) -> None:
        self.loads.append((mode, rendered, full))

    def existing_chains(self, node: str) -> Collection[str]:
        return ()


class RecordedRules:
    """A kube-proxy sink for a persistent cluster's writing process (apply, delete):
    it keeps what the agents' next syncs need (the last render, the KUBE-* chains of nat
    an iptables node holds) and does not build the rules' model, which nobody in that
    process evaluates: a later question renders a node's rules from the store
    (:class:`NodeRulesSource`). What the agents render and record (their Events) is
    what they do over :class:`~control.agents.kubeproxy.EmulatedRules`.

    The chains are followed through the payloads' text as ``iptables-restore
    --noflush`` would apply them: ``:CHAIN`` and ``-N CHAIN`` create, ``-X CHAIN``
    deletes."""

    def __init__(self) -> None:
        from control.agents.kubeproxy import NodeRules

        self._new = NodeRules
        self.nodes: dict[str, NodeRules] = {}
        self._chains: dict[str, dict[str, None]] = {}
        #: nodes adopted and not synced since: their per-service chains, as adopted
        self._adopted: dict[str, frozenset[str]] = {}

    def load(self, node: str, mode: str, rendered: object, *, full: bool) -> None:
        from dataplane.proxy import IptablesRender

        state = self.nodes.setdefault(node, self._new(mode=mode))  # type: ignore[arg-type]
        state.mode = mode  # type: ignore[assignment]
        if isinstance(rendered, IptablesRender):
            adopted = self._adopted.pop(node, None)
            if adopted is not None:
                self._chains[node] = dict.fromkeys(adopted)
            chains = self._chains.setdefault(node, {})
            if state.syncs == 0:
                _follow_nat_chains(chains, rendered.ensure_input())
            _follow_nat_chains(chains, rendered.restore_input)
        state.rendered = rendered  # type: ignore[assignment]
        state.syncs += 1

    def adopt(self, node: str, mode: str, chains: frozenset[str]) -> None:
        """The node holds the rules of a full sync whose per-service nat chains are
        ``chains`` (:meth:`control.agents.kubeproxy.KubeProxy.adopt`), as if it had
        loaded that sync."""
        state = self.nodes[node] = self._new(mode=mode)  # type: ignore[arg-type]
        state.syncs = 1
        self._chains.pop(node, None)
        self._adopted[node] = chains  # all per-service chains: nothing to filter

    def existing_chains(self, node: str) -> Collection[str]:
        from control.agents.kubeproxy import KUBE_CHAIN_PREFIXES
        from dataplane.proxy.nftables import NftablesRender

        state = self.nodes.get(node)
        if state is None:
            return []
        adopted = self._adopted.get(node)
        if adopted is not None:
            return adopted  # the renderer takes a frozenset as it is
        if state.mode == "nftables" and isinstance(state.rendered, NftablesRender):
            r = state.rendered
            return [*(c.name for c in r.chains), *(s.name for s in r.sets)]
        return [c for c in self._chains.get(node, {}) if c.startswith(KUBE_CHAIN_PREFIXES)]


def _follow_nat_chains(chains: dict[str, None], payload: str) -> None:
    table = None
    for line in payload.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif table != "nat":
            continue
        elif line.startswith(":"):
            chains.setdefault(line[1:].split(" ", 1)[0], None)
        elif line.startswith(("-N ", "--new-chain ")):
            chains.setdefault(line.split()[1], None)
        elif line.startswith(("-X ", "--delete-chain ")):
            chains.pop(line.split()[1], None)
