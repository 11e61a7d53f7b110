"""IP and CIDR helpers over :mod:`ipaddress` (values only, no I/O).

Two parsers on purpose:

* :func:`parse_ip` / :func:`parse_cidr` are strict (the apiserver's validation).
* :func:`parse_ip_sloppy` / :func:`parse_cidr_sloppy` accept leading zeros in IPv4 octets
  and normalise them (``172.30.0.041`` -> ``172.30.0.41``), as kube-proxy's
  ``ParseIPSloppy`` does; they return ``None`` instead of raising.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network


def parse_ip(text: str) -> IPAddress:
    """Strict IP parse; raises ValueError."""
    return ipaddress.ip_address(text.strip())


def parse_cidr(text: str, *, strict: bool = True) -> IPNetwork:
    """Strict CIDR parse; with ``strict`` host bits must be zero. Raises ValueError.

    Memoised: the networks are immutable values, and the same few CIDRs (the Cluster's
    ranges) are read once per admitted object (a 10,000-Service apply parsed the
    serviceCIDR 20,000 times)."""
    return _parse_cidr(text, strict)


@functools.lru_cache(maxsize=4096)
def _parse_cidr(text: str, strict: bool) -> IPNetwork:
    text = text.strip()
    if "/" not in text:
        raise ValueError(f"{text!r} is not a CIDR (missing /prefix)")
    return ipaddress.ip_network(text, strict=strict)


def _unzero_v4(text: str) -> str:
    parts = text.split(".")
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        return text
    return ".".join(str(int(p)) for p in parts)


def parse_ip_legacy(text: str) -> IPAddress:
    """An IP as kube-apiserver reads its legacy IP fields (Service clusterIPs,
    externalIPs, EndpointSlice addresses, ...): strict, except that IPv4 octets may carry
    leading zeros (read as decimal, as Go's ParseIPSloppy does). Raises ValueError."""
    text = text.strip()
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        if ":" in text or _unzero_v4(text) == text:
            raise
        return ipaddress.ip_address(_unzero_v4(text))


def parse_cidr_legacy(text: str) -> IPNetwork:
    """A CIDR as kube-apiserver reads legacy CIDR fields (loadBalancerSourceRanges):
    :func:`parse_cidr` with ``strict=False``, IPv4 octets may carry leading zeros."""
    text = text.strip()
    if "/" not in text:
        raise ValueError(f"{text!r} is not a CIDR (missing /prefix)")
    addr, _, prefix = text.partition("/")
    return ipaddress.ip_network(f"{parse_ip_legacy(addr)}/{prefix}", strict=False)


def leading_zero_warning(field: str, text: str, *, cidr: bool = False) -> str | None:
    """kube-apiserver's warning for an accepted IP (or CIDR) written with leading zeros
    in an IPv4 octet (Go's net/netip refuses them); None for a canonical value."""
    addr = text.strip().partition("/")[0] if cidr else text.strip()
    if ":" in addr or _unzero_v4(addr) == addr:
        return None
    why = f'ParseAddr("{addr}"): IPv4 field has octet with leading zero'
    if cidr:
        return (
            f"{field}: IP prefix was accepted, but will be invalid in a future Kubernetes "
            f'release: netip.ParsePrefix("{text.strip()}"): {why}'
        )
    return (
        f"{field}: IP address was accepted, but will be invalid in a future Kubernetes "
        f"release: {why}"
    )


def parse_ip_sloppy(text: str) -> IPAddress | None:
    """kube-proxy's ParseIPSloppy: leading zeros allowed; None when unparsable."""
    text = text.strip()
    try:
        return ipaddress.ip_address(_unzero_v4(text) if ":" not in text else text)
    except ValueError:
        return None


def parse_cidr_sloppy(text: str) -> IPNetwork | None:
    """kube-proxy's ParseCIDRSloppy: like ParseIPSloppy, host bits masked; None when bad."""
    text = text.strip()
    if "/" not in text:
        return None
    addr, _, prefix = text.partition("/")
    if ":" not in addr:
        addr = _unzero_v4(addr)
    if not prefix.isdigit():
        return None
    try:
        return ipaddress.ip_network(f"{addr}/{int(prefix)}", strict=False)
    except ValueError:
        return None


def nth_address(network: IPNetwork, n: int) -> IPAddress:
    """The n-th address of a network (0 is the network address); IndexError past the end."""
    if n < 0 or n >= network.num_addresses:
        raise IndexError(f"{network} has no address number {n}")
    return network.network_address + n


def subnets(network: IPNetwork, prefixlen: int) -> Iterator[IPNetwork]:
    """The subnets of ``network`` with ``prefixlen`` bits, in order."""
    return network.subnets(new_prefix=prefixlen)


def join_host_port(ip: str | IPAddress, port: int) -> str:
    """``ip:port``, or ``[ip]:port`` for IPv6 (Go's net.JoinHostPort)."""
    text = str(ip)
    return f"[{text}]:{port}" if ":" in text else f"{text}:{port}"


def split_host_port(text: str) -> tuple[str, int]:
    """Inverse of :func:`join_host_port`; raises ValueError."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if not rest.startswith(":"):
            raise ValueError(f"{text!r} is not [ip]:port")
        return host, int(rest[1:])
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not ip:port")
    return host, int(port)


def overlaps(a: IPNetwork, b: IPNetwork) -> bool:
    """Whether two networks of the same family share an address."""
    return a.version == b.version and a.overlaps(b)
