"""networking.k8s.io/v1 NetworkPolicy, Ingress and IngressClass: kube-apiserver's
defaulting and validation (pkg/apis/networking: defaults and validation), on the wire
form. NetworkPolicies are stored and validated here; enforcing them is another issue's.

* NetworkPolicy: a port's protocol defaults to TCP; ``policyTypes`` defaults to
  ``[Ingress]``, plus ``Egress`` when the policy has egress rules; ``podSelector``
  is always present (``{}``). Ports are numbers in 1..65535 or IANA names; ``endPort``
  needs a numeric ``port`` no greater than it; a peer names at least one of podSelector,
  namespaceSelector and ipBlock, and an ipBlock stands alone; ``ipBlock.cidr`` is a CIDR
  and each ``except`` a strict subset of it; at most two policyTypes, Ingress or Egress.
* Ingress: ``defaultBackend`` or ``rules``; rule hosts are DNS names (a leading ``*.``
  wildcard allowed), never IP addresses; every HTTP path has a ``pathType`` (Exact and
  Prefix paths are absolute and clean); a backend is a service (a DNS-1035 name and a
  port name or number, not both) or a resource, not both; TLS hosts likewise; the
  ``kubernetes.io/ingress.class`` annotation and ``ingressClassName`` are not both set.
  Its status is ``{loadBalancer: {}}`` until a controller fills it.
* IngressClass: ``spec.controller`` is a domain-prefixed path of at most 250
  characters, immutable; ``parameters`` names a kind and a name.
"""

from __future__ import annotations

import re
from typing import Any

from control.apiserver.kinds_common import (
    IMMUTABLE_MSG,
    WireStrategy,
    at,
    obj_of,
    parse_cidr,
    validate_dns_host,
    validate_label_selector,
    validate_port_name_or_number,
    validate_port_number,
)
from control.apiserver.names import (
    check_dns1035_label,
    check_dns1123_subdomain,
    check_path_segment,
    check_port_name,
)
from control.apiserver.validation import Problems
from netmodel.ip import parse_ip_legacy

NP_PROTOCOLS = ("TCP", "UDP", "SCTP")
POLICY_TYPES = ("Ingress", "Egress")
PATH_TYPES = ("Exact", "ImplementationSpecific", "Prefix")
_BAD_PATH_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
_BAD_PATH_SUFFIXES = ("/..", "/.")
INGRESS_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
MAX_CONTROLLER_LEN = 250
_HTTP_PATH_FMT = r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+"


# --------------------------------------------------------------------------- NetworkPolicy


class NetworkPolicyStrategy(WireStrategy):
    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        spec = obj_of(d, "spec")
        spec.setdefault("podSelector", {})
        for direction in ("ingress", "egress"):
            rules = spec.get(direction)
            if not isinstance(rules, list):
                continue
            out = []
            for rule in rules:
                if isinstance(rule, dict) and isinstance(rule.get("ports"), list):
                    ports = [
                        {**pt, "protocol": pt.get("protocol") or "TCP"}
                        if isinstance(pt, dict)
                        else pt
                        for pt in rule["ports"]
                    ]
                    rule = {**rule, "ports": ports}
                out.append(rule)
            spec[direction] = out
        if not spec.get("policyTypes"):
            spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]
        return {**d, "spec": spec}

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = obj_of(d, "spec")
        validate_label_selector(spec.get("podSelector"), "spec.podSelector", p)
        for direction, peers in (("ingress", "from"), ("egress", "to")):
            for i, rule in enumerate(spec.get(direction) or []):
                rf = f"spec.{direction}[{i}]"
                for j, port in enumerate(rule.get("ports") or []):
                    _np_port(port, f"{rf}.ports[{j}]", p)
                for j, peer in enumerate(rule.get(peers) or []):
                    _np_peer(peer, f"{rf}.{peers}[{j}]", p)
        types = spec.get("policyTypes") or []
        if len(types) > len(POLICY_TYPES):
            p.invalid("spec.policyTypes", types, "may not specify more than two policyTypes")
        for i, t in enumerate(types):
            if t not in POLICY_TYPES:
                p.unsupported(f"spec.policyTypes[{i}]", t, POLICY_TYPES)


