"""ServiceCIDR and IPAddress (networking.k8s.io/v1, GA in 1.33): the ClusterIP
allocator's state, as kube-apiserver keeps it (KEP-1880).

Contract:

* The ServiceCIDR ``kubernetes`` holds the Cluster's serviceCIDR: the apiserver
  creates it when it starts (:func:`bootstrap`, kube-apiserver's default ServiceCIDR
  controller), with the condition Ready True, "Kubernetes default Service CIDR is
  ready".
* Every other ServiceCIDR extends the range ClusterIPs come from
  (:class:`~control.apiserver.allocators.ClusterIPRanges`, synced from the stored
  ServiceCIDRs by :func:`cidrs_of`); one being deleted gives no new address.
* Every allocated ClusterIP has an IPAddress object named by the address (canonical
  form), ``spec.parentRef`` naming its Service (group ``""``, resource ``services``,
  namespace, name) and the label ``ipaddress.kubernetes.io/managed-by:
  ipallocator.networking.k8s.io``. It is written once the Service's write is
  (:func:`record`, run by the allocation's Journal on commit) and deleted with the
  allocation (:func:`forget`). :func:`repair` (run when the apiserver starts, as
  kube-apiserver's IPAddress repair loop) makes the stored IPAddress objects and the
  stored Services agree again after a restart: a missing object is written, an
  allocator-managed one no Service holds is deleted.
* :func:`in_use` answers the ServiceCIDR controller
  (:mod:`control.controllers.servicecidr`): the addresses of a ServiceCIDR no other
  ServiceCIDR covers, which hold its deletion.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Mapping
from ipaddress import ip_address, ip_network
from typing import Any, Protocol

from control.store.base import Store
from netmodel.cluster import ClusterSpec
from netmodel.errors import ConflictError, NotFoundError
from netmodel.ip import IPAddress as IP
from netmodel.ip import IPNetwork, parse_ip_legacy
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject, finalizers

GROUP = "networking.k8s.io"
API_VERSION = f"{GROUP}/v1"
DEFAULT_NAME = "kubernetes"
FINALIZER = "networking.k8s.io/service-cidr-finalizer"
MANAGED_BY = "ipaddress.kubernetes.io/managed-by"
ALLOCATOR = "ipallocator.networking.k8s.io"
DEFAULT_READY = "Kubernetes default Service CIDR is ready"
READY = "Kubernetes Service CIDR is ready"
TERMINATING = "Terminating"
STILL_IN_USE = (
    "There are still IPAddresses referencing the ServiceCIDR, please remove them or "
    "create a new ServiceCIDR"
)
_UID_NAMESPACE = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")


class Creator(Protocol):
    """The apiserver verbs :func:`bootstrap` writes through."""

    def create(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...


def spec_of(obj: KubeObject) -> dict[str, Any]:
    """A generic object's ``spec`` (empty when absent or not a mapping)."""
    spec = (obj.model_extra or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def cidrs_of(store: Store) -> dict[str, tuple[tuple[str, ...], bool]]:
    """Stored ServiceCIDRs: name -> (spec.cidrs, whether it is being deleted)."""
    out: dict[str, tuple[tuple[str, ...], bool]] = {}
    for obj in store.list("ServiceCIDR"):
        cidrs = spec_of(obj).get("cidrs") or []
        texts = tuple(str(c) for c in cidrs) if isinstance(cidrs, list) else ()
        out[obj.name] = (texts, obj.metadata.deletion_timestamp is not None)
    return out


def ready_condition(
    message: str, now: str, *, status: str = "True", reason: str = ""
) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": status,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def default_service_cidr(cluster: ClusterSpec, now: str) -> KubeObject:
    """The ServiceCIDR ``kubernetes`` of the Cluster's serviceCIDR, Ready."""
    return object_from_dict(
        {
            "apiVersion": API_VERSION,
            "kind": "ServiceCIDR",
            "metadata": {"name": DEFAULT_NAME},
            "spec": {"cidrs": [str(cluster.service_net)]},
            "status": {"conditions": [ready_condition(DEFAULT_READY, now)]},
        }
    )


def bootstrap(api: Creator, store: Store, cluster: ClusterSpec, now: str) -> None:
    """Create the default ServiceCIDR when it is missing (idempotent)."""
    try:
        store.get("ServiceCIDR", DEFAULT_NAME)
    except NotFoundError:
        api.create(default_service_cidr(cluster, now), component="apiserver")


def canonical(ip: str) -> str:
    """The IPAddress name of a ClusterIP (a legacy form with leading zeros, as a stored
    Service may carry, in canonical form)."""
    return str(parse_ip_legacy(ip))


def parent_ref(owner: str) -> dict[str, str]:
    """``Service/NS/NAME`` (an allocator owner) as an IPAddress ``spec.parentRef``."""
    _, ns, name = owner.split("/", 2)
    return {"group": "", "resource": "services", "namespace": ns, "name": name}


def owner_of(obj: KubeObject) -> str | None:
    """The allocator owner an IPAddress names (``Service/NS/NAME``), None for another."""
    ref = spec_of(obj).get("parentRef")
    if not isinstance(ref, dict) or ref.get("resource") != "services" or ref.get("group"):
        return None
    return f"Service/{ref.get('namespace') or ''}/{ref.get('name') or ''}"


def managed(obj: KubeObject) -> bool:
    return obj.labels.get(MANAGED_BY) == ALLOCATOR


def ip_address_object(ip: str, owner: str, now: str, revision: int) -> KubeObject:
    """The IPAddress of ``ip`` held by ``owner``; its uid is derived from the name and
    the revision of the write that creates it."""
    name = canonical(ip)
    return object_from_dict(
        {
            "apiVersion": API_VERSION,
            "kind": "IPAddress",
            "metadata": {
                "name": name,
                "labels": {MANAGED_BY: ALLOCATOR},
                "creationTimestamp": now,
                "uid": str(uuid.uuid5(_UID_NAMESPACE, f"IPAddress/{name}/{revision}")),
            },
            "spec": {"parentRef": parent_ref(owner)},
        }
    )


def record(store: Store, ip: str, owner: str, now: Callable[[], str]) -> None:
    """Write the IPAddress of ``ip`` for ``owner`` unless it is stored as such already
    (one a replayed dump brought); one naming another parent is replaced."""
    name = canonical(ip)
    try:
        current: KubeObject | None = store.get("IPAddress", name)
    except NotFoundError:
        current = None
    if current is not None:
        if owner_of(current) == owner:
            return
        store.delete("IPAddress", name, expected_version=current.resource_version)
    with contextlib.suppress(ConflictError):  # written meanwhile: the repair settles it
        store.create(ip_address_object(ip, owner, now(), store.revision + 1))


def forget(store: Store, ip: str, owner: str) -> None:
    """Delete the IPAddress of ``ip`` if it names ``owner``."""
    try:
        current = store.get("IPAddress", canonical(ip))
    except (NotFoundError, ValueError):
        return
    if owner_of(current) == owner:
        store.delete("IPAddress", current.key, expected_version=current.resource_version)


def repair(store: Store, held: Mapping[str, str], now: Callable[[], str]) -> int:
    """Make the stored IPAddress objects say what ``held`` (ClusterIP -> owner, what the
    allocator holds) says: write the missing ones, delete the allocator-managed ones
    nobody holds. Returns the number of writes (none on a consistent store)."""
    want = {canonical(ip): owner for ip, owner in held.items()}
    stored = {o.name: o for o in store.list("IPAddress")}
    stale = [o for name, o in sorted(stored.items()) if name not in want and managed(o)]
    missing = [
        (name, owner)
        for name, owner in sorted(want.items())
        if (have := stored.get(name)) is None or owner_of(have) != owner
    ]
    if not stale and not missing:
        return 0
    with store.transaction():
        for obj in stale:
            store.delete("IPAddress", obj.name, expected_version=obj.resource_version)
        for name, owner in missing:
            record(store, name, owner, now)
    return len(stale) + len(missing)


def networks(texts: tuple[str, ...]) -> list[IPNetwork]:
    out: list[IPNetwork] = []
    for text in texts:
        try:
            out.append(ip_network(text, strict=True))
        except ValueError:
            continue
    return out


def in_use(store: Store, name: str) -> list[str]:
    """The IPAddress names inside ServiceCIDR ``name`` that no other ServiceCIDR not
    being deleted covers: what holds its deletion (sorted)."""
    cidrs = cidrs_of(store)
    mine = networks(cidrs.get(name, ((), False))[0])
    others = [
        net
        for other, (texts, dying) in cidrs.items()
        if other != name and not dying
        for net in networks(texts)
    ]
    out: list[str] = []
    for obj in store.list("IPAddress"):
        try:
            ip: IP = ip_address(obj.name)
        except ValueError:
            continue
        if any(ip in n for n in mine if n.version == ip.version) and not any(
            ip in n for n in others if n.version == ip.version
        ):
            out.append(obj.name)
    return sorted(out)


def has_finalizer(obj: KubeObject) -> bool:
    return FINALIZER in finalizers(obj)
