"""ServiceCIDR and IPAddress (networking.k8s.io/v1): kube-apiserver's validation, in
its wording, for the strategy (:mod:`.strategy`) to call.

* ServiceCIDR: ``spec.cidrs`` holds one or two CIDRs (two: one of each IP family),
  each a network address in canonical form; on update a CIDR never changes, and a
  single-stack ServiceCIDR may only gain the other family's CIDR.
* IPAddress: the name is an IP address in canonical form; ``spec.parentRef`` is
  required, with ``resource`` and ``name`` (path segment names), ``group`` a DNS
  subdomain when set; the parentRef never changes.

Both read the object's wire form (they are generic objects, see
:mod:`netmodel.kinds`) and raise through
:class:`~control.apiserver.validation.Problems`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any

from netmodel.objects import KubeObject

if TYPE_CHECKING:
    from control.apiserver.validation import Problems

KINDS = ("ServiceCIDR", "IPAddress")
IMMUTABLE = "field is immutable"
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _spec(obj: KubeObject) -> dict[str, Any]:
    spec = obj.to_dict().get("spec")
    return spec if isinstance(spec, dict) else {}


def check_ip_address_name(name: str) -> str | None:
    """kube-apiserver's ValidateIPAddressName (netip.ParseAddr, then canonical form)."""
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return f'ParseAddr("{name}"): unable to parse IP'
    if str(ip) != name:
        return "must be a canonical format IP address"
    return None


def _path_segment(value: str) -> str | None:
    for bad in (".", ".."):
        if value == bad:
            return f"may not be '{bad}'"
    for bad in ("/", "%"):
        if bad in value:
            return f"may not contain '{bad}'"
    return None


def _cidr_problem(cidr: str) -> str | None:
    """netip.ParsePrefix, then the network address, then RFC 5952 canonical form."""
    addr, slash, bits = cidr.partition("/")
    if not slash:
        return f"netip.ParsePrefix(\"{cidr}\"): no '/'"
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return f'netip.ParsePrefix("{cidr}"): ParseAddr("{addr}"): unable to parse IP'
    if not bits.isdigit() or int(bits) > ip.max_prefixlen or (len(bits) > 1 and bits[0] == "0"):
        return f'netip.ParsePrefix("{cidr}"): bad bits after slash: "{bits}"'
    net = ipaddress.ip_network(f"{ip}/{bits}", strict=False)
    if net.network_address != ip:
        return "wrong CIDR format, IP doesn't match network IP address"
    if str(net) != cidr:
        return "CIDR not in RFC 5952 canonical format"
    return None


def _cidrs(obj: KubeObject) -> list[Any]:
    cidrs = _spec(obj).get("cidrs")
    return cidrs if isinstance(cidrs, list) else []


def _family(cidr: object) -> int | None:
    try:
        return ipaddress.ip_network(str(cidr), strict=False).version
    except ValueError:
        return None


def validate(obj: KubeObject, p: Problems) -> None:
    if obj.kind == "ServiceCIDR":
        _validate_service_cidr(obj, p)
    elif obj.kind == "IPAddress":
        _validate_ip_address(obj, p)


def _validate_service_cidr(obj: KubeObject, p: Problems) -> None:
    cidrs = _cidrs(obj)
    if not cidrs:
        p.required("spec.cidrs", "at least one CIDR required")
    if len(cidrs) > 2:
        p.invalid("spec.cidrs", cidrs, "may only hold up to 2 values")
    if len(cidrs) == 2 and (_family(cidrs[0]) is None or _family(cidrs[0]) == _family(cidrs[1])):
        p.invalid(
            "spec.cidrs",
            cidrs,
            "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and "
            "2001:db8::/64",
        )
    for i, cidr in enumerate(cidrs):
        p.check(f"spec.cidrs[{i}]", str(cidr), _cidr_problem)


def _validate_ip_address(obj: KubeObject, p: Problems) -> None:
    ref = _spec(obj).get("parentRef")
    if not isinstance(ref, dict):
        p.required("spec.parentRef")
    group = str(ref.get("group") or "")
    if group and len(group) > 253:
        p.invalid("spec.parentRef.group", group, "must be no more than 253 characters")
    if group and not _DNS1123_SUBDOMAIN.fullmatch(group):
        p.invalid(
            "spec.parentRef.group",
            group,
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character "
            "(e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        )
    for name, required in (("resource", True), ("name", True), ("namespace", False)):
        value = str(ref.get(name) or "")
        if not value:
            if required:
                p.required(f"spec.parentRef.{name}")
            continue
        p.check(f"spec.parentRef.{name}", value, _path_segment)


def validate_update(obj: KubeObject, old: KubeObject, p: Problems) -> None:
    if obj.kind == "IPAddress":
        new_ref, old_ref = _spec(obj).get("parentRef"), _spec(old).get("parentRef")
        if new_ref != old_ref:
            p.invalid("spec.parentRef", new_ref, IMMUTABLE)
        return
    if obj.kind != "ServiceCIDR":
        return
    new, was = _cidrs(obj), _cidrs(old)
    if len(new) == len(was):
        for i, (a, b) in enumerate(zip(new, was, strict=True)):
            if a != b:
                p.invalid(f"spec.cidrs[{i}]", a, IMMUTABLE)
    elif len(was) == 1 and len(new) == 2:
        if new[0] != was[0]:
            p.invalid("spec.cidrs[0]", new[0], IMMUTABLE)
    else:
        p.invalid("spec.cidrs", new, IMMUTABLE)
