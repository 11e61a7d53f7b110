"""Request bodies in Kubernetes' protobuf encoding (``application/vnd.kubernetes.protobuf``),
which kubectl's typed clients send (``auth can-i``, ``create rolebinding``,
``create namespace``, ...).

The envelope is ``k8s\\x00`` followed by a ``runtime.Unknown`` message (typeMeta,
raw, contentEncoding, contentType); ``raw`` is the object's own message. The messages
are described here as data (field name, number, type, as in Kubernetes'
``generated.proto``) and decoded by the ``protobuf`` library from descriptors built at
run time; only the fields svclab reads are described, the library skips the others.
Kinds not described here are refused with 415 by the caller.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.json_format import MessageToDict

MAGIC = b"k8s\x00"
_PKG = "svclab.k8s"

_T = descriptor_pb2.FieldDescriptorProto
STR, BOOL, I64, I32, BYTES, MSG = (
    _T.TYPE_STRING,
    _T.TYPE_BOOL,
    _T.TYPE_INT64,
    _T.TYPE_INT32,
    _T.TYPE_BYTES,
    _T.TYPE_MESSAGE,
)

# message -> [(json name, number, type, repeated, message type or None)]
Field = tuple[str, int, int, bool, str | None]
MESSAGES: dict[str, list[Field]] = {
    "TypeMeta": [("apiVersion", 1, STR, False, None), ("kind", 2, STR, False, None)],
    "Unknown": [
        ("typeMeta", 1, MSG, False, "TypeMeta"),
        ("raw", 2, BYTES, False, None),
        ("contentEncoding", 3, STR, False, None),
        ("contentType", 4, STR, False, None),
    ],
    "OwnerReference": [
        ("kind", 1, STR, False, None),
        ("name", 3, STR, False, None),
        ("uid", 4, STR, False, None),
        ("apiVersion", 5, STR, False, None),
        ("controller", 6, BOOL, False, None),
        ("blockOwnerDeletion", 7, BOOL, False, None),
    ],
    "ObjectMeta": [
        ("name", 1, STR, False, None),
        ("generateName", 2, STR, False, None),
        ("namespace", 3, STR, False, None),
        ("uid", 5, STR, False, None),
        ("resourceVersion", 6, STR, False, None),
        ("labels", 11, MSG, True, "ObjectMeta.LabelsEntry"),
        ("annotations", 12, MSG, True, "ObjectMeta.AnnotationsEntry"),
        ("ownerReferences", 13, MSG, True, "OwnerReference"),
        ("finalizers", 14, STR, True, None),
    ],
    "LabelSelectorRequirement": [
        ("key", 1, STR, False, None),
        ("operator", 2, STR, False, None),
        ("values", 3, STR, True, None),
    ],
    "LabelSelector": [
        ("matchLabels", 1, MSG, True, "LabelSelector.MatchLabelsEntry"),
        ("matchExpressions", 2, MSG, True, "LabelSelectorRequirement"),
    ],
    "PolicyRule": [
        ("verbs", 1, STR, True, None),
        ("apiGroups", 2, STR, True, None),
        ("resources", 3, STR, True, None),
        ("resourceNames", 4, STR, True, None),
        ("nonResourceURLs", 5, STR, True, None),
    ],
    "AggregationRule": [("clusterRoleSelectors", 1, MSG, True, "LabelSelector")],
    "Subject": [
        ("kind", 1, STR, False, None),
        ("apiGroup", 2, STR, False, None),
        ("name", 3, STR, False, None),
        ("namespace", 4, STR, False, None),
    ],
    "RoleRef": [
        ("apiGroup", 1, STR, False, None),
        ("kind", 2, STR, False, None),
        ("name", 3, STR, False, None),
    ],
    "Role": [("metadata", 1, MSG, False, "ObjectMeta"), ("rules", 2, MSG, True, "PolicyRule")],
    "ClusterRole": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("rules", 2, MSG, True, "PolicyRule"),
        ("aggregationRule", 3, MSG, False, "AggregationRule"),
    ],
    "RoleBinding": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("subjects", 2, MSG, True, "Subject"),
        ("roleRef", 3, MSG, False, "RoleRef"),
    ],
    "ResourceAttributes": [
        ("namespace", 1, STR, False, None),
        ("verb", 2, STR, False, None),
        ("group", 3, STR, False, None),
        ("version", 4, STR, False, None),
        ("resource", 5, STR, False, None),
        ("subresource", 6, STR, False, None),
        ("name", 7, STR, False, None),
    ],
    "NonResourceAttributes": [("path", 1, STR, False, None), ("verb", 2, STR, False, None)],
    "SelfSubjectAccessReviewSpec": [
        ("resourceAttributes", 1, MSG, False, "ResourceAttributes"),
        ("nonResourceAttributes", 2, MSG, False, "NonResourceAttributes"),
    ],
    "SelfSubjectAccessReview": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("spec", 2, MSG, False, "SelfSubjectAccessReviewSpec"),
    ],
    "SelfSubjectRulesReviewSpec": [("namespace", 1, STR, False, None)],
    "SelfSubjectRulesReview": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("spec", 2, MSG, False, "SelfSubjectRulesReviewSpec"),
    ],
    "SelfSubjectReview": [("metadata", 1, MSG, False, "ObjectMeta")],
    # apps/v1 Deployment and core/v1 Service: the fields ``kubectl create`` sets
    "Quantity": [("string", 1, STR, False, None)],
    "IntOrString": [
        ("type", 1, I64, False, None),
        ("intVal", 2, I32, False, None),
        ("strVal", 3, STR, False, None),
    ],
    "ContainerPort": [
        ("name", 1, STR, False, None),
        ("hostPort", 2, I32, False, None),
        ("containerPort", 3, I32, False, None),
        ("protocol", 4, STR, False, None),
    ],
    "EnvVar": [("name", 1, STR, False, None), ("value", 2, STR, False, None)],
    "ResourceRequirements": [
        ("limits", 1, MSG, True, "ResourceRequirements.LimitsEntry"),
        ("requests", 2, MSG, True, "ResourceRequirements.RequestsEntry"),
    ],
    # core/v1 Pod: also what ``kubectl debug node/NAME`` creates (host namespaces, the
    # node's root as a hostPath volume, a toleration of everything)
    "VolumeMount": [
        ("name", 1, STR, False, None),
        ("readOnly", 2, BOOL, False, None),
        ("mountPath", 3, STR, False, None),
        ("subPath", 4, STR, False, None),
        ("mountPropagation", 5, STR, False, None),
        ("subPathExpr", 6, STR, False, None),
    ],
    "Capabilities": [("add", 1, STR, True, None), ("drop", 2, STR, True, None)],
    "SecurityContext": [
        ("capabilities", 1, MSG, False, "Capabilities"),
        ("privileged", 2, BOOL, False, None),
        ("runAsUser", 4, I64, False, None),
        ("runAsNonRoot", 5, BOOL, False, None),
        ("readOnlyRootFilesystem", 6, BOOL, False, None),
        ("allowPrivilegeEscalation", 7, BOOL, False, None),
        ("runAsGroup", 8, I64, False, None),
    ],
    "Container": [
        ("name", 1, STR, False, None),
        ("image", 2, STR, False, None),
        ("command", 3, STR, True, None),
        ("args", 4, STR, True, None),
        ("workingDir", 5, STR, False, None),
        ("ports", 6, MSG, True, "ContainerPort"),
        ("env", 7, MSG, True, "EnvVar"),
        ("resources", 8, MSG, False, "ResourceRequirements"),
        ("volumeMounts", 9, MSG, True, "VolumeMount"),
        ("terminationMessagePath", 13, STR, False, None),
        ("imagePullPolicy", 14, STR, False, None),
        ("securityContext", 15, MSG, False, "SecurityContext"),
        ("stdin", 16, BOOL, False, None),
        ("stdinOnce", 17, BOOL, False, None),
        ("tty", 18, BOOL, False, None),
        ("terminationMessagePolicy", 20, STR, False, None),
    ],
    "HostPathVolumeSource": [("path", 1, STR, False, None), ("type", 2, STR, False, None)],
    "EmptyDirVolumeSource": [("medium", 1, STR, False, None)],
    "VolumeSource": [
        ("hostPath", 1, MSG, False, "HostPathVolumeSource"),
        ("emptyDir", 2, MSG, False, "EmptyDirVolumeSource"),
    ],
    "Volume": [("name", 1, STR, False, None), ("volumeSource", 2, MSG, False, "VolumeSource")],
    "Toleration": [
        ("key", 1, STR, False, None),
        ("operator", 2, STR, False, None),
        ("value", 3, STR, False, None),
        ("effect", 4, STR, False, None),
        ("tolerationSeconds", 5, I64, False, None),
    ],
    "PodSpec": [
        ("volumes", 1, MSG, True, "Volume"),
        ("containers", 2, MSG, True, "Container"),
        ("restartPolicy", 3, STR, False, None),
        ("terminationGracePeriodSeconds", 4, I64, False, None),
        ("dnsPolicy", 6, STR, False, None),
        ("nodeSelector", 7, MSG, True, "PodSpec.NodeSelectorEntry"),
        ("serviceAccountName", 8, STR, False, None),
        ("nodeName", 10, STR, False, None),
        ("hostNetwork", 11, BOOL, False, None),
        ("hostPID", 12, BOOL, False, None),
        ("hostIPC", 13, BOOL, False, None),
        ("schedulerName", 19, STR, False, None),
        ("tolerations", 22, MSG, True, "Toleration"),
    ],
    "Pod": [("metadata", 1, MSG, False, "ObjectMeta"), ("spec", 2, MSG, False, "PodSpec")],
    "PodTemplateSpec": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("spec", 2, MSG, False, "PodSpec"),
    ],
    "RollingUpdateDeployment": [
        ("maxUnavailable", 1, MSG, False, "IntOrString"),
        ("maxSurge", 2, MSG, False, "IntOrString"),
    ],
    "DeploymentStrategy": [
        ("type", 1, STR, False, None),
        ("rollingUpdate", 2, MSG, False, "RollingUpdateDeployment"),
    ],
    "DeploymentSpec": [
        ("replicas", 1, I32, False, None),
        ("selector", 2, MSG, False, "LabelSelector"),
        ("template", 3, MSG, False, "PodTemplateSpec"),
        ("strategy", 4, MSG, False, "DeploymentStrategy"),
        ("minReadySeconds", 5, I32, False, None),
        ("revisionHistoryLimit", 6, I32, False, None),
        ("progressDeadlineSeconds", 9, I32, False, None),
    ],
    "Deployment": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("spec", 2, MSG, False, "DeploymentSpec"),
    ],
    "ServicePort": [
        ("name", 1, STR, False, None),
        ("protocol", 2, STR, False, None),
        ("port", 3, I32, False, None),
        ("targetPort", 4, MSG, False, "IntOrString"),
        ("nodePort", 5, I32, False, None),
        ("appProtocol", 6, STR, False, None),
    ],
    "ServiceSpec": [
        ("ports", 1, MSG, True, "ServicePort"),
        ("selector", 2, MSG, True, "ServiceSpec.SelectorEntry"),
        ("clusterIP", 3, STR, False, None),
        ("type", 4, STR, False, None),
        ("externalIPs", 5, STR, True, None),
        ("sessionAffinity", 7, STR, False, None),
        ("externalName", 10, STR, False, None),
    ],
    "Service": [("metadata", 1, MSG, False, "ObjectMeta"), ("spec", 2, MSG, False, "ServiceSpec")],
    "ConfigMap": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("data", 2, MSG, True, "ConfigMap.DataEntry"),
        ("binaryData", 3, MSG, True, "ConfigMap.BinaryDataEntry"),
        ("immutable", 4, BOOL, False, None),
    ],
    "Secret": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("data", 2, MSG, True, "Secret.DataEntry"),
        ("type", 3, STR, False, None),
        ("stringData", 4, MSG, True, "Secret.StringDataEntry"),
        ("immutable", 5, BOOL, False, None),
    ],
    "ObjectReference": [
        ("kind", 1, STR, False, None),
        ("namespace", 2, STR, False, None),
        ("name", 3, STR, False, None),
        ("uid", 4, STR, False, None),
        ("apiVersion", 5, STR, False, None),
        ("resourceVersion", 6, STR, False, None),
        ("fieldPath", 7, STR, False, None),
    ],
    "LocalObjectReference": [("name", 1, STR, False, None)],
    "ServiceAccount": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("secrets", 2, MSG, True, "ObjectReference"),
        ("imagePullSecrets", 3, MSG, True, "LocalObjectReference"),
        ("automountServiceAccountToken", 4, BOOL, False, None),
    ],
    "NamespaceSpec": [("finalizers", 1, STR, True, None)],
    "Namespace": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("spec", 2, MSG, False, "NamespaceSpec"),
    ],
    # batch/v1 Job and CronJob (``kubectl create job|cronjob``, ``create job --from``)
    "JobSpec": [
        ("parallelism", 1, I32, False, None),
        ("completions", 2, I32, False, None),
        ("activeDeadlineSeconds", 3, I64, False, None),
        ("selector", 4, MSG, False, "LabelSelector"),
        ("manualSelector", 5, BOOL, False, None),
        ("template", 6, MSG, False, "PodTemplateSpec"),
        ("backoffLimit", 7, I32, False, None),
        ("ttlSecondsAfterFinished", 8, I32, False, None),
        ("completionMode", 9, STR, False, None),
        ("suspend", 10, BOOL, False, None),
    ],
    "Job": [("metadata", 1, MSG, False, "ObjectMeta"), ("spec", 2, MSG, False, "JobSpec")],
    "JobTemplateSpec": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("spec", 2, MSG, False, "JobSpec"),
    ],
    "CronJobSpec": [
        ("schedule", 1, STR, False, None),
        ("startingDeadlineSeconds", 2, I64, False, None),
        ("concurrencyPolicy", 3, STR, False, None),
        ("suspend", 4, BOOL, False, None),
        ("jobTemplate", 5, MSG, False, "JobTemplateSpec"),
        ("successfulJobsHistoryLimit", 6, I32, False, None),
        ("failedJobsHistoryLimit", 7, I32, False, None),
        ("timeZone", 8, STR, False, None),
    ],
    "CronJob": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("spec", 2, MSG, False, "CronJobSpec"),
    ],
    # networking.k8s.io/v1 Ingress (``kubectl create ingress``); a rule's ``http`` sits in
    # an embedded IngressRuleValue message, flattened on decode as JSON has it
    "TypedLocalObjectReference": [
        ("apiGroup", 1, STR, False, None),
        ("kind", 2, STR, False, None),
        ("name", 3, STR, False, None),
    ],
    "ServiceBackendPort": [("name", 1, STR, False, None), ("number", 2, I32, False, None)],
    "IngressServiceBackend": [
        ("name", 1, STR, False, None),
        ("port", 2, MSG, False, "ServiceBackendPort"),
    ],
    "IngressBackend": [
        ("resource", 3, MSG, False, "TypedLocalObjectReference"),
        ("service", 4, MSG, False, "IngressServiceBackend"),
    ],
    "IngressTLS": [("hosts", 1, STR, True, None), ("secretName", 2, STR, False, None)],
    "HTTPIngressPath": [
        ("path", 1, STR, False, None),
        ("backend", 2, MSG, False, "IngressBackend"),
        ("pathType", 3, STR, False, None),
    ],
    "HTTPIngressRuleValue": [("paths", 1, MSG, True, "HTTPIngressPath")],
    "IngressRuleValue": [("http", 1, MSG, False, "HTTPIngressRuleValue")],
    "IngressRule": [
        ("host", 1, STR, False, None),
        ("ingressRuleValue", 2, MSG, False, "IngressRuleValue"),
    ],
    "IngressSpec": [
        ("defaultBackend", 1, MSG, False, "IngressBackend"),
        ("tls", 2, MSG, True, "IngressTLS"),
        ("rules", 3, MSG, True, "IngressRule"),
        ("ingressClassName", 4, STR, False, None),
    ],
    "Ingress": [("metadata", 1, MSG, False, "ObjectMeta"), ("spec", 2, MSG, False, "IngressSpec")],
    # policy/v1 PodDisruptionBudget (``kubectl create poddisruptionbudget``)
    "PodDisruptionBudgetSpec": [
        ("minAvailable", 1, MSG, False, "IntOrString"),
        ("selector", 2, MSG, False, "LabelSelector"),
        ("maxUnavailable", 3, MSG, False, "IntOrString"),
        ("unhealthyPodEvictionPolicy", 4, STR, False, None),
    ],
    "PodDisruptionBudget": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("spec", 2, MSG, False, "PodDisruptionBudgetSpec"),
    ],
    # scheduling.k8s.io/v1 PriorityClass (``kubectl create priorityclass``)
    "PriorityClass": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("value", 2, I32, False, None),
        ("globalDefault", 3, BOOL, False, None),
        ("description", 4, STR, False, None),
        ("preemptionPolicy", 5, STR, False, None),
    ],
    # core/v1 ResourceQuota (``kubectl create quota``)
    "ScopedResourceSelectorRequirement": [
        ("scopeName", 1, STR, False, None),
        ("operator", 2, STR, False, None),
        ("values", 3, STR, True, None),
    ],
    "ScopeSelector": [("matchExpressions", 1, MSG, True, "ScopedResourceSelectorRequirement")],
    "ResourceQuotaSpec": [
        ("hard", 1, MSG, True, "ResourceQuotaSpec.HardEntry"),
        ("scopes", 2, STR, True, None),
        ("scopeSelector", 3, MSG, False, "ScopeSelector"),
    ],
    "ResourceQuota": [
        ("metadata", 1, MSG, False, "ObjectMeta"),
        ("spec", 2, MSG, False, "ResourceQuotaSpec"),
    ],
}
#: a map entry's value type for ``map<string, bytes>`` (base64 in JSON)
BYTES_VALUE = "bytes"
#: map fields: message -> entries (name, value message; None: string, BYTES_VALUE: bytes)
_MAPS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "ObjectMeta": (("LabelsEntry", None), ("AnnotationsEntry", None)),
    "LabelSelector": (("MatchLabelsEntry", None),),
    "ResourceRequirements": (("LimitsEntry", "Quantity"), ("RequestsEntry", "Quantity")),
    "PodSpec": (("NodeSelectorEntry", None),),
    "ServiceSpec": (("SelectorEntry", None),),
    "ConfigMap": (("DataEntry", None), ("BinaryDataEntry", BYTES_VALUE)),
    "Secret": (("DataEntry", BYTES_VALUE), ("StringDataEntry", None)),
    "ResourceQuotaSpec": (("HardEntry", "Quantity"),),
}
#: kind -> message
KINDS = {
    "Role": "Role",
    "ClusterRole": "ClusterRole",
    "RoleBinding": "RoleBinding",
    "ClusterRoleBinding": "RoleBinding",
    "SelfSubjectAccessReview": "SelfSubjectAccessReview",
    "SelfSubjectRulesReview": "SelfSubjectRulesReview",
    "Namespace": "Namespace",
    "SelfSubjectReview": "SelfSubjectReview",
    "Deployment": "Deployment",
    "Pod": "Pod",
    "Service": "Service",
    "ConfigMap": "ConfigMap",
    "Secret": "Secret",
    "ServiceAccount": "ServiceAccount",
    "Job": "Job",
    "CronJob": "CronJob",
    "Ingress": "Ingress",
    "PodDisruptionBudget": "PodDisruptionBudget",
    "PriorityClass": "PriorityClass",
    "ResourceQuota": "ResourceQuota",
}


class ProtobufError(ValueError):
    """Not a Kubernetes protobuf body, or a kind svclab does not decode."""


@functools.cache
def _classes() -> dict[str, Any]:
    fd = descriptor_pb2.FileDescriptorProto(name="svclab_k8s.proto", package=_PKG, syntax="proto2")
    for name, fields in MESSAGES.items():
        m = fd.message_type.add(name=name)
        for entry, value_msg in _MAPS.get(name, ()):
            e = m.nested_type.add(name=entry)
            e.options.map_entry = True
            e.field.add(name="key", number=1, type=STR, label=_T.LABEL_OPTIONAL)
            v = e.field.add(name="value", number=2, type=STR, label=_T.LABEL_OPTIONAL)
            if value_msg == BYTES_VALUE:
                v.type = BYTES
            elif value_msg is not None:
                v.type = MSG
                v.type_name = f".{_PKG}.{value_msg}"
        add_fields(m, _PKG, fields, json_names=True)
    return message_classes(fd, MESSAGES)


def add_fields(
    m: descriptor_pb2.DescriptorProto,
    package: str,
    fields: Iterable[tuple[str, int, int, bool, str | None]],
    *,
    json_names: bool = False,
) -> None:
    """Add ``(name, number, type, repeated, message or None)`` fields to ``m``; a message
    type is named within ``package``; ``json_names``: the JSON name is the field name."""
    for fname, number, typ, repeated, ref in fields:
        f = m.field.add(
            name=fname,
            number=number,
            type=typ,
            label=_T.LABEL_REPEATED if repeated else _T.LABEL_OPTIONAL,
        )
        if json_names:
            f.json_name = fname
        if ref is not None:
            f.type_name = f".{package}.{ref}"


def message_classes(fd: descriptor_pb2.FileDescriptorProto, names: Iterable[str]) -> dict[str, Any]:
    """The message classes named ``names`` in ``fd``'s package, from a pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {
        n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fd.package}.{n}"))
        for n in names
    }


