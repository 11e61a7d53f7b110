"""DNS names as traffic destinations: ``web``, ``web.default``,
``web.default.svc.cluster.local`` (with ``:PORT``), resolved from the source pod the way
its libc does (:func:`dataplane.emulator.resolver.resolve`, through the pod's
resolv.conf), every query walked through the emulated cluster.

:func:`is_name` decides what is a name: not an IP, not ``IP:PORT``, not a logical
namespace (``pod/...``, ``node/...``, ``svc/...``, ``router``, ``ext/...``), and made of
the characters of host names.
"""

from __future__ import annotations

import re
from ipaddress import ip_address
from typing import TYPE_CHECKING, Any

from dataplane.emulator.cluster import EmulatedCluster
from netmodel.errors import InputError, SvclabError

if TYPE_CHECKING:  # (imported when a name is looked up: it loads dnspython)
    from dataplane.emulator.resolver import Resolution

_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?")
_LOGICAL = ("pod/", "node/", "svc/", "service/", "ext/")


class LookupFailed(SvclabError):
    """A destination name did not resolve (NXDOMAIN, NODATA, or no answer at all)."""

    def __init__(self, resolution: Resolution) -> None:
        self.resolution = resolution
        r = resolution
        if r.status == "no-nameserver":
            super().__init__(
                f"cannot resolve {r.name!r}: the pod's resolv.conf names no nameserver "
                "(a Cluster with `dns: false` has no cluster DNS: drop it, or give an IP)"
            )
            return
        why = r.error if r.status == "error" else r.status
        super().__init__(
            f"cannot resolve {r.name!r}: {why} ({len(r.queries)} quer"
            f"{'y' if len(r.queries) == 1 else 'ies'}: "
            + ", ".join(f"{q.qname} {q.rcode or q.error}" for q in r.queries)
            + ")"
        )


def split_name(text: str) -> tuple[str, int | None]:
    """``NAME[:PORT]`` -> (NAME, PORT or None)."""
    host, sep, port = text.rpartition(":")
    if sep and port.isdigit():
        return host, int(port)
    return text, None


def is_name(text: str, known: object = ()) -> bool:
    """Is ``text`` (``NAME`` or ``NAME:PORT``) a DNS name rather than an address or a
    logical name? ``known``: logical namespace names (``router``...)."""
    if text.startswith(_LOGICAL) or text in known:  # type: ignore[operator]
        return False
    host, _ = split_name(text)
    if host in known:  # type: ignore[operator]
        return False
    try:
        ip_address(host)
        return False
    except ValueError:
        pass
    return bool(_HOSTNAME.fullmatch(host)) and not host.replace(".", "").isdigit()


def lookup(emu: EmulatedCluster, src: str, name: str) -> Resolution:
    """Resolve ``name`` (no port) from the pod namespace ``src`` through its
    resolv.conf. Raises InputError when ``src`` has no resolv.conf (not a pod) and
    :class:`LookupFailed` when the name does not resolve."""
    conf = emu.resolv_confs.get(src)
    if conf is None:
        raise InputError(f"{src} is not a pod: only pods resolve names (give an IP)", field="DST")
    from dataplane.emulator.resolver import resolve

    res = resolve(emu, src, name, conf)
    if res.status != "ok":
        raise LookupFailed(res)
    return res


def render_lookup(res: Resolution) -> str:
    """Each query of a lookup and its walk, as text."""
    lines = []
    for i, q in enumerate(res.queries, 1):
        got = q.rcode or f"no answer ({q.error})"
        answer = ", ".join(r.split(" IN ", 1)[1] for r in q.records())
        lines.append(
            f"dns query {i}: {q.qname} {q.qtype} -> {q.server}:53/{q.proto}: {got}"
            + (f" [{answer}]" if answer else "")
        )
        lines += (
            ["  " + line for line in q.traces[-1].render_text().splitlines()] if q.traces else []
        )
    if res.status == "ok":
        lines.append(f"{res.name} resolved to {', '.join(res.addresses)} (as {res.answered_name})")
    return "\n".join(lines)


def query_lines(res: Resolution) -> str:
    """One line per query of a lookup: the name asked, the server, the answer's status."""
    return "\n".join(
        f"dns query {i}: {q.qname} {q.qtype} -> {q.server}: {q.rcode or 'no answer: ' + str(q.error)}"
        for i, q in enumerate(res.queries, 1)
    )


class NamedTrace:
    """A trace to a destination given by name: the lookup, then the trace."""

    def __init__(self, resolution: Resolution, trace: Any) -> None:
        self.resolution = resolution
        self.trace = trace

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = self.trace.to_json()
        out["dns"] = self.resolution.to_json()
        return out

    def render_text(self) -> str:
        return render_lookup(self.resolution) + "\n" + self.trace.render_text()


def destination(emu: EmulatedCluster, src: str, dst: str) -> tuple[str, Resolution | None]:
    """``dst`` (no port) as the address to send to: a name is looked up from ``src``
    (:func:`lookup`); anything else is returned as it is."""
    if not is_name(dst, emu.hosts):
        return dst, None
    res = lookup(emu, src, dst)
    return res.addresses[0], res
