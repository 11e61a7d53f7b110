"""Level-triggered controllers: framework (:mod:`.base`), Deployment, ReplicaSet,
EndpointSlice, garbage collector (:class:`.base.GarbageCollector`), node IPAM."""

from control.controllers.base import (
    APIClient,
    Controller,
    GarbageCollector,
    ObjectCache,
    WorkQueue,
)
from control.controllers.deployment import DeploymentController, pod_template_hash
from control.controllers.endpointslice import EndpointSliceController
from control.controllers.replicaset import ReplicaSetController

__all__ = [
    "APIClient",
    "Controller",
    "DeploymentController",
    "EndpointSliceController",
    "GarbageCollector",
    "ObjectCache",
    "ReplicaSetController",
    "WorkQueue",
    "pod_template_hash",
]