def decode(body: bytes) -> dict[str, Any]:
    """The object of a Kubernetes protobuf body, as its JSON dict."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf envelope")
    classes = _classes()
    unknown = classes["Unknown"]()
    try:
        unknown.ParseFromString(body[len(MAGIC) :])
    except Exception as e:
        raise ProtobufError(f"malformed protobuf envelope: {e}") from None
    api_version, kind = unknown.typeMeta.apiVersion, unknown.typeMeta.kind
    msg_name = KINDS.get(kind)
    if msg_name is None:
        raise ProtobufError(f"protobuf bodies of kind {kind!r} are not supported; send JSON")
    msg = classes[msg_name]()
    try:
        msg.ParseFromString(unknown.raw)
    except Exception as e:
        raise ProtobufError(f"malformed {kind}: {e}") from None
    out: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
    out.update(_drop_empty(MessageToDict(msg, preserving_proto_field_name=True)))
    return out


_INT_OR_STRING = frozenset({"targetPort", "maxUnavailable", "maxSurge", "minAvailable"})
_QUANTITIES = frozenset({"limits", "requests", "hard"})
#: optional (pointer) fields whose zero is a value, not "unset" (and a PriorityClass's
#: ``value``, always written)
_POINTERS = frozenset({"replicas", "revisionHistoryLimit", "progressDeadlineSeconds", "value"})


def _drop_empty(v: Any, key: str = "") -> Any:
    """Kubernetes' protobuf writes unset strings as "": they mean unset. Quantities
    (``{"string": "100m"}``) and int-or-strings become their JSON values."""
    if isinstance(v, dict):
        for inline in ("ingressRuleValue", "volumeSource"):
            if inline in v:  # embedded in protobuf, inline in JSON (an IngressRule, a Volume)
                v = {k: x for k, x in v.items() if k != inline} | v[inline]
        if key in _INT_OR_STRING:
            return v.get("strVal", "") if str(v.get("type", "0")) == "1" else v.get("intVal", 0)
        if key in _QUANTITIES:
            return {k: q.get("string", "") if isinstance(q, dict) else q for k, q in v.items()}
        return {
            k: _drop_empty(x, k)
            for k, x in v.items()
            if not (x in ("", [], {}) or ((x is False or x == 0) and k not in _POINTERS))
        }
    if isinstance(v, list):
        return [_drop_empty(x, key) for x in v]
    return v
