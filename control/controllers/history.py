"""ControllerRevision history, as kube-controller-manager keeps it for StatefulSets and
DaemonSets (its ``pkg/controller/history`` package and the two controllers' use of it).

A revision snapshots what a rollout rolls: the pod template, as the patch
:func:`template_patch` makes (``{"spec": {"template": {..., "$patch": "replace"}}}``; a
strategic merge patch that ``kubectl rollout undo`` sends back to the owner as it is).
Each revision is a ControllerRevision in the owner's namespace:

* named ``<owner>-<hash>`` (the owner's name cut at 223 characters), where the hash is
  :func:`revision_hash`: FNV-1 32 of the data's JSON followed by the decimal collision
  count, safe-encoded as Kubernetes' ``rand.SafeEncodeString``; the hash is also its
  ``controller.kubernetes.io/hash`` label (:data:`HASH_LABEL`), beside the template's
  labels;
* owned by its owner (a controller ownerReference, so the garbage collector deletes it
  with the owner);
* numbered: ``revision`` is 1 for the first and the highest number + 1 for each next one
  (:func:`next_number`). Rolling back to the template of an old revision does not create
  one: the old revision is given the next number (:meth:`History.renumber`), which is
  how ``kubectl rollout history`` shows it as the newest.

:meth:`History.create` handles name collisions as upstream does: when the name is taken
by a revision with other data, the collision count goes up by one and the hash is taken
again; an existing revision with the same data is the one created. The caller keeps the
count in its status (``status.collisionCount``).

:meth:`History.revisions` is upstream's getStatefulSetRevisions: given the owner's
revisions it finds or makes the *update* revision (the owner's template now) and the
*current* one (named by the owner's ``status.currentRevision``; the update revision
when there is none). :meth:`History.truncate` deletes the oldest revisions beyond
``revisionHistoryLimit``, never one that is live (the current or update revision, or
one some pod still runs).

Pods carry their revision in the ``controller-revision-hash`` label
(:data:`POD_REVISION_LABEL`): StatefulSet pods the revision's name, DaemonSet pods its
hash.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from control.controllers.base import APIClient, controller_ref, is_controlled_by
from control.controllers.deployment import safe_encode
from netmodel.apps import ControllerRevision
from netmodel.errors import ConflictError, NotFoundError
from netmodel.objects import KubeObject, ObjectMeta, PodTemplateSpec
from netmodel.selectors import LabelSelector

#: the label the history package puts on every revision: its hash
HASH_LABEL = "controller.kubernetes.io/hash"
#: apps/v1 ``ControllerRevisionHashLabelKey``: a pod's revision (StatefulSet: the
#: revision's name; DaemonSet: its hash)
POD_REVISION_LABEL = "controller-revision-hash"
#: how long an owner's name may be in a revision's name
_PREFIX_MAX = 223


def template_patch(template: PodTemplateSpec) -> dict[str, Any]:
    """A revision's data for ``template`` (upstream's getPatch of StatefulSets and
    DaemonSets): the template under ``spec.template``, marked ``$patch: replace`` so
    that a strategic merge patch of it replaces the owner's whole template."""
    return {"spec": {"template": {**template.to_dict(), "$patch": "replace"}}}


def template_of(revision: ControllerRevision) -> PodTemplateSpec:
    """The pod template a revision made by :func:`template_patch` holds (what
    upstream's ApplyRevision gives the controller). ValueError if its data holds none."""
    data = revision.data
    spec = data.get("spec") if isinstance(data, dict) else None
    template = spec.get("template") if isinstance(spec, dict) else None
    if not isinstance(template, dict):
        raise ValueError(f"ControllerRevision/{revision.key}: data holds no spec.template")
    return PodTemplateSpec.model_validate({k: v for k, v in template.items() if k != "$patch"})


def _fnv1_32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h * 0x01000193) & 0xFFFFFFFF) ^ b
    return h


def revision_hash(data: Any, collision_count: int) -> str:
    """The hash of a revision's data and the owner's collision count (upstream's
    HashControllerRevision): FNV-1 32 over the data's compact JSON (keys sorted) and the
    count in decimal, safe-encoded."""
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return safe_encode(str(_fnv1_32(raw + str(collision_count).encode())))


def revision_name(owner_name: str, h: str) -> str:
    """``<owner>-<hash>``, the owner's name cut at 223 characters."""
    return f"{owner_name[:_PREFIX_MAX]}-{h}"


def new_revision(
    owner: KubeObject,
    data: Any,
    labels: Mapping[str, str],
    number: int,
    collision_count: int,
    *,
    annotations: Mapping[str, str] | None = None,
) -> ControllerRevision:
    """A revision of ``owner`` (not stored): ``labels`` (the template's) plus
    :data:`HASH_LABEL`, ``annotations`` (a StatefulSet's revisions copy its own), a
    controller ownerReference, named and hashed for ``collision_count``."""
    h = revision_hash(data, collision_count)
    return ControllerRevision(
        metadata=ObjectMeta(
            name=revision_name(owner.name, h),
            namespace=owner.namespace,
            labels={**labels, HASH_LABEL: h},
            annotations=dict(annotations or {}),
            owner_references=[controller_ref(owner)],
        ),
        data=data,
        revision=number,
    )


def sort_revisions(revisions: Iterable[ControllerRevision]) -> list[ControllerRevision]:
    """Oldest first: by number, then creation time, then name (upstream's order)."""
    return sorted(
        revisions, key=lambda r: (r.revision, r.metadata.creation_timestamp or "", r.name)
    )


def next_number(revisions: Iterable[ControllerRevision]) -> int:
    """The number the next revision takes: the highest + 1 (1 for the first)."""
    return max((r.revision for r in revisions), default=0) + 1


