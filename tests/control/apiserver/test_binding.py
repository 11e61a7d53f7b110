"""The pods/binding subresource in process (:meth:`APIServer.bind`): what it writes, what
it refuses (with nothing written), and that the scheduler binds through it."""

from __future__ import annotations

import pytest
from api_helpers import make_api, obj

from control.apiserver import APIServer
from control.events import timeline
from netmodel.errors import ConflictError, InvalidError, NotFoundError
from netmodel.objects import Condition, Pod

POD = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, annotations: {team: a}}
spec:
  schedulerName: nobody
  containers: [{name: c, image: nginx}]
"""


def _pending(api: APIServer) -> Pod:
    pod = api.create(obj(POD))
    assert isinstance(pod, Pod) and pod.spec.node_name is None
    return pod


def test_bind_sets_node_annotations_and_pod_scheduled_only() -> None:
    api = make_api(nodes=2)
    pod = _pending(api)
    bound = api.bind(
        pod.key,
        "node-1",
        {"svclab.dev/x": "1"},
        uid=pod.metadata.uid,
        resource_version=pod.resource_version,
        component="default-scheduler",
    )
    assert api.store.get("Pod", pod.key) == bound
    assert bound.spec.node_name == "node-1"
    assert bound.metadata.annotations == {"team": "a", "svclab.dev/x": "1"}
    cond = bound.condition("PodScheduled")
    assert cond is not None and cond.status == "True" and cond.last_transition_time
    # nothing else changed: the spec but nodeName, the generation, the rest of the status
    assert bound.spec.evolve(node_name=None) == pod.spec
    assert bound.metadata.generation == pod.metadata.generation
    assert bound.status.phase == pod.status.phase == "Pending"
    assert bound.resource_version > pod.resource_version
    ev = timeline(api.store)[-1]
    assert (ev.reason, ev.message, ev.source_component) == (
        "Updated",
        "updated spec.nodeName=node-1",
        "default-scheduler",
    )
    assert bound.to_dict()["status"]["conditions"][0]["type"] == "PodScheduled"


def test_bind_replaces_an_unschedulable_condition() -> None:
    api = make_api(nodes=1)
    pod = _pending(api)
    unschedulable = Condition(type="PodScheduled", status="False", reason="Unschedulable")
    failed = api.update_status(pod.evolve(status=pod.status.evolve(conditions=[unschedulable])))
    bound = api.bind(failed.key, "node-1")
    assert [(c.type, c.status, c.reason) for c in bound.status.conditions] == [
        ("PodScheduled", "True", None)
    ]


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"uid": "not-it"}, ConflictError, "Precondition failed: UID in precondition: not-it"),
        ({"resource_version": 1}, ConflictError, "the ResourceVersion in the precondition (1)"),
        ({"node": "Bad_Node"}, InvalidError, 'spec.nodeName: Invalid value: "Bad_Node"'),
        ({"node": ""}, InvalidError, "target.name: Required value"),
        ({"annotations": {"bad key!": "v"}}, InvalidError, "metadata.annotations"),
    ],
)
def test_bind_refusals_write_nothing(
    kwargs: dict[str, object], error: type[Exception], text: str
) -> None:
    api = make_api(nodes=1)
    pod = _pending(api)
    rev = api.store.revision
    args: dict[str, object] = {"node": "node-1", **kwargs}
    node = args.pop("node")
    with pytest.raises(error) as e:
        api.bind(pod.key, node, **args)  # type: ignore[arg-type]
    assert text in str(e.value)
    assert api.store.revision == rev and api.store.get("Pod", pod.key) == pod


def test_bind_refuses_a_bound_a_deleted_and_a_missing_pod() -> None:
    api = make_api(nodes=2)
    pod = _pending(api)
    api.bind(pod.key, "node-1")
    rev = api.store.revision
    with pytest.raises(ConflictError, match='pod web is already assigned to node "node-1"'):
        api.bind(pod.key, "node-2")
    api.delete("Pod", pod.key)  # bound: only marked
    with pytest.raises(ConflictError, match="pod web is being deleted"):
        api.bind(pod.key, "node-2")
    assert api.store.revision == rev + 2  # the mark and its Event, nothing from bind
    with pytest.raises(NotFoundError):
        api.bind("default/nothing", "node-1")


def test_dry_run_binding_writes_nothing() -> None:
    api = make_api(nodes=1)
    pod = _pending(api)
    rev = api.store.revision
    would = api.bind(pod.key, "node-1", dry_run=True)
    assert would.spec.node_name == "node-1"
    assert api.store.revision == rev and api.store.get("Pod", pod.key) == pod
