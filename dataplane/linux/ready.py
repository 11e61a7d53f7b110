"""Is a realised cluster ready to carry traffic? Check it, heal it once, or say why not.

A realised cluster is *ready* when (1) every node's and the router's kernel state holds
what the model asks for (routes, permanent neighbours, VXLAN FDB entries, links up), and
(2) probes that cross every part of the dataplane answer: each node pings every other
node's address (the underlay), every pod of its own (``cni0``), one pod of every other
node (the overlay, or the host-gw routes and the peer's forwarding, between every pair
of nodes), and every pod of the next node in name order (so that every pod answers a
remote node too: its reply leaves through its default route and the gateway, which a
probe from its own node, answered on-link, does not use). Every part of the path is
crossed at least once, with 2N(N-1) + 2P probes instead of N(N-1+P): 5,120 instead
of 41,560 for 40 nodes of 25 pods.

:func:`wait_ready` checks both. Drift in (1) is handed to a ``reconcile`` callback once
(flannel does the same: its host-gw and VXLAN backends re-add missing routes and
neighbours), then it checks again until ``timeout``. What it finally returns says
whether a reconcile was needed and what had drifted; when the cluster never became
ready it raises :class:`NotReady` with the failing probes and the kernel state of the
namespaces involved (links, routes, every neighbour with its NUD state), so that a
failure seen only on some other machine explains itself.

The expectations (:func:`expected_state`, :func:`probes`) are pure functions of the
model; only :func:`observe` and the probes touch the kernel.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from ipaddress import IPv4Address

from dataplane.linux import inspect
from dataplane.linux.links import NsLink
from dataplane.linux.phases import Phases, maybe
from dataplane.linux.traffic import ping_many
from netmodel.errors import BackendError
from netmodel.network import ClusterNetwork, Netns

NUD_STATES = {
    0x01: "INCOMPLETE",
    0x02: "REACHABLE",
    0x04: "STALE",
    0x08: "DELAY",
    0x10: "PROBE",
    0x20: "FAILED",
    0x40: "NOARP",
    0x80: "PERMANENT",
}


_WORKERS = 8  # namespaces checked at once (iproute2 processes, ping sockets)


class NotReady(BackendError):
    """The realised cluster did not pass its readiness checks in time."""


@dataclass(frozen=True, slots=True)
class Probe:
    """An ICMP echo from logical namespace ``src`` to ``dst``; ``what`` says which part
    of the dataplane it crosses."""

    src: str
    dst: IPv4Address
    what: str


@dataclass(frozen=True, slots=True)
class Readiness:
    """What :func:`wait_ready` found: ``reconciled`` is True when drift had to be
    repaired (``drift`` lists it); ``rounds`` counts the checks made."""

    rounds: int
    reconciled: bool = False
    drift: tuple[str, ...] = field(default_factory=tuple)


def expected_state(ns: Netns) -> dict[str, tuple[str, ...]]:
    """The lines an :func:`~dataplane.linux.inspect.dump` of ``ns`` must contain, by
    section (connected routes are the kernel's own, and pods' interfaces are the CNI
    plugin's, which names the host-side veths itself: neither is listed)."""
    return {
        "routes": tuple(r.describe() for r in ns.routes if r.proto != "kernel"),
        "neighbours": tuple(f"{n.ip} {n.mac} {n.dev}" for n in ns.neighbors),
        "fdb": tuple(f"{f.mac} {f.dev} {f.dst}" for f in ns.fdb if f.dst is not None),
        "up": tuple(
            i.name
            for i in ns.interfaces
            if i.kind != "loopback" and not (i.peer and i.peer[0].startswith("pod/"))
        ),
    }


def compare(logical: str, ns: Netns, dump: inspect.NetnsDump | inspect.NetnsTables) -> list[str]:
    """The model's expectations for ``ns`` that ``dump`` lacks, one line each
    (``node/n1: route 10.244.1.0/24 via 172.18.0.3 dev eth0 missing``). Pure."""
    want = expected_state(ns)
    have = {"routes": set(dump.routes), "neighbours": set(dump.neighbours), "fdb": set(dump.fdb)}
    out = [
        f"{logical}: {section[:-1] if section != 'fdb' else 'fdb entry'} {line} missing"
        for section in ("routes", "neighbours", "fdb")
        for line in want[section]
        if line not in have[section]
    ]
    for name in want["up"]:
        up = dump.is_up(name)
        if up is None:
            out.append(f"{logical}: link {name} missing")
        elif not up:
            out.append(f"{logical}: link {name} down")
    return out


def probes(network: ClusterNetwork, guarded: Collection[str] = ()) -> list[Probe]:
    """The readiness probes of ``network`` (see the module docstring). Pure.
    ``guarded``: pod addresses a NetworkPolicy isolates for ingress; they are probed
    from their own node only (which policy always lets in), and another node's probes
    of the overlay pick an unguarded pod of that node, when it has one."""
    nodes = sorted(
        (ns for ns in network.namespaces.values() if ns.role == "node"), key=lambda n: n.name
    )
    pods = sorted(
        (ns for ns in network.namespaces.values() if ns.role == "pod"), key=lambda p: p.name
    )
    node_ip = {n.name: n.interface("eth0").addresses[0].ip for n in nodes}
    on_node: dict[str, list[Netns]] = {}
    for p in pods:
        on_node.setdefault(f"node/{p.node}", []).append(p)
    open_to_all = {
        node: [p for p in group if str(p.interface("eth0").addresses[0].ip) not in guarded]
        for node, group in on_node.items()
    }
    out: list[Probe] = []
    for i, n in enumerate(nodes):
        nxt = nodes[(i + 1) % len(nodes)].name
        for peer in nodes:
            if peer.name != n.name:
                out.append(Probe(n.name, node_ip[peer.name], f"underlay to {peer.name}"))
        for peer in nodes:
            if peer.name == n.name:
                group = on_node.get(peer.name, [])
            else:
                group = open_to_all.get(peer.name, [])
                if peer.name != nxt:
                    group = group[:1]  # one pod: the overlay between these two nodes
            for p in group:
                where = "own pod" if peer.name == n.name else f"pod on {peer.name}"
                out.append(Probe(n.name, p.interface("eth0").addresses[0].ip, f"{where} {p.pod}"))
    return out


def observe(network: ClusterNetwork, kernel: Mapping[str, str]) -> list[str]:
    """Drift between the model and the kernel for the router and every node (read with
    :func:`dataplane.linux.inspect.tables`)."""
    infra = [
        (lg, ns) for lg, ns in sorted(network.namespaces.items()) if ns.role in ("router", "node")
    ]
    with ThreadPoolExecutor(max_workers=max(1, min(_WORKERS, len(infra)))) as pool:
        found = list(pool.map(lambda item: inspect.tables(kernel[item[0]]), infra))
    return [line for (lg, ns), t in zip(infra, found, strict=True) for line in compare(lg, ns, t)]


def failed_probes(
    checks: Iterable[Probe], kernel: Mapping[str, str], *, timeout: float = 0.5
) -> list[Probe]:
    """The probes that got no echo reply within ``timeout`` (one socket per source
    namespace, all its requests sent at once)."""
    by_src: dict[str, list[Probe]] = {}
    for p in checks:
        by_src.setdefault(p.src, []).append(p)

    def answered(group: list[Probe]) -> set[str]:
        return ping_many(kernel[group[0].src], [p.dst for p in group], timeout=timeout)

    # sources in parallel (each its own socket in its own namespace): their waits for
    # replies overlap instead of adding up
    groups = list(by_src.values())
    with ThreadPoolExecutor(max_workers=max(1, min(_WORKERS, len(groups)))) as pool:
        replies = list(pool.map(answered, groups))
    return [
        p for group, ok in zip(groups, replies, strict=True) for p in group if str(p.dst) not in ok
    ]


def neighbour_lines(netns: str) -> list[str]:
    """Every IPv4 neighbour of ``netns`` with its NUD state (``ip neigh``-like)."""
    with NsLink(netns) as lk:
        names = {int(x["index"]): str(x.get_attr("IFLA_IFNAME")) for x in lk.links()}
        return sorted(
            f"{n.get_attr('NDA_DST')} dev {names.get(n['ifindex'], '?')} "
            f"lladdr {n.get_attr('NDA_LLADDR')} "
            + "|".join(v for k, v in NUD_STATES.items() if n["state"] & k)
            for n in lk.neighbours()
        )


def diagnose(namespaces: Iterable[str], kernel: Mapping[str, str]) -> str:
    """The kernel state of the given logical namespaces as text, for error messages."""
    parts: list[str] = []
    for logical in sorted(set(namespaces)):
        netns = kernel[logical]
        d = inspect.dump(netns)
        parts.append(f"--- {logical} ({netns})")
        parts += [f"  link {x}" for x in d.links]
        parts += [f"  addr {x}" for x in d.addresses]
        parts += [f"  route {x}" for x in d.routes]
        parts += [f"  neigh {x}" for x in neighbour_lines(netns)]
        parts += [f"  fdb {x}" for x in d.fdb]
    return "\n".join(parts)


def wait_ready(
    network: ClusterNetwork,
    kernel: Mapping[str, str],
    *,
    reconcile: Callable[[], object] | None = None,
    timeout: float = 5.0,
    phases: Phases | None = None,
    guarded: Collection[str] = (),
) -> Readiness:
    """Check ``network`` as realised in ``kernel`` (logical -> kernel namespace names)
    until it is ready or ``timeout`` seconds have passed; drift is reconciled once with
    ``reconcile``. Raises :class:`NotReady` naming every failing check. ``phases``: the
    time of the kernel-state checks (``ready_observe``) and of the probes
    (``ready_probes``), for benchmarks. ``guarded``: see :func:`probes`."""
    checks = probes(network, guarded)
    deadline = time.monotonic() + timeout
    rounds, reconciled = 0, False
    first_drift: tuple[str, ...] = ()
    while True:
        rounds += 1
        with maybe(phases, "ready_observe"):
            drift = observe(network, kernel)
        if drift and reconcile is not None and not reconciled:
            first_drift, reconciled = tuple(drift), True
            reconcile()
            continue
        with maybe(phases, "ready_probes"):
            failed = failed_probes(checks, kernel) if not drift else []
        if not drift and not failed:
            return Readiness(rounds=rounds, reconciled=reconciled, drift=first_drift)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    involved = {line.split(":")[0] for line in drift} | {p.src for p in failed}
    for p in failed:
        for name, ns in network.namespaces.items():
            if _owns(ns, p.dst):
                involved |= {name, f"node/{ns.node}"} if ns.role == "pod" else {name}
    lines = [*drift, *(f"{p.src}: no echo reply from {p.dst} ({p.what})" for p in failed)]
    shown = "; ".join(lines[:8]) + (f"; ... {len(lines) - 8} more" if len(lines) > 8 else "")
    raise NotReady(
        f"realised cluster not ready after {timeout:g}s ({rounds} checks"
        f"{', one reconcile' if reconciled else ''}): {shown}\n" + diagnose(involved, kernel)
    )


def _owns(ns: Netns, ip: IPv4Address) -> bool:
    """Does ``ns`` carry address ``ip``?"""
    return any(a.ip == ip for i in ns.interfaces for a in i.addresses)
