"""ReplicationController defaults and validation, as kube-apiserver gives them.

Defaults (core/v1 ``SetDefaults_ReplicationController``): an empty ``spec.selector``
takes the template's labels, empty ``metadata.labels`` take them too, ``replicas`` is 1,
and the pod template gets the pod defaults. Validation: replicas and minReadySeconds
not negative, a non-empty selector of valid labels, a template whose labels the
selector matches, with a valid pod spec (``restartPolicy`` Always, the only one a
controller's pods may have).
"""

from __future__ import annotations

from typing import Any

from control.apiserver.defaults import default_pod_spec
from control.apiserver.validation import Problems, validate_pod_spec
from netmodel.objects import KubeObject
from netmodel.replication import ReplicationController


def default(obj: KubeObject) -> KubeObject:
    """``obj`` with the defaults above (idempotent)."""
    assert isinstance(obj, ReplicationController)
    spec = obj.spec
    ch: dict[str, Any] = {}
    template = spec.template
    if template is not None:
        pod_spec = default_pod_spec(template.spec)
        if pod_spec is not template.spec:
            template = template.evolve(spec=pod_spec)
            ch["template"] = template
        if not spec.selector and template.metadata.labels:
            ch["selector"] = dict(template.metadata.labels)
    if spec.replicas is None:
        ch["replicas"] = 1
    out = obj.evolve(spec=spec.evolve(**ch)) if ch else obj
    if not out.metadata.labels and template is not None and template.metadata.labels:
        out = out.with_meta(labels=dict(template.metadata.labels))
    return out


def validate(obj: KubeObject, p: Problems) -> None:
    """Raise InvalidError (through ``p``) for the first problem of a defaulted RC."""
    assert isinstance(obj, ReplicationController)
    spec = obj.spec
    for f, value in (
        ("spec.replicas", spec.replicas),
        ("spec.minReadySeconds", spec.min_ready_seconds),
    ):
        if value is not None and value < 0:
            p.invalid(f, value, "must be greater than or equal to 0")
    if not spec.selector:
        p.required("spec.selector")
    p.labels("spec.selector", spec.selector)
    if spec.template is None:
        p.required("spec.template")
    labels = spec.template.metadata.labels
    p.labels("spec.template.metadata.labels", labels)
    if not obj.selects(labels):
        p.invalid(
            "spec.template.metadata.labels", labels, "`selector` does not match template `labels`"
        )
    extra = spec.template.spec.model_extra or {}
    policy = extra.get("restartPolicy", extra.get("restart_policy", "Always"))
    if policy != "Always":
        p.unsupported("spec.template.spec.restartPolicy", policy, ["Always"])
    validate_pod_spec(spec.template.spec, "spec.template.spec", p)