def _np_port(port: dict[str, Any], f: str, p: Problems) -> None:
    proto = port.get("protocol")
    if proto is not None and proto not in NP_PROTOCOLS:
        p.unsupported(f"{f}.protocol", proto, NP_PROTOCOLS)
    value, end = port.get("port"), port.get("endPort")
    if value is not None:
        validate_port_name_or_number(f"{f}.port", value, p)
        if end is not None:
            if isinstance(value, str):
                p.invalid(f"{f}.endPort", end, "may not be specified when `port` is non-numeric")
            if isinstance(end, int) and end < value:
                p.invalid(f"{f}.endPort", end, "must be greater than or equal to `port`")
            validate_port_number(f"{f}.endPort", end, p)
    elif end is not None:
        p.invalid(f"{f}.endPort", end, "may not be specified when `port` is not specified")


def _np_peer(peer: dict[str, Any], f: str, p: Problems) -> None:
    n = 0
    for key in ("podSelector", "namespaceSelector"):
        if peer.get(key) is not None:
            n += 1
            validate_label_selector(peer[key], f"{f}.{key}", p)
    block = peer.get("ipBlock")
    if block is not None:
        n += 1
        _ip_block(block, f"{f}.ipBlock", p)
    if n == 0:
        p.required(f, "must specify a peer")
    if n > 1 and block is not None:
        p.forbidden(f, "may not specify both ipBlock and another peer")


def _ip_block(block: dict[str, Any], f: str, p: Problems) -> None:
    cidr_text = block.get("cidr") or ""
    if not cidr_text:
        p.required(f"{f}.cidr")
    net = parse_cidr(f"{f}.cidr", cidr_text, p)
    for i, ex in enumerate(block.get("except") or []):
        ef = f"{f}.except[{i}]"
        sub = parse_cidr(ef, ex, p)
        if (
            sub.version != net.version
            or sub.network_address not in net
            or net.prefixlen >= sub.prefixlen
        ):
            p.invalid(ef, ex, "must be a strict subset of `cidr`")


# --------------------------------------------------------------------------- Ingress


class IngressStrategy(WireStrategy):
    def default_wire(self, d: dict[str, Any]) -> dict[str, Any]:
        status = obj_of(d, "status")
        if "loadBalancer" in status:
            return d
        return {**d, "status": {**status, "loadBalancer": {}}}

    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = obj_of(d, "spec")
        rules = spec.get("rules") or []
        if not rules and spec.get("defaultBackend") is None:
            p.invalid("spec", rules, "either `defaultBackend` or `rules` must be specified")
        if spec.get("defaultBackend") is not None:
            _backend(spec["defaultBackend"], "spec.defaultBackend", p)
        for i, rule in enumerate(rules):
            rf = f"spec.rules[{i}]"
            host = rule.get("host") or ""
            if host:
                if _is_ip(host):
                    p.invalid(f"{rf}.host", host, "must be a DNS name, not an IP address")
                validate_dns_host(f"{rf}.host", host, p)
            http = rule.get("http")
            if http is not None:
                paths = http.get("paths") or []
                if not paths:
                    p.required(f"{rf}.http.paths")
                for j, path in enumerate(paths):
                    _http_path(path, f"{rf}.http.paths[{j}]", p)
        for i, tls in enumerate(spec.get("tls") or []):
            for j, host in enumerate(tls.get("hosts") or []):
                validate_dns_host(f"spec.tls[{i}].hosts[{j}]", host, p)
            secret = tls.get("secretName") or ""
            if secret:
                p.check(f"spec.tls[{i}].secretName", secret, check_dns1123_subdomain)
        cls = spec.get("ingressClassName")
        if cls is not None:
            p.check("spec.ingressClassName", cls, check_dns1123_subdomain)
        annotation = (at(d, "metadata", "annotations") or {}).get(INGRESS_CLASS_ANNOTATION)
        if annotation is not None and cls is not None:
            p.invalid(
                f"annotations.{INGRESS_CLASS_ANNOTATION}",
                annotation,
                "can not be set when the class field is also set",
            )


