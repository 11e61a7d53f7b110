"""What a component writes and re-reads through when it is an API client.

:class:`RemoteAPI` keeps the :class:`~control.controllers.base.APIClient` protocol the
in-process :class:`~control.apiserver.server.APIServer` keeps, over a
:class:`~control.informers.http.KubeClient`: so the controllers, the scheduler, the
kubelet and kube-proxy are the same code in both drivers. ``component=`` is not sent:
the server knows who writes from the client certificate.

* ``store`` is a read-only view (:class:`RemoteReader`): a reconcile's re-read of its
  primary object comes from the identity's informer cache (or a GET for a kind it has
  no informer of); writes through it are refused.
* ``finalize_namespace`` is a PUT of ``namespaces/NAME/finalize``.
* ``finalize_pod_deletion`` is a DELETE with ``gracePeriodSeconds=0`` (the kubelet's
  final delete after it stopped the pod).
* ``bind`` posts the ``pods/binding`` subresource (the scheduler uses it when present).
* :class:`RemoteRecorder` posts core/v1 Events named ``<object>.<hex time>`` as
  client-go's recorder does; one the server refuses is logged and dropped.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager, nullcontext

from control.clock import Clock, WallClock, rfc3339
from control.events import SYSTEM_NAMESPACE, Recorder, event_about
from control.informers.http import KubeClient, resource_path
from control.informers.informer import SharedInformer
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError, SvclabError
from netmodel.objects import Event, KubeObject, Namespace, Pod
from netmodel.selectors import LabelSelector

log = logging.getLogger("svclab.events")


class ReadOnlyError(SvclabError):
    """A component tried to write through its read view instead of the API."""


class RemoteReader:
    """The store-shaped read view of the API (get/list) a component re-reads through.

    With a ``cache_source`` (the live driver sets one: kind -> the identity's synced,
    unfiltered informer of that kind, or None) reads come from the informer's cache, as
    client-go's listers do; kinds without such an informer are read with a GET/LIST."""

    #: writes never go through this view (Store protocol attribute)
    TXN_REVISIONS = "consecutive"

    def __init__(
        self, client: KubeClient, cache_source: Callable[[str], SharedInformer | None] | None = None
    ) -> None:
        self.client = client
        self.cache_source = cache_source

    def _informer(self, kind: str) -> SharedInformer | None:
        return self.cache_source(kind) if self.cache_source is not None else None

    @property
    def revision(self) -> int:
        return 0  # unknown to a client; Events carry none

    @property
    def compacted_revision(self) -> int:
        return 0

    def get(self, kind: str, key: str) -> KubeObject:
        inf = self._informer(kind)
        if inf is None:
            return self.client.get(kind, key)
        obj = inf.cache.get(kind, key)
        if obj is None:
            raise NotFoundError(f"{kind} {key!r} not found")
        return obj

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        selector: LabelSelector | None = None,
    ) -> builtins.list[KubeObject]:
        inf = self._informer(kind)
        if inf is None:
            objs = self.client.list(kind, namespace=namespace or None).objects
        else:
            objs = [o for o in inf.objects() if not namespace or o.namespace == namespace]
        if selector is not None:
            objs = [o for o in objs if selector.matches(o.labels)]
        return objs

    def _refuse(self, *_: object, **__: object) -> KubeObject:
        raise ReadOnlyError("a component writes through the API, not its read view")

    create = update = delete = _refuse

    def watch(self, since: int, kinds: Collection[str] | None = None) -> builtins.list[WatchEvent]:
        raise ReadOnlyError("a component watches through its informers")

    def compact(self, revision: int) -> None:
        raise ReadOnlyError("a component cannot compact the store")

    def transaction(self) -> AbstractContextManager[None]:
        return nullcontext()

    def close(self) -> None:
        self.client.close()


class RemoteRecorder(Recorder):
    """Posts Events through the API (same ``record`` contract as :class:`Recorder`)."""

    def __init__(self, client: KubeClient, clock: Clock) -> None:
        self.client = client
        self._clock = clock
        self._lock = threading.Lock()
        self._last = 0

    def _suffix(self) -> str:
        with self._lock:  # unique per recorder even within one nanosecond
            self._last = max(self._last + 1, time.time_ns())
            return f"{self._last:x}"

    def record(
        self,
        component: str,
        subject: KubeObject,
        reason: str,
        message: str,
        *,
        type_: str = "Normal",
        revision: int | None = None,
    ) -> Event:
        ns = subject.namespace or SYSTEM_NAMESPACE
        ev = event_about(
            subject,
            f"{subject.name}.{self._suffix()}",
            rfc3339(self._clock.now()),
            component,
            reason,
            message,
            type_,
            # the revision it describes (the apiserver keeps it, up to its own)
            revision=revision if revision is not None else subject.resource_version or None,
        )
        try:
            created = self.client.create(ev)
        except SvclabError as e:
            # as client-go's recorder: an Event that cannot be written (e.g. into a
            # Terminating namespace) is logged and dropped, never fails the caller's step
            log.info("event %s %s/%s not recorded: %s", reason, ns, subject.name, e)
            return ev
        assert isinstance(created, Event)
        return created


