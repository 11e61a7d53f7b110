"""Level-triggered controllers: framework (:mod:`.base`), Deployment, ReplicaSet,
EndpointSlice, garbage collector (:class:`.base.GarbageCollector`), namespace, pod GC,
node IPAM."""

from control.controllers.base import (
    APIClient,
    Controller,
    GarbageCollector,
    ObjectCache,
    WorkQueue,
)
from control.controllers.deployment import DeploymentController, pod_template_hash
from control.controllers.endpointslice import EndpointSliceController
from control.controllers.namespace import NamespaceController
from control.controllers.podgc import PodGarbageCollector
from control.controllers.replicaset import ReplicaSetController

__all__ = [
    "APIClient",
    "Controller",
    "DeploymentController",
    "EndpointSliceController",
    "GarbageCollector",
    "NamespaceController",
    "ObjectCache",
    "PodGarbageCollector",
    "ReplicaSetController",
    "WorkQueue",
    "pod_template_hash",
]
