"""Builders shared by the apiserver tests."""

from __future__ import annotations

from typing import Any

import yaml

from control.apiserver import APIServer
from control.clock import FakeClock
from control.events import Recorder
from control.store import MemoryStore, Store
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject, Service


def make_api(store: Store | None = None, **cluster: Any) -> APIServer:
    """A bootstrapped apiserver over ``store`` (a fresh MemoryStore by default)."""
    store = store if store is not None else MemoryStore()
    clock = FakeClock()
    spec = ClusterSpec.model_validate(cluster) if cluster else ClusterSpec()
    api = APIServer(store, spec, clock=clock, recorder=Recorder(store, clock))
    api.bootstrap()
    return api


def obj(text: str) -> KubeObject:
    """One object from YAML (no strict schema check: the apiserver is under test)."""
    return object_from_dict(yaml.safe_load(text))


def service(name: str, *, ns: str = "default", **spec: Any) -> Service:
    """A Service with a single TCP port 80 unless ``ports`` is given (camelCase keys)."""
    spec.setdefault("ports", [{"port": 80}])
    data = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }
    out = object_from_dict(data)
    assert isinstance(out, Service)
    return out
