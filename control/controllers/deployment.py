"""The Deployment controller: one ReplicaSet per pod template, scaled to the Deployment.

For a Deployment ``web`` whose template hashes to ``h`` (:func:`pod_template_hash`), the
controller keeps a ReplicaSet ``web-h`` owned by the Deployment (``controller: true``),
whose selector and template carry the label ``pod-template-hash=h``, scaled to
``spec.replicas`` (default 1). ReplicaSets of older templates are scaled down as the
new one's pods become available (a rolling update with maxSurge 100% and
maxUnavailable 0), oldest first, and kept at 0 replicas as revision history.
``status`` sums the ReplicaSets' status. Deleting the Deployment is the garbage
collector's job (owner references).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from control.controllers.base import (
    Controller,
    Indexer,
    controlled_by,
    controller_ref,
    is_controlled_by,
    owner_id,
)
from control.store.base import WatchEvent
from netmodel.errors import NotFoundError
from netmodel.objects import (
    Deployment,
    DeploymentStatus,
    KubeObject,
    LabelSelector,
    ObjectMeta,
    PodTemplateSpec,
    ReplicaSet,
    ReplicaSetSpec,
)

TEMPLATE_HASH_LABEL = "pod-template-hash"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"

#: Kubernetes' "safe" alphabet (no vowels, no 0/1/3): what generated name suffixes use.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def fnv1a_32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(text: str) -> str:
    """Kubernetes' rand.SafeEncodeString: each character mapped into SAFE_ALPHABET."""
    return "".join(SAFE_ALPHABET[ord(c) % len(SAFE_ALPHABET)] for c in text)


def pod_template_hash(template: PodTemplateSpec, collision_count: int = 0) -> str:
    """A deterministic short hash of a pod template, as the Deployment controller's
    ``ComputeHash``: FNV-1a 32 of the template (here its canonical JSON, without the
    ``pod-template-hash`` label), plus the collision count, safe-encoded."""
    data = template.model_dump(by_alias=True, exclude_none=True, mode="json")
    labels = dict(data.get("metadata", {}).get("labels", {}))
    labels.pop(TEMPLATE_HASH_LABEL, None)
    data.setdefault("metadata", {})["labels"] = labels
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        raw += str(collision_count).encode()
    return safe_encode(str(fnv1a_32(raw)))


def with_hash_label(template: PodTemplateSpec, h: str) -> PodTemplateSpec:
    labels = {**template.metadata.labels, TEMPLATE_HASH_LABEL: h}
    return template.evolve(metadata=template.metadata.evolve(labels=labels))


def desired_replicas(obj: Deployment | ReplicaSet) -> int:
    r = obj.spec.replicas
    return 1 if r is None else max(0, r)


class DeploymentController(Controller):
    """Keeps each Deployment's ReplicaSets; see the module docstring."""

    name = "deployment-controller"
    kinds = frozenset({"Deployment", "ReplicaSet"})

    def indexers(self) -> dict[str, Indexer]:
        def owner(obj: KubeObject) -> Iterator[str]:
            if obj.kind == "ReplicaSet":
                o = controlled_by(obj, "Deployment")
                if o is not None:
                    yield o

        return {"owner": owner}

    def keys_for(self, event: WatchEvent, old: KubeObject | None) -> Iterable[str]:
        obj = event.object
        if obj.kind == "Deployment":
            return [obj.key]
        keys = []
        for o in (old, obj):
            ref = o.metadata.controller_ref() if o is not None else None
            if ref is not None and ref.kind == "Deployment":
                keys.append(f"{obj.namespace}/{ref.name}")
        return keys

    def subject(self, key: str) -> KubeObject | None:
        return self.cache.get("Deployment", key)

    def _owned(self, d: Deployment) -> list[ReplicaSet]:
        ident = owner_id("Deployment", d.namespace, d.name, d.metadata.uid)
        rss = [rs for rs in self.cache.by_index("owner", ident) if isinstance(rs, ReplicaSet)]
        return [rs for rs in rss if is_controlled_by(rs, d)]

    def reconcile(self, key: str) -> None:
        try:
            d = self.store.get("Deployment", key)
        except NotFoundError:
            return
        if not isinstance(d, Deployment) or d.metadata.deletion_timestamp is not None:
            return
        owned = self._owned(d)
        h = pod_template_hash(d.spec.template)
        new = next((rs for rs in owned if rs.labels.get(TEMPLATE_HASH_LABEL) == h), None)
        olds = sorted(
            (rs for rs in owned if rs is not new),
            key=lambda rs: (rs.metadata.creation_timestamp or "", rs.resource_version),
        )
        want = desired_replicas(d)
        if new is None:
            new = self._create_rs(d, h, want, revision=len(owned) + 1)
        elif desired_replicas(new) != want:
            new = self._scale(d, new, want)
        # Old ReplicaSets may keep only what the new one cannot serve yet.
        new_available = new.status.available_replicas or 0
        allowed_old = max(0, want - new_available)
        for rs in olds:
            have = desired_replicas(rs)
            keep = min(have, allowed_old)
            allowed_old -= keep
            if keep != have:
                self._scale(d, rs, keep)
        self._update_status(d, new, [*olds, new])

    def _create_rs(self, d: Deployment, h: str, replicas: int, revision: int) -> ReplicaSet:
        template = with_hash_label(d.spec.template, h)
        selector = LabelSelector(
            match_labels={**d.spec.selector.match_labels, TEMPLATE_HASH_LABEL: h},
            match_expressions=list(d.spec.selector.match_expressions),
        )
        rs = ReplicaSet(
            metadata=ObjectMeta(
                name=f"{d.name}-{h}",
                namespace=d.namespace,
                labels=dict(template.metadata.labels),
                annotations={REVISION_ANNOTATION: str(revision)},
                owner_references=[controller_ref(d)],
            ),
            spec=ReplicaSetSpec(replicas=replicas, selector=selector, template=template),
        )
        created = self.api.create(rs, component=self.name)
        assert isinstance(created, ReplicaSet)
        self.recorder.record(
            self.name,
            d,
            "ScalingReplicaSet",
            f"Scaled up replica set {created.name} to {replicas} from 0",
        )
        return created

    def _scale(self, d: Deployment, rs: ReplicaSet, replicas: int) -> ReplicaSet:
        before = desired_replicas(rs)
        updated = self.api.update(
            rs.evolve(spec=rs.spec.evolve(replicas=replicas)), component=self.name
        )
        assert isinstance(updated, ReplicaSet)
        verb = "up" if replicas > before else "down"
        self.recorder.record(
            self.name,
            d,
            "ScalingReplicaSet",
            f"Scaled {verb} replica set {rs.name} to {replicas} from {before}",
        )
        return updated

    def _update_status(self, d: Deployment, new: ReplicaSet, all_rs: list[ReplicaSet]) -> None:
        status = DeploymentStatus(
            replicas=sum(rs.status.replicas or 0 for rs in all_rs),
            ready_replicas=sum(rs.status.ready_replicas or 0 for rs in all_rs),
            available_replicas=sum(rs.status.available_replicas or 0 for rs in all_rs),
            updated_replicas=new.status.replicas or 0,
            observed_generation=d.metadata.generation,
        )
        if _status_key(status) != _status_key(d.status):
            self.api.update_status(d.evolve(status=status), component=self.name)


def _status_key(s: DeploymentStatus) -> tuple[int, int, int, int, int | None]:
    return (
        s.replicas or 0,
        s.ready_replicas or 0,
        s.available_replicas or 0,
        s.updated_replicas or 0,
        s.observed_generation,
    )
