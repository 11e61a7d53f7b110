"""Resources whose stored objects are not their wire form: the objects are converted on
the way out and the bodies on the way in (kube-apiserver's conversion between a
resource's versions, here between svclab's stored form and the served one).

Contract: :func:`converted` gives the :class:`WireForm` of a resource, or None when its
stored object's own JSON is its wire form (every kind but Events): then the handlers
send the cached JSON of the stored object, check fields against the kind's schema and
keep metadata-only changes cheap. A converted resource is encoded afresh for each
answer and its bodies are not schema-checked (they are converted first).

Events: svclab stores one Event (its timeline entry: ``sourceComponent``, ``revision``,
``sequence``); core/v1 and events.k8s.io/v1 serve it in their two shapes
(:mod:`.wire`), and a posted Event takes its place on the timeline as the Recorder
gives it: its ``sequence`` is its own write, its ``revision`` the one it names when it
names one no newer than the store's (svclab's components name their subject's, as
:class:`control.events.Recorder` does), else the store's.
"""

from __future__ import annotations

from typing import Any, Protocol

from control.apiserver.http import wire
from control.apiserver.http.resources import Resource
from netmodel.objects import Event, KubeObject


class WireForm(Protocol):
    """How one resource's objects are converted to and from its wire form."""

    def encode(self, res: Resource, obj: KubeObject) -> dict[str, Any]:
        """The wire form of the stored ``obj`` as ``res`` serves it."""
        ...

    def decode(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        """The stored form of a body posted to ``res``."""
        ...

    def on_create(self, body: dict[str, Any], revision: int) -> dict[str, Any]:
        """A created body completed with what the store's ``revision`` gives it."""
        ...


class EventForm:
    """core/v1 and events.k8s.io/v1 Events over svclab's one stored Event."""

    def encode(self, res: Resource, obj: KubeObject) -> dict[str, Any]:
        assert isinstance(obj, Event)
        if res.group == "events.k8s.io":
            return wire.events_v1_event(obj)
        return wire.core_event(obj)

    def decode(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        return wire.event_from_wire(res, body)

    def on_create(self, body: dict[str, Any], revision: int) -> dict[str, Any]:
        # its place on the timeline, as the Recorder gives it
        named = body.get("revision")
        if not (isinstance(named, int) and not isinstance(named, bool) and 0 < named <= revision):
            named = revision
        return {**body, "revision": named, "sequence": revision + 1}


#: store kind -> the wire form of the resources serving it
FORMS: dict[str, WireForm] = {Event.KIND: EventForm()}


def converted(res: Resource) -> WireForm | None:
    """``res``'s wire form when its stored objects are converted, else None."""
    return FORMS.get(res.store_kind) if res.store_kind is not None else None
