"""The timeline: every control-plane step leaves an Event (component, object, reason,
message, store revision). Events are stored objects of kind ``Event`` in namespace
``svclab-system`` (cluster-scoped subjects) or the subject's namespace, so every backend
persists them and ``svclab get events`` / ``svclab events`` read them back in order.
"""

from __future__ import annotations

from control.clock import Clock, rfc3339
from control.store.base import Store
from netmodel.errors import ConflictError
from netmodel.objects import Event, KubeObject, ObjectMeta, ObjectReference

SYSTEM_NAMESPACE = "svclab-system"


def event_about(
    subject: KubeObject,
    name: str,
    created: str,
    component: str,
    reason: str,
    message: str,
    type_: str = "Normal",
    *,
    revision: int | None = None,
    sequence: int | None = None,
    resource_version: int | None = None,
) -> Event:
    """An Event NAME about SUBJECT, in the subject's namespace (``svclab-system`` for a
    cluster-scoped one), created at CREATED (RFC 3339) and reported by COMPONENT, with
    its place on the timeline (``revision``, ``sequence``) when the writer knows it. Fields
    not given stay unset, so they are not sent (:meth:`~netmodel.objects.K8sModel.to_dict`
    keeps only fields that were set). ``resource_version``: the revision the Event's
    write will get, when the writer knows it (a store keeps such an object as it is
    instead of copying it to stamp it, :func:`control.store.base.stamped`)."""
    # made from empty prototypes (no validation: every value is typed already; the same
    # fields count as set as with the constructors): the recorder writes one Event per
    # control-plane step, and validating three models each was ~5% of a run
    ns = subject.namespace
    meta = {"name": name, "namespace": ns or SYSTEM_NAMESPACE, "creation_timestamp": created}
    if resource_version is not None:
        meta["resource_version"] = str(resource_version)
    values: dict[str, object] = {
        "metadata": _make_meta(meta),
        "involved_object": _make_ref(
            {
                "kind": subject.kind,
                "namespace": ns or None,
                "name": subject.name,
                "uid": subject.metadata.uid,
            }
        ),
        "reason": reason,
        "message": message,
        "type": type_,
        "source_component": component,
    }
    if revision is not None:
        values["revision"] = revision
    if sequence is not None:
        values["sequence"] = sequence
    return _make_event(values)


_make_event = Event.maker(Event())
_make_meta = ObjectMeta.maker(ObjectMeta())
_make_ref = ObjectReference.maker(ObjectReference())


def described(subject: KubeObject, revision: int | None, head: int) -> int:
    """The store revision an Event about ``subject`` describes (:class:`Recorder`):
    ``revision`` when given, else the subject's resourceVersion when it has one, never
    more than ``head`` (the store's revision before the Event's write)."""
    if revision is None:
        revision = subject.resource_version or head
    return min(revision, head)


class Recorder:
    """Writes Events straight into the store (events are not admitted by the apiserver).

    ``revision`` is the store revision the event describes: the one the caller names
    (the apiserver names the write it just made), else the subject's resourceVersion
    as the step saw it (a kubelet's ``Started`` about the pod its status write returned
    names that write; a ``SandboxCreated`` about the pod it was given names an older
    one), else the store's. Never more than the store's: an Event describes what is
    stored. Writes without an Event (a node's Lease renewals, status updates without a
    reason) therefore move no Event's revision. ``sequence`` is the revision of the
    Event's own write, so it is increasing and the timeline order, without any
    bookkeeping across restarts. In a store whose transactions share one revision
    (etcd) events written in one transaction share a sequence; the second one about a
    same-named subject then gets ``-N`` appended to its name."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

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
        seq = self._store.revision + 1
        rev = described(subject, revision, seq - 1)
        ns = subject.namespace or SYSTEM_NAMESPACE
        ev = event_about(
            subject,
            f"{subject.name}.{seq:08d}",
            rfc3339(self._clock.now()),
            component,
            reason,
            message,
            type_,
            revision=rev,
            sequence=seq,
            resource_version=seq,
        )
        for n in range(1, 100):
            try:
                return self._store.create(ev)  # type: ignore[return-value]
            except ConflictError:
                ev = ev.with_meta(name=f"{subject.name}.{seq:08d}-{n}")
        raise ConflictError(f"Event {ns}/{ev.name}: no free name")


def timeline(store: Store) -> list[Event]:
    """All events in timeline order."""
    events = [e for e in store.list("Event") if isinstance(e, Event)]
    return sorted(events, key=lambda e: e.sequence)
