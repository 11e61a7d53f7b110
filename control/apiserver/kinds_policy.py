"""Defaulting and validation as kube-apiserver gives them for the policy-like kinds
without a controller in svclab: policy/v1 PodDisruptionBudget, autoscaling/v2
HorizontalPodAutoscaler, scheduling.k8s.io/v1 PriorityClass, core/v1 LimitRange,
ResourceQuota and PodTemplate, coordination.k8s.io/v1 Lease, node.k8s.io/v1
RuntimeClass, certificates.k8s.io/v1 CertificateSigningRequest and the
admissionregistration.k8s.io/v1 webhook configurations. Each strategy's docstring says
what it defaults and checks.
"""

from __future__ import annotations

import base64
import binascii
from decimal import Decimal
from typing import Any

from cryptography import x509

from control.apiserver.kinds_common import (
    IMMUTABLE_MSG,
    NONNEGATIVE_MSG,
    WireStrategy,
    at,
    nonnegative,
    obj_of,
    quantity,
    validate_int_or_percent,
    validate_label_selector,
)
from control.apiserver.names import (
    check_dns1123_label,
    check_dns1123_subdomain,
    check_path_segment,
    check_qualified_name,
)
from control.apiserver.validation import Problems, validate_pod_spec
from netmodel.objects import PodSpec

# --------------------------------------------------------------------------- policy/v1


class PodDisruptionBudgetStrategy(WireStrategy):
    """minAvailable XOR maxUnavailable, each a non-negative int or a percent up to 100%;
    a valid selector; the unhealthy-pod eviction policy. Status starts at zeros."""

    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        status = obj_of(d, "status")
        for key in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
            status.setdefault(key, 0)
        return {**d, "status": status}

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = obj_of(d, "spec")
        lo, hi = spec.get("minAvailable"), spec.get("maxUnavailable")
        if lo is not None and hi is not None:
            p.invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set")
        if lo is not None:
            validate_int_or_percent("spec.minAvailable", lo, p)
        if hi is not None:
            validate_int_or_percent("spec.maxUnavailable", hi, p)
        validate_label_selector(spec.get("selector"), "spec.selector", p)
        policy = spec.get("unhealthyPodEvictionPolicy")
        if policy is not None:
            p.enum("spec.unhealthyPodEvictionPolicy", policy, ("AlwaysAllow", "IfHealthyBudget"))


# --------------------------------------------------------------------------- autoscaling/v2

METRIC_TYPES = ("ContainerResource", "External", "Object", "Pods", "Resource")


class HorizontalPodAutoscalerStrategy(WireStrategy):
    """minReplicas defaults to 1 and metrics to 80% average CPU utilization; the
    scale target names a kind and a name; 1 <= minReplicas <= maxReplicas. Status starts
    as ``{desiredReplicas: 0}``."""

    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        spec = obj_of(d, "spec")
        spec.setdefault("minReplicas", 1)
        if not spec.get("metrics"):
            spec["metrics"] = [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ]
        status = obj_of(d, "status")
        status.setdefault("desiredReplicas", 0)
        return {**d, "spec": spec, "status": status}

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = obj_of(d, "spec")
        lo, hi = spec.get("minReplicas"), spec.get("maxReplicas") or 0
        if lo is not None and lo < 1:
            p.invalid("spec.minReplicas", lo, "must be greater than or equal to 1")
        if hi < 1:
            p.invalid("spec.maxReplicas", hi, "must be greater than 0")
        if lo is not None and hi < lo:
            p.invalid("spec.maxReplicas", hi, "must be greater than or equal to `minReplicas`")
        ref = obj_of(spec, "scaleTargetRef")
        for key in ("kind", "name"):
            value = ref.get(key) or ""
            if not value:
                p.required(f"spec.scaleTargetRef.{key}")
            p.check(f"spec.scaleTargetRef.{key}", value, check_path_segment)
        for i, m in enumerate(spec.get("metrics") or []):
            if not m.get("type"):
                p.required(f"spec.metrics[{i}].type", "must specify a metric source type")
            p.enum(f"spec.metrics[{i}].type", m["type"], METRIC_TYPES)


