"""ControllerRevision history (control.controllers.history): the template patch, the hash
and name, numbering, finding the update revision, rollback by renumbering, name
collisions, adoption and truncation, against a real apiserver over a memory store.

The plane is started and then left alone (never run): the revisions written here are
the test's own, whatever controllers a later change adds."""

from __future__ import annotations

from typing import Any

import pytest
from cp_helpers import make_plane

from control.controllers.history import (
    HASH_LABEL,
    History,
    new_revision,
    revision_hash,
    template_of,
    template_patch,
)
from control.runner import ControlPlane
from netmodel.apps import ControllerRevision
from netmodel.kinds import object_from_dict
from netmodel.objects import KubeObject, ObjectMeta, OwnerReference, PodTemplateSpec
from netmodel.selectors import LabelSelector

SELECTOR = LabelSelector(match_labels={"app": "web"})


def _template(image: str) -> PodTemplateSpec:
    return PodTemplateSpec.model_validate(
        {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "main", "image": image}]},
        }
    )


def _owner(plane: ControlPlane, name: str = "web") -> KubeObject:
    """An owner stored through the apiserver (a ConfigMap: no controller acts on it)."""
    cm = object_from_dict(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}
    )
    return plane.apiserver.create(cm)


def _stored(plane: ControlPlane) -> dict[str, ControllerRevision]:
    return {
        r.name: r for r in plane.store.list("ControllerRevision") if isinstance(r, ControllerRevision)
    }


def _sync(
    plane: ControlPlane, h: History, owner: KubeObject, image: str, current: str | None, cc: int = 0
) -> Any:
    t = _template(image)
    owned = h.owned(owner, SELECTOR, plane.store.list("ControllerRevision"))
    return h.revisions(
        owner, template_patch(t), t.metadata.labels, owned, current_name=current, collision_count=cc
    )


def test_template_patch_replaces_the_template_and_round_trips() -> None:
    t = _template("nginx:1")
    data = template_patch(t)
    assert data["spec"]["template"]["$patch"] == "replace"
    assert data["spec"]["template"]["spec"]["containers"] == [{"name": "main", "image": "nginx:1"}]
    rev = ControllerRevision(metadata=ObjectMeta(name="x", namespace="default"), data=data)
    assert template_of(rev) == t
    with pytest.raises(ValueError, match="ControllerRevision/default/x: data holds no spec"):
        template_of(rev.evolve(data={"spec": {}}))


def test_hash_names_and_labels_the_revision() -> None:
    plane = make_plane(1)
    owner = _owner(plane)
    data = template_patch(_template("nginx:1"))
    h0, h1 = revision_hash(data, 0), revision_hash(data, 1)
    assert h0 != h1 and h0 == revision_hash(data, 0)
    assert h0 != revision_hash(template_patch(_template("nginx:2")), 0)
    rev = new_revision(owner, data, {"app": "web"}, 3, 0, annotations={"a": "b"})
    assert rev.name == f"web-{h0}" and rev.labels == {"app": "web", HASH_LABEL: h0}
    assert rev.revision == 3 and rev.metadata.annotations == {"a": "b"}
    ref = rev.metadata.owner_references[0]
    assert (ref.kind, ref.name, ref.uid, ref.controller) == (
        "ConfigMap",
        "web",
        owner.metadata.uid,
        True,
    )


def test_first_revision_then_update_then_rollback_renumbers() -> None:
    plane = make_plane(1)
    owner = _owner(plane)
    h = History(plane.apiserver, "test")
    first = _sync(plane, h, owner, "nginx:1", None)
    assert first.current is first.update and first.update.revision == 1
    assert list(_stored(plane)) == [first.update.name]
    # the same template again writes nothing
    rv = plane.store.revision
    again = _sync(plane, h, owner, "nginx:1", first.update.name)
    assert again.update.name == first.update.name and plane.store.revision == rv
    # a new template: revision 2, the current one stays revision 1
    second = _sync(plane, h, owner, "nginx:2", first.update.name)
    assert second.update.revision == 2 and second.current.name == first.update.name
    assert [r.revision for r in second.all] == [1, 2]
    # back to the first template: no new revision, the first one becomes number 3
    back = _sync(plane, h, owner, "nginx:1", second.update.name)
    assert back.update.name == first.update.name and back.update.revision == 3
    assert back.current.name == second.update.name
    stored = _stored(plane)
    assert len(stored) == 2 and stored[first.update.name].revision == 3