def equal(a: ControllerRevision, b: ControllerRevision) -> bool:
    """Same snapshot (upstream's EqualRevision): not if both carry :data:`HASH_LABEL`
    and the hashes differ, else whether the data are equal."""
    ha, hb = a.labels.get(HASH_LABEL), b.labels.get(HASH_LABEL)
    if ha is not None and hb is not None and ha != hb:
        return False
    return bool(a.data == b.data)


def find_equal(
    revisions: Iterable[ControllerRevision], needle: ControllerRevision
) -> list[ControllerRevision]:
    """The revisions :func:`equal` to ``needle``, in the order given."""
    return [r for r in revisions if equal(r, needle)]


@dataclass(frozen=True)
class Revisions:
    """What :meth:`History.revisions` gives: the current and update revisions (the same
    one when no rollout is under way), the collision count to keep in the owner's
    status, and the owner's revisions as stored after it, oldest first."""

    current: ControllerRevision
    update: ControllerRevision
    collision_count: int
    all: list[ControllerRevision]


class History:
    """An owner's revisions, read from what the caller lists and written through
    ``api`` as ``component``."""

    def __init__(self, api: APIClient, component: str) -> None:
        self.api = api
        self.component = component

    def owned(
        self, owner: KubeObject, selector: LabelSelector, candidates: Iterable[KubeObject]
    ) -> list[ControllerRevision]:
        """``owner``'s revisions among ``candidates`` (the revisions of its namespace),
        oldest first; an orphan revision ``selector`` matches is adopted (given a
        controller ownerReference to ``owner``), as upstream's ClaimRevisions does."""
        out: list[ControllerRevision] = []
        for r in candidates:
            if not isinstance(r, ControllerRevision) or r.namespace != owner.namespace:
                continue
            if is_controlled_by(r, owner):
                out.append(r)
            elif (
                r.metadata.controller_ref() is None
                and r.metadata.deletion_timestamp is None
                and not selector.is_empty
                and selector.matches(r.labels)
            ):
                refs = [*r.metadata.owner_references, controller_ref(owner)]
                adopted = self.api.update(r.with_meta(owner_references=refs), component=self.component)
                assert isinstance(adopted, ControllerRevision)
                out.append(adopted)
        return sort_revisions(out)

    def create(
        self, owner: KubeObject, revision: ControllerRevision, collision_count: int
    ) -> tuple[ControllerRevision, int]:
        """Store ``revision`` (made by :func:`new_revision`) under the name its hash for
        ``collision_count`` gives; returns the stored revision and the count used. A
        name taken by a revision of other data takes the count one up; one taken by a
        revision of the same data is that revision."""
        while True:
            h = revision_hash(revision.data, collision_count)
            name = revision_name(owner.name, h)
            candidate = revision.with_meta(name=name, labels={**revision.labels, HASH_LABEL: h})
            try:
                created = self.api.create(candidate, component=self.component)
            except ConflictError:
                try:
                    exists = self.api.store.get("ControllerRevision", f"{owner.namespace}/{name}")
                except NotFoundError:
                    continue  # deleted meanwhile: the name is free again
                if isinstance(exists, ControllerRevision) and exists.data == revision.data:
                    return exists, collision_count
                collision_count += 1
                continue
            assert isinstance(created, ControllerRevision)
            return created, collision_count

    def renumber(self, revision: ControllerRevision, number: int) -> ControllerRevision:
        """``revision`` given the number ``number`` (a rollback to it)."""
        if revision.revision == number:
            return revision
        updated = self.api.update(revision.evolve(revision=number), component=self.component)
        assert isinstance(updated, ControllerRevision)
        return updated

    def revisions(
        self,
        owner: KubeObject,
        data: Any,
        labels: Mapping[str, str],
        owned: list[ControllerRevision],
        *,
        current_name: str | None,
        collision_count: int,
        annotations: Mapping[str, str] | None = None,
    ) -> Revisions:
        """The current and update revisions of ``owner`` whose template's revision data
        is ``data`` (:func:`template_patch`), ``owned`` its revisions (:meth:`owned`):
        an equal revision that is the newest is the update revision as it is; an equal
        older one is renumbered as the newest (a rollback); else a new revision is
        created. The current revision is the one named ``current_name``, else the
        update revision."""
        revs = sort_revisions(owned)
        number = next_number(revs)
        candidate = new_revision(
            owner, data, labels, number, collision_count, annotations=annotations
        )
        equals = find_equal(revs, candidate)
        if equals and equal(revs[-1], equals[-1]):
            update = revs[-1]
        elif equals:
            update = self.renumber(equals[-1], number)
            revs = [update if r.name == update.name else r for r in revs]
        else:
            update, collision_count = self.create(owner, candidate, collision_count)
            revs = [r for r in revs if r.name != update.name] + [update]
        revs = sort_revisions(revs)
        current = next((r for r in revs if r.name == current_name), update)
        return Revisions(current, update, collision_count, revs)

    def truncate(
        self, revisions: Iterable[ControllerRevision], live: Iterable[str], limit: int
    ) -> list[str]:
        """Delete the oldest of ``revisions`` that are not ``live`` (names) beyond
        ``limit`` of them; returns the names deleted, oldest first."""
        keep = set(live)
        history = [r for r in sort_revisions(revisions) if r.name not in keep]
        doomed = history[: max(0, len(history) - max(0, limit))]
        for r in doomed:
            with contextlib.suppress(NotFoundError):  # deleted meanwhile
                self.api.delete("ControllerRevision", r.key, component=self.component)
        return [r.name for r in doomed]
