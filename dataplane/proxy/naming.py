"""Chain, set and list names exactly as upstream kube-proxy computes them.

iptables mode (also the ``-m recent`` list names)::

    hash16(s) = base32_std(sha256(s))[:16]
    KUBE-SVC-/KUBE-SVL-/KUBE-EXT-/KUBE-FW-  + hash16(<spn> + <proto>)
    KUBE-SEP-                              + hash16(<spn> + <proto> + <ip:port>)

``<spn>`` is ``ns/svc:port`` (``ns/svc`` for an unnamed port), ``<proto>`` the lower-case
protocol and ``<ip:port>`` the endpoint (``[ip]:port`` for IPv6); ``+`` concatenates with
no separator.

nftables mode::

    hash_and_truncate(n) = base32_std(sha256(n))[:8] + "-" + n
                           (a result longer than 240 characters is cut to 237 + "...")
    service base  = hash_and_truncate("<ns>/<svc>/<proto>/<portName>")
    endpoint base = hash_and_truncate("<ns>/<svc>/<proto>/<portName>__<ip>/<port>")
                    (IPv6: every ':' of the IP replaced by '.')

All functions are pure. The service hashes are memoised (a cluster of 10,000 Services
asks for the same names on every sync); an endpoint's name is computed once, with the
endpoint's :class:`~dataplane.proxy.model.EndpointInfo`, and kept there.
"""

from __future__ import annotations

import functools
import hashlib

#: Prefixes of the per-service chains kube-proxy owns (and deletes when stale).
SERVICE_CHAIN_PREFIXES: tuple[str, ...] = (
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-SEP-",
)

#: knftables' longest object name (256) minus room for a prefix, as upstream uses it.
NFT_NAME_MAX = 240


_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
#: every pair of base32 digits, indexed by the 10 bits they encode
_B32_PAIRS = tuple(a + b for a in _B32 for b in _B32)
_sha256 = hashlib.sha256
_from_bytes = int.from_bytes


@functools.lru_cache(maxsize=1 << 18)
def hash16(text: str) -> str:
    """First 16 characters of the standard base32 encoding of SHA-256(``text``).

    16 base32 characters are exactly the first 10 digest bytes, so only those are
    encoded (the stdlib encoder is pure Python and dominated render time), two digits
    (10 bits) per table lookup.
    """
    n = _from_bytes(_sha256(text.encode()).digest()[:10], "big")
    t = _B32_PAIRS
    return (
        t[n >> 70]
        + t[n >> 60 & 1023]
        + t[n >> 50 & 1023]
        + t[n >> 40 & 1023]
        + t[n >> 30 & 1023]
        + t[n >> 20 & 1023]
        + t[n >> 10 & 1023]
        + t[n & 1023]
    )


def _hash8(text: str) -> str:
    n = _from_bytes(_sha256(text.encode()).digest()[:5], "big")
    t = _B32_PAIRS
    return t[n >> 30] + t[n >> 20 & 1023] + t[n >> 10 & 1023] + t[n & 1023]


def service_hash(port_name: str, protocol: str) -> str:
    """The 16-character hash shared by a service port's SVC/SVL/EXT/FW chains.

    ``port_name`` is the ServicePortName string, ``protocol`` any case (lower-cased here).
    """
    return hash16(port_name + protocol.lower())


def svc_chain(port_name: str, protocol: str) -> str:
    """``KUBE-SVC-…``: the cluster-policy chain."""
    return "KUBE-SVC-" + service_hash(port_name, protocol)


def svl_chain(port_name: str, protocol: str) -> str:
    """``KUBE-SVL-…``: the local-policy chain."""
    return "KUBE-SVL-" + service_hash(port_name, protocol)


def ext_chain(port_name: str, protocol: str) -> str:
    """``KUBE-EXT-…``: traffic to external destinations (NodePort, externalIP, LB IP)."""
    return "KUBE-EXT-" + service_hash(port_name, protocol)


def fw_chain(port_name: str, protocol: str) -> str:
    """``KUBE-FW-…``: the loadBalancerSourceRanges firewall chain."""
    return "KUBE-FW-" + service_hash(port_name, protocol)


def sep_chain(port_name: str, protocol: str, endpoint: str) -> str:
    """``KUBE-SEP-…`` for ``endpoint`` (``ip:port`` / ``[ip]:port``); also the recent list.

    :func:`hash16` written out and not memoised: each endpoint's name is asked for once,
    when its :class:`~dataplane.proxy.model.EndpointInfo` is made (a 50,000-entry cache
    costs more than the hashing; SHA-256 runs in C, the base32 digits are two per table
    lookup).
    """
    # the first 10 digest bytes (80 bits): the whole digest's integer shifted
    n = _from_bytes(_sha256((port_name + protocol.lower() + endpoint).encode()).digest(), "big")
    n >>= 176
    t = _B32_PAIRS
    # one f-string: a single allocation where eight + would make eight strings
    return (
        f"KUBE-SEP-{t[n >> 70]}{t[n >> 60 & 1023]}{t[n >> 50 & 1023]}"
        f"{t[n >> 40 & 1023]}{t[n >> 30 & 1023]}{t[n >> 20 & 1023]}"
        f"{t[n >> 10 & 1023]}{t[n & 1023]}"
    )


def is_service_chain(name: str) -> bool:
    """Whether ``name`` is a per-service iptables chain (subject to stale deletion)."""
    return name.startswith(SERVICE_CHAIN_PREFIXES)


# --------------------------------------------------------------------------- nftables


@functools.lru_cache(maxsize=1 << 18)
def hash_and_truncate(name: str) -> str:
    """``<8-char hash>-<name>``; a result over 240 characters is cut to 237 plus ``...``."""
    out = f"{_hash8(name)}-{name}"
    if len(out) > NFT_NAME_MAX:
        out = out[: NFT_NAME_MAX - 3] + "..."
    return out


def nft_service_base(namespace: str, name: str, protocol: str, port_name: str) -> str:
    """Base of a service port's nftables chain names (``ns/svc/tcp/p80`` hashed)."""
    return hash_and_truncate(f"{namespace}/{name}/{protocol.lower()}/{port_name}")


def nft_endpoint_base(
    namespace: str, name: str, protocol: str, port_name: str, ip: str, port: int
) -> str:
    """Base of an endpoint's nftables chain/set names (``…/p80__10.0.0.1/80`` hashed)."""
    return hash_and_truncate(
        f"{namespace}/{name}/{protocol.lower()}/{port_name}__{ip.replace(':', '.')}/{port}"
    )