# --------------------------------------------------------------------------- scheduling.k8s.io/v1

HIGHEST_USER_PRIORITY = 1_000_000_000
SYSTEM_PRIORITY_CLASSES = {
    "system-node-critical": 2_000_001_000,
    "system-cluster-critical": 2_000_000_000,
}
PREEMPTION_POLICIES = ("Never", "PreemptLowerPriority")


class PriorityClassStrategy(WireStrategy):
    """``value`` is always written (0 if unset) and preemptionPolicy defaults to
    PreemptLowerPriority; user classes stay at or below 1e9 and out of the ``system-``
    prefix; value and preemptionPolicy are immutable."""

    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        out = dict(d)
        out.setdefault("value", 0)
        out.setdefault("preemptionPolicy", "PreemptLowerPriority")
        return out

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        name = str(at(d, "metadata", "name") or "")
        value = d.get("value", 0)
        if name.startswith("system-"):
            why = _system_class_problem(name, value, bool(d.get("globalDefault")))
            if why:
                p.forbidden(
                    "metadata.name",
                    "priority class names with 'system-' prefix are reserved for system use "
                    f"only. error: {why}",
                )
        elif value > HIGHEST_USER_PRIORITY:
            p.forbidden(
                "value",
                f"maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}",
            )
        policy = d.get("preemptionPolicy")
        if policy is not None:
            p.enum("preemptionPolicy", policy, PREEMPTION_POLICIES)

    def validate_update_wire(self, new: dict[str, Any], old: dict[str, Any], p: Problems) -> None:
        if new.get("value", 0) != old.get("value", 0):
            p.forbidden("value", "may not be changed in an update.")
        if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
            p.invalid("preemptionPolicy", new.get("preemptionPolicy") or "", IMMUTABLE_MSG)


def _system_class_problem(name: str, value: Any, global_default: bool) -> str | None:
    want = SYSTEM_PRIORITY_CLASSES.get(name)
    if want is None:
        return f"{name} is not a known system priority class"
    if value != want:
        return f"value of {name} PriorityClass must be {want}"
    if global_default:
        return f"{name} cannot be marked as global default"
    return None


# --------------------------------------------------------------------------- core/v1

LIMIT_TYPES = ("Container", "Pod", "PersistentVolumeClaim")
QUOTA_SCOPES = (
    "BestEffort",
    "CrossNamespacePodAffinity",
    "NotBestEffort",
    "NotTerminating",
    "PriorityClass",
    "Terminating",
    "VolumeAttributesClass",
)


class LimitRangeStrategy(WireStrategy):
    """A Container limit's default is its max and its defaultRequest its default, else
    its min (SetDefaults_LimitRangeItem); every quantity is non-negative and no min
    exceeds its max."""

    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        spec = obj_of(d, "spec")
        limits = []
        for item in spec.get("limits") or []:
            if isinstance(item, dict) and item.get("type") == "Container":
                item = dict(item)
                default = {**(item.get("max") or {}), **(item.get("default") or {})}
                request = {
                    **(item.get("min") or {}),
                    **default,
                    **(item.get("defaultRequest") or {}),
                }
                if default:
                    item["default"] = default
                if request:
                    item["defaultRequest"] = request
            limits.append(item)
        if "limits" in spec:
            spec["limits"] = limits
        return {**d, "spec": spec}

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        for i, item in enumerate(at(d, "spec", "limits") or []):
            f = f"spec.limits[{i}]"
            values: dict[str, dict[str, Decimal]] = {}
            for bag in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
                values[bag] = {}
                for k, v in (item.get(bag) or {}).items():
                    q = quantity(f"{f}.{bag}[{k}]", v, p)
                    if q < 0:
                        p.invalid(f"{f}.{bag}[{k}]", v, NONNEGATIVE_MSG)
                    values[bag][k] = q
            for k, lo in values["min"].items():
                hi = values["max"].get(k)
                if hi is not None and lo > hi:
                    p.invalid(
                        f"{f}.min[{k}]",
                        item["min"][k],
                        f"min value {item['min'][k]} is greater than max value {item['max'][k]}",
                    )


