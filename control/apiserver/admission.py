"""What a kind's strategy is given when it admits, releases or checks objects: the
apiserver's allocators (:class:`Allocations`) and, for the checks made once a whole
``apply`` batch is admitted, a view of that batch over the store (:class:`BatchView`).

Contract: :class:`Allocations` is the only state the apiserver keeps besides the store;
:meth:`Allocations.rebuilt` makes it from what is stored (so it survives a restart of a
persistent store). Everything an allocation takes or frees goes through a
:class:`~control.apiserver.allocators.Journal`, so that a refused write gives it back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from control.apiserver.services import ServiceAllocators
from control.store.base import Store
from netmodel.cluster import ClusterSpec
from netmodel.errors import NotFoundError
from netmodel.objects import KubeObject, Service


@dataclass
class Allocations:
    """The allocators strategies admit from and release to: the Service range's
    clusterIPs, nodePorts and LoadBalancer IPs (:mod:`.services`)."""

    services: ServiceAllocators

    @classmethod
    def rebuilt(
        cls, cluster: ClusterSpec, store: Store, *, now: Callable[[], str] | None = None
    ) -> Allocations:
        """The allocators of ``cluster`` holding what the stored objects hold (the
        ClusterIPs' IPAddress objects in ``store`` too, stamped by ``now``)."""
        services = ServiceAllocators(cluster, store=store, now=now)
        services.rebuild([s for s in store.list(Service.KIND) if isinstance(s, Service)])
        return cls(services=services)


@dataclass(frozen=True)
class BatchView:
    """The objects of one ``apply`` as admitted (``batch``: (store kind, key) → object),
    over the store: what an object will find once the batch is written."""

    batch: Mapping[tuple[str, str], KubeObject]
    store: Store
    cluster: ClusterSpec

    def get(self, kind: str, key: str) -> KubeObject | None:
        """The object ``key`` of store kind ``kind`` as the batch leaves it; None if
        neither the batch nor the store has it."""
        hit = self.batch.get((kind, key))
        if hit is not None:
            return hit
        try:
            return self.store.get(kind, key)
        except NotFoundError:
            return None