def test_name_collision_bumps_the_collision_count() -> None:
    plane = make_plane(1)
    owner = _owner(plane)
    h = History(plane.apiserver, "test")
    data = template_patch(_template("nginx:1"))
    # another revision squats on the name the hash gives at count 0
    squat = new_revision(owner, {"other": 1}, {}, 1, 0).with_meta(
        name=f"web-{revision_hash(data, 0)}"
    )
    plane.apiserver.create(squat)
    mine = new_revision(owner, data, {"app": "web"}, 2, 0)
    created, cc = h.create(owner, mine, 0)
    assert cc == 1 and created.name == f"web-{revision_hash(data, 1)}"
    assert created.labels[HASH_LABEL] == revision_hash(data, 1)
    # the same data at the same count again: the stored revision, nothing new
    again, cc2 = h.create(owner, mine, 1)
    assert (again.name, cc2) == (created.name, 1) and len(_stored(plane)) == 2


def test_orphans_are_adopted_and_others_revisions_ignored() -> None:
    plane = make_plane(1)
    owner = _owner(plane)
    other = _owner(plane, "db")
    h = History(plane.apiserver, "test")
    data = template_patch(_template("nginx:1"))
    orphan = new_revision(owner, data, {"app": "web"}, 1, 0).with_meta(owner_references=[])
    plane.apiserver.create(orphan)
    theirs = new_revision(other, {"x": 1}, {"app": "web"}, 1, 0)
    plane.apiserver.create(theirs)
    unmatched = new_revision(owner, {"y": 1}, {"app": "db"}, 1, 0).with_meta(
        owner_references=[]
    )
    plane.apiserver.create(unmatched)
    owned = h.owned(owner, SELECTOR, plane.store.list("ControllerRevision"))
    assert [r.name for r in owned] == [orphan.name]
    ref = _stored(plane)[orphan.name].metadata.controller_ref()
    assert ref is not None and ref.uid == owner.metadata.uid
    assert _stored(plane)[unmatched.name].metadata.owner_references == []


def test_truncate_keeps_the_limit_and_every_live_revision() -> None:
    plane = make_plane(1)
    owner = _owner(plane)
    h = History(plane.apiserver, "test")
    current: str | None = None
    for i in range(1, 6):
        current = _sync(plane, h, owner, f"nginx:{i}", current).update.name
    revs = h.owned(owner, SELECTOR, plane.store.list("ControllerRevision"))
    by_number = {r.revision: r.name for r in revs}
    # live: the update revision (5) and revision 1 (a pod still runs it); limit 2 keeps
    # the two newest of the others (3, 4) and deletes revision 2 only
    deleted = h.truncate(revs, [by_number[5], by_number[1]], 2)
    assert deleted == [by_number[2]]
    assert sorted(r.revision for r in _stored(plane).values()) == [1, 3, 4, 5]
    assert h.truncate(h.owned(owner, SELECTOR, plane.store.list("ControllerRevision")), [], 0) == [
        by_number[n] for n in (1, 3, 4, 5)
    ]


def test_a_foreign_owner_reference_is_not_controller() -> None:
    plane = make_plane(1)
    owner = _owner(plane)
    h = History(plane.apiserver, "test")
    ref = OwnerReference(api_version="v1", kind="ConfigMap", name="web", uid="someone-else")
    rev = new_revision(owner, {"z": 1}, {"app": "web"}, 1, 0).with_meta(
        owner_references=[ref.evolve(controller=True)]
    )
    plane.apiserver.create(rev)
    assert h.owned(owner, SELECTOR, plane.store.list("ControllerRevision")) == []