class ResourceQuotaStrategy(WireStrategy):
    """Hard limits are non-negative quantities, scopes known ones; status starts empty."""

    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        return d if "status" in d else {**d, "status": {}}

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = obj_of(d, "spec")
        for k, v in (spec.get("hard") or {}).items():
            p.check("spec.hard", k, check_qualified_name)
            if quantity(f"spec.hard[{k}]", v, p) < 0:
                p.invalid(f"spec.hard[{k}]", v, NONNEGATIVE_MSG)
        for i, scope in enumerate(spec.get("scopes") or []):
            p.enum(f"spec.scopes[{i}]", scope, QUOTA_SCOPES)


class PodTemplateStrategy(WireStrategy):
    """The template's pod spec passes a Pod's spec checks (``template.spec``)."""

    def __init__(self) -> None:
        super().__init__(counts_generation=True)

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = at(d, "template", "spec")
        if spec is None:
            p.required("template.spec.containers")
        validate_pod_spec(PodSpec.model_validate(spec), "template.spec", p)


# --------------------------------------------------------------------------- coordination, node


class LeaseStrategy(WireStrategy):
    """leaseDurationSeconds > 0 and leaseTransitions >= 0 when set. Its writes are not
    recorded as Events: a kubelet renews its node's Lease every 10 s and a leader
    renews its lock every few seconds, and neither leaves an Event in a cluster (the
    Events around a heartbeat are the node's condition changes)."""

    records_events = False

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = obj_of(d, "spec")
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and duration <= 0:
            p.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")
        nonnegative("spec.leaseTransitions", spec.get("leaseTransitions"), p)


class RuntimeClassStrategy(WireStrategy):
    """``handler`` is a DNS-1123 label and immutable."""

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        p.check("handler", str(d.get("handler") or ""), check_dns1123_label)

    def validate_update_wire(self, new: dict[str, Any], old: dict[str, Any], p: Problems) -> None:
        if new.get("handler") != old.get("handler"):
            p.invalid("handler", new.get("handler") or "", IMMUTABLE_MSG)


# --------------------------------------------------------------------------- certificates.k8s.io/v1

KEY_USAGES = (
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
)


class CertificateSigningRequestStrategy(WireStrategy):
    """``spec.request`` is a signed PEM CERTIFICATE REQUEST; signerName is a qualified
    name; usages are given and known; expirationSeconds is at least 600."""

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = obj_of(d, "spec")
        why = _csr_problem(spec.get("request"))
        if why:
            p.invalid("spec.request", "<value omitted>", why)
        usages = spec.get("usages") or []
        if not usages:
            p.required("spec.usages")
        for i, u in enumerate(usages):
            p.enum(f"spec.usages[{i}]", u, KEY_USAGES)
        signer = spec.get("signerName") or ""
        if not signer:
            p.required("spec.signerName")
        p.check("spec.signerName", signer, check_qualified_name)
        secs = spec.get("expirationSeconds")
        if secs is not None and secs < 600:
            p.invalid(
                "spec.expirationSeconds",
                secs,
                "may not specify a duration less than 600 seconds (10 minutes)",
            )


def _csr_problem(request: Any) -> str | None:
    try:
        pem = base64.b64decode(str(request or ""), validate=True)
    except (binascii.Error, ValueError):
        return "PEM block type must be CERTIFICATE REQUEST"
    if b"-----BEGIN CERTIFICATE REQUEST-----" not in pem:
        return "PEM block type must be CERTIFICATE REQUEST"
    try:
        csr = x509.load_pem_x509_csr(pem)
    except ValueError as e:
        return f"x509: {e}"
    return None if csr.is_signature_valid else "x509: ECDSA verification failure"


