"""CustomResourceDefinition documents and CRD setup shared by the CRD tests, in-process
(tests/control/apiserver) and served (tests/control/apiserver/http).

Lives beside tests/control/conftest.py, whose directory pytest puts on ``sys.path`` for every
test under tests/control (the tests directories are not packages). It imports neither
``serving`` nor ``api_helpers`` (each is on the path only for its own directory's tests):
a served apiserver is taken as anything with ``start``/``stop``/``kubectl``.

Every builder returns a fresh document, so a test may change what it gets."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import yaml

from control.apiserver import APIServer
from netmodel import customresources, kinds
from netmodel.kinds import object_from_dict


def crd(
    group: str,
    plural: str,
    kind: str,
    versions: list[dict[str, Any]],
    *,
    scope: str = "Namespaced",
    **names: Any,
) -> dict[str, Any]:
    """An ``apiextensions.k8s.io/v1`` CRD named ``<plural>.<group>``; ``names`` adds to
    ``spec.names`` (``singular``, ``shortNames``...)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural, **names, "kind": kind},
            "versions": versions,
        },
    }


def version(
    name: str, properties: dict[str, Any], *, storage: bool = True, **extra: Any
) -> dict[str, Any]:
    """One served version whose ``openAPIV3Schema`` is an object of ``properties``;
    ``extra`` adds version fields (``subresources``, ``additionalPrinterColumns``...)."""
    return {
        "name": name,
        "served": True,
        "storage": storage,
        **extra,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": properties}},
    }


def gizmo_version(name: str, *, storage: bool, max_replicas: int) -> dict[str, Any]:
    """A Gizmo version with the status subresource: ``spec.color`` (red|blue, required),
    ``spec.replicas`` at most ``max_replicas``, ``status.replicas`` >= 0 and
    ``status.phase`` defaulted to Pending."""
    return version(
        name,
        {
            "spec": {
                "type": "object",
                "required": ["color"],
                "properties": {
                    "color": {"type": "string", "enum": ["red", "blue"]},
                    "replicas": {"type": "integer", "maximum": max_replicas},
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "replicas": {"type": "integer", "minimum": 0},
                    "phase": {"type": "string", "default": "Pending"},
                },
            },
        },
        storage=storage,
        subresources={"status": {}},
    )


def gizmo_crd() -> dict[str, Any]:
    """gizmos.example.com serving v1beta1 (replicas <= 5) and v1 (stored, replicas <= 10),
    ``conversion.strategy`` left to its default None."""
    return crd(
        "example.com",
        "gizmos",
        "Gizmo",
        [
            gizmo_version("v1beta1", storage=False, max_replicas=5),
            gizmo_version("v1", storage=True, max_replicas=10),
        ],
    )


@contextmanager
def installed(api: APIServer, doc: dict[str, Any]) -> Iterator[APIServer]:
    """``api`` with the CRD ``doc`` created; every custom kind is uninstalled from the
    process-wide kind table afterwards (also on failure)."""
    api.create(object_from_dict(doc))
    try:
        yield api
    finally:
        for name in {r.crd for r in kinds.custom_rows()}:
            customresources.uninstall(name)


class Server(Protocol):
    """What these helpers need of a served apiserver (``serving.Served``)."""

    def start(self) -> Any: ...

    def stop(self) -> Any: ...

    def kubectl(
        self, *args: str, check: bool = ..., input: str | None = ...
    ) -> subprocess.CompletedProcess[str]: ...


S = TypeVar("S", bound=Server)


@contextmanager
def running(s: S) -> Iterator[S]:
    """``s`` started, and stopped afterwards (also when starting fails)."""
    try:
        s.start()
        yield s
    finally:
        s.stop()


def apply_crd(s: Server, doc: dict[str, Any], *, timeout: str = "20s") -> None:
    """``kubectl apply`` the CRD ``doc`` and wait until it is Established."""
    s.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    name = doc["metadata"]["name"]
    s.kubectl("wait", "--for=condition=Established", f"crd/{name}", f"--timeout={timeout}")