def _is_ip(host: str) -> bool:
    try:
        parse_ip_legacy(host)
    except ValueError:
        return False
    return True


def _http_path(path: dict[str, Any], f: str, p: Problems) -> None:
    type_ = path.get("pathType")
    if type_ is None:
        p.required(f"{f}.pathType", "pathType must be specified")
    value = path.get("path") or ""
    if type_ in ("Exact", "Prefix"):
        if not value.startswith("/"):
            p.invalid(f"{f}.path", value, "must be an absolute path")
        for seq in _BAD_PATH_SEQUENCES:
            if seq in value:
                p.invalid(f"{f}.path", value, f"must not contain '{seq}'")
        for suffix in _BAD_PATH_SUFFIXES:
            if value.endswith(suffix):
                p.invalid(f"{f}.path", value, f"cannot end with '{suffix}'")
    elif type_ == "ImplementationSpecific":
        if value and not value.startswith("/"):
            p.invalid(f"{f}.path", value, "must be an absolute path")
    else:
        p.unsupported(f"{f}.pathType", type_, PATH_TYPES)
    _backend(path.get("backend") or {}, f"{f}.backend", p)


def _backend(backend: dict[str, Any], f: str, p: Problems) -> None:
    resource, service = backend.get("resource"), backend.get("service")
    if resource is not None and service is not None:
        p.invalid(f, "", "cannot set both resource and service backends")
    if resource is not None:
        _typed_ref(resource, f"{f}.resource", p)
        return
    if service is None:
        p.invalid(f, "", "resource or service backend is required")
    name = service.get("name") or ""
    if not name:
        p.required(f"{f}.service.name")
    p.check(f"{f}.service.name", name, check_dns1035_label)
    port = service.get("port") or {}
    port_name, number = port.get("name") or "", port.get("number") or 0
    if port_name and number:
        p.invalid(f, "", "cannot set both port name & port number")
    if port_name:
        p.check(f"{f}.service.port.name", port_name, check_port_name)
    elif number:
        validate_port_number(f"{f}.service.port.number", number, p)
    else:
        p.required(f, "port name or number is required")


def _typed_ref(ref: dict[str, Any], f: str, p: Problems) -> None:
    group = ref.get("apiGroup")
    if group is not None:
        p.check(f"{f}.apiGroup", group, check_dns1123_subdomain)
    for key in ("kind", "name"):
        value = ref.get(key) or ""
        if not value:
            p.required(f"{f}.{key}", f"{key} is required")
        p.check(f"{f}.{key}", value, check_path_segment)


# --------------------------------------------------------------------------- IngressClass


class IngressClassStrategy(WireStrategy):
    def validate_wire(self, d: dict[str, Any], p: Problems) -> None:
        spec = obj_of(d, "spec")
        controller = spec.get("controller") or ""
        if len(controller) > MAX_CONTROLLER_LEN:
            p.too_long("spec.controller", MAX_CONTROLLER_LEN)
        _domain_prefixed_path("spec.controller", controller, p)
        if spec.get("parameters") is not None:
            _typed_ref(spec["parameters"], "spec.parameters", p)

    def validate_update_wire(self, new: dict[str, Any], old: dict[str, Any], p: Problems) -> None:
        was, now = at(old, "spec", "controller"), at(new, "spec", "controller")
        if was != now:
            p.invalid("spec.controller", now or "", IMMUTABLE_MSG)


def _domain_prefixed_path(f: str, value: str, p: Problems) -> None:
    """IsDomainPrefixedPath: ``<DNS subdomain>/<HTTP path>``."""
    if not value:
        p.required(f)
    host, sep, path = value.partition("/")
    if not sep or not host or not path:
        p.invalid(f, value, 'must be a domain-prefixed path (such as "acme.io/foo")')
    p.check(f, host, check_dns1123_subdomain)
    if not re.fullmatch(_HTTP_PATH_FMT, path):
        p.invalid(f, path, f"Invalid path (regex used for validation is '{_HTTP_PATH_FMT}')")
