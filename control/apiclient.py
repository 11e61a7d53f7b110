"""The API client protocol: what a controller, the scheduler or a node agent writes
through and reads from.

Two implementations keep it: the in-process apiserver
(:class:`control.apiserver.server.APIServer`, what the deterministic runner hands its
components) and :class:`control.informers.remote.RemoteAPI` (the REST API over HTTPS,
under the component's own identity). It has a module of its own so that a node agent
(the kubelet) depends on the contract, not on the controllers' framework.

Contract: writes go through ``create``/``update``/``update_status``/``delete``/``bind``
and raise :class:`~netmodel.errors.SvclabError` subclasses when refused (409 conflict,
404 not found, 422 invalid); ``store`` is the read view (gets and lists; a component
never writes through it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from control.store.base import Store
from netmodel.objects import KubeObject, Pod


class APIClient(Protocol):
    """The part of the apiserver controllers and agents write through."""

    @property
    def store(self) -> Store: ...

    def create(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...

    def update(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...

    def update_status(self, obj: KubeObject, *, component: str = ...) -> KubeObject: ...

    def delete(
        self,
        kind: str,
        key: str,
        *,
        component: str = ...,
        expected_version: int | None = ...,
        propagation: str | None = ...,
    ) -> KubeObject: ...

    def finalize_pod_deletion(self, key: str) -> None: ...

    def bind(
        self,
        key: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
        *,
        uid: str | None = None,
        resource_version: int | None = None,
        component: str = ...,
    ) -> Pod:
        """The pods/binding subresource (see :meth:`APIServer.bind`)."""
        ...


__all__ = ["APIClient"]
