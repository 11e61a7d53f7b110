"""Change tracking between syncs (upstream's service/endpoints change trackers, pure).

The agent feeds watch events in as ``(previous, current)`` pairs; the tracker folds them
into its current objects and keeps, per Service, the view as of the last :meth:`apply`.
An update whose net effect on that view is nil (a label change, an add followed by a
delete, an EndpointSlice rewritten with the same endpoints) leaves nothing pending.
:meth:`ChangeTracker.apply` returns the service ports whose rules must be rewritten —
the ``changed`` argument of the renderers' partial syncs — and moves the snapshot on.

No I/O, no clock, no threads: the kube-proxy agent owns scheduling.

One process often runs a tracker per node (the CLI's kube-proxies, one per node of a
large cluster) over the same Service and EndpointSlice objects. A Service's view
depends on the node only through the node's IP family, its zone, the
LoadBalancerIPMode gate and, when one of the Service's endpoints is on the node or
names it in a ``forNodes`` hint, the node's name (``isLocal``, PreferSameNode). So views are shared between trackers: computed once per
(objects, those inputs) and handed to every node with the same inputs, as the same
objects (equal to what each node would compute: :func:`_view_inputs`).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from operator import is_

from dataplane.proxy.model import NodeProxyConfig, ProxySnapshot, ServicePortName, ServicePortState
from dataplane.proxy.snapshot import endpoints_by_port, service_states, snapshot_from_states
from netmodel.objects import EndpointSlice, Service

_View = tuple[ServicePortState, ...]

#: (what a view is computed from, see _view_inputs) -> ((the Service, its slices), view)
_VIEWS: dict[tuple[object, ...], tuple[tuple[Service, tuple[EndpointSlice, ...]], _View]] = {}
_MAX_VIEWS = 1 << 16
#: id(slice) -> (the slice, the node names of its endpoints)
_SLICE_NODES: dict[int, tuple[EndpointSlice, frozenset[str]]] = {}


def _slice_nodes(sl: EndpointSlice) -> frozenset[str]:
    hit = _SLICE_NODES.get(id(sl))
    if hit is not None and hit[0] is sl:
        return hit[1]
    nodes = frozenset(ep.node_name for ep in sl.endpoints if ep.node_name is not None)
    hinted = [ep.hints.node_names for ep in sl.endpoints if ep.hints is not None]
    if hinted:  # a node named by a forNodes hint sees its own view (PreferSameNode)
        nodes = nodes.union(*hinted)
    if len(_SLICE_NODES) >= _MAX_VIEWS:
        _SLICE_NODES.clear()
    _SLICE_NODES[id(sl)] = (sl, nodes)
    return nodes


def _view_inputs(
    svc: Service, slices: dict[str, EndpointSlice], cfg: NodeProxyConfig
) -> tuple[object, ...]:
    """Everything a Service's view is computed from besides the objects themselves
    (named by identity here; the cache entry holds them, so an id is not reused while
    the entry lives): :func:`~dataplane.proxy.snapshot.service_port_infos` reads the IP
    family and the LoadBalancerIPMode gate, :func:`~dataplane.proxy.snapshot.slice_endpoints`
    the family and the node's name (only to mark endpoints on this node local),
    :func:`~dataplane.proxy.snapshot.make_state` the node's zone and, through node
    hints, its name."""
    name = cfg.node_name
    local = any(name in _slice_nodes(sl) for sl in slices.values())
    return (
        id(svc),
        tuple(map(id, slices.values())),
        cfg.ip_family,
        cfg.load_balancer_ip_mode,
        cfg.zone,
        name if local else None,
    )


class ChangeTracker:
    """Services and EndpointSlices of one node and family, with pending changes.

    ``update_service`` / ``update_endpoint_slice`` return whether the Service they touch
    has a pending change afterwards. ``snapshot`` is the state as of the last ``apply``.
    """

    def __init__(self, node_config: NodeProxyConfig) -> None:
        self.node_config = node_config
        self._services: dict[str, Service] = {}
        self._slices: dict[str, dict[str, EndpointSlice]] = {}  # service key -> slice key
        self._applied: dict[str, _View] = {}
        self._dirty: dict[str, _View] = {}
        self._snapshot = snapshot_from_states((), node_config)

    # ---- inputs

    def update_service(self, previous: Service | None, current: Service | None) -> bool:
        """Record an add (previous None), update, or delete (current None) of a Service."""
        obj = current or previous
        if obj is None:
            return False
        key = obj.key
        if current is None:
            self._services.pop(key, None)
        else:
            self._services[key] = current
        return self._recompute(key)

    def update_endpoint_slice(
        self, previous: EndpointSlice | None, current: EndpointSlice | None
    ) -> bool:
        """Record an add, update or delete of an EndpointSlice (label moves included)."""
        touched: set[str] = set()
        if previous is not None and previous.service_name:
            key = f"{previous.namespace}/{previous.service_name}"
            self._slices.get(key, {}).pop(previous.key, None)
            touched.add(key)
        if current is not None and current.service_name:
            key = f"{current.namespace}/{current.service_name}"
            self._slices.setdefault(key, {})[current.key] = current
            touched.add(key)
        pending = False
        for key in touched:
            if not self._slices.get(key):
                self._slices.pop(key, None)
            pending = self._recompute(key) or pending
        return pending

    def load(self, services: Iterable[Service], slices: Iterable[EndpointSlice]) -> None:
        """Record the adds of ``services`` and ``slices`` at once (a tracker's start from
        a listing): the same pending changes as ``update_service(None, s)`` and
        ``update_endpoint_slice(None, sl)`` for each, with each Service's view computed
        once instead of once per object."""
        touched: dict[str, None] = {}
        for svc in services:
            self._services[svc.key] = svc
            touched[svc.key] = None
        for sl in slices:
            if sl.service_name:
                key = f"{sl.namespace}/{sl.service_name}"
                self._slices.setdefault(key, {})[sl.key] = sl
                touched[key] = None
        for key in touched:
            self._recompute(key)

    # ---- state

    def _view(self, key: str) -> _View:
        svc = self._services.get(key)
        if svc is None:
            return ()
        slices = self._slices.get(key, {})
        cfg = self.node_config
        inputs = _view_inputs(svc, slices, cfg)
        hit = _VIEWS.get(inputs)
        if hit is not None and hit[0][0] is svc and all(map(is_, hit[0][1], slices.values())):
            return hit[1]
        eps = endpoints_by_port(slices.values(), cfg)
        view = tuple(service_states(svc, eps, cfg))
        if len(_VIEWS) >= _MAX_VIEWS:
            _VIEWS.clear()
        _VIEWS[inputs] = ((svc, tuple(slices.values())), view)
        return view

    def _recompute(self, key: str) -> bool:
        view = self._view(key)
        if view == self._applied.get(key, ()):
            self._dirty.pop(key, None)
            return False
        self._dirty[key] = view
        return True

    def pending(self) -> frozenset[str]:
        """``namespace/name`` of every Service with an unapplied change."""
        return frozenset(self._dirty)

    def apply(self) -> set[ServicePortName]:
        """Make pending changes current; return the service ports whose state differs
        from the last apply (ports that appeared, disappeared, or changed in the Service
        or in their endpoints)."""
        changed: set[ServicePortName] = set()
        if not self._dirty:
            return changed
        for key, view in self._dirty.items():
            old = {s.name: s for s in self._applied.get(key, ())}
            new = {s.name: s for s in view}
            changed.update(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))
            if view:
                self._applied[key] = view
            else:
                self._applied.pop(key, None)
        self._dirty.clear()
        self._snapshot = snapshot_from_states(
            chain.from_iterable(self._applied.values()), self.node_config
        )
        return changed

    @property
    def snapshot(self) -> ProxySnapshot:
        """The snapshot as of the last :meth:`apply`."""
        return self._snapshot
