"""core/v1 PersistentVolume and PersistentVolumeClaim and storage.k8s.io/v1
StorageClass: kube-apiserver's defaulting and validation (pkg/apis/core and
pkg/apis/storage), on the wire form. svclab binds no volumes: a claim stays Pending.

* PersistentVolume: reclaim policy Retain, volumeMode Filesystem, status phase
  Pending; access modes and a ``storage`` capacity are required; exactly one volume
  source.
* PersistentVolumeClaim: volumeMode Filesystem, status phase Pending; at least one
  access mode and a positive ``resources.requests.storage``.
* StorageClass: reclaimPolicy Delete, volumeBindingMode Immediate; the provisioner is
  a qualified name; provisioner, parameters, reclaimPolicy and volumeBindingMode are
  immutable.
"""

from __future__ import annotations

from typing import Any

from control.apiserver.kinds_common import IMMUTABLE_MSG, WireStrategy, at, obj_of, quantity
from control.apiserver.names import check_qualified_name
from control.apiserver.validation import Problems

ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
PV_RECLAIM = ("Delete", "Recycle", "Retain")
SC_RECLAIM = ("Delete", "Retain")
VOLUME_MODES = ("Block", "Filesystem")
BINDING_MODES = ("Immediate", "WaitForFirstConsumer")
#: the volume sources a PersistentVolumeSpec may carry (one of them)
PV_SOURCES = (
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "csi",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "glusterfs",
    "hostPath",
    "iscsi",
    "local",
    "nfs",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
)


def _pending(d: dict[str, Any]) -> dict[str, Any]:
    status = obj_of(d, "status")
    status.setdefault("phase", "Pending")
    return status


def _access_modes(modes: Any, f: str, p: Problems, why: str = "") -> None:
    if not modes:
        p.required(f, why)
    for i, m in enumerate(modes):
        p.enum(f"{f}[{i}]", m, ACCESS_MODES)


class PersistentVolumeStrategy(WireStrategy):
    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        spec = obj_of(d, "spec")
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        spec.setdefault("volumeMode", "Filesystem")
        return {**d, "spec": spec, "status": _pending(d)}

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = obj_of(d, "spec")
        _access_modes(spec.get("accessModes"), "spec.accessModes", p)
        capacity = spec.get("capacity") or {}
        if not capacity:
            p.required("spec.capacity")
        if "storage" not in capacity or len(capacity) > 1:
            p.unsupported("spec.capacity", capacity, ("storage",))
        quantity("spec.capacity[storage]", capacity["storage"], p)
        p.enum(
            "spec.persistentVolumeReclaimPolicy",
            spec.get("persistentVolumeReclaimPolicy"),
            PV_RECLAIM,
        )
        p.enum("spec.volumeMode", spec.get("volumeMode"), VOLUME_MODES)
        sources = [s for s in PV_SOURCES if spec.get(s) is not None]
        if not sources:
            p.required("spec", "must specify a volume type")
        if len(sources) > 1:
            p.forbidden(f"spec.{sources[1]}", "may not specify more than 1 volume type")


class PersistentVolumeClaimStrategy(WireStrategy):
    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        spec = obj_of(d, "spec")
        spec.setdefault("volumeMode", "Filesystem")
        return {**d, "spec": spec, "status": _pending(d)}

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = obj_of(d, "spec")
        _access_modes(
            spec.get("accessModes"), "spec.accessModes", p, "at least 1 access mode is required"
        )
        requests = at(spec, "resources", "requests") or {}
        if "storage" not in requests:
            p.required("spec.resources[storage]")
        if quantity("spec.resources[storage]", requests["storage"], p) <= 0:
            p.invalid("spec.resources[storage]", requests["storage"], "must be greater than zero")
        p.enum("spec.volumeMode", spec.get("volumeMode"), VOLUME_MODES)


class StorageClassStrategy(WireStrategy):
    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        out = dict(d)
        out.setdefault("reclaimPolicy", "Delete")
        out.setdefault("volumeBindingMode", "Immediate")
        return out

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        provisioner = str(d.get("provisioner") or "")
        if not provisioner:
            p.required("provisioner")
        p.check("provisioner", provisioner.lower(), check_qualified_name)
        p.enum("reclaimPolicy", d.get("reclaimPolicy"), SC_RECLAIM)
        p.enum("volumeBindingMode", d.get("volumeBindingMode"), BINDING_MODES)

    def validate_update_wire(self, new: dict[str, Any], old: dict[str, Any], p: Problems) -> None:
        if (new.get("parameters") or {}) != (old.get("parameters") or {}):
            p.forbidden("parameters", "updates to parameters are forbidden.")
        if new.get("provisioner") != old.get("provisioner"):
            p.forbidden("provisioner", "updates to provisioner are forbidden.")
        if new.get("reclaimPolicy") != old.get("reclaimPolicy"):
            p.forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden.")
        if new.get("volumeBindingMode") != old.get("volumeBindingMode"):
            p.invalid("volumeBindingMode", new.get("volumeBindingMode") or "", IMMUTABLE_MSG)
