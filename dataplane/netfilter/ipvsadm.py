"""``ipvsadm-save -n`` text into IPVS virtual servers (:mod:`.ipvs`).

Like :mod:`.parse` for ``iptables-save`` and :mod:`.nft` for ``nft`` text, this turns a
tool's text form into engine state: ``IpvsState.of(parse_ipvsadm(text))``. Errors are
:class:`~netmodel.errors.InputError` naming the source, line and text.

Forwarding methods: svclab emulates masquerading (``-m``, NAT forwarding: what
kube-proxy configures). Direct routing (``-g``, also ipvsadm's default when a real
server names no method) and tunnelling (``-i``) forward the unchanged packet to the real
server's MAC or inside an IPIP tunnel; svclab does not model either, so a real server
using them raises :class:`~netmodel.errors.UnsupportedRuleError` naming the line
rather than being emulated as masquerading.
"""

from __future__ import annotations

from ipaddress import ip_address

from netmodel.errors import InputError, UnsupportedRuleError

from .ipvs import RealServer, VirtualServer


def parse_ipvsadm(text: str, *, source: str = "<ipvsadm-save>") -> list[VirtualServer]:
    """Virtual servers from ``ipvsadm-save -n`` text: ``-A -t|-u|--sctp-service ADDR:PORT
    -s SCHED [-p TIMEOUT]`` and ``-a -t|-u|--sctp-service ADDR:PORT -r ADDR:PORT [-m]
    [-w WEIGHT]`` lines (IPv6 as ``[ADDR]:PORT``)."""
    order: list[tuple[str, str]] = []
    heads: dict[tuple[str, str], tuple[str, int]] = {}
    reals: dict[tuple[str, str], list[RealServer]] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        words = raw.split()
        if not words or words[0].startswith("#"):
            continue
        where = f"{source}:{n}: {raw.strip()}"
        try:
            opts = _ipvs_options(words)
            proto, addr = opts["proto"], opts["service"]
            key = (proto, addr)
            if words[0] == "-A":
                order.append(key)
                heads[key] = (opts.get("-s", "wlc"), int(opts.get("-p", "0")))
            elif words[0] == "-a":
                if key not in heads:
                    raise ValueError("real server of an undefined virtual service")
                method = opts.get("method", "-g")
                if method != "-m":
                    raise UnsupportedRuleError(
                        f"{where}: forwarding method {method} "
                        f"({_METHODS[method]}) is not emulated; svclab emulates -m "
                        "(masquerading) only"
                    )
                ip, port = _host_port(opts["-r"])
                reals.setdefault(key, []).append(
                    RealServer(ip_address(ip), port, int(opts.get("-w", "1")))
                )
            else:
                raise ValueError(f"unknown command {words[0]}")
        except (KeyError, ValueError) as e:
            raise InputError(f"{where}: {e}") from None
    out = []
    for key in order:
        proto, addr = key
        ip, port = _host_port(addr)
        sched, persistence = heads[key]
        out.append(
            VirtualServer(
                ip_address(ip), proto, port, sched, persistence, tuple(reals.get(key, ()))
            )
        )
    return out


_IPVS_PROTOS = {
    "-t": "tcp",
    "--tcp-service": "tcp",
    "-u": "udp",
    "--udp-service": "udp",
    "--sctp-service": "sctp",
}


_METHODS = {"-m": "masquerading", "-g": "direct routing", "-i": "tunnelling"}
_METHOD_ALIASES = {"--masquerading": "-m", "--gatewaying": "-g", "--ipip": "-i"}


def _ipvs_options(words: list[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    i = 1
    while i < len(words):
        w = words[i]
        if w in _IPVS_PROTOS:
            opts["proto"] = _IPVS_PROTOS[w]
            opts["service"] = words[i + 1]
            i += 2
        elif w in ("-s", "-p", "-r", "-w"):
            opts[w] = words[i + 1]
            i += 2
        elif w in _METHODS or w in _METHOD_ALIASES:
            if "method" in opts:
                raise ValueError("more than one forwarding method")
            opts["method"] = _METHOD_ALIASES.get(w, w)
            i += 1
        else:
            raise ValueError(f"unknown option {w}")
    if "proto" not in opts:
        raise ValueError("no -t/-u/--sctp-service")
    return opts


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)