# --------------------------------------------------------------------------- admissionregistration.k8s.io/v1

FAILURE_POLICIES = ("Fail", "Ignore")
MATCH_POLICIES = ("Equivalent", "Exact")
SIDE_EFFECTS = ("None", "NoneOnDryRun")
REINVOCATION = ("IfNeeded", "Never")


class WebhookConfigurationStrategy(WireStrategy):
    """Each webhook gets admissionregistration/v1's defaults (failurePolicy Fail,
    matchPolicy Equivalent, empty namespace and object selectors, timeoutSeconds 10,
    a service port 443, rules scoped ``*``; reinvocationPolicy Never for mutating ones);
    names are qualified, unique, with at least three segments; a client config has
    exactly one of url and service; sideEffects and admissionReviewVersions are given."""

    def __init__(self, *, mutating: bool) -> None:
        super().__init__(counts_generation=True)
        self.mutating = mutating

    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        hooks = []
        for w in d.get("webhooks") or []:
            if not isinstance(w, dict):
                hooks.append(w)
                continue
            w = {
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "namespaceSelector": {},
                "objectSelector": {},
                "timeoutSeconds": 10,
                **w,
            }
            if self.mutating:
                w.setdefault("reinvocationPolicy", "Never")
            svc = at(w, "clientConfig", "service")
            if isinstance(svc, dict) and "port" not in svc:
                w["clientConfig"] = {**w["clientConfig"], "service": {**svc, "port": 443}}
            if isinstance(w.get("rules"), list):
                w["rules"] = [{"scope": "*", **r} if isinstance(r, dict) else r for r in w["rules"]]
            hooks.append(w)
        return {**d, "webhooks": hooks} if "webhooks" in d else d

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        seen: set[str] = set()
        for i, w in enumerate(d.get("webhooks") or []):
            f = f"webhooks[{i}]"
            name = w.get("name") or ""
            if name in seen:
                p.duplicate(f"{f}.name", name)
            seen.add(name)
            p.check(f"{f}.name", name, check_qualified_name)
            if len(name.split(".")) < 3:
                p.invalid(
                    f"{f}.name",
                    name,
                    "should be a domain with at least three segments separated by dots",
                )
            cc = w.get("clientConfig") or {}
            if ("url" in cc) == ("service" in cc):
                p.required(f"{f}.clientConfig", "exactly one of url or service is required")
            svc = cc.get("service")
            if isinstance(svc, dict):
                p.check(
                    f"{f}.clientConfig.service.name", svc.get("name") or "", check_dns1123_subdomain
                )
            p.enum(f"{f}.failurePolicy", w.get("failurePolicy"), FAILURE_POLICIES)
            p.enum(f"{f}.matchPolicy", w.get("matchPolicy"), MATCH_POLICIES)
            if w.get("sideEffects") is None:
                p.unsupported(f"{f}.sideEffects", "", SIDE_EFFECTS)
            p.enum(f"{f}.sideEffects", w["sideEffects"], SIDE_EFFECTS)
            if not w.get("admissionReviewVersions"):
                p.required(f"{f}.admissionReviewVersions", "must specify one of v1, v1beta1")
            timeout = w.get("timeoutSeconds")
            if timeout is not None and not 1 <= timeout <= 30:
                p.invalid(
                    f"{f}.timeoutSeconds",
                    timeout,
                    "the timeout value must be between 1 and 30 seconds",
                )
            validate_label_selector(w.get("namespaceSelector"), f"{f}.namespaceSelector", p)
            validate_label_selector(w.get("objectSelector"), f"{f}.objectSelector", p)
            if self.mutating:
                p.enum(f"{f}.reinvocationPolicy", w.get("reinvocationPolicy"), REINVOCATION)
