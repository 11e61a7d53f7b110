"""The node heartbeat: the Lease ``kube-node-lease/<node>`` its kubelet renews.

Contract of :func:`renew` (the kubelet's node lease controller, minimal): the Lease has
``spec.holderIdentity`` the node's name, ``spec.leaseDurationSeconds`` ``duration``
(the kubelet's ``nodeLeaseDurationSeconds``, :data:`DURATION` 40 by default) and
``spec.renewTime`` (a MicroTime) the time of the last renewal on the kubelet's clock
(no ownerReference to its Node yet: see :func:`lease_object`). It is created when
missing and renewed once :func:`renew_interval` seconds (a quarter of the duration, as
the kubelet does) have passed since its renewTime; otherwise nothing is written. Its
writes record no Event (the Lease strategy's ``records_events``), as a cluster records
none for a heartbeat. The node lifecycle controller reads it
(:mod:`control.controllers.nodelifecycle`): a Lease not renewed for the grace period
makes its node NotReady.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Protocol

from control.clock import rfc3339
from netmodel.errors import ConflictError, NotFoundError
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject, Node

NAMESPACE = "kube-node-lease"
DURATION = 40
RENEW_INTERVAL = DURATION / 4


def renew_interval(duration: float) -> float:
    """How often the kubelet renews a Lease of ``duration`` seconds (a quarter of it)."""
    return duration / 4


#: the kubelet's work-queue key of its Lease (pod keys always hold a '/')
KEY = "node-lease"
COMPONENT = "kubelet"


class LeaseAPI(Protocol):
    @property
    def store(self) -> Any: ...

    def create(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...

    def update(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...


def micro_time(t: float) -> str:
    """A MicroTime (``2026-01-01T00:00:00.000000Z``)."""
    return f"{rfc3339(t)[:-1]}.{round((t % 1) * 1e6) % 1_000_000:06d}Z"


def _parse_micro(text: str) -> float | None:
    """The time of a MicroTime (or an RFC 3339 time) in UTC; None for anything else."""
    if not text.endswith("Z"):
        return None
    try:
        return _dt.datetime.fromisoformat(text).timestamp()  # 'Z' is UTC (Python 3.11)
    except ValueError:
        return None


def lease_object(
    node_name: str, node: Node | None, now: float, duration: int = DURATION
) -> KubeObject:
    """The Lease of ``node_name`` renewed at ``now``. No ownerReference to the Node
    (the real kubelet sets one): with it, deleting a Node under the live driver left that
    node's kubelet Node watch open until its timeout (test_live_e2e's
    test_a_deleted_nodes_kubelet_and_kube_proxy_stop); not understood yet."""
    del node
    meta: dict[str, Any] = {"name": node_name, "namespace": NAMESPACE}
    return object_from_dict(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": node_name,
                "leaseDurationSeconds": duration,
                "renewTime": micro_time(now),
            },
        }
    )


def renew(
    api: LeaseAPI,
    node: Node | None,
    node_name: str,
    now: float,
    duration: int = DURATION,
    *,
    latest: KubeObject | None = None,
) -> KubeObject | None:
    """Create or renew the node's Lease when due; the Lease written, or None.

    ``latest``: the Lease as this kubelet last wrote it (upstream's ``latestLease``),
    renewed without reading it again, so that a renewal is one write instead of a read
    and a write; should that write be refused (the Lease changed meanwhile: a conflict,
    or it was deleted) the Lease is read and the renewal made from what is stored."""
    if latest is not None:
        try:
            return _renewed(api, latest, node_name, now, duration)
        except (ConflictError, NotFoundError):
            pass
    try:
        current = api.store.get("Lease", f"{NAMESPACE}/{node_name}")
    except NotFoundError:
        return api.create(lease_object(node_name, node, now, duration), component=COMPONENT)
    return _renewed(api, current, node_name, now, duration)


def _renewed(
    api: LeaseAPI, current: KubeObject, node_name: str, now: float, duration: int
) -> KubeObject | None:
    """``current`` renewed at ``now`` (a write guarded by its resourceVersion), or None
    when it is not due."""
    spec = (current.model_extra or {}).get("spec")
    spec = spec if isinstance(spec, dict) else {}
    last = _parse_micro(str(spec.get("renewTime") or ""))
    if (
        last is not None
        and now - last < renew_interval(duration)
        and spec.get("holderIdentity") == node_name
        and spec.get("leaseDurationSeconds") == duration
    ):
        return None
    data = current.to_dict()
    data["spec"] = {
        **spec,
        "holderIdentity": node_name,
        "leaseDurationSeconds": duration,
        "renewTime": micro_time(now),
    }
    return api.update(type(current).model_validate(data), component=COMPONENT)
