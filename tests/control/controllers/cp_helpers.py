"""Helpers for controller tests: a started control plane and manifest builders."""

from __future__ import annotations

from typing import Any

import yaml

from control.clock import FakeClock
from control.runner import ControlPlane
from control.store.memory import MemoryStore
from netmodel.cluster import ClusterSpec
from netmodel.kinds import object_from_dict
from netmodel.objects import EndpointSlice, KubeObject, Pod


def make_plane(
    nodes: int | list[dict[str, Any]] = 3, *, seed: int = 0, **spec: Any
) -> ControlPlane:
    """A started, idle control plane. Without cluster DNS unless ``dns=True`` is given:
    these controller scenarios count every pod, ReplicaSet and Event of the store, and
    were written before DNS was on by default (kube-system's coredns would add its own)."""
    cluster = ClusterSpec.model_validate({"nodes": nodes, "dns": False, **spec})
    plane = ControlPlane(MemoryStore(), cluster, seed=seed, clock=FakeClock())
    plane.start()
    plane.run_until_idle()
    return plane


def objs(text: str) -> list[KubeObject]:
    return [object_from_dict(d) for d in yaml.safe_load_all(text) if d]


def deployment(
    name: str,
    replicas: int,
    *,
    labels: dict[str, str] | None = None,
    ports: list[dict[str, Any]] | None = None,
    requests: dict[str, str] | None = None,
    image: str = "nginx",
    spec: dict[str, Any] | None = None,
) -> KubeObject:
    labels = labels or {"app": name}
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "ports": ports if ports is not None else [{"containerPort": 8080}],
    }
    if requests:
        container["resources"] = {"requests": requests}
    return object_from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [container], **(spec or {})},
                },
            },
        }
    )


def service(
    name: str,
    selector: dict[str, str] | None,
    ports: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> KubeObject:
    body: dict[str, Any] = {"ports": ports or [{"port": 80, "targetPort": 8080}], **spec}
    if selector is not None:
        body["selector"] = selector
    return object_from_dict(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": body,
        }
    )


def pods(plane: ControlPlane, prefix: str = "") -> list[Pod]:
    return [p for p in plane.store.list("Pod") if isinstance(p, Pod) and p.name.startswith(prefix)]


def slices(plane: ControlPlane, service_name: str) -> list[EndpointSlice]:
    return [
        s
        for s in plane.store.list("EndpointSlice")
        if isinstance(s, EndpointSlice) and s.service_name == service_name
    ]


def reasons(plane: ControlPlane, kind: str, name: str) -> list[str]:
    from control.events import timeline

    return [
        e.reason
        for e in timeline(plane.store)
        if e.involved_object.kind == kind and e.involved_object.name == name
    ]
