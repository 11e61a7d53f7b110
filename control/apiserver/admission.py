"""What a kind's strategy is given when it admits, releases or checks objects: the
apiserver's allocators (:class:`Allocations`) and, for the checks made once a whole
``apply`` batch is admitted, a view of that batch over the store (:class:`BatchView`);
and the admission plugins that change what is created (:func:`default_toleration_seconds`).

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
from netmodel.objects import KubeObject, Pod, Service, Toleration

#: kube-apiserver's --default-not-ready-toleration-seconds and
#: --default-unreachable-toleration-seconds
DEFAULT_TOLERATION_SECONDS = 300
#: the taints the DefaultTolerationSeconds plugin makes every pod tolerate for a while
NODE_HEALTH_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def default_toleration_seconds(pod: Pod) -> Pod:
    """kube-apiserver's DefaultTolerationSeconds admission plugin on a Pod created or
    updated (not its status): for
    ``node.kubernetes.io/not-ready`` and ``node.kubernetes.io/unreachable``, unless one of
    the pod's tolerations already names that key (or no key) with effect NoExecute (or no
    effect), a toleration ``{key, operator: Exists, effect: NoExecute, tolerationSeconds:
    300}`` is appended (not-ready first): a pod stays 5 minutes on a lost node before the
    taint eviction controller deletes it. A pod that has both is returned as it is."""
    tols = pod.spec.tolerations
    added = [
        Toleration(
            key=key,
            operator="Exists",
            effect="NoExecute",
            toleration_seconds=DEFAULT_TOLERATION_SECONDS,
        )
        for key in NODE_HEALTH_TAINTS
        if not any(t.key in (key, None, "") and t.effect in ("NoExecute", None, "") for t in tols)
    ]
    if not added:
        return pod
    return pod.evolve(spec=pod.spec.evolve(tolerations=[*tols, *added]))


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
