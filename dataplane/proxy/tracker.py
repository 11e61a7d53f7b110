"""Change tracking between syncs (upstream's service/endpoints change trackers, pure).

The agent feeds watch events in as ``(previous, current)`` pairs; the tracker folds them
into its current objects and keeps, per Service, the view as of the last :meth:`apply`.
An update whose net effect on that view is nil (a label change, an add followed by a
delete, an EndpointSlice rewritten with the same endpoints) leaves nothing pending.
:meth:`ChangeTracker.apply` returns the service ports whose rules must be rewritten —
the ``changed`` argument of the renderers' partial syncs — and moves the snapshot on.

No I/O, no clock, no threads: the kube-proxy agent owns scheduling.
"""

from __future__ import annotations

from itertools import chain

from dataplane.proxy.model import NodeProxyConfig, ProxySnapshot, ServicePortName, ServicePortState
from dataplane.proxy.snapshot import endpoints_by_port, service_states, snapshot_from_states
from netmodel.objects import EndpointSlice, Service

_View = tuple[ServicePortState, ...]


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

    # ---- state

    def _view(self, key: str) -> _View:
        svc = self._services.get(key)
        if svc is None:
            return ()
        eps = endpoints_by_port(self._slices.get(key, {}).values(), self.node_config)
        return tuple(service_states(svc, eps, self.node_config))

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
