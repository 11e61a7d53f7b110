"""The namespace controller: empties a Terminating Namespace, then removes it.

Deleting a Namespace through the apiserver only marks it Terminating
(``deletionTimestamp``, ``status.phase``); from then on the apiserver refuses to create
anything in it. Contract of :meth:`NamespaceController.reconcile` for such a namespace:

* Every namespaced object in it is deleted through the apiserver (component
  ``namespace-controller``, so each leaves its ``Deleted`` or ``Deleting`` Event), kind by
  kind in :data:`CONTENT_KINDS` order: Deployments and ReplicaSets first, so that no
  controller replaces what follows, then Services (their ClusterIPs and NodePorts are
  freed), EndpointSlices and Pods. Watchers (EndpointSlice controller, kube-proxies) see
  the usual DELETED events.
* Pods bound to a node are only marked; their kubelet finishes them (or the pod GC, when
  the node is gone). While anything remains, ``status.conditions`` holds
  ``NamespaceContentRemaining`` saying what, and every deletion seen in the namespace
  triggers another pass.
* Once nothing is left, the namespace is removed
  (:meth:`~control.apiserver.server.APIServer.finalize_namespace`, Event ``Deleted``).
* Events are kept: they are svclab's timeline and describe this very deletion
  (Kubernetes deletes them with the namespace; they expire there anyway).
* Level-triggered and idempotent: a pass over an Active or removed namespace writes
  nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from control.clock import Clock, rfc3339
from control.controllers.base import APIClient, Controller
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError
from netmodel.kinds import KINDS
from netmodel.objects import Event, KubeObject, Namespace

_ORDER = ("Deployment", "ReplicaSet", "Service", "EndpointSlice", "Pod")

#: The kinds a namespace is emptied of, in deletion order: owners before what they own,
#: then every other namespaced kind svclab stores (Events excepted).
CONTENT_KINDS: tuple[str, ...] = tuple(k for k in _ORDER if k in KINDS) + tuple(
    sorted(k for k, c in KINDS.items() if c.NAMESPACED and k != Event.KIND and k not in _ORDER)
)

REMAINING = "NamespaceContentRemaining"


class NamespaceAPI(APIClient, Protocol):
    """What the controller writes through: the apiserver, with the namespace's last step."""

    def finalize_namespace(self, name: str, *, component: str = ...) -> KubeObject | None: ...


def remaining_condition(left: dict[str, int], since: str) -> dict[str, Any]:
    """The ``NamespaceContentRemaining`` condition for ``left`` (kind -> how many), worded
    as Kubernetes does (``pods has 2 resource instances``)."""
    what = ", ".join(f"{kind.lower()}s has {n} resource instances" for kind, n in left.items())
    return {
        "type": REMAINING,
        "status": "True",
        "reason": "SomeResourcesRemain",
        "message": f"Some resources are remaining: {what}",
        "lastTransitionTime": since,
    }


class NamespaceController(Controller):
    """Deletes everything in a Terminating Namespace, then the Namespace; see the module
    docstring. Keys are namespace names. Keeps no copy of the objects: it only notes which
    namespaces are Terminating, and reads their contents from the store."""

    name = "namespace-controller"
    kinds = frozenset({Namespace.KIND, *CONTENT_KINDS})
    #: what :meth:`prime_deferred` starts without: all but the Namespaces
    deferrable_kinds = frozenset(CONTENT_KINDS)

    def __init__(self, api: NamespaceAPI, recorder: Recorder, clock: Clock) -> None:
        super().__init__(api, recorder)
        self._api = api
        self.clock = clock
        self._terminating: set[str] = set()

    # ---- informer side

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterator[str]:
        obj = event.object
        if isinstance(obj, Namespace):
            name = obj.name
            if event.type == "DELETED" or obj.metadata.deletion_timestamp is None:
                self._terminating.discard(name)
            elif name not in self._terminating:
                self._terminating.add(name)
                yield name
        elif obj.namespace in self._terminating:
            yield obj.namespace

    def handle(self, events: Sequence[WatchEvent]) -> None:
        for ev in events:
            for key in self.keys_for(ev, None):
                self.queue.add(key)

    def resync(self, objects: Iterable[KubeObject]) -> None:
        self.queue.clear()
        self._terminating.clear()
        self.handle(
            [WatchEvent("ADDED", o, o.resource_version) for o in objects if o.kind == "Namespace"]
        )

    def prime_deferred(
        self,
        objects: Iterable[KubeObject],
        later: Callable[[], list[KubeObject]],
        deleting: bool,
    ) -> None:
        """:meth:`prime` from the Namespaces alone: the only objects :meth:`resync`
        reads (a namespace's contents are read from the store when it terminates), so
        ``later``, the listing of the rest, is never needed (nor ``deleting``)."""
        del later, deleting
        self.prime(objects)

    # ---- work

    def reconcile(self, key: str) -> None:
        try:
            ns = self.store.get(Namespace.KIND, key)
        except NotFoundError:
            self._terminating.discard(key)
            return
        if not isinstance(ns, Namespace) or ns.metadata.deletion_timestamp is None:
            return
        for kind in CONTENT_KINDS:
            for obj in self.store.list(kind, key):
                if obj.metadata.deletion_timestamp is None:
                    self.api.delete(kind, obj.key, component=self.name)
        left = {kind: n for kind in CONTENT_KINDS if (n := len(self.store.list(kind, key)))}
        if not left:
            self._api.finalize_namespace(key, component=self.name)
            return
        self._report(ns, left)

    def _report(self, ns: Namespace, left: dict[str, int]) -> None:
        """Keep ``NamespaceContentRemaining`` current (no write when it already is)."""
        conditions = list(ns.status.get("conditions") or [])
        before = next((c for c in conditions if c.get("type") == REMAINING), None)
        since = (before or {}).get("lastTransitionTime") or rfc3339(self.clock.now())
        want = remaining_condition(left, since)
        if before == want:
            return
        others = [c for c in conditions if c.get("type") != REMAINING]
        status = {**ns.status, "conditions": [*others, want]}
        self.api.update_status(ns.evolve(status=status), component=self.name)

    def subject(self, key: str) -> KubeObject | None:
        try:
            return self.store.get(Namespace.KIND, key)
        except NotFoundError:
            return None
