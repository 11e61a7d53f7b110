"""The ServiceCIDR controller (kube-controller-manager's ``service-cidr-controller``).

Contract of :meth:`ServiceCIDRController.reconcile` for a ServiceCIDR:

* Not being deleted: it carries the finalizer ``networking.k8s.io/service-cidr-finalizer``
  and, unless it has a Ready condition already (the default ``kubernetes`` one is made
  Ready by the apiserver), the condition Ready True, "Kubernetes Service CIDR is ready".
* Being deleted (``deletionTimestamp``): while some IPAddress inside it is covered by
  no other ServiceCIDR that is not being deleted
  (:func:`control.apiserver.servicecidrs.in_use`), the finalizer stays and the condition
  says Ready False, reason ``Terminating``, "There are still IPAddresses referencing the
  ServiceCIDR, please remove them or create a new ServiceCIDR"; once none is, the
  finalizer is removed, and with it the ServiceCIDR (the apiserver removes an object
  being deleted whose last finalizer goes).
* Any IPAddress deleted, or any ServiceCIDR changed, re-checks every ServiceCIDR being
  deleted (another may now cover its addresses).
* Level-triggered and idempotent: a pass over a settled ServiceCIDR writes nothing.

Unlike kube-controller-manager, the finalizer goes as soon as nothing holds the range
(no 10-second grace: the apiserver's allocator here reads the ServiceCIDRs of the very
store it writes to, so no allocation can be racing with the removal).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from control.apiserver import servicecidrs
from control.clock import Clock, rfc3339
from control.controllers.base import APIClient, Controller
from control.events import Recorder
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError
from netmodel.objects import KubeObject, finalizers


def _conditions(obj: KubeObject) -> list[dict[str, Any]]:
    status = (obj.model_extra or {}).get("status")
    conds = status.get("conditions") if isinstance(status, dict) else None
    return [c for c in conds if isinstance(c, dict)] if isinstance(conds, list) else []


class ServiceCIDRController(Controller):
    """Keys are ServiceCIDR names; see the module docstring."""

    name = "service-cidr-controller"
    kinds = frozenset({"ServiceCIDR", "IPAddress"})

    def __init__(self, api: APIClient, recorder: Recorder, clock: Clock) -> None:
        super().__init__(api, recorder)
        self.clock = clock

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterator[str]:
        obj = event.object
        if obj.kind == "ServiceCIDR":
            yield obj.name
        if event.type == "DELETED" or obj.kind == "ServiceCIDR":
            for cidr in self.cache.list("ServiceCIDR"):
                if cidr.metadata.deletion_timestamp is not None and cidr.name != obj.name:
                    yield cidr.name

    def reconcile(self, key: str) -> None:
        try:
            cidr = self.store.get("ServiceCIDR", key)
        except NotFoundError:
            return
        fins = finalizers(cidr)
        if cidr.metadata.deletion_timestamp is None:
            self._settle(cidr, fins)
            return
        if servicecidrs.FINALIZER not in fins:
            return
        if servicecidrs.in_use(self.store, key):
            self._ready(
                cidr,
                fins,
                status="False",
                reason=servicecidrs.TERMINATING,
                message=servicecidrs.STILL_IN_USE,
            )
            return
        kept = [f for f in fins if f != servicecidrs.FINALIZER]
        self.api.update(cidr.with_meta(finalizers=kept), component=self.name)

    def _settle(self, cidr: KubeObject, fins: list[str]) -> None:
        if servicecidrs.FINALIZER not in fins:
            fins = [*fins, servicecidrs.FINALIZER]
        if any(c.get("type") == "Ready" for c in _conditions(cidr)):
            if fins != finalizers(cidr):
                self.api.update(cidr.with_meta(finalizers=fins), component=self.name)
            return
        self._ready(cidr, fins, status="True", reason="", message=servicecidrs.READY)

    def _ready(
        self, cidr: KubeObject, fins: list[str], *, status: str, reason: str, message: str
    ) -> None:
        """Write the finalizers and a Ready condition (no write when both are so)."""
        conds = _conditions(cidr)
        before = next((c for c in conds if c.get("type") == "Ready"), None)
        if (
            before is not None
            and (before.get("status"), before.get("reason"), before.get("message"))
            == (status, reason, message)
            and fins == finalizers(cidr)
        ):
            return
        since = rfc3339(self.clock.now())
        if before is not None and before.get("status") == status:
            since = str(before.get("lastTransitionTime") or since)
        want = servicecidrs.ready_condition(message, since, status=status, reason=reason)
        others = [c for c in conds if c.get("type") != "Ready"]
        old_status = (cidr.model_extra or {}).get("status")
        new_status = {**(old_status if isinstance(old_status, dict) else {})}
        new_status["conditions"] = [*others, want]
        data = cidr.to_dict()
        data["status"] = new_status
        data["metadata"]["finalizers"] = fins
        self.api.update(type(cidr).model_validate(data), component=self.name)

    def subject(self, key: str) -> KubeObject | None:
        try:
            return self.store.get("ServiceCIDR", key)
        except NotFoundError:
            return None