#: (kind, key) -> (resourceVersion written, or None for a deletion; when, monotonic)
Expectations = dict[tuple[str, str], tuple[int | None, float]]


class RemoteAPI:
    """The APIClient protocol over the REST API; see the module docstring.

    It remembers each write it made until the identity's informers have seen it
    (:meth:`pending_writes`, :meth:`observed`): the live driver holds a component's sync
    back until then, which gives a component what the deterministic runner gives it —
    its own earlier writes are in its cache when it reconciles (client-go's
    controllers get this from "expectations"; without it a ReplicaSet controller that
    reconciles before its new pods reach its cache creates them twice)."""

    EXPECTATION_TIMEOUT = 10.0

    def __init__(
        self,
        client: KubeClient,
        *,
        clock: Clock | None = None,
        cache_source: Callable[[str], SharedInformer | None] | None = None,
    ) -> None:
        self.client = client
        self.clock: Clock = clock or WallClock()
        self._reader = RemoteReader(client, cache_source)
        self.recorder = RemoteRecorder(client, self.clock)
        self._expect: Expectations = {}
        self._expect_lock = threading.Lock()

    @property
    def store(self) -> RemoteReader:
        return self._reader

    def _wrote(self, obj: KubeObject) -> KubeObject:
        with self._expect_lock:
            self._expect[(obj.kind, obj.key)] = (obj.resource_version, time.monotonic())
        return obj

    def _deleted(self, kind: str, key: str) -> None:
        with self._expect_lock:
            self._expect[(kind, key)] = (None, time.monotonic())

    def pending_writes(self) -> Expectations:
        with self._expect_lock:
            return dict(self._expect)

    def observed(self, done: list[tuple[str, str]]) -> None:
        """Forget expectations the informers met (or that timed out)."""
        with self._expect_lock:
            for k in done:
                self._expect.pop(k, None)

    def create(self, obj: KubeObject, *, component: str = "") -> KubeObject:
        return self._wrote(self.client.create(obj))

    def update(self, obj: KubeObject, *, component: str = "") -> KubeObject:
        return self._wrote(self.client.update(obj))

    def update_status(self, obj: KubeObject, *, component: str = "") -> KubeObject:
        return self._wrote(self.client.update_status(obj))

    def delete(
        self,
        kind: str,
        key: str,
        *,
        component: str = "",
        force: bool = False,
        expected_version: int | None = None,
        propagation: str | None = None,
    ) -> KubeObject:
        before = self.client.get(kind, key)
        self.client.delete(
            kind,
            key,
            grace_period=0 if force else None,
            resource_version=expected_version,
            propagation=propagation,
        )
        self._deleted(kind, key)
        return before

    def finalize_namespace(self, name: str, *, component: str = "") -> KubeObject | None:
        """PUT namespaces/NAME/finalize (the namespace controller's last step)."""
        try:
            current = self.client.get(Namespace.KIND, name)
        except NotFoundError:
            return None
        path = resource_path(Namespace.KIND, None, name) + "/finalize"
        body = current.to_dict()
        body.setdefault("spec", {})["finalizers"] = []
        self.client.request("PUT", path, body=body)
        return current

    def finalize_pod_deletion(self, key: str) -> None:
        try:
            self.client.delete(Pod.KIND, key, grace_period=0)
        except NotFoundError:
            return  # already gone: idempotent, as in-process
        self._deleted(Pod.KIND, key)

    def bind(
        self,
        key: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
        *,
        uid: str | None = None,
        resource_version: int | None = None,
        component: str = "",
    ) -> Pod:
        namespace, _, name = key.partition("/")
        self.client.bind(
            namespace, name, node, annotations, uid=uid, resource_version=resource_version
        )
        bound = self.client.get(Pod.KIND, key)
        assert isinstance(bound, Pod)
        self._wrote(bound)
        return bound


__all__ = ["ReadOnlyError", "RemoteAPI", "RemoteReader", "RemoteRecorder"]
