"""Events made from prototypes are the objects evolve (and validation) would make."""

from __future__ import annotations

import pytest

from control.events import SYSTEM_NAMESPACE, event_about
from netmodel.objects import Event, Node, ObjectMeta, ObjectReference, Pod


def _by_evolve(subject, name, created, component, reason, message, type_, **timeline):  # type: ignore[no-untyped-def]
    rv = timeline.pop("resource_version", None)
    timeline = {k: v for k, v in timeline.items() if v is not None}
    meta = ObjectMeta().evolve(
        name=name,
        namespace=subject.namespace or SYSTEM_NAMESPACE,
        creation_timestamp=created,
        **({} if rv is None else {"resource_version": str(rv)}),
    )
    ref = ObjectReference().evolve(
        kind=subject.kind,
        namespace=subject.namespace or None,
        name=subject.name,
        uid=subject.metadata.uid,
    )
    return Event().evolve(
        metadata=meta,
        involved_object=ref,
        reason=reason,
        message=message,
        type=type_,
        source_component=component,
        **timeline,
    )


POD = Pod.model_validate({"metadata": {"name": "p", "namespace": "web", "uid": "u1"}})
NODE = Node.model_validate({"metadata": {"name": "n1"}})


@pytest.mark.parametrize("subject", [POD, NODE])
@pytest.mark.parametrize(
    "timeline",
    [{}, {"revision": 4, "sequence": 5}, {"revision": 4, "sequence": 5, "resource_version": 5}],
)
def test_event_about_is_what_evolve_makes(subject: object, timeline: dict[str, int]) -> None:
    args = (subject, "p.00000005", "2026-01-01T00:00:00Z", "kubelet", "Started", "ok", "Normal")
    a, b = event_about(*args, **timeline), _by_evolve(*args, **timeline)  # type: ignore[arg-type]
    for x, y in ((a, b), (a.metadata, b.metadata), (a.involved_object, b.involved_object)):
        assert type(x) is type(y)
        assert x.__dict__ == y.__dict__
        assert list(x.__dict__) == list(y.__dict__)
        assert x.__pydantic_fields_set__ == y.__pydantic_fields_set__
        assert x.__pydantic_extra__ == y.__pydantic_extra__
    assert a.to_dict() == b.to_dict()
    assert Event.model_validate(a.to_dict()).to_dict() == a.to_dict()
    # made objects share nothing mutable with each other
    c = event_about(*args, **timeline)  # type: ignore[arg-type]
    assert c.__pydantic_fields_set__ is not a.__pydantic_fields_set__
    assert c.__dict__ is not a.__dict__
